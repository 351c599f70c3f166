"""The local OpenAI-compatible server of `workbench.testing` (plain HTTP clients, no litellm)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from workbench.testing import FakeOpenAI, FakeOpenAIProcess, Fault

BODY = {"model": "fake", "messages": [{"role": "user", "content": "hello there"}]}


def post(url: str, body: dict = BODY, timeout: float = 5) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_answers_both_paths_deterministically():
    with FakeOpenAI() as server:
        status, _, raw = post(server.api_base + "/chat/completions")
        status2, _, raw2 = post(server.base_url + "/chat/completions")
        assert status == status2 == 200
        one, two = json.loads(raw), json.loads(raw2)
        assert one["choices"][0]["message"]["content"] == two["choices"][0]["message"]["content"]
        assert one["usage"]["prompt_tokens"] > 0 and one["choices"][0]["finish_reason"] == "stop"
        assert server.request_count == 2 and server.requests[0] == BODY


def test_32_concurrent_requests_are_not_serialised():
    def timed_post(_):
        sent = time.perf_counter()
        status = post(server.api_base + "/chat/completions")[0]
        return status, time.perf_counter() - sent

    with FakeOpenAI(latency=0.2) as server:
        started = time.perf_counter()
        with ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(timed_post, range(32)))
        elapsed = time.perf_counter() - started
    assert [status for status, _ in answers] == [200] * 32
    assert min(seconds for _, seconds in answers) >= 0.2  # the latency counts from arrival: never early
    assert elapsed < 0.2 * 3  # serialised would be 6.4 s
    assert server.max_in_flight >= 16


def test_scripted_faults():
    with FakeOpenAI() as server:
        server.script(
            Fault.rate_limit(3),
            Fault.error(503),
            Fault.malformed(),
            Fault.empty_choices(),
            Fault.null_content(),
            Fault.truncated("cut"),
            Fault.no_usage("x"),
            "plain",
            lambda body: f"echo {body['messages'][0]['content']}",
        )
        url = server.api_base + "/chat/completions"
        status, headers, _ = post(url)
        assert status == 429 and headers["retry-after"] == "3"
        assert post(url)[0] == 503
        status, _, raw = post(url)
        assert status == 200 and pytest.raises(ValueError, json.loads, raw)
        assert json.loads(post(url)[2])["choices"] == []
        assert json.loads(post(url)[2])["choices"][0]["message"]["content"] is None
        truncated = json.loads(post(url)[2])["choices"][0]
        assert (truncated["message"]["content"], truncated["finish_reason"]) == ("cut", "length")
        assert "usage" not in json.loads(post(url)[2])
        assert json.loads(post(url)[2])["choices"][0]["message"]["content"] == "plain"
        assert json.loads(post(url)[2])["choices"][0]["message"]["content"] == "echo hello there"
        assert server.pending == 0 and server.request_count == 9


def test_stop_does_not_wait_for_hanging_requests():
    server = FakeOpenAI().start()
    server.script(Fault.hang(60))
    with pytest.raises(OSError):
        post(server.api_base + "/chat/completions", timeout=0.3)
    started = time.perf_counter()
    server.stop()
    assert time.perf_counter() - started < 3


def test_process_server_counts_and_scripts():
    with FakeOpenAIProcess(latency=0.01) as server:
        server.script(Fault.error(500), "scripted")
        url = server.api_base + "/chat/completions"
        assert post(url)[0] == 500
        assert json.loads(post(url)[2])["choices"][0]["message"]["content"] == "scripted"
        assert server.request_count == 2 and server.requests[1] == BODY
        server.reset_counts()
        assert server.request_count == 0
