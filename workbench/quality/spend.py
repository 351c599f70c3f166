"""What the evaluator model cost for one replay, apart from the summarizer's spend.

Registered after the model metrics (probe accuracy, judge, continuation), so computed after them:
each sums the evaluator completions those metrics recorded for the result, those of a batch that
then failed included (they were paid for). `evaluator_calls` counts the calls that reached the
model in this replay and `evaluator_cache_hits` those the gateway's cache answered. The token and
cost metrics describe the evaluation itself, whatever the cache held: a cache hit counts with the
tokens and cost of the call that first got its answer, so a re-run served by the cache reports
the same values as the first run. What this replay actually sent and paid is the part of them
from the calls counted in `evaluator_calls`.
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
    """Evaluator calls that reached the model in this replay (cache hits excluded; calls of a batch
    that then failed included)."""

    def total(self, completions: list[Any]) -> int:
        return sum(1 for c in completions if not c.cache_hit)


@register_metric("evaluator_cache_hits", direction="none", unit="calls", level="run")
class EvaluatorCacheHits(_Spend):
    """Evaluator answers served from the gateway's cache."""

    def total(self, completions: list[Any]) -> int:
        return sum(1 for c in completions if c.cache_hit)


@register_metric("evaluator_input_tokens", direction="lower", unit="tokens", level="run")
class EvaluatorInputTokens(_Spend):
    """Prompt tokens of the evaluator's calls (probes, judge, continuation), a cache hit counted at
    the tokens of the call that first got its answer: the evaluation's size, not this run's traffic."""

    field = "input_tokens"


@register_metric("evaluator_output_tokens", direction="lower", unit="tokens", level="run")
class EvaluatorOutputTokens(_Spend):
    """Tokens of the evaluator's answers, a cache hit counted at the tokens its answer first took."""

    field = "output_tokens"


@register_metric("evaluator_cost_usd", direction="lower", unit="usd", level="run")
class EvaluatorCostUsd(_Spend):
    """Cost of the evaluator's calls from LiteLLM prices, a cache hit counted at its original cost (what
    the evaluation costs, not what this run paid); empty when a price is unknown."""

    def total(self, completions: list[Any]) -> float | None:
        costs = [c.cost_usd for c in completions]
        return None if any(c is None for c in costs) else float(sum(costs))
