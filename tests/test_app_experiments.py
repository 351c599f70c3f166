"""The Experiments page over a real stored run: runs, leaderboard, cost versus quality, paired comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_support import build_database, page_script
from streamlit.testing.v1 import AppTest

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
    assert len(at.get("download_button")) == 1


def test_cost_quality_chart_with_the_pareto_front(run_db, monkeypatch):
    path, _, _ = run_db
    at = open_page(path, monkeypatch)
    charts = at.get("plotly_chart")
    assert len(charts) == 1
    data = json.loads(charts[0].proto.spec)["data"]
    assert [t.get("name") for t in data] == ["configs", "Pareto front"]
    assert list(data[0]["text"]) == ["window", "masking"]  # a point per config


def test_a_run_summarized_offline_is_labelled_under_its_leaderboard(run_db, tmp_path, monkeypatch):
    from workbench.experiments import run_experiment

    path, _, _ = run_db
    assert not any("offline extractive" in c.value for c in open_page(path, monkeypatch).caption)  # no summaries
    own = build_database(str(tmp_path / "wb.duckdb"))
    spec = tmp_path / "split.toml"
    split = 'strategy = { kind = "summarize_split", preserve = 0.4 }'
    spec.write_text(SPEC.replace('name = "app-grid"', 'name = "split"').replace(
        'strategy = { kind = "sliding_window", window = 6 }', split))
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


def test_launching_a_pasted_spec_runs_in_a_worker_and_lists_the_run(tmp_path, monkeypatch):
    path = build_database(str(tmp_path / "wb.duckdb"))
    at = open_page(path, monkeypatch)
    assert any("workbench run" in i.value for i in at.info)
    at.radio(key="exp_source").set_value("paste TOML").run()
    at.text_area(key="exp_spec_text").input(TINY).run()
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
