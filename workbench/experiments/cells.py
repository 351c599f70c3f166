"""A cell of an experiment (a session under a named config, for one repeat) and how it is computed.

`CellWork` is the computation as plain, picklable data, shared by every executor: the local one
calls it in threads of the run's process (through `BoundCellWork`), the Ray executor ships it to
worker processes. `CellOutcome` is what comes back to the run's single database writer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.config import ReplayConfig, parse_config

if TYPE_CHECKING:
    from workbench.llm import CacheEntry
    from workbench.replay import ReplayResult
    from workbench.session import Session
    from workbench.store import Store

__all__ = ["BoundCellWork", "CellOutcome", "CellTask", "CellWork", "repeat_config"]


@dataclass(frozen=True)
class CellTask:
    """One cell to compute: a session under a named config, for one repeat (epoch)."""

    session_id: str
    dataset: str | None
    config_name: str
    repeat: int


@dataclass(frozen=True)
class CellOutcome:
    """A computed cell. `cache_entries` are the model answers a worker outside this process made
    (key, model, request as canonical JSON, entry): the driver commits them to the database's `llm_cache`."""

    task: CellTask
    result: ReplayResult | None
    duration_s: float
    error: BaseException | None = None
    cache_entries: tuple[tuple[str, str, str, CacheEntry], ...] = ()


@dataclass(frozen=True)
class CellWork:
    """How to compute any cell of a run, as plain data: the configs by name and the model metrics.

    It holds no connection, lock or gateway, so it pickles: the local executor calls it in threads
    of this process, the Ray executor ships it once per run to its worker processes. `compute`
    loads the session through `session()` inside the timed, guarded part, so a session that cannot
    be loaded fails its cell, not the run.
    """

    configs: Mapping[str, ReplayConfig]
    metrics: tuple[str, ...] = ()

    def compute(self, task: CellTask, session: Callable[[], Session], gateway: Any) -> CellOutcome:
        from workbench.replay import replay

        started = time.perf_counter()
        try:
            config = repeat_config(self.configs[task.config_name], task.repeat)
            result = replay(session(), config, gateway=gateway, metrics=list(self.metrics) or None)
            return CellOutcome(task, result, time.perf_counter() - started)
        except Exception as exc:  # a cell that raises is reported, the run goes on
            return CellOutcome(task, None, time.perf_counter() - started, exc)


@dataclass(frozen=True)
class BoundCellWork:
    """`work(task)`, what `Executor.map` runs: a `CellWork` bound to this process's sessions and gateway.

    `load` reads a session through the run's session cache; `store` (the run's database) and
    `gateway` are there for an executor that computes cells elsewhere: it exports sessions and a
    snapshot of the model cache from `store`, rebuilds a gateway from `gateway`'s settings on its
    workers, and commits the answers they bring back through `gateway.cache`.
    """

    cell: CellWork
    store: Store
    gateway: Any
    load: Callable[[str], Session]

    def __call__(self, task: CellTask) -> CellOutcome:
        return self.cell.compute(task, lambda: self.load(task.session_id), self.gateway)


def repeat_config(config: ReplayConfig, repeat: int) -> ReplayConfig:
    """The config of epoch `repeat`: model calls get their own cache keys after the first epoch."""
    if repeat == 0:
        return config
    spec = config.to_dict(redact=False)
    spec["summarizer_options"] = {**spec.get("summarizer_options", {}), "repeat": repeat}
    if spec.get("evaluator"):
        spec["evaluator_options"] = {**spec.get("evaluator_options", {}), "repeat": repeat}
    return parse_config(spec)
