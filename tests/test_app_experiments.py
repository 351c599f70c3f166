"""The Experiments page over a real stored run: runs, leaderboard, cost versus quality, paired comparison."""

from __future__ import annotations

import base64
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from app_support import APP, build_database, page_script
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.slow  # the app's Experiments page over stored runs (AppTest)


SPEC = """
name = "app-grid"
dataset = "samples"

[defaults]
context_limit = 6000
max_output = 500

[[config]]
name = "window"
trigger = { kind = "utilization", ratio = 0.5 }
strategy = { kind = "sliding_window", window = 6 }

[[config]]
name = "masking"
trigger = { kind = "utilization", ratio = 0.5 }
strategy = { kind = "observation_masking", keep_recent = 4 }
"""


@pytest.fixture(scope="module")
def run_db(tmp_path_factory):
    from workbench.experiments import run_experiment

    folder = tmp_path_factory.mktemp("experiments")
    path = build_database(str(folder / "wb.duckdb"))
    spec = folder / "app-grid.toml"
    spec.write_text(SPEC)
    run = run_experiment(str(spec), db=path, concurrency=1)
    other = folder / "app-grid-b.toml"
    other.write_text(SPEC.replace('name = "app-grid"', 'name = "app-grid-b"').replace("window = 6", "window = 3"))
    later = run_experiment(str(other), db=path, concurrency=1)
    return path, run.id, later.id


def open_page(path: str, monkeypatch) -> AppTest:
    monkeypatch.setenv("WORKBENCH_DB", path)
    at = AppTest.from_string(page_script("experiments"), default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def test_runs_leaderboard_and_comparison(run_db, monkeypatch):
    path, earlier, run_id = run_db
    at = open_page(path, monkeypatch)
    assert list(at.dataframe[0].value["id"]) == [run_id, earlier]  # newest first, selected by default
    board = at.dataframe[1].value
    assert list(board.index) == ["window", "masking"]
    assert "billed_input_tokens" in board.columns
    comparison = at.dataframe[3].value
    assert "billed_input_tokens" in set(comparison["metric"])
    at.selectbox(key=f"exp_drill:{run_id}").set_value("masking").run()
    assert not at.exception
    assert set(at.dataframe[2].value["config"]) == {"masking"}
    at.selectbox(key=f"exp_b:{run_id}").set_value("window").run()
    assert any("different" in i.value for i in at.info)


def test_two_runs_compare_and_the_report_downloads(run_db, monkeypatch):
    path, earlier, run_id = run_db
    at = open_page(path, monkeypatch)
    at.radio(key=f"exp_mode:{run_id}").set_value("this run with another run").run()
    assert not at.exception and not at.error
    assert at.selectbox(key=f"exp_other:{run_id}").value == earlier
    table = at.dataframe[-1].value
    assert "compactions" in set(table["metric"])
    at.button(key=f"exp_report:{run_id}").click().run()
    assert not at.exception and not at.error
    assert len(at.get("download_button")) == 4  # csv, parquet, json, html


def chart_traces(at: AppTest, key: str = "exp_scatter:") -> dict[str, Any]:
    """The traces of the page's one chart whose key starts with `key` (by default cost versus quality), by
    name, as plotly objects (arrays are sent as typed binary)."""
    import plotly.graph_objects as go

    def decoded(value: Any) -> Any:
        if isinstance(value, dict) and "bdata" in value:
            return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
        if isinstance(value, dict):
            return {k: decoded(v) for k, v in value.items()}
        return [decoded(v) for v in value] if isinstance(value, list) else value

    charts = [chart for chart in at.get("plotly_chart") if (chart.key or "").startswith(key)]
    assert len(charts) == 1
    figure = go.Figure(decoded(json.loads(charts[0].proto.spec)))
    return {t.name: t for t in figure.data}


def test_cost_quality_chart_with_the_pareto_front(run_db, monkeypatch):
    """At 6000 tokens most replays overflow under both configs: the page compares them on the sessions
    both completed, says so under the leaderboard (the sentence the CLI and the report print), and only a
    config that completed every session the other did is drawn filled and on the front."""
    from workbench.experiments import results
    from workbench.experiments.charts import completion
    from workbench.experiments.compare import complete_pairs

    path, _, run_id = run_db
    at = open_page(path, monkeypatch)
    traces = chart_traces(at)
    frame = results(run_id, path)
    done = completion(frame)
    assert (done["completed"] < done["cells"]).all()
    pairs = complete_pairs(frame)
    assert 0 < pairs.sessions < pairs.total and pairs.note in [w.value for w in at.warning]
    assert [t.split("<br>")[0] for t in traces["configs"].text] == ["window", "masking"]
    assert list(traces["configs"].marker.symbol) == [
        "circle" if c in pairs.rankable else "circle-open" for c in ("window", "masking")
    ]
    means = pairs.results.groupby("config", sort=False)["billed_input_tokens"].mean()
    assert list(traces["configs"].x) == pytest.approx([means["window"], means["masking"]])
    if "Pareto front" in traces:
        assert set(traces["Pareto front"].x) <= {means[c] for c in pairs.rankable}
    at.checkbox(key=f"exp_all_sessions:{run_id}").check().run()
    assert complete_pairs(frame, complete_only=False).note in [w.value for w in at.warning]
    every = frame.groupby("config", sort=False)["billed_input_tokens"].mean()
    assert list(chart_traces(at)["configs"].x) == pytest.approx([every["window"], every["masking"]])


MIXED = SPEC.replace('name = "app-grid"', 'name = "mixed"').replace("context_limit = 6000", "context_limit = 12000")
ELSEWHERE = """
name = "elsewhere"
dataset = "samples"

[[config]]
name = "clear"
context_limit = 12000
max_output = 500
trigger = { kind = "utilization", ratio = 0.5 }
strategy = { kind = "hard_clear", keep_recent = 6 }
"""


@pytest.fixture(scope="module")
def mixed_db(tmp_path_factory):
    """At 12000 tokens the window completes every session while masking overflows on some; a later run
    has a config of its own only."""
    from workbench.experiments import run_experiment

    folder = tmp_path_factory.mktemp("mixed")
    path = build_database(str(folder / "wb.duckdb"))
    mixed = run_experiment(tomllib.loads(MIXED), db=path, concurrency=1)
    elsewhere = run_experiment(tomllib.loads(ELSEWHERE), db=path, concurrency=1)
    return path, mixed.id, elsewhere.id


def test_a_config_cut_short_is_hollow_and_off_the_front_even_when_it_looks_cheapest(mixed_db, monkeypatch):
    from workbench.experiments import results
    from workbench.experiments.charts import completion

    path, mixed, _ = mixed_db
    frame = results(mixed, path)
    done = completion(frame)
    assert done.loc["window", "completed"] == done.loc["window", "cells"]
    k, n = done.loc["masking", "completed"], done.loc["masking", "cells"]
    assert 0 < k < n
    masking = frame[frame["config"] == "masking"]["billed_input_tokens"].mean()
    assert masking < frame[frame["config"] == "window"]["billed_input_tokens"].mean()  # cut short: it looks cheap
    at = open_page(path, monkeypatch)
    at.selectbox(key="exp_run").set_value(mixed).run()
    assert not at.exception and not at.error
    traces = chart_traces(at)
    points = traces["configs"]
    assert list(points.marker.symbol) == ["circle", "circle-open"]
    assert points.text[1] == f"masking<br>({k} of {n} completed)"
    front = traces["Pareto front"]
    assert list(front.x) == [points.x[0]] and "markers" in front.mode  # the window alone: a ring, not a line


def test_two_runs_without_a_common_config_say_so_instead_of_an_empty_table(mixed_db, monkeypatch):
    path, mixed, elsewhere = mixed_db
    at = open_page(path, monkeypatch)
    assert at.selectbox(key="exp_run").value == elsewhere
    tables = len(at.dataframe)
    at.radio(key=f"exp_mode:{elsewhere}").set_value("this run with another run").run()
    assert not at.exception and not at.error
    assert at.selectbox(key=f"exp_other:{elsewhere}").value == mixed
    assert len(at.dataframe) == tables  # no table of empty pairs
    [warning] = [w.value for w in at.warning]
    assert "share no configuration" in warning and "session + config + repeat" in warning
    assert "This run has clear" in warning and f"run {mixed} has window, masking" in warning


def test_compared_values_are_shown_in_their_metric_unit(run_db, monkeypatch):
    path, earlier, run_id = run_db
    at = open_page(path, monkeypatch)
    at.radio(key=f"exp_mode:{run_id}").set_value("this run with another run").run()
    table = at.dataframe[-1].value.set_index("metric")
    billed = table.loc["billed_input_tokens"]
    assert all(re.fullmatch(r"\d{1,3}(,\d{3})*", str(billed[c])) for c in ("A", "B")), billed  # whole tokens
    assert re.fullmatch(r"[+−]?\d{1,3}(,\d{3})*", str(billed["delta"])), billed
    assert re.fullmatch(r"\d\.\d{3}|<0\.001", str(billed["p_value"])), billed
    long = [
        v
        for v in table[["A", "B", "delta", "ci_low", "ci_high"]].to_numpy().ravel()
        if re.search(r"\.\d{4,}", str(v)) and not str(v).startswith(("$", "+$", "−$"))
    ]
    assert not long, long  # no 465096.6666666667
    assert any(
        re.match(r"\d+ paired (session|cell)", c.value) and "cells paired on session, config and repeat" in c.value
        for c in at.caption
    ), [c.value for c in at.caption]


def test_a_run_summarized_offline_is_labelled_under_its_leaderboard(run_db, tmp_path, monkeypatch):
    from workbench.experiments import run_experiment

    path, _, _ = run_db
    assert not any("offline extractive" in c.value for c in open_page(path, monkeypatch).caption)  # no summaries
    own = build_database(str(tmp_path / "wb.duckdb"))
    spec = tmp_path / "split.toml"
    split = 'strategy = { kind = "summarize_split", preserve = 0.4 }'
    spec.write_text(  # the one generated session, in a window small enough that it compacts
        SPEC.replace('name = "app-grid"', 'name = "split"')
        .replace('dataset = "samples"', 'dataset = "generated"')
        .replace("context_limit = 6000", "context_limit = 1500")
        .replace('strategy = { kind = "sliding_window", window = 6 }', split)
    )
    run_experiment(str(spec), db=own, concurrency=1)
    captions = [c.value for c in open_page(own, monkeypatch).caption]
    labelled = [c for c in captions if c.startswith("Summaries by workbench/extractive: the offline extractive")]
    assert len(labelled) == 2  # under the leaderboard, and under the comparison of its two configs


def test_database_without_runs_says_how_to_start_one(tmp_path, monkeypatch):
    path = build_database(str(tmp_path / "wb.duckdb"))
    at = open_page(path, monkeypatch)
    assert any("workbench run" in i.value for i in at.info)


TINY = """
name = "app-launch"
dataset = "generated"

[defaults]
context_limit = 3000
max_output = 300

[[config]]
name = "masking"
trigger = { kind = "utilization", ratio = 0.5 }
strategy = { kind = "observation_masking", keep_recent = 2 }
"""


def wait_for_jobs(at: AppTest, key: str = "exp_jobs") -> None:
    """Wait for every launched job (bounded), then rerun the page until it has taken note of them."""
    for job in at.session_state[key]:
        assert job.wait(timeout=120), f"the {job.label} job did not finish"
    for _ in range(3):
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        if all(job.announced for job in at.session_state[key]):
            return
    raise AssertionError("the page never took note of the finished job")


@pytest.mark.parametrize("executor", ["auto", "local", "processes"])
def test_launching_a_pasted_spec_runs_in_a_worker_and_lists_the_run(tmp_path, monkeypatch, executor):
    from workbench.experiments.process_executor import ProcessExecutor

    in_processes: list[int] = []
    computing = ProcessExecutor.map

    def spied(self, work, tasks):
        in_processes.append(1)
        return computing(self, work, tasks)

    monkeypatch.setattr(ProcessExecutor, "map", spied)
    path = build_database(str(tmp_path / "wb.duckdb"))
    at = open_page(path, monkeypatch)
    assert any("workbench run" in i.value for i in at.info)
    at.radio(key="exp_source").set_value("paste TOML").run()
    at.text_area(key="exp_spec_text").input(TINY).run()
    at.selectbox(key="exp_executor").set_value(executor).run()
    at.button(key="exp_launch").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    jobs = at.session_state["exp_jobs"]
    assert [job.label for job in jobs] == ["app-launch"]
    assert at.get("progress") or at.success  # the live bar, or the outcome when the worker was that quick
    wait_for_jobs(at)
    state = jobs[0].state()
    assert state.error is None and state.progress.cells_total == 1 and state.progress.cells_done == 1
    assert any("app-launch" in s.value and "1/1 cells" in s.value for s in at.success)
    listed = at.dataframe[0].value
    assert list(listed["name"]) == ["app-launch"]
    assert list(listed["cells_done"]) == [1]
    assert bool(in_processes) is (executor == "processes")
    said = [c.value for c in at.caption if c.value.startswith("Cells computed")]
    if executor == "auto":  # one small cell: the threads, and why
        assert len(said) == 1 and said[0].startswith("Cells computed in the app's process (auto: ")
        assert "messages to replay" in said[0]
    else:
        assert said == []


def test_an_invalid_pasted_spec_is_a_readable_error(tmp_path, monkeypatch):
    path = build_database(str(tmp_path / "wb.duckdb"))
    at = open_page(path, monkeypatch)
    at.radio(key="exp_source").set_value("paste TOML").run()
    at.text_area(key="exp_spec_text").input('name = "broken"\ndataset = "generated"\n[[config]]\nname = 3\n').run()
    at.button(key="exp_launch").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.error) == 1 and at.error[0].value.startswith("The spec is not valid:")
    assert "Traceback" not in at.error[0].value
    assert not at.session_state["exp_jobs"]


def test_the_shipped_specs_are_offered(tmp_path, monkeypatch):
    path = build_database(str(tmp_path / "wb.duckdb"))
    at = open_page(path, monkeypatch)
    offered = [Path(o).name for o in at.selectbox(key="exp_spec_file").options]
    assert {"window-sweep.toml", "reference-designs.toml"} <= set(offered)


def test_a_run_is_deleted_from_the_page_behind_a_second_click(tmp_path, monkeypatch):
    from workbench.experiments import run_experiment, runs

    path = build_database(str(tmp_path / "wb.duckdb"))
    spec = tmp_path / "app-grid.toml"
    spec.write_text(SPEC)
    run = run_experiment(str(spec), db=path, concurrency=1)
    at = open_page(path, monkeypatch)
    assert list(at.dataframe[0].value["id"]) == [run.id]
    at.button(key=f"exp_delete:{run.id}").click().run()
    assert not at.exception and not at.error
    assert runs(path).empty
    assert any("No experiment run yet" in i.value for i in at.info)
    assert [s.value for s in at.success] == [f"Deleted run {run.id} ({run.progress.cells_done} cells)."]


def shown_run_label(before, after) -> str:
    """The label the browser's "Run" box shows after a rerun: a widget it already has keeps the label the
    user saw unless the server sends a value (`set_value`); a new widget (another id) shows its default."""
    if after.id != before.id:
        return after.options[after.default]
    if after.set_value:
        return after.raw_value
    return before.raw_value if before.set_value else before.options[before.default]


def test_after_a_delete_the_run_box_shows_the_run_the_page_shows(tmp_path, monkeypatch):
    from workbench.experiments import run_experiment

    path = build_database(str(tmp_path / "wb.duckdb"))
    kept = run_experiment(tomllib.loads(TINY), db=path, concurrency=1)
    gone = run_experiment(tomllib.loads(TINY.replace("app-launch", "refcopy")), db=path, concurrency=1)
    at = open_page(path, monkeypatch)
    before = at.selectbox(key="exp_run")
    assert before.value == gone.id and shown_run_label(before.proto, before.proto).startswith("refcopy · ")
    at.button(key=f"exp_delete:{gone.id}").click().run()
    assert not at.exception and not at.error
    after = at.selectbox(key="exp_run")
    assert after.value == kept.id and list(after.options) == [after.options[0]]
    assert shown_run_label(before.proto, after.proto) == after.options[0]
    assert after.options[0].startswith("app-launch · ") and after.options[0].endswith(kept.id)
    assert list(at.dataframe[0].value["id"]) == [kept.id]
    assert at.selectbox(key=f"exp_drill:{kept.id}").value == "masking"  # the panels below are the kept run's


def test_a_cell_opens_with_its_curve_metrics_and_compactions(run_db, monkeypatch):
    """Pick a cell: its token curve with a marker per stored compaction, its metrics in their units, and
    each compaction in the compaction view (the cell replayed again from its stored config)."""
    from workbench.experiments import results
    from workbench.experiments.drill import CellKey, stored_cell

    path, _, run_id = run_db
    frame = results(run_id, path)
    compacted = frame[(frame["config"] == "masking") & (frame["compactions"] > 0)].iloc[0]
    key = CellKey(str(compacted["session_id"]), "masking", int(compacted["repeat"]))
    at = open_page(path, monkeypatch)
    at.selectbox(key=f"exp_drill:{run_id}").set_value("masking").run()
    at.selectbox(key=f"exp_cell:{run_id}:masking").set_value(key).run()
    assert not at.exception and not at.error, [e.value for e in at.exception]
    cell = stored_cell(run_id, key, db=path)
    traces = chart_traces(at, key="exp_cell_curve:")
    assert list(traces["masking"].y) == list(cell.calls["context_tokens"])
    assert list(traces["masking compactions"].x) == list(cell.changed_compactions()["call_index"])
    tables = [d.value for d in at.dataframe if list(d.value.columns) == ["metric", "value", "better"]]
    [metrics] = [t.set_index("metric") for t in tables if "billed_input_tokens" in set(t["metric"])]
    assert metrics.loc["billed_input_tokens", "value"] == f"{int(compacted['billed_input_tokens']):,}"
    assert metrics.loc["billed_input_tokens", "better"] == "↓ better"
    picker = next(box for box in at.selectbox if (box.key or "").startswith(f"exp_cell_compaction:{run_id}:"))
    assert len(picker.options) == int(compacted["compactions"])
    assert not any("differs from the stored one" in w.value for w in at.warning)
    headings = [m.value for m in at.markdown]
    assert any(h.startswith("**What it replaced (") for h in headings), headings
    assert any(code.language == "diff" and "hidden" in code.value for code in at.code)  # masking: a diff


def test_the_report_s_token_curves_show_in_the_page(run_db, monkeypatch):
    from workbench.experiments.export import TOKENS_SECTION, run_figures

    path, _, run_id = run_db
    at = open_page(path, monkeypatch)
    at.toggle(key=f"exp_report_charts:{run_id}").set_value(True).run()
    assert not at.exception and not at.error
    shown = [c for c in at.get("plotly_chart") if (c.key or "").startswith(f"exp_report_chart:{run_id}:")]
    expected = [f for section, f in run_figures(run_id, path) if section == TOKENS_SECTION]
    assert len(shown) == len(expected) == 4  # the report's four longest sessions
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in shown]
    assert titles == [f.layout.title.text for f in expected]


def test_each_download_of_a_run_is_a_file_of_its_format(run_db, monkeypatch):
    import io

    import pandas as pd
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    path, _, run_id = run_db
    files: dict[str, bytes] = {}
    keep = MemoryMediaFileStorage.load_and_get_id

    def recorded(self, data, mimetype, kind, filename=None):
        if filename:
            files[filename] = data
        return keep(self, data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", recorded)
    at = open_page(path, monkeypatch)
    at.button(key=f"exp_report:{run_id}").click().run()
    assert not at.exception and not at.error
    assert [b.label for b in at.get("download_button")] == ["CSV", "Parquet", "JSON", "HTML report"]
    cells = len(at.dataframe[2].value) * 2  # the first config's cells, twice: two configs
    table = pd.read_csv(io.BytesIO(files[f"run-{run_id}.csv"]))
    assert len(table) == cells and set(table["config"]) == {"window", "masking"}
    assert list(pd.read_parquet(io.BytesIO(files[f"run-{run_id}.parquet"]))["session_id"]) == list(table["session_id"])
    document = json.loads(files[f"run-{run_id}.json"])
    assert document["run"]["id"] == run_id and len(document["results"]) == cells
    report = files[f"run-{run_id}.html"].decode()
    assert "app-grid-b" in report and report.startswith("<!DOCTYPE html>")


def test_the_finished_banner_goes_when_another_run_is_shown(tmp_path, monkeypatch):
    from workbench.experiments import run_experiment

    path = build_database(str(tmp_path / "wb.duckdb"))
    earlier = run_experiment(tomllib.loads(TINY.replace("app-launch", "earlier")), db=path, concurrency=1)
    at = open_page(path, monkeypatch)
    at.radio(key="exp_source").set_value("paste TOML").run()
    at.text_area(key="exp_spec_text").input(TINY).run()
    at.button(key="exp_launch").click().run()
    wait_for_jobs(at)
    launched = at.session_state["exp_jobs"][0].state().result
    assert at.selectbox(key="exp_run").value == launched.id  # the run that just ended is shown
    assert any("app-launch" in s.value for s in at.success)
    at.selectbox(key="exp_run").set_value(earlier.id).run()
    assert not at.exception
    assert not any("app-launch" in s.value for s in at.success)


def test_a_pasted_spec_reports_every_problem_at_once(tmp_path, monkeypatch):
    path = build_database(str(tmp_path / "wb.duckdb"))
    at = open_page(path, monkeypatch)
    at.radio(key="exp_source").set_value("paste TOML").run()
    broken = 'name = "broken"\nrepeats = 0\n[[config]]\nname = 3\n[[config]]\nname = "w"\nstrategy = {kind = "nope"}\n'
    at.text_area(key="exp_spec_text").input(broken).run()
    at.button(key="exp_launch").click().run()
    assert not at.exception
    [error] = [e.value for e in at.error]
    assert error.startswith("The spec is not valid: 4 problems")
    for part in ("key 'dataset'", "config #1", "config 'w'", "key 'repeats'"):
        assert part in error, error


def test_a_worker_process_importing_the_page_starts_no_app(monkeypatch):
    """A run launched from the app with worker processes: each worker imports the page's file again
    (multiprocessing's `spawn` runs the parent's `__main__`, which Streamlit sets to the page, as
    `__mp_main__`); the page must not start a second app there."""
    import runpy

    import workbench.offline
    import workbench.ui.app

    started: list[str] = []
    monkeypatch.setattr(workbench.ui.app, "main", lambda: started.append("app"))
    monkeypatch.setattr(workbench.offline, "apply_defaults", lambda: started.append("defaults"))
    runpy.run_path(APP, run_name="__mp_main__")
    assert not started
    runpy.run_path(APP, run_name="__main__")  # as Streamlit runs it
    assert started == ["defaults", "app"]


def test_a_worker_process_imports_nothing_of_the_app_and_auto_may_start_workers_from_it(monkeypatch):
    """Workers run the page's top level (as `__mp_main__`) at their start: it imports neither Streamlit
    nor the pages, and only defines things, so `executor="auto"` may start workers from the app."""
    import subprocess
    import sys
    import types

    from workbench.experiments.process_executor import main_reruns_safely

    run_page = f"runpy.run_path({APP!r}, run_name='__mp_main__')"
    probe = f"import json, runpy, sys; {run_page}; print(json.dumps([*sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    imported = json.loads(done.stdout)
    assert not [m for m in imported if m.startswith(("streamlit", "workbench"))]
    page = types.ModuleType("__main__")
    page.__file__ = APP  # what Streamlit sets as `__main__` while it runs the page
    monkeypatch.setitem(sys.modules, "__main__", page)
    assert main_reruns_safely()
