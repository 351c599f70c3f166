"""Anthropic Messages API requests (optionally with their recorded response).

A request `{model, system, messages, tools}` (or a JSON array / JSONL of them, or batch lines
`{custom_id, params}`) becomes one session. Conversion to the OpenAI shape:
- `system` (a string or text blocks) → a leading system message;
- `text` blocks → text content; `image` blocks → `image_url` parts (base64 as data URLs);
- `tool_use` / `server_tool_use` → `tool_calls` with JSON-string arguments;
- `tool_result` blocks (and server tool results) → `tool` messages right after the call;
- `thinking` → the assistant message's metadata `thinking` (text); redacted thinking is counted
  in metadata `redacted_thinking`; signatures are dropped;
- a `response` object is appended as the final assistant message with its usage and
  `finish_reason` (`max_tokens` → `length`).
Tools `{name, description, input_schema}` become OpenAI function schemas.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import FormatError
from ..session import Message, Session, ToolCall
from ._common import (
    TurnBuilder,
    anthropic_image,
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
    iter_jsonl,
    json_layout,
    openai_content,
    read_json,
    simplify_parts,
    text_part,
)

FORMAT = "anthropic"
EXPECTED = "an Anthropic Messages request: {model, system, messages: [{role, content}], tools}"
_RESULT_TYPES = (
    "tool_result",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "mcp_tool_result",
)
_CALL_TYPES = ("tool_use", "server_tool_use", "mcp_tool_use")


def detect(path: str, head: bytes | str) -> bool:
    """An object (or JSONL) with `messages` plus an Anthropic marker: a top-level-style
    `system` key, `anthropic_version`, `input_schema`, or tool_use/tool_result/thinking blocks."""
    text = head_text(head)
    if not text.startswith(("{", "[")) or not has_key(text, "messages"):
        return False
    return has_key(text, "system", "anthropic_version", "input_schema") or has_value(
        text, "type", "tool_use", "tool_result", "thinking", "redacted_thinking"
    )


def load(path: str) -> list[Session]:
    """One session per request in the file."""
    return list(iter_sessions(path))


def iter_sessions(path: str) -> Iterator[Session]:
    """Stream the sessions; JSONL files are read line by line."""
    if json_layout(path) == "jsonl":
        for number, value in iter_jsonl(path, EXPECTED):
            yield _request_session(path, value, number, f"line {number}")
        return
    value = read_json(path, EXPECTED)
    if isinstance(value, list):
        if not value:
            raise FormatError(path, "the list is empty", expected=EXPECTED)
        for index, item in enumerate(value):
            yield _request_session(path, item, None, f"item {index}")
        return
    yield _request_session(path, value, None, "the request")


def _request_session(path: str, value: Any, line: int | None, where: str) -> Session:
    request = value
    if isinstance(value, dict) and not isinstance(value.get("messages"), list):
        for key in ("params", "body", "request"):
            if isinstance(value.get(key), dict) and isinstance(value[key].get("messages"), list):
                request = dict(value[key])
                if "response" in value:
                    request.setdefault("response", value["response"])
                break
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        raise FormatError(path, f"{where} has no 'messages' list", line=line, expected=EXPECTED)
    builder = TurnBuilder()
    system = request.get("system")
    if system:
        builder.add(Message(role="system", content=_system_text(system)))
    for index, raw in enumerate(request["messages"]):
        add_message(path, builder, raw, line, f"{where}, message {index}")
    response = request.get("response")
    if isinstance(response, dict) and isinstance(response.get("content"), (list, str)):
        add_message(
            path,
            builder,
            {**response, "role": "assistant"},
            line,
            f"{where}, response",
            metadata=response_metadata(response),
        )
    messages = builder.messages()
    if not messages:
        raise FormatError(path, f"{where} has no messages", line=line, expected=EXPECTED)
    meta = {
        "model": request.get("model") if isinstance(request.get("model"), str) else None,
        "source_line": line,
        "record_id": value.get("custom_id") if isinstance(value, dict) else None,
    }
    return build_session(messages, FORMAT, tools=convert_tools(as_list(request.get("tools"))), metadata=meta)


def _system_text(system: Any) -> str:
    if isinstance(system, list):
        return "\n\n".join(as_str(as_dict(b).get("text")) if isinstance(b, dict) else as_str(b) for b in system)
    return as_str(system)


def convert_tools(tools: list[Any]) -> list[dict[str, Any]]:
    """Anthropic tool definitions as OpenAI function schemas (others passed through)."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if "input_schema" in tool or ("name" in tool and "function" not in tool):
            function = {
                "name": as_str(tool.get("name")),
                "description": as_str(tool.get("description")),
                "parameters": as_dict(tool.get("input_schema")) or {"type": "object", "properties": {}},
            }
            out.append({"type": "function", "function": function})
        else:
            out.append(tool)
    return out


def tool_result_content(value: Any) -> str | list[dict[str, Any]]:
    """A tool_result's content: text, or parts when it holds images."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list):
        parts: list[dict[str, Any]] = []
        for block in value:
            if isinstance(block, dict) and block.get("type") == "image":
                parts.append(anthropic_image(block))
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(text_part(block["text"]))
            else:
                parts.append(text_part(as_str(block)))
        return simplify_parts(parts)
    return as_str(value)


def add_message(
    path: str,
    builder: TurnBuilder,
    raw: Any,
    line: int | None,
    where: str,
    *,
    key: Any = None,
    metadata: Mapping[str, Any] | None = None,
    between_lines: bool = False,
) -> None:
    """Feed one Anthropic message (`{role, content}`) into `builder`.

    User messages: tool_result blocks become tool results (with the message's `timestamp`),
    the other blocks one user message (`between_lines`: see `TurnBuilder.add`).
    Assistant messages: one turn (merged with an earlier one when `key` repeats).
    """
    if not isinstance(raw, dict):
        raise FormatError(path, f"{where} is not an object", line=line, expected="{role, content}")
    role = raw.get("role")
    content = raw.get("content")
    meta = dict(metadata or {})
    if role == "assistant":
        add_assistant(builder, content, key=key, metadata=meta)
        return
    if role not in ("user", "system"):
        raise FormatError(path, f"{where} has role {role!r}", line=line, expected="role user or assistant")
    if isinstance(content, list):
        parts: list[dict[str, Any]] = []
        for block in content:
            if not isinstance(block, dict):
                parts.append(text_part(as_str(block)))
                continue
            kind = block.get("type")
            if kind in _RESULT_TYPES:
                result_meta = _timestamp(meta)
                if block.get("is_error"):
                    result_meta["is_error"] = True
                builder.result(
                    as_str(block.get("tool_use_id")) or None,
                    tool_result_content(block.get("content")),
                    metadata=result_meta,
                )
            elif kind == "image":
                parts.append(anthropic_image(block))
            elif kind == "text":
                parts.append(text_part(as_str(block.get("text"))))
            elif kind in ("thinking", "redacted_thinking"):
                continue
            else:
                parts.append(dict(block))
        if not parts:
            return
        body: Any = simplify_parts(parts)
    else:
        body = openai_content(content) if content is not None else ""
    builder.add(Message(role=role, content=body, metadata=meta), between_lines=between_lines)


def _timestamp(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The `timestamp` of a message's metadata, for the tool results it carries."""
    return {"timestamp": metadata["timestamp"]} if metadata.get("timestamp") else {}


def add_assistant(
    builder: TurnBuilder, content: Any, *, key: Any = None, metadata: Mapping[str, Any] | None = None
) -> None:
    """One assistant message's blocks as a turn: text, calls, thinking and server results."""
    meta = dict(metadata or {})
    texts: list[str] = []
    calls: list[ToolCall] = []
    results: list[dict[str, Any]] = []
    thinking: list[str] = []
    redacted = 0
    if isinstance(content, str):
        texts.append(content)
    for block in as_list(content):
        if not isinstance(block, dict):
            texts.append(as_str(block))
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(as_str(block.get("text")))
        elif kind in _CALL_TYPES:
            calls.append(
                ToolCall(
                    id=as_str(block.get("id")),
                    name=as_str(block.get("name")),
                    arguments=dumps_args(block.get("input", {})),
                )
            )
        elif kind in _RESULT_TYPES:
            results.append(block)
        elif kind == "thinking":
            thinking.append(as_str(block.get("thinking")))
        elif kind == "redacted_thinking":
            redacted += 1
    turn = builder.assistant(key=key, metadata=meta)
    turn.texts.extend(texts)
    for call in calls:
        builder.add_call(turn, call)
    if thinking:
        previous = turn.metadata.get("thinking")
        joined = "\n\n".join(t for t in thinking if t)
        turn.metadata["thinking"] = f"{previous}\n\n{joined}" if previous else joined
    if redacted:
        turn.metadata["redacted_thinking"] = turn.metadata.get("redacted_thinking", 0) + redacted
    for block in results:
        builder.result(
            as_str(block.get("tool_use_id")) or None,
            tool_result_content(block.get("content")),
            metadata=_timestamp(meta),
        )


def response_metadata(message: Mapping[str, Any]) -> dict[str, Any]:
    """Usage, finish_reason, model and id of a recorded Anthropic response message."""
    meta: dict[str, Any] = {}
    usage = call_usage(message.get("usage"))
    if usage:
        meta["usage"] = usage
    reason = finish_reason(message.get("stop_reason"))
    if reason:
        meta["finish_reason"] = reason
        meta["stop_reason"] = message.get("stop_reason")
    if isinstance(message.get("model"), str):
        meta["model"] = message["model"]
    return meta
