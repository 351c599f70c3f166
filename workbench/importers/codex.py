"""Codex CLI rollouts (`~/.codex/sessions/**/rollout-*.jsonl`), one session per file.

Lines are `{timestamp, type, payload}` (older rollouts write the items without the wrapper):
- `session_meta` → session metadata; its `base_instructions` text → a leading system message;
- `turn_context` → the model used from then on;
- `response_item`: `message` (user → user, developer/system → system, assistant → assistant
  text), `reasoning` (summary text → metadata `thinking`), `function_call` / `custom_tool_call`
  / `local_shell_call` / `web_search_call` → tool calls, `*_output` → tool results. Consecutive
  assistant-side items form one assistant message. A `web_search_call` has no recorded output,
  so it gets the no-result tool message; every message keeps its line's `timestamp`;
- `event_msg` `token_count` → `last_token_usage` (normalised) as the usage of the latest
  assistant message, `total_token_usage` as the session's recorded totals; other events
  duplicate response items and are skipped;
- `compacted` → an entry of `metadata["recorded_compactions"]` (the summary is `message`;
  `tokens_before` is the input plus output of the last recorded `token_count`, the context the
  compaction replaced; the rollout does not say what triggered it). The summary is not a
  message of the session: `replacement_history` is what Codex continued from, and the
  session keeps the original history instead.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import FormatError
from ..session import Message, Session, ToolCall
from ._common import (
    TurnBuilder,
    as_dict,
    as_list,
    as_str,
    build_session,
    call_usage,
    clean_usage,
    compaction_marker,
    content_text,
    dumps_args,
    first_record,
    frozen,
    has_key,
    has_value,
    head_text,
    image_part,
    iter_jsonl,
    simplify_parts,
    text_part,
)

FORMAT = "codex"
EXPECTED = "Codex rollout lines ({timestamp, type, payload})"
_LINE_TYPES = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
_ITEM_TYPES = (
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "web_search_call",
)
_ASSISTANT_ITEMS = ("reasoning", "function_call", "custom_tool_call", "local_shell_call", "web_search_call")


def detect(path: str, head: bytes | str) -> bool:
    """JSONL whose first line is a Codex rollout line (wrapped, or an old-style header)."""
    text = head_text(head)
    if not text.startswith("{"):
        return False
    record = first_record(text)
    if record is not None:
        if record.get("type") in _LINE_TYPES and "payload" in record:
            return True
        if "type" not in record and "id" in record and "timestamp" in record and "instructions" in record:
            return True
        return False
    return has_value(text, "type", *_LINE_TYPES) and has_key(text, "payload")


def load(path: str) -> list[Session]:
    """The rollout as one session."""
    builder = TurnBuilder()
    state: dict[str, Any] = {"model": None, "in_turn": False, "turn_key": 0}
    meta: dict[str, Any] = {}
    for number, record in iter_jsonl(path, EXPECTED):
        if not isinstance(record, dict):
            raise FormatError(path, "the line is not a JSON object", line=number, expected=EXPECTED)
        kind = record.get("type")
        payload = record.get("payload")
        if payload is None and kind in _ITEM_TYPES:
            kind, payload = "response_item", record
        if payload is None and "instructions" in record and number == 1:
            kind, payload = "session_meta", record
        if kind not in _LINE_TYPES:
            continue
        if not isinstance(payload, dict):
            raise FormatError(path, f"the {kind} line has no 'payload' object", line=number, expected=EXPECTED)
        if kind == "session_meta":
            _session_meta(builder, payload, meta)
        elif kind == "turn_context":
            if isinstance(payload.get("model"), str):
                state["model"] = payload["model"]
                meta.setdefault("model", payload["model"])
        elif kind == "event_msg":
            _event(builder, payload, meta, state)
        elif kind == "compacted":
            builder.end_turn()
            _compacted(builder, payload, state, record.get("timestamp"))
            state["in_turn"] = False
        else:
            _item(path, builder, payload, state, number, record.get("timestamp"))
    messages = builder.messages()
    if not messages:
        raise FormatError(path, "the rollout holds no messages", expected=EXPECTED)
    return [build_session(messages, FORMAT, metadata=meta)]


def _session_meta(builder: TurnBuilder, payload: dict[str, Any], meta: dict[str, Any]) -> None:
    for key, name in (
        ("id", "session_id"),
        ("cwd", "cwd"),
        ("cli_version", "version"),
        ("originator", "originator"),
        ("model_provider", "model_provider"),
        ("timestamp", "started_at"),
    ):
        if payload.get(key) is not None and name not in meta:
            meta[name] = payload[key]
    base = payload.get("base_instructions")
    text = base.get("text") if isinstance(base, dict) else base
    if isinstance(text, str) and text.strip() and len(builder) == 0:
        builder.add(Message(role="system", content=text))


def _event(builder: TurnBuilder, payload: dict[str, Any], meta: dict[str, Any], state: dict[str, Any]) -> None:
    if payload.get("type") != "token_count":
        return
    info = as_dict(payload.get("info"))
    last = call_usage(info.get("last_token_usage"))
    turn = builder.last_turn
    if last and turn is not None:
        turn.metadata["usage"] = last
    if last:
        state["context_tokens"] = sum(last.values())
    total = clean_usage(info.get("total_token_usage"))
    if total:
        meta["recorded_totals"] = total
    if isinstance(info.get("model_context_window"), int):
        meta["context_window"] = info["model_context_window"]


def _compacted(builder: TurnBuilder, payload: dict[str, Any], state: dict[str, Any], timestamp: Any) -> None:
    trigger = payload.get("trigger")
    builder.add(
        compaction_marker(
            trigger=trigger if isinstance(trigger, str) else None,
            tokens_before=state.get("context_tokens"),
            summary=as_str(payload.get("message")),
            timestamp=timestamp,
            replacement_history_length=len(as_list(payload.get("replacement_history"))) or None,
        )
    )


def _item(
    path: str, builder: TurnBuilder, item: dict[str, Any], state: dict[str, Any], line: int, timestamp: Any
) -> None:
    kind = item.get("type")
    role = item.get("role")
    assistant_side = kind in _ASSISTANT_ITEMS or (kind == "message" and role == "assistant")
    if assistant_side:
        if not state["in_turn"]:
            state["turn_key"] += 1
            state["in_turn"] = True
        meta = {"timestamp": timestamp, "model": state["model"]}
        turn = builder.assistant(key=("turn", state["turn_key"]), metadata=meta)
        if kind == "message":
            turn.texts.append(content_text(item.get("content")))
        elif kind == "reasoning":
            summary = "\n".join(content_text(as_dict(s).get("text")) for s in as_list(item.get("summary")))
            if summary.strip():
                previous = turn.metadata.get("thinking")
                turn.metadata["thinking"] = f"{previous}\n\n{summary}" if previous else summary
        else:
            builder.add_call(turn, _call(item))
        return
    state["in_turn"] = False
    builder.end_turn()
    if kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
        builder.result(
            as_str(item.get("call_id")) or None,
            _output(item.get("output")),
            metadata={"timestamp": timestamp} if timestamp else None,
        )
    elif kind == "message":
        content = _content(item.get("content"))
        mapped = "user" if role == "user" else "system" if role in ("developer", "system") else None
        if mapped is None:
            raise FormatError(
                path,
                f"a message item has role {role!r}",
                line=line,
                expected="role user, developer, system or assistant",
            )
        builder.add(
            Message(role=mapped, content=frozen(content), metadata={"timestamp": timestamp} if timestamp else {})
        )


def _call(item: dict[str, Any]) -> ToolCall:
    kind = item.get("type")
    call_id = as_str(item.get("call_id") or item.get("id"))
    if kind == "function_call":
        return ToolCall(id=call_id, name=as_str(item.get("name")), arguments=dumps_args(item.get("arguments")))
    if kind == "custom_tool_call":
        return ToolCall(
            id=call_id,
            name=as_str(item.get("name")),
            arguments=json.dumps({"input": item.get("input")}, ensure_ascii=False),
        )
    if kind == "local_shell_call":
        return ToolCall(id=call_id, name="local_shell", arguments=dumps_args(item.get("action")))
    return ToolCall(id=call_id, name="web_search", arguments=dumps_args(item.get("action")))


def _output(value: Any) -> str:
    if isinstance(value, dict):
        return as_str(value.get("content", value.get("output", value)))
    return content_text(value) if isinstance(value, list) else as_str(value)


def _content(value: Any) -> str | list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in as_list(value):
        if not isinstance(part, dict):
            parts.append(text_part(as_str(part)))
        elif part.get("type") == "input_image":
            parts.append(image_part(as_str(part.get("image_url"))))
        else:
            parts.append(text_part(as_str(part.get("text"))))
    if isinstance(value, str):
        return value
    return simplify_parts(parts) if parts else ""
