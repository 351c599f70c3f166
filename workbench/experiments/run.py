"""Running an experiment: session × config × repeat cells, executed concurrently, committed one by one.

    run = wb.run_experiment("experiments/reference-designs.toml", db="data/workbench.duckdb")
    run.id, run.results          # the results DataFrame: one row per cell, every metric a column

A run's id is derived from its spec, the dataset version (the sessions it covers) and the code
version, so running the same spec again resumes the same run: finished cells are read back, not
recomputed, and only the missing ones run. Finished cells are written by the one thread that
writes (DuckDB has a single writer), whole cells per transaction, at once or, while cells keep
finishing, a quarter of a second later (`COMMIT_INTERVAL`), so an interrupted run (Ctrl-C, kill -9)
holds only whole cells and loses at most the last quarter second's.

A run holds the database file only while it reads or writes (a batch of cells, a batch of
sessions, a model-cache lookup: `workbench.store.db.FileHold`), never between: DuckDB lets no other
process open a file one process has open for writing, and the CLI, the app and notebooks read the
sessions and the run's finished cells while it goes on (they wait for a batch to be written).

Cells go through an `Executor` (local threads by default, worker processes with
`executor="processes"`, or Ray workers with `executor="ray"`):
it maps a function over tasks and yields outcomes as they complete. Model calls go through one
gateway whose cache is the database's `llm_cache`, so a re-run of a finished cell's calls costs
nothing either.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

from workbench.collector import fewer_collections
from workbench.errors import ConfigError, SessionFilterError, StoreError, did_you_mean
from workbench.experiments.cells import BoundCellWork, CellOutcome, CellSpend, CellTask, CellWork
from workbench.experiments.spec import ExperimentSpec, grid, load_experiment
from workbench.store.results import FinishedCell, NoopConfig, held_results, open_results
from workbench.store.sessions import held_store
from workbench.strategies.common import may_summarize
from workbench.tokens import usable_cpus

if TYPE_CHECKING:
    import pandas as pd

    from workbench.quality.measure_memo import StoredMeasures
    from workbench.replay import ReplayResult
    from workbench.session import Session
    from workbench.store import Store
    from workbench.store.db import FileHold

#: Seconds between the writer's commits while cells keep finishing (`_CellWriter`).
COMMIT_INTERVAL = 0.25


class Executor(Protocol):
    """Runs cells: `map(work, tasks)` yields one outcome per task, in completion order.

    `work` is safe to call from any thread. A distributed engine implements the same method: it
    receives the `BoundCellWork` of the run and computes `work.cell` elsewhere (see `ray_executor`).
    """

    def map(self, work: Callable[[CellTask], CellOutcome], tasks: Iterable[CellTask]) -> Iterator[CellOutcome]: ...


#: Cells the local executor keeps in flight per model call the run allows (the spec's `concurrency`).
#: The model's limiter bounds the requests; a cell also does CPU work (replay, cache lookup, parsing)
#: before and after its call, and the extra cells do theirs while the others wait for answers, so a
#: model slot never waits for a cell to get ready.
CELLS_PER_CALL_SLOT = 2


@dataclass
class LocalExecutor:
    """Threads in this process; `concurrency` cells in flight, refilled as each one finishes.

    A finished cell starts the next one from its worker thread, so the pace never depends on how
    fast the consumer of the outcomes (the database writer) keeps up.
    """

    name: ClassVar[str] = "local"
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
    """What a progress bar shows: cells done (reused included), and of the cells computed in this
    run (failed ones included) the model calls made, the cache hits and the money spent, the
    summarizer's and the evaluator's together (`CellSpend`: a cache hit costs nothing; the
    `unpriced_calls` are not in `cost_usd`, their price being unknown), and how many had their quality
    measures read back from the database (`measures_reused`: replays that came out as one measured
    before with the same code, `workbench.quality.measure_memo`)."""

    cells_total: int
    cells_reused: int = 0
    cells_done: int = 0
    model_calls: int = 0
    cache_hits: int = 0
    cost_usd: float = 0.0
    failed_cells: int = 0
    unpriced_calls: int = 0
    measures_reused: int = 0

    @property
    def cost(self) -> str:
        """The money spent, saying how many calls it leaves out when some had no known price."""
        unknown = f" + unknown for {self.unpriced_calls} calls at unknown prices" if self.unpriced_calls else ""
        return f"${self.cost_usd:.4f}{unknown}"

    def line(self) -> str:
        failed = f", {self.failed_cells} failed" if self.failed_cells else ""
        measured = f", {self.measures_reused} with their measures reused" if self.measures_reused else ""
        return (
            f"{self.cells_done - self.failed_cells}/{self.cells_total} cells ({self.cells_reused} reused{failed}"
            f"{measured}), "
            f"{self.model_calls} model calls, {self.cache_hits} cache hits, {self.cost}"
        )


@dataclass(frozen=True)
class ExecutorChoice:
    """Where a run computed its cells: the executor's name (`local`, `processes`, `ray`, or an executor
    object's class) and, when `executor="auto"` chose it, why (empty when it was named, or when no cell
    was left to compute)."""

    name: str
    reason: str


@dataclass
class Run:
    """A run of an experiment: its id and, once read, its results (one row per cell)."""

    id: str
    spec: ExperimentSpec
    db: str
    progress: RunProgress
    status: str = "finished"
    executor: ExecutorChoice = field(default_factory=lambda: ExecutorChoice("local", ""))
    _results: pd.DataFrame | None = field(default=None, repr=False)

    @property
    def results(self) -> pd.DataFrame:
        if self._results is None:
            self._results = results(self.id, db=self.db)
        return self._results

    def summaries_note(self) -> str | None:
        """`summaries_note` of this run."""
        return summaries_note(self.id, db=self.db)

    def __repr__(self) -> str:
        return f"Run({self.id!r}, {self.status}, {self.progress.line()})"


def code_version(root: Path | None = None) -> str:
    """The package version, plus the git commit when running from a checkout, and a hash of the
    uncommitted change to the package when there is one (`.dirty-<hash>`): each edit of the code is
    another version, so a run never reuses cells an earlier edit computed."""
    from workbench import __version__

    root = root or Path(__file__).resolve().parents[2]  # the checkout holding this package
    if not (root / ".git").exists():
        return __version__
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        change = subprocess.run(
            ["git", "-C", str(root), "diff", "HEAD", "--binary", "--", "workbench"], capture_output=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return __version__
    dirty = f".dirty-{hashlib.sha256(change).hexdigest()[:10]}" if change else ""
    return f"{__version__}+{commit}{dirty}"


def user_code(configs: Iterable[Mapping[str, Any]], metrics: Iterable[str] = ()) -> dict[str, str]:
    """`family/name` -> a hash of the source of each kind the configs (as dicts) and metrics name
    that is not the workbench's own (a user's trigger, strategy or metric, registered in a notebook
    or a plugin): a change to it changes the run's id, as a change to the package does
    (`code_version`). A kind whose source cannot be read is hashed by its module and qualified name."""
    import inspect

    from workbench.registry import kinds, lookup

    named: set[str] = set(metrics)

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            if isinstance(value.get("kind"), str):
                named.add(value["kind"])
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    for config in configs:
        walk(config)
    hashes: dict[str, str] = {}
    for family in ("trigger", "strategy", "metric"):
        for name in sorted(named & set(kinds(family))):
            cls = lookup(family, name)
            if cls.__module__.split(".")[0] == "workbench":
                continue
            try:
                source = inspect.getsource(cls)
            except (OSError, TypeError):
                source = f"{cls.__module__}.{cls.__qualname__}"
            hashes[f"{family}/{name}"] = hashlib.sha256(source.encode()).hexdigest()[:12]
    return hashes


def dataset_version(sessions: Sequence[tuple[str, str | None]]) -> str:
    """A hash of the (session id, dataset) pairs a run covers: ids are content hashes."""
    digest = hashlib.sha256()
    for session_id, dataset in sorted(sessions, key=lambda pair: pair[0]):
        digest.update(f"{session_id}\t{dataset}\n".encode())
    return digest.hexdigest()[:16]


def run_key(spec: ExperimentSpec, dataset_hash: str, code: str) -> str:
    """The run id: the spec's name and a hash of what determines its results, the code of the
    user's own kinds it uses included (`user_code`)."""
    material = json.dumps(
        {
            "spec": [(c.name, c.config.to_dict()) for c in spec.configs],
            "metrics": list(spec.metrics),
            "repeats": spec.repeats,
            "dataset": dataset_hash,
            "code": code,
            "user_code": user_code([c.config.to_dict() for c in spec.configs], spec.metrics),
        },
        sort_keys=True,
        default=str,
    )
    return f"{spec.name}-{hashlib.sha256(material.encode()).hexdigest()[:10]}"


def select_sessions(store: Store, spec: ExperimentSpec) -> list[tuple[str, str | None]]:
    """The (id, dataset) pairs of the sessions a spec covers, in a stable order."""
    pairs: list[tuple[str, str | None]] = []
    known = [row["name"] for row in store.dataset_rows()] if hasattr(store, "dataset_rows") else []
    unknown = [name for name in spec.datasets if name not in known]
    if known and unknown and len(unknown) < len(spec.datasets):  # all unknown: said below, with the rest
        raise ConfigError(
            f"experiment {spec.name!r}: no dataset {', '.join(map(repr, unknown))} in the database; "
            f"datasets: {', '.join(map(str, known))}{did_you_mean(unknown, map(str, known))}"
        )
    for dataset in spec.datasets:
        try:
            ids = store.session_ids(dataset=dataset, where=spec.where)
        except SessionFilterError as exc:
            raise SessionFilterError(f"experiment {spec.name!r}, key 'where': {exc}") from exc
        pairs.extend((session_id, dataset) for session_id in ids)
    if not pairs:
        raise ConfigError(
            f"experiment {spec.name!r}: no sessions in dataset(s) {', '.join(spec.datasets)}"
            + (f" matching {spec.where!r}" if spec.where else "")
            + (f"; datasets in the database: {', '.join(map(str, known))}" if known else "")
            + did_you_mean([d for d in spec.datasets if d not in known], map(str, known))
            + (
                "; the bundled samples load with `workbench init --samples`"
                if "samples" in spec.datasets and "samples" not in known
                else ""
            )
        )
    seen: set[str] = set()
    unique = []
    for pair in pairs:
        if pair[0] not in seen:
            seen.add(pair[0])
            unique.append(pair)
    return unique


class _SessionCache:
    """Sessions loaded on demand, kept only while cells of theirs are pending.

    Cells come session by session (see `grid`), so it holds about as many sessions as there are
    cells in flight, never the dataset: a session is dropped when its last cell is done, and one
    with no pending cell (an unexpected or repeated load) is handed out without being kept.
    A miss also reads the next `batch - 1` pending sessions in the same queries: a run's first
    cells all want a session at once, and one read of many costs about what one read of one does.
    `peak` is the most sessions it ever held at once. `open_store` opens the database for one read
    (a run's `FileHold`: the file is let go once idle), so that the run does not hold the file
    between reads.

    Sessions come with their stored token counts. Those under the run's `tokenizers` a loaded batch
    lacks (a tokenizer this database never met, a database imported before imports stored counts)
    are counted at once for the batch, the file not held meanwhile, and stored in one brief open:
    no later run, page or notebook counts them again.
    """

    def __init__(self, open_store: Callable[[], contextlib.AbstractContextManager[Store]], batch: int = 1):
        self._open_store = open_store
        self._batch = max(1, int(batch))
        self.tokenizers: tuple[str, ...] = ()  # the tokenizers of the run's configs
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._remaining: dict[str, int] = {}
        self.peak = 0

    def expect(self, tasks: Sequence[CellTask]) -> None:
        for task in tasks:
            self._remaining[task.session_id] = self._remaining.get(task.session_id, 0) + 1

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None:
                return session
            if self._remaining.get(session_id, 0) <= 0:
                with self._open_store() as store:
                    session = store.load_session(session_id)
                    lacking = self._lacking(store, [session_id])
                self._store_counts([session], lacking)
                return session
            wanted = [session_id, *self._upcoming(session_id)]
            with self._open_store() as store:
                loaded = store.sessions_by_id(wanted)
                if session_id not in {s.id for s in loaded}:
                    store.load_session(session_id)  # raises: the session is gone
                lacking = self._lacking(store, [s.id for s in loaded])
            self._store_counts(loaded, lacking)
            for found in loaded:
                self._sessions[found.id] = found
            self.peak = max(self.peak, len(self._sessions))
            return self._sessions[session_id]

    def store_lacking_counts(self, ids: Sequence[str], batch: int = 64) -> None:
        """Count and store the counts the database lacks of sessions `ids` under the run's tokenizers,
        `batch` sessions at a time: for an executor computing cells elsewhere, whose workers read the
        counts stored with the sessions' rows and cannot store what they count (each run would count
        again)."""
        with self._open_store() as store:
            lacking = self._lacking(store, ids)
        wanted = sorted(set().union(*lacking.values()))
        for start in range(0, len(wanted), batch):
            with self._open_store() as store:
                loaded = store.sessions_by_id(wanted[start : start + batch])
            self._store_counts(loaded, lacking)

    def _lacking(self, store: Store, ids: Sequence[str]) -> dict[str, set[str]]:
        """Per tokenizer of the run, the sessions of `ids` the database holds no counts of."""
        return {tokenizer: set(store.sessions_without_counts(ids, tokenizer)) for tokenizer in self.tokenizers}

    def _store_counts(self, sessions: Sequence[Session], lacking: Mapping[str, set[str]]) -> None:
        """Count, under each of the run's tokenizers, the sessions the database has no counts of (in
        one batch per tokenizer; a session this process counted before is not counted again), and
        store them in one transaction."""
        from workbench.tokens import prime

        for tokenizer in self.tokenizers:
            missing = [s for s in sessions if s.id in lacking.get(tokenizer, ())]
            if missing:
                prime([m for s in missing for m in s.messages], tokenizer)
                with self._open_store() as store:
                    store.save_token_counts_many(missing, tokenizer)

    def _upcoming(self, session_id: str) -> list[str]:
        """Up to `batch - 1` other sessions with pending cells that are not loaded, in grid order."""
        found: list[str] = []
        if self._batch > 1:
            for pending in self._remaining:
                if len(found) == self._batch - 1:
                    break
                if pending != session_id and pending not in self._sessions:
                    found.append(pending)
        return found

    def done(self, session_id: str) -> None:
        with self._lock:
            left = self._remaining.get(session_id, 0) - 1
            if left <= 0:
                self._remaining.pop(session_id, None)
                self._sessions.pop(session_id, None)
            else:
                self._remaining[session_id] = left


def run_experiment(
    spec: ExperimentSpec | Mapping[str, Any] | str | os.PathLike[str],
    db: str | None = None,
    *,
    concurrency: int | None = None,
    executor: Executor | str | None = "auto",
    gateway: Any = None,
    progress: Callable[[RunProgress], None] | None = None,
    fresh: bool = False,
    address: str | None = None,
    remeasure: bool = False,
) -> Run:
    """Run (or resume) an experiment; returns the `Run` with its id and results.

    `concurrency` overrides the spec's; `executor` says where cells are computed: an `Executor`, or a
    name, `"local"` (threads of this process), `"processes"` (a worker process per CPU: for grids
    whose cells are CPU work, such as offline summaries and quality metrics), `"auto"` (the default,
    also None: `processes` for a grid that is CPU work and big enough, else `local`; see
    `choose_executor`, and `Run.executor` for what ran) or `"ray"` (cells on a Ray cluster, the
    optional `ray` extra; `address` names the cluster, e.g. `"auto"` or `"ray://host:10001"`,
    default: a local one); `gateway` replaces the one caching into the database; `progress` is
    called after every cell.
    `fresh=True` deletes the run's stored cells first, so everything is recomputed (model calls
    still come from the cache, and the quality measures of a replay that came out as one measured
    before with this code from the database: `workbench.quality.measure_memo`; `remeasure=True`
    measures every replay again). A config whose trigger fired but whose strategy changed no context
    in any cell (e.g. masking on sessions without observations) is named once in a
    `NoopCompactionsWarning` at the end.
    """
    from workbench.store import Store
    from workbench.store import db as database

    experiment = load_experiment(spec if not isinstance(spec, os.PathLike) else Path(spec))
    db_path = os.fspath(db) if db is not None else database.default_path()
    chosen = _choose_executor(executor, address)
    with Store(db_path) as store:  # what the run needs to start, read at once: the file is not held for the run
        pairs = select_sessions(store, experiment)
        dataset_of = dict(pairs)
        version = dataset_version(pairs)
        code = code_version()
        run_id = run_key(experiment, version, code)
        all_cells = grid(experiment, [session_id for session_id, _ in pairs])
        store.results.start_run(
            run_id,
            name=experiment.name,
            kind="experiment",
            spec=_stored_spec(experiment),
            configs=[(c.name, c.config.to_dict()) for c in experiment.configs],
            code_version=code,
            dataset_version=version,
            datasets=experiment.datasets,
            cells_total=len(all_cells),
        )
        if fresh:
            store.results.delete_cells(run_id)
        done = store.results.finished_cells(run_id)
        todo = [CellTask(s, dataset_of.get(s), c, r) for s, c, r in all_cells if (s, c, r) not in done]
        measures = None if remeasure or not todo else run_measures(store, todo, code)
        if chosen is _AUTO and not todo:
            chosen, choice = None, ExecutorChoice("local", "")
        elif chosen is _AUTO:
            sizes = store.message_counts(sorted({t.session_id for t in todo}))
            choice = choose_executor(experiment, todo, sizes, gateway_given=gateway is not None)
            chosen = _choose_executor(choice.name, None)
        else:
            choice = ExecutorChoice(_executor_name(chosen), "")
    state = RunProgress(cells_total=len(all_cells), cells_reused=len(done), cells_done=len(done))
    if progress:
        progress(state)
    status = "finished"
    owned_gateway = None
    calls_in_flight = concurrency or experiment.concurrency
    hold = database.FileHold(db_path, linger=database.HOLD_SECONDS)  # the file opened about once a second
    if gateway is None:
        from workbench.llm import Gateway
        from workbench.store import DuckDBCache

        cache = DuckDBCache(hold)
        if chosen is None or isinstance(chosen, LocalExecutor):  # cells computed here: one read, not a query each
            cache.preload()
        gateway = owned_gateway = Gateway(cache, concurrency=max(8, calls_in_flight))
    local = LocalExecutor(calls_in_flight * CELLS_PER_CALL_SLOT)
    try:
        with fewer_collections():
            _execute(experiment, todo, db_path, hold, gateway, chosen or local, run_id, state, progress, measures)
    except BaseException:  # Ctrl-C, or the run itself failed (a write, the progress callback...)
        status = "interrupted"
        raise
    finally:
        if owned_gateway is not None:
            owned_gateway.close()
        if status == "finished" and state.failed_cells:
            status = "finished_with_errors"
        with held_results(hold) as stored:
            stored.finish_run(run_id, status)
        hold.close()
    with Store(db_path) as store:
        _warn_noop_configs(experiment, store.results.noop_configs(run_id))
        _warn_nothing_recorded(experiment, store)
    return Run(id=run_id, spec=experiment, db=db_path, progress=state, status=status, executor=choice)


def run_measures(store: Store, todo: Sequence[CellTask], version: str) -> StoredMeasures:
    """The memo of quality measures for the cells `todo` under the code's `version`: those stored for
    their sessions, after forgetting the other versions' (`workbench.quality.measure_memo`)."""
    from workbench.quality.measure_memo import StoredMeasures

    store.results.forget_measures(version)
    return StoredMeasures(version, store.results.stored_measures(sorted({t.session_id for t in todo}), version))


#: The least work for which `executor="auto"` starts worker processes, in messages replayed (each cell's
#: session length, summed over the cells to compute): below it, starting them (about a second) costs
#: more than the other cores save. On 2 CPUs, warm grids of the corpus's configs ran 15 % slower in
#: processes with 3,750 messages and 14 % quicker with 6,900; the whole corpus grid is 25,800.
AUTO_PROCESS_MESSAGES = 6_000


def choose_executor(
    experiment: ExperimentSpec,
    todo: Sequence[CellTask],
    messages: Mapping[str, int],
    *,
    gateway_given: bool = False,
    cpus: int | None = None,
) -> ExecutorChoice:
    """What `executor="auto"` runs `todo` with: `processes` when the grid is CPU work worth spreading
    over the cores, else `local`.

    CPU work: every model a config may call (its summarizer, when its strategy summarizes, and its
    evaluator) is the in-process offline one; with a remote model the cells wait on answers, which
    the local threads overlap. Worth spreading: at least `AUTO_PROCESS_MESSAGES` messages to replay
    (`messages`: each session's length) and two CPUs. It stays `local` when a gateway is given (the
    workers could not use it), a kind is registered only in this process (a script's or a notebook's
    own: the workers would not know it, `registry.kinds_only_here`), or the main script would compute
    again in each worker (`process_executor.main_reruns_safely`)."""
    from workbench.extractive import MODEL_STRING as OFFLINE_MODEL
    from workbench.registry import kinds_only_here

    if gateway_given:
        return ExecutorChoice("local", "a gateway was given: the cells use it in this process")
    for cell in experiment.configs:
        config = cell.config
        summarizer = config.summarizer if may_summarize(config.built_strategy) else None
        remote = [m for m in (summarizer, config.evaluator) if m and m != OFFLINE_MODEL]
        if remote:
            return ExecutorChoice("local", f"config {cell.name!r} calls {remote[0]}: threads overlap its calls")
    cpus = cpus or usable_cpus()
    if cpus < 2:
        return ExecutorChoice("local", "one CPU")
    work = sum(messages.get(task.session_id, 0) for task in todo)
    if work < AUTO_PROCESS_MESSAGES:
        return ExecutorChoice("local", f"{work:,} messages to replay: too few to pay for starting worker processes")
    own = kinds_only_here()
    if own:
        return ExecutorChoice("local", f"kinds defined in this process ({', '.join(own[:3])}) are unknown to workers")
    from workbench.experiments.process_executor import main_reruns_safely

    if not main_reruns_safely():
        return ExecutorChoice(
            "local", "the main script computes at its top level, which every worker process would run again"
        )
    return ExecutorChoice("processes", f"offline CPU work, {work:,} messages to replay on {cpus} CPUs")


def _executor_name(executor: Executor | None) -> str:
    """The name an executor goes by (`name`, as the built-in ones say it), else its class's."""
    return "local" if executor is None else str(getattr(executor, "name", type(executor).__name__))


#: What `_choose_executor` returns for `"auto"`: the choice waits for the cells to compute.
_AUTO = cast("Executor", object())


def _choose_executor(executor: Executor | str | None, address: str | None) -> Executor | None:
    """The executor named or given (None: the local one, built once the concurrency is known; `_AUTO`
    for "auto", chosen once the cells are known)."""
    if executor is None:
        executor = "auto"
    if isinstance(executor, str):
        name = executor.strip().lower()
        if name == "auto":
            if address is not None:
                raise ConfigError("address= names a Ray cluster: it goes with executor='ray', not 'auto'")
            return _AUTO
        if name == "ray":
            from workbench.experiments.ray_executor import RayExecutor, ray_available

            if not ray_available():
                raise ConfigError(
                    "executor 'ray' needs Ray: install the `ray` extra (pip install 'compaction-workbench[ray]')"
                )
            return RayExecutor(address=address)
        if name == "processes":
            if address is not None:
                raise ConfigError("address= names a Ray cluster: it goes with executor='ray', not 'processes'")
            from workbench.experiments.process_executor import ProcessExecutor

            return ProcessExecutor()
        if name != "local":
            raise ConfigError(
                f"unknown executor {executor!r}: expected 'auto', 'local', 'processes' or 'ray' (or an Executor object)"
            )
        executor = None
    if address is not None:
        if executor is not None:
            raise ConfigError(
                "address= goes with executor='ray'; give the cluster address to the executor object "
                "instead, e.g. RayExecutor(address=...)"
            )
        raise ConfigError("address= names a Ray cluster: pass executor='ray' with it")
    return executor


def _stored_spec(spec: ExperimentSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "source": spec.source,
        "datasets": list(spec.datasets),
        "where": spec.where,
        "metrics": list(spec.metrics),
        "repeats": spec.repeats,
        "concurrency": spec.concurrency,
        "regress": {k: vars(v) for k, v in spec.regress.items()},
        "configs": [{"name": c.name, **c.config.to_dict()} for c in spec.configs],
    }


def _execute(
    spec: ExperimentSpec,
    todo: list[CellTask],
    db_path: str,
    hold: FileHold,
    gateway: Any,
    executor: Executor,
    run_id: str,
    state: RunProgress,
    progress: Callable[[RunProgress], None] | None,
    measures: StoredMeasures | None = None,
) -> None:
    """Compute the cells of `todo` and write them, with the quality measures taken (`measures`: the
    run's memo, None to measure every replay). The local executor reads sessions and writes cells
    through brief opens of the file; another executor (Ray) is given a store it holds while it runs."""
    from workbench.store import Store

    if not todo:
        return
    cells_per_session = max(1, len(spec.configs) * spec.repeats)
    in_flight = int(getattr(executor, "concurrency", 1) or 1)
    sessions = _SessionCache(lambda: held_store(hold), batch=min(64, -(-in_flight // cells_per_session)))
    sessions.tokenizers = tuple(dict.fromkeys(c.config.tokenizer for c in spec.configs))
    sessions.expect(todo)
    cell = CellWork({c.name: c.config for c in spec.configs}, tuple(spec.metrics))
    with contextlib.ExitStack() as stack:
        store = None if isinstance(executor, LocalExecutor) else stack.enter_context(Store(db_path))
        if store is not None:
            sessions.store_lacking_counts(list(dict.fromkeys(task.session_id for task in todo)))
        work = BoundCellWork(cell, store, gateway, sessions.get, sessions.done, measures)  # the cache locks itself
        writer = _CellWriter(hold, run_id, state, progress, measures.version if measures is not None else "")
        try:
            _write_outcomes(executor.map(work, todo), gateway, writer)
        finally:
            writer.close()


def _write_outcomes(outcomes: Iterable[CellOutcome], gateway: Any, writer: _CellWriter) -> None:
    for outcome in outcomes:
        task = outcome.task
        for key, model, request, entry, replace in outcome.cache_entries:
            gateway.cache.put(key, model, request, entry, replace=replace)
        if outcome.result is None:
            _warn_failed(task, outcome.error)
        writer.put(outcome)


class _CellWriter:
    """The one thread that writes cells: it commits whatever has finished, at most once per
    `COMMIT_INTERVAL` seconds.

    A cell that finishes after a quiet spell is committed at once; cells that finish while a commit
    is under way or within `COMMIT_INTERVAL` of the last one are written together in the next, so
    the database keeps up with any number of cells in flight and a busy run pays one transaction
    (a few milliseconds of CPU, whatever its size) per interval rather than per cell. Each batch
    opens the file, writes its cells in one transaction and closes it (`FileHold`), so between
    batches other processes can open it. A crash loses at most the cells of the last interval,
    which a resumed run computes again. `close()` writes what is pending at once (also on Ctrl-C)
    and re-raises a write error.
    """

    def __init__(
        self,
        hold: FileHold,
        run_id: str,
        state: RunProgress,
        progress: Callable[[RunProgress], None] | None,
        version: str = "",
    ):
        self._hold = hold
        self._run_id = run_id
        self._version = version
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
        last_commit = -math.inf
        while not closing:
            batch = [self._queue.get()]
            due = last_commit + COMMIT_INTERVAL
            while batch[-1] is not None:
                wait = due - time.monotonic()
                try:
                    batch.append(self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait())
                except queue.Empty:
                    break
            closing = batch[-1] is None
            last_commit = time.monotonic()
            outcomes = [o for o in batch if o is not None]
            if self._error is not None:
                continue
            finished = [
                FinishedCell(o.result, o.task.config_name, o.task.repeat, o.task.dataset, o.duration_s)
                for o in outcomes
                if o.result is not None
            ]
            measures = [row for o in outcomes for row in o.measures]
            try:
                if finished or measures:
                    with held_results(self._hold) as stored:
                        stored.save_cells(self._run_id, finished, measures, self._version)
            except BaseException as exc:  # reported by put() or close() in the caller's thread
                self._error = exc
                continue
            for outcome in outcomes:
                if outcome.result is None:
                    self._state.failed_cells += 1
                _count_calls(self._state, outcome.spend)
                self._state.measures_reused += outcome.measures_reused
                self._state.cells_done += 1
                if self._progress and self._error is None:
                    try:
                        self._progress(self._state)
                    except BaseException as exc:  # the caller's callback: re-raised in its thread
                        self._error = exc

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error


def _warn_failed(task: CellTask, error: BaseException | None) -> None:
    import warnings

    warnings.warn(
        f"cell {task.session_id[:12]} × {task.config_name} (repeat {task.repeat}) failed: "
        f"{type(error).__name__}: {error}",
        RuntimeWarning,
        stacklevel=2,
    )


def _warn_nothing_recorded(spec: ExperimentSpec, store: Any) -> None:
    """One `NothingRecordedWarning` per config replaying recorded compactions and dataset where none
    of the run's sessions recorded any (there the config repeats no-compaction)."""
    import warnings

    from workbench.errors import NothingRecordedWarning
    from workbench.strategies.recorded import nothing_recorded_note, uses_recorded

    replaying = [cell.name for cell in spec.configs if uses_recorded(cell.config.to_dict())]
    for dataset in spec.datasets if replaying else ():
        counts = [row["recorded_compactions"] for row in store.session_rows(dataset, spec.where)]
        for name in replaying if counts and not any(counts) else ():
            warnings.warn(
                nothing_recorded_note(name, len(counts), f"of dataset {dataset!r}"),
                NothingRecordedWarning,
                stacklevel=3,
            )


def _warn_noop_configs(spec: ExperimentSpec, found: Sequence[NoopConfig]) -> None:
    """One `NoopCompactionsWarning` per config whose trigger fired in the run and whose strategy never
    changed a context: its rows equal no compaction, which a reader of the results must be told."""
    import warnings

    from workbench.errors import NoopCompactionsWarning
    from workbench.replay import noop_note, strategy_kind

    configs = {c.name: c.config for c in spec.configs}
    for item in found:
        kind = strategy_kind(configs[item.config]) if item.config in configs else "?"
        datasets = ", ".join(map(repr, item.datasets)) or "?"
        where = (
            f"{item.sessions:,} session{'s' * (item.sessions != 1)} of "
            f"dataset{'s' * (len(item.datasets) > 1)} {datasets}"
        )
        warnings.warn(noop_note(item.config, kind, item.firings, where), NoopCompactionsWarning, stacklevel=3)


def _count_calls(state: RunProgress, spent: CellSpend) -> None:
    state.model_calls += spent.model_calls
    state.cache_hits += spent.cache_hits
    state.cost_usd += spent.cost_usd
    state.unpriced_calls += spent.unpriced_calls


def results(run_id: str, db: str | None = None) -> pd.DataFrame:
    """The results of a run: one row per cell (session × config × repeat), every metric a column."""
    with open_results(db) as stored:
        return stored.results_frame(stored.resolve_run_id(run_id))


def summarizers_used(run_id: str, *, db: str | None = None, configs: Sequence[str] | None = None) -> list[str]:
    """The summarizer models that wrote a run's summaries (of its configs in `configs`, when given)."""
    with open_results(db) as stored:
        return stored.summarizers_used(stored.resolve_run_id(run_id), configs)


def summaries_note(run_id: str, *, db: str | None = None, configs: Sequence[str] | None = None) -> str | None:
    """The sentence labelling a run's summaries as the offline extractive baseline's
    (`workbench.extractive.baseline_note`), when its configs (those of `configs`, when given)
    summarized with it; None otherwise."""
    from workbench.extractive import baseline_note

    return baseline_note(summarizers_used(run_id, db=db, configs=configs))


def runs(db: str | None = None) -> pd.DataFrame:
    """Every stored run, newest first, with its status and how many cells are done."""
    with open_results(db) as stored:
        return stored.runs_frame()


def delete_runs(run_ids: str | Sequence[str], db: str | None = None) -> dict[str, int]:
    """Delete stored runs, each named by its id or a unique prefix of it; returns the cells deleted
    per run. All or nothing: an unknown or ambiguous id raises `StoreError` and deletes nothing. The
    model cache is kept (a re-run asks no model again)."""
    with open_results(db) as stored:
        return stored.delete_runs([run_ids] if isinstance(run_ids, str) else list(run_ids))


def save_replay(result: ReplayResult, db: str | None = None, *, dataset: str | None = None) -> str:
    """Store a single replay as a one-cell run (`workbench replay --save`); returns the run id (a hash
    of the session, the config and the code, so that a replay by other code is another run)."""
    with open_results(db) as stored:
        config = result.config.to_dict()
        code = code_version()
        digest = hashlib.sha256(
            json.dumps([result.session_id, config, code, user_code([config])], sort_keys=True, default=str).encode()
        )
        run_id = f"replay-{digest.hexdigest()[:10]}"
        stored.start_run(
            run_id,
            name=f"replay {result.config.name}",
            kind="replay",
            spec={"session_id": result.session_id, "config": config},
            configs=[(result.config.name, config)],
            code_version=code,
            dataset_version=None,
            datasets=[dataset] if dataset else [],
            cells_total=1,
        )
        stored.save_cell(run_id, result, config=result.config.name, repeat=0, dataset=dataset)
        stored.finish_run(run_id)
        return run_id


def dry_run(spec: ExperimentSpec | Mapping[str, Any] | str | os.PathLike[str], db: str | None = None) -> dict[str, Any]:
    """What a run would do, without doing it: sessions, cells (and how many are already done), models,
    and where `executor="auto"` would compute the cells left (`executor`, `executor_reason`)."""
    from workbench.store import Store
    from workbench.store import db as database

    experiment = load_experiment(spec if not isinstance(spec, os.PathLike) else Path(spec))
    path = os.fspath(db) if db is not None else database.default_path()
    if path != ":memory:" and not os.path.exists(path):
        raise StoreError(f"database {path} does not exist")
    with Store(path, read_only=True) as store:
        pairs = select_sessions(store, experiment)
        version = dataset_version(pairs)
        run_id = run_key(experiment, version, code_version())
        try:
            done = store.results.finished_cells(run_id)
        except Exception:  # a database from before the results tables
            done = set()
        cells = grid(experiment, [s for s, _ in pairs])
        dataset_of = dict(pairs)
        todo = [CellTask(s, dataset_of.get(s), c, r) for s, c, r in cells if (s, c, r) not in done]
        sizes = store.message_counts(sorted({t.session_id for t in todo})) if todo else {}
    choice = choose_executor(experiment, todo, sizes) if todo else ExecutorChoice("local", "no cell left to compute")
    per_config = []
    for cell in experiment.configs:
        config = cell.config
        summarizer = config.summarizer if may_summarize(config.built_strategy) else None
        models = sorted({m for m in (summarizer, config.evaluator) if m})
        per_config.append(
            {
                "config": cell.name,
                "trigger": config.to_dict()["trigger"],
                "strategy": config.to_dict()["strategy"],
                "models": models,
                "cells": len(pairs) * experiment.repeats,
            }
        )
    return {
        "run_id": run_id,
        "experiment": experiment.name,
        "sessions": len(pairs),
        "configs": per_config,
        "repeats": experiment.repeats,
        "cells": len(cells),
        "cells_done": len(done & set(cells)),
        "cells_to_run": len(set(cells) - done),
        "executor": choice.name,
        "executor_reason": choice.reason,
        "notes": list(experiment.notes),
    }
