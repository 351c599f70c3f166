"""Helpers shared by the importers: reading JSON/JSONL with precise errors, content coercion,
usage cleaning, and `TurnBuilder`, which turns a stream of assistant turns, tool results and
plain messages into a correctly paired OpenAI-shaped message list.

Pairing rules (every importer goes through `TurnBuilder`, so they hold for every format):
- every tool call of an assistant message is answered by exactly one tool message placed right
  after that assistant message, in call order;
- a call whose result was never recorded gets a tool message with `NO_RESULT_TEXT` and metadata
  `{"no_result_recorded": True}`;
- a result that answers no recorded call (or answers an already answered one) becomes a `user`
  message with metadata `{"stray_tool_result": True, "tool_call_id": ..., "tool_name": ...}`,
  so its text is kept but no orphan tool message exists.
"""

from __future__ import annotations

import io
import json
import os
import re
import warnings
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError
from ..session import NO_RESULT_TEXT, Message, Session, ToolCall
from .observations import mark_observations

HEAD_BYTES = 256 * 1024
"""How much of a file the cheap format sniffers look at."""

JsonObj = dict[str, Any]


# --------------------------------------------------------------------------- reading


def read_head(path: str, size: int = HEAD_BYTES) -> bytes:
    """The first `size` bytes of the file (FormatError when it cannot be opened)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError as exc:
        raise FormatError(path, f"cannot read the file ({exc.strerror or exc})") from None


def head_text(head: bytes | str) -> str:
    """The sniffable text of a file head: decoded leniently, BOM and leading blanks removed."""
    if isinstance(head, bytes):
        head = head.decode("utf-8", errors="replace")
    return head.lstrip("\ufeff \t\r\n")


def _decode(path: str, data: bytes, line: int | None = None) -> str:
    """UTF-8 text (a BOM dropped at the start of the file) or a FormatError at the offset."""
    try:
        return data.decode("utf-8-sig" if line in (None, 1) else "utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(
            path, f"the bytes at offset {exc.start} are not valid UTF-8", line=line, expected="UTF-8 text"
        ) from None


def read_text(path: str) -> str:
    """The whole file as text; FormatError when unreadable, not UTF-8 or empty."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise FormatError(path, f"cannot read the file ({exc.strerror or exc})") from None
    text = _decode(path, data)
    if not text.strip():
        raise FormatError(path, "the file is empty", expected="a recorded session")
    return text


def _json_error(path: str, exc: json.JSONDecodeError, expected: str, line: int | None) -> FormatError:
    """A JSON syntax error located by its line/column (or, for one JSONL line, that line)."""
    if line is None:
        return FormatError(
            path, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", line=exc.lineno, expected=expected
        )
    return FormatError(path, f"invalid JSON at column {exc.colno}: {exc.msg}", line=line, expected=expected)


def loads(path: str, text: str, expected: str, line: int | None = None) -> Any:
    """`json.loads` whose errors become FormatError (JSON position, or `line` for JSONL)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _json_error(path, exc, expected, line) from None
    except RecursionError:
        raise FormatError(path, "the JSON is nested too deeply to read", line=line, expected=expected) from None


def read_json(path: str, expected: str) -> Any:
    """Parse a whole JSON document; errors name the file, line/column and what was expected."""
    return loads(path, read_text(path), expected)


@dataclass(frozen=True)
class LineRange:
    """Bytes `start` to `stop` of a JSONL file, whole lines, the first of them numbered `first_line`:
    the part of a big file one worker reads (see `split_lines`)."""

    start: int
    stop: int
    first_line: int


def split_lines(path: str, piece_bytes: int) -> Iterator[LineRange]:
    """The file cut at line ends into ranges of about `piece_bytes` (the last takes the rest), each
    numbered from its first line; lazily, so the first can be read while the rest are found."""
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise FormatError(path, f"cannot read the file ({exc.strerror or exc})") from None
    with handle:
        size = os.fstat(handle.fileno()).st_size
        start, line = 0, 1
        while start < size:
            handle.seek(min(size, start + max(1, piece_bytes)) - 1)
            handle.readline()
            stop = handle.tell()
            yield LineRange(start, stop, line)
            handle.seek(start)
            line += handle.read(stop - start).count(b"\n")
            start = stop


class IncompleteLastLine(UserWarning):
    """A JSONL file's last line has no newline and is not valid JSON: a live session whose
    recorder is still writing it. The complete lines before it are read."""

    def __init__(self, path: str, line: int):
        self.path, self.line = path, line
        super().__init__(
            f"{path}:{line}: the last line is incomplete (no newline; still being written?); "
            f"imported the {line - 1} line(s) before it"
        )


def iter_jsonl(path: str, expected: str, lines: LineRange | None = None) -> Generator[tuple[int, Any], None, None]:
    """Yield `(line_number, value)` for each non-blank line, streaming the file (or only `lines`).

    Raises FormatError (with the line number) on a line that is not JSON, and when the file
    holds no JSON line at all. A last line without a newline that is not valid JSON (a live
    recording mid-write) ends the file with an `IncompleteLastLine` warning instead.
    """
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise FormatError(path, f"cannot read the file ({exc.strerror or exc})") from None
    seen = lines is not None and lines.start > 0  # a later range: the file's JSON lines came before
    with handle:
        rows: Iterable[bytes] = handle
        first = 1
        if lines is not None:
            handle.seek(lines.start)
            rows = io.BytesIO(handle.read(lines.stop - lines.start))
            first = lines.first_line
        for number, raw in enumerate(rows, first):
            if not raw.strip():
                continue
            if not raw.endswith(b"\n") and seen:  # the last line, maybe still being written
                try:
                    value = json.loads(_decode(path, raw, number))
                except (ValueError, RecursionError):
                    warnings.warn(IncompleteLastLine(path, number), stacklevel=2)
                    return
                yield number, value
                return
            text = _decode(path, raw, number)
            seen = True
            yield number, loads(path, text, expected, line=number)
    if not seen:
        raise FormatError(path, "the file is empty", expected=expected)


def first_record(text: str) -> JsonObj | None:
    """The first JSON object of a head: the first line of JSONL, or the first element of a
    JSON array, when it is complete within the head; else None."""
    try:
        if text.startswith("{"):
            line = text.partition("\n")[0]
            value = json.loads(line)
            return value if isinstance(value, dict) else None
        if text.startswith("["):
            start = text.find("{", 1)
            if start < 0 or text[1:start].strip():
                return None
            value, _ = json.JSONDecoder().raw_decode(text, start)
            return value if isinstance(value, dict) else None
    except (ValueError, RecursionError):
        return None
    return None


def has_key(text: str, *names: str) -> bool:
    """Whether any of `names` appears as an (unescaped) JSON object key in `text`.

    The pattern is only searched for names whose quoted form is in the text at all: a substring
    test is a fast scan, and a sniffer asks this of a 256 KB head per format (most answers are no)."""
    present = [n for n in names if f'"{n}"' in text]
    if not present:
        return False
    pattern = r'(?<!\\)"(?:' + "|".join(re.escape(n) for n in present) + r')"\s*:'
    return re.search(pattern, text) is not None


def has_value(text: str, key: str, *values: str) -> bool:
    """Whether `"key": "<one of values>"` appears (unescaped) in `text` (the pattern searched only
    when the quoted key and one of the quoted values are in it, as in `has_key`)."""
    if f'"{key}"' not in text:
        return False
    present = [v for v in values if f'"{v}"' in text]
    if not present:
        return False
    pattern = r'(?<!\\)"' + re.escape(key) + r'"\s*:\s*"(?:' + "|".join(re.escape(v) for v in present) + r')"'
    return re.search(pattern, text) is not None


# --------------------------------------------------------------------------- content


def as_dict(value: Any) -> JsonObj:
    """`value` when it is a dict, else an empty dict (tolerant access to optional fields)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """`value` when it is a list, else an empty list."""
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str:
    """Text for any JSON value: strings as is, None as "", anything else as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def dumps_args(value: Any) -> str:
    """Tool-call arguments as the JSON string OpenAI expects (strings pass through)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "{}"
    return json.dumps(value, ensure_ascii=False)


def hashable(value: Any) -> Any:
    """`value` itself when it can be a dict key, else its JSON text (ids from odd input)."""
    try:
        hash(value)
    except TypeError:
        return as_str(value)
    return value


def text_part(text: str) -> JsonObj:
    return {"type": "text", "text": text}


def image_part(url: str) -> JsonObj:
    return {"type": "image_url", "image_url": {"url": url}}


def anthropic_image(block: Mapping[str, Any]) -> JsonObj:
    """An Anthropic image block as an OpenAI `image_url` part (base64 becomes a data URL)."""
    source = as_dict(block.get("source"))
    if source.get("type") == "base64":
        media = as_str(source.get("media_type")) or "image/png"
        return image_part(f"data:{media};base64,{as_str(source.get('data'))}")
    return image_part(as_str(source.get("url") or source.get("file_id") or ""))


def simplify_parts(parts: Sequence[JsonObj]) -> str | list[JsonObj]:
    """Parts as plain text when they are all text (joined by newlines), else the list itself."""
    if all(p.get("type") == "text" for p in parts):
        return "\n".join(as_str(p.get("text")) for p in parts)
    return list(parts)


def openai_content(value: Any) -> str | list[JsonObj] | None:
    """OpenAI-style content made safe for `Message`: text, None, or a list of dict parts.

    Strings inside a list become text parts; other odd values become their JSON text.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, (list, tuple)):
        parts: list[JsonObj] = []
        for part in value:
            if isinstance(part, dict):
                kind = part.get("type")
                if kind in ("text", "input_text", "output_text") and "text" in part:
                    parts.append(text_part(as_str(part.get("text"))))
                elif kind == "image" and "source" in part:
                    parts.append(anthropic_image(part))
                elif kind is None and "text" in part:
                    parts.append(text_part(as_str(part.get("text"))))
                else:
                    parts.append(dict(part))
            elif isinstance(part, str):
                parts.append(text_part(part))
            else:
                parts.append(text_part(as_str(part)))
        return parts
    return as_str(value)


def frozen(content: str | Sequence[JsonObj] | None) -> str | tuple[JsonObj, ...] | None:
    """Content as `Message` stores it (a list of parts becomes a tuple)."""
    return content if content is None or isinstance(content, str) else tuple(content)


def content_text(value: Any) -> str:
    """The text of any content value (parts' texts joined by newlines)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        texts = []
        for part in value:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "\n".join(texts)
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return str(value["text"])
    return as_str(value)


# --------------------------------------------------------------------------- usage


_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "stop": "stop",
    "tool_use": "tool_calls",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "max_tokens": "length",
    "length": "length",
    "content_filter": "content_filter",
    "refusal": "content_filter",
    "pause_turn": "stop",
    "model_context_window_exceeded": "length",
}


def finish_reason(value: Any) -> str | None:
    """A recorded stop/finish reason in OpenAI's vocabulary (`length` for max-tokens stops)."""
    if not isinstance(value, str) or not value:
        return None
    return _FINISH_REASONS.get(value, value)


def clean_usage(value: Any) -> dict[str, int] | None:
    """The integer token counts of a recorded usage record (None when there are none).

    Top-level integer fields are kept under their own names; the nested OpenAI details
    `cached_tokens` and `reasoning_tokens` are lifted to the top level.
    """
    if not isinstance(value, dict):
        return None
    usage: dict[str, int] = {}
    for key, item in value.items():
        if isinstance(item, int) and not isinstance(item, bool):
            usage[str(key)] = item
        elif isinstance(item, float) and item.is_integer() and key.endswith("tokens"):
            usage[str(key)] = int(item)
    for nested, inner in (
        ("prompt_tokens_details", "cached_tokens"),
        ("completion_tokens_details", "reasoning_tokens"),
        ("input_tokens_details", "cached_tokens"),
        ("output_tokens_details", "reasoning_tokens"),
    ):
        count = as_dict(value.get(nested)).get(inner)
        if isinstance(count, int) and not isinstance(count, bool) and inner not in usage:
            usage[inner] = count
    return usage or None


def whole_count(value: Any) -> int | None:
    """A recorded count as an int: ints, and floats holding a whole number; None for anything else
    (booleans included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def call_usage(value: Any) -> dict[str, int] | None:
    """One call's recorded usage normalised to the session model's four keys (None when the
    record holds no token count): `input_tokens` (input not read from or written to the prompt
    cache), `cache_read_input_tokens`, `cache_creation_input_tokens`, `output_tokens`.

    The vocabularies read: Anthropic (`input_tokens` excludes the cache kinds); OpenAI / LiteLLM /
    OpenHands (`prompt_tokens` is the whole input; cached reads in `prompt_tokens_details.
    cached_tokens`, `cache_read_input_tokens` or `cache_read_tokens`, cache writes in
    `cache_creation_input_tokens` or `cache_write_tokens`); Codex and the Responses API
    (`input_tokens` includes `cached_input_tokens` / `input_tokens_details.cached_tokens`).
    So the three input kinds always add up to the whole input the provider billed.
    """
    if not isinstance(value, Mapping):
        return None

    def first(*keys: str) -> int | None:
        for key in keys:
            count = whole_count(value.get(key))
            if count is not None:
                return count
        return None

    details = as_dict(value.get("prompt_tokens_details")) or as_dict(value.get("input_tokens_details"))
    output = first("output_tokens", "completion_tokens")
    prompt = first("prompt_tokens")
    read = first("cache_read_input_tokens", "cache_read_tokens", "cached_input_tokens")
    if read is None:
        read = whole_count(details.get("cached_tokens"))
    write = first("cache_creation_input_tokens", "cache_write_tokens")
    if prompt is not None:
        total_input: int | None = prompt
        includes_cache = True
    else:
        total_input = first("input_tokens")
        includes_cache = "cached_input_tokens" in value or "cached_tokens" in details
    if total_input is None and output is None:
        return None
    read, write = read or 0, write or 0
    uncached = total_input or 0
    if includes_cache:
        uncached = max(0, uncached - read - (write if prompt is not None else 0))
    return {
        "input_tokens": uncached,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write,
        "output_tokens": output or 0,
    }


def sum_usage(messages: Iterable[Message]) -> dict[str, int] | None:
    """Per-key sums of the recorded usage of assistant messages (None when none recorded)."""
    totals: dict[str, int] = {}
    for message in messages:
        usage = message.metadata.get("usage") if message.metadata else None
        if isinstance(usage, Mapping):
            for key, count in usage.items():
                if isinstance(count, int):
                    totals[key] = totals.get(key, 0) + count
    return totals or None


# --------------------------------------------------------------------------- turns


@dataclass
class Turn:
    """One assistant message under construction: its texts, calls and the results seen."""

    texts: list[str] = field(default_factory=list)
    parts: list[JsonObj] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    results: dict[str, Message] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def content(self) -> str | list[JsonObj] | None:
        texts = [t for t in self.texts if t and t.strip()]
        if self.parts:
            return [text_part(t) for t in texts] + self.parts
        if texts:
            return "\n\n".join(texts)
        return None if self.calls else ""


class TurnBuilder:
    """Collects messages in recording order and emits a correctly paired message list.

    `assistant(key=...)` with a key seen before (since the last plain user message) extends
    that turn instead of starting one: this merges a response recorded over several lines.
    Tool results are kept with their turn, so a merged response is always followed by the
    results of all its calls, before any message added after its first line.
    """

    def __init__(self) -> None:
        self._items: list[Message | Turn] = []
        self._by_key: dict[Any, Turn] = {}
        self._by_call: dict[str, Turn] = {}
        self._last_turn: Turn | None = None
        self._generated = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def last_turn(self) -> Turn | None:
        """The most recently started or extended assistant turn."""
        return self._last_turn

    def knows(self, key: Any) -> bool:
        """Whether `assistant(key=key)` would extend an existing turn."""
        return hashable(key) in self._by_key

    def end_turn(self) -> None:
        """Forget merge keys so that the next `assistant()` call starts a new turn."""
        self._by_key.clear()

    def add(self, message: Message, *, between_lines: bool = False) -> None:
        """Append a message without tool calls (system/user/assistant text).

        A user message ends the turns being merged, unless `between_lines`: a message the
        recording writes between the lines of one response but that was not sent to the model
        in between (it still comes out after that response and its tool results).
        """
        if message.role == "user" and not between_lines:
            self._by_key.clear()
        self._items.append(message)

    def assistant(
        self,
        *,
        key: Any = None,
        text: str | None = None,
        parts: Sequence[JsonObj] = (),
        calls: Iterable[ToolCall] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> Turn:
        """Start (or, for a known `key`, extend) an assistant turn and return it."""
        key = hashable(key)
        turn = self._by_key.get(key) if key is not None else None
        if turn is None:
            turn = Turn()
            self._items.append(turn)
            if key is not None:
                self._by_key[key] = turn
        if text:
            turn.texts.append(text)
        turn.parts.extend(parts)
        for call in calls:
            self.add_call(turn, call)
        if metadata:
            for name, value in metadata.items():
                if name == "timestamp" and "timestamp" in turn.metadata:
                    turn.metadata["end_timestamp"] = value
                elif value is not None:
                    turn.metadata[name] = value
        self._last_turn = turn
        return turn

    def add_call(self, turn: Turn, call: ToolCall) -> ToolCall:
        """Add a call to `turn`, giving it a unique id when it has none or repeats one."""
        call_id = call.id
        taken = {c.id for c in turn.calls}
        if not call_id or call_id in taken:
            base = call_id or "call"
            self._generated += 1
            call_id = f"{base}__{self._generated}"
            while call_id in taken:
                self._generated += 1
                call_id = f"{base}__{self._generated}"
            call = ToolCall(id=call_id, name=call.name, arguments=call.arguments)
        turn.calls.append(call)
        if call.id not in self._by_call or self._by_call[call.id] is not turn:
            self._by_call[call.id] = turn
        return call

    def result(
        self, call_id: str | None, content: Any, *, name: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> None:
        """Record a tool result; it joins the turn that made the call, or becomes a stray."""
        content = openai_content(content)
        meta = dict(metadata or {})
        turn = self._by_call.get(call_id) if call_id else None
        if turn is None and not call_id:
            call_id = self._unanswered_in_last_turn(name)
            turn = self._last_turn if call_id else None
        if turn is not None and call_id is not None and call_id not in turn.results:
            call_name = next((c.name for c in turn.calls if c.id == call_id), name)
            turn.results[call_id] = Message(
                role="tool",
                content=content if content is not None else "",
                tool_call_id=call_id,
                name=call_name or None,
                metadata=meta,
            )
            return
        meta.update({"stray_tool_result": True, "tool_call_id": call_id, "tool_name": name})
        self._items.append(Message(role="user", content=content if content is not None else "", metadata=meta))

    def _unanswered_in_last_turn(self, name: str | None) -> str | None:
        turn = self._last_turn
        if turn is None:
            return None
        for call in turn.calls:
            if call.id not in turn.results and (name is None or call.name == name):
                return call.id
        return None

    def messages(self) -> list[Message]:
        """The paired message list (stubs for unanswered calls)."""
        out: list[Message] = []
        for item in self._items:
            if isinstance(item, Message):
                out.append(item)
                continue
            out.append(
                Message(
                    role="assistant",
                    content=frozen(item.content()),
                    tool_calls=tuple(item.calls),
                    metadata=item.metadata,
                )
            )
            for call in item.calls:
                result = item.results.get(call.id)
                if result is None:
                    result = Message(
                        role="tool",
                        content=NO_RESULT_TEXT,
                        tool_call_id=call.id,
                        name=call.name or None,
                        metadata={"no_result_recorded": True},
                    )
                out.append(result)
        return out


def repair_pairing(messages: Sequence[Message]) -> list[Message]:
    """Re-pair an OpenAI message list through `TurnBuilder` (used when a quick check fails)."""
    builder = TurnBuilder()
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            turn = builder.assistant(metadata=message.metadata)
            content = message.content
            if isinstance(content, str):
                turn.texts.append(content)
            elif content:
                turn.parts.extend(dict(p) for p in content)
            for call in message.tool_calls:
                builder.add_call(turn, call)
        elif message.role == "tool":
            builder.result(message.tool_call_id, message.content, name=message.name, metadata=message.metadata)
        else:
            builder.add(message)
    return builder.messages()


def pairing_ok(messages: Sequence[Message]) -> bool:
    """A fast check that every call is answered right after its assistant message, once."""
    pending: set[str] = set()
    for message in messages:
        role = message.role
        if role == "tool":
            if message.tool_call_id not in pending:
                return False
            pending.discard(message.tool_call_id)
            continue
        if pending:
            return False
        if role == "assistant" and message.tool_calls:
            ids = [c.id for c in message.tool_calls]
            if "" in ids or len(set(ids)) != len(ids):
                return False
            pending = set(ids)
    return not pending


# --------------------------------------------------------------------------- sessions


_COMPACTION_MARK = "_recorded_compaction"


def compaction_marker(
    *, trigger: str | None = None, tokens_before: int | None = None, summary: str = "", **extra: Any
) -> Message:
    """A placeholder put in a message stream where the recorded agent compacted its context.

    `build_session` removes every marker and turns it into an entry of
    `metadata["recorded_compactions"]` at its position (see `take_compactions`), so importers
    record the agent's compactions as annotations and never as messages. The marker's fields
    can still be completed after it was added (`marker_fields`), e.g. when the summary arrives
    on a later line.
    """
    fields: dict[str, Any] = {
        "trigger": trigger if trigger in ("manual", "auto") else None,
        "tokens_before": whole_count(tokens_before),
        "summary": summary or "",
    }
    fields.update({k: v for k, v in extra.items() if v is not None})
    return Message(role="user", content="", metadata={_COMPACTION_MARK: fields})


def marker_fields(message: Message) -> dict[str, Any] | None:
    """The (mutable) fields of a compaction marker, or None for any other message."""
    fields = message.metadata.get(_COMPACTION_MARK) if message.metadata else None
    return fields if isinstance(fields, dict) else None


def take_compactions(messages: Sequence[Message]) -> tuple[list[Message], list[dict[str, Any]]]:
    """(the messages without compaction markers, one `recorded_compactions` entry per marker).

    Each entry holds `call_index` (assistant messages before it), `message_index` (the index of
    the first message after it in the returned list), `trigger`, `tokens_before`, `summary`, and
    whatever extra the importer recorded (timestamp...).
    """
    kept: list[Message] = []
    entries: list[dict[str, Any]] = []
    calls = 0
    for message in messages:
        fields = marker_fields(message)
        if fields is not None:
            entries.append({"call_index": calls, "message_index": len(kept), **fields})
            continue
        if message.role == "assistant":
            calls += 1
        kept.append(message)
    return kept, entries


def most_common(values: Iterable[Any]) -> Any:
    """The most frequent non-empty value (first seen wins ties), or None."""
    counts: dict[Any, int] = {}
    for value in values:
        if value:
            counts[value] = counts.get(value, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else None


def build_session(
    messages: Sequence[Message],
    fmt: str,
    *,
    tools: Sequence[Mapping[str, Any]] = (),
    metadata: Mapping[str, Any] | None = None,
) -> Session:
    """A Session with the common metadata filled in (model, usage totals) when not given.

    Compaction markers (`compaction_marker`) are removed from `messages` and recorded in
    `metadata["recorded_compactions"]`; the format's observations are marked (`mark_observations`).
    """
    messages, compactions = take_compactions(messages)
    messages = mark_observations(fmt, messages)
    meta = {k: v for k, v in (metadata or {}).items() if v is not None and k != "recorded_compactions"}
    if compactions:
        meta["recorded_compactions"] = compactions
    if "model" not in meta:
        model = most_common(m.metadata.get("model") for m in messages if m.role == "assistant")
        if model:
            meta["model"] = model
    totals = sum_usage(m for m in messages if m.role == "assistant")
    if totals:
        meta["usage_totals"] = totals
    clean_tools = tuple(dict(t) for t in tools if isinstance(t, Mapping))
    return Session(messages=tuple(messages), format=fmt, dataset=fmt, tools=clean_tools, metadata=meta)


def display_path(path: str, root: str | None = None) -> str:
    """`path` relative to `root` (or its file name), with forward slashes."""
    if root:
        try:
            return os.path.relpath(path, root).replace(os.sep, "/")
        except ValueError:
            pass
    return os.path.basename(path)


def new_message(path: str, where: str, line: int | None, **fields: Any) -> Message:
    """`Message(**fields)`, with a FormatError naming the place when the fields are invalid."""
    try:
        return Message(**fields)
    except (TypeError, ValueError) as exc:
        raise FormatError(path, f"{where}: {exc}", line=line, expected="an OpenAI-shaped chat message") from None


def json_layout(path: str) -> str:
    """`"jsonl"` when the file's first line is a complete JSON object followed by more
    non-blank lines, else `"json"` (one document, pretty-printed or not)."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline()
            while first and not first.strip():
                first = handle.readline()
            rest = handle.read(4096)
            while rest and not rest.strip():
                rest = handle.read(4096)
    except OSError as exc:
        raise FormatError(path, f"cannot read the file ({exc.strerror or exc})") from None
    text = first.decode("utf-8", errors="replace").lstrip("\ufeff \t")
    if not text.startswith("{") or not rest.strip():
        return "json"
    try:
        return "jsonl" if isinstance(json.loads(text), dict) else "json"
    except (ValueError, RecursionError):
        return "json"
