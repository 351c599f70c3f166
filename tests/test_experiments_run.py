"""Experiment runs on a real DuckDB file: grid execution, stored results, resume, kill -9, replay --save."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import ConfigError
from workbench.experiments import dry_run, results, run_experiment, runs, save_replay
from workbench.experiments.run import code_version
from workbench.replay import replay
from workbench.store import Store

pytestmark = pytest.mark.slow  # whole experiment runs, killed and resumed


def test_a_run_stores_one_row_per_cell_with_every_metric(grid_db):
    db, spec, ids = grid_db
    seen = []
    run = run_experiment(spec, db=str(db), progress=lambda p: seen.append(p.cells_done))
    frame = run.results
    assert len(frame) == 3 * 3
    assert set(frame["config"]) == {"clear-4", "clear-12", "split"}
    assert set(frame["session_id"]) == set(ids)
    for column in ("billed_input_tokens", "peak_context_tokens", "compactions", "termination"):
        assert column in frame.columns
    assert (frame["compactions"] > 0).all()
    assert seen[-1] == 9
    # a smaller kept window bills fewer input tokens on every session
    by = frame.pivot(index="session_id", columns="config", values="billed_input_tokens")
    assert (by["clear-4"] < by["clear-12"]).all()
    listed = runs(str(db))
    assert listed.loc[0, "id"] == run.id and listed.loc[0, "status"] == "finished"
    assert listed.loc[0, "cells_done"] == 9


def test_stored_cells_match_a_direct_replay(grid_db):
    db, spec, ids = grid_db
    run = run_experiment(spec, db=str(db))
    with Store(str(db)) as store:
        session = store.load_session(ids[0])
    cell = run.spec.config("clear-4").config
    direct = replay(session, cell)
    row = run.results.query("session_id == @ids[0] and config == 'clear-4'").iloc[0]
    assert row["billed_input_tokens"] == direct.metrics["billed_input_tokens"]
    assert row["compactions"] == direct.metrics["compactions"]
    con = duckdb.connect(str(db))
    calls = con.execute(
        "SELECT count(*) FROM cell_calls WHERE run_id = ? AND session_id = ? AND config = 'clear-4'", [run.id, ids[0]]
    ).fetchall()[0][0]
    events = con.execute(
        "SELECT count(*), count(summary) FROM cell_compactions WHERE run_id = ? AND config = 'split'", [run.id]
    ).fetchall()[0]
    con.close()
    assert calls == len(direct.calls)
    assert events[0] > 0 and events[1] == events[0]


def test_a_second_run_resumes_with_every_cell_reused_and_no_model_call(grid_db):
    db, spec, _ = grid_db
    first = run_experiment(spec, db=str(db))
    second = run_experiment(spec, db=str(db))
    assert second.id == first.id
    assert second.progress.cells_reused == second.progress.cells_total == 9
    assert second.progress.model_calls == 0
    assert len(second.results) == 9


def test_a_fresh_run_reads_each_replays_measures_back_and_stores_the_same_cells(grid_db, monkeypatch):
    from run_support import stored_levels

    from workbench.quality import retention, task_state

    db, spec, ids = grid_db
    first = run_experiment(spec, db=str(db))
    assert first.progress.measures_reused == 0
    with Store(str(db)) as store:
        kept = store.results.stored_measures(ids, code_version()).num_rows
    assert kept == 9  # every cell compacts, each its own way
    expected = stored_levels(db, first.id)
    analysed: list[str] = []
    for module in (task_state, retention):
        original = module.analyse
        monkeypatch.setattr(module, "analyse", lambda r, f=original, n=module.__name__: analysed.append(n) or f(r))

    again = run_experiment(spec, db=str(db), fresh=True)
    assert again.progress.cells_reused == 0 and again.progress.measures_reused == 9
    assert "9 with their measures reused" in again.progress.line()
    assert analysed == [] and stored_levels(db, again.id) == expected

    remeasured = run_experiment(spec, db=str(db), fresh=True, remeasure=True)
    assert remeasured.progress.measures_reused == 0 and len(analysed) >= 9
    assert stored_levels(db, remeasured.id) == expected

    for flags, reused in ((["--fresh"], 9), (["--fresh", "--remeasure"], 0)):
        out = CliRunner().invoke(main, ["run", str(spec), "--db", str(db), "--json", *flags], catch_exceptions=False)
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["measures_reused"] == reused


def test_a_spec_with_a_config_added_reads_back_the_measures_of_the_configs_it_repeats(grid_db, tmp_path):
    db, spec, _ = grid_db
    run_experiment(spec, db=str(db))
    grown = tmp_path / "grown.toml"
    grown.write_text(
        spec.read_text().replace('name = "tiny-grid"', 'name = "grown-grid"')
        + '\n[[config]]\nname = "window"\ntrigger = { kind = "utilization", ratio = 0.5 }\n'
        + 'strategy = { kind = "sliding_window", window = 6 }\n'
    )
    run = run_experiment(grown, db=str(db))
    assert run.progress.cells_reused == 0 and run.progress.cells_done == 12  # another spec: another run
    assert run.progress.measures_reused == 9  # every cell of the three configs it repeats


def test_a_run_forgets_the_measures_of_other_code_versions_and_a_deleted_sessions(grid_db, monkeypatch):
    from workbench.experiments import run as runner

    db, spec, ids = grid_db
    run_experiment(spec, db=str(db))
    before = code_version()
    monkeypatch.setattr(runner, "code_version", lambda: "an edit later")
    edited = run_experiment(spec, db=str(db))
    assert edited.progress.cells_reused == 0 and edited.progress.measures_reused == 0  # another version: all anew
    with Store(str(db)) as store:
        assert store.results.stored_measures(ids, before).num_rows == 0
        assert store.results.stored_measures(ids, "an edit later").num_rows == 9
        store.delete_sessions(ids[:1])
        assert store.results.stored_measures(ids, "an edit later").num_rows == 6


def test_dry_run_lists_the_cells_without_running_them(grid_db):
    db, spec, _ = grid_db
    plan = dry_run(spec, db=str(db))
    assert plan["cells"] == 9 and plan["cells_to_run"] == 9 and plan["sessions"] == 3
    assert [c["config"] for c in plan["configs"]] == ["clear-4", "clear-12", "split"]
    assert [c["models"] for c in plan["configs"]] == [[], [], ["workbench/extractive"]]  # hard_clear calls no model
    assert (plan["executor"], plan["executor_reason"]) == (
        "local",
        "477 messages to replay: too few to pay for starting worker processes",
    )
    run_experiment(spec, db=str(db))
    again = dry_run(spec, db=str(db))
    assert (again["cells_to_run"], again["executor_reason"]) == (0, "no cell left to compute")
    assert plan["notes"] == []


def test_a_model_metric_without_an_evaluator_is_noted_before_and_after_the_run(grid_db, tmp_path):
    """probe_accuracy asked for on configs without an evaluator would be an empty column; the plan, the
    CLI's dry run and the spec say so, naming the configs, and say nothing once one is set."""
    db, spec, _ = grid_db
    asking = tmp_path / "asking.toml"
    asking.write_text('metrics = ["fact_retention", "probe_accuracy"]\n' + spec.read_text())
    plan = dry_run(asking, db=str(db))
    assert plan["notes"] == [
        "probe_accuracy needs an evaluator model (config key `evaluator`, e.g. in [defaults]); "
        "without one the column stays empty for clear-4, clear-12, split"
    ]
    shown = subprocess.run(
        [sys.executable, "-m", "workbench", "--db", str(db), "run", "--dry-run", str(asking)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "note: probe_accuracy needs an evaluator model" in shown.stderr
    asking.write_text(asking.read_text().replace("[defaults]\n", '[defaults]\nevaluator = "workbench/extractive"\n'))
    assert dry_run(asking, db=str(db))["notes"] == []


def test_an_empty_selection_names_the_datasets_there_are(grid_db, tmp_path):
    db, _, _ = grid_db
    config = [{"name": "a", "trigger": {"kind": "utilization"}, "strategy": {"kind": "trim"}}]
    with pytest.raises(ConfigError, match="no sessions in dataset.*nope.*grid$"):
        run_experiment({"name": "x", "dataset": "nope", "config": config}, db=str(db))
    with pytest.raises(ConfigError, match="datasets in the database: grid; did you mean 'grid'\\?$"):
        run_experiment({"name": "x", "dataset": "grdi", "config": config}, db=str(db))
    with pytest.raises(
        ConfigError, match="in dataset\\(s\\) samples; .*the bundled samples load with `workbench init --samples`$"
    ):
        run_experiment({"name": "x", "dataset": "samples", "config": config}, db=str(db))
    with pytest.raises(
        ConfigError, match="in dataset\\(s\\) grid matching 'calls > 999'; datasets in the database: grid$"
    ):  # no guess at a name that was right
        run_experiment({"name": "x", "dataset": "grid", "where": "calls > 999", "config": config}, db=str(db))
    with pytest.raises(
        ConfigError,
        match="experiment 'x', key 'where': the condition 'callz > 2' over the sessions "
        "cannot run: .*callz.*; columns: id, dataset, format",
    ):
        run_experiment({"name": "x", "dataset": "grid", "where": "callz > 2", "config": config}, db=str(db))


def test_repeats_are_separate_cells(grid_db):
    db, _, _ = grid_db
    run = run_experiment(
        {
            "name": "rep",
            "dataset": "grid",
            "repeats": 2,
            "config": [
                {
                    "name": "a",
                    "trigger": {"kind": "utilization", "ratio": 0.5},
                    "strategy": {"kind": "summarize_split"},
                    "context_limit": 6000,
                    "max_output": 500,
                }
            ],
        },
        db=str(db),
    )
    assert sorted(run.results["repeat"].unique()) == [0, 1]
    assert len(run.results) == 6


def test_save_replay_stores_a_one_cell_run(grid_db):
    db, spec, ids = grid_db
    with Store(str(db)) as store:
        session = store.load_session(ids[1])
    result = replay(
        session,
        {
            "trigger": {"kind": "utilization", "ratio": 0.5},
            "strategy": {"kind": "hard_clear", "keep_recent": 4},
            "context_limit": 6000,
            "max_output": 500,
        },
    )
    run_id = save_replay(result, str(db), dataset="grid")
    frame = results(run_id, str(db))
    assert len(frame) == 1 and frame.loc[0, "session_id"] == ids[1]
    assert frame.loc[0, "billed_input_tokens"] == result.metrics["billed_input_tokens"]


def test_cells_finishing_close_together_share_a_commit_and_closing_commits_at_once(grid_db, monkeypatch):
    """While cells keep finishing the writer commits at most once per `COMMIT_INTERVAL` (cells of one
    transaction share `finished_at`); a cell after a quiet spell is committed at once, and the end of
    the run commits what is pending without waiting for the interval."""
    import threading
    import time

    from workbench.experiments import run as run_module
    from workbench.experiments.run import LocalExecutor

    db, spec, _ = grid_db
    monkeypatch.setattr(run_module, "COMMIT_INTERVAL", 5.0)
    first_stored = threading.Event()

    class Burst(LocalExecutor):
        """Computes every cell, then hands over the first, waits until it is stored, and hands over
        the others 50 ms apart (each on its own, the writer would need far less than 50 ms)."""

        def map(self, work, tasks):
            outcomes = list(super().map(work, tasks))
            yield outcomes[0]
            assert first_stored.wait(10), "the first cell was not committed at once"
            for outcome in outcomes[1:]:
                time.sleep(0.05)
                yield outcome

    def progress(state):
        if state.cells_done >= 1:
            first_stored.set()

    run = run_experiment(spec, db=str(db), executor=Burst(2), progress=progress)
    assert run.progress.cells_done == 9 and run.progress.failed_cells == 0
    con = duckdb.connect(str(db))
    commits = con.execute("SELECT finished_at, count(*) FROM cells GROUP BY ALL ORDER BY finished_at").fetchall()
    con.close()
    assert [count for _, count in commits] == [1, 8]
    assert (commits[1][0] - commits[0][0]).total_seconds() < 5.0  # the run's end did not wait out the interval


KILLABLE = textwrap.dedent("""
    import sys, time
    from workbench.experiments import run_experiment
    from workbench.experiments.run import LocalExecutor

    class Slow(LocalExecutor):
        def map(self, work, tasks):
            for outcome in super().map(work, tasks):
                yield outcome
                time.sleep(0.15)

    def show(progress):
        print(f"done {progress.cells_done}", flush=True)

    run_experiment(sys.argv[1], db=sys.argv[2], executor=Slow(1), progress=show)
    print("finished", flush=True)
""")


def test_kill_9_mid_run_then_rerun_completes_with_no_duplicate_and_no_missing_cell(grid_db, tmp_path):
    db, spec, ids = grid_db
    script = tmp_path / "killable.py"
    script.write_text(KILLABLE)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    process = subprocess.Popen(
        [sys.executable, str(script), str(spec), str(db)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip() == "done 4":
            process.send_signal(signal.SIGKILL)
            break
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    con = duckdb.connect(str(db))
    partial = con.execute("SELECT count(*) FROM cells").fetchall()[0][0]
    con.close()
    assert 4 <= partial < 9
    run = run_experiment(spec, db=str(db))
    assert run.progress.cells_reused == partial
    con = duckdb.connect(str(db))
    rows = con.execute("SELECT session_id, config, repeat, count(*) FROM cells GROUP BY ALL").fetchall()
    calls = con.execute(
        "SELECT session_id, config, count(*), count(DISTINCT call_index) FROM cell_calls GROUP BY ALL"
    ).fetchall()
    con.close()
    assert len(rows) == 9 and all(count == 1 for *_, count in rows)
    assert all(total == distinct for *_, total, distinct in calls)


def test_the_model_limits_requests_while_twice_as_many_cells_are_in_flight(grid_db):
    """`concurrency` bounds the model calls; the executor keeps CELLS_PER_CALL_SLOT times as many cells
    going, so a cell's CPU work never holds one of the model's slots."""
    import threading

    from workbench.experiments.run import CELLS_PER_CALL_SLOT
    from workbench.testing import FakeOpenAI

    db, _, ids = grid_db
    cell_threads: list[int] = []

    def answer(body):
        cell_threads.append(sum(t.name.startswith("workbench-cell") for t in threading.enumerate()))
        return "summary: kept the file paths and the failing test"

    with FakeOpenAI(latency=0.3, responder=answer) as server:
        options = {"api_base": server.api_base, "api_key": "sk-test-dummy", "concurrency": 2}
        spec = {
            "name": "slots",
            "dataset": "grid",
            "concurrency": 2,
            "defaults": {"summarizer": "openai/slot-summarizer", "summarizer_options": options},
            "config": [
                {
                    "name": f"full-{n}",
                    "trigger": {"kind": "stat_threshold", "counters": {"iterations": n}},
                    "strategy": {"kind": "summarize_full"},
                }
                for n in (4, 6)
            ],
        }
        run = run_experiment(spec, db=str(db))
        assert run.progress.failed_cells == 0 and len(run.results) == 2 * len(ids)
        assert server.max_in_flight == 2  # reached, never exceeded
        assert max(cell_threads) == 2 * CELLS_PER_CALL_SLOT
        requests = server.request_count
        again = run_experiment(spec, db=str(db))
        assert again.progress.cells_reused == 2 * len(ids) and server.request_count == requests


def test_the_session_cache_reads_the_next_pending_sessions_together_and_keeps_only_pending_ones(grid_db):
    from workbench.experiments.cells import CellTask
    from workbench.experiments.run import _SessionCache

    db, _, ids = grid_db
    with Store(str(db)) as store:
        reads: list[list[str]] = []
        original = store.sessions_by_id
        store.sessions_by_id = lambda wanted: reads.append(list(wanted)) or original(wanted)  # type: ignore[method-assign]
        cache = _SessionCache(lambda: contextlib.nullcontext(store), batch=2)
        cache.expect([CellTask(s, "tiny", config, 0) for s in ids for config in ("a", "b")])
        first = cache.get(ids[0])
        assert first.id == ids[0] and reads == [[ids[0], ids[1]]]  # the next pending session came along
        assert cache.get(ids[1]).id == ids[1] and len(reads) == 1  # ...so this is no read
        for _ in range(2):
            cache.done(ids[0])
        assert len(cache) == 1  # a session leaves with its last cell
        assert cache.get(ids[2]).id == ids[2] and reads[-1] == [ids[2]]  # nothing else is pending
        assert cache.peak == 2
        assert cache.get(ids[0]).id == ids[0] and len(cache) == 2  # a repeated load is handed out, not kept


# -- model calls: the summarizer's and the evaluator's, through the run's gateway -----------------


def _answer(body):
    """The summarizer's and the evaluator's answers (the judge gets scores, a probe an honest UNKNOWN)."""
    from workbench.quality.judge import DIMENSIONS

    system = body["messages"][0]["content"]
    if system.startswith("You grade"):
        return json.dumps(dict.fromkeys(DIMENSIONS, 3))
    if system.startswith("You are being tested"):
        return "UNKNOWN"
    return "summary: kept src/app.py and the failing test"


def _judged_spec(server, metrics=("judge_score", "probe_accuracy")):
    priced = {
        "api_base": server.api_base,
        "api_key": "sk-test-dummy",
        "num_retries": 0,
        "input_cost_per_token": 1e-6,
        "output_cost_per_token": 2e-6,
    }
    return {
        "name": "judged",
        "dataset": "grid",
        "metrics": list(metrics),
        "concurrency": 2,
        "defaults": {
            "summarizer": "openai/run-summarizer",
            "summarizer_options": priced,
            "evaluator": "openai/run-judge",
            "evaluator_options": priced,
            "context_limit": 6000,
            "max_output": 500,
            "trigger": {"kind": "utilization", "ratio": 0.5},
        },
        "config": [
            {"name": "split", "strategy": {"kind": "summarize_split"}},
            {"name": "full", "strategy": {"kind": "summarize_full"}},
        ],
    }


@pytest.fixture
def other_process_default():
    """A fresh process-wide gateway, as a new process would have (restored after the test)."""
    from workbench.llm import Gateway, MemoryCache, set_default_gateway

    previous = set_default_gateway(Gateway(MemoryCache()))
    yield
    set_default_gateway(previous).close()


def test_evaluator_calls_are_cached_in_the_database_and_a_fresh_rerun_spends_nothing(
    grid_db, other_process_default, monkeypatch
):
    from workbench.llm import Gateway, MemoryCache, set_default_gateway
    from workbench.store import DuckDBCache
    from workbench.testing import FakeOpenAI

    db, _, ids = grid_db
    with FakeOpenAI(responder=_answer) as server:
        first = run_experiment(_judged_spec(server), db=str(db))
        asked = server.request_count
        assert first.status == "finished" and len(first.results) == 2 * len(ids)
        assert first.results["evaluator_calls"].sum() > 0 and first.results["summarizer_calls"].sum() > 0
        assert first.progress.model_calls == asked and first.progress.cost_usd > 0
        set_default_gateway(Gateway(MemoryCache())).close()  # nothing of the first run is left in memory
        queries = []
        select = DuckDBCache._select
        monkeypatch.setattr(DuckDBCache, "_select", lambda cache, keys: queries.append(keys) or select(cache, keys))
        again = run_experiment(_judged_spec(server), db=str(db), fresh=True)
        assert server.request_count == asked  # every answer, the evaluator's too, came from the database
        assert queries == []  # read once when the run started, not a query per question
    assert again.progress.cells_reused == 0 and again.progress.model_calls == 0
    assert again.progress.cost_usd == 0  # cache hits cost nothing, though the cells' cost metrics price them
    assert again.progress.cache_hits == first.progress.model_calls + first.progress.cache_hits
    assert again.results["cost_usd"].sum() == pytest.approx(first.results["cost_usd"].sum())


def test_the_run_reports_the_calls_hits_and_money_of_its_gateway(grid_db, other_process_default):
    from workbench.llm import Gateway, MemoryCache
    from workbench.testing import FakeOpenAI

    db, _, _ = grid_db
    with FakeOpenAI(responder=_answer) as server, Gateway(MemoryCache()) as gateway:
        run = run_experiment(_judged_spec(server), db=str(db), gateway=gateway)
        assert run.progress.model_calls == gateway.stats.calls == server.request_count
        assert run.progress.cache_hits == gateway.stats.cache_hits
        assert run.progress.cost_usd == pytest.approx(gateway.stats.cost_usd) and gateway.stats.cost_usd > 0
        evaluated = run.results[["evaluator_cost_usd", "cost_usd"]].sum()
        assert gateway.stats.cost_usd <= evaluated.sum() + 1e-12 and evaluated["evaluator_cost_usd"] > 0


def test_calls_at_unknown_prices_are_counted_apart_never_as_free(grid_db, other_process_default):
    from workbench.testing import FakeOpenAI

    db, _, _ = grid_db
    with FakeOpenAI(responder=_answer) as server:
        spec = _judged_spec(server)
        unpriced = {k: v for k, v in spec["defaults"]["evaluator_options"].items() if "cost" not in k}
        spec["defaults"] = {**spec["defaults"], "evaluator_options": unpriced}  # a judge LiteLLM cannot price
        run = run_experiment(spec, db=str(db))
    evaluated = int(run.results["evaluator_calls"].sum())
    assert evaluated > 0 and run.progress.unpriced_calls == evaluated
    assert run.progress.model_calls == server.request_count > evaluated  # the summarizer's are priced
    assert run.progress.cost_usd > 0 and run.results["evaluator_cost_usd"].isna().all()
    assert f"+ unknown for {evaluated} calls at unknown prices" in run.progress.line()


@pytest.mark.filterwarnings("ignore:metric 'judge_score' failed:RuntimeWarning")
def test_cells_whose_evaluator_failed_fail_and_a_resume_computes_them(grid_db, other_process_default):
    from workbench.testing import FakeOpenAI, Fault

    db, _, ids = grid_db
    down = {"judge": True}

    def answer(body):
        judging = body["messages"][0]["content"].startswith("You grade")
        return Fault.error(500, "judge unavailable") if judging and down["judge"] else _answer(body)

    with FakeOpenAI(responder=answer) as server:
        spec = _judged_spec(server, metrics=["judge_score"])
        failed = "EvaluatorFailed: evaluator 'openai/run-judge' failed.*judge unavailable"
        with pytest.warns(RuntimeWarning, match=failed):
            first = run_experiment(spec, db=str(db))
        assert first.status == "finished_with_errors" and first.progress.failed_cells == 2 * len(ids)
        assert first.progress.model_calls > 0  # the failed cells' summaries were paid for, and counted
        assert runs(str(db)).loc[0, "status"] == "finished_with_errors"
        down["judge"] = False
        second = run_experiment(spec, db=str(db))
    assert second.id == first.id and second.status == "finished"
    assert second.progress.cells_reused == 0 and second.progress.failed_cells == 0
    assert second.results["judge_score"].notna().all() and len(second.results) == 2 * len(ids)
    assert second.progress.cache_hits > 0  # the summaries came from the cache


# --------------------------------------------------------------------------------------------
# What a run reuses, and what its status says


def test_cells_whose_model_could_not_be_used_fail_and_a_resume_computes_them(grid_db, other_process_default):
    """A summarizer that cannot be reached stops every replay under on_failure = "fatal": that says
    nothing of the configuration, so the cells fail (not stored as results) and a resume retries them."""
    from workbench.testing import FakeOpenAI

    db, _, ids = grid_db
    with FakeOpenAI(responder=_answer) as server:
        spec = _judged_spec(server, metrics=[])
        api_base = server.api_base
    spec["defaults"]["summarizer_options"] = {**spec["defaults"]["summarizer_options"], "api_base": api_base}
    with pytest.warns(RuntimeWarning, match="ConnectionFailed.*the model could not be used"):
        down = run_experiment(spec, db=str(db))  # the server has stopped: nothing listens there
    assert down.status == "finished_with_errors" and down.progress.failed_cells == 2 * len(ids)
    assert "0/6 cells (0 reused, 6 failed)" in down.progress.line()
    with FakeOpenAI(responder=_answer) as server:
        spec["defaults"]["summarizer_options"]["api_base"] = server.api_base
        up = run_experiment(spec, db=str(db))
    assert up.status == "finished" and len(up.results) == 2 * len(ids)
    assert (up.results["termination"] != "compaction_failed").all()


def test_a_run_killed_while_running_is_listed_as_interrupted(grid_db, tmp_path):
    db, spec, _ = grid_db
    script = tmp_path / "dies.py"
    script.write_text(
        textwrap.dedent("""
        import os, sys
        import duckdb
        from workbench.store import RunResults
        con = duckdb.connect(sys.argv[1])
        RunResults(con).start_run("dead-run", name="dead", kind="experiment", spec={}, configs=[], code_version=None,
                          dataset_version=None, datasets=[], cells_total=3)
        con.close()
        os._exit(9)  # as kill -9 would: nothing records the end of the run
    """)
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    assert subprocess.run([sys.executable, str(script), str(db)], env=env).returncode == 9
    con = duckdb.connect(str(db))
    recorded = con.execute("SELECT status FROM runs WHERE id = 'dead-run'").fetchall()[0][0]
    con.close()
    assert recorded == "running" and runs(str(db)).set_index("id").loc["dead-run", "status"] == "interrupted"


def test_a_failing_progress_callback_stops_the_run_as_interrupted_and_keeps_its_cells(grid_db):
    db, spec, _ = grid_db

    def progress(state):
        if state.cells_done >= 2:
            raise RuntimeError("the notebook's progress widget broke")

    with pytest.raises(RuntimeError, match="progress widget broke"):
        run_experiment(spec, db=str(db), progress=progress)
    listed = runs(str(db))
    assert listed.loc[0, "status"] == "interrupted" and listed.loc[0, "cells_done"] >= 2  # what finished is kept
    again = run_experiment(spec, db=str(db))
    assert again.status == "finished" and again.progress.cells_reused == listed.loc[0, "cells_done"]


def test_a_misspelt_dataset_beside_a_good_one_is_refused(grid_db):
    db, _, _ = grid_db
    config = [{"name": "a", "trigger": {"kind": "utilization"}, "strategy": {"kind": "trim"}}]
    with pytest.raises(ConfigError, match="no dataset 'gird' in the database; datasets: grid; did you mean 'grid'"):
        run_experiment({"name": "x", "datasets": ["grid", "gird"], "config": config}, db=str(db))


def test_a_change_to_a_users_kind_is_another_run(grid_db):
    """A user's strategy changed (same name, other code) does not reuse the cells of the old one, in a
    run or in a saved replay: its source is part of the run's id."""
    from dataclasses import dataclass

    import workbench as wb
    from workbench.strategies.common import keep_last_fraction

    db, _, ids = grid_db
    spec = {
        "name": "mine",
        "dataset": "grid",
        "config": [
            {
                "name": "m",
                "trigger": {"kind": "utilization", "ratio": 0.5},
                "strategy": {"kind": "mine_run_test"},
                "context_limit": 6000,
                "max_output": 500,
            }
        ],
    }

    @dataclass(frozen=True)
    class KeepHalf:
        def compact(self, context, env):
            return keep_last_fraction(context, 0.5)

    @dataclass(frozen=True)
    class KeepFifth:
        def compact(self, context, env):
            return keep_last_fraction(context, 0.2)

    ran, saved = [], []
    try:
        for cls in (KeepHalf, KeepFifth):
            wb.register_strategy("mine_run_test")(cls)
            ran.append(run_experiment(spec, db=str(db)))
            with Store(str(db)) as store:
                session = store.load_session(ids[0])
            saved.append(save_replay(replay(session, spec["config"][0]), str(db)))
            wb.registry.unregister("strategy", "mine_run_test")
    finally:
        if "mine_run_test" in wb.registry.kinds("strategy"):
            wb.registry.unregister("strategy", "mine_run_test")
    assert ran[0].id != ran[1].id and ran[1].progress.cells_reused == 0
    assert saved[0] != saved[1]
    billed = [r.results["billed_input_tokens"].sum() for r in ran]
    assert billed[1] < billed[0]


def test_a_run_leaves_pandas_unimported(grid_db):
    """A run writes its cells as numpy columns: an Arrow table built from Python lists imports pandas,
    a fifth of a second that a command or a notebook not reading frames does not need."""
    db, spec, _ = grid_db
    script = textwrap.dedent(
        f"""
        import sys
        from workbench.experiments import run_experiment
        run = run_experiment({str(spec)!r}, db={str(db)!r}, executor="local")
        print(run.status, run.progress.cells_done, "pandas" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["finished", "9", "False"]


def test_every_uncommitted_change_to_the_package_is_another_code_version(tmp_path):
    from workbench import __version__
    from workbench.experiments.run import code_version

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    (tmp_path / "workbench").mkdir()
    module = tmp_path / "workbench" / "windows.py"
    module.write_text("WINDOW = 20\n")
    git("init", "-q")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "x", "--allow-empty")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "y")
    clean = code_version(tmp_path)
    assert clean.startswith(f"{__version__}+") and "dirty" not in clean
    module.write_text("WINDOW = 3\n")
    first = code_version(tmp_path)
    module.write_text("WINDOW = 4\n")
    second = code_version(tmp_path)
    assert first.startswith(f"{clean}.dirty-") and second.startswith(f"{clean}.dirty-") and first != second
    module.write_text("WINDOW = 3\n")
    assert code_version(tmp_path) == first


def test_a_users_metric_holding_nan_anywhere_is_stored_with_nulls(grid_db):
    """JSON has no NaN: a user's metric returning one inside a list or a compaction's details is stored
    with null there, instead of failing every cell's write."""
    from dataclasses import dataclass

    import workbench as wb

    @dataclass(frozen=True)
    class Gaps:
        def compute(self, result):
            return [1.0, float("nan")]

        def per_compaction(self, result):
            return [{"gap_scores": {"first": float("nan"), "all": [float("inf"), 2.0]}} for _ in result.compactions]

    wb.register_metric("gaps_run_test", direction="none", unit="scores", level="run")(Gaps)
    db, _, ids = grid_db
    try:
        run = run_experiment(
            {
                "name": "gaps",
                "dataset": "grid",
                "metrics": ["gaps_run_test"],
                "config": [
                    {
                        "name": "c",
                        "trigger": {"kind": "utilization", "ratio": 0.5},
                        "strategy": {"kind": "hard_clear", "keep_recent": 4},
                        "context_limit": 6000,
                        "max_output": 500,
                    }
                ],
            },
            db=str(db),
        )
    finally:
        wb.registry.unregister("metric", "gaps_run_test")
    assert run.status == "finished" and len(run.results) == len(ids)
    assert all(list(value) == [1.0, None] for value in run.results["gaps_run_test"])
    con = duckdb.connect(str(db))
    stored = [
        json.loads(d)
        for (d,) in con.execute("SELECT details FROM cell_compactions WHERE run_id = ?", [run.id]).fetchall()
    ]
    con.close()
    assert stored and all(d["gap_scores"] == {"first": None, "all": [None, 2.0]} for d in stored)


# -- configs that never change a context ------------------------------------------------------------

NOOP_SPEC = {
    "name": "noop-grid",
    "dataset": "chats",
    "defaults": {"context_limit": 20000, "max_output": 500},
    "config": [
        {
            "name": "mask",
            "trigger": {"kind": "pressure", "turns": 1},
            "strategy": {"kind": "observation_masking", "keep_recent": 2},
        },
        {
            "name": "window",
            "trigger": {"kind": "pressure", "turns": 1},
            "strategy": {"kind": "sliding_window", "window": 2},
        },
        {
            "name": "never",
            "trigger": {"kind": "token_threshold", "threshold": 0},
            "strategy": {"kind": "observation_masking"},
        },
    ],
}


@pytest.fixture
def chats_db(tmp_path):
    """Two sessions (dataset `chats`) without a tool result or an observation: nothing to mask."""
    from builders import assistant, system, user

    from workbench.session import Session

    def chat(turns):
        messages = [system(), user(f"Plan the migration of service {turns}")]
        for i in range(turns):
            messages += [assistant(f"thought {i}: " + "weighing the schema " * 15), user(f"go on with part {i}")]
        return Session.from_messages(messages, dataset="chats")

    db = tmp_path / "chats.duckdb"
    with Store(str(db)) as store:
        store.import_sessions([chat(8), chat(11)], dataset="chats")
    return db


def test_a_config_that_never_changes_a_context_says_so_once_naming_config_kind_and_dataset(chats_db, recwarn, tmp_path):
    from workbench.errors import NoopCompactionsWarning
    from workbench.experiments import export

    run = run_experiment(NOOP_SPEC, db=str(chats_db))
    said = [str(w.message) for w in recwarn.list if issubclass(w.category, NoopCompactionsWarning)]
    assert len(said) == 1, said  # the window changes contexts; `never` never fired
    assert said[0].startswith("'mask' (observation_masking) found nothing to change in 2 sessions of dataset 'chats'")
    frame = run.results.set_index("config")
    assert (frame.loc["mask", "compactions"] == 0).all() and (frame.loc["mask", "noop_compactions"] > 0).all()
    assert f"fired {int(frame.loc['mask', 'noop_compactions'].sum()):,} times" in said[0]
    assert (frame.loc["window", "compactions"] > 0).all()
    assert (frame.loc["never", "noop_compactions"] == 0).all()
    con = duckdb.connect(str(chats_db))
    stored = con.execute(
        "SELECT config, bool_and(noop), count(*) FROM cell_compactions WHERE run_id = ? "
        "GROUP BY config ORDER BY config",
        [run.id],
    ).fetchall()
    con.close()
    assert [(config, everything_noop) for config, everything_noop, _ in stored] == [("mask", True), ("window", False)]
    assert stored[0][2] == int(frame.loc["mask", "noop_compactions"].sum())
    export(run.id, "json", tmp_path / "run.json", db=str(chats_db))  # exports carry the flag
    exported = json.loads((tmp_path / "run.json").read_text())["compactions"]
    flags: dict[str, set] = {}
    for event in exported:
        flags.setdefault(event["config"], set()).add(event["noop"])
    assert flags["mask"] == {True} and False in flags["window"]
    with pytest.warns(NoopCompactionsWarning, match="'mask' \\(observation_masking\\)"):
        run_experiment(NOOP_SPEC, db=str(chats_db))  # a resumed run says it again: its results are the same


def test_workbench_run_prints_the_noop_warning_once(chats_db, tmp_path):
    from click.testing import CliRunner

    from workbench.cli import main

    spec = tmp_path / "noop-grid.toml"
    spec.write_text(
        textwrap.dedent("""
        name = "noop-grid"
        dataset = "chats"
        [defaults]
        context_limit = 20000
        [[config]]
        name = "mask"
        trigger = { kind = "pressure", turns = 1 }
        strategy = { kind = "observation_masking", keep_recent = 2 }
    """)
    )
    text = CliRunner().invoke(main, ["run", str(spec), "--db", str(chats_db)], catch_exceptions=False)
    assert text.exit_code == 0
    lines = [line for line in text.stderr.splitlines() if "found nothing to change" in line]
    assert len(lines) == 1 and lines[0].startswith(
        "warning: 'mask' (observation_masking) found nothing to change in 2 sessions of dataset 'chats'"
    )
    data = json.loads(CliRunner().invoke(main, ["run", str(spec), "--db", str(chats_db), "--json"]).stdout)
    assert len(data["noop_configs"]) == 1 and data["noop_configs"][0] == lines[0].removeprefix("warning: ")
    quiet = CliRunner().invoke(main, ["run", str(spec), "--db", str(chats_db), "-q"])
    assert "found nothing" not in quiet.stderr


# -- executor="auto" ---------------------------------------------------------------------------------

MASKING = {"name": "mask", "trigger": {"kind": "pressure", "turns": 1}, "strategy": {"kind": "observation_masking"}}
SUMMARY = {
    "name": "sum",
    "trigger": {"kind": "utilization", "ratio": 0.5},
    "strategy": {"kind": "summarize_progressive"},
}
REMOTE = "openai/gpt-4o-mini"


@pytest.mark.parametrize(
    ("configs", "defaults", "messages", "options", "expected", "reason"),
    [
        ([MASKING, SUMMARY], {}, 7_000, {}, "processes", "offline CPU work, 7,000 messages to replay on 2 CPUs"),
        ([MASKING, SUMMARY], {}, 5_000, {}, "local", "5,000 messages to replay"),
        ([MASKING, SUMMARY], {"summarizer": REMOTE}, 7_000, {}, "local", f"config 'sum' calls {REMOTE}"),
        ([MASKING], {"summarizer": REMOTE}, 7_000, {}, "processes", "offline CPU work"),  # masking never summarizes
        ([MASKING], {"evaluator": REMOTE}, 7_000, {}, "local", f"config 'mask' calls {REMOTE}"),
        ([MASKING, SUMMARY], {}, 7_000, {"gateway_given": True}, "local", "a gateway was given"),
        ([MASKING, SUMMARY], {}, 7_000, {"cpus": 1}, "local", "one CPU"),
    ],
)
def test_auto_takes_worker_processes_for_offline_cpu_work_worth_their_start(
    monkeypatch, configs, defaults, messages, options, expected, reason
):
    from workbench.experiments import load_experiment
    from workbench.experiments.cells import CellTask
    from workbench.experiments.run import AUTO_PROCESS_MESSAGES, choose_executor

    assert 5_000 < AUTO_PROCESS_MESSAGES <= 7_000
    _as_in_a_notebook(monkeypatch)
    spec = load_experiment({"name": "auto", "dataset": "grid", "defaults": defaults, "config": configs})
    todo = [CellTask(f"s{i}", "grid", c["name"], 0) for i in range(10) for c in configs]
    sizes = {f"s{i}": messages // len(todo) for i in range(10)}
    choice = choose_executor(spec, todo, sizes, **{"cpus": 2, **options})
    assert (choice.name, reason in choice.reason) == (expected, True), choice


def _as_in_a_notebook(monkeypatch) -> None:
    """This process as a notebook's: a main module without a file (a test process's may be a page that an
    app test ran), and only the workbench's kinds (other test modules register their own)."""
    import sys
    import types

    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    monkeypatch.setattr("workbench.registry.kinds_only_here", list)


def test_auto_keeps_the_threads_while_a_kind_is_registered_only_in_this_process(monkeypatch):
    from dataclasses import dataclass

    import workbench as wb
    from workbench import registry
    from workbench.experiments import load_experiment
    from workbench.experiments.cells import CellTask
    from workbench.experiments.run import choose_executor

    everywhere = registry.kinds_only_here  # other test modules' kinds, left out
    others = set(everywhere())
    _as_in_a_notebook(monkeypatch)
    monkeypatch.setattr(registry, "kinds_only_here", lambda: [k for k in everywhere() if k not in others])
    spec = load_experiment({"name": "auto", "dataset": "grid", "config": [MASKING]})
    todo = [CellTask("s", "grid", "mask", 0)]

    @dataclass(frozen=True)
    class Mine:
        def compact(self, context, env):
            return context

    assert choose_executor(spec, todo, {"s": 7_000}, cpus=2).name == "processes"
    wb.register_strategy("mine_auto_test")(Mine)
    try:
        choice = choose_executor(spec, todo, {"s": 7_000}, cpus=2)
    finally:
        wb.registry.unregister("strategy", "mine_auto_test")
    assert choice.name == "local" and "strategy:mine_auto_test" in choice.reason


def test_a_run_says_where_auto_computed_its_cells_and_workers_compute_them_alike(grid_db, monkeypatch):
    from run_support import stored_levels, twin_of

    from workbench.experiments import run as runner

    db, spec, ids = grid_db
    twin = twin_of(db)
    small = run_experiment(spec, db=str(twin))
    assert small.executor.name == "local" and "messages to replay" in small.executor.reason
    monkeypatch.setattr(runner, "AUTO_PROCESS_MESSAGES", 1)
    _as_in_a_notebook(monkeypatch)
    big = run_experiment(spec, db=str(db))
    assert big.executor.name == "processes" and big.status == "finished" and big.progress.failed_cells == 0
    levels, twin_levels = stored_levels(db, big.id), stored_levels(twin, small.id)
    assert len(levels["cells"]) == len(ids) * 3
    assert levels == twin_levels
    assert run_experiment(spec, db=str(db), executor="local", fresh=True).executor == runner.ExecutorChoice("local", "")
