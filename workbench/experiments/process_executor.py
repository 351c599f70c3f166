"""Experiment cells in worker processes of this machine, one per core.

    run = wb.run_experiment("experiments/complexity-trap.toml", db=..., executor="processes")
    workbench run experiments/complexity-trap.toml --executor processes

The local executor's threads share one interpreter, which runs Python on one core at a time: they
overlap model calls, but a grid whose cells are CPU work (replays, the offline summarizer, the quality
metrics) runs on one core however many the machine has. These workers run on all of them.

They work as the Ray executor's do (see `workers`): the run's process keeps the database and writes
every cell; a worker gets each session's rows as Arrow tables with that session's cells, the model
cache as a snapshot taken when the run starts (a file each worker maps), and sends back each outcome
with the model answers it made, which the run's process commits to the cache. Workers are started
fresh (`spawn`: nothing of this process's threads or open files is inherited), all at once when the
run starts, while it reads its first sessions; each takes about half a second of imports: for a
handful of cells, the local executor is quicker (`executor="auto"` weighs it, `run.choose_executor`).

A worker that dies (killed, out of memory, or unable to start) fails the cells it held and those not
yet started; a resumed run computes them.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import gc
import multiprocessing
import os
import shutil
import sys
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from workbench.experiments.cells import BoundCellWork, CellOutcome, CellTask, CellWork
from workbench.experiments.workers import GatewaySettings, cache_snapshot, cell_units, compute_cell, session_batches

if TYPE_CHECKING:
    import pyarrow as pa

    from workbench.quality.measure_memo import StoredMeasures
    from workbench.store import Store

__all__ = ["ProcessExecutor"]


#: What a cell says when its worker process ended before sending it back.
WORKER_LOST = (
    "its worker process ended abruptly (killed, out of memory, or unable to start: a worker's own error "
    "goes to this process's stderr); run again to compute the cell"
)
#: What a run with worker processes says when the main script would compute again in each of them.
RERUN_WARNING = (
    "every worker process runs the main script's top level again as it starts, and this script's does more "
    'than define things (or cannot be read again): put its work under `if __name__ == "__main__":`'
)


@dataclass
class ProcessExecutor:
    """Runs experiment cells in `processes` worker processes (default: one per CPU), a session's cells
    together, and yields their outcomes as they finish.

    Units of cells in flight are bounded (twice the workers), so the sessions exported and the
    outcomes waiting to be written stay few whatever the grid's size."""

    name: ClassVar[str] = "processes"
    processes: int | None = None

    def map(self, work: Callable[[CellTask], CellOutcome], tasks: Iterable[CellTask]) -> Iterator[CellOutcome]:
        if not isinstance(work, BoundCellWork):
            raise TypeError(
                "ProcessExecutor runs experiment cells: `work` must be the BoundCellWork that "
                f"run_experiment passes, not {type(work).__name__}"
            )
        store = work.store
        if store is None:
            raise TypeError("ProcessExecutor exports sessions from the run's store: `work.store` must be open")
        todo = list(tasks)
        if not todo:
            return
        if not main_reruns_safely():
            warnings.warn(RERUN_WARNING, RuntimeWarning, stacklevel=2)
        workers = max(1, self.processes or os.cpu_count() or 1)
        units = cell_units([cells for _, cells in session_batches(todo, 1)], workers)
        folder = tempfile.mkdtemp(prefix="workbench-run-")
        pool: ProcessPoolExecutor | None = None
        try:
            snapshot = os.path.join(folder, "model-cache.arrow")
            _write_table(cache_snapshot(store, work.gateway), snapshot)
            measures = None
            if work.measures is not None:
                measures = (os.path.join(folder, "measures.arrow"), work.measures.version)
                _write_table(work.measures.stored_table(), measures[0])
            shared = _RunShared(uuid.uuid4().hex, snapshot, GatewaySettings.of(work.gateway), work.cell, measures)
            pool = ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker, initargs=(shared,)
            )
            for _ in range(workers):  # each submit starts a worker: all start now, while the first rows are read
                pool.submit(_get_ready)
            rows = _SessionRows(store, [cells[0].session_id for _, cells in units])
            pending: dict[Future[list[CellOutcome]], list[CellTask]] = {}
            position = 0
            while position < len(units) or pending:
                while position < len(units) and len(pending) < 2 * workers:
                    _, cells = units[position]
                    position += 1
                    pending[_submit(pool, rows, cells)] = cells
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    cells = pending.pop(future)
                    try:
                        outcomes = future.result()
                    except BrokenProcessPool:
                        outcomes = [CellOutcome(task, None, 0.0, BrokenProcessPool(WORKER_LOST)) for task in cells]
                    except Exception as exc:  # the outcome did not travel back
                        outcomes = [CellOutcome(task, None, 0.0, exc) for task in cells]
                    yield from outcomes
        finally:
            # Workers exit on their own once their queue closes (`exit_without_teardown`): the run does
            # not wait for them.
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
            shutil.rmtree(folder, ignore_errors=True)  # a worker reads the snapshot at its first cell, or never


def main_reruns_safely() -> bool:
    """Whether workers can start from this process without side effects: each one re-runs the main
    module's top level (`spawn`), which must then only define things.

    True when the main module has no file (an interactive session, `python -c`), or when its file's
    top level holds only imports, definitions, literal assignments and `if __name__ == "__main__":`
    blocks (the `workbench` and `streamlit` commands, a notebook kernel's launcher, a guarded script).
    A script that computes at its top level would compute again in every worker."""
    import ast
    import importlib.util

    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name == "__main__" or (name or "").endswith(".__main__"):  # `python -m package`: not re-run
        return True
    if name is not None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return False
        path = spec.origin if spec is not None else None
    else:
        path = getattr(main, "__file__", None)
        if path is None:
            return True
    try:
        with open(str(path), "rb") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):  # e.g. "<stdin>": nothing a worker could re-run
        return False
    return all(_defines_only(statement) for statement in tree.body)


def _defines_only(statement: object) -> bool:
    import ast

    if isinstance(statement, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    if isinstance(statement, ast.Expr):  # a docstring
        return isinstance(statement.value, ast.Constant)
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        if statement.value is None:
            return True
        try:
            ast.literal_eval(statement.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # not a literal
            return False
        return True
    if isinstance(statement, ast.If):
        test = statement.test
        return (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)
            and {ast.unparse(test.left), ast.unparse(test.comparators[0])} == {"__name__", "'__main__'"}
            and all(_defines_only(s) for s in statement.orelse)
        )
    return False


class _SessionRows:
    """The rows of the sessions of the units to send, in their order: read `ahead` sessions at a time
    (`Store.session_tables_each`: a query per table for them all) and let go once a session's last unit
    has taken them."""

    def __init__(self, store: Store, unit_sessions: Sequence[str], ahead: int = 16):
        self.store = store
        self.order = list(dict.fromkeys(unit_sessions))
        self.units_left = collections.Counter(unit_sessions)
        self.ahead = ahead
        self.read: dict[str, dict[str, pa.Table]] = {}
        self.position = 0  # in `order`: the sessions before it were read (or asked for first)

    def take(self, session_id: str) -> dict[str, pa.Table]:
        tables = self.read.get(session_id)
        if tables is None:
            wanted = [session_id]
            while len(wanted) < self.ahead and self.position < len(self.order):
                upcoming = self.order[self.position]
                self.position += 1
                if upcoming != session_id and upcoming not in self.read and self.units_left[upcoming] > 0:
                    wanted.append(upcoming)
            self.read.update(self.store.session_tables_each(wanted))
            tables = self.read.get(session_id)
            if tables is None:  # not stored: the unit fails with the store's own error
                tables = self.store.session_tables([session_id])
        self.units_left[session_id] -= 1
        if self.units_left[session_id] <= 0:
            self.read.pop(session_id, None)
        return tables


def _submit(pool: ProcessPoolExecutor, rows: _SessionRows, cells: list[CellTask]) -> Future[list[CellOutcome]]:
    """Send one unit (cells of one session) with its session's rows; a pool already broken fails it."""
    try:
        return pool.submit(_compute_unit, rows.take(cells[0].session_id), cells)
    except Exception as exc:  # BrokenProcessPool: a worker died earlier
        failed: Future[list[CellOutcome]] = Future()
        failed.set_exception(exc)
        return failed


@dataclass(frozen=True)
class _RunShared:
    """What every cell of a run shares, sent once to each worker when it starts: a few kilobytes, the
    model cache's snapshot being a file (`snapshot`, Arrow IPC) that each worker maps at its first cell.

    `spawn` writes what a worker starts with into a pipe the worker reads once its interpreter is up:
    the run's process waited for each worker's start in turn while the snapshot (megabytes) went
    through, and forever when a worker died before reading all of it."""

    run: str
    snapshot: str
    settings: GatewaySettings
    cell: CellWork
    measures: tuple[str, str] | None = None  # (file of the stored measures, the code's version)


_RUN: list[_RunShared] = []  # this worker's run (one per worker process: the pool lives for one run)


def _start_worker(shared: _RunShared) -> None:
    """A worker's start: the run it computes for. Token counting uses one thread, the worker's share
    of the machine; the process does bulk work only, so its collector is paced for it
    (`workbench.collector`) for good."""
    from workbench.collector import bulk_thresholds
    from workbench.tokens import set_counting_threads

    set_counting_threads(1)
    gc.set_threshold(*bulk_thresholds(gc.get_threshold()))
    _RUN[:] = [shared]
    atexit.register(exit_without_teardown)


def exit_without_teardown() -> None:
    """A worker's end, once its pool closed: its output flushed, then out at once. The interpreter's own
    end would free every session and memo the worker built, one object at a time (half a second and
    more on a corpus), while the run's command waits for its workers to be gone."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken stream: nothing left to save
            stream.flush()
    os._exit(0)


def _get_ready() -> None:
    """A worker's first job, sent as the pool starts: the kinds' modules imported before the first cell
    arrives (the run's process reads its sessions meanwhile)."""
    from workbench.registry import load_kinds

    load_kinds()


def _write_table(table: pa.Table, path: str) -> None:
    import pyarrow as pa

    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _read_table(path: str) -> pa.Table:
    import pyarrow as pa

    return pa.ipc.open_file(pa.memory_map(path, "r")).read_all()


def _compute_unit(tables: Mapping[str, pa.Table], cells: Sequence[CellTask]) -> list[CellOutcome]:
    """The cells of one session, in a worker: the first loads and analyses the session, the others
    find it in this worker's memory."""
    shared = _RUN[0]
    batch = f"{shared.run}-{cells[0].session_id}"
    snapshot = functools.partial(_read_table, shared.snapshot)
    measures = functools.partial(_read_measures, *shared.measures) if shared.measures is not None else None
    return [
        compute_cell(shared.cell, task, shared.run, batch, lambda: tables, snapshot, shared.settings, measures)
        for task in cells
    ]


def _read_measures(path: str, version: str) -> StoredMeasures:
    from workbench.quality.measure_memo import StoredMeasures

    return StoredMeasures(version, _read_table(path))
