"""A cell of an experiment (a session under a named config, for one repeat) and how it is computed.

`CellWork` is the computation as plain, picklable data, shared by every executor: the local one
calls it in threads of the run's process (through `BoundCellWork`), the Ray executor ships it to
worker processes. `CellOutcome` is what comes back to the run's single database writer, with the
cell's `CellSpend` (what its model calls cost in this run).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.config import ReplayConfig, parse_config
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench.llm import CacheEntry
    from workbench.quality.measure_memo import MeasureRow, StoredMeasures
    from workbench.replay import ReplayResult
    from workbench.session import Session
    from workbench.store import Store

__all__ = ["BoundCellWork", "CellOutcome", "CellSpend", "CellTask", "CellWork", "ModelUnavailable", "repeat_config"]


class ModelUnavailable(WorkbenchError):
    """A cell's replay stopped because its summarizer could not be used (the provider refused the
    key, could not be reached, kept failing): a failed cell, computed again when the run resumes."""


@dataclass(frozen=True)
class CellTask:
    """One cell to compute: a session under a named config, for one repeat (epoch)."""

    session_id: str
    dataset: str | None
    config_name: str
    repeat: int


@dataclass(frozen=True)
class CellSpend:
    """What a cell's model calls, the summarizer's and the evaluator's, cost in this run.

    `model_calls` reached a model, `cache_hits` were answered by the cache (or by an identical
    call in flight). `cost_usd` is the money paid for the calls that reached a model at known
    prices; `unpriced_calls` of them are not in it, their price being unknown (a model LiteLLM's
    price map lacks): a summary shows their cost as unknown, never as $0. A cache hit costs
    nothing, though the cell's `cost_usd` metrics price it at its original cost.
    """

    model_calls: int = 0
    cache_hits: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0

    @classmethod
    def of(cls, result: ReplayResult) -> CellSpend:
        """Read from the result's compaction events and its evaluator completions (which live only in
        the process that measured it: this is taken there, before the result is sent anywhere).

        A compaction event gives its summarizer's spend as one sum, unknown when any of its calls
        was unpriced: its calls that reached the model are then all counted in `unpriced_calls`."""
        from workbench.quality.evaluator import spend

        calls = hits = unpriced = 0
        cost = 0.0
        for event in result.compactions:
            usage = event.summarizer_usage or {}
            cached = int(usage.get("cache_hits") or 0)
            made = int(usage.get("calls") or 0) - cached
            calls += made
            hits += cached
            spent = usage.get("spent_usd")
            if spent is None:
                unpriced += made
            else:
                cost += float(spent)
        for completions in spend(result).values():
            for completion in completions:
                if completion.cache_hit:
                    hits += 1
                    continue
                calls += 1
                if completion.cost_usd is None:
                    unpriced += 1
                else:
                    cost += float(completion.cost_usd)
        return cls(calls, hits, cost, unpriced)


@dataclass(frozen=True)
class CellOutcome:
    """A computed cell. `cache_entries` are the model answers a worker outside this process made
    (key, model, request as canonical JSON, entry): the driver commits them to the database's `llm_cache`.
    `spend` is what the cell's model calls cost, also when it failed after making some. `measures` are
    the reusable quality measures the cell's process took since its last outcome
    (`workbench.quality.measure_memo`), which the driver stores with the cells; `measures_reused`, whether
    the cell's own were read from the run's memo."""

    task: CellTask
    result: ReplayResult | None
    duration_s: float
    error: BaseException | None = None
    cache_entries: tuple[tuple[str, str, str, CacheEntry, bool], ...] = ()  # (key, model, request, entry, replace)
    spend: CellSpend = CellSpend()
    measures: tuple[MeasureRow, ...] = ()
    measures_reused: bool = False


@dataclass(frozen=True)
class CellWork:
    """How to compute any cell of a run, as plain data: the configs by name and the model metrics.

    It holds no connection, lock or gateway, so it pickles: the local executor calls it in threads
    of this process, the Ray executor ships it once per run to its worker processes. `compute`
    loads the session through `session()` inside the timed, guarded part, so a session that cannot
    be loaded fails its cell, not the run. A cell whose evaluator failed for good (its model
    metrics would be None for want of an answer) fails too, so that it is not stored as finished
    and a resumed run computes it again.
    """

    configs: Mapping[str, ReplayConfig]
    metrics: tuple[str, ...] = ()

    def compute(
        self, task: CellTask, session: Callable[[], Session], gateway: Any, measures: StoredMeasures | None = None
    ) -> CellOutcome:
        """The cell's outcome; `measures` answers the reusable quality measures of a replay measured
        before (`registry.evaluate_metrics`)."""
        from workbench.quality.evaluator import EvaluatorFailed, check_evaluator
        from workbench.replay import replay

        started = time.perf_counter()
        try:
            config = repeat_config(self.configs[task.config_name], task.repeat)
            result = replay(session(), config, gateway=gateway, measure=False)
            result.measure(self.metrics, measures)
        except Exception as exc:  # a cell that raises is reported, the run goes on
            return CellOutcome(task, None, time.perf_counter() - started, exc)
        failed: WorkbenchError | None = None
        if result.model_failure is not None:
            failed = ModelUnavailable(
                f"{result.error} (the model could not be used: the cell says nothing of the "
                "configuration; fix the set-up and run again to compute it)"
            )
        else:
            try:
                check_evaluator(result)
            except EvaluatorFailed as exc:
                failed = exc
        return CellOutcome(
            task,
            result if failed is None else None,
            time.perf_counter() - started,
            failed,
            spend=CellSpend.of(result),
            measures_reused=measures is not None and measures.answered(result),
        )


@dataclass(frozen=True)
class BoundCellWork:
    """`work(task)`, what `Executor.map` runs: a `CellWork` bound to this process's sessions and gateway.

    `load` reads a session through the run's session cache, and `release` lets the cache drop it once
    the cell is computed, in the thread that computed it (not when the run's consumer gets to the
    outcome: a consumer slower than the cells would let the loaded sessions pile up). `store` (the
    run's database, open for an executor other than the local one, None for the local one, which
    holds no file) and
    `gateway` are there for an executor that computes cells elsewhere: it exports sessions and a
    snapshot of the model cache from `store`, rebuilds a gateway from `gateway`'s settings on its
    workers, and commits the answers they bring back through `gateway.cache`. `measures` is the run's
    memo of quality measures (None: every replay measured): the local executor's threads share it, and
    another executor sends its stored rows (`measures.stored_table()`) to its workers.
    """

    cell: CellWork
    store: Store | None
    gateway: Any
    load: Callable[[str], Session]
    release: Callable[[str], None] | None = None
    measures: StoredMeasures | None = None

    def __call__(self, task: CellTask) -> CellOutcome:
        try:
            outcome = self.cell.compute(task, lambda: self.load(task.session_id), self.gateway, self.measures)
            if self.measures is None:
                return outcome
            return dataclasses.replace(outcome, measures=self.measures.drain())
        finally:
            if self.release is not None:
                self.release(task.session_id)


def repeat_config(config: ReplayConfig, repeat: int) -> ReplayConfig:
    """The config of epoch `repeat`: model calls get their own cache keys after the first epoch."""
    if repeat == 0:
        return config
    spec = config.to_dict(redact=False)
    spec["summarizer_options"] = {**spec.get("summarizer_options", {}), "repeat": repeat}
    if spec.get("evaluator"):
        spec["evaluator_options"] = {**spec.get("evaluator_options", {}), "repeat": repeat}
    return parse_config(spec)
