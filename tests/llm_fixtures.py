"""The gateway tests' fixtures (`pytest_plugins = ["llm_fixtures"]`): litellm, server, gateway."""

from __future__ import annotations

import asyncio

import pytest
from llm_support import MODEL

from workbench.llm import Gateway, LLMError, MemoryCache, load_litellm
from workbench.testing import FakeOpenAI, Fault


@pytest.fixture(scope="session")
def litellm():
    """Import litellm once and pay its first-call and first-error costs outside the tests."""
    module = load_litellm()
    with FakeOpenAI() as server:
        gateway = Gateway(num_retries=0)
        bound = gateway.model(MODEL, {"api_base": server.api_base, "api_key": "sk-dummy"})
        bound.complete([{"role": "user", "content": "warm-up"}])
        asyncio.run(bound.acomplete([{"role": "user", "content": "warm-up async"}]))
        server.script(Fault.rate_limit(0), Fault.error(500))
        for repeat in range(2):
            with pytest.raises(LLMError):
                bound.complete([{"role": "user", "content": "warm-up error"}], repeat=repeat)
    return module


@pytest.fixture
def server(litellm):
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def gateway():
    with Gateway(MemoryCache(), backoff_base=0.01, backoff_max=0.05, num_retries=2, timeout=5, seed=1) as gw:
        yield gw
