"""Tests for workbench.importers: one hand-made fixture per format (built here, written to
tmp_path), error handling (only FormatError escapes, for any bytes), folder walking, and every
recorded file under ../shared/sessions (skipped when that folder is absent)."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builders import conversation
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench import describe
from workbench.errors import FormatError
from workbench.importers import (
    FORMATS,
    FileResult,
    UnknownFormatError,
    candidate_files,
    candidates,
    detect,
    format_name,
    ignored_files,
    iter_load,
    iter_sessions,
    load,
)
from workbench.importers._common import call_usage, has_key, has_value
from workbench.session import (
    NO_RESULT_TEXT,
    ROLES,
    Probe,
    RecordedCompaction,
    Session,
    recorded_input_tokens,
    tool_pairing_problems,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "sessions"


# --------------------------------------------------------------------------- helpers


def write_json(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1), encoding="utf-8")
    return path


def write_jsonl(path: Path, values: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(v) + "\n" for v in values), encoding="utf-8")
    return path


def check_session(session: Session, fmt: str) -> None:
    """The invariants every imported session keeps."""
    assert session.format == fmt
    assert session.messages
    assert all(m.role in ROLES for m in session.messages)
    assert tool_pairing_problems(session.messages) == []
    for index, message in enumerate(session.messages):
        if message.role == "assistant" and message.tool_calls:
            ids = [c.id for c in message.tool_calls]
            follow = [m.tool_call_id for m in session.messages[index + 1 : index + 1 + len(ids)]]
            assert follow == ids, "each call's result comes right after it, in call order"
            for call in message.tool_calls:
                json.loads(call.arguments)


def usage(uncached: int, cache_read: int, cache_write: int, output: int) -> dict[str, int]:
    """A normalised per-call usage record."""
    return {
        "input_tokens": uncached,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
        "output_tokens": output,
    }


def roles(session: Session) -> list[str]:
    return [m.role for m in session.messages]


# --------------------------------------------------------------------------- fixtures


def openai_fixture(tmp: Path) -> Path:
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Fix the bug."},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.py"}'}},
                {"id": "c2", "type": "function", "function": {"name": "read", "arguments": {"path": "b.py"}}},
            ],
            "usage": {"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 100}},
        },
        {"role": "tool", "tool_call_id": "c2", "content": "B"},
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "tool", "tool_call_id": "ghost", "content": "nobody asked"},
        {
            "role": "assistant",
            "content": "I will edit",
            "finish_reason": "length",
            "usage": {"prompt_tokens": 200, "completion_tokens": 4096},
        },
        {"role": "user", "content": "go on"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "edit", "arguments": "{}"}}],
        },
    ]
    return write_json(tmp / "chat.json", messages)


def anthropic_fixture(tmp: Path) -> Path:
    request = {
        "model": "claude-sonnet-4",
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
        "tools": [{"name": "bash", "description": "run", "input_schema": {"type": "object"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in the image?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Let me look.", "signature": "sig"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "tu1", "name": "bash", "input": {"cmd": "ls"}},
                    {"type": "tool_use", "id": "tu2", "name": "bash", "input": {"cmd": "pwd"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "a.txt"}]},
                    {"type": "tool_result", "tool_use_id": "tu2", "content": "denied", "is_error": True},
                    {"type": "text", "text": "Continue."},
                ],
            },
        ],
        "response": {
            "id": "msg_1",
            "role": "assistant",
            "model": "claude-sonnet-4",
            "stop_reason": "max_tokens",
            "content": [{"type": "text", "text": "A cat"}],
            "usage": {"input_tokens": 50, "output_tokens": 8, "cache_read_input_tokens": 40},
        },
    }
    return write_json(tmp / "request.json", request)


def _cc(kind: str, uuid: str, parent: str | None, **fields: Any) -> dict[str, Any]:
    line = {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": "s1",
        "isSidechain": False,
        "timestamp": f"2025-01-01T00:00:{len(uuid):02d}Z",
        "cwd": "/repo",
        "version": "2.0.0",
    }
    line.update(fields)
    return line


def _assistant(
    uuid: str, parent: str, msg_id: str, blocks: list[Any], output: int = 5, **fields: Any
) -> dict[str, Any]:
    return _cc(
        "assistant",
        uuid,
        parent,
        message={
            "id": msg_id,
            "role": "assistant",
            "model": "claude-opus",
            "content": blocks,
            "stop_reason": None,
            "usage": {
                "input_tokens": 10,
                "output_tokens": output,
                "cache_read_input_tokens": 900,
                "cache_creation_input_tokens": 7,
            },
        },
        **fields,
    )


def _user(uuid: str, parent: str | None, content: Any, **fields: Any) -> dict[str, Any]:
    return _cc("user", uuid, parent, message={"role": "user", "content": content}, **fields)


def _result(call_id: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": text, **extra}


def claude_code_fixture(tmp: Path) -> Path:
    lines = [
        {"type": "summary", "summary": "Fixing the parser", "leafUuid": "x"},
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}},
        _user("u1", None, "Fix the parser please"),
        _assistant("a1", "u1", "msg_A", [{"type": "thinking", "thinking": "hmm", "signature": "s"}]),
        _assistant("a2", "a1", "msg_A", [{"type": "text", "text": "Looking."}]),
        _assistant("a3", "a2", "msg_A", [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": 1}}]),
        _cc("progress", "p1", "a3", data={"type": "hook_progress"}),
        _user("r1", "a3", [_result("t1", "file one")]),
        _assistant(
            "a4", "r1", "msg_A", [{"type": "tool_use", "id": "t2", "name": "Read", "input": {"p": 2}}], output=50
        ),
        _user("r2", "a4", [_result("t2", "oops", is_error=True)]),
        _assistant("a5", "r2", "msg_B", [{"type": "text", "text": "Done reading."}]),
        # an inline sidechain (older Claude Code): its own session
        _user("s1", None, "Sub task: count files", isSidechain=True),
        _assistant(
            "s2", "s1", "msg_S", [{"type": "tool_use", "id": "st1", "name": "Bash", "input": {}}], isSidechain=True
        ),
        _user("s3", "s2", [_result("st1", "42")], isSidechain=True),
        _assistant("s4", "s3", "msg_S2", [{"type": "text", "text": "42 files"}], isSidechain=True),
        {"type": "queue-operation", "operation": "enqueue", "sessionId": "s1"},
        _cc(
            "system",
            "b1",
            None,
            subtype="compact_boundary",
            logicalParentUuid="a5",
            compactMetadata={"trigger": "auto", "preTokens": 155000},
        ),
        _user(
            "c1",
            "b1",
            "This session is being continued. Summary: parser fixed.",
            isCompactSummary=True,
            isVisibleInTranscriptOnly=True,
        ),
        _user("u2", "c1", "now run the tests"),
        _assistant("a6", "u2", "msg_C", [{"type": "tool_use", "id": "t3", "name": "Bash", "input": {"c": "pytest"}}]),
        _user("u3", "a6", [{"type": "text", "text": "[Request interrupted by user]"}]),
        _user("r9", "u3", [_result("nope", "stray output")]),
    ]
    return write_jsonl(tmp / "proj" / "0000-session.jsonl", lines)


def codex_fixture(tmp: Path) -> Path:
    def line(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": "2025-10-01T10:00:00Z", "type": kind, "payload": payload}

    lines = [
        line(
            "session_meta",
            {"id": "sess-1", "cwd": "/w", "cli_version": "0.50.0", "base_instructions": {"text": "You are Codex."}},
        ),
        line("turn_context", {"model": "gpt-5-codex", "cwd": "/w"}),
        line(
            "response_item",
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        ),
        line("event_msg", {"type": "user_message", "message": "list files"}),
        line("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}]}),
        line(
            "response_item",
            {"type": "function_call", "name": "shell", "arguments": '{"command": ["ls"]}', "call_id": "f1"},
        ),
        line(
            "response_item",
            {"type": "function_call", "name": "shell", "arguments": '{"command": ["pwd"]}', "call_id": "f2"},
        ),
        line("response_item", {"type": "function_call_output", "call_id": "f2", "output": "/w"}),
        line("response_item", {"type": "function_call_output", "call_id": "f1", "output": {"content": "a b"}}),
        line(
            "event_msg",
            {
                "type": "token_count",
                "info": {
                    "last_token_usage": {"input_tokens": 900, "cached_input_tokens": 800, "output_tokens": 40},
                    "total_token_usage": {"input_tokens": 900, "output_tokens": 40},
                    "model_context_window": 272000,
                },
            },
        ),
        line(
            "response_item",
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Two files."}]},
        ),
        line("compacted", {"message": "Summary: listed files.", "replacement_history": [{}, {}]}),
        line(
            "response_item",
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "policy"}]},
        ),
        line(
            "response_item",
            {
                "type": "custom_tool_call",
                "name": "apply_patch",
                "input": "*** Begin Patch",
                "call_id": "x1",
                "status": "completed",
            },
        ),
    ]
    return write_jsonl(tmp / "rollout-2025-10-01.jsonl", lines)


def swe_agent_fixture(tmp: Path) -> Path:
    call = {"id": "call_1", "type": "function", "function": {"name": "open", "arguments": '{"path": "x.py"}'}}
    data = {
        "environment": "swe_main",
        "trajectory": [{"action": "open x.py", "observation": "...", "response": "", "thought": "", "state": "{}"}],
        "history": [
            {"role": "system", "content": "SETTING", "agent": "main", "message_type": "system_prompt"},
            {"role": "user", "content": "demo", "agent": "main", "is_demo": True},
            {"role": "user", "content": "Issue: crash", "agent": "main", "message_type": "observation"},
            {
                "role": "assistant",
                "content": "Open it",
                "thought": "Open it",
                "action": "open x.py",
                "agent": "main",
                "tool_calls": [call],
                "message_type": "action",
            },
            {
                "role": "tool",
                "content": "[File: x.py]",
                "agent": "main",
                "message_type": "observation",
                "tool_call_ids": ["call_1"],
            },
            {"role": "assistant", "content": "```\nsubmit\n```", "action": "submit", "agent": "main"},
        ],
        "info": {
            "exit_status": "submitted",
            "submission": "diff",
            "model_stats": {"instance_cost": 0.5, "tokens_sent": 1000, "tokens_received": 50, "api_calls": 2},
        },
        "replay_config": json.dumps({"agent": {"model": {"name": "gpt-4o"}}}),
    }
    return write_json(tmp / "inst-1.traj", data)


def mini_swe_agent_fixture(tmp: Path) -> Path:
    data = {
        "info": {
            "exit_status": "Submitted",
            "submission": "patch",
            "mini_version": "1.9.0",
            "model_stats": {"instance_cost": 0.1, "api_calls": 2},
            "config": {"model": {"model_name": "claude-sonnet-4"}},
        },
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Please solve this issue"},
            {
                "role": "assistant",
                "content": "THOUGHT: look\n```bash\nls\n```",
                "extra": {
                    "response": {
                        "model": "claude-sonnet-4",
                        "usage": {"prompt_tokens": 10, "completion_tokens": 3},
                        "choices": [{"finish_reason": "stop"}],
                    }
                },
            },
            {"role": "user", "content": "<returncode>0</returncode>\n<output>a</output>"},
            {
                "role": "user",
                "content": "Please always provide EXACTLY ONE action",
                "extra": {"interrupt_type": "FormatError"},
            },
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "k1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat a"}'}}
                ],
                "extra": {
                    "response": {
                        "usage": {"prompt_tokens": 20, "completion_tokens": 4},
                        "choices": [{"finish_reason": "length"}],
                    }
                },
            },
            {"role": "tool", "tool_call_id": "k1", "content": "<returncode>0</returncode>"},
            {"role": "exit", "content": "patch", "extra": {"exit_status": "Submitted", "submission": "patch"}},
        ],
        "trajectory_format": "mini-swe-agent-1.1",
        "instance_id": "repo__1",
    }
    return write_json(tmp / "repo__1.traj.json", data)


def _tcm(
    call_id: str,
    name: str,
    response_id: str,
    calls: list[tuple[str, str]],
    text: str | None = None,
) -> dict[str, Any]:
    return {
        "function_name": name,
        "tool_call_id": call_id,
        "model_response": {
            "id": response_id,
            "model": "claude-3-5-sonnet",
            "choices": [
                {
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": text,
                        "tool_calls": [
                            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                            for cid, args in calls
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20},
        },
    }


def openhands_v0_events() -> list[dict[str, Any]]:
    both = [("t1", '{"command": "ls"}'), ("t2", '{"command": "pwd"}')]
    return [
        {"id": 0, "source": "agent", "action": "system", "args": {"content": "You are OpenHands."}},
        {"id": 1, "source": "user", "action": "message", "args": {"content": "Make a game", "image_urls": None}},
        {"id": 2, "source": "user", "action": "recall", "args": {"query": "Make a game"}},
        {"id": 3, "source": "environment", "observation": "recall", "cause": 2, "content": "Added context"},
        {
            "id": 4,
            "source": "agent",
            "action": "run",
            "args": {"command": "ls", "thought": "Look around"},
            "tool_call_metadata": _tcm("t1", "execute_bash", "r1", both, "Look around"),
        },
        {
            "id": 5,
            "source": "agent",
            "action": "run",
            "args": {"command": "pwd", "thought": ""},
            "tool_call_metadata": _tcm("t2", "execute_bash", "r1", both, "Look around"),
        },
        {
            "id": 6,
            "source": "agent",
            "observation": "run",
            "cause": 5,
            "content": "/workspace",
            "tool_call_metadata": _tcm("t2", "execute_bash", "r1", both),
        },
        {"id": 7, "source": "agent", "observation": "run", "cause": 4, "content": "game.py"},
        {"id": 8, "source": "environment", "observation": "agent_state_changed", "content": ""},
        {
            "id": 9,
            "source": "agent",
            "action": "finish",
            "args": {"thought": "Done", "outputs": {}},
            "tool_call_metadata": _tcm("t3", "finish", "r2", [("t3", "{}")], "Done"),
        },
    ]


def openhands_fixture(tmp: Path) -> Path:
    return write_json(tmp / "trajs" / "basic.json", openhands_v0_events())


def openhands_eval_fixture(tmp: Path) -> Path:
    base = {
        "instruction": "Fix issue 1",
        "metadata": {"llm_config": {"model": "gpt-4o"}, "agent_class": "CodeActAgent"},
        "metrics": {"accumulated_token_usage": {"prompt_tokens": 200, "completion_tokens": 40}},
    }
    one = {**base, "instance_id": "i-1", "history": openhands_v0_events()}
    two = {**base, "instance_id": "i-2", "history": openhands_v0_events()[3:]}
    return write_jsonl(tmp / "output.jsonl", [one, two])


RESOLVER_TASK = "Please fix the following issue for the repository in /workspace.\n# Problem Statement\nAdd a license"


def resolver_history() -> list[dict[str, Any]]:
    """The flat events early resolver runs wrote: fields inline, no `source`, `id` or `args`."""
    return [
        {
            "content": RESOLVER_TASK,
            "images_urls": None,
            "wait_for_response": False,
            "action": "message",
            "action_risk": None,
        },
        {
            "command": "touch LICENSE",
            "thought": "Create the file first.",
            "keep_prompt": True,
            "action": "run",
            "is_confirmed": "confirmed",
            "action_risk": None,
        },
        {
            "content": "\r\nroot@box:/workspace # ",
            "command_id": -1,
            "command": "touch LICENSE",
            "exit_code": 0,
            "observation": "run",
        },
        {
            "code": "open('LICENSE', 'w').write('MIT')",
            "thought": "Now the text.",
            "action": "run_ipython",
            "is_confirmed": "confirmed",
            "kernel_init_code": "from agentskills import *",
        },
        {
            "content": "[Jupyter current working directory: /workspace]",
            "code": "open('LICENSE', 'w')",
            "observation": "run_ipython",
        },
        {
            "content": "Which year should the copyright name?",
            "images_urls": None,
            "wait_for_response": True,
            "action": "message",
        },
        {"content": "2024, please.", "images_urls": None, "wait_for_response": False, "action": "message"},
        {"outputs": {}, "thought": "The license is added.", "action": "finish"},
    ]


def openhands_resolver_fixture(tmp: Path) -> Path:
    """Resolver output (`ResolverOutput`): one run per line; the second holds modern events as
    `[action, observation]` pairs, as older eval outputs wrote them."""
    base = {
        "issue_type": "issue",
        "instruction": RESOLVER_TASK,
        "base_commit": "",
        "git_patch": "diff --git a b",
        "metrics": {"accumulated_cost": 0.07, "costs": [0.01, 0.02]},
        "comment_success": None,
        "result_explanation": "Added.",
        "error": None,
    }
    one = {
        "issue": {"owner": "acme", "repo": "viewer", "number": 5, "title": "Add MIT license", "body": "b"},
        **base,
        "history": resolver_history(),
        "success": True,
    }
    events = openhands_v0_events()
    pairs = [[events[1], {"id": -1, "source": "agent", "observation": "null", "content": ""}], [events[4], events[7]]]
    two = {
        "issue": {"owner": "acme", "repo": "viewer", "number": 6, "title": "Dark mode", "body": "b"},
        **base,
        "history": pairs,
        "success": False,
    }
    return write_jsonl(tmp / "resolver" / "output.jsonl", [one, two])


def openhands_v1_fixture(tmp: Path) -> Path:
    events = [
        {
            "kind": "ConversationStateUpdateEvent",
            "id": "e0",
            "source": "environment",
            "key": "execution_status",
            "value": "running",
        },
        {
            "kind": "SystemPromptEvent",
            "id": "e1",
            "source": "agent",
            "system_prompt": {"type": "text", "text": "SYS"},
            "tools": [{"type": "function", "function": {"name": "terminal", "parameters": {}}}],
        },
        {
            "kind": "MessageEvent",
            "id": "e2",
            "source": "user",
            "llm_message": {"role": "user", "content": [{"type": "text", "text": "do it", "cache_prompt": False}]},
        },
        {
            "kind": "ActionEvent",
            "id": "a1",
            "source": "agent",
            "thought": [{"type": "text", "text": "Two at once"}],
            "reasoning_content": "deep",
            "tool_name": "terminal",
            "tool_call_id": "c1",
            "llm_response_id": "R1",
            "tool_call": {"id": "c1", "name": "terminal", "arguments": '{"command": "ls"}'},
            "action": {"kind": "TerminalAction", "command": "ls"},
        },
        {
            "kind": "ActionEvent",
            "id": "a2",
            "source": "agent",
            "thought": [],
            "tool_name": "terminal",
            "tool_call_id": "c2",
            "llm_response_id": "R1",
            "tool_call": {"id": "c2", "name": "terminal", "arguments": '{"command": "pwd"}'},
            "action": {"kind": "TerminalAction", "command": "pwd"},
        },
        {
            "kind": "ObservationEvent",
            "id": "o1",
            "source": "environment",
            "tool_name": "terminal",
            "tool_call_id": "c1",
            "action_id": "a1",
            "observation": {"kind": "TerminalObservation", "content": [{"type": "text", "text": "a b"}]},
        },
        {
            "kind": "ObservationEvent",
            "id": "o2",
            "source": "environment",
            "tool_name": "terminal",
            "tool_call_id": "c2",
            "action_id": "a2",
            "observation": {"kind": "ExecuteBashObservation", "output": "", "error": "boom"},
        },
        {
            "kind": "ObservationEvent",
            "id": "o3",
            "source": "environment",
            "tool_name": "terminal",
            "tool_call_id": "c9",
            "action_id": "missing",
            "observation": {"output": "orphan"},
        },
        {"kind": "CondensationSummaryEvent", "id": "s1", "source": "environment", "summary": "So far: ls, pwd."},
        {
            "kind": "MessageEvent",
            "id": "e3",
            "source": "agent",
            "llm_response_id": "R2",
            "llm_message": {"role": "assistant", "content": [{"type": "text", "text": "All done"}]},
        },
        {
            "kind": "ConversationStateUpdateEvent",
            "id": "e4",
            "source": "environment",
            "key": "stats",
            "value": {
                "usage_to_metrics": {
                    "default": {"accumulated_token_usage": {"prompt_tokens": 7, "completion_tokens": 3}}
                }
            },
        },
    ]
    return write_jsonl(tmp / "events.jsonl", events)


AIDER_LOG = """
# aider chat started at 2025-07-15 11:38:37

> Aider v0.85.1  
> Main model: gpt-4o with diff edit format  

#### add a comment  
#### to the top of main.py  

Please add `main.py` to the chat.

> Tokens: 3.2k sent, 21 received. Cost: $0.0082 message, $0.0082 session.  
> main.py  
> Add file to the chat? (Y)es/(N)o [Yes]: y  

Here is the edit:

> quoted text inside the reply
>>>>>>> REPLACE

> Tokens: 4.1k sent, 1.5k received.  
> Applied edit to main.py  

# aider chat started at 2025-07-16 09:00:00

> Aider v0.85.1  

# aider chat started at 2025-07-17 09:00:00

#### hello  

Hi!

> Tokens: 1k sent, 2 received.  
> a continuation line without the two spaces
#### first  

#### second  
"""


def aider_fixture(tmp: Path) -> Path:
    path = tmp / "repo" / ".aider.chat.history.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(AIDER_LOG, encoding="utf-8")
    return path


def exported_sessions() -> list[Session]:
    """Sessions carrying everything an export must keep: probes, importance, origins, usage,
    tool schemas and a recorded compaction."""
    recorded = usage(5, 90, 0, 7)
    messages = [m.replace(metadata={"usage": recorded}) if m.role == "assistant" else m for m in conversation(3)]
    messages[1] = messages[1].replace(importance=10.0)
    first = Session.from_messages(
        messages,
        dataset="exported",
        probes=[Probe("Which file fails?", "src/app.py", "recall", 1)],
        tools=({"type": "function", "function": {"name": "read_file"}},),
        metadata={"recorded_compactions": [RecordedCompaction(2, 4, "auto", 9000, "Summary so far.").to_dict()]},
    )
    second = Session.from_messages(conversation(1), dataset="exported")
    return [first, second]


def workbench_fixture(tmp: Path) -> Path:
    """A gzip'd export in the layout of the bundled samples."""
    lines = [
        {
            "id": s.id,
            "dataset": s.dataset,
            "messages": [m.to_openai(extras=True) for m in s.messages],
            "tools": [dict(t) for t in s.tools],
            "probes": [p.to_dict() for p in s.probes],
            "metadata": dict(s.metadata),
        }
        for s in exported_sessions()
    ]
    path = tmp / "export" / "exported.jsonl.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress("".join(json.dumps(line) + "\n" for line in lines).encode()))
    return path


def inspect_fixture(tmp: Path) -> Path:
    """An Inspect eval log (`.json`): one sample whose model events made its two assistant messages."""
    reply = {
        "id": "a1",
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "function": "ls", "arguments": {}}],
    }
    answer = {"id": "a2", "role": "assistant", "content": "done"}
    messages = [
        {"id": "u1", "role": "user", "content": "List the files."},
        reply,
        {"id": "t1", "role": "tool", "tool_call_id": "c1", "function": "ls", "content": "a.py"},
        answer,
    ]
    events = [
        {"event": "model", "model": "openai/gpt-4o", "tools": [], "output": {"choices": [{"message": m}], "usage": u}}
        for m, u in (
            (reply, {"input_tokens": 10, "output_tokens": 2}),
            (answer, {"input_tokens": 20, "output_tokens": 1}),
        )
    ]
    spec = {"run_id": "r", "task": "files", "task_id": "t", "model": "openai/gpt-4o"}
    sample = {"id": 1, "epoch": 1, "messages": messages, "events": events, "scores": {"match": {"value": "C"}}}
    return write_json(tmp / "log.json", {"version": 2, "status": "success", "eval": spec, "samples": [sample]})


FIXTURES: dict[str, Callable[[Path], Path]] = {
    "openai": openai_fixture,
    "anthropic": anthropic_fixture,
    "claude-code": claude_code_fixture,
    "codex": codex_fixture,
    "swe-agent": swe_agent_fixture,
    "mini-swe-agent": mini_swe_agent_fixture,
    "openhands": openhands_fixture,
    "aider": aider_fixture,
    "inspect-ai": inspect_fixture,
    "workbench": workbench_fixture,
}


# --------------------------------------------------------------------------- per-format tests


_U = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (usage(10, 900, 7, 5), (10, 900, 7, 5)),  # Anthropic / Claude Code: input excludes the cache kinds
        (
            {"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 100}},
            (20, 100, 0, 30),
        ),  # OpenAI chat: prompt includes cached reads
        (
            {"input_tokens": 900, "cached_input_tokens": 800, "output_tokens": 40, "reasoning_output_tokens": 9},
            (100, 800, 0, 40),
        ),  # Codex last_token_usage
        (
            {"input_tokens": 50, "input_tokens_details": {"cached_tokens": 30}, "output_tokens": 2},
            (20, 30, 0, 2),
        ),  # Responses API
        (
            {
                "model": "m",
                "prompt_tokens": 1000,
                "completion_tokens": 9,
                "cache_read_tokens": 600,
                "cache_write_tokens": 300,
                "response_id": "r1",
            },
            (100, 600, 300, 9),
        ),  # OpenHands TokenUsage
        ({"prompt_tokens": 5}, (5, 0, 0, 0)),
        ({"model": "m"}, None),
        ({}, None),
        ("12", None),
        (None, None),
    ],
)
def test_call_usage_normalises_every_vocabulary(raw: Any, expected: tuple[int, ...] | None) -> None:
    usage = call_usage(raw)
    assert usage == (dict(zip(_U, expected, strict=True)) if expected else None)
    if usage:
        message = Session.from_messages([{"role": "assistant", "content": "x", "metadata": {"usage": usage}}])
        assert recorded_input_tokens(message.messages[0]) == sum(expected[:3])


_OTHER_SHAPES: dict[str, Callable[[Path], Path]] = {
    **FIXTURES,
    "openhands-eval": openhands_eval_fixture,
    "openhands-v1": openhands_v1_fixture,
    "openhands-resolver": openhands_resolver_fixture,
}


@pytest.mark.parametrize("forced", FORMATS)
@pytest.mark.parametrize("shape", sorted(_OTHER_SHAPES))
def test_a_forced_format_never_imports_another_formats_file(tmp_path: Path, forced: str, shape: str) -> None:
    """`--format X` on a file written in another format fails with a FormatError naming the file
    (and the line for line-based files) instead of importing a mangled session."""
    if shape == forced or shape.startswith(forced + "-"):
        pytest.skip("the file is of the forced format")
    path = _OTHER_SHAPES[shape](tmp_path)
    with pytest.raises(FormatError) as info:
        load(path, format=forced)
    assert str(path) in str(info.value)
    assert info.value.__cause__ is None, f"{forced} crashed inside instead of rejecting: {info.value}"


def test_formats_tuple() -> None:
    assert FORMATS == (
        "openai",
        "anthropic",
        "claude-code",
        "codex",
        "swe-agent",
        "mini-swe-agent",
        "openhands",
        "aider",
        "inspect-ai",
        "workbench",
    )
    assert set(FIXTURES) == set(FORMATS)


@pytest.mark.parametrize("fmt", FORMATS)
def test_fixture_detects_and_loads(tmp_path: Path, fmt: str) -> None:
    path = FIXTURES[fmt](tmp_path)
    assert detect(path) == fmt
    sessions = load(path)
    assert sessions
    for session in sessions:
        check_session(session, fmt)
        assert session.dataset == ("exported" if fmt == "workbench" else fmt), "exports keep their datasets"
        assert session.metadata["source"] == path.name
    assert [s.id for s in load(path, format=fmt, dataset="mine")] == [s.id for s in sessions]
    assert {s.dataset for s in load(path, dataset="mine")} == {"mine"}


def test_openai_list(tmp_path: Path) -> None:
    (session,) = load(openai_fixture(tmp_path))
    assert roles(session) == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    assert session.messages[1].has_non_text_parts
    call_msg = session.messages[2]
    assert [c.id for c in call_msg.tool_calls] == ["c1", "c2"]
    assert json.loads(call_msg.tool_calls[1].arguments) == {"path": "b.py"}
    assert [session.messages[3].text, session.messages[4].text] == ["A", "B"], "results follow call order"
    assert call_msg.metadata["usage"] == usage(20, 100, 0, 30), "prompt_tokens include the cached reads"
    assert recorded_input_tokens(call_msg) == 120
    stray = session.messages[5]
    assert stray.role == "user" and stray.metadata["stray_tool_result"] and stray.text == "nobody asked"
    assert session.messages[6].metadata["finish_reason"] == "length"
    stub = session.messages[-1]
    assert stub.content == NO_RESULT_TEXT and stub.metadata == {"no_result_recorded": True}
    assert session.metadata["usage_totals"]["output_tokens"] == 4126


def test_openai_jsonl_layouts_and_litellm_log(tmp_path: Path) -> None:
    lines = [
        {
            "messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
        }
        for i in range(3)
    ]
    sessions = load(write_jsonl(tmp_path / "many.jsonl", lines))
    assert [s.messages[0].text for s in sessions] == ["q0", "q1", "q2"]
    assert [s.metadata["source_line"] for s in sessions] == [1, 2, 3]
    assert sessions[0].tools == ({"type": "function", "function": {"name": "f"}},)

    per_message = [
        {"role": "developer", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
    ]
    (single,) = load(write_jsonl(tmp_path / "msgs.jsonl", per_message))
    assert roles(single) == ["system", "user", "assistant"]

    log = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [],
        "kwargs": {"model": "m1"},
        "response": {
            "id": "r",
            "model": "m1",
            "choices": [{"finish_reason": "length", "message": {"role": "assistant", "content": "partial"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 9},
        },
    }
    (logged,) = load(write_json(tmp_path / "log.json", log))
    last = logged.messages[-1]
    assert last.role == "assistant" and last.text == "partial"
    assert last.metadata["finish_reason"] == "length" and last.metadata["usage"]["output_tokens"] == 9
    assert logged.metadata["model"] == "m1"


def test_openai_jsonl_streams_before_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "ok"}]}) + "\n\n{broken\n")
    stream = iter_sessions(path)
    first = next(stream)
    assert first.messages[0].text == "ok"
    with pytest.raises(FormatError) as info:
        next(stream)
    assert info.value.line == 3 and "s.jsonl:3" in str(info.value)


def test_anthropic_request(tmp_path: Path) -> None:
    (session,) = load(anthropic_fixture(tmp_path))
    assert roles(session) == ["system", "user", "assistant", "tool", "tool", "user", "assistant"]
    assert session.messages[0].text == "Be brief.\n\nUse tools."
    image = [p for p in session.messages[1].content if p["type"] == "image_url"][0]
    assert image["image_url"]["url"] == "data:image/jpeg;base64,QUJD"
    assistant = session.messages[2]
    assert assistant.text == "Checking." and assistant.metadata["thinking"] == "Let me look."
    assert [(c.id, json.loads(c.arguments)) for c in assistant.tool_calls] == [
        ("tu1", {"cmd": "ls"}),
        ("tu2", {"cmd": "pwd"}),
    ]
    assert session.messages[3].text == "a.txt" and session.messages[4].metadata == {"is_error": True}
    assert session.messages[5].text == "Continue."
    final = session.messages[6]
    assert final.metadata["finish_reason"] == "length"
    assert final.metadata["usage"] == usage(50, 40, 0, 8)
    assert recorded_input_tokens(final) == 90
    assert session.tools[0]["function"]["name"] == "bash"
    assert session.metadata["model"] == "claude-sonnet-4"


def test_claude_code_merge_pairing_and_compaction(tmp_path: Path) -> None:
    sessions = load(claude_code_fixture(tmp_path))
    kinds = [s.metadata["claude_code_kind"] for s in sessions]
    assert kinds == ["main", "sidechain"]
    main, side = sessions
    assert roles(main) == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "user",
        "user",
    ]
    merged = main.messages[1]
    assert merged.text == "Looking." and merged.metadata["thinking"] == "hmm"
    assert [c.id for c in merged.tool_calls] == ["t1", "t2"], "lines sharing message.id form one message"
    assert merged.metadata["usage"]["output_tokens"] == 50, "usage comes from the last line of the message"
    assert merged.metadata["usage"] == usage(10, 900, 7, 50)
    assert recorded_input_tokens(merged) == 917
    assert merged.metadata["model"] == "claude-opus"
    assert main.messages[3].metadata.get("is_error") is True
    assert main.messages[5].text == "now run the tests", "the recorded summary is not a message"
    assert main.recorded_compactions == (
        RecordedCompaction(
            call_index=2,
            message_index=5,
            trigger="auto",
            tokens_before=155000,
            summary="This session is being continued. Summary: parser fixed.",
        ),
    )
    assert main.metadata["recorded_compactions"][0]["timestamp"] == "2025-01-01T00:00:02Z"
    interrupted = main.messages[7]
    assert interrupted.content == NO_RESULT_TEXT and interrupted.metadata["no_result_recorded"] is True
    assert main.messages[-1].metadata["stray_tool_result"] is True
    assert main.metadata["titles"] == ["Fixing the parser"]
    assert roles(side) == ["user", "assistant", "tool", "assistant"]
    assert side.messages[2].text == "42"


def test_claude_code_meta_line_inside_a_response_does_not_split_it(tmp_path: Path) -> None:
    """An `isMeta` line written between two lines of one response was not sent in between:
    the response stays one call (its usage counted once), answered by its results first."""
    lines = [
        _user("u1", None, "list and read"),
        _assistant("a1", "u1", "msg_A", [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]),
        _user("m1", "a1", "<system-reminder>hook</system-reminder>", isMeta=True),
        _assistant("a2", "m1", "msg_A", [{"type": "tool_use", "id": "t2", "name": "Read", "input": {}}]),
        _user("r1", "a2", [_result("t1", "a.py")]),
        _user("r2", "r1", [_result("t2", "text")]),
        _assistant("a3", "r2", "msg_B", [{"type": "text", "text": "done"}]),
    ]
    (session,) = load(write_jsonl(tmp_path / "p" / "meta.jsonl", lines))
    assert roles(session) == ["user", "assistant", "tool", "tool", "user", "assistant"]
    merged = session.messages[1]
    assert [c.id for c in merged.tool_calls] == ["t1", "t2"]
    assert session.messages[4].metadata["is_meta"] is True
    assert session.calls == 2
    assert session.metadata["usage_totals"]["input_tokens"] == 20, "each response's input counted once"
    check_session(session, "claude-code")


def test_tool_results_keep_their_line_timestamp(tmp_path: Path) -> None:
    cc_lines = [
        _user("u1", None, "read"),
        _assistant("a1", "u1", "msg_A", [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]),
        _user("r1", "a1", [_result("t1", "text")], timestamp="2025-01-01T00:01:00Z"),
    ]
    (cc,) = load(write_jsonl(tmp_path / "p" / "ts.jsonl", cc_lines))
    assert cc.messages[2].role == "tool" and cc.messages[2].metadata["timestamp"] == "2025-01-01T00:01:00Z"
    lines = [
        {"timestamp": f"2025-10-01T10:00:0{n}Z", "type": "response_item", "payload": payload}
        for n, payload in enumerate(
            [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ls"}]},
                {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "f1"},
                {"type": "function_call_output", "call_id": "f1", "output": "a b"},
            ]
        )
    ]
    (codex,) = load(write_jsonl(tmp_path / "rollout-ts.jsonl", lines))
    assert codex.messages[2].role == "tool" and codex.messages[2].metadata["timestamp"] == "2025-10-01T10:00:02Z"


def test_claude_code_subagent_files(tmp_path: Path) -> None:
    folder = tmp_path / "abc" / "subagents"
    agent = [
        _user("x1", None, "explore", isSidechain=True, agentId="a123"),
        _assistant("x2", "x1", "m1", [{"type": "text", "text": "found"}], isSidechain=True, agentId="a123"),
    ]
    compact = [
        _user(
            "y1",
            "gone",
            "<system-reminder>hook</system-reminder>",
            isSidechain=True,
            agentId="acompact-77",
            isMeta=True,
        ),
        _user("y2", "y1", "Summarize the conversation", isSidechain=True, agentId="acompact-77"),
        _assistant(
            "y3",
            "y2",
            "m2",
            [{"type": "text", "text": "<summary>x</summary>"}],
            isSidechain=True,
            agentId="acompact-77",
        ),
    ]
    write_jsonl(folder / "agent-a123.jsonl", agent)
    write_jsonl(folder / "agent-acompact-77.jsonl", compact)
    sessions = load(tmp_path)
    by_kind = {s.metadata["claude_code_kind"]: s for s in sessions}
    assert set(by_kind) == {"subagent", "compaction_call"}
    assert by_kind["compaction_call"].metadata["agent_id"] == "acompact-77"
    assert len(by_kind["compaction_call"].messages) == 3, "one session despite parents outside the file"
    assert by_kind["compaction_call"].messages[0].metadata["is_meta"] is True
    assert by_kind["subagent"].metadata["source"] == "abc/subagents/agent-a123.jsonl"


def test_codex_rollout(tmp_path: Path) -> None:
    (session,) = load(codex_fixture(tmp_path))
    assert roles(session) == ["system", "user", "assistant", "tool", "tool", "assistant", "system", "assistant", "tool"]
    calls = session.messages[2]
    assert [c.id for c in calls.tool_calls] == ["f1", "f2"]
    assert [session.messages[3].text, session.messages[4].text] == ["a b", "/w"]
    assert calls.metadata["thinking"] == "plan" and calls.metadata["model"] == "gpt-5-codex"
    assert calls.metadata["usage"] == usage(100, 800, 0, 40), "input_tokens include the cached ones"
    assert session.messages[5].text == "Two files."
    assert session.recorded_compactions == (
        RecordedCompaction(
            call_index=2, message_index=6, trigger=None, tokens_before=940, summary="Summary: listed files."
        ),
    )
    patch = session.messages[7].tool_calls[0]
    assert patch.name == "apply_patch" and json.loads(patch.arguments) == {"input": "*** Begin Patch"}
    assert session.messages[8].metadata["no_result_recorded"] is True
    assert session.metadata["context_window"] == 272000 and session.metadata["session_id"] == "sess-1"


def test_swe_agent_history(tmp_path: Path) -> None:
    (session,) = load(swe_agent_fixture(tmp_path))
    assert roles(session) == ["system", "user", "user", "assistant", "tool", "assistant"]
    assert session.messages[1].metadata["is_demo"] is True
    assert session.messages[3].tool_calls[0].name == "open"
    assert session.messages[5].metadata["action"] == "submit"
    assert session.metadata["model"] == "gpt-4o"
    assert session.metadata["recorded_totals"] == {"prompt_tokens": 1000, "completion_tokens": 50, "api_calls": 2}
    assert session.metadata["exit_status"] == "submitted"


def test_swe_agent_text_actions_keep_observations_as_user(tmp_path: Path) -> None:
    data = {
        "history": [
            {"role": "system", "content": "S", "agent": "primary"},
            {"role": "user", "content": "issue", "agent": "primary"},
            {"role": "assistant", "content": "ls", "action": "ls\n", "agent": "primary"},
            {"role": "user", "content": "a.py", "agent": "primary"},
        ],
        "trajectory": [],
        "info": {},
    }
    (session,) = load(write_json(tmp_path / "old.traj", data))
    assert roles(session) == ["system", "user", "assistant", "user"]


def _traj_step(action: str, response: str, observation: str) -> dict[str, Any]:
    return {"action": action, "response": response, "thought": response, "observation": observation, "state": {}}


def test_swe_agent_appends_the_trajectory_steps_history_lacks(tmp_path: Path) -> None:
    """SWE-agent may leave the final `submit` step out of `history`: taken from `trajectory`,
    in the history's shape, so the calls match `api_calls`."""
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    data = {
        "history": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "issue"},
            {"role": "assistant", "content": "list", "thought": "list", "action": "ls", "tool_calls": [call]},
            {"role": "tool", "content": "a.py", "tool_call_ids": ["c1"]},
        ],
        "trajectory": [_traj_step("ls", "list", "a.py"), _traj_step("submit", "Done, submitting.", "diff --git")],
        "info": {"model_stats": {"api_calls": 2}},
    }
    (session,) = load(write_json(tmp_path / "fc.traj", data))
    assert roles(session) == ["system", "user", "assistant", "tool", "assistant", "tool"]
    final, result = session.messages[4:]
    assert final.text == "Done, submitting." and final.metadata["from_trajectory"] is True
    assert final.tool_calls[0].name == "bash" and json.loads(final.tool_calls[0].arguments) == {"command": "submit"}
    assert result.text == "diff --git" and result.tool_call_id == final.tool_calls[0].id
    assert session.calls == session.metadata["recorded_totals"]["api_calls"]
    check_session(session, "swe-agent")
    text = {
        "history": [
            {"role": "user", "content": "issue"},
            {"role": "assistant", "content": "```\nls\n```", "action": "ls\n"},
            {"role": "user", "content": "a.py"},
        ],
        "trajectory": [
            _traj_step("ls\n", "```\nls\n```", "a.py"),
            _traj_step("ls\n", "again", "a.py"),
            _traj_step("submit\n", "```\nsubmit\n```", "diff"),
        ],
    }
    (old,) = load(write_json(tmp_path / "text.traj", text))
    assert roles(old) == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert [m.text for m in old.messages[3:]] == ["again", "a.py", "```\nsubmit\n```", "diff"], (
        "matched by response too, not by the repeated action alone"
    )


def test_swe_agent_history_ending_with_the_last_step_gains_nothing(tmp_path: Path) -> None:
    data = {
        "history": [
            {"role": "user", "content": "issue"},
            {"role": "assistant", "content": "```\nsubmit\n```", "action": "submit\n"},
        ],
        "trajectory": [
            _traj_step("edit 1:1\n", "an edit history skipped", "ok"),
            _traj_step("submit\n", "```\nsubmit\n```", "diff"),
        ],
    }
    (session,) = load(write_json(tmp_path / "done.traj", data))
    assert roles(session) == ["user", "assistant"]


def test_mini_swe_agent_both_shapes(tmp_path: Path) -> None:
    (session,) = load(mini_swe_agent_fixture(tmp_path))
    assert roles(session) == ["system", "user", "assistant", "user", "user", "assistant", "tool"]
    first = session.messages[2]
    assert first.metadata["usage"] == usage(10, 0, 0, 3)
    assert first.metadata["finish_reason"] == "stop" and first.metadata["model"] == "claude-sonnet-4"
    assert session.messages[4].metadata["interrupt_type"] == "FormatError"
    assert session.messages[5].metadata["finish_reason"] == "length"
    assert session.metadata["exit"] == {"content": "patch", "exit_status": "Submitted", "submission": "patch"}
    assert session.metadata["instance_id"] == "repo__1" and session.metadata["model"] == "claude-sonnet-4"

    old = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "```bash\nls\n```"},
        {"role": "user", "content": "out"},
    ]
    path = write_json(tmp_path / "old.traj.json", old)
    assert detect(path) == "mini-swe-agent"
    (old_session,) = load(path)
    assert roles(old_session) == ["system", "user", "assistant", "user"]


def test_openhands_v0_events(tmp_path: Path) -> None:
    (session,) = load(openhands_fixture(tmp_path))
    assert roles(session) == ["system", "user", "assistant", "tool", "tool", "assistant", "tool"]
    parallel = session.messages[2]
    assert [c.id for c in parallel.tool_calls] == ["t1", "t2"], "actions sharing a response id are one message"
    assert parallel.text == "Look around"
    assert json.loads(parallel.tool_calls[1].arguments) == {"command": "pwd"}
    assert [session.messages[3].text, session.messages[4].text] == ["game.py", "/workspace"], "paired by cause"
    assert parallel.metadata["usage"] == usage(100, 0, 0, 20)
    assert parallel.metadata["finish_reason"] == "tool_calls"
    assert session.messages[6].metadata["no_result_recorded"] is True


def test_openhands_eval_jsonl_one_session_per_line(tmp_path: Path) -> None:
    path = openhands_eval_fixture(tmp_path)
    assert detect(path) == "openhands"
    first, second = load(path)
    assert first.metadata["instance_id"] == "i-1" and second.metadata["instance_id"] == "i-2"
    assert first.metadata["model"] == "gpt-4o"
    assert first.metadata["recorded_totals"] == {"prompt_tokens": 200, "completion_tokens": 40}
    assert second.messages[0].role == "user" and second.messages[0].metadata["from_instruction"] is True
    assert second.messages[0].text == "Fix issue 1"
    check_session(first, "openhands")
    check_session(second, "openhands")


def test_openhands_v1_events(tmp_path: Path) -> None:
    path = openhands_v1_fixture(tmp_path)
    assert detect(path) == "openhands"
    (session,) = load(path)
    assert roles(session) == ["system", "user", "assistant", "tool", "tool", "user", "assistant"]
    parallel = session.messages[2]
    assert [c.id for c in parallel.tool_calls] == ["c1", "c2"]
    assert parallel.text == "Two at once" and parallel.metadata["thinking"] == "deep"
    assert session.messages[3].text == "a b"
    assert session.messages[4].text == "boom" and session.messages[4].metadata["is_error"] is True
    assert session.messages[5].metadata["stray_tool_result"] is True
    assert session.recorded_compactions == (
        RecordedCompaction(
            call_index=1, message_index=6, trigger="auto", tokens_before=None, summary="So far: ls, pwd."
        ),
    )
    assert session.metadata["recorded_totals"] == {"prompt_tokens": 7, "completion_tokens": 3}
    assert session.tools[0]["function"]["name"] == "terminal"


def test_openhands_resolver_output_one_session_per_run(tmp_path: Path) -> None:
    path = openhands_resolver_fixture(tmp_path)
    assert detect(path) == "openhands"
    flat, paired = load(path)
    assert [flat.metadata["instance_id"], paired.metadata["instance_id"]] == ["acme/viewer#5", "acme/viewer#6"]
    assert flat.metadata["openhands_kind"] == "resolver" and flat.metadata["success"] is True
    assert flat.metadata["cost"] == 0.07
    assert roles(flat) == ["user", "assistant", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert flat.messages[0].text == RESOLVER_TASK and "from_instruction" not in flat.messages[0].metadata
    assert flat.messages[1].text == "Create the file first.\n\n<execute_bash>\ntouch LICENSE\n</execute_bash>"
    assert "<execute_ipython>" in flat.messages[3].text and "write('MIT')" in flat.messages[3].text
    assert flat.messages[2].text == "\r\nroot@box:/workspace # ", "observations reach the agent as user text"
    assert [flat.messages[5].text, flat.messages[6].text] == [
        "Which year should the copyright name?",
        "2024, please.",
    ], "the agent asks, the user answers"
    assert flat.messages[7].text == "The license is added."
    assert roles(paired) == ["user", "assistant", "tool"], "[action, observation] pairs are unpacked"
    assert paired.messages[2].text == "game.py"
    for session in (flat, paired):
        check_session(session, "openhands")


def test_openhands_history_rejects_what_is_not_an_event(tmp_path: Path) -> None:
    line = {
        "issue": {"repo": "r", "number": 1},
        "instruction": "x",
        "history": [resolver_history()[0], {"role": "user", "content": "hi"}],
    }
    path = write_jsonl(tmp_path / "output.jsonl", [line, line])
    with pytest.raises(FormatError) as info:
        load(path, format="openhands")
    assert info.value.line == 1 and "history[1] is not an OpenHands event" in str(info.value)


def test_openhands_v0_condensation_is_a_recorded_compaction(tmp_path: Path) -> None:
    events = openhands_v0_events()
    summary = "USER_CONTEXT: make a game. DONE: listed the workspace."
    condensed = [
        *events[:8],
        {"id": 10, "source": "user", "action": "condensation_request", "args": {}},
        {
            "id": 11,
            "source": "agent",
            "action": "condensation",
            "args": {
                "forgotten_events_start_id": 4,
                "forgotten_events_end_id": 7,
                "summary": summary,
                "summary_offset": 1,
            },
        },
        {"id": 12, "source": "environment", "observation": "agent_condensation", "content": summary},
        {"id": 13, "source": "user", "action": "message", "args": {"content": "add a score"}},
        *events[8:],
        {"id": 14, "source": "agent", "action": "condensation", "args": {"forgotten_event_ids": [13], "summary": None}},
    ]
    (session,) = load(write_json(tmp_path / "trajs" / "condensed.json", condensed))
    assert roles(session) == ["system", "user", "assistant", "tool", "tool", "user", "assistant", "tool"]
    assert all(summary not in m.text for m in session.messages), "the summary is never a message"
    first, second = session.recorded_compactions
    assert first == RecordedCompaction(
        call_index=1, message_index=5, trigger="manual", tokens_before=None, summary=summary
    )
    assert session.metadata["recorded_compactions"][0]["forgotten_events"] == 4
    assert second == RecordedCompaction(call_index=2, message_index=8, trigger="auto", summary="")


def test_openhands_v1_condensation_with_its_summary_event(tmp_path: Path) -> None:
    path = openhands_v1_fixture(tmp_path)
    events = [json.loads(line) for line in path.read_text().splitlines()]
    at = next(i for i, e in enumerate(events) if e["kind"] == "CondensationSummaryEvent")
    events.insert(
        at,
        {
            "kind": "Condensation",
            "id": "k1",
            "source": "environment",
            "forgotten_event_ids": ["a1", "o1"],
            "summary": "So far: ls, pwd.",
            "summary_offset": 1,
        },
    )
    (session,) = load(write_jsonl(tmp_path / "v1.jsonl", events))
    (compaction,) = session.recorded_compactions
    assert compaction == RecordedCompaction(call_index=1, message_index=6, trigger="auto", summary="So far: ls, pwd.")
    assert session.metadata["recorded_compactions"][0]["forgotten_events"] == 2
    assert all("So far" not in m.text for m in session.messages)


def test_workbench_exports_round_trip_plain_and_gzipped(tmp_path: Path) -> None:
    expected = exported_sessions()
    gzipped = workbench_fixture(tmp_path)
    plain = tmp_path / "plain" / "exported.jsonl"
    plain.parent.mkdir()
    plain.write_bytes(gzip.decompress(gzipped.read_bytes()))
    for path in (gzipped, plain):
        assert detect(path) == "workbench"
        sessions = load(path)
        assert [s.id for s in sessions] == [s.id for s in expected]
        assert [s.messages for s in sessions] == [s.messages for s in expected]
        first = sessions[0]
        assert first.probes == expected[0].probes and first.tools == expected[0].tools
        assert first.messages[1].pinned and first.dataset == "exported"
        assert first.recorded_compactions == expected[0].recorded_compactions
        assert recorded_input_tokens(first.messages[2]) == 95
    walked = load(tmp_path / "export")
    assert [s.id for s in walked] == [s.id for s in expected], "folder walks read *.jsonl.gz"
    assert {s.dataset for s in load(gzipped, dataset="mine")} == {"mine"}


def test_the_bundled_samples_load_as_init_reads_them() -> None:
    from workbench import samples

    path = samples.bundled_folder() / "samples.jsonl.gz"
    if not path.is_file():
        pytest.skip("datasets/samples is not part of this install")
    assert detect(path) == "workbench"
    loaded = load(path)
    bundled = samples.bundled_samples()
    assert [(s.id, s.dataset, s.messages, s.probes) for s in loaded] == [
        (s.id, s.dataset, s.messages, s.probes) for s in bundled
    ]


def test_a_damaged_gzip_export_is_a_format_error(tmp_path: Path) -> None:
    data = workbench_fixture(tmp_path).read_bytes()
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError) as info:
        load(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("version", ["v0", "v1"])
def test_openhands_event_store_folder_is_one_session(tmp_path: Path, version: str) -> None:
    if version == "v0":
        events = openhands_v0_events()
        reference = load(openhands_fixture(tmp_path / "ref"))[0]
        names = [f"{i}.json" for i in range(len(events))]  # 10.json sorts before 2.json by name
    else:
        path = openhands_v1_fixture(tmp_path / "ref")
        events = [json.loads(line) for line in path.read_text().splitlines()]
        reference = load(path)[0]
        names = [f"event-{i:05d}-{e['id']}.json" for i, e in enumerate(events)]
    folder = tmp_path / "conversation" / "events"
    for name, event in zip(names, events, strict=True):
        write_json(folder / name, event)
    (session,) = load(tmp_path / "conversation")
    assert session.messages == reference.messages and session.metadata["event_files"] == len(events)
    assert load(folder / names[1]) == [], "only the first event file yields the conversation"


def test_aider_log(tmp_path: Path) -> None:
    sessions = load(aider_fixture(tmp_path))
    assert len(sessions) == 2, "the session without messages is dropped"
    first, second = sessions
    assert roles(first) == ["user", "assistant", "assistant"]
    assert first.messages[0].text == "add a comment\nto the top of main.py"
    reply = first.messages[1]
    assert reply.metadata["usage"] == usage(3200, 0, 0, 21)
    assert reply.metadata["cost"] == pytest.approx(0.0082)
    assert "Add file to the chat?" in reply.metadata["aider_output"]
    edit = first.messages[2]
    assert "> quoted text inside the reply" in edit.text and ">>>>>>> REPLACE" in edit.text
    assert edit.metadata["usage"] == usage(4100, 0, 0, 1500)
    assert first.metadata["model"] == "gpt-4o" and first.metadata["started_at"] == "2025-07-15 11:38:37"
    assert first.metadata["aider_version"] == "0.85.1"
    assert roles(second) == ["user", "assistant", "user", "user"], "a blank line ends a user message"
    assert second.messages[1].metadata["aider_output"].endswith("a continuation line without the two spaces")
    assert [m.text for m in second.messages[2:]] == ["first", "second"]


AIDER_MULTILINE = "\n".join(
    [
        "# aider chat started at 2025-08-01 10:00:00",
        "",
        "> Aider v0.86.0  ",
        "> Main model: gpt-4.1 with diff edit format  ",
        "",
        "#### /add a.py  ",
        "> Added a.py to the chat  ",
        "",
        "#### fix a.py  ",
        "",
        "<thinking-content-0123abcd>",
        "I should look at a.py.",
        "</thinking-content-0123abcd>",
        "",
        "a.py",
        "<<<<<<< SEARCH",
        "x = 1",
        "=======",
        "x = 2",
        ">>>>>>> REPLACE",
        "",
        "> Tokens: 2.0k sent, 50 received.  ",
        "> The LLM did not conform to the edit format.  ",
        "> https://aider.chat/docs/troubleshooting/edit-errors.html  ",
        "> # 1 SEARCH/REPLACE block failed to match!",
        "",
        "## SearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in a.py",
        "<<<<<<< SEARCH",
        "x = 1",
        ">>>>>>> REPLACE",
        "",
        "Just reply with fixed versions of the block above that failed to match.  ",
        "> Commit 1234567 fix: a  ",
        "",
        "Fixed block:",
        "",
        "x = 3",
        "",
        "> Tokens: 2.5k sent, 20 received.  ",
        "> Applied edit to a.py  ",
        "> mkdir -p out            ",
        "touch out/a.txt  ",
        "> Run shell commands? (Y)es/(N)o/(D)on't ask again [Yes]: y  ",
        "",
        "#### Add file to the chat? (Y)es/(N)o/(A)ll/(S)kip all/(D)on't ask again [Yes]: all  ",
        "",
        "#### /ask why x?  ",
        "",
        "Because.",
        "",
        "> Tokens: 3k sent, 2 received.  ",
        "",
    ]
)


def test_aider_multiline_output_commands_and_reflections(tmp_path: Path) -> None:
    """aider writes a multi-line output with `> ` on its first line and the two spaces on its
    last only; its continuation lines are output, not replies: one call per `Tokens:` report.
    The edit-format error is what aider sends the model; commands and logged answers are not."""
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(AIDER_MULTILINE, encoding="utf-8")
    (session,) = load(path)
    assert roles(session) == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert session.calls == AIDER_MULTILINE.count("> Tokens:")
    prompt, edit, error, fixed, ask, answer = session.messages
    assert prompt.text == "fix a.py" and session.metadata["aider_commands"] == ["/add a.py"]
    assert edit.text.startswith("a.py\n<<<<<<< SEARCH") and "thinking-content" not in edit.text
    assert edit.metadata["thinking"] == "I should look at a.py."
    assert error.metadata["aider_reflection"] == "edit_format_error"
    assert error.text.startswith("# 1 SEARCH/REPLACE block failed to match!\n\n## SearchReplaceNoExactMatch")
    assert error.text.endswith("that failed to match.") and "Commit 1234567" in error.metadata["aider_output"]
    assert "did not conform" in edit.metadata["aider_output"]
    assert fixed.text == "Fixed block:\n\nx = 3" and fixed.metadata["usage"] == usage(2500, 0, 0, 20)
    assert "mkdir -p out\ntouch out/a.txt" in fixed.metadata["aider_output"]
    assert fixed.metadata["aider_output"].endswith("[Yes]: all"), "a logged answer is output"
    assert ask.text == "why x?" and ask.metadata["aider_command"] == "/ask"
    assert answer.text == "Because." and answer.metadata["usage"] == usage(3000, 0, 0, 2)


def test_aider_commands_after_a_message_stay_with_it(tmp_path: Path) -> None:
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(
        "#### hi  \n\nHello.\n\n> Tokens: 1k sent, 2 received.  \n\n#### /ls  \n"
        "> Files in chat: none  \n\n#### !pytest -q  \n\n#### /ask  \n",
        encoding="utf-8",
    )
    (session,) = load(path)
    assert roles(session) == ["user", "assistant"]
    assert session.messages[1].metadata["aider_commands"] == ["/ls", "!pytest -q", "/ask"]


# --------------------------------------------------------------------------- errors


def test_empty_and_blank_files(tmp_path: Path) -> None:
    for name, body in (("empty.json", b""), ("blank.jsonl", b"\n \n"), (".aider.chat.history.md", b"")):
        path = tmp_path / name
        path.write_bytes(body)
        with pytest.raises(FormatError) as info:
            load(path)
        assert name in str(info.value)


def test_malformed_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[\n  {"role": "user", "content": "hi"},\n  {"role": "assistant" "content": 1}\n]')
    with pytest.raises(FormatError) as info:
        load(path)
    assert info.value.line == 3 and "column" in str(info.value) and "bad.json:3" in str(info.value)
    assert info.value.expected


def test_malformed_jsonl_names_line(tmp_path: Path) -> None:
    path = claude_code_fixture(tmp_path)
    lines = path.read_text().splitlines()
    lines[4] = lines[4][:-7]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(FormatError) as info:
        load(path)
    assert info.value.line == 5 and info.value.path == str(path)


def test_bad_structure_errors(tmp_path: Path) -> None:
    cases = {
        "role.json": [{"role": "wizard", "content": "x"}],
        "content.json": {"messages": [{"role": "user", "content": 5}, {"role": "narrator"}]},
        "nolist.traj": {"history": "nope"},
    }
    for name, value in cases.items():
        with pytest.raises(FormatError) as info:
            load(write_json(tmp_path / name, value))
        assert name in str(info.value) and info.value.expected


def test_unknown_format_and_bad_arguments(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text('{"hello": "world"}')
    with pytest.raises(UnknownFormatError) as info:
        detect(path)
    assert "notes.json" in str(info.value)
    with pytest.raises(FormatError):
        load(tmp_path / "missing.json")
    with pytest.raises(FormatError, match="unknown format"):
        load(openai_fixture(tmp_path), format="yaml")
    with pytest.raises(FormatError):
        load(openai_fixture(tmp_path), format="claude-code")


def test_unexpected_reader_failure_becomes_format_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.importers import swe_agent

    def explode(path: str) -> list[Session]:
        raise KeyError("boom")

    monkeypatch.setattr(swe_agent, "load", explode)
    path = swe_agent_fixture(tmp_path)
    with pytest.raises(FormatError) as info:
        load(path)
    assert "inst-1.traj" in str(info.value) and "swe-agent" in str(info.value)
    (result,) = iter_load(path)
    assert result.sessions == () and isinstance(result.error, FormatError)


def test_detection_beyond_the_sniffed_head(tmp_path: Path) -> None:
    big = "x" * 300_000
    lines = [_user("u1", None, big), _assistant("a1", "u1", "m1", [{"type": "text", "text": "ok"}])]
    path = write_jsonl(tmp_path / "big.jsonl", lines)
    assert detect(path) == "claude-code"
    assert load(path)[0].messages[0].text == big
    swe = json.loads(swe_agent_fixture(tmp_path).read_text())
    renamed = write_json(tmp_path / "run.traj.json", swe)
    assert detect(renamed) == "swe-agent"


_VALID_BYTES: dict[str, bytes] = {}


def _valid_bytes() -> dict[str, bytes]:
    """Every fixture's bytes (built once, in a throwaway folder)."""
    if not _VALID_BYTES:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            builders = {**FIXTURES, "openhands-eval": openhands_eval_fixture, "openhands-v1": openhands_v1_fixture}
            for name, build in builders.items():
                path = build(Path(tmp) / name)
                _VALID_BYTES[name] = path.read_bytes()
                _VALID_BYTES[name + "#name"] = path.name.encode()
    return _VALID_BYTES


def _only_format_errors(path: Path) -> None:
    """Every reader either returns clean sessions or raises a deliberate FormatError (not the
    safety net that wraps an unexpected exception, which would show as `__cause__`)."""
    for fmt in ("auto", *FORMATS):
        try:
            sessions = load(path, format=fmt)
        except FormatError as error:
            assert error.__cause__ is None, f"{fmt} crashed inside: {error}"
            assert str(path) in str(error)
            continue
        for session in sessions:
            assert all(m.role in ROLES for m in session.messages)
            assert tool_pairing_problems(session.messages) == []


_NAMES = ["x.json", "x.jsonl", "x.traj", "x.traj.json", ".aider.chat.history.md", "x.txt"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=400), name=st.sampled_from(_NAMES))
def test_random_bytes_only_raise_format_error(tmp_path: Path, data: bytes, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    _only_format_errors(path)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    which=st.sampled_from(
        [
            "openai",
            "anthropic",
            "claude-code",
            "codex",
            "swe-agent",
            "mini-swe-agent",
            "openhands",
            "aider",
            "openhands-eval",
            "openhands-v1",
        ]
    ),
    cut=st.floats(min_value=0.0, max_value=1.0),
    garble=st.binary(max_size=8),
    where=st.floats(min_value=0.0, max_value=1.0),
)
def test_truncated_and_garbled_fixtures_only_raise_format_error(
    tmp_path: Path, which: str, cut: float, garble: bytes, where: float
) -> None:
    valid = _valid_bytes()
    body = valid[which]
    body = body[: int(len(body) * cut)]
    at = int(len(body) * where)
    body = body[:at] + garble + body[at + len(garble) :]
    path = tmp_path / valid[which + "#name"].decode()
    path.write_bytes(body)
    _only_format_errors(path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.text(max_size=5)
        | st.sampled_from(["user", "assistant", "tool", "tool_use", "tool_result", "message", "ActionEvent"]),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "role",
                        "content",
                        "messages",
                        "tool_calls",
                        "id",
                        "type",
                        "history",
                        "kind",
                        "action",
                        "observation",
                        "tool_call_id",
                        "function",
                        "payload",
                        "message",
                        "text",
                        "input",
                    ]
                ),
                inner,
                max_size=5,
            )
        ),
        max_leaves=25,
    )
)
def test_odd_json_structures_only_raise_format_error(tmp_path: Path, value: Any) -> None:
    for name in ("x.json", "x.traj", "x.traj.json"):
        path = tmp_path / name
        path.write_text(json.dumps({"messages": [value]} if name == "x.json" else value))
        _only_format_errors(path)
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(value) + "\n" + json.dumps(value) + "\n")
    _only_format_errors(path)


# --------------------------------------------------------------------------- folders


def test_folder_walk_skips_irrelevant_files_and_reports_each_file(tmp_path: Path) -> None:
    openai_fixture(tmp_path / "a")
    codex_fixture(tmp_path / "b" / "deep")
    aider_fixture(tmp_path)
    (tmp_path / "README.md").write_text("# readme")
    (tmp_path / "picture.png").write_bytes(b"\x89PNG")
    (tmp_path / "package.json").write_text('{"name": "x"}')
    (tmp_path / "node_modules").mkdir()
    write_json(tmp_path / "node_modules" / "chat.json", [{"role": "user", "content": "hidden"}])
    (tmp_path / "broken.jsonl").write_text('{"messages": [}\n')
    (tmp_path / "other.json").write_text('{"config": true}')

    results = list(iter_load(tmp_path, dataset="ds"))
    assert all(isinstance(r, FileResult) for r in results)
    assert [r.path for r in results] == [p for p, _ in candidates(tmp_path)]
    names = sorted(os.path.relpath(r.path, tmp_path) for r in results)
    assert names == sorted(
        [
            "a/chat.json",
            os.path.join("b", "deep", "rollout-2025-10-01.jsonl"),
            os.path.join("repo", ".aider.chat.history.md"),
            "broken.jsonl",
            "other.json",
        ]
    )
    by_name = {os.path.basename(r.path): r for r in results}
    assert by_name["broken.jsonl"].error is not None and by_name["broken.jsonl"].sessions == ()
    assert isinstance(by_name["other.json"].error, UnknownFormatError)
    good = [s for r in results for s in r.sessions]
    assert {s.format for s in good} == {"openai", "codex", "aider"}
    assert {s.dataset for s in good} == {"ds"}
    assert by_name["chat.json"].sessions[0].metadata["source"] == "a/chat.json"

    with pytest.raises(FormatError) as info:
        load(tmp_path)
    assert "broken.jsonl" in str(info.value)
    (tmp_path / "broken.jsonl").unlink()
    assert len(load(tmp_path)) == 4, "unrecognised walked files are skipped by load"


def test_folder_never_imports_twice(tmp_path: Path) -> None:
    path = openai_fixture(tmp_path)
    (tmp_path / "copy.json").write_bytes(path.read_bytes())
    results = list(iter_load([tmp_path, path]))
    assert len(results) == 2, "a file reached twice is read once"
    assert sum(len(r.sessions) for r in results) == 1, "identical content is imported once"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FormatError, match="no session file"):
        load(empty)


# --------------------------------------------------------------------------- shared recordings


def _readable_folders() -> list[Path]:
    """The shared format folders some importer reads (a folder added for a format not supported yet waits)."""
    if not SHARED.is_dir():
        return []
    names = {kind["name"] for kind in describe()["importer"]}
    return sorted(p for p in SHARED.iterdir() if p.is_dir() and _FOLDER_FORMAT.get(p.name, p.name) in names)


def _shared_files() -> list[Path]:
    return sorted(
        p
        for folder in _readable_folders()
        for p in folder.rglob("*")
        if p.is_file() and (p.suffix != ".md" or p.name == ".aider.chat.history.md")
    )


def _load_shared() -> list[Session]:
    return [s for folder in _readable_folders() for s in load(folder)]


_FOLDER_FORMAT = {"openai-chat": "openai"}
_AIDER_UNREPORTED = {"AlexShchuka__mozgoslav": 2, "Aquaticat__Monochromatic": 1}
"""Replies aider logged without a `Tokens:` report: two cut short by ^C while streaming, and
one after which aider crashed computing its cost (the traceback follows the reply)."""


@pytest.mark.shared
@pytest.mark.parametrize(
    "path",
    _shared_files() or [None],
    ids=lambda p: p.relative_to(SHARED).as_posix() if isinstance(p, Path) else "absent",
)
def test_shared_recording(path: Path | None) -> None:
    if path is None:
        pytest.skip("../shared/sessions is not available")
    folder = path.relative_to(SHARED).parts[0]
    fmt = _FOLDER_FORMAT.get(folder, folder)
    assert detect(path) == fmt
    sessions = load(path)
    assert sessions
    for session in sessions:
        check_session(session, fmt)
    name = path.name
    calls = sum(len(m.tool_calls) for s in sessions for m in s.messages)
    if "marot__spotter" in str(path) and len(name) == 42 and "subagents" not in str(path):
        main = [s for s in sessions if s.metadata["claude_code_kind"] == "main"]
        assert len(main) == 1 and len(main[0].recorded_compactions) == 1
        (compaction,) = main[0].recorded_compactions
        assert compaction.trigger == "auto" and compaction.tokens_before is not None
        assert compaction.tokens_before > 100_000
        assert compaction.summary.startswith("This session is being continued")
        assert 0 < compaction.call_index < main[0].calls
        assert main[0].messages[compaction.message_index - 1].role in ("assistant", "tool")
    if name.startswith("agent-acompact"):
        assert [s.metadata["claude_code_kind"] for s in sessions] == ["compaction_call"]
    if name.startswith("fe5e1c67"):
        assert calls == 167
    if name == ".aider.chat.history.md":
        reports = sum(line.startswith("> Tokens:") for line in path.read_text(encoding="utf-8").splitlines())
        replies = [m for s in sessions for m in s.messages if m.role == "assistant"]
        assert sum(1 for m in replies if m.metadata.get("usage")) == reports
        assert len(replies) - reports == _AIDER_UNREPORTED.get(path.parent.name, 0)
        assert not any("<thinking-content-" in m.text for m in replies)
        assert not any(m.text.startswith(("/", "!")) for s in sessions for m in s.messages if m.role == "user")
    if name == "6e44b9__sweagenttestrepo-1c2844.traj":
        assert sessions[0].calls == sessions[0].metadata["recorded_totals"]["api_calls"] == 5
    if name.startswith("5c0375b4"):
        assert calls == 21
    if name.endswith(".707.json"):
        assert sessions[0].messages[-2].metadata["finish_reason"] == "tool_calls"
    if name == "output.critic_attempt_1.jsonl":
        assert len(sessions) == 45
    if name == "output.jsonl":
        assert len(sessions) == 3 and all(s.metadata["usage_totals"] for s in sessions)


@pytest.mark.shared
def test_shared_recordings_keep_no_recorded_summary_in_any_message() -> None:
    """The agents' own compactions are annotations: no imported session holds a recorded summary
    (start, middle or end) in any message. The Claude Code compaction calls are the exception by
    definition: their answer is the summary they wrote."""
    if not SHARED.is_dir():
        pytest.skip("../shared/sessions is not available")
    sessions = _load_shared()
    summaries = [c.summary for s in sessions for c in s.recorded_compactions if c.summary]
    assert len(summaries) >= 3, "every marot__spotter main session recorded one"
    pieces = [t[k : k + 120] for t in summaries for k in (0, len(t) // 2, max(0, len(t) - 120))]
    for session in sessions:
        if session.metadata.get("claude_code_kind") == "compaction_call":
            continue
        for index, message in enumerate(session.messages):
            text = message.text
            assert not any(piece in text for piece in pieces), (session.metadata["source"], index)
        for compaction in session.recorded_compactions:
            assert 0 <= compaction.message_index <= len(session.messages)
            assert compaction.call_index == sum(
                1 for m in session.messages[: compaction.message_index] if m.role == "assistant"
            )


@pytest.mark.shared
def test_shared_claude_code_calls_carry_their_usage() -> None:
    if not SHARED.is_dir():
        pytest.skip("../shared/sessions is not available")
    sessions = [s for s in load(SHARED / "claude-code") if s.metadata["claude_code_kind"] == "main"]
    assert sessions
    for session in sessions:
        calls = [m for m in session.messages if m.role == "assistant"]
        counted = [recorded_input_tokens(m) for m in calls]
        assert sum(c is not None for c in counted) >= 0.9 * len(calls), session.metadata["source"]
        assert all(c is None or c > 0 for c in counted)
        usage = next(m.metadata["usage"] for m in calls if m.metadata.get("usage"))
        assert set(usage) == {"input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens"}


@pytest.mark.shared
def test_shared_folder_walk() -> None:
    if not SHARED.is_dir():
        pytest.skip("../shared/sessions is not available")
    results = [r for folder in _readable_folders() for r in iter_load(folder)]
    assert all(r.error is None for r in results), [str(r.error) for r in results if r.error]
    assert len(results) == len(_shared_files())
    formats = {s.format for r in results for s in r.sessions}
    assert formats == set(FORMATS) - {"anthropic", "workbench"}


def test_a_walk_of_several_paths_reads_each_real_file_once_and_names_what_it_passes_over(tmp_path: Path) -> None:
    chat = write_json(tmp_path / "a" / "chat.json", [{"role": "user", "content": "hi"}])
    (tmp_path / "a" / "package.json").write_text('{"name": "x"}')
    (tmp_path / "a" / "notes.txt").write_text("not a session")
    (tmp_path / "a" / ".git").mkdir()
    write_json(tmp_path / "a" / ".git" / "hidden.json", [])
    (tmp_path / "b").mkdir()
    os.symlink(chat, tmp_path / "b" / "link.json")
    given = [str(tmp_path / "a"), str(tmp_path / "b"), str(chat), str(tmp_path / "missing.json")]

    assert list(candidate_files(given)) == [(str(chat), str(tmp_path / "a")), (str(tmp_path / "missing.json"), None)]
    ignored = {os.path.relpath(path, tmp_path): why for path, why in ignored_files(given)}
    assert set(ignored) == {os.path.join("a", name) for name in (".git", "package.json", "notes.txt")}
    assert "folder skipped" in ignored[os.path.join("a", ".git")]
    assert "configuration file" in ignored[os.path.join("a", "package.json")]
    assert "not a session file type" in ignored[os.path.join("a", "notes.txt")]


@pytest.mark.parametrize(
    ("given", "expected"),
    [("auto", "auto"), (" AUTO ", "auto"), ("openai-chat", "openai"), ("Claude", "claude-code"), ("codex", "codex")],
)
def test_format_name_resolves_aliases(given: str, expected: str) -> None:
    assert format_name(given, "") == expected


def test_format_name_rejects_an_unknown_format_naming_the_file() -> None:
    with pytest.raises(FormatError, match="unknown format 'nope'") as info:
        format_name("nope", "some/file.json")
    assert "some/file.json" in str(info.value)


_SNIFF_PIECES = st.sampled_from(
    ['"kind"', '"role"', '"role_x"', "\\", '"', ":", " ", "\n", '"Action"', "kind", "x", '"ro', 'le"']
)


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(_SNIFF_PIECES, max_size=30))
def test_the_sniffers_key_tests_answer_as_their_patterns_alone(pieces: list[str]) -> None:
    """`has_key`/`has_value` skip the pattern when a quoted name is not in the text at all: the answers
    are those of the pattern searched always."""
    import re

    text = "".join(pieces)
    names = ("kind", "role")
    key_pattern = r'(?<!\\)"(?:kind|role)"\s*:'
    value_pattern = r'(?<!\\)"kind"\s*:\s*"(?:role|Action)"'
    assert has_key(text, *names) == (re.search(key_pattern, text) is not None)
    assert has_value(text, "kind", "role", "Action") == (re.search(value_pattern, text) is not None)
