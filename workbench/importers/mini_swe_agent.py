"""mini-swe-agent trajectories (`*.traj.json`), one session per file.

Two shapes:
- newer: `{info: {model_stats, config, exit_status, submission}, messages: [...],
  trajectory_format: "mini-swe-agent-1.1", instance_id}`; assistant messages may carry
  `extra.response` (the raw completion: its usage, finish_reason and model go to message
  metadata); user messages with `extra.interrupt_type` (format-error retries) keep it in
  metadata;
- older: a bare list of `{role, content}` with actions in fenced bash blocks.

The final `exit` message is not a model message: its content and `extra` go to session
metadata `exit` (`{"content", "exit_status", "submission"}`), not into the message list.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import FormatError
from ..session import Session, ToolCall
from ._common import (
    TurnBuilder,
    as_dict,
    as_list,
    as_str,
    build_session,
    call_usage,
    dumps_args,
    finish_reason,
    has_key,
    has_value,
    head_text,
    new_message,
    openai_content,
    read_json,
)

FORMAT = "mini-swe-agent"
EXPECTED = "a mini-swe-agent trajectory: {info, messages: [{role, content}], trajectory_format} or a message list"
_MARKERS = ("mini_version", "trajectory_format")
_BARE_KEYS = frozenset({"role", "content", "extra", "timestamp"})


def detect(path: str, head: bytes | str) -> bool:
    """A head with mini-swe-agent markers, or a `.traj.json` file that is not a SWE-agent
    trajectory (no `history` + `trajectory`)."""
    text = head_text(head)
    if not text.startswith(("{", "[")):
        return False
    if has_key(text, *_MARKERS):
        return True
    if path.endswith(".traj.json"):
        return not (has_key(text, "history") and has_key(text, "trajectory", "message_type"))
    return has_value(text, "agent_type", "minisweagent.agents.default.DefaultAgent") or "mswea_bash_command" in text


def load(path: str) -> list[Session]:
    """The trajectory as one session."""
    data = read_json(path, EXPECTED)
    if isinstance(data, list):
        raw_messages, info, extra_meta = data, {}, {}
        for index, raw in enumerate(data):
            extra_keys = sorted(set(raw) - _BARE_KEYS) if isinstance(raw, dict) else []
            if extra_keys or (isinstance(raw, dict) and not isinstance(raw.get("content"), str)):
                problem = f"has key {extra_keys[0]!r}" if extra_keys else "has no text content"
                raise FormatError(
                    path,
                    f"message {index} {problem}: not a bare mini-swe-agent trajectory",
                    expected="a list of {role, content} messages with text content",
                )
    elif (
        isinstance(data, dict)
        and isinstance(data.get("messages"), list)
        and ("info" in data or any(k in data for k in _MARKERS))
    ):
        raw_messages, info = data["messages"], as_dict(data.get("info"))
        extra_meta = {"trajectory_format": data.get("trajectory_format"), "instance_id": data.get("instance_id")}
    else:
        raise FormatError(
            path, "no 'messages' list with 'info' or 'trajectory_format' in the trajectory", expected=EXPECTED
        )
    builder = TurnBuilder()
    exit_record: dict[str, Any] | None = None
    for index, raw in enumerate(raw_messages):
        where = f"message {index}"
        if not isinstance(raw, dict):
            raise FormatError(path, f"{where} is not an object", expected="{role, content}")
        if raw.get("role") == "exit":
            extra = as_dict(raw.get("extra"))
            exit_record = {
                "content": as_str(raw.get("content")),
                "exit_status": extra.get("exit_status"),
                "submission": extra.get("submission"),
            }
            continue
        _message(path, builder, raw, where)
    messages = builder.messages()
    if not messages:
        raise FormatError(path, "the trajectory holds no messages", expected=EXPECTED)
    stats = as_dict(info.get("model_stats"))
    model_config = as_dict(as_dict(info.get("config")).get("model"))
    meta: dict[str, Any] = {
        **extra_meta,
        "model": model_config.get("model_name") if isinstance(model_config.get("model_name"), str) else None,
        "exit_status": info.get("exit_status"),
        "submission": info.get("submission") if isinstance(info.get("submission"), str) else None,
        "recorded_totals": {"api_calls": stats["api_calls"]} if isinstance(stats.get("api_calls"), int) else None,
        "cost": stats.get("instance_cost") if isinstance(stats.get("instance_cost"), (int, float)) else None,
        "exit": exit_record,
    }
    if not meta.get("instance_id"):
        meta["instance_id"] = os.path.basename(path).removesuffix(".traj.json")
    return [build_session(messages, FORMAT, metadata=meta)]


def _message(path: str, builder: TurnBuilder, raw: dict[str, Any], where: str) -> None:
    role = raw.get("role")
    extra = as_dict(raw.get("extra"))
    content = openai_content(raw.get("content"))
    meta: dict[str, Any] = {}
    if role == "assistant":
        response = as_dict(extra.get("response"))
        usage = call_usage(response.get("usage") or raw.get("usage"))
        if usage:
            meta["usage"] = usage
        choices = as_list(response.get("choices"))
        reason = finish_reason(as_dict(choices[0]).get("finish_reason")) if choices else None
        if reason:
            meta["finish_reason"] = reason
        if isinstance(response.get("model"), str):
            meta["model"] = response["model"]
        calls = [_call(c) for c in as_list(raw.get("tool_calls")) if isinstance(c, dict)]
        if calls:
            turn = builder.assistant(metadata=meta)
            if isinstance(content, str):
                turn.texts.append(content)
            elif content:
                turn.parts.extend(content)
            for call in calls:
                builder.add_call(turn, call)
            return
        builder.add(new_message(path, where, None, role="assistant", content=content or "", metadata=meta))
        return
    if isinstance(extra.get("interrupt_type"), str):
        meta["interrupt_type"] = extra["interrupt_type"]
    if role == "tool":
        builder.result(as_str(raw.get("tool_call_id")) or None, content, metadata=meta)
    elif role in ("system", "user"):
        builder.add(new_message(path, where, None, role=role, content=content or "", metadata=meta))
    else:
        raise FormatError(path, f"{where} has role {role!r}", expected="role system, user, assistant, tool or exit")


def _call(raw: dict[str, Any]) -> ToolCall:
    function = as_dict(raw.get("function"))
    return ToolCall(
        id=as_str(raw.get("id")),
        name=as_str(function.get("name") or raw.get("name")),
        arguments=dumps_args(function.get("arguments", raw.get("arguments"))),
    )
