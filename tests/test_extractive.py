"""The offline extractive summarizer (`workbench/extractive`): the pure function and the LiteLLM provider.

The provider tests make real `litellm.completion` calls (no mocks); litellm is imported once per
test process, and the import hook is checked in a fresh interpreter.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import workbench
from workbench.extractive import (
    DEFAULT_BUDGET_TOKENS,
    LiteLLMImportHook,
    extractive_summary,
    install_import_hook,
    read_input,
    register,
    request_tokens,
)
from workbench.session import Message
from workbench.strategies import prompts
from workbench.strategies.common import render_transcript

REPO = Path(__file__).resolve().parents[1]


def call(name: str, arguments: str, call_id: str = "c1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent. Always answer briefly. PROMPT-SECRET"},
    {"role": "user", "content": "The import in src/workbench/replay.py fails. We must keep Python 3.11 support "
                                "and never edit vendor/legacy_io.py."},
    {"role": "assistant", "content": "Running the tests first.",
     "tool_calls": [call("bash", '{"cmd": "pytest tests/test_replay.py -x"}')]},
    {"role": "tool", "tool_call_id": "c1", "content":
        "FAILED tests/test_replay.py::test_resume - ImportError: cannot import name 'ReplayState'\n"
        "Traceback (most recent call last):\n  File \"src/workbench/replay.py\", line 12, in <module>\n"
        "ImportError: cannot import name 'ReplayState'\n1 failed, 41 passed in 3.20s\nexit code 1"},
    {"role": "assistant", "content": "Decided to move ReplayState into workbench.state and re-export it; "
                                     "the cache_size default stays at 512 entries."},
    {"role": "user", "content": "OK. Then update CHANGELOG.md and set the timeout to 45 seconds."},
]


def sections(summary: str) -> dict[str, str]:
    out: dict[str, str] = {}
    current = None
    for line in summary.splitlines():
        if line.startswith("## "):
            current = line[3:]
            out[current] = ""
        elif current is not None:
            out[current] += line + "\n"
    return out


# ------------------------------------------------------------------------------------------------
# the pure function


def test_deterministic() -> None:
    assert extractive_summary(CONVERSATION) == extractive_summary(list(CONVERSATION))
    assert extractive_summary(CONVERSATION, budget_tokens=80) == extractive_summary(CONVERSATION, budget_tokens=80)


@pytest.mark.parametrize("section, needles", [
    ("Files", ["src/workbench/replay.py", "vendor/legacy_io.py", "tests/test_replay.py", "CHANGELOG.md"]),
    ("Identifiers", ["ReplayState", "workbench.state", "cache_size", "test_resume"]),
    ("Errors", ["ImportError: cannot import name 'ReplayState'", "exit code 1",
                "FAILED tests/test_replay.py::test_resume"]),
    ("Decisions & constraints", ["We must keep Python 3.11 support", "never edit vendor/legacy_io.py",
                                 "Decided to move ReplayState into workbench.state"]),
    ("Facts & numbers", ["1 failed, 41 passed in 3.20s", 'line 12']),
    ("Last request", ["> OK. Then update CHANGELOG.md and set the timeout to 45 seconds."]),
])
def test_keeps_what_matters(section: str, needles: list[str]) -> None:
    found = sections(extractive_summary(CONVERSATION))
    assert section in found, f"no {section!r} section"
    for needle in needles:
        assert needle in found[section], f"{needle!r} missing from {section}"


def test_ignores_system_instructions_and_deduplicates() -> None:
    summary = extractive_summary(CONVERSATION)
    assert "PROMPT-SECRET" not in summary and "Always answer briefly" not in summary
    assert summary.count("\n- ImportError: cannot import name 'ReplayState'") == 1  # twice in the input
    assert summary.count("- src/workbench/replay.py") == 1


@pytest.mark.parametrize("budget", [20, 40, 80, 150, 400, DEFAULT_BUDGET_TOKENS])
def test_respects_budget(budget: int) -> None:
    big = [*CONVERSATION]
    for i in range(60):
        big.append({"role": "tool", "tool_call_id": f"x{i}",
                    "content": f"ValueError: row {i} of data/part_{i}.csv has 17 columns, expected 16"})
        big.append({"role": "assistant", "content": f"We should skip row {i} in loader_{i} and always log it."})
    big.append({"role": "user", "content": "Summarize what failed."})
    summary = extractive_summary(big, budget_tokens=budget)
    assert len(summary) // 4 <= budget
    if budget >= 80:
        assert "> Summarize what failed." in summary  # the last request survives a tight budget
    if budget >= 400:
        assert "ValueError: row 59 of data/part_59.csv" in summary  # the newest items win


def test_reads_strategy_requests_and_carries_existing_summary_forward() -> None:
    earlier = extractive_summary(CONVERSATION)
    new = [Message(role="assistant", content="Moved ReplayState; now editing docs/guide.md"),
           Message(role="user", content="Finally, bump the version to 0.9.1")]
    request = prompts.build_request(prompts.PROGRESSIVE_PROMPT, render_transcript(new), earlier)
    summary = extractive_summary(request)
    assert "maintain a running summary" not in summary  # instructions are not material
    for needle in ("src/workbench/replay.py", "ImportError", "We must keep Python 3.11", "docs/guide.md",
                   "0.9.1"):
        assert needle in summary
    assert sections(summary)["Last request"].strip() == "> Finally, bump the version to 0.9.1"


def test_last_request_falls_back_to_the_existing_summary() -> None:
    earlier = extractive_summary(CONVERSATION)
    request = prompts.build_request(prompts.SPLIT_PROMPT,
                                    render_transcript([Message(role="assistant", content="Working on it.")]), earlier)
    assert "> OK. Then update CHANGELOG.md" in extractive_summary(request)


def test_placeholder_prompt_and_transcript_parsing() -> None:
    transcript = render_transcript([
        Message(role="user", content="Use tabs in Makefile"),
        Message(role="assistant", content=None, tool_calls=[{"id": "a", "function": {
            "name": "write_file", "arguments": '{"path": "build/rules.mk"}'}}]),
        Message(role="tool", content="ok", tool_call_id="a", name="write_file"),
    ])
    request = prompts.build_request("Summarize:\n{transcript}\nDone.", transcript)
    existing, blocks = read_input(request)
    assert existing == [] and [role for role, _ in blocks] == ["user", "assistant", "tool"]
    summary = extractive_summary(request)
    assert "build/rules.mk" in summary and "Makefile" in summary and "Summarize:" not in summary


@pytest.mark.parametrize("messages, expected", [
    ([], "No conversation content to summarize."),
    ([{"role": "user", "content": "hello there"}], "## Last request\n> hello there"),
    ([{"role": "assistant", "content": "just chatting"}], "## Notes\n- just chatting"),
    ([{"role": "user", "content": [{"type": "text", "text": "see the chart"},
                                   {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}],
     "## Last request\n> see the chart"),
])
def test_edge_inputs(messages: list[dict[str, Any]], expected: str) -> None:
    assert extractive_summary(messages) == expected


def test_request_tokens_heuristic() -> None:
    assert request_tokens([{"role": "user", "content": "hello world"}]) == 2 + 4
    assert request_tokens([{"role": "user", "content": ""}, {"role": "user", "content": "hi"}]) == 4 + 5


# ------------------------------------------------------------------------------------------------
# the LiteLLM provider: real litellm calls


@pytest.fixture(scope="module")
def litellm_module():
    assert os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP") == "True"  # set by importing workbench
    install_import_hook()
    import litellm

    register(litellm)
    return litellm


def test_litellm_completion(litellm_module) -> None:
    response = litellm_module.completion(model="workbench/extractive", messages=CONVERSATION)
    text = response.choices[0].message.content
    assert text == extractive_summary(CONVERSATION)
    assert response.choices[0].finish_reason == "stop"
    assert response.usage.prompt_tokens == request_tokens(CONVERSATION)
    assert response.usage.completion_tokens == len(text) // 4
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens


def test_litellm_max_tokens_is_the_budget(litellm_module) -> None:
    response = litellm_module.completion(model="workbench/extractive", messages=CONVERSATION, max_tokens=60)
    assert response.choices[0].message.content == extractive_summary(CONVERSATION, budget_tokens=60)
    assert response.usage.completion_tokens <= 60


def test_litellm_acompletion(litellm_module) -> None:
    response = asyncio.run(litellm_module.acompletion(model="workbench/extractive", messages=CONVERSATION))
    assert response.choices[0].message.content == extractive_summary(CONVERSATION)
    assert response.usage.prompt_tokens > 0


def test_register_is_idempotent(litellm_module) -> None:
    first = register(litellm_module)
    install_import_hook()
    assert register(litellm_module) is first
    entries = [e for e in litellm_module.custom_provider_map if e["provider"] == "workbench"]
    assert len(entries) == 1 and entries[0]["custom_handler"] is first
    assert "workbench" in litellm_module._custom_providers
    assert sum(isinstance(f, LiteLLMImportHook) for f in sys.meta_path) <= 1  # never installed twice


def test_unknown_workbench_model_is_an_error(litellm_module) -> None:
    with pytest.raises(Exception, match="serves only workbench/extractive"):
        litellm_module.completion(model="workbench/abstractive", messages=CONVERSATION)


def test_import_hook_registers_on_import_in_a_fresh_process() -> None:
    hooked_by_package = "install_import_hook" in Path(workbench.__file__).read_text()
    script = "\n".join([
        "import sys",
        "import workbench",
        *([] if hooked_by_package else
          ["from workbench.extractive import install_import_hook", "install_import_hook()"]),
        "assert 'litellm' not in sys.modules, 'litellm was imported eagerly'",
        "import litellm",
        "r = litellm.completion(model='workbench/extractive', messages=["
        "{'role': 'user', 'content': 'Please rename parse_args in cli/main.py'}])",
        "print(r.choices[0].message.content)",
        "print('USAGE', r.usage.prompt_tokens, r.usage.completion_tokens)",
    ])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cli/main.py" in done.stdout and "> Please rename parse_args in cli/main.py" in done.stdout
    prompt_tokens = len("Please rename parse_args in cli/main.py") // 4 + 4
    assert f"USAGE {prompt_tokens} " in done.stdout
