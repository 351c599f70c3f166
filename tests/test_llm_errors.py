"""The gateway's failures and their classification (`workbench.llm.errors`)."""

from __future__ import annotations

import asyncio
import socket

import pytest
from llm_support import ENV_SECRET, MODEL, OPTION_SECRET, ask, bind, closed_port

from workbench.compaction import CompactionEnv
from workbench.errors import SummarizerError, WorkbenchError
from workbench.llm import (
    AuthenticationFailed,
    BadResponse,
    ConnectionFailed,
    LLMError,
    ProviderError,
    Timeout,
    classify,
    redact,
)
from workbench.testing import Fault

pytest_plugins = ["llm_fixtures"]  # the gateway fixtures: litellm, server, gateway


def test_api_keys_never_appear_in_errors(gateway, server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    server.script(
        Fault.error(401, f"Incorrect API key provided: {OPTION_SECRET}"),
        Fault.error(401, f"Incorrect API key provided: {ENV_SECRET}"),
    )

    bound = bind(gateway, server, api_key=OPTION_SECRET)
    assert OPTION_SECRET not in repr(bound)
    for _ in range(2):
        with pytest.raises(AuthenticationFailed) as info:
            bound.complete(ask(), repeat=_)
        text = str(info.value) + repr(info.value.args)
        assert "SECRET" not in text and info.value.status_code == 401
        assert info.value.__cause__ is None


def test_redact_masks_keys():
    text = redact("key sk-proj-ABCDEF123456 and Bearer abcdefghijkl and api_key=zzzzzzzz and mine", ["mine"])
    assert "ABCDEF" not in text and "abcdefghijkl" not in text and "zzzzzzzz" not in text and "mine" not in text


def test_classify_plain_exceptions():
    assert isinstance(classify(TimeoutError("slow"), model="m", attempts=1), Timeout)
    assert isinstance(classify(ValueError("Expecting value: line 1"), model="m", attempts=1), BadResponse)
    error = classify(RuntimeError("boom sk-live-SECRET12345"), model="m", attempts=1)
    assert isinstance(error, ProviderError) and not error.retryable and "SECRET" not in str(error)


# -- authentication and connection failures: reported at once, naming the model and endpoint ------


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("path", ["sync", "async"])
def test_rejected_credentials_fail_at_once(gateway, server, status, path):
    server.script(*[Fault.error(status, f"Incorrect API key provided: {OPTION_SECRET}")] * 3, "never reached")
    bound = bind(gateway, server, api_key=OPTION_SECRET, num_retries=4)
    with pytest.raises(AuthenticationFailed) as info:
        if path == "sync":
            bound.complete(ask())
        else:
            asyncio.run(bound.acomplete(ask()))
    error = info.value
    assert server.request_count == 1 and error.attempts == 1 and gateway.stats.retries == 0
    assert error.status_code == status and not error.retryable
    assert MODEL in str(error) and server.api_base in str(error) and error.api_base == server.api_base
    assert "SECRET" not in str(error) + repr(error.args)


def test_a_missing_key_fails_at_once_naming_the_model(gateway, server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    bound = gateway.model(MODEL, {"api_base": server.api_base, "num_retries": 4})
    with pytest.raises(AuthenticationFailed) as info:
        bound.complete(ask())
    assert info.value.attempts == 1 and gateway.stats.retries == 0 and server.request_count == 0
    assert MODEL in str(info.value) and server.api_base in str(info.value)


@pytest.mark.parametrize("path", ["sync", "async"])
def test_a_closed_port_fails_at_once_naming_the_endpoint(gateway, litellm, path):
    api_base = f"http://127.0.0.1:{closed_port()}/v1"
    bound = gateway.model(MODEL, {"api_base": api_base, "api_key": OPTION_SECRET, "num_retries": 4})
    with pytest.raises(ConnectionFailed) as info:
        if path == "sync":
            bound.complete(ask())
        else:
            asyncio.run(bound.acomplete(ask()))
    error = info.value
    assert error.attempts == 1 and gateway.stats.requests == 1 and gateway.stats.retries == 0
    assert MODEL in str(error) and api_base in str(error) and "connection refused" in str(error)
    assert "SECRET" not in str(error)


def test_failures_of_the_model_are_summarizer_failures_to_a_replay(gateway, server):
    """`LLMError` is not a `SummarizerError`; the compaction layer turns it into one (and the breaker counts it)."""
    assert not issubclass(LLMError, SummarizerError) and issubclass(LLMError, WorkbenchError)
    server.script(Fault.error(401, "no"))
    env = CompactionEnv(summarizer=bind(gateway, server))
    with pytest.raises(SummarizerError, match="AuthenticationFailed") as info:
        env.summarize(ask())
    assert isinstance(info.value.__cause__, AuthenticationFailed)


@pytest.mark.parametrize(
    "exception, expected",
    [
        (ConnectionRefusedError(111, "Connection refused"), ConnectionFailed),
        (socket.gaierror(-2, "Name or service not known"), ConnectionFailed),
        (ConnectionResetError(104, "reset by peer"), ProviderError),
        (TimeoutError("slow"), Timeout),
        (RuntimeError("Missing credentials. Please pass an `api_key`"), AuthenticationFailed),
    ],
    ids=["refused", "unknown-host", "reset", "timeout", "missing-key"],
)
def test_classify_table(exception, expected):
    error = classify(exception, model="m", attempts=1, api_base="http://h:1/v1")
    assert type(error) is expected
    assert error.retryable == (expected in (ProviderError, Timeout))
    assert str(error).startswith("m at http://h:1/v1: ")  # two deployments of one model fail apart


def test_a_provider_error_names_the_endpoint_it_came_from(gateway, server):
    server.script(*[Fault.error(500, "overloaded")] * 8)
    with pytest.raises(ProviderError, match=f"^{MODEL} at {server.api_base}: provider error \\(HTTP 500\\)"):
        bind(gateway, server, num_retries=0).complete(ask())


def test_a_rejected_key_opens_a_replays_breaker_after_one_request_per_compaction(gateway, server):
    from builders import conversation

    from workbench.replay import replay

    server.responder = lambda body: Fault.error(401, "Incorrect API key provided")
    result = replay(
        conversation(30, result_chars=1500),
        {
            "trigger": {"kind": "utilization", "ratio": 0.5},
            "strategy": {"kind": "summarize_split"},
            "summarizer": MODEL,
            "summarizer_options": {"api_base": server.api_base, "api_key": "sk-x"},
            "context_limit": 12_000,
            "max_output": 1_000,
            "on_failure": "fallback",
            "max_consecutive_failures": 2,
        },
        gateway=gateway,
    )
    assert result.termination == "completed" and len(result.compactions) > 2
    assert all(event.fell_back for event in result.compactions)
    assert "AuthenticationFailed" in (result.compactions[0].error or "")
    assert result.compactions[-1].breaker_open
    assert server.request_count == 2  # one request per failed compaction, none once the breaker is open
