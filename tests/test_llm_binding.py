"""`BoundModel` (`workbench.llm.binding`): a model bound to its options, over HTTP against FakeOpenAI."""

from __future__ import annotations

import asyncio
import time

import pytest
from builders import ScriptedSummarizer, conversation
from llm_support import MODEL, ask, bind

from workbench.compaction import CompactionEnv, Summarizer
from workbench.errors import SummarizerError
from workbench.llm import (
    BadResponse,
    CacheEntry,
    Gateway,
    LazyModel,
    LLMError,
    MemoryCache,
    ProviderError,
    RateLimited,
    Timeout,
)
from workbench.llm.lazy import startup_seconds, timer_excluding_startup
from workbench.replay import replay
from workbench.store import DuckDBCache
from workbench.testing import FakeOpenAI, Fault
from workbench.tokens import count_tokens

pytest_plugins = ["llm_fixtures"]  # the gateway fixtures: litellm, server, gateway


def refused(text: str = "I can't help with that.") -> Fault:
    """A scripted answer ending with `finish_reason: "content_filter"` (served by `RefusingServer`)."""
    return Fault("content_filter", text=text)


class RefusingServer(FakeOpenAI):
    """FakeOpenAI that also serves `refused(...)`: HTTP 200, the text, `finish_reason: "content_filter"`."""

    async def _answer(self, body, item):
        if isinstance(item, Fault) and item.kind == "content_filter":
            from aiohttp import web

            return web.json_response(self._completion(body, item.text, finish_reason="content_filter"))
        return await super()._answer(body, item)


@pytest.fixture
def refusing(litellm):
    with RefusingServer() as fake:
        yield fake


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


@pytest.mark.parametrize(
    "fault",
    [Fault.malformed(), Fault.malformed("not json"), Fault.empty_choices(), Fault.null_content()],
    ids=["truncated-json", "not-json", "empty-choices", "null-content"],
)
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


@pytest.mark.parametrize("answer", ["", "  \n\t ", refused()], ids=["empty", "whitespace", "content-filter"])
@pytest.mark.parametrize("path", ["complete", "complete_many", "async"])
def test_unusable_answers_are_not_cached(gateway, refusing, answer, path):
    """An answer every summarizer rejects is paid for but not stored: the next run asks again."""
    refusing.script(answer, "A real summary.")
    bound = bind(gateway, refusing)

    def call():
        if path == "complete":
            return bound.complete(ask())
        if path == "complete_many":
            return bound.complete_many([ask()])[0]
        return asyncio.run(bound.acomplete(ask()))

    first = call()
    assert not first.cache_hit and first.text == (answer.text if isinstance(answer, Fault) else answer)
    assert len(gateway.cache) == 0 and gateway.stats.calls == 1
    second = call()
    assert (second.text, second.cache_hit) == ("A real summary.", False)
    assert call().cache_hit and refusing.request_count == 2


@pytest.mark.parametrize("kind", ["memory", "duckdb"])
def test_an_unusable_answer_stored_earlier_is_asked_again_and_replaced(tmp_path, server, kind):
    """A cache filled by an earlier version may hold empty answers: a lookup ignores them and the
    next answer takes their place (the first answer wins only over other usable ones)."""
    cache = MemoryCache() if kind == "memory" else DuckDBCache(tmp_path / "old.duckdb")
    with Gateway(cache, num_retries=0) as gw:
        bound = bind(gw, server)
        cache.put(bound.cache_key(ask()), MODEL, {"old": True}, CacheEntry("", 1, 0, None, "stop"))
        server.script("A real summary.")
        assert bound.complete(ask()).text == "A real summary."
        assert bound.complete_many([ask()])[0].cache_hit
        cache.put(bound.cache_key(ask()), MODEL, {"late": True}, CacheEntry("late", 1, 1, None, "stop"))
        assert bound.complete(ask()).text == "A real summary."
    if kind == "duckdb":
        with Gateway(DuckDBCache(tmp_path / "old.duckdb")) as gw:
            again = bind(gw, server).complete(ask())
        assert (again.text, again.cache_hit) == ("A real summary.", True)
    assert server.request_count == 1


@pytest.mark.parametrize("kind", ["memory", "duckdb"])
@pytest.mark.parametrize("path", ["complete", "complete_many"])
def test_an_answer_its_caller_refuses_is_not_served_nor_kept(tmp_path, server, kind, path):
    """A caller's `validate` rejects answers it cannot read: such an answer is neither cached nor
    served from the cache, and the answer asked instead replaces one stored earlier."""

    def json_only(text: str) -> str | None:
        return None if text.startswith("{") else "not a JSON object"

    cache = MemoryCache() if kind == "memory" else DuckDBCache(tmp_path / "c.duckdb", write_behind=False)
    with Gateway(cache, num_retries=0) as gw:
        bound = bind(gw, server)

        def call():
            if path == "complete":
                return bound.complete(ask(), validate=json_only)
            return bound.complete_many([ask()], validate=json_only)[0]

        server.script("Looks fine.", '{"ok": 1}', '{"ok": 2}')
        assert call().text == "Looks fine."  # given back for the caller to judge, not kept
        assert call().text == '{"ok": 1}' and call().cache_hit
        assert bound.complete(ask()).text == '{"ok": 1}'  # a caller without a rule reads it too
        cache.put(bound.cache_key(ask()), MODEL, {"old": True}, CacheEntry("prose stored earlier"), replace=True)
        assert bound.complete(ask()).cache_hit  # usable for a caller without a rule
        assert call().text == '{"ok": 2}'  # refused, asked again...
        assert call().cache_hit and cache.get(bound.cache_key(ask())).text == '{"ok": 2}'  # ...and replaced
    assert server.request_count == 3


def test_a_refusal_is_a_summarizer_failure_naming_the_model_and_the_finish_reason(gateway, refusing):
    refusing.script(refused("Sorry, I cannot summarize this."), "")
    env = CompactionEnv(summarizer=bind(gateway, refusing))
    with pytest.raises(SummarizerError, match=r"'openai/fake-model' refused it \(finish_reason 'content_filter'\)"):
        env.summarize(ask("one"))
    with pytest.raises(SummarizerError, match=r"'openai/fake-model' returned an empty summary \(finish_reason 'stop'"):
        env.summarize(ask("two"))
    assert len(env.completions) == 2  # both were paid for


def test_a_refused_summary_falls_back_under_on_failure_fallback(gateway, refusing):
    refusing.responder = lambda body: refused()
    result = replay(
        conversation(24, result_chars=1500),
        {
            "trigger": {"kind": "utilization", "ratio": 0.5},
            "strategy": {"kind": "summarize_split"},
            "summarizer": MODEL,
            "summarizer_options": {"api_base": refusing.api_base, "api_key": "sk-dummy"},
            "context_limit": 12_000,
            "max_output": 1_000,
            "on_failure": "fallback",
        },
        gateway=gateway,
    )
    assert result.termination == "completed" and result.compactions
    assert all(e.fell_back and "content_filter" in (e.error or "") for e in result.compactions)
    assert not any("can't help" in (m.text or "") for m in result.final_context)


def test_truncated_summaries_are_kept_and_counted(gateway, server):
    server.responder = lambda body: Fault.truncated("A summary cut off at the output limit, which")
    result = replay(
        conversation(24, result_chars=1500),
        {
            "trigger": {"kind": "utilization", "ratio": 0.5},
            "strategy": {"kind": "summarize_split"},
            "summarizer": MODEL,
            "summarizer_options": {"api_base": server.api_base, "api_key": "sk-dummy"},
            "context_limit": 12_000,
            "max_output": 1_000,
        },
        gateway=gateway,
    )
    events = result.compactions
    assert result.termination == "completed" and len(events) >= 2
    assert all("cut off at the output limit" in (e.summary or "") for e in events)
    frame = result.compactions_frame()
    assert list(frame["summarizer_truncated"]) == [e.summarizer_usage["calls"] for e in events]
    assert result.metrics["summarizer_truncated"] == sum(frame["summarizer_truncated"]) > 0
    plain = replay(conversation(24, result_chars=1500), "no-compaction")
    assert plain.metrics["summarizer_truncated"] == 0 and "summarizer_truncated" in plain.compactions_frame()


def test_request_timeout_is_honoured_like_timeout(gateway, server):
    server.script(Fault.hang(4), Fault.hang(4))  # the gateway's own timeout is 5 s
    for option in ("request_timeout", "timeout"):
        bound = bind(gateway, server, num_retries=0, **{option: 0.5})
        assert bound.timeout == 0.5
        started = time.perf_counter()
        with pytest.raises(Timeout):
            bound.complete(ask(f"hang with {option}"))
        assert time.perf_counter() - started < 3


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


def test_lazy_model_binds_once_and_times_its_start_up_apart(server):
    gateway = SlowStartGateway(MemoryCache())
    lazy = LazyModel(MODEL, {"api_base": server.api_base, "api_key": "sk-test"}, gateway)
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


def test_the_offline_model_answered_in_process_has_no_start_up():
    """LiteLLM takes seconds to import: a model answered in process never loads it."""
    gateway = SlowStartGateway(MemoryCache())
    lazy = LazyModel("workbench/extractive", {}, gateway)
    assert lazy.complete(ask("Edited src/app.py")).text
    assert lazy.binds == 1 and gateway.warm_ups == 0 and lazy.startup_s < SlowStartGateway.startup_delay


def test_a_replays_first_compaction_does_not_count_the_start_up(server):
    gateway = SlowStartGateway(MemoryCache())
    gateway.startup_delay = 1.0
    result = replay(
        conversation(24, result_chars=1500),
        {
            "trigger": {"kind": "utilization", "ratio": 0.5},
            "strategy": {"kind": "summarize_split"},
            "summarizer": MODEL,
            "summarizer_options": {"api_base": server.api_base, "api_key": "sk-test"},
            "context_limit": 12_000,
            "max_output": 1_000,
        },
        gateway=gateway,
    )
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
