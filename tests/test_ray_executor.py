"""The Ray executor (workbench.experiments.ray_executor) on a local 2-CPU Ray: the same cells as the local
executor, cell for cell; a worker killed mid-run loses and duplicates nothing; model answers made on
workers are committed by the driver, so a re-run asks the model nothing. Skipped without the `ray` extra.

Ray starts once for the module (~15 s on 2 cores); the model is `workbench.testing.FakeOpenAI` on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import duckdb
import pytest

ray = pytest.importorskip("ray")

from click.testing import CliRunner  # noqa: E402  (after the skip: nothing to import without Ray)
from run_support import stored_levels, twin_of  # noqa: E402

from workbench.cli import main  # noqa: E402
from workbench.errors import ConfigError  # noqa: E402
from workbench.experiments import run as runner  # noqa: E402
from workbench.experiments.cells import CellTask  # noqa: E402
from workbench.experiments.ray_executor import RayExecutor  # noqa: E402
from workbench.experiments.workers import cell_units, session_batches  # noqa: E402
from workbench.testing import FakeOpenAI  # noqa: E402

pytestmark = pytest.mark.slow  # a local Ray cluster: `make test-fast` leaves it out

# Nothing leaves the machine: no usage report, no dashboard, no token prompt.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_DISABLE_DOCKER_CPU_WARNING": "1"}


@pytest.fixture(scope="module")
def ray_cluster():
    saved = {name: os.environ.get(name) for name in RAY_ENV}
    os.environ.update(RAY_ENV)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=100 * 1024 * 1024,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield
    finally:
        ray.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _llm_spec(server: FakeOpenAI) -> dict:
    options = {"api_base": server.api_base, "api_key": "sk-dummy", "num_retries": 0, "timeout": 20}
    return {
        "name": "ray-llm",
        "dataset": "grid",
        "concurrency": 2,
        "defaults": {
            "context_limit": 6000,
            "max_output": 500,
            "summarizer": "openai/fake-model",
            "summarizer_options": options,
        },
        "config": [
            {
                "name": "split",
                "trigger": {"kind": "utilization", "ratio": 0.5},
                "strategy": {"kind": "summarize_split", "preserve": 0.4},
            },
            {"name": "full", "trigger": {"kind": "utilization", "ratio": 0.6}, "strategy": {"kind": "summarize_full"}},
        ],
    }


def _cache_rows(db: Path) -> int:
    con = duckdb.connect(str(db))
    try:
        return int(con.execute("SELECT count(*) FROM llm_cache WHERE model = 'openai/fake-model'").fetchall()[0][0])
    finally:
        con.close()


def test_ray_computes_every_cell_as_the_local_executor_does(ray_cluster, grid_db):
    db, spec, session_ids = grid_db
    twin = twin_of(db)
    on_ray = runner.run_experiment(spec, db=str(db), executor="ray")
    local = runner.run_experiment(spec, db=str(twin), executor="local")
    assert on_ray.id == local.id  # same spec, sessions and code: the same run
    assert on_ray.status == "finished" and on_ray.progress.failed_cells == 0
    ray_levels, local_levels = stored_levels(db, on_ray.id), stored_levels(twin, local.id)
    assert len(ray_levels["cells"]) == len(session_ids) * 3
    assert ray_levels["compactions"], "the grid compacts: the comparison covers compaction rows"
    assert all(row["recorded_input_tokens"] for row in ray_levels["calls"]), "the recorded usage travels back"
    for level in ("cells", "calls", "compactions"):
        assert ray_levels[level] == local_levels[level], level
    again = CliRunner().invoke(
        main, ["run", str(spec), "--db", str(db), "--executor", "ray", "--json"], catch_exceptions=False
    )
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert report["run_id"] == on_ray.id and report["cells_reused"] == len(session_ids) * 3  # resumable on Ray too


def test_model_answers_from_workers_are_committed_so_a_rerun_asks_nothing(ray_cluster, grid_db):
    db, _, session_ids = grid_db
    twin = twin_of(db)
    with FakeOpenAI() as server:
        spec = _llm_spec(server)
        on_ray = runner.run_experiment(spec, db=str(db), executor="ray")
        asked = server.request_count
        assert asked > 0 and on_ray.progress.failed_cells == 0
        questions = {json.dumps(body["messages"], sort_keys=True) for body in server.requests}
        assert _cache_rows(db) == len(questions)  # every answer a worker obtained, committed by the driver
        rerun = runner.run_experiment(spec, db=str(db), executor="ray", fresh=True)
        assert server.request_count == asked  # all from the committed cache
        assert rerun.progress.cells_done == len(session_ids) * 2 and rerun.progress.failed_cells == 0
        compacted = int((rerun.results["compactions"] > 0).sum())
        assert compacted > 0 and rerun.progress.measures_reused == compacted  # the workers' measures, read back
        local = runner.run_experiment(spec, db=str(twin))
    assert stored_levels(db, rerun.id) == stored_levels(twin, local.id)


def _busy_ray_workers() -> list[int]:
    """Pids of Ray worker processes computing a cell right now (Ray titles them after the task)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if title.startswith(b"ray::run_cell"):
            pids.append(int(entry.name))
    return pids


def test_a_worker_killed_mid_run_loses_and_duplicates_no_cell(ray_cluster, grid_db):
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("finding Ray's worker processes needs /proc")
    db, _, session_ids = grid_db
    twin = twin_of(db)
    killed: list[int] = []
    stop = threading.Event()

    def kill_one_busy_worker() -> None:
        while not stop.is_set() and not killed:
            busy = _busy_ray_workers()
            if busy:
                os.kill(busy[0], signal.SIGKILL)
                killed.append(busy[0])
            time.sleep(0.02)

    with FakeOpenAI(latency=0.3) as server:  # every cell waits on its model: a worker is caught mid-cell
        spec = _llm_spec(server)
        killer = threading.Thread(target=kill_one_busy_worker, daemon=True)
        killer.start()
        try:
            on_ray = runner.run_experiment(spec, db=str(db), executor=RayExecutor(max_retries=3))
        finally:
            stop.set()
            killer.join()
        server.latency = 0.0  # the reference run has no worker to catch
        local = runner.run_experiment(spec, db=str(twin))
    assert killed, "no worker was caught computing a cell"
    assert on_ray.progress.failed_cells == 0 and on_ray.progress.cells_done == len(session_ids) * 2
    con = duckdb.connect(str(db))
    try:
        keys = con.execute(
            "SELECT session_id, config, repeat, count(*) FROM cells WHERE run_id = ? GROUP BY ALL", [on_ray.id]
        ).fetchall()
    finally:
        con.close()
    assert len(keys) == len(session_ids) * 2 and all(count == 1 for *_, count in keys)
    assert stored_levels(db, on_ray.id) == stored_levels(twin, local.id)


def test_executor_names_and_addresses_are_checked(grid_db):
    db, spec, _ = grid_db
    with pytest.raises(ConfigError, match="unknown executor 'spark'"):
        runner.run_experiment(spec, db=str(db), executor="spark")
    with pytest.raises(ConfigError, match="executor='ray'"):
        runner.run_experiment(spec, db=str(db), address="auto")
    with pytest.raises(TypeError, match="BoundCellWork"):
        list(RayExecutor().map(lambda task: task, []))
    usage = CliRunner().invoke(main, ["run", str(spec), "--db", str(db), "--address", "auto"])
    assert usage.exit_code == 2 and "--executor ray" in usage.output


@pytest.mark.parametrize(("sessions", "configs", "slots"), [(16, 3, 2), (2, 50, 8), (5, 1, 2), (1, 1, 4), (40, 7, 3)])
def test_a_sessions_cells_travel_together_except_the_last_ones(sessions, configs, slots):
    """Each Ray task holds cells of one session (the worker analyses the session once), at most a quarter
    of a slot's share of the run, and the last 2 x slots cells go one per task to even out the end."""
    tasks = [CellTask(f"s{s}", "d", f"c{c}", 0) for s in range(sessions) for c in range(configs)]
    batches = session_batches(tasks, 4)
    units = cell_units([cells for _, cells in batches], slots)
    assert [cell for _, cells in units for cell in cells] == [cell for _, cells in batches for cell in cells]
    assert all(cell in batches[index][1] for index, cells in units for cell in cells)
    assert all(len({cell.session_id for cell in cells}) == 1 for _, cells in units)
    assert max(len(cells) for _, cells in units) <= max(1, len(tasks) // (4 * slots))
    tail = min(2 * slots, len(tasks))
    assert all(len(cells) == 1 for _, cells in units[-tail:])
    if len(tasks) // (4 * slots) >= configs:  # room for whole sessions: whole ones first, then the singles
        sizes = [len(cells) for _, cells in units]
        first_single = sizes.index(1) if 1 in sizes else len(sizes)
        assert set(sizes[:first_single]) <= {configs} and set(sizes[first_single:]) <= {1}
