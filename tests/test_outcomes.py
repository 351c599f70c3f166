"""Per-instance outcomes attached to sessions at import, filtered on, and reductions split by them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from workbench.cli import main as cli
from workbench.errors import ConfigError, FormatError
from workbench.experiments import load_experiment
from workbench.experiments.reductions import ReportOptions, reductions, report_options
from workbench.importers.outcomes import Outcome, OutcomeTable, match_outcomes, read_outcomes
from workbench.store import Store

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpora" / "mini-swe-agent-gemini3"
EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def write_csv(folder: Path, text: str, name: str = "results_summary.csv") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def trajectory(instance: str, steps: int = 2) -> dict:
    """A mini-swe-agent trajectory file's content (text actions, user observations)."""
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": f"Fix the issue of {instance}."},
    ]
    for i in range(steps):
        messages += [
            {"role": "assistant", "content": f"THOUGHT: look\n```bash\nls dir{i}\n```"},
            {"role": "user", "content": f"<returncode>0</returncode><output>file{i}.py</output>"},
        ]
    return {
        "info": {"exit_status": "Submitted", "submission": "diff"},
        "messages": messages,
        "trajectory_format": "mini-swe-agent-1",
        "instance_id": instance,
    }


def corpus(folder: Path, instances: list[str], steps: int = 2) -> Path:
    root = folder / "trajs"
    for instance in instances:
        (root / instance).mkdir(parents=True)
        (root / instance / f"{instance}.traj.json").write_text(json.dumps(trajectory(instance, steps)))
    return root


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        ("instance,resolved\na,True\n", 1, "a header naming instance_id"),
        ("instance_id,notes\na,x\n", 1, "a header naming instance_id"),
        ("instance_id,resolved,patch_applied\na,True,True\nb,maybe,True\n", 3, "a boolean"),
        ("instance_id,resolved,patch_applied\na,True\n", 2, "3 cells"),
        ("instance_id,resolved\n,True\n", 2, "a value for instance_id"),
        ("instance_id,resolved\na,True\nb,False\na,False\n", 4, "one row per instance"),
    ],
)
def test_a_bad_outcomes_file_names_the_file_the_line_and_what_was_expected(tmp_path, text, line, expected):
    path = write_csv(tmp_path, text)
    with pytest.raises(FormatError) as caught:
        read_outcomes(path)
    assert caught.value.line == line
    assert str(caught.value).startswith(f"{path}:{line}: ")
    assert expected in str(caught.value)


def test_outcomes_are_read_as_nullable_booleans(tmp_path):
    path = write_csv(tmp_path, "instance_id,resolved,patch_applied\r\na,True,true\r\nb,0,yes\r\nc,,False\r\n\r\n")
    table = read_outcomes(path)
    assert dict(table.outcomes) == {
        "a": Outcome("a", True, True),
        "b": Outcome("b", False, True),
        "c": Outcome("c", None, False),
    }


def test_matching_counts_instances_without_session_and_sessions_without_row():
    table = OutcomeTable("x.csv", {"a": Outcome("a", True), "b": Outcome("b", False)})
    match = match_outcomes(table, [("s1", "a"), ("s2", "z"), ("s3", None), ("s4", "a")])
    assert dict(match.attached) == {"s1": Outcome("a", True), "s4": Outcome("a", True)}
    assert match.instances_without_session == ("b",)
    assert match.sessions_without_outcome == ("s2", "s3")
    assert match.to_dict()["resolved"] == 2


def test_import_attaches_outcomes_that_the_sessions_filter_reads(tmp_path):
    root = corpus(tmp_path, ["proj__a-1", "proj__b-2", "proj__c-3"])
    csv = write_csv(
        tmp_path, "instance_id,resolved,patch_applied\nproj__a-1,True,True\nproj__b-2,False,True\nproj__z-9,True,True\n"
    )
    with Store(str(tmp_path / "w.duckdb")) as store:
        report = store.import_paths([root], dataset="swe", outcomes=csv)
        assert report.sessions == 3
        assert (
            len(report.outcomes.attached),
            len(report.outcomes.instances_without_session),
            len(report.outcomes.sessions_without_outcome),
        ) == (2, 1, 1)
        by_instance = {s.metadata["instance_id"]: s.id for s in store.load_sessions()}
        assert store.session_ids(where="outcome_resolved") == [by_instance["proj__a-1"]]
        assert store.session_ids(where="NOT outcome_resolved") == [by_instance["proj__b-2"]]
        assert store.session_ids(where="outcome_patch_applied IS NULL") == [by_instance["proj__c-3"]]
        assert store.load_session(by_instance["proj__a-1"]).metadata["outcome"]["resolved"] is True


def test_importing_again_attaches_outcomes_to_the_sessions_already_stored(tmp_path):
    root = corpus(tmp_path, ["proj__a-1", "proj__b-2"])
    with Store(str(tmp_path / "w.duckdb")) as store:
        store.import_paths([root], dataset="swe")
        assert store.session_ids(where="outcome_resolved IS NULL") != []
        report = store.import_paths(
            [root], dataset="swe", outcomes=write_csv(tmp_path, "instance_id,resolved\nproj__a-1,1\nproj__b-2,0\n")
        )
        assert report.sessions == 0 and report.duplicates == 2
        assert len(report.outcomes.attached) == 2
        assert len(store.session_ids(where="outcome_resolved")) == 1
        # a later table replaces the earlier outcome
        store.attach_outcomes(write_csv(tmp_path, "instance_id,resolved\nproj__a-1,0\n", "later.csv"))
        assert store.session_ids(where="outcome_resolved") == []


def test_cli_import_with_outcomes_reports_the_match_and_refuses_a_bad_file(tmp_path):
    root = corpus(tmp_path, ["proj__a-1"])
    db = str(tmp_path / "w.duckdb")
    good = write_csv(tmp_path, "instance_id,resolved,patch_applied\nproj__a-1,True,True\nproj__q-2,False,False\n")
    result = CliRunner().invoke(cli, ["--db", db, "import", str(root), "--outcomes", str(good)])
    assert result.exit_code == 0, result.output
    assert "attached to 1 session (1 resolved); 1 instance(s) in the file have no session (proj__q-2)" in result.output
    listed = CliRunner().invoke(cli, ["--db", db, "--json", "sessions", "--where", "outcome_resolved"])
    assert len(json.loads(listed.output)) == 1
    bad = write_csv(tmp_path, "instance_id,resolved\nproj__a-1,perhaps\n", "bad.csv")
    refused = CliRunner().invoke(
        cli, ["--db", str(tmp_path / "other.duckdb"), "import", str(root), "--outcomes", str(bad)]
    )
    assert refused.exit_code == 2
    assert f"{bad}:2: column 'resolved' holds 'perhaps'" in refused.output
    assert not (tmp_path / "other.duckdb").exists()


def frame(rows: list[tuple[str, str, float, float, float, str]]) -> pd.DataFrame:
    return pd.DataFrame(
        rows,
        columns=[
            "session_id",
            "config",
            "billed_input_tokens",
            "summarizer_input_tokens",
            "summarizer_output_tokens",
            "termination",
        ],
    )


def test_reductions_are_paired_totals_against_the_baseline_with_summarizer_tokens_and_prices():
    results = frame(
        [
            ("s1", "raw", 1000, 0, 0, "completed"),
            ("s1", "mask", 500, 0, 0, "completed"),
            ("s1", "summary", 300, 100, 50, "completed"),
            ("s2", "raw", 3000, 0, 0, "completed"),
            ("s2", "mask", 1000, 0, 0, "completed"),
            ("s2", "summary", 200, 0, 0, "context_overflow"),  # stopped early: left out of its pair
        ]
    )
    options = ReportOptions("raw", input_usd_per_mtok=2.0, output_usd_per_mtok=10.0)
    rows = {r.config: r for r in reductions(results, options, output_tokens={"s1": 100, "s2": 100})}
    assert list(rows) == ["raw", "mask", "summary"]
    assert rows["raw"].input_reduction == 0 and rows["raw"].sessions == 2
    assert rows["mask"].input_tokens == 750 and rows["mask"].input_reduction == pytest.approx(1 - 1500 / 4000)
    summary = rows["summary"]
    assert (summary.sessions, summary.left_out) == (1, 1)
    assert summary.input_reduction == pytest.approx(1 - 400 / 1000)
    base_cost, cost = (1000 * 2 + 100 * 10) / 1e6, (400 * 2 + 150 * 10) / 1e6
    assert summary.cost_usd == pytest.approx(cost)
    assert summary.cost_reduction == pytest.approx(1 - cost / base_cost)


def test_reductions_split_by_group_and_need_prices_for_cost():
    results = frame(
        [
            ("s1", "raw", 1000, 0, 0, "completed"),
            ("s1", "mask", 250, 0, 0, "completed"),
            ("s2", "raw", 1000, 0, 0, "completed"),
            ("s2", "mask", 750, 0, 0, "completed"),
        ]
    )
    rows = reductions(results, ReportOptions("raw"), groups={"s1": "resolved", "s2": "unresolved"})
    by = {(r.group, r.config): r for r in rows}
    assert [g for g, _ in by] == ["all", "all", "resolved", "resolved", "unresolved", "unresolved"]
    assert by[("all", "mask")].input_reduction == pytest.approx(0.5)
    assert by[("resolved", "mask")].input_reduction == pytest.approx(0.75)
    assert by[("unresolved", "mask")].input_reduction == pytest.approx(0.25)
    assert by[("all", "mask")].cost_usd is None and by[("all", "mask")].cost_reduction is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"baseline": "nope"}, "'nope' is not a config"),
        ({"baseline": "a", "split": ""}, "[report] split"),
        ({"baseline": "a", "input_usd_per_mtok": 2.0}, "give both"),
        ({"baseline": "a", "input_usd_per_mtok": -1, "output_usd_per_mtok": 1}, "a number >= 0"),
        ({"baseline": "a", "basline": "a"}, "unknown key 'basline'"),
        ("a", "must be a table"),
    ],
)
def test_a_bad_report_table_is_refused_naming_the_key(raw, message):
    with pytest.raises(ConfigError) as caught:
        report_options(raw, ["a", "b"])
    assert message in str(caught.value)


def test_the_complexity_trap_spec_has_the_papers_four_policies_and_reports_against_the_raw_agent():
    spec = load_experiment(EXPERIMENTS / "complexity-trap.toml")
    assert spec.config_names == ["raw-agent", "observation-masking", "llm-summary", "hybrid"]
    assert spec.datasets == ("swe-gemini3",)
    assert spec.report == ReportOptions("raw-agent", 2.0, 12.0, "outcome_resolved")
    masking = spec.config("observation-masking").spec["strategy"]
    assert masking == {"kind": "observation_masking", "keep_recent": 10}
    summary = spec.config("llm-summary").spec
    assert summary["strategy"] == {"kind": "summarize_progressive", "keep_recent": 10}
    assert summary["trigger"]["gauges"] == {"context_steps": 21 + 2}
    assert all(cell.config.context_limit == 1_048_576 for cell in spec.configs)


@pytest.mark.shared
def test_the_real_corpus_gets_its_outcomes_and_a_split_filter(tmp_path):
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpora/mini-swe-agent-gemini3 is not present")
    with Store(str(tmp_path / "w.duckdb")) as store:
        report = store.import_paths([CORPUS / "trajs"], dataset="swe-gemini3", outcomes=CORPUS / "results_summary.csv")
        table = read_outcomes(CORPUS / "results_summary.csv")
        resolved = sum(1 for o in table.outcomes.values() if o.resolved)
        assert report.sessions == len(table) == 100
        assert len(report.outcomes.attached) == 100
        assert report.outcomes.instances_without_session == report.outcomes.sessions_without_outcome == ()
        assert len(store.session_ids(where="outcome_resolved")) == resolved
        assert len(store.session_ids(where="NOT outcome_resolved")) == 100 - resolved


def test_cli_run_prints_the_reductions_table_split_by_outcome(tmp_path):
    root = corpus(tmp_path, ["proj__a-1", "proj__b-2"], steps=6)
    db = str(tmp_path / "w.duckdb")
    csv = write_csv(tmp_path, "instance_id,resolved\nproj__a-1,True\nproj__b-2,False\n")
    assert (
        CliRunner().invoke(cli, ["--db", db, "import", str(root), "--dataset", "swe", "--outcomes", str(csv)]).exit_code
        == 0
    )
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'name = "tiny"\ndataset = "swe"\n[[config]]\nname = "raw"\npreset = "no-compaction"\n'
        '[[config]]\nname = "window"\ntrigger = { kind = "pressure", turns = 1 }\n'
        'strategy = { kind = "sliding_window", window = 1 }\n'
        '[report]\nbaseline = "raw"\ninput_usd_per_mtok = 1.0\noutput_usd_per_mtok = 1.0\n'
        'split = "outcome_resolved"\n'
    )
    result = CliRunner().invoke(cli, ["--db", db, "run", str(spec)])
    assert result.exit_code == 0, result.output
    assert "reductions against 'raw'" in result.output
    lines = [line.split() for line in result.output.splitlines()]
    groups = [(cells[0], cells[1]) for cells in lines if cells and cells[0].startswith(("all", "outcome_"))]
    assert groups == [
        ("all", "raw"),
        ("all", "window"),
        ("outcome_resolved=false", "raw"),
        ("outcome_resolved=false", "window"),
        ("outcome_resolved=true", "raw"),
        ("outcome_resolved=true", "window"),
    ]
    as_json = json.loads(CliRunner().invoke(cli, ["--db", db, "--json", "run", str(spec)]).output)
    window = next(r for r in as_json["reductions"] if r["group"] == "all" and r["config"] == "window")
    assert window["sessions"] == 2 and 0 < window["input_reduction"] < 1 and 0 < window["cost_reduction"] < 1
