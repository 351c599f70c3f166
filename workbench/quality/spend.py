"""What the evaluator model cost for one replay, apart from the summarizer's spend.

Registered after the model metrics (probe accuracy, judge, continuation), so computed after them:
each sums the evaluator completions those metrics recorded for the result. Cache hits are
counted in `evaluator_cache_hits` and not in `evaluator_calls` (requests actually sent).
"""

from __future__ import annotations

from typing import Any, ClassVar

from workbench.quality.evaluator import spend
from workbench.registry import register_metric


def _completions(result: Any) -> list[Any] | None:
    if not getattr(result.config, "evaluator", None):
        return None
    return [c for batch in spend(result).values() for c in batch]


class _Spend:
    requires_model: ClassVar[bool] = False
    field: ClassVar[str] = ""

    def compute(self, result: Any) -> float | int | None:
        completions = _completions(result)
        if completions is None:
            return None
        return self.total(completions)

    def total(self, completions: list[Any]) -> float | int | None:
        return sum(int(getattr(c, self.field) or 0) for c in completions)


@register_metric("evaluator_calls", direction="lower", unit="calls", level="run")
class EvaluatorCalls(_Spend):
    """Requests sent to the evaluator model for this replay's quality metrics (cache hits excluded)."""

    def total(self, completions: list[Any]) -> int:
        return sum(1 for c in completions if not c.cache_hit)


@register_metric("evaluator_cache_hits", direction="none", unit="calls", level="run")
class EvaluatorCacheHits(_Spend):
    """Evaluator answers served from the gateway's cache."""

    def total(self, completions: list[Any]) -> int:
        return sum(1 for c in completions if c.cache_hit)


@register_metric("evaluator_input_tokens", direction="lower", unit="tokens", level="run")
class EvaluatorInputTokens(_Spend):
    """Tokens sent to the evaluator model (probes, judge, continuation)."""

    field = "input_tokens"


@register_metric("evaluator_output_tokens", direction="lower", unit="tokens", level="run")
class EvaluatorOutputTokens(_Spend):
    """Tokens the evaluator model wrote."""

    field = "output_tokens"


@register_metric("evaluator_cost_usd", direction="lower", unit="usd", level="run")
class EvaluatorCostUsd(_Spend):
    """Cost of the evaluator's calls from LiteLLM prices (cache hits included at their original cost;
    empty when a price is unknown)."""

    def total(self, completions: list[Any]) -> float | None:
        costs = [c.cost_usd for c in completions]
        return None if any(c is None for c in costs) else float(sum(costs))
