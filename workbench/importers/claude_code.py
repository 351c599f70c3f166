"""Claude Code transcripts (`~/.claude/projects/<project>/<session>.jsonl`).

One file can yield several sessions, each tagged with metadata `claude_code_kind`:
- `main`: the lines with `isSidechain: false`;
- `sidechain`: sub-agent conversations recorded inline (older versions), one per root line;
- `subagent`: a `subagents/agent-<id>.jsonl` file (lines carry `agentId`);
- `compaction_call`: a `subagents/agent-acompact-<id>.jsonl` file, the model call that wrote a
  compaction summary. It is imported as its own (small) session so nothing is lost and nothing
  is counted twice: filter on `claude_code_kind` to leave these out of agent replays.

Within a session, lines keep file order: `progress`, `file-history-snapshot`,
`queue-operation` and non-compaction `system` lines are skipped; assistant lines sharing
`message.id` are merged into one assistant message (usage/stop_reason from the last line),
also across an `isMeta` user line written between them (not sent in between: it follows the
response's tool results); `tool_result` blocks become tool messages (with their line's
`timestamp`); `thinking` goes to metadata; each assistant message
keeps the usage of the last line of its response (`metadata["usage"]`, normalised). A
`system/compact_boundary` line (`compactMetadata.trigger`, `preTokens`) plus the following
`isCompactSummary` user line (the summary) become one entry of `metadata["recorded_compactions"]`
(see `Session.recorded_compactions`); the summary is not a message of the session. Rewound
branches of the conversation tree are not pruned (they stay in file order).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..errors import FormatError
from ..session import Session
from ._common import (
    TurnBuilder,
    as_str,
    build_session,
    compaction_marker,
    content_text,
    first_record,
    has_key,
    head_text,
    iter_jsonl,
    marker_fields,
)
from .anthropic import add_assistant, add_message, response_metadata

FORMAT = "claude-code"
EXPECTED = "Claude Code transcript lines ({type, uuid, parentUuid, sessionId, message})"
_LINE_TYPES = (
    "user",
    "assistant",
    "system",
    "summary",
    "progress",
    "file-history-snapshot",
    "queue-operation",
    "custom-title",
    "tag",
)
_MARKER_TYPES = ("summary", "file-history-snapshot", "queue-operation")


def detect(path: str, head: bytes | str) -> bool:
    """JSONL whose first object is a Claude Code line (or the head shows `parentUuid`/`leafUuid`)."""
    text = head_text(head)
    if not text.startswith("{"):
        return False
    record = first_record(text)
    if record is not None:
        kind = record.get("type")
        if kind in _MARKER_TYPES:
            return True
        return kind in _LINE_TYPES and ("parentUuid" in record or "sessionId" in record)
    return has_key(text, "parentUuid", "leafUuid") and has_key(text, "sessionId", "leafUuid", "uuid")


def load(path: str) -> list[Session]:
    """The sessions of one transcript file (main, inline sidechains, or the sub-agent)."""
    records: list[tuple[int, dict[str, Any]]] = []
    for number, value in iter_jsonl(path, EXPECTED):
        if not isinstance(value, dict):
            raise FormatError(path, "the line is not a JSON object", line=number, expected=EXPECTED)
        records.append((number, value))
    threads = _threads(records)
    in_subagents = os.path.basename(os.path.dirname(os.path.abspath(path))) == "subagents"
    titles = [as_str(r.get("summary")) for _, r in records if r.get("type") == "summary" and r.get("summary")]
    sessions: list[Session] = []
    for key, lines in threads.items():
        kind = _kind(key, in_subagents)
        session = _thread_session(path, lines, kind, titles if kind == "main" else [])
        if session is not None:
            sessions.append(session)
    if not sessions:
        raise FormatError(path, "no user or assistant message in the transcript", expected=EXPECTED)
    return sessions


def _threads(records: list[tuple[int, dict[str, Any]]]) -> dict[Any, list[tuple[int, dict[str, Any]]]]:
    """Conversation lines grouped by thread: `main`, `("agent", id)` or `("side", root uuid)`."""
    parents: dict[str, tuple[Any, bool]] = {}
    for _, record in records:
        uuid = record.get("uuid")
        if isinstance(uuid, str):
            parents[uuid] = (record.get("parentUuid"), bool(record.get("isSidechain")))
    conversation = [(n, r) for n, r in records if r.get("type") in ("user", "assistant", "system")]
    only_side = all(r.get("isSidechain") for _, r in conversation)
    roots: dict[str, str] = {}
    threads: dict[Any, list[tuple[int, dict[str, Any]]]] = {}
    for number, record in conversation:
        if not record.get("isSidechain"):
            key: Any = "main"
        elif isinstance(record.get("agentId"), str):
            key = ("agent", record["agentId"])
        elif only_side:
            key = ("agent", "")
        else:
            key = ("side", _root(record, parents, roots))
        threads.setdefault(key, []).append((number, record))
    return threads


def _root(record: Mapping[str, Any], parents: dict[str, tuple[Any, bool]], cache: dict[str, str]) -> str:
    """The topmost sidechain ancestor's uuid (iterative; cycles are cut)."""
    start = record.get("uuid")
    current = start if isinstance(start, str) else ""
    path: list[str] = []
    seen: set[str] = set()
    while current and current not in cache and current not in seen:
        seen.add(current)
        path.append(current)
        parent, _ = parents.get(current, (None, False))
        if not isinstance(parent, str) or parent not in parents or not parents[parent][1]:
            break
        current = parent
    root = cache.get(current, current)
    for uuid in path:
        cache[uuid] = root
    return root


def _kind(key: Any, in_subagents: bool) -> str:
    if key == "main":
        return "main"
    if key[0] == "agent":
        return "compaction_call" if key[1].startswith("acompact") else "subagent"
    return "subagent" if in_subagents else "sidechain"


def _thread_session(path: str, lines: list[tuple[int, dict[str, Any]]], kind: str, titles: list[str]) -> Session | None:
    builder = TurnBuilder()
    boundary: dict[str, Any] | None = None
    for number, record in lines:
        kind_of_line = record.get("type")
        if kind_of_line == "system":
            if record.get("subtype") == "compact_boundary":
                compact = record.get("compactMetadata")
                compact = compact if isinstance(compact, dict) else {}
                marker = compaction_marker(
                    trigger=compact.get("trigger"),
                    tokens_before=compact.get("preTokens"),
                    timestamp=record.get("timestamp"),
                )
                builder.add(marker)
                boundary = marker_fields(marker)
            continue
        message = record.get("message")
        if not isinstance(message, dict):
            raise FormatError(
                path,
                f"the {kind_of_line} line has no 'message' object",
                line=number,
                expected="message: {role, content}",
            )
        meta: dict[str, Any] = {"timestamp": record.get("timestamp")} if record.get("timestamp") else {}
        if kind_of_line == "assistant":
            meta.update(response_metadata(message))
            if record.get("isApiErrorMessage"):
                meta["api_error"] = True
            add_assistant(builder, message.get("content"), key=message.get("id") or record.get("uuid"), metadata=meta)
            boundary = None
            continue
        if record.get("isCompactSummary"):
            if boundary is None or boundary["summary"]:
                marker = compaction_marker(timestamp=record.get("timestamp"))
                builder.add(marker)
                boundary = marker_fields(marker)
            assert boundary is not None
            boundary["summary"] = content_text(message.get("content"))
            continue
        if record.get("isMeta"):
            meta["is_meta"] = True
        add_message(
            path,
            builder,
            {**message, "role": "user"},
            number,
            f"line {number}",
            metadata=meta,
            between_lines=bool(record.get("isMeta")),
        )
    messages = builder.messages()
    if not any(m.role in ("user", "assistant") for m in messages):
        return None
    first = lines[0][1]
    metadata: dict[str, Any] = {
        "claude_code_kind": kind,
        "session_id": first.get("sessionId"),
        "agent_id": next((r.get("agentId") for _, r in lines if isinstance(r.get("agentId"), str)), None),
        "cwd": first.get("cwd"),
        "version": first.get("version"),
        "git_branch": first.get("gitBranch"),
        "started_at": first.get("timestamp"),
        "titles": titles or None,
    }
    return build_session(messages, FORMAT, metadata=metadata)
