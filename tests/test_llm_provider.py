"""The offline provider `workbench/extractive` (`workbench.llm.provider`): real `litellm.completion` calls.

The summary itself is tested in tests/test_extractive.py; here, its registration with LiteLLM's
custom-provider mechanism, made when the gateway first loads LiteLLM (never on `import workbench`).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from workbench.extractive import extractive_summary, request_tokens
from workbench.llm.provider import register

pytestmark = pytest.mark.slow  # fresh interpreters loading LiteLLM


pytest_plugins = ["llm_fixtures"]  # the gateway fixtures: litellm, server, gateway

REPO = Path(__file__).resolve().parents[1]

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "The import in src/workbench/replay.py fails; keep Python 3.11 support."},
    {"role": "assistant", "content": "Decided to move ReplayState into workbench.state; cache_size stays 512."},
    {"role": "user", "content": "Then update CHANGELOG.md and set the timeout to 45 seconds."},
]


def test_litellm_completion(litellm) -> None:
    response = litellm.completion(model="workbench/extractive", messages=CONVERSATION)
    text = response.choices[0].message.content
    assert text == extractive_summary(CONVERSATION)
    assert response.choices[0].finish_reason == "stop"
    assert response.usage.prompt_tokens == request_tokens(CONVERSATION)
    assert response.usage.completion_tokens == len(text) // 4
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens


def test_litellm_max_tokens_is_the_budget(litellm) -> None:
    response = litellm.completion(model="workbench/extractive", messages=CONVERSATION, max_tokens=30)
    assert response.choices[0].message.content == extractive_summary(CONVERSATION, budget_tokens=30)
    assert response.usage.completion_tokens <= 30


def test_litellm_acompletion(litellm) -> None:
    response = asyncio.run(litellm.acompletion(model="workbench/extractive", messages=CONVERSATION))
    assert response.choices[0].message.content == extractive_summary(CONVERSATION)
    assert response.usage.prompt_tokens > 0


def test_register_is_idempotent(litellm) -> None:
    first = register(litellm)
    assert register(litellm) is first
    entries = [e for e in litellm.custom_provider_map if e["provider"] == "workbench"]
    assert len(entries) == 1 and entries[0]["custom_handler"] is first
    assert "workbench" in litellm._custom_providers


def test_unknown_workbench_model_is_an_error(litellm) -> None:
    with pytest.raises(Exception, match="serves only workbench/extractive"):
        litellm.completion(model="workbench/abstractive", messages=CONVERSATION)


def test_offline_extractive_model_costs_nothing(gateway, litellm):
    bound = gateway.model("workbench/extractive")
    result = bound.complete([{"role": "user", "content": "We edited src/app.py after test_login failed."}])
    assert result.cost_usd == 0.0 and result.text and not result.cache_hit
    assert bound.complete([{"role": "user", "content": "We edited src/app.py after test_login failed."}]).cache_hit
    assert asyncio.run(bound.acomplete([{"role": "user", "content": "async src/x.py"}])).cost_usd == 0.0
    assert not gateway.unknown_cost_models


def run_fresh(script: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LITELLM_", "TIKTOKEN_"))}
    environ.update(PYTHONPATH=str(REPO), **env)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environ, cwd=REPO, timeout=180
    )


@pytest.fixture(scope="module")
def first_load() -> subprocess.CompletedProcess:
    """A fresh interpreter (DuckDB in use, as in a run) whose gateway loads LiteLLM for its first model call."""
    return run_fresh(
        "\n".join(
            [
                "import gc, sys, duckdb",
                "import workbench",
                "from workbench.llm import Gateway",
                "duckdb.connect().execute('SELECT 1').fetchall()",
                "assert 'litellm' not in sys.modules, 'litellm was imported eagerly'",
                "m = Gateway().model('workbench/extractive')",
                "m.in_process = False  # through LiteLLM, as any model (in process it needs no LiteLLM)",
                "r = m.complete([{'role': 'user', 'content': 'Please rename parse_args in cli/main.py'}])",
                "print(r.text)",
                "print('USAGE', r.input_tokens, r.output_tokens, r.cost_usd)",
                "import litellm",
                "print('REGISTERED', [e['provider'] for e in litellm.custom_provider_map])",
                "print('FROZEN', gc.get_freeze_count() > 100_000,"
                " any(o is litellm.model_cost for o in gc.get_objects()))",
            ]
        )
    )


def test_the_gateway_registers_the_provider_when_it_first_loads_litellm(first_load) -> None:
    done = first_load
    assert done.returncode == 0, done.stderr[-2000:]
    assert "> Please rename parse_args in cli/main.py" in done.stdout
    prompt_tokens = len("Please rename parse_args in cli/main.py") // 4 + 4
    assert f"USAGE {prompt_tokens} " in done.stdout and done.stdout.count(" 0.0\n") == 1
    assert "REGISTERED ['workbench']" in done.stdout


def test_importing_litellm_alone_registers_nothing() -> None:
    done = run_fresh("import workbench, litellm; print('MAP', litellm.custom_provider_map)")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "MAP []" in done.stdout


def test_what_the_litellm_import_made_is_frozen_and_the_exit_stays_quiet(first_load) -> None:
    """A full garbage collection would walk LiteLLM's ~300,000 objects again (~170 ms with every
    thread stopped): loading freezes them. At exit they are unfrozen, or DuckDB's bindings, imported
    before, report their objects as leaked on stderr."""
    done = first_load
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FROZEN True False" in done.stdout
    assert "leaked" not in done.stderr, done.stderr[-2000:]
