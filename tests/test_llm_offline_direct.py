"""`workbench/extractive` answered in process (`BoundModel.in_process`): LiteLLM's answer, without LiteLLM.

The gateway calls the offline provider's own function (`workbench.llm.provider.offline_answer`)
instead of `litellm.completion`: the same cache key and entries, usage, cost and Completion as the
LiteLLM custom-provider path, which any other model still takes.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, replace
from typing import Any

import pytest
from builders import conversation

from workbench.compaction import Completion
from workbench.extractive import MODEL_STRING, extractive_summary, request_tokens
from workbench.llm import Gateway, MemoryCache
from workbench.replay import replay
from workbench.replay_result import ReplayResult

pytest_plugins = ["llm_fixtures"]  # the gateway fixtures: litellm, server, gateway

REQUEST: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "The import in src/workbench/replay.py fails; keep Python 3.11 support."},
    {"role": "assistant", "content": "Decided to move ReplayState into workbench.state; cache_size stays 512."},
    {"role": "user", "content": "Then update CHANGELOG.md and set the timeout to 45 seconds."},
]

#: The summarizing configs whose summaries are compared (split: several calls per compaction).
CONFIGS = (
    {"trigger": {"kind": "utilization", "ratio": 0.5}, "strategy": {"kind": "summarize_split", "preserve": 0.4}},
    {
        "trigger": {"kind": "stat_threshold", "gauges": {"context_steps": 12}},
        "strategy": {"kind": "summarize_progressive", "keep_recent": 4},
    },
)


@pytest.fixture
def no_litellm_calls(litellm, monkeypatch):
    """`litellm.completion` and `acompletion` fail the test if called."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("litellm was called for an in-process model")

    monkeypatch.setattr(litellm, "completion", refuse)
    monkeypatch.setattr(litellm, "acompletion", refuse)


def timeless(completion: Completion) -> dict[str, Any]:
    return {**asdict(completion), "duration_s": None}


def bound(gateway: Gateway, in_process: bool, **options: Any) -> Any:
    model = gateway.model(MODEL_STRING, options)
    assert model.in_process  # the offline model is in process unless told otherwise
    model.in_process = in_process
    return model


@pytest.mark.parametrize(
    "options, max_tokens",
    [({}, None), ({}, 120), ({"max_tokens": 80}, 300), ({"max_completion_tokens": 90}, None), ({"temperature": 0}, 50)],
)
def test_the_in_process_answer_is_litellms(litellm, options, max_tokens) -> None:
    through_litellm = bound(Gateway(MemoryCache()), False, **options)
    in_process = bound(Gateway(MemoryCache()), True, **options)
    expected = through_litellm.complete(REQUEST, max_tokens=max_tokens)
    got = in_process.complete(REQUEST, max_tokens=max_tokens)
    assert timeless(got) == timeless(expected)
    assert got.cost_usd == 0.0 and got.attempts == 1 and not got.cache_hit and got.finish_reason == "stop"
    assert got.input_tokens == request_tokens(REQUEST) and got.text
    assert in_process.cache_key(REQUEST, max_tokens=max_tokens) == through_litellm.cache_key(
        REQUEST, max_tokens=max_tokens
    )
    assert asdict(in_process.gateway.stats) == asdict(through_litellm.gateway.stats)
    key = in_process.cache_key(REQUEST, max_tokens=max_tokens)
    stored_direct, stored_litellm = in_process.gateway.cache.get(key), through_litellm.gateway.cache.get(key)
    assert stored_direct is not None and stored_litellm is not None
    assert replace(stored_direct, duration_s=0.0) == replace(stored_litellm, duration_s=0.0)


def test_in_process_calls_never_reach_litellm_and_share_the_cache(no_litellm_calls) -> None:
    gateway = Gateway(MemoryCache())
    model = gateway.model(MODEL_STRING)
    first = model.complete(REQUEST, max_tokens=100)
    assert first.text == extractive_summary(REQUEST, budget_tokens=100) and not first.cache_hit
    assert asyncio.run(model.acomplete(REQUEST, max_tokens=100)).cache_hit  # the entry the sync call stored
    batch = [REQUEST[:2], REQUEST[:3], REQUEST]
    answers = model.complete_many(batch, max_tokens=60)
    assert [a.text for a in answers] == [extractive_summary(m, budget_tokens=60) for m in batch]
    more = asyncio.run(model.acomplete_many([REQUEST[:1], REQUEST[:2]], max_tokens=60))
    assert [a.cache_hit for a in more] == [False, True]
    assert gateway.stats.calls == 5 and gateway.stats.requests == 5 and gateway.stats.cost_usd == 0.0


def test_other_models_still_go_through_litellm(litellm, server) -> None:
    gateway = Gateway(MemoryCache(), num_retries=0)
    model = gateway.model("openai/gpt-4o-mini", {"api_base": server.api_base, "api_key": "sk-dummy"})
    assert not model.in_process
    model.complete(REQUEST)
    assert server.request_count == 1
    assert not gateway.model("openai/workbench/extractive", {"api_base": server.api_base}).in_process


def replayed(in_process: bool, config: dict[str, Any]) -> ReplayResult:
    gateway = Gateway(MemoryCache())
    summarizer = bound(gateway, in_process)
    session = conversation(30, result_chars=1500)
    full = {**config, "context_limit": 12_000, "max_output": 1_000, "tokenizer": "heuristic"}
    return replay(session, full, summarizer=summarizer, gateway=gateway)


def comparable(result: ReplayResult) -> dict[str, Any]:
    """What a replay produced, less the times it took."""
    return {
        "metrics": {k: v for k, v in result.metrics.items() if "duration" not in k and not k.endswith("_s")},
        "summaries": [event.summary for event in result.compactions],
        "usage": [
            {k: v for k, v in event.summarizer_usage.items() if "duration" not in k and not k.endswith("_s")}
            for event in result.compactions
        ],
        "context": [message.to_openai() for message in result.final_context],
        "calls": [(call.context_tokens, call.cached_prefix_tokens, call.compacted_before) for call in result.calls],
    }


@pytest.mark.parametrize("config", CONFIGS, ids=["split", "progressive"])
def test_a_replay_summarizes_alike_in_process_and_through_litellm(litellm, config, monkeypatch) -> None:
    expected = replayed(False, config)
    assert len(expected.compactions) >= 2 and all(event.summary for event in expected.compactions)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("litellm was called for an in-process model")

    monkeypatch.setattr(litellm, "completion", refuse)
    got = replayed(True, config)
    assert comparable(got) == comparable(expected)
