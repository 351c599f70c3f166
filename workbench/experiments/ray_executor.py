"""Experiment cells on Ray: the same run, computed by worker processes of a local or remote cluster.

    run = wb.run_experiment("experiments/sweep.toml", db=..., executor="ray")                 # local Ray
    run = wb.run_experiment(spec, db=..., executor=RayExecutor(address="ray://head:10001"))   # a cluster

The driver (the process calling `run_experiment`) keeps the database: it selects the cells, and
its one writer thread stores the finished cells, whole cells per transaction, exactly as with the
local executor. Only the computing moves:

- Sessions travel as Arrow tables exported by DuckDB (the rows of `sessions`, `messages`,
  `probes` and `token_counts`, a batch of sessions at a time) and placed in Ray's object store;
  the driver never builds them as Python objects. A worker loads the batch into an in-memory
  workbench database and reads sessions with the same `Store.load_session` the local path uses,
  so both see identical sessions. A batch is exported when its first cell is submitted and
  released when its last cell returns, so the object store holds only the batches in flight; a
  worker fetches a batch once, with the first of its cells that reaches it.
- A Ray task holds cells of one session (`_units`): the worker that reads and analyses a session
  (its facts, its steps, its token prefix sums) computes the session's other cells from memory.
  Sent one per task, a session's cells spread over the workers and each analysed it again. The
  last few cells of a run go one per task, so that no worker idles while another finishes.
- Each worker runs `CellWork.compute` (the same function the local executor calls) and returns
  the `CellOutcome` with the replay result `detached()`: without the session, the per-call context
  snapshots and the final context, which the writer does not store (the recorded usage per call it
  does store travels as two columns).
- A cell counts tokens on as many threads as the CPUs its task reserved (one by default, see
  `cpus_per_cell`), not on every core of the machine, so workers side by side do not oversubscribe it.
- Ray retries a task whose worker process dies (`max_retries`); a retried task still returns one
  outcome per cell, and the writer skips a cell already stored, so a crash neither loses nor
  duplicates a cell. A cell that raises is a failed cell, as locally, and is not retried.

The model cache. DuckDB allows one writing process, and the driver holds the database open for
writing for the whole run, so workers can open it neither for writing nor read-only. At the
start of a run the driver therefore exports the `llm_cache` table once to the object store: each
worker answers cache lookups from this read-only snapshot (plus the answers it made itself), and
returns the answers it obtained from a model with the cell's outcome; the driver commits them to
`llm_cache` through its gateway's cache, first answer per key winning, as locally. A re-run, on
Ray or locally, then finds every answer in the cache. Two cells of one run that ask the very same
question on different workers both call the model (a local run asks once): results are the same,
only the cache-hit counters differ, and the first answer stored wins.

The snapshot is the whole `llm_cache` table of the run's database (a gateway passed to
`run_experiment` still receives the new answers, through its own cache).

Cluster set-up: workers import `workbench`, so it must be installed in the cluster's Python
environment (or shipped with `init_options={"runtime_env": {...}}`), together with any plugin
whose kinds the spec names (kinds are looked up by name on the workers: register them through
the `workbench.plugins` entry points, not only in the driver's notebook). Models are called from
the workers, which need the network and API keys the models need (environment variables set on
the workers, or a `runtime_env` with `env_vars`).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.experiments.cells import BoundCellWork, CellOutcome, CellTask, CellWork

if TYPE_CHECKING:
    import pyarrow as pa

    from workbench.llm import CacheEntry, Gateway
    from workbench.session import Session
    from workbench.store import Store

__all__ = ["GatewaySettings", "RayExecutor", "SnapshotCache", "ray_available", "run_cell", "run_cells"]


# The tables a session is made of, with the column naming the session, in insertion order.
def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            "the Ray executor needs Ray: install the `ray` extra, `pip install 'compaction-workbench[ray]'`"
        ) from exc
    return ray


def ray_available() -> bool:
    """Whether Ray can be imported here (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("ray") is not None


@dataclass(frozen=True)
class GatewaySettings:
    """The options of the driver's gateway that a worker's gateway repeats: never its cache, and no
    secret default (a key in a config's options travels with the config; keys otherwise come from
    the workers' environment, as the gateway reads them anywhere)."""

    concurrency: int = 8
    timeout: float = 120.0
    num_retries: int = 4
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    max_retry_after: float = 120.0
    retry_bad_response: bool = False
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, gateway: Any) -> GatewaySettings:
        from workbench.llm.options import is_secret_option

        retry = getattr(gateway, "retry", None)
        base = cls()
        return cls(
            concurrency=int(getattr(gateway, "concurrency", base.concurrency)),
            timeout=float(getattr(gateway, "timeout", base.timeout)),
            num_retries=int(getattr(gateway, "num_retries", base.num_retries)),
            backoff_base=float(getattr(retry, "backoff_base", base.backoff_base)),
            backoff_max=float(getattr(retry, "backoff_max", base.backoff_max)),
            max_retry_after=float(getattr(retry, "max_retry_after", base.max_retry_after)),
            retry_bad_response=bool(getattr(retry, "retry_bad_response", base.retry_bad_response)),
            defaults={
                name: value
                for name, value in (getattr(gateway, "defaults", {}) or {}).items()
                if not is_secret_option(name)
            },
        )

    def gateway(self, cache: Any) -> Gateway:
        from workbench.llm import Gateway

        return Gateway(
            cache,
            concurrency=self.concurrency,
            timeout=self.timeout,
            num_retries=self.num_retries,
            backoff_base=self.backoff_base,
            backoff_max=self.backoff_max,
            max_retry_after=self.max_retry_after,
            retry_bad_response=self.retry_bad_response,
            defaults=self.defaults,
        )


class SnapshotCache:
    """A worker's model cache: a read-only snapshot of `llm_cache` (an Arrow table) plus the answers
    made in this process since, which `drain()` hands over (once each) for the driver to commit."""

    def __init__(self, snapshot: pa.Table):
        self._snapshot = snapshot
        self._rows = {key: row for row, key in enumerate(snapshot.column("key").to_pylist())}
        self._lock = threading.Lock()
        self._made: dict[str, CacheEntry] = {}
        self._unsent: list[tuple[str, str, str, CacheEntry, bool]] = []

    def get(self, key: str) -> CacheEntry | None:
        from workbench.llm.cache import ENTRY_COLUMNS, CacheEntry

        with self._lock:
            made = self._made.get(key)
        if made is not None:
            return made
        row = self._rows.get(key)
        if row is None:
            return None
        values = self._snapshot.slice(row, 1).to_pylist()[0]
        return CacheEntry.from_row([values[column] for column in ENTRY_COLUMNS])

    def get_many(self, keys: Sequence[str]) -> dict[str, CacheEntry]:
        found = {}
        for key in dict.fromkeys(keys):
            entry = self.get(key)
            if entry is not None:
                found[key] = entry
        return found

    def put(
        self, key: str, model: str, request: Mapping[str, Any] | str, entry: CacheEntry, *, replace: bool = False
    ) -> None:
        """Answers travel to the driver with their request as canonical JSON (`request_json`): one
        string to pickle, and the driver's cache stores it as it is (replacing, with `replace`)."""
        from workbench.llm.cache import request_json

        with self._lock:
            if not replace and (key in self._made or key in self._rows):
                return
            self._made[key] = entry
            self._unsent.append((key, model, request_json(request), entry, replace))

    def drain(self) -> tuple[tuple[str, str, str, CacheEntry, bool], ...]:
        with self._lock:
            unsent, self._unsent = self._unsent, []
        return tuple(unsent)

    def close(self) -> None:
        pass


class _Worker:
    """What a worker process keeps between cells: an in-memory database holding the session batches
    it was sent (the last few), the sessions it read (the last few), and a gateway per run."""

    BATCHES_KEPT = 4
    SESSIONS_KEPT = 8

    def __init__(self) -> None:
        self._store: Store | None = None
        self._batches: collections.OrderedDict[str, list[str]] = collections.OrderedDict()
        self._sessions: collections.OrderedDict[str, Session] = collections.OrderedDict()
        self._run: str | None = None
        self._gateway: Gateway | None = None
        self._cache: SnapshotCache | None = None

    def session(self, batch_id: str, fetch: Callable[[], Mapping[str, pa.Table]], session_id: str) -> Session:
        """The session from this worker's copy of its batch; `fetch` gets the batch (from the object
        store) only when this worker has not loaded it yet."""
        session = self._sessions.get(session_id)
        if session is not None:
            self._sessions.move_to_end(session_id)
            return session
        store = self._load_batch(batch_id, fetch)
        session = store.load_session(session_id)
        self._sessions[session_id] = session
        while len(self._sessions) > self.SESSIONS_KEPT:
            self._sessions.popitem(last=False)
        return session

    def _load_batch(self, batch_id: str, fetch: Callable[[], Mapping[str, pa.Table]]) -> Store:
        from workbench.store import Store

        if self._store is None:
            self._store = Store(":memory:")
        if batch_id in self._batches:
            self._batches.move_to_end(batch_id)
            return self._store
        ids = self._store.load_session_tables(fetch())
        incoming = set(ids)
        for kept in self._batches.values():  # a session sent again (another run) now belongs to this batch
            kept[:] = [i for i in kept if i not in incoming]
        self._batches[batch_id] = ids
        while len(self._batches) > self.BATCHES_KEPT:
            _, evicted = self._batches.popitem(last=False)
            self._store.delete_sessions(evicted)
        return self._store

    def gateway(self, run: str, snapshot: Sequence[Any], settings: GatewaySettings) -> tuple[Gateway, SnapshotCache]:
        if self._run != run or self._gateway is None or self._cache is None:
            if self._gateway is not None:
                self._gateway.close()  # the previous run's connection pool (its snapshot has nothing to close)
            ray = _import_ray()
            self._cache = SnapshotCache(ray.get(snapshot[0]))
            self._gateway = settings.gateway(self._cache)
            self._run = run
        return self._gateway, self._cache


_WORKER: _Worker | None = None
_WORKER_LOCK = threading.Lock()


def _worker() -> _Worker:
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            _WORKER = _Worker()
        return _WORKER


def run_cell(
    work: CellWork,
    task: CellTask,
    run: str,
    batch_id: str,
    batch: Sequence[Any],
    snapshot: Sequence[Any],
    settings: GatewaySettings,
) -> CellOutcome:
    """A cell on a worker (the body of the Ray task): the session from its batch, the gateway on the
    cache snapshot; returns the outcome with the model answers this cell obtained.

    `batch` and `snapshot` each hold one object reference, in a list so that Ray does not fetch
    and deserialise the object for every cell: a worker gets each once (`ray.get`) and keeps it."""
    from workbench.tokens import set_counting_threads

    ray = _import_ray()
    reserved = ray.get_runtime_context().get_assigned_resources().get("CPU")
    set_counting_threads(max(1, int(reserved)) if reserved else 1)  # the cell's share of the machine
    state = _worker()
    gateway, cache = state.gateway(run, snapshot, settings)
    cache.drain()  # answers of an earlier cell whose outcome never left this process (none, normally)
    outcome = work.compute(task, lambda: state.session(batch_id, lambda: ray.get(batch[0]), task.session_id), gateway)
    result = outcome.result.detached() if outcome.result is not None else None
    return dataclasses.replace(outcome, result=result, cache_entries=cache.drain())


def run_cells(
    work: CellWork,
    tasks: Sequence[CellTask],
    run: str,
    batch_id: str,
    batch: Sequence[Any],
    snapshot: Sequence[Any],
    settings: GatewaySettings,
) -> list[CellOutcome]:
    """Cells of one session on one worker (the body of the Ray task): `run_cell` for each, in order.
    The first reads and analyses the session; the others find it in this worker's memory."""
    return [run_cell(work, task, run, batch_id, batch, snapshot, settings) for task in tasks]


@dataclass
class RayExecutor:
    """Runs experiment cells as Ray tasks (a session's cells together, one CPU each) and yields their
    outcomes as they finish.

    address: the cluster (`"auto"`, `"ray://host:10001"`); None starts a local Ray with
    `num_cpus` CPUs (default: all). A Ray already initialised in this process is used as it is.
    max_in_flight: tasks submitted at a time (default: twice the tasks the cluster runs at once),
    which also bounds the session batches held in the object store. sessions_per_batch: sessions
    exported per batch. max_retries: re-runs of a task whose worker died. cpus_per_cell: the CPUs
    Ray reserves per task, whose cells run one after another; below 1 lets cells that mostly wait
    on a model share a CPU (0.25: four per CPU). init_options: more `ray.init` arguments (e.g.
    `runtime_env`).
    """

    address: str | None = None
    num_cpus: int | None = None
    max_in_flight: int | None = None
    sessions_per_batch: int = 16
    max_retries: int = 3
    cpus_per_cell: float = 1.0
    init_options: Mapping[str, Any] = field(default_factory=dict)

    def connect(self) -> Any:
        """Ray, initialised (started locally, or connected to `address`) unless it already is."""
        ray = _import_ray()
        if not ray.is_initialized():
            if self.address is None:  # a Ray of our own reports no usage statistics unless the user asked
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            options: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "configure_logging": False,
                **self.init_options,
            }
            if self.address is not None:
                options["address"] = self.address
            elif self.num_cpus is not None:
                options["num_cpus"] = self.num_cpus
            ray.init(**options)
        return ray

    def map(self, work: Callable[[CellTask], CellOutcome], tasks: Iterable[CellTask]) -> Iterator[CellOutcome]:
        if not isinstance(work, BoundCellWork):
            raise TypeError(
                "RayExecutor runs experiment cells: `work` must be the BoundCellWork that "
                f"run_experiment passes, not {type(work).__name__}"
            )
        ray = self.connect()
        yield from _RayRun(ray, self, work, list(tasks)).outcomes()


class _RayRun:
    """One `map` call: exports batches as their cells are submitted, collects outcomes as they finish."""

    def __init__(self, ray: Any, executor: RayExecutor, work: BoundCellWork, tasks: list[CellTask]):
        self.ray = ray
        self.executor = executor
        self.work = work
        if work.store is None:
            raise TypeError("RayExecutor exports sessions from the run's store: `work.store` must be open")
        self.store = work.store
        self.batches = _batches(tasks, max(1, executor.sessions_per_batch))
        slots = float(ray.cluster_resources().get("CPU", 1)) / max(executor.cpus_per_cell, 0.01)
        self.slots = max(1, int(slots))
        self.limit = executor.max_in_flight or max(2, int(2 * slots))

    def _export(self, session_ids: Sequence[str]) -> Any:
        return self.ray.put(self.store.session_tables(session_ids))

    def _snapshot(self) -> Any:
        flush = getattr(getattr(self.work.gateway, "cache", None), "flush", None)
        if flush is not None:
            flush()
        return self.ray.put(self.store.model_cache_rows())

    def outcomes(self) -> Iterator[CellOutcome]:
        import uuid

        ray = self.ray
        run = uuid.uuid4().hex
        remote = ray.remote(run_cells).options(
            num_cpus=self.executor.cpus_per_cell, max_retries=self.executor.max_retries, retry_exceptions=False
        )
        work_ref = ray.put(self.work.cell)
        snapshot = [self._snapshot()]  # in a list: workers fetch it once per run, not with every cell
        settings = GatewaySettings.of(self.work.gateway)
        pending: dict[Any, tuple[list[CellTask], int]] = {}
        batch_refs: dict[int, Any] = {}
        remaining = [len(cells) for _, cells in self.batches]
        units = _units([cells for _, cells in self.batches], self.slots)
        position = 0
        try:
            while position < len(units) or pending:
                while position < len(units) and len(pending) < self.limit:
                    index, tasks = units[position]
                    position += 1
                    if index not in batch_refs:
                        batch_refs[index] = self._export(self.batches[index][0])
                    ref = remote.remote(work_ref, tasks, run, f"{run}-{index}", [batch_refs[index]], snapshot, settings)
                    pending[ref] = (tasks, index)
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    tasks, index = pending.pop(ref)
                    try:
                        outcomes = ray.get(ref)
                    except Exception as exc:  # the worker died more often than retried, or the result did not travel
                        outcomes = [CellOutcome(task, None, 0.0, exc) for task in tasks]
                    remaining[index] -= len(tasks)
                    if remaining[index] == 0:
                        batch_refs.pop(index, None)
                    yield from outcomes
        finally:
            for ref in pending:
                ray.cancel(ref)


def _units(batches: Sequence[Sequence[CellTask]], slots: int) -> list[tuple[int, list[CellTask]]]:
    """The Ray tasks of a run, as (batch index, cells): the cells of one session together, so the
    worker that reads and analyses a session computes its other cells from memory (with cells one
    per task, a session's cells spread over the workers and each analysed it again); at most a
    quarter of a slot's share of the run per task, and the last `2 * slots` cells one per task,
    so that no worker idles at the end while another finishes a long task."""
    total = sum(map(len, batches))
    cap = max(1, total // (4 * slots))
    units: list[tuple[int, list[CellTask]]] = []
    for index, cells in enumerate(batches):
        start = 0
        while start < len(cells):
            session = cells[start].session_id
            stop = start
            while stop < len(cells) and stop - start < cap and cells[stop].session_id == session:
                stop += 1
            units.append((index, list(cells[start:stop])))
            start = stop
    singles: list[tuple[int, list[CellTask]]] = []
    while units and len(singles) < 2 * slots:
        index, cells = units.pop()
        singles[:0] = [(index, [cell]) for cell in cells]
    return units + singles


def _batches(tasks: Sequence[CellTask], sessions_per_batch: int) -> list[tuple[list[str], list[CellTask]]]:
    """Tasks grouped by session (first-seen order), `sessions_per_batch` sessions per batch."""
    by_session: dict[str, list[CellTask]] = {}
    for task in tasks:
        by_session.setdefault(task.session_id, []).append(task)
    ids = list(by_session)
    return [
        (
            ids[start : start + sessions_per_batch],
            [task for session_id in ids[start : start + sessions_per_batch] for task in by_session[session_id]],
        )
        for start in range(0, len(ids), sessions_per_batch)
    ]
