"""A model bound at its first use, its one-time start-up timed apart (what a replay summarizes with).

A replay that never summarizes never binds its model, so it never imports LiteLLM. When it does,
the first call pays the start-up (importing LiteLLM, registering the offline provider): a replay
times each compaction with `timer_excluding_startup`, so that cost is not counted as compaction time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from workbench.compaction import Completion
from workbench.llm.binding import BoundModel
from workbench.llm.gateway import Gateway, default_gateway

__all__ = ["LazyModel", "startup_seconds", "timer_excluding_startup"]


class LazyModel:
    """A `Summarizer` that binds `model` on its gateway (default: `default_gateway()`) at its first use.

    So replays that never summarize never import LiteLLM. The binding and the one-time start-up
    (importing LiteLLM) are timed apart: `startup_s` is what they cost, `binds` how often they ran
    (0 or 1), and a caller timing a compaction subtracts the start-up it paid during it
    (`startup_seconds`).
    """

    def __init__(self, model: str, options: Mapping[str, Any], gateway: Gateway | None = None):
        self.model = model
        self._options = dict(options)
        self._gateway = gateway
        self._bound: BoundModel | None = None
        self._lock = threading.Lock()
        self.startup_s = 0.0
        self.binds = 0

    def bind(self) -> BoundModel:
        """The bound model, binding it (and paying the start-up) on the first call."""
        bound = self._bound
        if bound is not None:
            return bound
        with self._lock:
            if self._bound is None:
                started = time.perf_counter()
                gateway = self._gateway or default_gateway()
                bound = gateway.model(self.model, self._options)
                bound.prepare()
                self.startup_s += time.perf_counter() - started
                self.binds += 1
                self._bound = bound
            return self._bound

    def complete(
        self, messages: Sequence[Any], *, purpose: str = "summary", max_tokens: int | None = None
    ) -> Completion:
        return self.bind().complete(messages, purpose=purpose, max_tokens=max_tokens)

    async def acomplete(
        self, messages: Sequence[Any], *, purpose: str = "summary", max_tokens: int | None = None
    ) -> Completion:
        return await self.bind().acomplete(messages, purpose=purpose, max_tokens=max_tokens)

    def __repr__(self) -> str:
        return f"LazyModel({self.model!r}, bound={self._bound is not None})"


def startup_seconds(summarizer: Any) -> float:
    """One-time start-up `summarizer` has paid so far (0 for summarizers that do not report it)."""
    return float(getattr(summarizer, "startup_s", 0.0) or 0.0)


def timer_excluding_startup(summarizer: Any) -> Callable[[], float]:
    """Start a timer; calling it gives the seconds since, less the one-time start-up `summarizer` paid meanwhile.

    A replay times each compaction with it, so the first one does not count importing LiteLLM.
    """
    startup = startup_seconds(summarizer)
    started = time.perf_counter()
    return lambda: time.perf_counter() - started - (startup_seconds(summarizer) - startup)
