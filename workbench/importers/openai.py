"""OpenAI chat-completions message lists.

Accepted layouts:
- a JSON array of messages (one session);
- a JSON array of `{"messages": [...]}` objects (one session each);
- a JSON object with `messages` (a request, a fine-tuning example, or a LiteLLM request log
  with `tools`, `kwargs` and `response`; the response's message is appended as the final
  assistant message with its usage and finish_reason); `body`/`request` wrappers (batch API
  lines) are unwrapped;
- JSONL whose lines are such objects (one session per line, streamed), or whose lines are
  single messages (one session for the whole file).

Roles `developer` → system and `function` (legacy) → tool; any other unknown role is an error.
Extra keys `importance`, `origin` and `metadata` (the workbench's own export) are kept.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import closing
from typing import Any

from ..errors import FormatError
from ..session import Message, Session, ToolCall
from ._common import (
    LineRange,
    as_dict,
    as_list,
    build_session,
    call_usage,
    dumps_args,
    finish_reason,
    frozen,
    has_key,
    head_text,
    iter_jsonl,
    json_layout,
    openai_content,
    pairing_ok,
    read_json,
    repair_pairing,
)

FORMAT = "openai"
EXPECTED = "OpenAI chat messages: a list of {role, content} or an object with 'messages'"
_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}
_WRAPPERS = ("body", "request", "params")
_FOREIGN_PARTS = frozenset(
    {
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "web_search_tool_result",
        "document",
    }
)


def detect(path: str, head: bytes | str) -> bool:
    """A JSON array with `role` keys, or an object/JSONL with `messages` or `role` keys."""
    text = head_text(head)
    if text.startswith("["):
        return has_key(text, "role")
    if text.startswith("{"):
        return has_key(text, "messages", "role")
    return False


def load(path: str) -> list[Session]:
    """Every session in the file (see the module docstring for the layouts)."""
    return list(iter_sessions(path))


def iter_sessions(path: str) -> Iterator[Session]:
    """Stream the sessions of the file; JSONL files are read line by line."""
    if json_layout(path) == "jsonl":
        yield from _iter_jsonl(path)
        return
    value = read_json(path, EXPECTED)
    if isinstance(value, list):
        if not value:
            raise FormatError(path, "the list is empty", expected=EXPECTED)
        if all(isinstance(item, dict) and "role" in item for item in value):
            yield _session(path, value, {}, None, "the list")
            return
        for index, item in enumerate(value):
            record = _unwrap(item)
            if record is None:
                raise FormatError(
                    path, f"item {index} is neither a message nor an object with 'messages'", expected=EXPECTED
                )
            yield _record_session(path, record, None, f"item {index}")
        return
    record = _unwrap(value)
    if record is None:
        if isinstance(value, dict) and "role" in value:
            yield _session(path, [value], {}, None, "the object")
            return
        messages = value.get("messages") if isinstance(value, dict) else None
        problem = (
            "the JSON document has no 'messages'"
            if messages is None
            else f"the JSON document's 'messages' is a {type(messages).__name__}, not a list"
        )
        raise FormatError(path, problem, expected=EXPECTED)
    yield _record_session(path, record, None, "the object")


def _iter_jsonl(path: str) -> Iterator[Session]:
    loose: list[Any] = []
    loose_line: int | None = None
    mode: str | None = None
    for number, value in iter_jsonl(path, EXPECTED):
        if mode == "sessions":
            yield _line_session(path, number, value)
            continue
        record = _unwrap(value)
        if record is not None and mode is None:
            mode = "sessions"
            yield _record_session(path, record, number, f"line {number}")
        elif isinstance(value, dict) and "role" in value:
            mode = "messages"
            loose_line = loose_line or number
            loose.append((number, value))
        else:
            expected = "a message object with 'role' on every line" if mode == "messages" else EXPECTED
            raise _not_a_line(path, number, expected)
    if loose:
        yield _session(path, [v for _, v in loose], {}, None, "the file", lines=[n for n, _ in loose])


def _not_a_line(path: str, number: int, expected: str) -> FormatError:
    return FormatError(path, "the line is not a chat session or message", line=number, expected=expected)


def _line_session(path: str, number: int, value: Any) -> Session:
    """The session of one line of a JSONL file of sessions (every line must be one)."""
    record = _unwrap(value)
    if record is None:
        raise _not_a_line(path, number, "an object with 'messages' on every line")
    return _record_session(path, record, number, f"line {number}")


def splits(path: str) -> bool:
    """Whether the file is JSONL whose first line is a session: then every line is one, read alone
    (`iter_line_range`), so parts of the file can be read apart."""
    try:
        if json_layout(path) != "jsonl":
            return False
        with closing(iter_jsonl(path, EXPECTED)) as lines:
            first = next(lines, None)
        return first is not None and _unwrap(first[1]) is not None
    except FormatError:  # the whole-file reading reports it
        return False


def iter_line_range(path: str, lines: LineRange) -> Iterator[Session]:
    """The sessions of `lines` of a file `splits` accepts, as `iter_sessions` reads them there."""
    for number, value in iter_jsonl(path, EXPECTED, lines):
        yield _line_session(path, number, value)


def _unwrap(value: Any) -> dict[str, Any] | None:
    """The object carrying `messages` (itself or a batch/log wrapper), or None."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("messages"), list):
        return value
    for key in _WRAPPERS:
        inner = value.get(key)
        if isinstance(inner, dict) and isinstance(inner.get("messages"), list):
            merged = dict(inner)
            for extra in ("response", "custom_id", "id", "timestamp"):
                if extra in value and extra not in merged:
                    merged[extra] = value[extra]
            return merged
    return None


def _record_session(path: str, record: Mapping[str, Any], line: int | None, where: str) -> Session:
    messages = list(record["messages"])
    if not messages:
        raise FormatError(path, f"{where}: 'messages' is empty", line=line, expected="at least one message")
    kwargs = as_dict(record.get("kwargs"))
    response = record.get("response")
    tail: dict[str, Any] | None = _response_message(response) if response is not None else None
    if tail is not None:
        messages.append(tail)
    tools = as_list(record.get("tools")) or as_list(kwargs.get("tools"))
    response_model = as_dict(response).get("model") if isinstance(response, dict) else None
    meta: dict[str, Any] = {
        "model": record.get("model") or kwargs.get("model") or response_model,
        "source_line": line,
        "record_id": record.get("custom_id") or record.get("id"),
        "cost": record.get("cost") if isinstance(record.get("cost"), (int, float)) else None,
        "context_window": record.get("context_window") if isinstance(record.get("context_window"), int) else None,
        "timestamp": record.get("timestamp") if isinstance(record.get("timestamp"), (int, float, str)) else None,
    }
    return _session(path, messages, meta, line, where, tools=tools)


def _response_message(response: Any) -> dict[str, Any] | None:
    """The assistant message of a recorded completion (with usage/finish_reason/model)."""
    if isinstance(response, str):
        return {"role": "assistant", "content": response}
    if not isinstance(response, dict):
        return None
    if isinstance(response.get("body"), dict) and "choices" in response["body"]:
        response = response["body"]
    choices = as_list(response.get("choices"))
    if choices and isinstance(choices[0], dict):
        choice = choices[0]
        message = dict(as_dict(choice.get("message")))
        message.setdefault("role", "assistant")
        if choice.get("finish_reason"):
            message["finish_reason"] = choice["finish_reason"]
    elif "role" in response:
        message = dict(response)
    else:
        return None
    if "usage" in response:
        message["usage"] = response["usage"]
    if response.get("model"):
        message["model"] = response["model"]
    return message


def _session(
    path: str,
    raw_messages: list[Any],
    meta: dict[str, Any],
    line: int | None,
    where: str,
    *,
    tools: list[Any] | None = None,
    lines: list[int] | None = None,
) -> Session:
    if lines:
        messages = [_message(path, raw, lines[i], "the message") for i, raw in enumerate(raw_messages)]
    else:
        messages = [_message(path, raw, line, where, i) for i, raw in enumerate(raw_messages)]
    if not pairing_ok(messages):
        messages = repair_pairing(messages)
    return build_session(messages, FORMAT, tools=tools or (), metadata=meta)


def _message(path: str, raw: Any, line: int | None, where: str, index: int | None = None) -> Message:
    """One OpenAI message dict as a Message (FormatError naming the message when malformed).

    `where`/`index` locate the message for error texts; they are only formatted on error.
    """

    def fail(problem: str, expected: str) -> FormatError:
        place = where if index is None else f"{where}, message {index}"
        return FormatError(path, f"{place} {problem}", line=line, expected=expected)

    if not isinstance(raw, dict):
        raise fail("is not an object", "a message object")
    raw_role = raw.get("role")
    role = _ROLES.get(raw_role) if isinstance(raw_role, str) else None
    if role is None:
        raise fail(f"has role {raw.get('role')!r}", "role system, developer, user, assistant, tool or function")
    metadata = dict(raw["metadata"]) if isinstance(raw.get("metadata"), dict) else {}
    calls: tuple[ToolCall, ...] = ()
    if role == "assistant":
        raw_calls = raw.get("tool_calls")
        if raw_calls:
            if not isinstance(raw_calls, list) or not all(isinstance(c, dict) for c in raw_calls):
                raise fail("has malformed 'tool_calls'", "a list of {id, type, function: {name, arguments}}")
            calls = tuple(_tool_call(c) for c in raw_calls)
        elif isinstance(raw.get("function_call"), dict):
            calls = (_tool_call({"function": raw["function_call"]}),)
        usage = call_usage(raw.get("usage"))
        if usage:
            metadata["usage"] = usage
        reason = finish_reason(raw.get("finish_reason"))
        if reason:
            metadata["finish_reason"] = reason
        if isinstance(raw.get("model"), str):
            metadata["model"] = raw["model"]
    content = raw.get("content")
    if isinstance(content, list):
        types = (p.get("type") for p in content if isinstance(p, dict))
        foreign = next((t for t in types if t in _FOREIGN_PARTS), None)
        if foreign is not None:
            raise fail(
                f"has a content part of type {foreign!r} (Anthropic's blocks, not OpenAI chat parts)",
                "OpenAI content parts (text, image_url, input_audio, file, refusal)",
            )
    tool_call_id = raw.get("tool_call_id") if role == "tool" else None
    name = raw.get("name")
    try:
        return Message(
            role=role,
            content=frozen(openai_content(content)),
            tool_calls=calls,
            tool_call_id=str(tool_call_id) if tool_call_id is not None else None,
            name=name if isinstance(name, str) else None,
            origin=raw.get("origin", "original"),
            importance=float(raw.get("importance", 0.0) or 0.0),
            metadata=metadata,
        )
    except (TypeError, ValueError) as exc:
        raise fail(f"is invalid: {exc}", "an OpenAI chat message") from None


def _tool_call(raw: dict[str, Any]) -> ToolCall:
    function = as_dict(raw.get("function"))
    name = function.get("name", raw.get("name"))
    arguments = function.get("arguments", raw.get("arguments"))
    return ToolCall(id=str(raw.get("id") or ""), name=str(name or ""), arguments=dumps_args(arguments))
