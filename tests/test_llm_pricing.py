"""The cost of a call (`workbench.llm.pricing`): LiteLLM's local price map, own prices, unknown prices."""

from __future__ import annotations

import logging

import pytest
from llm_support import KNOWN, ask, bind

pytest_plugins = ["llm_fixtures"]  # the gateway fixtures: litellm, server, gateway


def test_known_model_is_in_price_map(litellm):
    info = litellm.get_model_info(KNOWN)
    assert info["input_cost_per_token"] > 0 and info["output_cost_per_token"] > 0


def test_cost_of_a_known_model(gateway, server, litellm):
    result = bind(gateway, server, model=KNOWN).complete(ask())
    prompt, completion = litellm.cost_per_token(
        model=KNOWN, prompt_tokens=result.input_tokens, completion_tokens=result.output_tokens
    )

    assert result.cost_usd == pytest.approx(prompt + completion)
    assert result.cost_usd > 0
    assert gateway.stats.cost_usd == pytest.approx(result.cost_usd)
    assert bind(gateway, server, model=KNOWN).complete(ask()).cost_usd == pytest.approx(result.cost_usd)
    assert gateway.stats.cost_usd == pytest.approx(result.cost_usd)  # the hit cost nothing


def test_unknown_model_cost_is_none_with_a_warning(gateway, server, caplog):
    with caplog.at_level(logging.WARNING, logger="workbench.llm"):
        result = bind(gateway, server, model="openai/not-a-priced-model").complete(ask())
        bind(gateway, server, model="openai/not-a-priced-model").complete(ask("again"))
    assert result.cost_usd is None
    assert gateway.unknown_cost_models == {"openai/not-a-priced-model"}
    warnings = [r for r in caplog.records if "cost unknown" in r.getMessage()]
    assert len(warnings) == 1  # once per model


def test_own_prices_in_options(gateway, server):
    result = bind(gateway, server, input_cost_per_token=1e-6, output_cost_per_token=2e-6).complete(ask())
    assert result.cost_usd == pytest.approx(result.input_tokens * 1e-6 + result.output_tokens * 2e-6)
    assert "input_cost_per_token" not in server.requests[0]
