"""The connection pool the gateway lends LiteLLM (`workbench.llm.transport`)."""

from __future__ import annotations

import threading
import time

import pytest
from llm_support import MODEL, ask, bind, closed_port

from workbench.llm import LLMError
from workbench.llm.transport import POOLS, lends_client
from workbench.testing import Fault

pytest_plugins = ["llm_fixtures"]  # the gateway fixtures: litellm, server, gateway


def test_calls_past_twenty_in_flight_keep_their_connections(gateway, server):
    """LiteLLM's own sync client keeps 20 idle connections, and its pool counts busy ones too: with
    more in flight it closes nearly every connection as its response ends, and can close one a
    request is waiting on (that request then hangs for its timeout). The gateway lends its own pool."""
    server.latency = 0.25
    bound = bind(gateway, server, concurrency=32)
    bound.complete_many([ask(f"wave {i}") for i in range(32 * 4)], max_workers=32)
    assert server.max_in_flight > 20 and server.request_count == 128
    assert server.connections <= 32  # LiteLLM's own client: about 100 for these 128 calls
    pools = list(gateway._http_clients.values())
    assert len(pools) == POOLS  # 32 threads share them, in turn
    gateway.close()
    assert all(pool.client.is_closed for pool in pools) and not gateway._http_clients


def test_a_thread_keeps_its_pool_and_threads_take_the_pools_in_turn(gateway):
    mine = gateway.http_client()
    assert gateway.http_client() is mine
    others: list = []
    for _ in range(POOLS):  # one thread after another
        thread = threading.Thread(target=lambda: others.append(gateway.http_client()))
        thread.start()
        thread.join()
    assert len({id(client) for client in [mine, *others]}) == POOLS
    assert others[-1] is mine  # the thread after the last pool's takes the first
    gateway.close()
    assert mine.client.is_closed


@pytest.mark.parametrize(
    ("provider", "switch", "lends"),
    [
        ("openai", "true", True),
        ("openai", "TRUE", True),
        ("openai", "false", False),
        ("openai", "1", False),  # LiteLLM turns its HTTP transport on for "true" only: the SDK path takes SDK clients
        ("openai", None, False),
        ("anthropic", "true", False),
        ("workbench", "true", False),
    ],
)
def test_the_pool_is_lent_only_where_litellms_http_transport_serves_the_call(
    litellm, monkeypatch, provider, switch, lends
):
    if switch is None:
        monkeypatch.delenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", raising=False)
    else:
        monkeypatch.setenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", switch)
    assert lends_client(provider) is lends


def test_a_call_on_the_sdk_path_still_works(gateway, server, monkeypatch):
    monkeypatch.setenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "false")
    answer = bind(gateway, server).complete(ask("on the SDK path"))
    assert answer.text and "x-stainless-lang" in {name.lower() for name in server.headers[-1]}  # the SDK stamps these
    assert not gateway._http_clients  # nothing lent


def test_a_call_holds_its_slot_only_while_its_request_is_on_the_wire(gateway, server, monkeypatch):
    """With one slot, a second call's request goes out while the first call is still in LiteLLM's
    own work on its answer: the slot bounds requests to the provider, not LiteLLM's CPU."""
    from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig

    reading = threading.Event()
    original = OpenAIGPTConfig.transform_response

    def slow_reading(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        reading.set()
        time.sleep(0.5)
        return result

    monkeypatch.setattr(OpenAIGPTConfig, "transform_response", slow_reading)
    server.latency = 0.1
    bound = bind(gateway, server, concurrency=1)
    threads = [threading.Thread(target=bound.complete, args=(ask(f"call {n}"),)) for n in range(2)]
    for thread in threads:
        thread.start()
    assert reading.wait(10)
    deadline = time.monotonic() + 0.3
    while server.request_count < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.request_count == 2  # sent while the first answer was still being read
    for thread in threads:
        thread.join()
    assert server.max_in_flight == 1 and bound.limiter.max_in_use == 1 and bound.limiter.in_use == 0


@pytest.mark.parametrize("failure", ["closed port", "server error"])
def test_a_request_that_fails_gives_its_slot_back(gateway, server, failure):
    if failure == "closed port":
        bound = gateway.model(
            MODEL,
            {
                "api_base": f"http://127.0.0.1:{closed_port()}/v1",
                "api_key": "sk-dummy",
                "num_retries": 0,
                "concurrency": 1,
            },
        )
    else:
        server.script(*[Fault.error(500, "the model is down")] * 3)
        bound = bind(gateway, server, concurrency=1, num_retries=2, backoff_base=0.01)
    with pytest.raises(LLMError):
        bound.complete(ask())
    assert bound.limiter.in_use == 0
    if failure == "server error":
        assert server.request_count == 3 and bound.complete(ask("and now")).text  # the slot is free again
