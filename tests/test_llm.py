"""The LLM gateway (`workbench.llm`), driven over real HTTP against `workbench.testing.FakeOpenAI`.

No mocks of litellm: every call goes litellm -> openai client -> 127.0.0.1 -> the fake server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workbench.compaction import CompactionEnv, Summarizer
from workbench.errors import CompactionError, SummarizerError
from workbench.llm import (
    BadResponse,
    CacheEntry,
    DuckDBCache,
    Gateway,
    Limiter,
    LLMError,
    MemoryCache,
    ProviderError,
    RateLimited,
    Timeout,
    cache_key,
    classify,
    key_material,
    load_litellm,
    redact,
    retry_after_seconds,
    split_options,
)
from workbench.testing import FakeOpenAI, Fault
from workbench.tokens import count_tokens

MODEL = "openai/fake-model"
KNOWN = "openai/gpt-4o-mini"  # priced in litellm's local map (checked in test_known_model_is_in_price_map)
ENV_SECRET = "sk-test-SECRET-env-0123456789abcdef"
OPTION_SECRET = "sk-test-SECRET-option-9876543210fedcba"


@pytest.fixture(scope="session")
def litellm():
    """Import litellm once and pay its first-call and first-error costs outside timed tests."""
    module = load_litellm()
    with FakeOpenAI() as server:
        gateway = Gateway(num_retries=0)
        bound = gateway.model(MODEL, {"api_base": server.api_base, "api_key": "sk-dummy"})
        bound.complete([{"role": "user", "content": "warm-up"}])
        asyncio.run(bound.acomplete([{"role": "user", "content": "warm-up async"}]))
        server.script(Fault.rate_limit(0), Fault.error(500))
        for _ in range(2):
            with pytest.raises(LLMError):
                bound.complete([{"role": "user", "content": "warm-up error"}], repeat=_)
    return module


@pytest.fixture
def server(litellm):
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def gateway():
    with Gateway(MemoryCache(), backoff_base=0.01, backoff_max=0.05, num_retries=2, timeout=5, seed=1) as gw:
        yield gw


def bind(gateway: Gateway, server: FakeOpenAI, model: str = MODEL, **options):
    return gateway.model(model, {"api_base": server.api_base, "api_key": "sk-dummy", **options})


def ask(text: str = "Summarize the session so far.") -> list[dict]:
    return [{"role": "system", "content": "You summarize."}, {"role": "user", "content": text}]


# -- plain calls and the cache ------------------------------------------------------------------


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


def test_second_identical_call_is_a_cache_hit_without_requests(gateway, server):
    bound = bind(gateway, server)
    first = bound.complete(ask())
    second = bound.complete(ask())
    assert server.request_count == 1
    assert second.cache_hit and not first.cache_hit
    assert second.attempts == 0
    assert (second.text, second.input_tokens, second.output_tokens, second.cost_usd, second.finish_reason) == \
        (first.text, first.input_tokens, first.output_tokens, first.cost_usd, first.finish_reason)
    assert gateway.stats.cache_hits == 1 and gateway.stats.calls == 1


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


def test_parameters_are_in_the_key_transport_and_secrets_are_not(gateway, server):
    bind(gateway, server, temperature=0).complete(ask())
    bind(gateway, server, temperature=0.7).complete(ask())
    assert server.request_count == 2
    assert bind(gateway, server, temperature=0, timeout=17, api_key="sk-other-key").complete(ask()).cache_hit
    bind(gateway, server, temperature=0).complete(ask(), max_tokens=50)
    assert server.request_count == 3
    assert server.requests[-1]["max_tokens"] == 50


def test_errors_are_never_cached(gateway, server):
    bound = bind(gateway, server, num_retries=0)
    server.script(Fault.error(500))
    with pytest.raises(ProviderError):
        bound.complete(ask())
    result = bound.complete(ask())
    assert not result.cache_hit and server.request_count == 2
    assert bound.complete(ask()).cache_hit


def test_cache_false_bypasses_the_cache(gateway, server):
    bound = bind(gateway, server, cache=False)
    bound.complete(ask())
    assert not bound.complete(ask()).cache_hit
    assert server.request_count == 2


def test_duckdb_cache_serves_a_rerun_from_a_new_gateway(tmp_path, server):
    path = tmp_path / "wb.duckdb"
    with Gateway(DuckDBCache(path)) as first_gateway:
        bound = bind(first_gateway, server, temperature=0)
        first = [bound.complete(ask(f"question {i}")) for i in range(3)]
    requests = server.request_count
    with Gateway(DuckDBCache(path)) as second_gateway:
        bound = bind(second_gateway, server, temperature=0)
        again = [bound.complete(ask(f"question {i}")) for i in range(3)]
        batch = bound.complete_many([ask(f"question {i}") for i in range(3)])
        abatch = asyncio.run(bound.acomplete_many([ask(f"question {i}") for i in range(3)]))
    assert server.request_count == requests  # zero new model calls
    for old, new in zip(first, again, strict=False):
        assert new.cache_hit
        assert (new.text, new.input_tokens, new.output_tokens, new.finish_reason) == \
            (old.text, old.input_tokens, old.output_tokens, old.finish_reason)
    assert [c.text for c in batch] == [c.text for c in abatch] == [c.text for c in first]
    assert all(c.cache_hit for c in batch + abatch)


def test_duckdb_cache_write_behind_is_visible_before_flush_and_stored_after(tmp_path):
    cache = DuckDBCache(tmp_path / "c.duckdb", flush_interval=60)
    entry = CacheEntry("text", 3, 4, None, "length", 0.5)
    cache.put("k1", "m", {"model": "m"}, entry)
    assert cache.get("k1") == entry
    assert cache.get_many(["k1", "nope"]) == {"k1": entry}
    assert cache.flush() == 1
    assert cache.get("k1") == entry and len(cache) == 1
    cache.put("k1", "m", {"model": "m"}, CacheEntry("other"))
    cache.close()
    reopened = DuckDBCache(tmp_path / "c.duckdb", write_behind=False)
    assert reopened.get("k1") == entry  # the first response stored under a key wins
    reopened.close()


def test_memory_cache_roundtrip():
    cache = MemoryCache()
    entry = CacheEntry("t", 1, 2, 0.5, "stop", 0.1)
    cache.put("k", "m", {"model": "m"}, entry)
    assert cache.get("k") == entry and cache.get("x") is None
    assert cache.get_many(["k", "x"]) == {"k": entry} and len(cache) == 1


# -- faults -------------------------------------------------------------------------------------


def test_429_is_retried_after_the_retry_after_wait(gateway, server):
    server.script(Fault.rate_limit(retry_after=1), "after the wait")
    started = time.perf_counter()
    result = bind(gateway, server).complete(ask())
    elapsed = time.perf_counter() - started
    assert result.text == "after the wait" and result.attempts == 2
    assert elapsed >= 1.0
    assert server.request_count == 2 and gateway.stats.retries == 1


def test_429_retry_after_ms_is_honoured_on_the_async_path(gateway, server):
    server.script(Fault.rate_limit(retry_after=None, retry_after_ms=400), "ok")
    started = time.perf_counter()
    result = asyncio.run(bind(gateway, server).acomplete(ask()))
    assert time.perf_counter() - started >= 0.4
    assert result.attempts == 2


def test_persistent_429_raises_rate_limited(gateway, server):
    server.script(*[Fault.rate_limit(retry_after=0)] * 3)
    with pytest.raises(RateLimited) as info:
        bind(gateway, server).complete(ask())
    assert info.value.attempts == 3 and info.value.status_code == 429 and info.value.retry_after == 0
    assert server.request_count == 3


def test_429_asking_longer_than_allowed_fails_at_once(server):
    with Gateway(MemoryCache(), max_retry_after=5, num_retries=3) as gw:
        server.script(Fault.rate_limit(retry_after=3600))
        with pytest.raises(RateLimited) as info:
            bind(gw, server).complete(ask())
    assert info.value.retry_after == 3600 and server.request_count == 1


def test_500_is_retried_then_succeeds(gateway, server):
    server.script(Fault.error(500), Fault.error(503), "recovered")
    result = bind(gateway, server).complete(ask())
    assert result.text == "recovered" and result.attempts == 3
    assert server.request_count == 3


def test_persistent_500_raises_provider_error_after_n_attempts(gateway, server):
    server.script(*[Fault.error(500)] * 5)
    started = time.perf_counter()
    with pytest.raises(ProviderError) as info:
        bind(gateway, server, num_retries=3).complete(ask())
    assert info.value.attempts == 4 and info.value.status_code == 500
    assert "after 4 attempts" in str(info.value)
    assert server.request_count == 4  # litellm's and the openai client's own retries are off
    assert time.perf_counter() - started < 3
    assert gateway.stats.failures == 1


def test_litellm_makes_one_request_per_attempt(gateway, server):
    server.script(Fault.error(502))
    with pytest.raises(ProviderError):
        bind(gateway, server, num_retries=0).complete(ask())
    assert server.request_count == 1


def test_client_errors_are_not_retried(gateway, server):
    server.script(Fault.error(400, "bad request"), "never")
    with pytest.raises(ProviderError) as info:
        bind(gateway, server).complete(ask())
    assert info.value.attempts == 1 and not info.value.retryable
    assert server.request_count == 1


def test_hang_raises_timeout(gateway, server):
    server.script(Fault.hang(10), Fault.hang(10))
    started = time.perf_counter()
    with pytest.raises(Timeout) as info:
        bind(gateway, server, timeout=0.3, num_retries=1).complete(ask())
    assert time.perf_counter() - started < 3
    assert info.value.attempts == 2 and server.request_count == 2


def test_hang_then_success_on_the_async_path(gateway, server):
    server.script(Fault.hang(10), "after a timeout")
    result = asyncio.run(bind(gateway, server, timeout=0.3).acomplete(ask()))
    assert result.text == "after a timeout" and result.attempts == 2


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


def test_bad_responses_can_be_retried(server):
    with Gateway(MemoryCache(), backoff_base=0.01, retry_bad_response=True) as gw:
        server.script(Fault.empty_choices(), "second try")
        assert bind(gw, server).complete(ask()).text == "second try"


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


def test_llm_errors_are_summarizer_failures(gateway, server):
    for cls in (RateLimited, ProviderError, Timeout, BadResponse):
        assert issubclass(cls, LLMError) and issubclass(cls, SummarizerError) and issubclass(cls, CompactionError)
    server.script(Fault.null_content())
    env = CompactionEnv(summarizer=bind(gateway, server))
    with pytest.raises(SummarizerError):
        env.summarize(ask())
    assert env.summarize(ask("another")).startswith("Summary")
    assert len(env.completions) == 1


# -- concurrency --------------------------------------------------------------------------------


def test_thread_concurrency_bound_is_respected(gateway, server):
    server.latency = 0.1
    bound = bind(gateway, server, concurrency=3)
    started = time.perf_counter()
    results = bound.complete_many([ask(f"q{i}") for i in range(12)], max_workers=12)
    elapsed = time.perf_counter() - started
    assert server.max_in_flight == 3 and bound.limiter.max_in_use == 3
    assert elapsed >= 0.4 - 0.02  # 12 calls / 3 at a time x 0.1 s
    assert [r.text for r in results] == [bound.complete(ask(f"q{i}")).text for i in range(12)]


def test_async_concurrency_bound_is_respected(gateway, server):
    server.latency = 0.1
    bound = bind(gateway, server, concurrency=4)
    results = asyncio.run(bound.acomplete_many([ask(f"q{i}") for i in range(16)]))
    assert server.max_in_flight == 4
    assert len(results) == 16 and not any(r.cache_hit for r in results)


def test_threads_and_event_loops_share_one_bound_per_model(gateway, server):
    server.latency = 0.1
    bound = bind(gateway, server, concurrency=2)

    def in_loop(offset: int):
        return asyncio.run(bound.acomplete_many([ask(f"a{offset}-{i}") for i in range(4)]))

    threads = [threading.Thread(target=in_loop, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    bound.complete_many([ask(f"s{i}") for i in range(4)], max_workers=4)
    for thread in threads:
        thread.join()
    assert server.request_count == 12
    assert server.max_in_flight == 2


def test_identical_concurrent_calls_reach_the_model_once(gateway, server):
    server.latency = 0.2
    bound = bind(gateway, server, concurrency=8)
    results = bound.complete_many([ask("same")] * 8, max_workers=8)
    assert server.request_count == 1
    assert sum(not r.cache_hit for r in results) == 1
    assert len({r.text for r in results}) == 1


def test_results_do_not_depend_on_scheduling(server):
    server.latency = 0.02
    batch = [ask(f"item {i}") for i in range(20)]
    with Gateway(MemoryCache()) as serial, Gateway(MemoryCache()) as parallel:
        one = bind(serial, server, concurrency=1).complete_many(batch)
        many = asyncio.run(bind(parallel, server, concurrency=8).acomplete_many(batch))
    assert [r.text for r in one] == [r.text for r in many]
    assert [r.input_tokens for r in one] == [r.input_tokens for r in many]


def test_limiter_survives_cancelled_async_waiters():
    limiter = Limiter(1)

    async def scenario():
        await limiter.acquire_async()
        waiter = asyncio.ensure_future(limiter.acquire_async())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        limiter.release()
        await asyncio.wait_for(limiter.acquire_async(), 1)  # the slot was not leaked
        limiter.release()

    asyncio.run(scenario())
    assert limiter.in_use == 0
    limiter.acquire()
    thread = threading.Thread(target=limiter.acquire)
    thread.start()
    time.sleep(0.05)
    assert thread.is_alive()
    limiter.release()
    thread.join(1)
    assert not thread.is_alive() and limiter.in_use == 1


# -- cost -----------------------------------------------------------------------------------------


def test_known_model_is_in_price_map(litellm):
    info = litellm.get_model_info(KNOWN)
    assert info["input_cost_per_token"] > 0 and info["output_cost_per_token"] > 0


def test_cost_of_a_known_model(gateway, server, litellm):
    result = bind(gateway, server, model=KNOWN).complete(ask())
    prompt, completion = litellm.cost_per_token(model=KNOWN, prompt_tokens=result.input_tokens,
                                                completion_tokens=result.output_tokens)
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


def test_offline_extractive_model_costs_nothing(gateway, litellm):
    pytest.importorskip("workbench.extractive")
    bound = gateway.model("workbench/extractive")
    result = bound.complete([{"role": "user", "content": "We edited src/app.py after test_login failed."}])
    assert result.cost_usd == 0.0 and result.text and not result.cache_hit
    assert bound.complete([{"role": "user", "content": "We edited src/app.py after test_login failed."}]).cache_hit
    assert asyncio.run(bound.acomplete([{"role": "user", "content": "async src/x.py"}])).cost_usd == 0.0
    assert not gateway.unknown_cost_models


# -- secrets ----------------------------------------------------------------------------------------


def test_api_keys_never_reach_the_database_file(tmp_path, server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    path = tmp_path / "secrets.duckdb"
    with Gateway(DuckDBCache(path), num_retries=0) as gw:
        from_env = gw.model(MODEL, {"api_base": server.api_base})
        from_option = gw.model(MODEL, {"api_base": server.api_base, "api_key": OPTION_SECRET,
                                       "extra_headers": {"X-Api-Key": OPTION_SECRET}})
        from_env.complete(ask("MARKER-from-env positive control"))
        from_option.complete(ask("MARKER-from-option positive control"))
        server.script(Fault.error(500))
        with pytest.raises(ProviderError):
            from_option.complete(ask("a failing call"))
    assert server.headers[0]["Authorization"] == f"Bearer {ENV_SECRET}"
    assert server.headers[1]["Authorization"] == f"Bearer {OPTION_SECRET}"
    files = list(tmp_path.iterdir())
    data = b"".join(f.read_bytes() for f in files)
    assert b"MARKER-from-env" in data and b"MARKER-from-option" in data  # the grep can see stored text
    assert b"SECRET" not in data
    from workbench import db

    connection = db.connect(path)
    requests = [json.loads(row[0]) for row in connection.execute("SELECT request FROM llm_cache").fetchall()]
    connection.close()
    assert len(requests) == 2  # the failed call was not stored
    assert all(set(r) == {"v", "model", "messages", "params", "repeat"} for r in requests)
    assert not any("api_key" in json.dumps(r) or "extra_headers" in json.dumps(r) for r in requests)


def test_api_keys_never_appear_in_errors(gateway, server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    server.script(Fault.error(401, f"Incorrect API key provided: {OPTION_SECRET}"),
                  Fault.error(401, f"Incorrect API key provided: {ENV_SECRET}"))
    bound = bind(gateway, server, api_key=OPTION_SECRET)
    assert OPTION_SECRET not in repr(bound)
    for _ in range(2):
        with pytest.raises(ProviderError) as info:
            bound.complete(ask(), repeat=_)
        text = str(info.value) + repr(info.value.args)
        assert "SECRET" not in text and info.value.status_code in (400, 401)
        assert info.value.__cause__ is None


def test_api_key_env_option(gateway, server, monkeypatch):
    monkeypatch.setenv("MY_PROVIDER_KEY", "sk-from-named-variable-123")
    bound = gateway.model(MODEL, {"api_base": server.api_base, "api_key_env": "MY_PROVIDER_KEY"})
    bound.complete(ask())
    assert server.headers[0]["Authorization"] == "Bearer sk-from-named-variable-123"
    with pytest.raises(Exception, match="NO_SUCH_VARIABLE"):
        gateway.model(MODEL, {"api_key_env": "NO_SUCH_VARIABLE"})


def test_key_material_has_no_secrets_or_transport():
    options = {"temperature": 0, "api_key": "sk-abc-123456", "timeout": 3, "api_base": "http://x",
               "aws_secret_access_key": "abc", "max_tokens": 10, "concurrency": 4, "repeat": 1}
    params, transport, own = split_options(options)
    assert params == {"temperature": 0, "max_tokens": 10}
    assert set(transport) == {"api_key", "timeout", "api_base", "aws_secret_access_key"}
    assert own == {"concurrency": 4, "repeat": 1}
    material = key_material("m", ask(), {**params, "api_key": "sk-abc-123456"}, repeat=1)
    assert "sk-abc" not in json.dumps(material)
    assert cache_key("m", ask(), params, 1) != cache_key("m", ask(), params, 0)


def test_redact_masks_keys():
    text = redact("key sk-proj-ABCDEF123456 and Bearer abcdefghijkl and api_key=zzzzzzzz and mine", ["mine"])
    assert "ABCDEF" not in text and "abcdefghijkl" not in text and "zzzzzzzz" not in text and "mine" not in text


# -- small pieces -------------------------------------------------------------------------------------


def test_retry_after_parsing():
    assert retry_after_seconds({"retry-after": "2"}) == 2
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10
    assert retry_after_seconds({}) is None
    assert retry_after_seconds({"retry-after": "soon"}) is None


def test_classify_plain_exceptions():
    assert isinstance(classify(TimeoutError("slow"), model="m", attempts=1), Timeout)
    assert isinstance(classify(ValueError("Expecting value: line 1"), model="m", attempts=1), BadResponse)
    error = classify(RuntimeError("boom sk-live-SECRET12345"), model="m", attempts=1)
    assert isinstance(error, ProviderError) and not error.retryable and "SECRET" not in str(error)


def test_llm_module_imports_without_litellm():
    code = "import sys, workbench.llm, workbench.testing; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "False", out.stderr


def test_identical_concurrent_failures_are_shared_not_repeated(gateway, server):
    server.latency = 0.1
    server.script(*[Fault.error(500)] * 4)
    bound = bind(gateway, server, num_retries=0)
    errors = []

    def call():
        try:
            bound.complete(ask("fails"))
        except ProviderError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(errors) == 4 and server.request_count == 1
    assert all(e.status_code == 500 and e.model == MODEL for e in errors)


def test_reserved_options_are_rejected(gateway):
    with pytest.raises(Exception, match="stream"):
        gateway.model(MODEL, {"stream": True})


def test_limiters_are_per_model_and_endpoint(gateway):
    a = gateway.model(MODEL, {"api_base": "http://127.0.0.1:1/v1", "concurrency": 2})
    b = gateway.model(MODEL, {"api_base": "http://127.0.0.1:1/v1/"})
    c = gateway.model(MODEL, {"api_base": "http://127.0.0.1:2/v1"})
    assert a.limiter is b.limiter and a.limiter is not c.limiter and a.limiter.limit == 2


def test_default_gateway_is_shared_and_replaceable():
    from workbench import llm

    first = llm.default_gateway()
    assert llm.default_gateway() is first and isinstance(first.cache, MemoryCache)
    mine = Gateway(MemoryCache())
    previous = llm.set_default_gateway(mine)
    try:
        assert previous is first and llm.default_gateway() is mine
    finally:
        llm.set_default_gateway(previous)


def test_duckdb_concurrent_lookups_share_queries_and_stay_correct(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    cache = DuckDBCache(tmp_path / "reads.duckdb", write_behind=False)
    for i in range(100):
        cache.put(f"k{i}", "m", {"i": i}, CacheEntry(f"text {i}", i, i + 1))
    with ThreadPoolExecutor(16) as pool:
        found = list(pool.map(cache.get, [f"k{i % 120}" for i in range(480)]))
    for i, entry in enumerate(found):
        if i % 120 < 100:
            assert entry is not None and entry.text == f"text {i % 120}" and entry.output_tokens == i % 120 + 1
        else:
            assert entry is None
    cache.close()
