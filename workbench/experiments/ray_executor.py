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
- A Ray task holds cells of one session (`workers.cell_units`): the worker that reads and analyses a session
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
`run_experiment` still receives the new answers, through its own cache). The quality measures stored
for the run's sessions travel the same way (`workbench.quality.measure_memo`): a worker reads back
those of a replay measured before, and returns the ones it took with the cell's outcome.

Cluster set-up: workers import `workbench`, so it must be installed in the cluster's Python
environment (or shipped with `init_options={"runtime_env": {...}}`), together with any plugin
whose kinds the spec names (kinds are looked up by name on the workers: register them through
the `workbench.plugins` entry points, not only in the driver's notebook). Models are called from
the workers, which need the network and API keys the models need (environment variables set on
the workers, or a `runtime_env` with `env_vars`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from workbench.experiments.cells import BoundCellWork, CellOutcome, CellTask, CellWork
from workbench.experiments.workers import (
    GatewaySettings,
    SnapshotCache,
    cache_snapshot,
    cell_units,
    compute_cell,
    session_batches,
)

if TYPE_CHECKING:
    from workbench.quality.measure_memo import StoredMeasures

__all__ = ["GatewaySettings", "RayExecutor", "SnapshotCache", "ray_available", "run_cell", "run_cells"]


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


def run_cell(
    work: CellWork,
    task: CellTask,
    run: str,
    batch_id: str,
    batch: Sequence[Any],
    snapshot: Sequence[Any],
    settings: GatewaySettings,
    measures: Sequence[Any] = (),
) -> CellOutcome:
    """A cell on a worker (the body of the Ray task): the session from its batch, the gateway on the
    cache snapshot, the run's memo of quality measures; returns the outcome with the model answers and
    the measures this cell obtained.

    `batch` and `snapshot` each hold one object reference, in a list so that Ray does not fetch
    and deserialise the object for every cell: a worker gets each once (`ray.get`) and keeps it.
    `measures` holds the reference of the stored measures and the code's version (empty: none)."""
    from workbench.tokens import set_counting_threads

    ray = _import_ray()
    reserved = ray.get_runtime_context().get_assigned_resources().get("CPU")
    set_counting_threads(max(1, int(reserved)) if reserved else 1)  # the cell's share of the machine
    memo: Callable[[], StoredMeasures] | None = None
    if measures:

        def memo() -> StoredMeasures:
            from workbench.quality.measure_memo import StoredMeasures

            return StoredMeasures(measures[1], ray.get(measures[0]))

    return compute_cell(
        work, task, run, batch_id, lambda: ray.get(batch[0]), lambda: ray.get(snapshot[0]), settings, memo
    )


def run_cells(
    work: CellWork,
    tasks: Sequence[CellTask],
    run: str,
    batch_id: str,
    batch: Sequence[Any],
    snapshot: Sequence[Any],
    settings: GatewaySettings,
    measures: Sequence[Any] = (),
) -> list[CellOutcome]:
    """Cells of one session on one worker (the body of the Ray task): `run_cell` for each, in order.
    The first reads and analyses the session; the others find it in this worker's memory."""
    return [run_cell(work, task, run, batch_id, batch, snapshot, settings, measures) for task in tasks]


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

    name: ClassVar[str] = "ray"
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
        self.batches = session_batches(tasks, max(1, executor.sessions_per_batch))
        slots = float(ray.cluster_resources().get("CPU", 1)) / max(executor.cpus_per_cell, 0.01)
        self.slots = max(1, int(slots))
        self.limit = executor.max_in_flight or max(2, int(2 * slots))

    def _export(self, session_ids: Sequence[str]) -> Any:
        return self.ray.put(self.store.session_tables(session_ids))

    def _snapshot(self) -> Any:
        return self.ray.put(cache_snapshot(self.store, self.work.gateway))

    def outcomes(self) -> Iterator[CellOutcome]:
        import uuid

        ray = self.ray
        run = uuid.uuid4().hex
        remote = ray.remote(run_cells).options(
            num_cpus=self.executor.cpus_per_cell, max_retries=self.executor.max_retries, retry_exceptions=False
        )
        work_ref = ray.put(self.work.cell)
        snapshot = [self._snapshot()]  # in a list: workers fetch it once per run, not with every cell
        memo = self.work.measures
        measures = [ray.put(memo.stored_table()), memo.version] if memo is not None else []
        settings = GatewaySettings.of(self.work.gateway)
        pending: dict[Any, tuple[list[CellTask], int]] = {}
        batch_refs: dict[int, Any] = {}
        remaining = [len(cells) for _, cells in self.batches]
        units = cell_units([cells for _, cells in self.batches], self.slots)
        position = 0
        try:
            while position < len(units) or pending:
                while position < len(units) and len(pending) < self.limit:
                    index, tasks = units[position]
                    position += 1
                    if index not in batch_refs:
                        batch_refs[index] = self._export(self.batches[index][0])
                    ref = remote.remote(
                        work_ref, tasks, run, f"{run}-{index}", [batch_refs[index]], snapshot, settings, measures
                    )
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
