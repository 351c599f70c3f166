"""What a run produces: paired comparisons, exports in four formats, regression gates, the pytest plugin, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from workbench.errors import ConfigError
from workbench.experiments import compare, compare_frames, export, regress, run_experiment
from workbench.experiments.charts import pareto_front
from workbench.experiments.compare import NO_RESULT, STOPPED_EARLY, complete_pairs
from workbench.experiments.export import FORMATS, format_of

pytestmark = pytest.mark.slow  # whole experiment runs, exports and regression gates (and pytest in a user's project)


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def grid_run(grid_db):
    db, spec, ids = grid_db
    run = run_experiment(spec, db=str(db))
    return db, spec, ids, run


def test_compare_two_configs_reads_each_metric_in_its_direction(grid_run):
    db, _, _, run = grid_run
    result = compare(run.id, configs=("clear-12", "clear-4"), db=str(db))
    billed = result.metric("billed_input_tokens")
    assert billed.direction == "lower"
    assert billed.pairs == 3 and billed.improved == 3 and billed.regressed == 0
    assert billed.mean_delta < 0 and billed.ci_high < 0
    # the interval excludes zero, but 3 sessions cannot make the exact test significant (p = 2/8)
    assert billed.p_value == pytest.approx(0.25) and billed.verdict == "B better, not significant"
    same = result.metric("calls")
    assert same.mean_delta == 0 and same.verdict == "no clear change"
    assert (
        compare(run.id, configs=("clear-4", "clear-12"), db=str(db)).metric("billed_input_tokens").verdict
        == "B worse, not significant"
    )


def test_results_whose_summaries_the_offline_baseline_wrote_say_so(grid_run):
    """A run, a comparison and a regression check whose summaries came from `workbench/extractive` carry
    the baseline's note; a comparison of configs that summarized nothing does not."""
    db, spec, _, run = grid_run
    note = run.summaries_note()
    assert note is not None and note.startswith("Summaries by workbench/extractive: the offline extractive baseline")
    assert compare(run.id, configs=("split", "clear-4"), db=str(db)).note == note
    assert compare(run.id, configs=("clear-12", "clear-4"), db=str(db)).note is None
    regress(spec, db=str(db), update=True)
    assert note in regress(spec, db=str(db)).notes
    windows = run_experiment(
        {
            "name": "windows",
            "dataset": "grid",
            "config": [
                {
                    "name": "clear",
                    "trigger": {"kind": "utilization", "ratio": 0.5},
                    "strategy": {"kind": "hard_clear", "keep_recent": 6},
                    "context_limit": 6000,
                    "max_output": 500,
                }
            ],
        },
        db=str(db),
    )
    assert windows.summaries_note() is None
    assert "offline extractive" not in export(windows.id, "html", db.parent / "windows.html", db=str(db)).read_text()


def test_compare_two_runs_pairs_cells_by_session_config_and_repeat(grid_run, grid_db):
    db, _, _, run = grid_run
    other = run_experiment(
        {
            "name": "other",
            "dataset": "grid",
            "config": [
                {
                    "name": "clear-4",
                    "trigger": {"kind": "utilization", "ratio": 0.5},
                    "strategy": {"kind": "hard_clear", "keep_recent": 6},
                    "context_limit": 6000,
                    "max_output": 500,
                }
            ],
        },
        db=str(db),
    )
    result = compare(run.id, other.id, db=str(db))
    assert result.sessions == result.cells == 3
    assert result.metric("billed_input_tokens").pairs == 3
    assert result.unmatched[run.id] == 6
    with_itself = compare(run.id, run.id, db=str(db))  # every config pairs: 3 configs x 3 sessions
    assert (with_itself.sessions, with_itself.cells, with_itself.metric("calls").pairs) == (3, 9, 9)
    shown = subprocess.run(
        [sys.executable, "-m", "workbench", "--db", str(db), "compare", run.id, run.id],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ": 9 paired cells (3 session(s)), 95 % bootstrap intervals" in shown.splitlines()[0]


def test_compare_errors_name_what_exists(grid_run):
    db, _, _, run = grid_run
    with pytest.raises(ConfigError, match="no config 'nope'.*clear-12"):
        compare(run.id, configs=("nope", "clear-4"), db=str(db))
    with pytest.raises(ConfigError, match="3 configs"):
        compare(run.id, db=str(db))


def test_paired_interval_and_p_value_on_known_data():
    a = pd.DataFrame({"session_id": list("abcdefgh"), "repeat": 0, "fact_retention": [0.5] * 8})
    b = a.assign(fact_retention=[0.6, 0.55, 0.7, 0.65, 0.6, 0.62, 0.58, 0.61])
    result = compare_frames(a, b, metrics=["fact_retention"])
    item = result.metric("fact_retention")
    assert item.improved == 8 and item.p_value == pytest.approx(2 / 256)
    assert 0.05 < item.ci_low < item.mean_delta < item.ci_high < 0.2
    assert item.verdict == "B better"  # interval and test agree
    worse = compare_frames(b, a, metrics=["fact_retention"]).metric("fact_retention")
    assert worse.verdict == "B worse"
    strict = compare_frames(a, b, metrics=["fact_retention"], confidence=0.999).metric("fact_retention")
    assert strict.alpha == pytest.approx(0.001) and strict.verdict == "B better, not significant"  # 2/256 > 0.001
    noisy = a.assign(fact_retention=[0.6, 0.4, 0.55, 0.45, 0.5, 0.52, 0.48, 0.5])
    assert (
        compare_frames(a, noisy, metrics=["fact_retention"]).metric("fact_retention").verdict == "no clear difference"
    )


def test_pairs_where_a_side_stopped_early_are_left_out_and_said():
    """A side whose replays stopped early has totals over fewer calls: by default the comparison keeps the
    sessions both sides completed and says what it left out; with `complete_only=False` it keeps them all
    and says they are in."""
    a = pd.DataFrame(
        {
            "session_id": list("abcd"),
            "repeat": 0,
            "termination": "completed",
            "billed_input_tokens": [900, 950, 1000, 980],
        }
    )
    b = a.assign(
        termination=["context_overflow", "completed", "context_overflow", "context_overflow"],
        billed_input_tokens=[300, 940, 310, 290],
    )
    result = compare_frames(a, b, a_label="window-5", b_label="window-40")
    assert result.stopped == {"window-5": 0, "window-40": 3}
    billed = result.metric("billed_input_tokens")
    assert (result.sessions, billed.pairs, billed.mean_delta) == (1, 1, -10)  # session b alone
    assert result.stopped_note == (
        "Compared on 1 of 4 sessions where both sides completed; left out: window-40 3 "
        f"(context_overflow). {STOPPED_EARLY}"
    )
    assert result.to_dict()["left_out"] == {"window-5": {}, "window-40": {"context_overflow": 3}}
    every = compare_frames(a, b, a_label="window-5", b_label="window-40", complete_only=False)
    assert every.metric("billed_input_tokens").pairs == 4 and not every.complete_only
    assert every.stopped_note.startswith(
        "Compared on all 4 sessions, replays that stopped early included; stopped "
        "early: window-40 3 (context_overflow)."
    )
    assert compare_frames(a, a).stopped_note is None
    assert compare_frames(a.drop(columns="termination"), b.drop(columns="termination")).stopped == {}


def test_compare_and_export_refuse_what_they_cannot_do(grid_run, tmp_path):
    db, _, _, run = grid_run
    with pytest.raises(
        ConfigError, match="configs takes two config names, as in configs=\\('A', 'B'\\), not the string 'clear-4'"
    ):
        compare(run.id, configs="clear-4", db=str(db))
    for format in ("json", "html"):
        with pytest.raises(ConfigError, match=f"a {format} export holds the whole run .* takes no level"):
            export(run.id, format, tmp_path / f"r.{format}", db=str(db), level="calls")
        assert not (tmp_path / f"r.{format}").exists()


def test_a_spec_without_a_file_is_told_how_to_make_its_baseline(grid_db):
    db, spec, _ = grid_db
    import tomllib

    table = tomllib.loads(spec.read_text()) | {"name": "in-a-notebook"}
    with pytest.raises(ConfigError, match="create it with `wb.regress\\(spec, update=True\\)`"):
        regress(table, db=str(db))


def test_cost_versus_quality_draws_a_free_run_against_billed_tokens():
    from workbench.experiments import charts

    results = pd.DataFrame(
        {
            "config": ["a", "a", "b", "b"],
            "cost_usd": [0.0] * 4,
            "billed_input_tokens": [100, 120, 300, 280],
            "needed_fact_retention": [0.4, 0.5, 0.9, 0.8],
        }
    )
    figure = charts.cost_quality(results)
    assert figure is not None and figure.layout.xaxis.title.text.startswith("billed_input_tokens")
    assert list(figure.data[0].x) == [110, 290]
    priced = results.assign(cost_usd=[0.01, 0.01, 0.03, 0.02])
    assert charts.cost_quality(priced).layout.xaxis.title.text.startswith("cost_usd")
    assert charts.pick_metric(["cost_usd"], charts.COST_PREFERENCE, results) == "cost_usd"  # the only one there


@pytest.mark.parametrize(
    ("xs", "ys", "expected"),
    [
        # the reference designs on the samples: two summaries cost and keep about the same
        (
            [378_780, 867_894, 977_007, 2_097_925],
            [0.289, 0.95, 0.944, 0.983],
            ["top center", "top center", "bottom center", "top center"],
        ),
        ([100, 200, 300], [0.1, 0.5, 0.9], ["top center"] * 3),  # far apart: every label above its point
        ([100, 105, 110, 200], [0.5] * 4, ["top center", "bottom center", "bottom center", "top center"]),
        ([5], [0.5], ["top center"]),
        ([], [], []),
    ],
)
def test_labels_of_nearby_points_go_below_rather_than_over_each_other(xs, ys, expected):
    from workbench.experiments import charts

    assert charts.label_positions(xs, ys) == expected


def test_pareto_front_keeps_only_undominated_configs():
    points = pd.DataFrame(
        {"billed_input_tokens": [100, 200, 150, 300], "fact_retention": [0.5, 0.9, 0.4, 0.8]},
        index=["cheap", "good", "dominated", "worse"],
    )
    assert list(pareto_front(points, "billed_input_tokens", "fact_retention").index) == ["cheap", "good"]


def test_exports_in_all_four_formats_open(grid_run, tmp_path):
    db, _, ids, run = grid_run
    csv = export(run.id, "csv", tmp_path / "out" / "r.csv", db=str(db))
    assert len(pd.read_csv(csv)) == 9
    parquet = export(run.id, "parquet", tmp_path / "r.parquet", db=str(db))
    rows = duckdb.sql(f"SELECT count(*), count(DISTINCT config) FROM '{parquet}'").fetchall()
    assert rows == [(9, 3)]
    calls = export(run.id, "parquet", tmp_path / "calls.parquet", db=str(db), level="calls")
    assert duckdb.sql(f"SELECT count(DISTINCT session_id) FROM '{calls}'").fetchall() == [(3,)]
    document = json.loads(export(run.id, "json", tmp_path / "r.json", db=str(db)).read_text())
    assert document["run"]["id"] == run.id and len(document["results"]) == 9
    assert any(c["summary"] for c in document["compactions"]) and document["note"] == run.summaries_note()
    details = [c["details"] for c in document["compactions"] if c["details"] is not None]
    assert details and all(isinstance(d, dict) for d in details)  # objects, not JSON text inside the JSON
    report = export(run.id, "html", tmp_path / "r.html", db=str(db)).read_text()
    assert report.count("Plotly.newPlot") >= 2 and '<script src="http' not in report
    assert "offline extractive baseline" in report
    assert not list(tmp_path.glob("**/.*.partial"))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("r.csv", "csv"),
        ("r.parquet", "parquet"),
        ("r.pq", "parquet"),
        ("out/r.json", "json"),
        ("Report.HTML", "html"),
        ("r.htm", "html"),
        ("r.tar.csv", "csv"),
    ],
)
def test_format_of_reads_the_file_ending(name, expected):
    assert format_of(name) == expected


@pytest.mark.parametrize("name", ["r.txt", "report", "r.xlsx", "csv"])
def test_format_of_refuses_a_name_that_implies_no_format(name):
    with pytest.raises(ConfigError, match=r"cannot tell the export format .* \.csv \(csv\)"):
        format_of(name)


def test_export_refuses_unknown_formats_and_runs(grid_run, tmp_path):
    db, _, _, run = grid_run
    with pytest.raises(ConfigError, match="valid: csv, parquet, json, html"):
        export(run.id, "xlsx", tmp_path / "r.xlsx", db=str(db))
    from workbench.errors import StoreError

    with pytest.raises(StoreError, match="no run 'nope'"):
        export("nope", "csv", tmp_path / "r.csv", db=str(db))


@pytest.mark.parametrize("format", FORMATS)
def test_export_refuses_a_folder_or_a_path_under_a_file(grid_run, tmp_path, format):
    db, _, _, run = grid_run
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(ConfigError, match=f"{folder} is a folder; give the file to write, such as .*report.{format}"):
        export(run.id, format, folder, db=str(db))
    (folder / "plain").write_text("x")
    with pytest.raises(ConfigError, match=f"cannot write .*plain/sub/r.{format}: .*plain is a file, not a folder"):
        export(run.id, format, folder / "plain" / "sub" / f"r.{format}", db=str(db))
    assert [p.name for p in folder.iterdir()] == ["plain"]  # nothing half-written


def test_the_token_chart_draws_the_billed_input_once_when_the_recording_has_it():
    from workbench.experiments import charts

    calls = pd.DataFrame(
        {
            "config": ["a", "a", "a", "b", "b"],
            "call_index": [0, 1, 2, 0, 1],
            "context_tokens": [5, 6, 7, 5, 9],
            "recorded_input_tokens": [50, None, 70, 50, None],
        }
    )
    billed = [t for t in charts.token_curves(calls).data if t.name == charts.RECORDED_INPUT_TRACE]
    assert [(list(t.x), list(t.y), t.visible) for t in billed] == [([0, 2], [50, 70], True)]
    small_window = charts.token_curves(calls, context_limit=40).data
    assert [t.visible for t in small_window if t.name == charts.RECORDED_INPUT_TRACE] == ["legendonly"]  # 70 > 1.5 x 40
    without = calls.assign(recorded_input_tokens=None)
    assert not [t for t in charts.token_curves(without).data if t.name == charts.RECORDED_INPUT_TRACE]


def test_a_replay_that_stopped_early_ends_its_token_curve_in_a_labelled_marker():
    from workbench.experiments import charts
    from workbench.experiments.export import report_html

    calls = pd.DataFrame(
        {
            "session_id": ["s"] * 5,
            "config": ["long", "long", "long", "short", "short"],
            "repeat": [0] * 5,
            "call_index": [0, 1, 2, 0, 1],
            "context_tokens": [5, 6, 7, 5, 9],
        }
    )
    reason = "context_overflow: call 2: context <9> + max_output 4 exceeds context_limit 12"
    figure = charts.token_curves(calls, stopped={"short": reason})
    ends = [t for t in figure.data if (t.name or "").endswith(" stopped")]
    assert [(t.name, list(t.x), list(t.y)) for t in ends] == [("short stopped", [1], [9])]
    assert "stopped after call 1" in ends[0].hovertext[0] and "&lt;9&gt;" in ends[0].hovertext[0]
    assert not [t for t in charts.token_curves(calls).data if (t.name or "").endswith(" stopped")]

    results = pd.DataFrame(
        {
            "session_id": ["s", "s"],
            "config": ["long", "short"],
            "repeat": [0, 0],
            "termination": ["completed", "context_overflow"],
            "error": [None, "call 2: context 9 + max_output 4 exceeds context_limit 12"],
            "billed_input_tokens": [18, 14],
        }
    )
    page = report_html("t", results, calls, pd.DataFrame())
    assert page.count("stopped after call") == 1 and "context_overflow: call 2: context 9" in page


def test_html_report_escapes_session_text():
    from workbench.experiments.export import report_html

    results = pd.DataFrame(
        {"session_id": ["s"], "config": ["c"], "repeat": [0], "termination": ["completed"], "billed_input_tokens": [10]}
    )
    calls = pd.DataFrame(
        {
            "session_id": ["s", "s"],
            "config": ["c", "c"],
            "repeat": [0, 0],
            "call_index": [0, 1],
            "context_tokens": [5, 6],
        }
    )
    compactions = pd.DataFrame(
        {
            "session_id": ["s"],
            "config": ["c"],
            "repeat": [0],
            "call_index": [1],
            "tokens_before": [9],
            "tokens_after": [6],
            "summary": ["<script>alert('x')</script><b>bold</b>"],
        }
    )
    page = report_html("t", results, calls, compactions)
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page


def test_regress_passes_on_its_own_baseline_and_fails_readably_when_a_config_changes(grid_db, tmp_path):
    db, spec, _ = grid_db
    baseline = tmp_path / "baselines" / "tiny-grid.json"
    written = regress(spec, db=str(db), update=True)
    assert written.updated and baseline.is_file()
    stored = json.loads(baseline.read_text())
    assert set(stored["metrics"]) == {"clear-4", "clear-12", "split"}
    assert stored["summaries"]["split"]
    report = regress(spec, db=str(db))
    assert report.ok, report.text()
    perturbed = (
        spec.read_text()
        .replace("preserve = 0.4", "preserve = 0.2")
        .replace('matrix = { "strategy.keep_recent" = [4, 12] }', 'matrix = { "strategy.keep_recent" = [4, 20] }')
    )
    changed = tmp_path / "tiny-grid-changed.toml"
    changed.write_text(perturbed)
    report = regress(changed, baseline=baseline, db=str(db))
    assert not report.ok
    text = report.text()
    assert "REGRESSION" in text and "clear-12" in text and "config 'clear-20' is new" in text
    assert report.summary_diffs and report.summary_diffs[0].diff.startswith("--- baseline split/")


def test_regress_without_a_baseline_says_how_to_make_one(grid_db):
    db, spec, _ = grid_db
    with pytest.raises(ConfigError, match="--update"):
        regress(spec, db=str(db))


def test_tolerances_gate_metric_drift(grid_db, tmp_path):
    db, spec, _ = grid_db
    regress(spec, db=str(db), update=True)
    baseline = tmp_path / "baselines" / "tiny-grid.json"
    stored = json.loads(baseline.read_text())
    stored["metrics"]["clear-4"]["grid"]["billed_input_tokens"] *= 0.9  # the fresh run now bills 11 % more
    baseline.write_text(json.dumps(stored))
    report = regress(spec, db=str(db))
    assert [(d.config, d.metric) for d in report.failures] == [("clear-4", "billed_input_tokens")]
    assert "may grow by at most 2 %" in report.text()


def test_a_spec_without_tolerances_is_checked_on_task_state_coverage(grid_db, tmp_path):
    """Without a [regress] table the check is task-state coverage (the audited quality metric)."""
    import tomllib

    db, spec, _ = grid_db
    bare = tomllib.loads(Path(spec).read_text())
    bare.pop("regress")
    baseline = tmp_path / "bare.json"
    regress(bare, baseline=baseline, db=str(db), update=True)
    assert regress(bare, baseline=baseline, db=str(db)).ok
    stored = json.loads(baseline.read_text())
    stored["metrics"]["split"]["grid"]["task_state_coverage"] += 0.2  # the fresh run now states less
    baseline.write_text(json.dumps(stored))
    report = regress(bare, baseline=baseline, db=str(db))
    assert [(d.config, d.metric) for d in report.failures] == [("split", "task_state_coverage")]
    assert "checked by default on task_state_coverage" in report.text()


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """`workbench ARGS` through the CLI's own `main` in this process (as `_cli` reports it): for the
    commands after the first, which pay no interpreter and import start-up again."""
    from click.testing import CliRunner

    from workbench.cli import main

    out = CliRunner().invoke(main, list(args))
    return subprocess.CompletedProcess(list(args), out.exit_code, out.stdout, out.stderr)


def test_cli_run_export_compare_regress(grid_db, tmp_path):
    db, spec, _ = grid_db
    first = _cli("run", str(spec), "--db", str(db), "--json")  # the real entry point, in its own process
    assert first.returncode == 0, first.stderr
    run = json.loads(first.stdout)
    assert run["cells"] == 9 and run["cells_reused"] == 0
    assert run["executor"] == "local" and "477 messages to replay" in run["executor_reason"]  # auto: too little work
    again = json.loads(_in_process("run", str(spec), "--db", str(db), "--json").stdout)
    assert again["run_id"] == run["run_id"] and again["cells_reused"] == 9 and again["model_calls"] == 0
    text = _in_process("run", str(spec), "--db", str(db))
    assert run["run_id"] in text.stdout and "clear-4" in text.stdout
    assert "the offline extractive baseline" in text.stdout and run["note"] in text.stdout
    assert "--executor auto" not in text.stderr  # every cell reused: nothing was computed anywhere
    dry = _in_process("run", str(spec), "--db", str(db), "--dry-run")
    assert "9 cells, 9 already done, 0 to run" in dry.stdout and "--executor auto: local (no cell left" in dry.stdout
    out = tmp_path / "report.html"
    assert _in_process("export", run["run_id"], "-o", str(out), "--db", str(db)).returncode == 0  # html, from the name
    assert out.stat().st_size > 1_000_000 and out.read_text().startswith("<!DOCTYPE html>")
    unnamed = _in_process("export", run["run_id"], "-o", str(tmp_path / "report.txt"), "--db", str(db))
    assert unnamed.returncode == 2 and "cannot tell the export format" in unnamed.stderr
    assert not (tmp_path / "report.txt").exists()
    compared = _in_process("compare", run["run_id"], "--configs", "clear-12", "clear-4", "--db", str(db))
    assert compared.returncode == 0 and "billed_input_tokens" in compared.stdout and "B better" in compared.stdout
    assert "offline extractive" not in compared.stdout  # neither config summarized
    calls_row = next(line for line in compared.stdout.splitlines() if line.startswith("calls "))
    assert " none " in calls_row and " differ/" in calls_row  # no better direction: only differ / same
    assert _in_process("regress", str(spec), "--db", str(db), "--update").returncode == 0
    assert _in_process("regress", str(spec), "--db", str(db)).returncode == 0
    stored = json.loads((tmp_path / "baselines" / "tiny-grid.json").read_text())
    stored["metrics"]["split"]["grid"]["compactions"] = 0.5
    (tmp_path / "baselines" / "tiny-grid.json").write_text(json.dumps(stored))
    failed = _in_process("regress", str(spec), "--db", str(db))
    assert failed.returncode == 1 and "FAIL split / grid: compactions" in failed.stdout
    missing = _in_process("run", str(spec), "--db", str(tmp_path / "missing.duckdb"), "--json")
    assert missing.returncode == 2 and json.loads(missing.stdout)["error"]["message"]
    assert not (tmp_path / "missing.duckdb").exists()


def test_the_pytest_plugin_gates_regressions_in_a_users_project(grid_db, tmp_path):
    db, spec, _ = grid_db
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_policy.py").write_text(
        textwrap.dedent(f"""
        def test_summaries_hold(workbench_regress):
            report = workbench_regress({str(spec)!r}, db={str(db)!r})
            assert report.ok
    """)
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project)]
    update = subprocess.run(
        command, capture_output=True, text=True, cwd=project, timeout=600, env={**env, "WORKBENCH_REGRESS_UPDATE": "1"}
    )
    assert update.returncode == 0, update.stdout
    passed = subprocess.run(command, capture_output=True, text=True, cwd=project, timeout=600, env=env)
    assert passed.returncode == 0 and "1 passed" in passed.stdout
    baseline = tmp_path / "baselines" / "tiny-grid.json"
    stored = json.loads(baseline.read_text())
    stored["summaries"]["split"][next(iter(stored["summaries"]["split"]))][0] = "an older summary"
    baseline.write_text(json.dumps(stored))
    failed = subprocess.run(command, capture_output=True, text=True, cwd=project, timeout=600, env=env)
    assert failed.returncode == 1 and "summary snapshot(s) changed" in failed.stdout
    assert "-an older summary" in failed.stdout


def test_the_run_table_names_each_metric_once(grid_db, tmp_path):
    """The spec's metrics come first in the table `workbench run` prints, then the usual ones, none twice."""
    from click.testing import CliRunner

    from workbench.cli import main

    db, spec, _ = grid_db
    listed = tmp_path / "listed.toml"
    listed.write_text(
        spec.read_text().replace(
            "concurrency = 2\n", 'concurrency = 2\nmetrics = ["fact_retention", "compactions"]\n', 1
        )
    )
    result = CliRunner().invoke(main, ["run", str(listed), "--db", str(db), "-q"])
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if line.startswith("config "))
    names = header.split()
    assert names[:5] == ["config", "cells", "completed", "fact_retention", "compactions"]
    assert len(names) == len(set(names)) and "billed_input_tokens" in names


@pytest.mark.parametrize(
    ("metric", "shown"),
    [
        ("completed", "%.0f%%"),
        ("cost_usd", "$%.4f"),
        ("summarizer_cost_usd", "$%.4f"),
        ("billed_input_tokens", "localized"),
        ("peak_context_tokens", "localized"),
        ("compactions", "%.1f"),
        ("dangling_references", "%.1f"),
        ("needed_fact_retention", "%.3f"),
        ("compression_ratio", "%.3f"),
        ("cells", None),
    ],
)
def test_a_leaderboard_shows_each_metric_in_its_own_unit(metric, shown):
    from workbench.experiments import charts

    assert charts.display_format(metric) == shown


def test_token_means_are_shown_whole_and_completion_as_a_percent():
    from workbench.experiments import charts

    board = pd.DataFrame(
        {"billed_input_tokens": [682699.5714], "fact_retention": [0.86348], "completed": [5 / 6]}, index=["a"]
    )
    shown = charts.displayed(board)
    assert shown.loc["a", "billed_input_tokens"] == 682700 and shown.loc["a", "fact_retention"] == 0.86348
    assert shown.loc["a", "completed"] == pytest.approx(500 / 6)  # shown as "83%" by display_format's "%.0f%%"
    assert board.loc["a", "completed"] == 5 / 6  # the board itself is left alone


@pytest.mark.parametrize(
    ("metric", "value", "text"),
    [
        ("billed_input_tokens", 85904, "85,904"),
        ("cache_aware_input_tokens", 37975.4, "37,975"),
        ("cost_usd", 0.01234, "$0.0123"),
        ("completed", 4 / 7, "57%"),
        ("compactions", 18, "18"),
        ("compactions", 1.4286, "1.4"),
        ("fact_retention", 0.863481, "0.863"),
        ("fact_retention", None, ""),
        ("fact_retention", float("nan"), ""),
        ("termination", "completed", "completed"),
        ("calls", True, "True"),
    ],
)
def test_one_metric_value_reads_in_its_unit(metric, value, text):
    from workbench.experiments import charts

    assert charts.format_metric(metric, value) == text


def test_deleting_a_run_removes_it_at_every_level_and_nothing_else(grid_run, grid_db):
    from click.testing import CliRunner

    from workbench.cli import main
    from workbench.errors import StoreError
    from workbench.experiments import delete_runs, runs
    from workbench.store.results import RUN_TABLES

    db, _, _, run = grid_run
    other = run_experiment(
        {
            "name": "other",
            "dataset": "grid",
            "config": [
                {
                    "name": "w",
                    "trigger": {"kind": "utilization", "ratio": 0.5},
                    "strategy": {"kind": "sliding_window", "window": 3},
                    "context_limit": 6000,
                    "max_output": 500,
                }
            ],
        },
        db=str(db),
    )

    def rows(run_id: str) -> dict[str, int]:
        with duckdb.connect(str(db), read_only=True) as con:
            return {
                table: con.execute(f"SELECT count(*) FROM {table} WHERE {column} = ?", [run_id]).fetchall()[0][0]
                for table, column in RUN_TABLES
            }

    assert all(rows(run.id).values()) and all(rows(other.id).values())
    listed = json.loads(CliRunner().invoke(main, ["--json", "runs", "--db", str(db)]).stdout)
    assert [r["datasets"] for r in listed] == [["grid"], ["grid"]]  # lists, not the repr of an array
    with pytest.raises(StoreError, match="no run 'nope'"):
        delete_runs([other.id, "nope"], db=str(db))  # all or nothing
    assert all(rows(other.id).values())
    assert delete_runs(other.id[:8], db=str(db)) == {other.id: 3}  # a unique prefix
    assert not any(rows(other.id).values()) and all(rows(run.id).values())
    result = CliRunner().invoke(main, ["runs", "--delete", run.id, "--db", str(db)])
    assert result.exit_code == 0 and f"deleted run {run.id} (9 cells)" in result.stdout
    assert runs(str(db)).empty
    again = CliRunner().invoke(main, ["runs", "--delete", run.id, "--db", str(db)])
    assert again.exit_code == 1 and "no run" in again.output


def test_the_report_leaderboard_shows_metrics_in_their_units():
    from workbench.experiments.export import leaderboard_html

    board = pd.DataFrame(
        {
            "cells": [7, 7],
            "completed": [1.0, 1.0],
            "billed_input_tokens": [682699.57, 1939756.1],
            "fact_retention": [None, 0.59194],
        },
        index=["as-recorded", "masking"],
    )
    html = leaderboard_html(board)
    for shown in ("100%", "682,700", "1,939,756", "0.592"):
        assert f">{shown}</td>" in html
    assert 'class="best">1,939,756' not in html and 'class="best">682,700</td>' in html  # fewer billed tokens win


def test_the_report_leaderboard_ranks_no_config_that_completed_fewer_sessions():
    """A config most of whose cells overflowed bills the fewest tokens for want of calls: the means are over
    the session every config completed, it is marked neither best nor worst, and the note says what was left out."""
    from workbench.experiments.charts import leaderboard
    from workbench.experiments.export import leaderboard_html

    results = pd.DataFrame(
        {
            "session_id": list("abcabcabc"),
            "config": ["window-5"] * 3 + ["window-40"] * 3 + ["masking"] * 3,
            "termination": ["context_overflow", "context_overflow", "completed", *["completed"] * 6],
            "billed_input_tokens": [300, 310, 900, 1000, 1100, 1200, 1500, 1600, 1700],
        }
    )
    pairs = complete_pairs(results)
    html = leaderboard_html(leaderboard(results, pairs=pairs), pairs)
    assert 'class="best">1,200</td>' in html and 'class="worst">1,700</td>' in html  # window-40 beats masking
    assert "<td>900</td>" in html  # window-5: the fewest tokens on session c, unmarked
    assert (
        f"Compared on 1 of 3 sessions where every config completed; left out: window-5 2 (context_overflow). "
        f"{STOPPED_EARLY}"
    ) in html
    whole = results[results["config"] != "window-5"]
    assert "left out" not in leaderboard_html(leaderboard(whole), complete_pairs(whole))


# -- repeats are not sessions; clear errors; failed cells fail the gate; full precision ----------------------


def test_repeats_of_a_session_are_averaged_before_they_are_counted_or_tested():
    """Four repeats of three sessions are three pieces of evidence, not twelve: identical deterministic
    repeats give what one repeat gives (p = 0.25, 3 improved), and the output says what was paired."""
    one = pd.DataFrame({"session_id": list("abc"), "repeat": 0, "billed_input_tokens": [900, 950, 1000]})
    better = one.assign(billed_input_tokens=[800, 700, 600])
    repeated_a = pd.concat([one.assign(repeat=r) for r in range(4)], ignore_index=True)
    repeated_b = pd.concat([better.assign(repeat=r) for r in range(4)], ignore_index=True)
    single = compare_frames(one, better).metric("billed_input_tokens")
    result = compare_frames(repeated_a, repeated_b)
    item = result.metric("billed_input_tokens")
    assert (item.pairs, item.improved, item.regressed) == (3, 3, 0)
    assert item.p_value == pytest.approx(single.p_value) == pytest.approx(0.25)
    assert (item.ci_low, item.ci_high) == (single.ci_low, single.ci_high)
    assert item.verdict == "B better, not significant"
    assert (result.sessions, result.units, result.cells) == (3, 3, 12)
    assert result.pairing == "3 paired session(s), each the mean of its repeats (12 paired cells)"
    assert result.to_dict()["pairing"] == result.pairing
    assert compare_frames(one, better).pairing == "3 paired session(s)"
    # a session whose repeats disagree counts once, by their mean: +100 and -300 make it better
    mixed = repeated_b.assign(billed_input_tokens=[1000, 1050, 1100, 600, 650, 700, 800, 700, 600, 800, 700, 600])
    counted = compare_frames(repeated_a, mixed).metric("billed_input_tokens")
    assert (counted.pairs, counted.improved, counted.regressed) == (3, 3, 0)


def test_compare_of_two_runs_says_its_units_are_session_and_config_with_repeats_averaged():
    frame = pd.DataFrame(
        {
            "session_id": list("aabb") * 2,
            "config": ["x", "y"] * 4,
            "repeat": [0] * 4 + [1] * 4,
            "calls": [3, 4, 5, 6, 3, 4, 5, 6],
        }
    )
    result = compare_frames(frame, frame, align=("session_id", "config", "repeat"))
    assert (result.sessions, result.units, result.cells, result.metric("calls").pairs) == (2, 4, 8, 4)
    assert result.pairing == (
        "4 paired session × config units (2 session(s)), each the mean of its repeats (8 paired cells)"
    )


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, a folder no file can be created in")
@pytest.mark.parametrize("format", FORMATS)
def test_export_to_a_folder_that_refuses_files_says_so_before_any_work(grid_run, format):
    db, _, _, run = grid_run
    with pytest.raises(ConfigError, match=f"cannot write /proc/r.{format}: cannot create a file in /proc"):
        export(run.id, format, f"/proc/r.{format}", db=str(db))


@pytest.mark.parametrize("format", FORMATS)
def test_an_export_whose_write_fails_names_the_file_and_leaves_what_was_there(grid_run, tmp_path, format):
    """A write that fails half-way (here: the partial file's name is taken by a folder) is an error naming the
    export's file, not a DuckDB traceback naming the partial one; a folder of the user's is not removed."""
    db, _, _, run = grid_run
    (tmp_path / f".r.{format}.partial").mkdir()
    with pytest.raises(ConfigError, match=f"cannot write {tmp_path / f'r.{format}'}: ") as caught:
        export(run.id, format, tmp_path / f"r.{format}", db=str(db))
    assert ".partial" not in str(caught.value)
    assert (tmp_path / f".r.{format}.partial").is_dir() and not (tmp_path / f"r.{format}").exists()


def test_export_refuses_a_format_its_file_name_contradicts(grid_run, tmp_path):
    db, _, _, run = grid_run
    with pytest.raises(
        ConfigError,
        match="r.parquet names a parquet file, but the format is csv; name the file .*r.csv or give the format parquet",
    ):
        export(run.id, "csv", tmp_path / "r.parquet", db=str(db))
    assert not (tmp_path / "r.parquet").exists()
    assert export(run.id, "csv", tmp_path / "r.txt", db=str(db)).read_text().startswith("run_id,")  # no ending: ok
    assert export(run.id, "parquet", tmp_path / "r.pq", db=str(db)).stat().st_size > 0


def test_the_export_command_names_a_folder_and_a_contradicting_format(grid_run, tmp_path):
    from click.testing import CliRunner

    from workbench.cli import main

    db, _, _, run = grid_run
    folder = CliRunner().invoke(main, ["export", run.id, "-o", str(tmp_path), "--db", str(db)])
    assert folder.exit_code == 2 and f"{tmp_path} is a folder; give the file to write" in folder.output
    assert "cannot tell the export format" not in folder.output
    clash = CliRunner().invoke(
        main, ["export", run.id, "-o", str(tmp_path / "x.parquet"), "--format", "csv", "--db", str(db)]
    )
    assert clash.exit_code == 2 and "names a parquet file, but the format is csv" in clash.output
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\xff\xfe not text", "not UTF-8 text: byte 0xff at offset 0"),
        (b'{"metrics": [1, 2]}', "'metrics' is a list, expected an object of configs"),
        (b'{"metrics": {"clear-4": 5}}', "metrics\\['clear-4'\\] is 5, expected an object of datasets"),
        (
            b'{"metrics": {"clear-4": {"grid": {"calls": "many"}}}}',
            "metrics\\['clear-4'\\]\\['grid'\\]\\['calls'\\] is \"many\", expected a number or null",
        ),
        (b'{"metrics": {}, "summaries": {"split": {"s": "text"}}}', "summaries\\['split'\\]\\['s'\\] is not a list"),
        (b"[1", "invalid JSON at line 1"),
    ],
)
def test_a_baseline_of_the_wrong_shape_is_refused_by_name_before_the_run(grid_db, tmp_path, content, expected):
    from workbench.experiments import runs

    db, spec, _ = grid_db
    baseline = tmp_path / "odd.json"
    baseline.write_bytes(content)
    with pytest.raises(ConfigError, match=f"{baseline}: not a baseline \\(.*{expected}"):
        regress(spec, baseline=baseline, db=str(db))
    assert runs(str(db)).empty  # refused before the run


def test_a_missing_or_folder_baseline_says_what_it_is_and_how_to_write_it(grid_db, tmp_path):
    db, spec, _ = grid_db
    elsewhere = tmp_path / "elsewhere.json"
    with pytest.raises(ConfigError, match=f"create it with `workbench regress {spec} --baseline {elsewhere} --update`"):
        regress(spec, baseline=elsewhere, db=str(db))
    with pytest.raises(
        ConfigError,
        match=f"baseline {tmp_path} is a folder, not a baseline file; give its JSON "
        f"file, such as {tmp_path / 'tiny-grid.json'}",
    ):
        regress(spec, baseline=tmp_path, db=str(db))


def test_regress_update_checks_its_target_before_the_run_and_leaves_no_partial_file(grid_db, tmp_path):
    from workbench.experiments import runs

    db, spec, _ = grid_db
    with pytest.raises(ConfigError, match=f"baseline {tmp_path} is a folder; give the file to write"):
        regress(spec, baseline=tmp_path, db=str(db), update=True)
    (tmp_path / "plain").write_text("x")
    with pytest.raises(ConfigError, match="cannot write the baseline .*plain/b.json: .*plain is a file, not a folder"):
        regress(spec, baseline=tmp_path / "plain" / "b.json", db=str(db), update=True)
    assert runs(str(db)).empty  # neither ran
    target = tmp_path / "b.json"
    (tmp_path / ".b.json.partial").mkdir()  # the write itself fails, after the run
    with pytest.raises(ConfigError, match=f"cannot write the baseline {target}: "):
        regress(spec, baseline=target, db=str(db), update=True)
    assert not target.exists() and (tmp_path / ".b.json.partial").is_dir()
    (tmp_path / ".b.json.partial").rmdir()
    assert regress(spec, baseline=target, db=str(db), update=True).updated
    assert not list(tmp_path.glob(".*.partial"))


@pytest.fixture
def flaky_kind():
    """A strategy kind that keeps every message, or with `fail = true` raises whenever it is asked to compact."""
    from dataclasses import dataclass

    import workbench as wb
    from workbench.registry import unregister

    @wb.register_strategy("regress_test_flaky")
    @dataclass(frozen=True)
    class Flaky:
        """Keeps everything; raises when `fail`."""

        fail: bool = False

        def compact(self, context, env):
            if self.fail:
                raise RuntimeError("flaky strategy failed")
            return [*context.system, *(m for step in context.steps for m in step.messages)]

    yield
    unregister("strategy", "regress_test_flaky")


def _flaky_spec(fail: bool, regress_table: dict | None = None) -> dict:
    """One config over the grid's sessions of 24, 25 and 26 steps, compacting at step 25: with `fail`, the
    two longer sessions' cells fail and the shortest, cheapest one is left."""
    return {
        "name": "flaky-gate",
        "dataset": "grid",
        "defaults": {"context_limit": 100000, "max_output": 500},
        "config": [
            {
                "name": "keep",
                "trigger": {"kind": "stat_threshold", "counters": {"iterations": 25}},
                "strategy": {"kind": "regress_test_flaky", "fail": fail},
            }
        ],
        "regress": regress_table or {"billed_input_tokens": "+2%", "compactions": "+10%"},
    }


@pytest.mark.filterwarnings("ignore:cell .* failed:RuntimeWarning")
def test_regress_fails_when_cells_failed_and_writes_no_baseline_from_such_a_run(grid_db, tmp_path, flaky_kind):
    """The cell left is within every tolerance (it bills less than the mean), yet 2 of 3 cells failed:
    the gate fails and says where to see them, and no baseline is made of such a run."""
    from workbench.experiments.regress import BaselineRefused

    db, _, _ = grid_db
    baseline = tmp_path / "flaky.json"
    assert regress(_flaky_spec(False), baseline=baseline, db=str(db), update=True).updated
    written = baseline.read_text()
    report = regress(_flaky_spec(True), baseline=baseline, db=str(db))
    assert report.diffs and all(d.ok for d in report.diffs)
    assert not report.ok and (report.failed_cells, report.cells_total) == (2, 3)
    lines = report.text().splitlines()
    assert lines[0].startswith("FAIL: flaky-gate against")
    assert lines[1].startswith(
        f"2 of 3 cells of run {report.run_id} failed, so its means cover only the cells "
        "that finished; each failed cell's error was reported as a warning during the run"
    )
    assert report.to_dict()["ok"] is False and report.to_dict()["failed_cells"] == 2
    with pytest.raises(BaselineRefused, match=f"baseline {baseline} not written: 2 of 3 cells .* failed"):
        regress(_flaky_spec(True), baseline=baseline, db=str(db), update=True)
    assert baseline.read_text() == written
    assert not list(tmp_path.glob(".*.partial"))


@pytest.mark.filterwarnings("ignore:cell .* failed:RuntimeWarning")
def test_a_run_whose_every_cell_failed_makes_no_baseline(grid_db, tmp_path, flaky_kind):
    from workbench.experiments.regress import BaselineRefused

    db, _, _ = grid_db
    spec = _flaky_spec(True)
    spec["config"][0]["trigger"]["counters"]["iterations"] = 10  # every session compacts, so every cell fails
    with pytest.raises(BaselineRefused, match="3 of 3 cells .* failed"):
        regress(spec, baseline=tmp_path / "none.json", db=str(db), update=True)
    assert not (tmp_path / "none.json").exists()


def test_a_spec_with_tolerances_never_passes_having_checked_nothing(grid_db, tmp_path, flaky_kind):
    """`summaries = "exact"` over configs that summarize nothing compares no snapshot: that is no pass."""
    db, _, _ = grid_db
    spec = _flaky_spec(False, {"summaries": "exact"})
    baseline = tmp_path / "exact.json"
    regress(spec, baseline=baseline, db=str(db), update=True)
    report = regress(spec, baseline=baseline, db=str(db))
    assert report.checks == 0 and not report.ok
    assert report.text().splitlines()[:2] == [
        f"FAIL: flaky-gate against {baseline} (run {report.run_id})",
        "nothing was checked: neither the baseline nor the fresh run holds what the [regress] table names (summaries)",
    ]
    spec["regress"] = {}
    unregulated = regress(spec, baseline=baseline, db=str(db))
    assert unregulated.ok and "checked by default on task_state_coverage" in unregulated.text()


@pytest.mark.filterwarnings("ignore:cell .* failed:RuntimeWarning")
def test_regress_command_exits_1_on_failed_cells_and_2_on_a_bad_baseline(grid_db, tmp_path, flaky_kind):
    from click.testing import CliRunner

    from workbench.cli import main

    db, spec, _ = grid_db
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"metrics": {"clear-4": 5}}')
    result = CliRunner().invoke(main, ["regress", str(spec), "--baseline", str(bad), "--db", str(db)])
    assert result.exit_code == 2 and "error: " in result.output and "Traceback" not in result.output
    assert f"{bad}: not a baseline (metrics['clear-4'] is 5" in result.output
    unwritable = CliRunner().invoke(
        main, ["regress", str(spec), "--update", "--baseline", str(tmp_path), "--db", str(db), "--json"]
    )
    assert unwritable.exit_code == 2
    assert json.loads(unwritable.stdout)["error"]["message"].startswith(f"baseline {tmp_path} is a folder")
    flaky = tmp_path / "flaky-gate.toml"
    template = textwrap.dedent("""
        name = "flaky-gate"
        dataset = "grid"
        [defaults]
        context_limit = 100000
        [[config]]
        name = "keep"
        trigger = { kind = "stat_threshold", counters = { iterations = 25 } }
        strategy = { kind = "regress_test_flaky", fail = FAIL }
        [regress]
        billed_input_tokens = "+2%"
    """)
    flaky.write_text(template.replace("FAIL", "false"))
    assert CliRunner().invoke(main, ["regress", str(flaky), "--update", "--db", str(db)]).exit_code == 0
    flaky.write_text(template.replace("FAIL", "true"))
    checked = CliRunner().invoke(main, ["regress", str(flaky), "--db", str(db)])
    assert checked.exit_code == 1 and checked.stdout.startswith("FAIL: flaky-gate")
    assert f"`workbench run {flaky}` retries them" in checked.stdout
    refused = CliRunner().invoke(main, ["regress", str(flaky), "--update", "--db", str(db)])
    assert refused.exit_code == 1 and "error: baseline " in refused.output and "2 of 3 cells" in refused.output


def test_run_json_carries_every_number_at_full_precision(grid_db):
    """The text table may round; `run --json` must not (a cost below $0.00005 is not 0, 1,234.5 tokens not 1,234)."""
    from click.testing import CliRunner

    from workbench.cli import main
    from workbench.cli.experiments import _cell

    db, spec, _ = grid_db
    result = CliRunner().invoke(main, ["run", str(spec), "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    printed = pd.DataFrame(json.loads(result.stdout)["results"])
    stored = run_experiment(spec, db=str(db)).results
    ratio = stored["compression_ratio"].astype(float)
    assert (ratio.round(4) != ratio).any()  # the grid has ratios with more than 4 decimals
    assert printed["compression_ratio"].tolist() == ratio.tolist()
    assert [_cell(v) for v in (0.00001234, 1234.5678, 2.0, float("nan"), float("inf"))] == [
        0.00001234,
        1234.5678,
        2,
        None,
        None,
    ]


# -- complete pairs: comparisons on the sessions where every config completed ----------------------------------


def ended(rows: list[tuple[str, str, int, str]]) -> pd.DataFrame:
    """Cells from (session, config, repeat, termination); the billed tokens count the rows."""
    return pd.DataFrame(
        [
            {"session_id": s, "config": c, "repeat": r, "termination": t, "billed_input_tokens": i}
            for i, (s, c, r, t) in enumerate(rows)
        ]
    )


OK, OVERFLOW, FAILED = "completed", "context_overflow", "compaction_failed"


@pytest.mark.parametrize(
    ("rows", "sessions", "left_out", "rankable", "scope"),
    [
        # every config completed every session: nothing left out, nothing to say
        (
            [("s1", "a", 0, OK), ("s1", "b", 0, OK), ("s2", "a", 0, OK), ("s2", "b", 0, OK)],
            2,
            {"a": {}, "b": {}},
            ("a", "b"),
            "on 2 of 2 sessions where every config completed",
        ),
        # b stopped on s2 in one of its two repeats: the whole session is left out
        (
            [("s1", "a", 0, OK), ("s1", "b", 0, OK), ("s2", "a", 0, OK), ("s2", "b", 0, OK), ("s2", "b", 1, OVERFLOW)],
            1,
            {"a": {}, "b": {OVERFLOW: 1}},
            ("a",),
            "on 1 of 2 sessions where every config completed",
        ),
        # b has no cell of s2 (a failed cell); a stopped on s3 in another way
        (
            [("s1", "a", 0, OK), ("s1", "b", 0, OK), ("s2", "a", 0, OK), ("s3", "a", 0, FAILED), ("s3", "b", 0, OK)],
            1,
            {"a": {FAILED: 1}, "b": {NO_RESULT: 1}},
            (),
            "on 1 of 3 sessions where every config completed",
        ),
        # no session where both completed: every session is compared, and the note says so
        (
            [("s1", "a", 0, OK), ("s1", "b", 0, OVERFLOW), ("s2", "a", 0, OVERFLOW), ("s2", "b", 0, OVERFLOW)],
            0,
            {"a": {OVERFLOW: 1}, "b": {OVERFLOW: 2}},
            ("a",),
            "on all 2 sessions: none where every config completed, replays that stopped early included",
        ),
    ],
)
def test_complete_pairs_keeps_the_sessions_every_config_completed(rows, sessions, left_out, rankable, scope):
    frame = ended(rows)
    pairs = complete_pairs(frame)
    assert (pairs.sessions, pairs.left_out, pairs.rankable, pairs.scope) == (sessions, left_out, rankable, scope)
    kept = frame[pairs.in_complete_pairs]
    assert set(kept["session_id"]) == set(pairs.complete_units)
    assert len(pairs.results) == (len(kept) if sessions else len(frame))  # none complete: every row compared
    assert (pairs.note is None) == (not any(left_out.values()))


def test_the_note_counts_each_config_and_how_its_sessions_ended():
    frame = ended(
        [(f"s{i}", "window-20", 0, OK if i < 7 else OVERFLOW) for i in range(12)]
        + [(f"s{i}", "window-40", 0, OK if i < 3 else OVERFLOW if i < 10 else FAILED) for i in range(12)]
    )
    assert complete_pairs(frame).note == (
        "Compared on 3 of 12 sessions where every config completed; left out: window-20 5 (context_overflow), "
        f"window-40 9 (context_overflow 7, compaction_failed 2). {STOPPED_EARLY}"
    )
    assert complete_pairs(frame, complete_only=False).note.startswith(
        "Compared on all 12 sessions, replays that stopped early included; stopped early: window-20 5"
    )
    assert complete_pairs(frame, ["window-20"]).note.startswith("Compared on 7 of 12 sessions")  # the configs asked
    assert complete_pairs(frame.drop(columns="termination")).note is None  # ad-hoc frames: every cell counts


@pytest.fixture
def early_run(early_stop_db):
    db, spec = early_stop_db
    return db, spec, run_experiment(spec, db=str(db))


def test_a_run_with_early_stops_is_compared_on_its_complete_sessions(early_run, tmp_path):
    """`raw` overflows on the two long sessions: over every session it bills less than `clear`, which
    completed them; the leaderboard, compare and the exports take the short session both completed."""
    from workbench.experiments import charts

    db, _, run = early_run
    frame = run.results
    every = charts.leaderboard(frame, complete_only=False)
    assert every.loc["raw", "billed_input_tokens"] < every.loc["clear", "billed_input_tokens"]  # looks cheap
    pairs = complete_pairs(frame)
    assert (pairs.sessions, pairs.total, pairs.left_out, pairs.rankable) == (
        1,
        3,
        {"clear": {}, "raw": {OVERFLOW: 2}},
        ("clear",),
    )
    board = charts.leaderboard(frame)
    short = frame[frame["calls"] == frame["calls"].min()]
    assert list(board["billed_input_tokens"]) == list(short["billed_input_tokens"])
    result = compare(run.id, db=str(db))
    assert (result.sessions, result.metric("billed_input_tokens").pairs) == (1, 1)
    assert result.stopped_note.startswith(
        "Compared on 1 of 3 sessions where both sides completed; left out: raw 2 (context_overflow)."
    )
    assert compare(run.id, db=str(db), complete_only=False).metric("billed_input_tokens").pairs == 3
    cells = pd.read_csv(export(run.id, "csv", tmp_path / "r.csv", db=str(db)))
    assert len(cells) == 6 and cells.columns[list(cells.columns).index("termination") + 1] == "in_complete_pairs"
    assert sorted(cells.loc[cells["in_complete_pairs"], "config"]) == ["clear", "raw"]
    assert (
        pd.read_parquet(export(run.id, "parquet", tmp_path / "r.parquet", db=str(db)))["in_complete_pairs"].sum() == 2
    )
    calls = pd.read_csv(export(run.id, "csv", tmp_path / "calls.csv", db=str(db), level="calls"))
    assert calls["in_complete_pairs"].sum() == short["calls"].sum()
    document = json.loads(export(run.id, "json", tmp_path / "r.json", db=str(db)).read_text())
    assert document["complete_pairs"]["note"] == pairs.note
    assert [row["in_complete_pairs"] for row in document["results"]].count(True) == 2
    for complete_only in (True, False):
        report = export(run.id, "html", tmp_path / "r.html", db=str(db), complete_only=complete_only).read_text()
        assert complete_pairs(frame, complete_only=complete_only).note in report
        raw_row = report[report.index('<td class="text">raw</td>') :].split("</tr>")[0]
        assert 'class="best"' not in raw_row  # fewer sessions completed: never the best mark


def test_regress_compares_on_the_complete_sessions_and_fails_when_fewer_complete(early_stop_db):
    db, spec = early_stop_db
    report = regress(spec, db=str(db), update=True)
    baseline = json.loads(report.baseline_path.read_text())
    assert baseline["complete_pairs"]["early"]["sessions"] == 1
    assert baseline["complete_pairs"]["early"]["left_out"] == {"raw": {OVERFLOW: 2}}
    billed = {config: values["early"]["billed_input_tokens"] for config, values in baseline["metrics"].items()}
    assert billed["raw"] == billed["clear"]  # the short session, which neither compacts
    checked = regress(spec, db=str(db))
    assert checked.ok and any("Compared on 1 of 3 sessions" in line for line in checked.notes)
    baseline["complete_pairs"]["early"]["sessions"] = 2  # as if raw had completed one more session before
    report.baseline_path.write_text(json.dumps(baseline))
    worse = regress(spec, db=str(db))
    assert not worse.ok and worse.problems == [
        "early: every config completed 1 of 3 sessions, 2 in the baseline, so a config now stops early where it "
        "completed (the means cover fewer sessions)"
    ]
