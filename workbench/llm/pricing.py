"""What a model call cost, in US dollars.

In order: the offline `workbench/` models cost nothing; prices given in a model's options
(`input_cost_per_token`, `output_cost_per_token`, e.g. for a self-hosted model) win; else
LiteLLM's local price map (the cost LiteLLM attached to the response when it has one). An
unknown price gives None (the gateway warns once per model, and does not look it up again).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["OFFLINE_PREFIX", "Prices", "call_cost"]

#: Models served in-process by the workbench's own LiteLLM provider.
OFFLINE_PREFIX = "workbench/"


@dataclass(frozen=True)
class Prices:
    """Per-token prices a model's options set (None: not set)."""

    input_cost_per_token: float | None = None
    output_cost_per_token: float | None = None

    @property
    def given(self) -> bool:
        return self.input_cost_per_token is not None or self.output_cost_per_token is not None


def call_cost(
    litellm: Any,
    model: str,
    response: Any,
    input_tokens: int,
    output_tokens: int,
    *,
    estimated: bool = False,
    prices: Prices = Prices(),
) -> float | None:
    """The cost of one answered call; None when the price is unknown.

    `estimated`: the token counts were estimated (the provider gave no usage), so the cost is
    computed from them rather than from the response.
    """
    if model.startswith(OFFLINE_PREFIX):
        return 0.0
    if prices.given:
        return input_tokens * float(prices.input_cost_per_token or 0.0) + output_tokens * float(
            prices.output_cost_per_token or 0.0
        )
    if not estimated:
        computed = _litellm_cost(response)
        if computed is not None:
            return computed
    try:
        if estimated:
            prompt_cost, completion_cost = litellm.cost_per_token(
                model=model, prompt_tokens=input_tokens, completion_tokens=output_tokens
            )
            return float(prompt_cost) + float(completion_cost)
        return float(litellm.completion_cost(completion_response=response, model=model))
    except Exception:  # LiteLLM raises for models missing from its map
        return None


def _litellm_cost(response: Any) -> float | None:
    """The cost LiteLLM already worked out for `response` (`_hidden_params["response_cost"]`), if any:
    asking its price map again costs milliseconds of CPU per call, most of it spent holding the GIL."""
    hidden = getattr(response, "_hidden_params", None)
    cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0:
        return float(cost)
    return None
