"""Helpers shared by the gateway's tests (tests/test_llm_*.py); the fixtures are in llm_fixtures.py.

Every call goes litellm -> openai client -> 127.0.0.1 -> `workbench.testing.FakeOpenAI`: no mocks.
"""

from __future__ import annotations

import socket

from workbench.llm import Gateway
from workbench.testing import FakeOpenAI

MODEL = "openai/fake-model"
KNOWN = "openai/gpt-4o-mini"  # priced in litellm's local map (checked in test_llm_pricing)
ENV_SECRET = "sk-test-SECRET-env-0123456789abcdef"
OPTION_SECRET = "sk-test-SECRET-option-9876543210fedcba"


def bind(gateway: Gateway, server: FakeOpenAI, model: str = MODEL, **options):
    return gateway.model(model, {"api_base": server.api_base, "api_key": "sk-dummy", **options})


def ask(text: str = "Summarize the session so far.") -> list[dict]:
    return [{"role": "system", "content": "You summarize."}, {"role": "user", "content": text}]


def closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
