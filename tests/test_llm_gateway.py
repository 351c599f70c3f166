"""The `Gateway` (`workbench.llm.gateway`): concurrency bounds, calls in flight, the default gateway."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from llm_support import MODEL, ask, bind

from workbench.llm import Gateway, Limiter, MemoryCache, ProviderError
from workbench.testing import Fault

pytest_plugins = ["llm_fixtures"]  # the gateway fixtures: litellm, server, gateway


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


@pytest.mark.parametrize("concurrency", [1, 2])
def test_identical_calls_of_a_batch_reach_the_model_once_whatever_the_concurrency(gateway, server, concurrency):
    """With fewer slots than identical calls, a call that leads after an identical one landed finds
    its answer in the cache (the batch's one cache query was made before either ran)."""
    server.latency = 0.05
    bound = bind(gateway, server, concurrency=concurrency)
    results = bound.complete_many([ask("same")] * 4 + [ask("other")] * 2)
    assert server.request_count == 2
    assert [r.cache_hit for r in results].count(False) == 2 and len({r.text for r in results[:4]}) == 1
    assert (gateway.stats.calls, gateway.stats.cache_hits) == (2, 4)
    again = asyncio.run(bind(gateway, server, concurrency=concurrency).acomplete_many([ask("third")] * 3))
    assert server.request_count == 3 and sum(not r.cache_hit for r in again) == 1


def test_a_batch_of_distinct_calls_asks_the_cache_once(server):
    """Only a key the batch repeats is looked up again before its call: a lookup per call (a database
    query on a run's cache) would slow every uncached batch."""

    class CountingCache(MemoryCache):
        def __init__(self):
            super().__init__()
            self.single_lookups = 0

        def get(self, key):
            self.single_lookups += 1
            return super().get(key)

    cache = CountingCache()
    with Gateway(cache) as gateway:
        bind(gateway, server).complete_many([ask(f"item {i}") for i in range(6)])
        assert cache.single_lookups == 0 and server.request_count == 6
        asyncio.run(bind(gateway, server).acomplete_many([ask(f"new {i}") for i in range(6)]))
        assert cache.single_lookups == 0 and server.request_count == 12


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


def test_llm_module_imports_without_litellm():
    code = "import sys, workbench.llm, workbench.testing; print('litellm' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
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
