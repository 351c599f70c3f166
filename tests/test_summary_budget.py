"""A `max_tokens` the user sets in `summarizer_options` caps the summary length each strategy derives."""

from __future__ import annotations

import pytest
from builders import conversation
from llm_support import MODEL

from workbench.llm import Gateway, MemoryCache
from workbench.llm.binding import capped_output
from workbench.replay import compact, replay

pytest_plugins = ["llm_fixtures"]


@pytest.mark.parametrize(
    ("options", "derived", "sent"),
    [
        ({}, 800, {"max_tokens": 800}),  # the strategy's own budget
        ({"max_tokens": 150}, 800, {"max_tokens": 150}),  # the user's cap is smaller
        ({"max_tokens": 2000}, 800, {"max_tokens": 800}),  # the derived budget is smaller
        ({"max_completion_tokens": 150}, 800, {"max_completion_tokens": 150}),  # under the user's own key
        ({"max_tokens": 150, "temperature": 0}, None, {"max_tokens": 150, "temperature": 0}),  # no derived budget
    ],
)
def test_the_smaller_of_the_users_limit_and_the_derived_budget_is_sent(options, derived, sent):
    assert capped_output(options, derived) == sent


def test_a_summary_request_sends_the_smaller_of_the_users_max_tokens_and_the_derived_budget(gateway, server):
    messages = conversation(30, result_chars=4000)

    def sent(**user: int) -> int:
        server.script("A summary.")
        compact(
            messages,
            {"kind": "summarize_full"},
            summarizer=MODEL,
            gateway=gateway,
            summarizer_options={"api_base": server.api_base, "api_key": "sk-dummy", "cache": False, **user},
        )
        return int(server.requests[-1]["max_tokens"])

    derived = sent()  # the budget summarize_full derives from what it summarizes and the window
    assert derived > 150
    assert sent(max_tokens=150) == 150
    assert sent(max_tokens=derived + 500) == derived


def test_a_users_max_tokens_bounds_the_offline_summary_in_a_replay():
    """The issue's case: `max_tokens = 150` gave an 827-token summary (the strategy's budget replaced it)."""
    session = conversation(60, result_chars=3000)
    config = {
        "trigger": {"kind": "token_threshold", "threshold": 20_000},
        "strategy": {"kind": "summarize_full"},
        "context_limit": 64_000,
    }
    with Gateway(MemoryCache()) as gw:
        free = replay(session, config, gateway=gw, measure=False)
        capped = replay(session, {**config, "summarizer_options": {"max_tokens": 150}}, gateway=gw, measure=False)
    assert free.compactions and capped.compactions
    assert max(e.summarizer_usage["output_tokens"] for e in free.compactions) > 150
    assert all(e.summarizer_usage["output_tokens"] <= 150 for e in capped.compactions)
