"""A stored cell opened (`workbench.experiments.drill`), the report's figures and the exports as bytes."""

from __future__ import annotations

import dataclasses
import io
import json
import tomllib

import pandas as pd
import pytest
from builders import conversation

from workbench.errors import ConfigError, StoreError
from workbench.session import Session

pytestmark = pytest.mark.slow  # stored runs drilled into, cell by cell


SPEC = """
name = "drill-grid"
dataset = "generated"

[defaults]
context_limit = 2000
max_output = 200

[[config]]
name = "masking"
trigger = { kind = "utilization", ratio = 0.5 }
strategy = { kind = "observation_masking", keep_recent = 2 }

[[config]]
name = "split"
trigger = { kind = "utilization", ratio = 0.5 }
strategy = { kind = "summarize_split", preserve = 0.4 }
"""


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    from workbench.experiments import run_experiment
    from workbench.store import Store

    path = str(tmp_path_factory.mktemp("drill") / "wb.duckdb")
    sessions = [
        Session.from_messages(conversation(n, result_chars=400), id=f"generated-{n}", dataset="generated")
        for n in (10, 14)
    ]
    with Store(path) as store:
        store.import_sessions(sessions)
    run = run_experiment(tomllib.loads(SPEC), db=path, concurrency=1)
    return path, run


def test_cell_keys_follow_the_results_and_a_stored_cell_holds_its_own_rows(grid):
    from workbench.experiments.drill import CellKey, cell_keys, stored_cell

    path, run = grid
    keys = cell_keys(run.results)
    assert len(keys) == 4 and CellKey("generated-14", "split", 0) in keys
    cell = stored_cell(run.id, CellKey("generated-14", "split", 0), db=path)
    row = run.results.set_index(["session_id", "config"]).loc[("generated-14", "split")]
    assert len(cell.calls) == row["calls"] and set(cell.calls["config"]) == {"split"}
    assert len(cell.changed_compactions()) == row["compactions"] > 0
    assert cell.metrics["billed_input_tokens"] == row["billed_input_tokens"]
    assert cell.context_limit == 2000 and cell.termination == row["termination"]
    table = cell.metrics_table().set_index("metric")
    assert table.loc["billed_input_tokens", "better"] == "lower"
    assert table.loc["fact_retention", "better"] == "higher"
    assert "session_id" not in table.index and "duration_s" not in table.index
    with pytest.raises(StoreError, match="no cell"):
        stored_cell(run.id, CellKey("generated-14", "nothing", 0), db=path)


def test_the_cell_figure_is_its_token_curve_with_a_marker_per_compaction(grid):
    from workbench.experiments.drill import CellKey, stored_cell

    path, run = grid
    cell = stored_cell(run.id, CellKey("generated-14", "masking", 0), db=path)
    traces = {trace.name: trace for trace in cell.figure().data}
    assert list(traces["masking"].y) == list(cell.calls["context_tokens"])
    assert list(traces["masking compactions"].x) == list(cell.changed_compactions()["call_index"])
    assert "generated-14" in cell.figure().layout.title.text


def test_a_replayed_cell_opens_the_compactions_the_run_stored(grid):
    from workbench.experiments.drill import CellKey, cell_compaction, replay_cell, stored_cell

    path, run = grid
    cell = stored_cell(run.id, CellKey("generated-14", "split", 0), db=path)
    result = replay_cell(cell, path)
    first = int(cell.changed_compactions()["event_index"].iloc[0])
    opened = cell_compaction(cell, result, first)
    assert opened.matches and opened.note is None
    assert opened.view.summary == cell.compactions.loc[cell.compactions["event_index"] == first, "summary"].iloc[0]
    assert opened.view.replaced and not opened.view.edits
    stored = {row.metric: row.value for row in opened.view.quality}
    assert stored["fact_retention"] == pytest.approx(cell.details(first)["fact_retention"])

    changed = cell.compactions.copy()
    changed.loc[changed["event_index"] == first, "tokens_after"] += 1
    drifted = cell_compaction(dataclasses.replace(cell, compactions=changed), result, first)
    assert not drifted.matches and "tokens after" in (drifted.note or "")


def test_each_export_format_comes_back_as_the_bytes_of_its_file(grid):
    from workbench.experiments.export import export_bytes

    path, run = grid
    csv = pd.read_csv(io.BytesIO(export_bytes(run.id, "csv", db=path)))
    assert len(csv) == len(run.results) and "in_complete_pairs" in csv.columns
    parquet = pd.read_parquet(io.BytesIO(export_bytes(run.id, "parquet", db=path)))
    assert list(parquet["config"]) == list(csv["config"])
    document = json.loads(export_bytes(run.id, "json", db=path))
    assert document["run"]["id"] == run.id and len(document["results"]) == len(run.results)
    report = export_bytes(run.id, "html", db=path).decode()
    assert "drill-grid" in report and report.startswith("<!DOCTYPE html>")
    with pytest.raises(ConfigError, match="unknown export format"):
        export_bytes(run.id, "xlsx", db=path)


def test_the_run_figures_are_the_report_s(grid):
    from workbench.experiments.export import COST_QUALITY_SECTION, TOKENS_SECTION, export_bytes, run_figures

    path, run = grid
    figures = run_figures(run.id, path)
    sections = [section for section, _ in figures]
    assert sections == [COST_QUALITY_SECTION, TOKENS_SECTION, TOKENS_SECTION]  # two sessions
    report = export_bytes(run.id, "html", db=path).decode()
    assert report.count('class="plotly-graph-div"') == len(figures)
    assert [f.layout.title.text for _, f in figures[1:]] == ["session generated-14", "session generated-10"]


def test_a_cell_summarized_by_a_model_replays_from_the_stored_answers_without_asking_it(tmp_path):
    """The run's summaries are in the database's model cache: opening a compaction replays the cell from a
    read-only snapshot of it, and the model is not asked again."""
    from workbench.experiments import run_experiment
    from workbench.experiments.drill import CellKey, cell_compaction, replay_cell, stored_cell
    from workbench.store import Store
    from workbench.testing import FakeOpenAI

    path = str(tmp_path / "wb.duckdb")
    with Store(path) as store:
        store.import_sessions([Session.from_messages(conversation(14, result_chars=400), id="g14", dataset="g")])
    with FakeOpenAI(responder=lambda body: "summary: the failing test in src/app.py") as server:
        options = {"api_base": server.api_base, "api_key": "sk-test-dummy"}
        spec = {
            "name": "modelled",
            "dataset": "g",
            "defaults": {
                "context_limit": 2000,
                "max_output": 200,
                "summarizer": "openai/s",
                "summarizer_options": options,
            },
            "config": [
                {
                    "name": "split",
                    "trigger": {"kind": "utilization", "ratio": 0.5},
                    "strategy": {"kind": "summarize_split", "preserve": 0.4},
                }
            ],
        }
        run = run_experiment(spec, db=path, concurrency=1)
        asked = server.request_count
        assert asked > 0
        cell = stored_cell(run.id, CellKey("g14", "split", 0), db=path)
        result = replay_cell(cell, path)
        assert server.request_count == asked
    first = int(cell.changed_compactions()["event_index"].iloc[0])
    opened = cell_compaction(cell, result, first)
    assert opened.matches and (opened.view.summary or "").endswith("summary: the failing test in src/app.py")
    assert opened.view.lost_facts and all(fact.source is not None for fact in opened.view.lost_facts)
