"""The process executor (workbench.experiments.process_executor): the same cells as the local executor,
cell for cell, computed in worker processes; the offline summarizer's answers made there are committed by
the run's process, so a re-run asks nothing; a worker that dies fails cells, which a resumed run computes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator

import pytest
from click.testing import CliRunner
from run_support import stored_levels, twin_of

from workbench.cli import main
from workbench.errors import ConfigError
from workbench.experiments import ProcessExecutor
from workbench.experiments import run as runner
from workbench.experiments.cells import CellOutcome, CellTask

pytestmark = pytest.mark.slow  # worker processes start with imports of their own


def test_worker_processes_compute_every_cell_as_the_local_executor_does(grid_db):
    db, spec, session_ids = grid_db
    twin = twin_of(db)
    in_processes = runner.run_experiment(spec, db=str(db), executor=ProcessExecutor(processes=2))
    local = runner.run_experiment(spec, db=str(twin), executor="local")
    assert in_processes.id == local.id
    assert in_processes.status == "finished" and in_processes.progress.failed_cells == 0
    asked = local.progress.model_calls + local.progress.cache_hits
    assert local.progress.model_calls > 0  # the offline summarizer's, through the model cache
    # Two workers may each ask a question one process asks once: more calls, the same answers.
    assert in_processes.progress.model_calls + in_processes.progress.cache_hits == asked
    levels, local_levels = stored_levels(db, in_processes.id), stored_levels(twin, local.id)
    assert len(levels["cells"]) == len(session_ids) * 3
    assert any(row["summary"] for row in levels["compactions"]), "the grid summarizes in the workers"
    for level in ("cells", "calls", "compactions"):
        assert levels[level] == local_levels[level], level

    again = runner.run_experiment(spec, db=str(db), executor="processes", fresh=True)
    assert again.progress.model_calls == 0 and again.progress.cache_hits == asked  # all committed
    assert again.progress.measures_reused == len(session_ids) * 3  # the workers' measures, stored and read back
    assert stored_levels(db, again.id) == local_levels

    resumed = CliRunner().invoke(
        main, ["run", str(spec), "--db", str(db), "--executor", "processes", "--json"], catch_exceptions=False
    )
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["cells_reused"] == len(session_ids) * 3


class _KillingWorkers:
    """The process executor, whose workers are all killed once the first outcome is in."""

    def __init__(self) -> None:
        self.inner = ProcessExecutor(processes=2)
        self.killed: list[int] = []

    def map(self, work: Callable[[CellTask], CellOutcome], tasks: Iterable[CellTask]) -> Iterator[CellOutcome]:
        for outcome in self.inner.map(work, tasks):
            if not self.killed:
                for child in multiprocessing.active_children():
                    os.kill(child.pid, signal.SIGKILL)
                    self.killed.append(child.pid)
            yield outcome


def test_a_dead_worker_fails_cells_and_a_resumed_run_computes_them(grid_db):
    db, spec, session_ids = grid_db
    twin = twin_of(db)
    killing = _KillingWorkers()
    with pytest.warns(RuntimeWarning, match="failed"):
        broken = runner.run_experiment(spec, db=str(db), executor=killing)
    assert killing.killed
    assert broken.status == "finished_with_errors"
    assert 0 < broken.progress.failed_cells < len(session_ids) * 3  # cells not yet started when it died
    resumed = runner.run_experiment(spec, db=str(db), executor="processes")
    assert resumed.progress.cells_reused == len(session_ids) * 3 - broken.progress.failed_cells
    assert resumed.status == "finished" and resumed.progress.failed_cells == 0
    local = runner.run_experiment(spec, db=str(twin))
    assert stored_levels(db, resumed.id) == stored_levels(twin, local.id)


def test_the_process_executor_takes_cells_only(grid_db):
    db, spec, _ = grid_db
    with pytest.raises(ConfigError, match="names a Ray cluster"):
        runner.run_experiment(spec, db=str(db), executor="processes", address="auto")
    with pytest.raises(TypeError, match="BoundCellWork"):
        next(ProcessExecutor().map(lambda task: task, [CellTask("s", None, "c", 0)]))


def test_the_rows_of_the_sessions_are_read_many_at_a_time_and_let_go_after_their_last_unit():
    from workbench.experiments.process_executor import _SessionRows

    class Reads:
        def __init__(self) -> None:
            self.batches: list[list[str]] = []

        def session_tables_each(self, ids):
            self.batches.append(list(ids))
            return {i: {"sessions": f"rows of {i}"} for i in ids if i != "gone"}

        def session_tables(self, ids):
            return {"sessions": f"no rows of {ids[0]}"}

    sessions = [f"s{i:02d}" for i in range(20)]
    units = ["s00", "s00", *sessions[1:18], "gone", "s18", "s19", "s19"]  # the last ones: single cells
    store = Reads()
    rows = _SessionRows(store, units, ahead=8)
    taken = [rows.take(session_id) for session_id in units]
    assert taken == [{"sessions": f"rows of {s}"} if s != "gone" else {"sessions": "no rows of gone"} for s in units]
    # a session not stored is asked for again on its own, and its unit gets the store's (empty) rows
    assert store.batches == [sessions[0:8], sessions[8:16], ["s16", "s17", "gone", "s18", "s19"], ["gone"]]
    assert rows.read == {}  # every session let go after its last unit


GUARDED = '''"""A guarded script."""
from __future__ import annotations
import sys
LIMIT: int = 3
NAMES = ("a", "b")
def main() -> None:
    print(sys.argv)
class Thing:
    pass
if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    ("source", "safe"),
    [
        (GUARDED, True),
        (GUARDED.replace('if __name__ == "__main__":', "if '__main__' == __name__:"), True),
        (GUARDED + "main()\n", False),  # work at the top level
        ("import sys\nsys.path.insert(0, '.')\n", False),
        ("import os\nDB = os.environ['DB']\n", False),  # not a literal
        ('if __name__ == "__main__":\n    pass\nelse:\n    print("imported")\n', False),
        ("try:\n    import tomllib\nexcept ImportError:\n    tomllib = None\n", False),  # erring on the safe side
        ("def broken(:\n", False),
    ],
)
def test_workers_start_only_from_a_main_script_whose_top_level_only_defines_things(tmp_path, monkeypatch, source, safe):
    import sys
    import types

    from workbench.experiments.process_executor import main_reruns_safely

    script = tmp_path / "script.py"
    script.write_text(source)
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    main.__spec__ = None
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert main_reruns_safely() is safe


@pytest.mark.parametrize(
    ("file", "spec_name", "safe"),
    [
        (None, None, True),  # an interactive session, python -c
        ("<stdin>", None, False),  # no file a worker could run
        (None, "workbench.__main__", True),  # python -m workbench: not run again
        (None, "this", False),  # python -m on a module whose top level computes (it prints)
        (None, "no_such_module_anywhere", False),
    ],
)
def test_a_main_module_without_a_script_is_judged_by_what_a_worker_would_run(monkeypatch, file, spec_name, safe):
    import importlib.machinery
    import sys
    import types

    from workbench.experiments.process_executor import main_reruns_safely

    main = types.ModuleType("__main__")
    if file is not None:
        main.__file__ = file
    main.__spec__ = importlib.machinery.ModuleSpec(spec_name, None) if spec_name else None
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert main_reruns_safely() is safe


def test_a_worker_ends_without_tearing_down_its_memory_and_keeps_what_it_printed(tmp_path):
    """`exit_without_teardown`, a worker's last act: what it wrote to a piped (block-buffered) stdout
    still arrives, and nothing after it runs."""
    import subprocess
    import sys

    script = (
        "import atexit, sys\n"
        "from workbench.experiments.process_executor import exit_without_teardown\n"
        "atexit.register(print, 'torn down')\n"  # an exit handler of the interpreter's own end: never runs
        "sys.stdout.write('computed, no newline')\n"
        "exit_without_teardown()\n"
        "print('after the end')\n"
    )
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout as a worker's: a pipe
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=buffered)
    assert (done.returncode, done.stdout) == (0, "computed, no newline")


WORKERS_CANNOT_START = """
import json, sys
from workbench.experiments import run_experiment
from workbench.llm.cache import CacheEntry
from workbench.store import Store

with Store(sys.argv[1]) as store:  # a model cache of megabytes: more than a pipe holds
    cache = store.model_cache()
    for n in range(8):
        cache.put(f"padding-{n}", "workbench/extractive", "{}", CacheEntry("x" * 250_000))
    cache.close()
sys.modules["__main__"].__file__ = "/no/such/script.py"  # what each worker must run again before its work
run = run_experiment(sys.argv[2], db=sys.argv[1], executor="processes")
print(json.dumps({"status": run.status, "failed": run.progress.failed_cells, "total": run.progress.cells_total}))
"""


def test_workers_that_cannot_start_fail_the_cells_instead_of_hanging_the_run(grid_db):
    """Workers start from a few kilobytes, the model cache's snapshot being a file: with the snapshot in
    what `spawn` pipes to a worker, the run's process waited forever on a worker that died before
    reading it all."""
    import subprocess
    import sys

    db, spec, session_ids = grid_db
    done = subprocess.run(
        [sys.executable, "-c", WORKERS_CANNOT_START, str(db), str(spec)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"status": "finished_with_errors", "failed": len(session_ids) * 3, "total": len(session_ids) * 3}
    assert "BrokenProcessPool: its worker process ended abruptly" in done.stderr
    assert "/no/such/script.py" in done.stderr  # the worker's own error
    assert "runs the main script's top level again" in done.stderr


def test_workers_from_a_script_that_computes_at_its_top_level_are_warned_of(grid_db, tmp_path, monkeypatch):
    import sys
    import types

    db, spec, session_ids = grid_db
    script = tmp_path / "analysis.py"
    script.write_text("WIDTH = len('four')\n")  # work, if harmless: each worker runs it again
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    with pytest.warns(RuntimeWarning, match="runs the main script's top level again"):
        run = runner.run_experiment(spec, db=str(db), executor="processes")
    assert run.status == "finished" and run.progress.cells_done == len(session_ids) * 3
