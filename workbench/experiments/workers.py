"""What a process computing experiment cells for another keeps: the machinery the Ray executor and the
process executor share.

The run's process keeps the database. A worker gets sessions as Arrow tables (`Store.session_tables`)
and builds them from those rows (`sessions_from_tables`, kept by `WorkerState`), answers model calls from a snapshot of
the model cache plus its own answers (`SnapshotCache`), which travel back with each cell's outcome, and
calls models through a gateway rebuilt from the run's settings (`GatewaySettings`). Cells travel grouped
by session (`cell_units`), so the worker that reads and analyses a session computes its other cells from
memory.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.experiments.cells import CellOutcome, CellTask, CellWork

if TYPE_CHECKING:
    import pyarrow as pa

    from workbench.llm import CacheEntry, Gateway
    from workbench.quality.measure_memo import StoredMeasures
    from workbench.session import Session
    from workbench.store import Store

__all__ = [
    "GatewaySettings",
    "SnapshotCache",
    "WorkerState",
    "cache_snapshot",
    "cell_units",
    "compute_cell",
    "session_batches",
    "worker_state",
]


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
        from workbench.llm.cache import AnswerTable

        self._stored = AnswerTable(snapshot)
        self._lock = threading.Lock()
        self._made: dict[str, CacheEntry] = {}
        self._unsent: list[tuple[str, str, str, CacheEntry, bool]] = []

    def get(self, key: str) -> CacheEntry | None:
        with self._lock:
            made = self._made.get(key)
        return made if made is not None else self._stored.get(key)

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
            if not replace and (key in self._made or key in self._stored):
                return
            self._made[key] = entry
            self._unsent.append((key, model, request_json(request), entry, replace))

    def drain(self) -> tuple[tuple[str, str, str, CacheEntry, bool], ...]:
        with self._lock:
            unsent, self._unsent = self._unsent, []
        return tuple(unsent)

    def close(self) -> None:
        pass


class WorkerState:
    """What a worker process keeps between cells: the sessions of the batches it was sent (the last
    few), built from their rows, and a gateway per run."""

    BATCHES_KEPT = 4

    def __init__(self) -> None:
        self._batches: collections.OrderedDict[str, dict[str, Session]] = collections.OrderedDict()
        self._run: str | None = None
        self._gateway: Gateway | None = None
        self._cache: SnapshotCache | None = None
        self._measures: tuple[str, StoredMeasures] | None = None

    def session(self, batch_id: str, fetch: Callable[[], Mapping[str, pa.Table]], session_id: str) -> Session:
        """The session from this worker's copy of its batch; `fetch` gets the batch (from Ray's object
        store, or as sent with the cells) only when this worker has not loaded it yet."""
        from workbench.errors import StoreError
        from workbench.store import sessions_from_tables

        sessions = self._batches.get(batch_id)
        if sessions is None:
            sessions = self._batches[batch_id] = {s.id: s for s in sessions_from_tables(fetch())}
            while len(self._batches) > self.BATCHES_KEPT:
                self._batches.popitem(last=False)
        self._batches.move_to_end(batch_id)
        session = sessions.get(session_id)
        if session is None:
            raise StoreError(f"no session {session_id!r} in the rows sent with its cells")
        return session

    def gateway(
        self, run: str, snapshot: Callable[[], pa.Table], settings: GatewaySettings
    ) -> tuple[Gateway, SnapshotCache]:
        """The gateway of run `run` on its cache snapshot (`snapshot()` gets it, once per run)."""
        if self._run != run or self._gateway is None or self._cache is None:
            if self._gateway is not None:
                self._gateway.close()  # the previous run's connection pool (its snapshot has nothing to close)
            self._cache = SnapshotCache(snapshot())
            self._gateway = settings.gateway(self._cache)
            self._run = run
        return self._gateway, self._cache

    def measures(self, run: str, stored: Callable[[], StoredMeasures]) -> StoredMeasures:
        """Run `run`'s memo of quality measures (`stored()` gets it, once per run)."""
        if self._measures is None or self._measures[0] != run:
            self._measures = (run, stored())
        return self._measures[1]


_WORKER: WorkerState | None = None
_WORKER_LOCK = threading.Lock()


def worker_state() -> WorkerState:
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            _WORKER = WorkerState()
        return _WORKER


def cache_snapshot(store: Store, gateway: Any) -> pa.Table:
    """The run's model cache as workers start from it: `gateway`'s answers still queued for the
    database written first, then every row of `llm_cache` (`Store.model_cache_rows`)."""
    flush = getattr(getattr(gateway, "cache", None), "flush", None)
    if flush is not None:
        flush()
    return store.model_cache_rows()


def compute_cell(
    work: CellWork,
    task: CellTask,
    run: str,
    batch_id: str,
    batch: Callable[[], Mapping[str, pa.Table]],
    snapshot: Callable[[], pa.Table],
    settings: GatewaySettings,
    measures: Callable[[], StoredMeasures] | None = None,
) -> CellOutcome:
    """A cell in a worker: the session from its batch (`batch()` gets the batch's tables, only when this
    worker has not loaded it), the gateway on the cache snapshot, the run's memo of quality measures
    (`measures()` gets it; None: none); returns the outcome, its result `detached()`, with the model
    answers and the measures this cell obtained."""
    state = worker_state()
    gateway, cache = state.gateway(run, snapshot, settings)
    cache.drain()  # answers of an earlier cell whose outcome never left this process (none, normally)
    memo = state.measures(run, measures) if measures is not None else None
    outcome = work.compute(task, lambda: state.session(batch_id, batch, task.session_id), gateway, memo)
    result = outcome.result.detached() if outcome.result is not None else None
    return dataclasses.replace(
        outcome, result=result, cache_entries=cache.drain(), measures=memo.drain() if memo is not None else ()
    )


def cell_units(batches: Sequence[Sequence[CellTask]], slots: int) -> list[tuple[int, list[CellTask]]]:
    """The units sent to workers (a Ray task, a worker process's job), as (batch index, cells): the
    cells of one session together, so the worker that reads and analyses a session computes its other
    cells from memory (with cells one per unit, a session's cells spread over the workers and each
    analysed it again); at most a quarter of a slot's share of the run per unit, and the last
    `2 * slots` cells one per unit, so that no worker idles at the end while another finishes a long
    one."""
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


def session_batches(tasks: Sequence[CellTask], sessions_per_batch: int) -> list[tuple[list[str], list[CellTask]]]:
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
