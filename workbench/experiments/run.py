"""Running an experiment: session × config × repeat cells, executed concurrently, committed one by one.

    run = wb.run_experiment("experiments/reference-designs.toml", db="data/workbench.duckdb")
    run.id, run.results          # the results DataFrame: one row per cell, every metric a column

A run's id is derived from its spec, the dataset version (the sessions it covers) and the code
version, so running the same spec again resumes the same run: finished cells are read back, not
recomputed, and only the missing ones run. Each finished cell is written in its own transaction by
the one thread that writes (DuckDB has a single writer), so an interrupted run (Ctrl-C, kill -9)
holds only whole cells.

Cells go through an `Executor` (local threads by default): it maps a function over tasks and
yields outcomes as they complete. Model calls go through one gateway whose cache is the database's
`llm_cache`, so a re-run of a finished cell's calls costs nothing either.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from workbench.config import ReplayConfig, parse_config
from workbench.errors import ConfigError, StoreError
from workbench.experiments import results as tables
from workbench.experiments.spec import ExperimentSpec, grid, load_experiment

if TYPE_CHECKING:
    import pandas as pd

    from workbench.replay import ReplayResult
    from workbench.session import Session
    from workbench.store import Store


@dataclass(frozen=True)
class CellTask:
    """One cell to compute: a session under a named config, for one repeat (epoch)."""

    session_id: str
    dataset: str | None
    config_name: str
    repeat: int


@dataclass(frozen=True)
class CellOutcome:
    task: CellTask
    result: ReplayResult | None
    duration_s: float
    error: BaseException | None = None


class Executor(Protocol):
    """Runs cells: `map(work, tasks)` yields one outcome per task, in completion order.

    `work` is safe to call from any thread. A distributed engine implements the same method.
    """

    def map(self, work: Callable[[CellTask], CellOutcome], tasks: Iterable[CellTask]) -> Iterator[CellOutcome]: ...


@dataclass
class LocalExecutor:
    """Threads in this process; `concurrency` cells in flight, refilled as each one finishes.

    A finished cell starts the next one from its worker thread, so the pace never depends on how
    fast the consumer of the outcomes (the database writer) keeps up.
    """

    concurrency: int = 4

    def map(self, work: Callable[[CellTask], CellOutcome], tasks: Iterable[CellTask]) -> Iterator[CellOutcome]:
        iterator = iter(tasks)
        finished: queue.Queue[Future[CellOutcome]] = queue.Queue()
        lock = threading.Lock()
        state = {"submitted": 0, "exhausted": False, "stopped": False}
        pool = ThreadPoolExecutor(max_workers=max(1, self.concurrency), thread_name_prefix="workbench-cell")

        def submit_next() -> None:
            with lock:
                if state["stopped"] or state["exhausted"]:
                    return
                task = next(iterator, None)
                if task is None:
                    state["exhausted"] = True
                    return
                state["submitted"] += 1
            future = pool.submit(work, task)
            future.add_done_callback(on_done)

        def on_done(future: Future[CellOutcome]) -> None:
            finished.put(future)
            submit_next()

        try:
            for _ in range(max(1, self.concurrency)):
                submit_next()
            yielded = 0
            while True:
                with lock:
                    if state["exhausted"] and yielded == state["submitted"]:
                        return
                future = finished.get()
                yielded += 1
                yield future.result()
        finally:
            with lock:
                state["stopped"] = True
            pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class RunProgress:
    """What a progress bar shows: cells done (reused included), model calls, cache hits, spend."""

    cells_total: int
    cells_reused: int = 0
    cells_done: int = 0
    model_calls: int = 0
    cache_hits: int = 0
    cost_usd: float = 0.0
    failed_cells: int = 0

    def line(self) -> str:
        return (f"{self.cells_done}/{self.cells_total} cells ({self.cells_reused} reused), "
                f"{self.model_calls} model calls, {self.cache_hits} cache hits, ${self.cost_usd:.4f}")


@dataclass
class Run:
    """A run of an experiment: its id and, once read, its results (one row per cell)."""

    id: str
    spec: ExperimentSpec
    db: str
    progress: RunProgress
    status: str = "finished"
    _results: Any = field(default=None, repr=False)

    @property
    def results(self) -> pd.DataFrame:
        if self._results is None:
            self._results = results(self.id, db=self.db)
        return self._results

    def __repr__(self) -> str:
        return f"Run({self.id!r}, {self.status}, {self.progress.line()})"


def code_version() -> str:
    """The package version, plus the git commit (and `+dirty`) when running from a checkout."""
    from workbench import __version__

    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return __version__
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
                                "workbench"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+{commit}{'.dirty' if dirty else ''}"


def dataset_version(sessions: Sequence[tuple[str, str | None]]) -> str:
    """A hash of the (session id, dataset) pairs a run covers: ids are content hashes."""
    digest = hashlib.sha256()
    for session_id, dataset in sorted(sessions, key=lambda pair: pair[0]):
        digest.update(f"{session_id}\t{dataset}\n".encode())
    return digest.hexdigest()[:16]


def run_key(spec: ExperimentSpec, dataset_hash: str, code: str) -> str:
    """The run id: the spec's name and a hash of what determines its results."""
    material = json.dumps({"spec": [(c.name, c.config.to_dict()) for c in spec.configs],
                           "metrics": list(spec.metrics), "repeats": spec.repeats,
                           "dataset": dataset_hash, "code": code}, sort_keys=True, default=str)
    return f"{spec.name}-{hashlib.sha256(material.encode()).hexdigest()[:10]}"


def select_sessions(store: Store, spec: ExperimentSpec) -> list[tuple[str, str | None]]:
    """The (id, dataset) pairs of the sessions a spec covers, in a stable order."""
    pairs: list[tuple[str, str | None]] = []
    for dataset in spec.datasets:
        ids = store.session_ids(dataset=dataset, where=spec.where)
        pairs.extend((session_id, dataset) for session_id in ids)
    if not pairs:
        known = [row["name"] for row in store.dataset_rows()] if hasattr(store, "dataset_rows") else []
        raise ConfigError(f"experiment {spec.name!r}: no sessions in dataset(s) {', '.join(spec.datasets)}"
                          + (f" matching {spec.where!r}" if spec.where else "")
                          + (f"; datasets in the database: {', '.join(map(str, known))}" if known else ""))
    seen: set[str] = set()
    unique = []
    for pair in pairs:
        if pair[0] not in seen:
            seen.add(pair[0])
            unique.append(pair)
    return unique


def _repeat_config(config: ReplayConfig, repeat: int) -> ReplayConfig:
    """The config of epoch `repeat`: model calls get their own cache keys after the first epoch."""
    if repeat == 0:
        return config
    spec = config.to_dict(redact=False)
    spec["summarizer_options"] = {**spec.get("summarizer_options", {}), "repeat": repeat}
    if spec.get("evaluator"):
        spec["evaluator_options"] = {**spec.get("evaluator_options", {}), "repeat": repeat}
    return parse_config(spec)


class _SessionCache:
    """Sessions loaded on demand by the writer's store, kept while cells of theirs are pending."""

    def __init__(self, store: Store):
        self._store = store
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._remaining: dict[str, int] = {}

    def expect(self, tasks: Sequence[CellTask]) -> None:
        for task in tasks:
            self._remaining[task.session_id] = self._remaining.get(task.session_id, 0) + 1

    def get(self, session_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                session = self._store.load_session(session_id)
                self._sessions[session_id] = session
            return session

    def done(self, session_id: str) -> None:
        with self._lock:
            self._remaining[session_id] -= 1
            if self._remaining[session_id] <= 0:
                self._sessions.pop(session_id, None)


def run_experiment(spec: ExperimentSpec | Mapping[str, Any] | str | os.PathLike[str], db: str | None = None, *,
                   concurrency: int | None = None, executor: Executor | None = None, gateway: Any = None,
                   progress: Callable[[RunProgress], None] | None = None, fresh: bool = False) -> Run:
    """Run (or resume) an experiment; returns the `Run` with its id and results.

    `concurrency` overrides the spec's; `executor` replaces the local thread executor; `gateway`
    replaces the one caching into the database; `progress` is called after every cell.
    `fresh=True` deletes the run's stored cells first, so everything is recomputed (model calls
    still come from the cache).
    """
    from workbench import db as database
    from workbench.store import Store

    experiment = load_experiment(spec if not isinstance(spec, os.PathLike) else Path(spec))
    db_path = os.fspath(db) if db is not None else database.default_path()
    with Store(db_path) as store:
        pairs = select_sessions(store, experiment)
        dataset_of = dict(pairs)
        version = dataset_version(pairs)
        code = code_version()
        run_id = run_key(experiment, version, code)
        con = store.connection
        all_cells = grid(experiment, [session_id for session_id, _ in pairs])
        tables.start_run(con, run_id, name=experiment.name, kind="experiment", spec=_stored_spec(experiment),
                         configs=[(c.name, c.config.to_dict()) for c in experiment.configs], code_version=code,
                         dataset_version=version, datasets=experiment.datasets, cells_total=len(all_cells))
        if fresh:
            _delete_cells(con, run_id)
        done = tables.finished_cells(con, run_id)
        todo = [CellTask(s, dataset_of.get(s), c, r) for s, c, r in all_cells if (s, c, r) not in done]
        state = RunProgress(cells_total=len(all_cells), cells_reused=len(done), cells_done=len(done))
        if progress:
            progress(state)
        status = "finished"
        owned_gateway = None
        cells_in_flight = concurrency or experiment.concurrency
        if gateway is None:
            from workbench.llm import DuckDBCache, Gateway

            gateway = owned_gateway = Gateway(DuckDBCache(con), concurrency=max(8, cells_in_flight))
        try:
            _execute(experiment, todo, store, gateway, executor or LocalExecutor(cells_in_flight), run_id, state,
                     progress)
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            if owned_gateway is not None:
                owned_gateway.close()
            if status == "finished" and state.failed_cells:
                status = "finished_with_errors"
            tables.finish_run(con, run_id, status)
    return Run(id=run_id, spec=experiment, db=db_path, progress=state, status=status)


def _stored_spec(spec: ExperimentSpec) -> dict[str, Any]:
    return {"name": spec.name, "source": spec.source, "datasets": list(spec.datasets), "where": spec.where,
            "metrics": list(spec.metrics), "repeats": spec.repeats, "concurrency": spec.concurrency,
            "regress": {k: vars(v) for k, v in spec.regress.items()},
            "configs": [{"name": c.name, **c.config.to_dict()} for c in spec.configs]}


def _delete_cells(con: Any, run_id: str) -> None:
    con.execute("BEGIN TRANSACTION")
    for table in ("cell_compactions", "cell_calls", "cell_metrics", "cells"):
        con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
    con.execute("COMMIT")


def _execute(spec: ExperimentSpec, todo: list[CellTask], store: Store, gateway: Any, executor: Executor,
             run_id: str, state: RunProgress, progress: Callable[[RunProgress], None] | None) -> None:
    from workbench.replay import replay

    if not todo:
        return
    sessions = _SessionCache(store)
    sessions.expect(todo)
    configs = {c.name: c.config for c in spec.configs}
    load_lock = threading.Lock()

    def work(task: CellTask) -> CellOutcome:
        started = time.perf_counter()
        try:
            with load_lock:
                session = sessions.get(task.session_id)
            config = _repeat_config(configs[task.config_name], task.repeat)
            result = replay(session, config, gateway=gateway, metrics=list(spec.metrics) or None)
            return CellOutcome(task, result, time.perf_counter() - started)
        except Exception as exc:  # a cell that raises is reported, the run goes on
            return CellOutcome(task, None, time.perf_counter() - started, exc)

    writer = _CellWriter(store.connection.cursor(), run_id, state, progress)
    try:
        for outcome in executor.map(work, todo):
            task = outcome.task
            sessions.done(task.session_id)
            if outcome.result is None:
                _warn_failed(task, outcome.error)
            writer.put(outcome)
    finally:
        writer.close()


class _CellWriter:
    """The one thread that writes cells: it commits whatever has finished, as soon as it can.

    Outcomes that arrive while a commit is under way are written together in the next one, so the
    database keeps up with any number of cells in flight. `close()` writes what is pending (also on
    Ctrl-C) and re-raises a write error.
    """

    def __init__(self, con: Any, run_id: str, state: RunProgress, progress: Callable[[RunProgress], None] | None):
        self._con = con
        self._run_id = run_id
        self._state = state
        self._progress = progress
        self._queue: queue.Queue[CellOutcome | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="workbench-writer", daemon=True)
        self._thread.start()

    def put(self, outcome: CellOutcome) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(outcome)

    def _loop(self) -> None:
        closing = False
        while not closing:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            closing = batch[-1] is None or None in batch
            outcomes = [o for o in batch if o is not None]
            if self._error is not None:
                continue
            try:
                tables.save_cells(self._con, self._run_id, [
                    tables.FinishedCell(o.result, o.task.config_name, o.task.repeat, o.task.dataset, o.duration_s)
                    for o in outcomes if o.result is not None])
            except BaseException as exc:  # reported by put() or close() in the caller's thread
                self._error = exc
                continue
            for outcome in outcomes:
                if outcome.result is None:
                    self._state.failed_cells += 1
                else:
                    _count_calls(self._state, outcome.result)
                self._state.cells_done += 1
                if self._progress:
                    self._progress(self._state)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._con.close()
        if self._error is not None:
            raise self._error


def _warn_failed(task: CellTask, error: BaseException | None) -> None:
    import warnings

    warnings.warn(f"cell {task.session_id[:12]} × {task.config_name} (repeat {task.repeat}) failed: "
                  f"{type(error).__name__}: {error}", RuntimeWarning, stacklevel=2)


def _count_calls(state: RunProgress, result: ReplayResult) -> None:
    for event in result.compactions:
        usage = event.summarizer_usage or {}
        hits = int(usage.get("cache_hits") or 0)
        state.model_calls += int(usage.get("calls") or 0) - hits
        state.cache_hits += hits
        state.cost_usd += float(usage.get("cost_usd") or 0.0)
    metrics = result.metrics
    for key in ("evaluator_calls",):
        state.model_calls += int(metrics.get(key) or 0)


def results(run_id: str, db: str | None = None) -> pd.DataFrame:
    """The results of a run: one row per cell (session × config × repeat), every metric a column."""
    con = tables.connect_existing(db)
    try:
        return tables.results_frame(con, tables.resolve_run_id(con, run_id))
    finally:
        con.close()


def runs(db: str | None = None) -> pd.DataFrame:
    """Every stored run, newest first, with its status and how many cells are done."""
    con = tables.connect_existing(db)
    try:
        return tables.runs_frame(con)
    finally:
        con.close()


def save_replay(result: ReplayResult, db: str | None = None, *, dataset: str | None = None) -> str:
    """Store a single replay as a one-cell run (`workbench replay --save`); returns the run id."""
    con = tables.connect_existing(db)
    try:
        config = result.config.to_dict()
        digest = hashlib.sha256(json.dumps([result.session_id, config], sort_keys=True, default=str).encode())
        run_id = f"replay-{digest.hexdigest()[:10]}"
        tables.start_run(con, run_id, name=f"replay {result.config.name}", kind="replay",
                         spec={"session_id": result.session_id, "config": config}, configs=[(result.config.name,
                                                                                              config)],
                         code_version=code_version(), dataset_version=None, datasets=[dataset] if dataset else [],
                         cells_total=1)
        tables.save_cell(con, run_id, result, config=result.config.name, repeat=0, dataset=dataset)
        tables.finish_run(con, run_id)
        return run_id
    finally:
        con.close()


def dry_run(spec: ExperimentSpec | Mapping[str, Any] | str | os.PathLike[str], db: str | None = None
            ) -> dict[str, Any]:
    """What a run would do, without doing it: sessions, cells (and how many are already done), models."""
    from workbench import db as database
    from workbench.store import Store

    experiment = load_experiment(spec if not isinstance(spec, os.PathLike) else Path(spec))
    path = os.fspath(db) if db is not None else database.default_path()
    if path != ":memory:" and not os.path.exists(path):
        raise StoreError(f"database {path} does not exist")
    with Store(path, read_only=True) as store:
        pairs = select_sessions(store, experiment)
        version = dataset_version(pairs)
        run_id = run_key(experiment, version, code_version())
        con = store.connection
        try:
            done = tables.finished_cells(con, run_id)
        except Exception:  # a database from before the results tables
            done = set()
    cells = grid(experiment, [s for s, _ in pairs])
    per_config = []
    for cell in experiment.configs:
        config = cell.config
        models = sorted({m for m in (config.summarizer, getattr(config, "evaluator", None)) if m})
        per_config.append({"config": cell.name, "trigger": config.to_dict()["trigger"],
                           "strategy": config.to_dict()["strategy"], "models": models,
                           "cells": len(pairs) * experiment.repeats})
    return {"run_id": run_id, "experiment": experiment.name, "sessions": len(pairs), "configs": per_config,
            "repeats": experiment.repeats, "cells": len(cells), "cells_done": len(done & set(cells)),
            "cells_to_run": len(set(cells) - done)}
