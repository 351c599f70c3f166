"""What is retried and how (`workbench.llm.retry`), over HTTP against FakeOpenAI's scripted faults."""

from __future__ import annotations

import asyncio
import time

import pytest
from llm_support import ask, bind

from workbench.llm import Gateway, MemoryCache, ProviderError, RateLimited, Timeout, retry_after_seconds
from workbench.testing import Fault

pytest_plugins = ["llm_fixtures"]  # the gateway fixtures: litellm, server, gateway


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
    with pytest.raises(ProviderError) as info:
        bind(gateway, server, num_retries=3).complete(ask())
    assert info.value.attempts == 4 and info.value.status_code == 500
    assert "after 4 attempts" in str(info.value)
    assert server.request_count == 4  # litellm's and the openai client's own retries are off
    assert gateway.stats.retries == 3
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
    with pytest.raises(Timeout) as info:
        bind(gateway, server, timeout=0.3, num_retries=1).complete(ask())
    assert info.value.retryable and gateway.stats.retries == 1
    assert info.value.attempts == 2 and server.request_count == 2


def test_hang_then_success_on_the_async_path(gateway, server):
    server.script(Fault.hang(10), "after a timeout")
    result = asyncio.run(bind(gateway, server, timeout=0.3).acomplete(ask()))
    assert result.text == "after a timeout" and result.attempts == 2


def test_bad_responses_can_be_retried(server):
    with Gateway(MemoryCache(), backoff_base=0.01, retry_bad_response=True) as gw:
        server.script(Fault.empty_choices(), "second try")
        assert bind(gw, server).complete(ask()).text == "second try"


def test_retry_after_parsing():
    assert retry_after_seconds({"retry-after": "2"}) == 2
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10
    assert retry_after_seconds({}) is None
    assert retry_after_seconds({"retry-after": "soon"}) is None
