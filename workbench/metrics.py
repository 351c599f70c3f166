"""The cost metrics every replay reports (DESIGN §7), as kinds of the registry's `metric` family.

Each metric reads a finished `ReplayResult` (its calls, compaction events and config) and declares
which way is better, its unit and its level; `registry.evaluate_metrics` computes them for
`ReplayResult.metrics`, next to the quality metrics of `workbench.quality` and any plugin's.
A "compaction" here is an event that changed the context (`replay.changed_compactions`): a failed
one (under `on_failure = "fatal"` it ends the replay) and a no-op (the strategy returned the context
it was given) are not; `noop_compactions` counts the no-ops apart. The per-call metrics read the
result's call columns (`replay.call_column`), never building a record per call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from workbench.registry import METRICS, register_metric
from workbench.replay import call_column, changed_compactions

if TYPE_CHECKING:
    from workbench.replay import CompactionEvent, ReplayResult


def _column(result: ReplayResult, name: str) -> Sequence[Any]:
    return call_column(result.calls, name)


def _done(result: ReplayResult) -> list[CompactionEvent]:
    return changed_compactions(result.compactions)


def _usage_total(result: ReplayResult, key: str) -> int:
    return sum(int(e.summarizer_usage.get(key) or 0) for e in result.compactions)


def _sum_or_none(values: Iterable[float | None]) -> float | None:
    """The sum, or None when any value is unknown (never a silent 0)."""
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total


@dataclass(frozen=True)
class _CostMetric:
    requires_model: ClassVar[bool] = False

    def compute(self, result: ReplayResult) -> Any:
        raise NotImplementedError


@register_metric("calls", direction="none", unit="calls", level="run")
@dataclass(frozen=True)
class Calls(_CostMetric):
    """Recorded LLM calls replayed (fewer than recorded when the replay stopped early)."""

    def compute(self, result: ReplayResult) -> int:
        return len(result.calls)


@register_metric("compactions", direction="none", unit="compactions", level="run")
@dataclass(frozen=True)
class Compactions(_CostMetric):
    """Compactions that changed the context (strategy runs that neither failed nor were no-ops)."""

    def compute(self, result: ReplayResult) -> int:
        return len(_done(result))


@register_metric("noop_compactions", direction="none", unit="compactions", level="run")
@dataclass(frozen=True)
class NoopCompactions(_CostMetric):
    """Trigger firings whose strategy returned the context unchanged (nothing to mask, clear or drop):
    not counted in `compactions`. Neutral: a trigger that fires often may cost nothing more."""

    def compute(self, result: ReplayResult) -> int:
        return sum(1 for e in result.compactions if e.noop)


@register_metric("peak_context_tokens", direction="lower", unit="tokens", level="run")
@dataclass(frozen=True)
class PeakContextTokens(_CostMetric):
    """Largest context sent at any call."""

    def compute(self, result: ReplayResult) -> int:
        return max(_column(result, "context_tokens"), default=0)


@register_metric("billed_input_tokens", direction="lower", unit="tokens", level="run")
@dataclass(frozen=True)
class BilledInputTokens(_CostMetric):
    """Context tokens summed over all calls: the input the agent would have paid for."""

    def compute(self, result: ReplayResult) -> int:
        return sum(_column(result, "context_tokens"))


@register_metric("cached_input_tokens", direction="higher", unit="tokens", level="run")
@dataclass(frozen=True)
class CachedInputTokens(_CostMetric):
    """Input tokens a prompt cache could reuse (each call's unchanged prefix of the previous context)."""

    def compute(self, result: ReplayResult) -> int:
        return sum(_column(result, "cached_prefix_tokens"))


@register_metric("cache_aware_input_tokens", direction="lower", unit="tokens", level="run")
@dataclass(frozen=True)
class CacheAwareInputTokens(_CostMetric):
    """Uncached input tokens plus cached ones weighted by the config's `cache_read_ratio`."""

    def compute(self, result: ReplayResult) -> float:
        billed = sum(_column(result, "context_tokens"))
        cached = sum(_column(result, "cached_prefix_tokens"))
        return round(float(billed - cached + cached * result.config.cache_read_ratio), 1)


@register_metric("summarizer_calls", direction="lower", unit="calls", level="run")
@dataclass(frozen=True)
class SummarizerCalls(_CostMetric):
    """Summarizer calls made by the strategies (cache hits included)."""

    def compute(self, result: ReplayResult) -> int:
        return _usage_total(result, "calls")


@register_metric("summarizer_input_tokens", direction="lower", unit="tokens", level="run")
@dataclass(frozen=True)
class SummarizerInputTokens(_CostMetric):
    """Tokens sent to the summarizer."""

    def compute(self, result: ReplayResult) -> int:
        return _usage_total(result, "input_tokens")


@register_metric("summarizer_output_tokens", direction="lower", unit="tokens", level="run")
@dataclass(frozen=True)
class SummarizerOutputTokens(_CostMetric):
    """Tokens the summarizer wrote."""

    def compute(self, result: ReplayResult) -> int:
        return _usage_total(result, "output_tokens")


@register_metric("summarizer_truncated", direction="lower", unit="calls", level="run")
@dataclass(frozen=True)
class SummarizerTruncated(_CostMetric):
    """Summarizer answers cut at their output limit (finish_reason `length`): kept as summaries, but
    possibly incomplete (a larger `max_tokens` or a smaller input would finish them)."""

    def compute(self, result: ReplayResult) -> int:
        return _usage_total(result, "truncated")


@register_metric("cost_usd", direction="lower", unit="usd", level="run")
@dataclass(frozen=True)
class CostUsd(_CostMetric):
    """Summarizer cost from LiteLLM prices (0 for offline models; empty when a price is unknown)."""

    def compute(self, result: ReplayResult) -> float | None:
        return _sum_or_none(e.summarizer_usage.get("cost_usd") for e in result.compactions)


@register_metric("compression_ratio", direction="higher", unit="ratio", level="compaction")
@dataclass(frozen=True)
class CompressionRatio(_CostMetric):
    """Tokens before / tokens after a compaction, mean over compactions (empty without any)."""

    def compute(self, result: ReplayResult) -> float | None:
        ratios = [e.tokens_before / e.tokens_after for e in _done(result) if e.tokens_after > 0]
        return sum(ratios) / len(ratios) if ratios else None

    def per_compaction(self, result: ReplayResult) -> list[dict[str, Any]]:
        return [
            {
                "compression_ratio": e.tokens_before / e.tokens_after
                if not e.failed and not e.noop and e.tokens_after > 0
                else None
            }
            for e in result.compactions
        ]


@register_metric("no_progress_compactions", direction="lower", unit="compactions", level="run")
@dataclass(frozen=True)
class NoProgressCompactions(_CostMetric):
    """Compactions that freed less than 10 % of the context's tokens."""

    def compute(self, result: ReplayResult) -> int:
        return sum(1 for e in _done(result) if e.no_progress)


@register_metric("fallbacks", direction="lower", unit="compactions", level="run")
@dataclass(frozen=True)
class Fallbacks(_CostMetric):
    """Compactions whose strategy failed and whose fallback replaced the result."""

    def compute(self, result: ReplayResult) -> int:
        return sum(1 for e in result.compactions if e.fell_back)


@register_metric("termination", direction="none", unit="", level="run")
@dataclass(frozen=True)
class Termination(_CostMetric):
    """How the replay ended: completed, compaction_failed or context_overflow."""

    def compute(self, result: ReplayResult) -> str:
        return result.termination


def direction(name: str) -> str:
    """Which way is better for a registered metric (`higher`, `lower`; `none` for counts and unknown names)."""
    cls = METRICS.kinds().get(name)
    return cls.direction if cls is not None else "none"


__all__ = [
    "BilledInputTokens",
    "CacheAwareInputTokens",
    "CachedInputTokens",
    "Calls",
    "Compactions",
    "CompressionRatio",
    "CostUsd",
    "Fallbacks",
    "NoProgressCompactions",
    "NoopCompactions",
    "PeakContextTokens",
    "SummarizerCalls",
    "SummarizerInputTokens",
    "SummarizerOutputTokens",
    "SummarizerTruncated",
    "Termination",
    "direction",
]
