"""Inspect AI eval logs: one JSON document (`.json`) or a zip of JSON parts (`.eval`).

One session per sample and epoch. Inspect keeps the agent's full history in the sample's
`messages` (its compaction never rewrites them: it sends the model a compacted input and, for a
summary, appends the summary message to the history), and records each model call as a `model`
event whose `input` is what that call was sent. A workbench session is the full original history,
whose assistant messages are the calls (each call's context is the messages before it) and whose
compactions are annotations. So the session is read from `messages`, not rebuilt from the events'
inputs (after a compaction those are the compacted contexts, not the history), and the events
supply what the history lacks:

- a `model` event whose output message is an assistant message of the history (same Inspect
  message id, or, in logs whose messages carry no ids, the same text and tool calls, matched in
  order) is that message's call: its `usage` (normalised, `metadata["usage"]`), model,
  `finish_reason` and timestamp go to the message, and its `tools` (Inspect `ToolInfo`) become
  the session's tool schemas (OpenAI shape, the first call's that offered any);
- the other model events (a scorer's grader, a summarizer, a refused generate retried, a
  sub-agent) made no message of the history: they are counted in session metadata `side_calls`
  with their summed usage in `side_call_usage`;
- every `compaction` event (type summary/edit/trim) is a recorded compaction before the next call
  of the history: `tokens_before`, `tokens_after`, `compaction_type`, `compaction_source` and the
  event's `metadata` are kept; a summary message Inspect appended to the history (a user message
  with metadata `summary: true`) is its `summary` and is not a message of the session. Inspect
  compacts when its threshold is crossed, so a compaction from source `inspect` has trigger `auto`.

Messages: Inspect's `ChatMessage` (system/user/assistant with `tool_calls` `{id, function,
arguments}`, tool with `tool_call_id` and maybe an `error`, content a string or a list of parts).
Text parts stay text, images become `image_url` parts, reasoning goes to message metadata
`thinking`, other parts (audio, video, document, data) become a short text placeholder; a tool
error is the text the model was shown (`Error: ...`). `attachment://` (and the older `tc://`)
references are resolved from the sample's attachments.

Session metadata: `task`, `task_id`, `run_id`, `eval_id`, `log_status`, `sample_id`, `epoch`,
`instance_id` (the sample id as text), `target`, `scores` (scorer -> value), `score_answers`,
`sample_metadata` (the sample's own metadata), `model_usage`, `sample_error`, `limit`, and
`outcome` `{resolved}` when a scorer's value reads as correct/incorrect (`C`/`I`, a boolean,
1/0), so results split by `outcome_resolved`. The `.eval` zip is read one sample member at a time.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import FormatError
from ..session import Message, Session, ToolCall
from ._common import (
    TurnBuilder,
    as_dict,
    as_list,
    as_str,
    build_session,
    compaction_marker,
    dumps_args,
    finish_reason,
    has_key,
    head_text,
    image_part,
    loads,
    read_json,
    text_part,
    whole_count,
)

FORMAT = "inspect-ai"
EXPECTED = "an Inspect AI eval log: {version, status, eval: {task, ...}, samples: [{id, epoch, messages, events}]}"
EXPECTED_ZIP = "an Inspect AI .eval log: a zip holding header.json (or _journal/start.json) and samples/*.json"
_ZIP_MAGIC = b"PK\x03\x04"
_SAMPLE_MEMBER = re.compile(r"^samples/(?P<id>.+)_epoch_(?P<epoch>\d+)\.json$")
_REFERENCES = ("attachment://", "tc://")
_STOP_REASONS = {"max_tokens": "length", "model_length": "length", "unknown": None}
_CORRECT = {"C": True, "I": False}


# --------------------------------------------------------------------------- detection


def detect(path: str, head: bytes | str) -> bool:
    """A JSON object with an `eval` spec (`task_id`/`run_id`) and `status`, or a zip holding an
    Inspect header or sample members."""
    if isinstance(head, bytes) and head.startswith(_ZIP_MAGIC):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (OSError, zipfile.BadZipFile):
            return False
        return "header.json" in names or "_journal/start.json" in names or any(_SAMPLE_MEMBER.match(n) for n in names)
    text = head_text(head)
    return (
        text.startswith("{")
        and has_key(text, "eval")
        and has_key(text, "status")
        and has_key(text, "task_id", "run_id")
    )


# --------------------------------------------------------------------------- reading


def iter_sessions(path: str) -> Iterator[Session]:
    """One session per sample and epoch of the log (a `.eval` zip is read a sample at a time)."""
    try:
        with open(path, "rb") as handle:
            zipped = handle.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC
    except OSError as exc:
        raise FormatError(path, f"cannot read the file ({exc.strerror or exc})") from None
    found = False
    if zipped:
        header, samples = _zip_log(path)
    else:
        header, samples = _json_log(path)
    log = _LogInfo(header)
    for where, sample in samples:
        if not isinstance(sample, dict):
            raise FormatError(
                path, f"{where} is not an object", expected="an Inspect sample {id, epoch, messages, events}"
            )
        session = _sample_session(path, where, sample, log)
        if session is not None:
            found = True
            yield session
    if not found:
        raise FormatError(
            path,
            f"the log holds no sample with messages (status {header.get('status')!r})",
            expected="an Inspect eval log written with its samples",
        )


def load(path: str) -> list[Session]:
    """Every session of the log (see `iter_sessions`)."""
    return list(iter_sessions(path))


def _json_log(path: str) -> tuple[dict[str, Any], Iterator[tuple[str, Any]]]:
    data = read_json(path, EXPECTED)
    if not isinstance(data, dict) or not isinstance(data.get("eval"), dict):
        raise FormatError(path, "no 'eval' object at the top level", expected=EXPECTED)
    samples = data.get("samples")
    if samples is not None and not isinstance(samples, list):
        raise FormatError(path, "'samples' is not a list", expected=EXPECTED)
    return data, ((f"samples[{index}]", sample) for index, sample in enumerate(samples or []))


def _zip_log(path: str) -> tuple[dict[str, Any], Iterator[tuple[str, Any]]]:
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise FormatError(path, f"not a readable zip archive ({exc})", expected=EXPECTED_ZIP) from None
    names = archive.namelist()
    header_name = next((n for n in ("header.json", "_journal/start.json") if n in names), None)
    if header_name is None:
        archive.close()
        raise FormatError(path, "the zip holds no header.json nor _journal/start.json", expected=EXPECTED_ZIP)
    header = _member(path, archive, header_name)
    if not isinstance(header, dict) or not isinstance(header.get("eval"), dict):
        archive.close()
        raise FormatError(path, f"{header_name} has no 'eval' object", expected=EXPECTED_ZIP)
    members = sorted(
        (m for m in (_SAMPLE_MEMBER.match(n) for n in names) if m is not None),
        key=lambda m: (_natural(m["id"]), int(m["epoch"])),
    )

    def samples() -> Iterator[tuple[str, Any]]:
        with archive:
            for match in members:
                yield match.string, _member(path, archive, match.string)

    return header, samples()


def _member(path: str, archive: zipfile.ZipFile, name: str) -> Any:
    try:
        data = archive.read(name)
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise FormatError(path, f"cannot read zip member {name} ({exc})", expected=EXPECTED_ZIP) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise FormatError(path, f"zip member {name} is not UTF-8 text", expected=EXPECTED_ZIP) from None
    try:
        return loads(path, text, EXPECTED_ZIP)
    except FormatError as exc:
        raise FormatError(path, f"{name}: {exc.problem}", expected=EXPECTED_ZIP) from None


def _natural(value: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", value))


class _LogInfo:
    """What every session of one log shares."""

    def __init__(self, header: Mapping[str, Any]) -> None:
        spec = as_dict(header.get("eval"))
        self.model = spec.get("model") if isinstance(spec.get("model"), str) else None
        self.metadata: dict[str, Any] = {
            "task": spec.get("task"),
            "task_id": spec.get("task_id"),
            "run_id": spec.get("run_id"),
            "eval_id": spec.get("eval_id"),
            "log_status": header.get("status"),
        }
        self.identity = as_str(spec.get("eval_id") or spec.get("run_id")) + "/" + as_str(spec.get("task_id"))


# --------------------------------------------------------------------------- one sample


def _sample_session(path: str, where: str, sample: dict[str, Any], log: _LogInfo) -> Session | None:
    references = _references(sample)
    history = [_resolve(m, references) for m in as_list(sample.get("messages"))]
    if not history:
        return None
    for index, message in enumerate(history):
        if not isinstance(message, dict):
            raise FormatError(
                path, f"{where}.messages[{index}] is not an object", expected="an Inspect ChatMessage {role, content}"
            )
    transcript = sample.get("events")
    if transcript is None:
        transcript = as_dict(sample.get("transcript")).get("events")
    events = [e for e in as_list(transcript) if isinstance(e, dict)]
    calls, side = _match_calls(history, events, references)
    markers, summaries = _compactions(history, events, calls)
    builder = TurnBuilder()
    tools: list[dict[str, Any]] = []
    for index in range(len(history) + 1):
        for marker in markers.get(index, ()):
            builder.add(marker)
        if index == len(history) or index in summaries:
            continue
        event = calls.get(index)
        _add(path, f"{where}.messages[{index}]", builder, history[index], event)
        if event is not None and not tools:
            tools = _tools(_resolve(as_list(event.get("tools")), references))
    session = build_session(builder.messages(), FORMAT, tools=tools, metadata=_metadata(sample, log, side))
    identity = as_str(sample.get("uuid")) or f"{log.identity}/{as_str(sample.get('id'))}/{as_str(sample.get('epoch'))}"
    digest = hashlib.sha256(f"{session.id}\0{identity}".encode()).hexdigest()[:16]
    return Session(
        messages=session.messages,
        id=digest,
        dataset=session.dataset,
        format=session.format,
        tools=session.tools,
        metadata=session.metadata,
    )


def _references(sample: Mapping[str, Any]) -> dict[str, str]:
    """The texts that `attachment://<hash>` (and the older `tc://<hash>`) stand for."""
    found: dict[str, str] = {}
    for prefix, table in (
        ("attachment://", sample.get("attachments")),
        ("tc://", as_dict(sample.get("transcript")).get("content")),
    ):
        for key, text in as_dict(table).items():
            if isinstance(text, str):
                found[prefix + str(key)] = text
    return found


def _resolve(value: Any, references: Mapping[str, str]) -> Any:
    """`value` with every string that is a known reference replaced by its text."""
    if not references:
        return value
    if isinstance(value, str):
        return references.get(value, value) if value.startswith(_REFERENCES) else value
    if isinstance(value, list):
        return [_resolve(v, references) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, references) for k, v in value.items()}
    return value


def _output_message(event: Mapping[str, Any]) -> dict[str, Any] | None:
    choices = as_list(as_dict(event.get("output")).get("choices"))
    message = as_dict(choices[0]).get("message") if choices else None
    return message if isinstance(message, dict) else None


def _fingerprint(message: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What identifies an assistant message without an id: its text and its tool calls."""
    text, _thinking, _parts = _content(message.get("content"))
    calls = tuple(
        (as_str(c.get("function")), json.dumps(c.get("arguments"), sort_keys=True, default=str))
        for c in as_list(message.get("tool_calls"))
        if isinstance(c, dict)
    )
    return text, calls


def _same_message(recorded: Mapping[str, Any], produced: Mapping[str, Any]) -> bool:
    if recorded.get("id") and produced.get("id"):
        return bool(recorded["id"] == produced["id"])
    return _fingerprint(recorded) == _fingerprint(produced)


def _match_calls(
    history: list[dict[str, Any]], events: list[dict[str, Any]], references: Mapping[str, str]
) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """({history index of an assistant message: the model event that produced it}, the model events
    that produced no message of the history). Matched in order: each assistant message takes the
    first unmatched later model event that produced it."""
    models = [(position, e) for position, e in enumerate(events) if e.get("event") == "model"]
    outputs = [_resolve(_output_message(e), references) for _position, e in models]
    calls: dict[int, dict[str, Any]] = {}
    taken: set[int] = set()
    start = 0
    for index, message in enumerate(history):
        if message.get("role") != "assistant":
            continue
        for candidate in range(start, len(models)):
            output = outputs[candidate]
            if output is not None and _same_message(message, output):
                calls[index] = models[candidate][1]
                taken.add(candidate)
                start = candidate + 1
                break
    side = [e for candidate, (_position, e) in enumerate(models) if candidate not in taken]
    return calls, side


def _compactions(
    history: list[dict[str, Any]], events: list[dict[str, Any]], calls: Mapping[int, dict[str, Any]]
) -> tuple[dict[int, list[Message]], set[int]]:
    """(compaction markers by the history index they go before, the indices of the summary
    messages they take the place of)."""
    call_at = {id(event): index for index, event in calls.items()}
    markers: dict[int, list[Message]] = {}
    summaries: set[int] = set()
    pending: list[dict[str, Any]] = []

    def place(before: int) -> None:
        previous = max((i for i in calls if i < before), default=-1)
        for event in pending:
            where, summary = before, ""
            if event.get("type", "summary") == "summary":
                for index in range(previous + 1, before):
                    message = history[index]
                    if (
                        index not in summaries
                        and message.get("role") == "user"
                        and as_dict(message.get("metadata")).get("summary")
                    ):
                        where, summary = index, _content(message.get("content"))[0]
                        summaries.add(index)
                        break
            markers.setdefault(where, []).append(_marker(event, summary))
        pending.clear()

    for event in events:
        if event.get("event") == "compaction":
            pending.append(event)
        elif id(event) in call_at and pending:
            place(call_at[id(event)])
    if pending:
        place(len(history))
    return markers, summaries


def _marker(event: Mapping[str, Any], summary: str) -> Message:
    source = event.get("source") if isinstance(event.get("source"), str) else None
    return compaction_marker(
        trigger="auto" if source == "inspect" else None,
        tokens_before=event.get("tokens_before"),
        summary=summary,
        tokens_after=whole_count(event.get("tokens_after")),
        compaction_type=event.get("type", "summary"),
        compaction_source=source,
        compaction_metadata=as_dict(event.get("metadata")) or None,
        timestamp=event.get("timestamp"),
    )


# --------------------------------------------------------------------------- messages


def _content(value: Any) -> tuple[str, list[str], list[dict[str, Any]]]:
    """(the text, the reasoning texts, the parts when not all text) of an Inspect content value."""
    if value is None:
        return "", [], []
    if isinstance(value, str):
        return value, [], []
    texts: list[str] = []
    thinking: list[str] = []
    parts: list[dict[str, Any]] = []
    media = False
    for part in value if isinstance(value, list) else [value]:
        if isinstance(part, str):
            part = {"type": "text", "text": part}
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(as_str(part.get("text")))
            parts.append(text_part(as_str(part.get("text"))))
        elif kind == "reasoning":
            if not part.get("redacted") and part.get("reasoning"):
                thinking.append(as_str(part.get("reasoning")))
        elif kind == "image":
            media = True
            parts.append(image_part(as_str(part.get("image"))))
        else:
            placeholder = f"[{as_str(kind) or 'content'}]"
            texts.append(placeholder)
            parts.append(text_part(placeholder))
    return "\n".join(texts), thinking, parts if media else []


def _add(path: str, where: str, builder: TurnBuilder, raw: dict[str, Any], event: dict[str, Any] | None) -> None:
    role = raw.get("role")
    text, thinking, parts = _content(raw.get("content"))
    meta: dict[str, Any] = {}
    if role == "assistant":
        meta = _call_metadata(raw, event)
        if thinking:
            meta["thinking"] = "\n\n".join(thinking)
        turn = builder.assistant(metadata=meta)
        if parts:
            turn.parts.extend(parts)
        elif text:
            turn.texts.append(text)
        for call in as_list(raw.get("tool_calls")):
            if isinstance(call, dict):
                builder.add_call(
                    turn,
                    ToolCall(
                        id=as_str(call.get("id")),
                        name=as_str(call.get("function")),
                        arguments=dumps_args(call.get("arguments")),
                    ),
                )
        if not turn.texts and not turn.parts and not turn.calls:
            turn.texts.append("")
        return
    if role == "tool":
        error = as_dict(raw.get("error"))
        if error:
            meta["tool_error"] = as_str(error.get("type")) or True
        content: Any = f"Error: {as_str(error.get('message'))}" if error else (parts or text)
        call_id = raw.get("tool_call_id")
        builder.result(as_str(call_id) or None, content, name=as_str(raw.get("function")) or None, metadata=meta)
        return
    if role not in ("system", "user"):
        raise FormatError(
            path, f"{where} has role {role!r}", expected="an Inspect ChatMessage role: system, user, assistant or tool"
        )
    if role == "user" and as_dict(raw.get("metadata")).get("summary"):
        meta["inspect_summary"] = True
    try:
        builder.add(Message(role=role, content=tuple(parts) if parts else text, metadata=meta))
    except (TypeError, ValueError) as exc:
        raise FormatError(path, f"{where}: {exc}", expected="an Inspect ChatMessage") from None


def _call_metadata(raw: Mapping[str, Any], event: Mapping[str, Any] | None) -> dict[str, Any]:
    """An assistant message's model, and, from the call that produced it, usage, stop and time."""
    meta: dict[str, Any] = {}
    if isinstance(raw.get("model"), str):
        meta["model"] = raw["model"]
    if event is None:
        return meta
    if isinstance(event.get("model"), str):
        meta["model"] = event["model"]
    output = as_dict(event.get("output"))
    usage = inspect_usage(output.get("usage"))
    if usage:
        meta["usage"] = usage
    choices = as_list(output.get("choices"))
    stop = as_dict(choices[0]).get("stop_reason") if choices else None
    if isinstance(stop, str):
        meta["finish_reason"] = _STOP_REASONS.get(stop, finish_reason(stop))
    if isinstance(event.get("timestamp"), str):
        meta["timestamp"] = event["timestamp"]
    return meta


def inspect_usage(value: Any) -> dict[str, int] | None:
    """An Inspect `ModelUsage` as the session model's four usage keys (None without counts).

    Inspect's `input_tokens` is the provider's own figure: with Anthropic it leaves out the cache
    reads and writes (`input_tokens_cache_read`/`_write`), with OpenAI it includes the cached
    reads. `total_tokens` tells them apart: when it equals input plus output, the input includes
    the cache kinds, which are taken out of it; otherwise (or without a total) it excludes them.
    """
    usage = as_dict(value)
    given = whole_count(usage.get("input_tokens"))
    output = whole_count(usage.get("output_tokens"))
    if given is None and output is None:
        return None
    given, output = given or 0, output or 0
    read = whole_count(usage.get("input_tokens_cache_read")) or 0
    write = whole_count(usage.get("input_tokens_cache_write")) or 0
    total = whole_count(usage.get("total_tokens"))
    uncached = given
    if (read or write) and total == given + output:
        uncached = max(0, given - read - write)
    return {
        "input_tokens": uncached,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write,
        "output_tokens": output,
    }


def _tools(infos: list[Any]) -> list[dict[str, Any]]:
    """Inspect `ToolInfo` records `{name, description, parameters}` as OpenAI function schemas."""
    out: list[dict[str, Any]] = []
    for info in infos:
        if not isinstance(info, dict) or not isinstance(info.get("name"), str):
            continue
        function = {
            "name": info["name"],
            "description": as_str(info.get("description")),
            "parameters": as_dict(info.get("parameters")) or {"type": "object", "properties": {}},
        }
        out.append({"type": "function", "function": function})
    return out


# --------------------------------------------------------------------------- metadata


def _metadata(sample: Mapping[str, Any], log: _LogInfo, side: list[dict[str, Any]]) -> dict[str, Any]:
    scores = {str(name): as_dict(score).get("value") for name, score in as_dict(sample.get("scores")).items()}
    answers = {
        str(name): as_dict(score)["answer"]
        for name, score in as_dict(sample.get("scores")).items()
        if isinstance(as_dict(score).get("answer"), str)
    }
    side_usage: dict[str, int] = {}
    for event in side:
        for key, count in (inspect_usage(as_dict(event.get("output")).get("usage")) or {}).items():
            side_usage[key] = side_usage.get(key, 0) + count
    sample_id = sample.get("id")
    meta: dict[str, Any] = {
        **log.metadata,
        "model": log.model,
        "sample_id": sample_id,
        "epoch": sample.get("epoch"),
        "instance_id": as_str(sample_id) if sample_id is not None else None,
        "target": sample.get("target"),
        "scores": scores or None,
        "score_answers": answers or None,
        "outcome": _outcome(scores),
        "sample_metadata": as_dict(sample.get("metadata")) or None,
        "model_usage": as_dict(sample.get("model_usage")) or None,
        "sample_error": as_dict(sample.get("error")).get("message") or None,
        "limit": sample.get("limit") or None,
        "side_calls": len(side) or None,
        "side_call_usage": side_usage or None,
    }
    return meta


def _outcome(scores: Mapping[str, Any]) -> dict[str, Any] | None:
    """`{resolved, source}` from the first scorer whose value reads as correct or incorrect."""
    for name, value in scores.items():
        resolved: bool | None = None
        if isinstance(value, bool):
            resolved = value
        elif isinstance(value, str):
            resolved = _CORRECT.get(value)
        elif isinstance(value, (int, float)) and value in (0, 1):
            resolved = bool(value)
        if resolved is not None:
            return {"resolved": resolved, "source": f"inspect score {name}"}
    return None
