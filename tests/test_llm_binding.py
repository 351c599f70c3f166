"""`BoundModel` (`workbench.llm.binding`): a model bound to its options, over HTTP against FakeOpenAI."""

from __future__ import annotations

import asyncio
import time

import pytest
from builders import ScriptedSummarizer, conversation
from llm_support import MODEL, ask, bind

from workbench.compaction import CompactionEnv, Summarizer
from workbench.errors import SummarizerError
from workbench.llm import BadResponse, Gateway, LazyModel, LLMError, MemoryCache, ProviderError, RateLimited, Timeout
from workbench.llm.lazy import startup_seconds, timer_excluding_startup
from workbench.replay import replay
from workbench.testing import Fault
from workbench.tokens import count_tokens

pytest_plugins = ["llm_fixtures"]  # the gateway fixtures: litellm, server, gateway


def test_call_over_http_returns_a_completion(gateway, server):
    server.script("A short summary.")
    bound = bind(gateway, server)
    result = bound.complete(ask())
    assert isinstance(bound, Summarizer)
    assert result.text == "A short summary."
    assert result.model == MODEL
    assert (result.cache_hit, result.attempts, result.finish_reason) == (False, 1, "stop")
    assert result.input_tokens > 0 and result.output_tokens > 0
    assert result.duration_s > 0
    assert server.request_count == 1
    assert server.requests[0]["model"] == "fake-model"
    assert server.requests[0]["messages"] == ask()
    assert server.headers[0]["Authorization"] == "Bearer sk-dummy"


def test_async_path_shares_the_cache(gateway, server):
    bound = bind(gateway, server)
    first = asyncio.run(bound.acomplete(ask()))
    assert not first.cache_hit
    assert bound.complete(ask()).cache_hit
    assert asyncio.run(bound.acomplete(ask())).cache_hit
    assert server.request_count == 1


def test_repeat_numbers_are_distinct_cache_entries(gateway, server):
    server.responder = lambda body: f"sample {server.request_count}"
    bound = bind(gateway, server)
    texts = [bound.complete(ask(), repeat=n).text for n in range(3)]
    assert server.request_count == 3 and len(set(texts)) == 3
    again = bound.complete(ask(), repeat=1)
    assert again.cache_hit and again.text == texts[1]
    via_option = bind(gateway, server, repeat=2).complete(ask())
    assert via_option.cache_hit and via_option.text == texts[2]
    assert server.request_count == 3


@pytest.mark.parametrize("fault", [Fault.malformed(), Fault.malformed("not json"), Fault.empty_choices(),
                                   Fault.null_content()], ids=["truncated-json", "not-json", "empty-choices",
                                                               "null-content"])
@pytest.mark.parametrize("path", ["sync", "async"])
def test_unusable_answers_raise_bad_response(gateway, server, fault, path):
    server.script(fault)
    bound = bind(gateway, server)
    with pytest.raises(BadResponse):
        if path == "sync":
            bound.complete(ask())
        else:
            asyncio.run(bound.acomplete(ask()))
    assert server.request_count == 1  # not retried by default: the same request gets the same answer


def test_truncated_output_is_reported_not_raised(gateway, server):
    server.script(Fault.truncated("cut off here"))
    result = bind(gateway, server).complete(ask())
    assert (result.text, result.finish_reason) == ("cut off here", "length")
    assert bind(gateway, server).complete(ask()).finish_reason == "length"  # and cached as such


def test_missing_usage_is_counted_with_the_heuristic(gateway, server):
    server.script(Fault.no_usage("twelve chars and more"))
    result = bind(gateway, server).complete(ask())
    assert result.input_tokens == count_tokens(ask(), "heuristic")
    assert result.output_tokens == count_tokens("twelve chars and more", "heuristic")


def test_llm_errors_become_summarizer_failures_in_a_compaction(gateway, server):
    for cls in (RateLimited, ProviderError, Timeout, BadResponse):
        assert issubclass(cls, LLMError) and not issubclass(cls, SummarizerError)
    server.script(Fault.null_content())
    env = CompactionEnv(summarizer=bind(gateway, server))
    with pytest.raises(SummarizerError) as info:
        env.summarize(ask())
    assert isinstance(info.value.__cause__, BadResponse)
    assert env.summarize(ask("another")).startswith("Summary")
    assert len(env.completions) == 1


def test_api_key_env_option(gateway, server, monkeypatch):
    monkeypatch.setenv("MY_PROVIDER_KEY", "sk-from-named-variable-123")
    bound = gateway.model(MODEL, {"api_base": server.api_base, "api_key_env": "MY_PROVIDER_KEY"})
    bound.complete(ask())
    assert server.headers[0]["Authorization"] == "Bearer sk-from-named-variable-123"
    with pytest.raises(Exception, match="NO_SUCH_VARIABLE"):
        gateway.model(MODEL, {"api_key_env": "NO_SUCH_VARIABLE"})


def test_reserved_options_are_rejected(gateway):
    with pytest.raises(Exception, match="stream"):
        gateway.model(MODEL, {"stream": True})


# -- the lazy binding and its one-time start-up ----------------------------------------------------


class SlowStartGateway(Gateway):
    """A gateway whose one-time start-up is slow (as importing LiteLLM is), counting how often it runs."""

    startup_delay = 0.5

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.warm_ups = 0

    def warm_up(self) -> None:
        self.warm_ups += 1
        time.sleep(self.startup_delay)
        super().warm_up()


def test_lazy_model_binds_once_and_times_its_start_up_apart(litellm):
    gateway = SlowStartGateway(MemoryCache())
    lazy = LazyModel("workbench/extractive", {}, gateway)
    assert lazy.binds == 0 and gateway.warm_ups == 0  # nothing happens before the first use
    raw_started = time.perf_counter()
    elapsed = timer_excluding_startup(lazy)
    first = lazy.complete(ask("Edited src/app.py"))
    raw, excluded = time.perf_counter() - raw_started, elapsed()
    assert first.text and lazy.binds == 1 and gateway.warm_ups == 1
    assert lazy.startup_s >= SlowStartGateway.startup_delay
    assert raw - excluded == pytest.approx(lazy.startup_s, abs=0.01)  # exactly the start-up is left out
    elapsed = timer_excluding_startup(lazy)
    lazy.complete(ask("Edited src/other.py"))
    assert lazy.binds == 1 and gateway.warm_ups == 1 and elapsed() >= 0
    assert startup_seconds(ScriptedSummarizer()) == 0.0  # summarizers without a start-up report none


def test_a_replays_first_compaction_does_not_count_the_start_up(litellm):
    gateway = SlowStartGateway(MemoryCache())
    gateway.startup_delay = 1.0
    result = replay(conversation(24, result_chars=1500),
                    {"trigger": {"kind": "utilization", "ratio": 0.5}, "strategy": {"kind": "summarize_split"},
                     "summarizer": "workbench/extractive", "context_limit": 12_000, "max_output": 1_000},
                    gateway=gateway)
    assert len(result.compactions) >= 2 and gateway.warm_ups == 1
    first, second = result.compactions[:2]
    assert first.summarizer_usage["calls"] >= 1
    # the one-time start-up (1 s here) is not part of the first compaction's time
    assert first.duration_s < gateway.startup_delay


def test_the_binding_uses_only_the_gateways_public_api():
    import re

    import workbench.llm.binding as binding

    source = open(binding.__file__, encoding="utf-8").read()
    assert not re.findall(r"gateway\._\w+", source)
