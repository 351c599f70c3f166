"""The columns of one write batch of an import: sessions, messages (with their token counts under
`DEFAULT_TOKENIZER`) and probes, as lists that become the arrays DuckDB scans. A batch is built in the
importing process or, for a big file read in parts, in a worker process (`import_workers`), and
merged into the writer's batch (`extend`): it holds plain values only, so it pickles cheaply."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from workbench.session import Message, Session, ToolCall
from workbench.tokens import DEFAULT_TOKENIZER, prime

_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
_quote = json.encoder.encode_basestring  # a JSON string literal (the C function when available)


def json_text(value: Any) -> str:
    """`value` as compact JSON text (non-ASCII kept, anything unknown as its string)."""
    return _ENCODER.encode(value)


def _tool_calls_json(calls: Sequence[ToolCall]) -> str:
    """`[c.to_openai() for c in calls]` as JSON, written directly (this runs for every assistant message)."""
    return (
        "["
        + ",".join(
            f'{{"id":{_quote(c.id)},"type":"function","function":{{"name":{_quote(c.name)},'
            f'"arguments":{_quote(c.arguments)}}}}}'
            for c in calls
        )
        + "]"
    )


def _clean_text(value: str | None) -> str | None:
    """`value` as valid UTF-8 (lone surrogates from \\ud800-style JSON escapes are replaced)."""
    if value is None:
        return None
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")


def _chars(values: Iterable[str | None]) -> int:
    return sum(len(v) for v in values if v is not None)


def filing(session: Session, dataset: str | None, source: str | None) -> tuple[str, str | None]:
    """The dataset and source a session is stored under: the import's dataset, else the session's own,
    else "default"; the source given, else the session's metadata `source`."""
    if source is None:
        meta_source = session.metadata.get("source") if isinstance(session.metadata, Mapping) else None
        source = str(meta_source) if meta_source is not None else None
    return dataset or session.dataset or "default", source


class Batch:
    """Column lists of the sessions, messages and probes about to be written together.

    Token counts: `counts` holds those of the first message rows, `counted` the messages added since
    (counted together, in one `prime` batch, by `settle`, which `tables` and `extend` call): a session
    is stored with its counts. `objects` keeps, per session, the session itself when an earlier import
    stored sessions of its source (to compare with them, `writer._later_versions`), else None.
    """

    def __init__(self) -> None:
        self.sessions: dict[str, list[Any]] = {
            k: [] for k in ("id", "dataset", "format", "source", "message_count", "call_count", "tools", "metadata")
        }
        self.messages: dict[str, list[Any]] = {
            k: []
            for k in (
                "session_id",
                "idx",
                "role",
                "content",
                "parts",
                "tool_calls",
                "tool_call_id",
                "name",
                "origin",
                "importance",
                "metadata",
                "observation",
            )
        }
        self.probes: dict[str, list[Any]] = {
            k: [] for k in ("session_id", "idx", "question", "expected", "kind", "from_call")
        }
        self.probe_counts: list[int] = []  # per session row
        self.counts: list[int] = []
        self.counted: list[Message] = []
        self.ids: list[str] = []
        self.objects: list[Session | None] = []
        self.calls = 0
        self.message_count = 0
        self.chars = 0

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, session: Session, dataset: str, source: str | None, *, keep: bool = False) -> None:
        sid = session.id
        msgs = session.messages
        n = len(msgs)
        m = self.messages
        contents = [msg.content for msg in msgs]
        strings = [c if isinstance(c, str) else None for c in contents]
        parts = [None if c is None or isinstance(c, str) else json_text([dict(p) for p in c]) for c in contents]
        m["content"].extend(strings)
        m["parts"].extend(parts)
        m["session_id"].extend([sid] * n)
        m["idx"].extend(range(n))
        roles = [msg.role for msg in msgs]
        m["role"].extend(roles)
        m["tool_calls"].extend(_tool_calls_json(msg.tool_calls) if msg.tool_calls else None for msg in msgs)
        m["tool_call_id"].extend([msg.tool_call_id for msg in msgs])
        m["name"].extend([msg.name for msg in msgs])
        m["origin"].extend([msg.origin for msg in msgs])
        m["importance"].extend([float(msg.importance) for msg in msgs])
        m["metadata"].extend(json_text(dict(msg.metadata)) if msg.metadata else None for msg in msgs)
        m["observation"].extend([msg.observation for msg in msgs])
        self.counted.extend(msgs)
        calls = roles.count("assistant")
        chars = _chars(strings) + _chars(parts)
        s = self.sessions
        s["id"].append(sid)
        s["dataset"].append(dataset)
        s["format"].append(session.format or "unknown")
        s["source"].append(source)
        s["message_count"].append(n)
        s["call_count"].append(calls)
        s["tools"].append(json_text([dict(t) for t in session.tools]) if session.tools else None)
        s["metadata"].append(json_text(dict(session.metadata)) if session.metadata else None)
        p = self.probes
        for idx, probe in enumerate(session.probes):
            p["session_id"].append(sid)
            p["idx"].append(idx)
            p["question"].append(probe.question)
            p["expected"].append(probe.expected)
            p["kind"].append(probe.kind)
            p["from_call"].append(int(probe.from_call))
        self.probe_counts.append(len(session.probes))
        self.ids.append(sid)
        self.objects.append(session if keep else None)
        self.calls += calls
        self.message_count += n
        self.chars += chars

    def settle(self) -> None:
        """Count the messages added since the last settle (one batch of the tokenizer) into `counts`."""
        if self.counted:
            prime(self.counted, DEFAULT_TOKENIZER)
            self.counts.extend(m._token_cache[DEFAULT_TOKENIZER] for m in self.counted)
            self.counted = []

    def select(self, rows: Sequence[int]) -> Batch:
        """A batch of the sessions at session rows `rows` (in that order), with their messages, counts
        and probes. Rows, not ids: a batch read in a worker may hold a session twice."""
        self.settle()
        message_starts = _starts(self.sessions["message_count"])
        probe_starts = _starts(self.probe_counts)
        message_rows = [i for row in rows for i in range(message_starts[row], message_starts[row + 1])]
        probe_rows = [i for row in rows for i in range(probe_starts[row], probe_starts[row + 1])]
        fresh = Batch()
        for part, kept in (("sessions", rows), ("messages", message_rows), ("probes", probe_rows)):
            source: dict[str, list[Any]] = getattr(self, part)
            target: dict[str, list[Any]] = getattr(fresh, part)
            for name, values in source.items():
                target[name] = [values[i] for i in kept]
        fresh.counts = [self.counts[i] for i in message_rows]
        fresh.probe_counts = [self.probe_counts[row] for row in rows]
        fresh.ids = [self.ids[row] for row in rows]
        fresh.objects = [self.objects[row] for row in rows]
        fresh.message_count = sum(fresh.sessions["message_count"])
        fresh.calls = sum(fresh.sessions["call_count"])
        fresh.chars = _chars(fresh.messages["content"]) + _chars(fresh.messages["parts"])
        return fresh

    def without(self, drop: set[str]) -> Batch:
        """A batch without the sessions whose ids are in `drop` (rare: a failed file, stored ones)."""
        return self.select([row for row, sid in enumerate(self.ids) if sid not in drop])

    def extend(self, other: Batch, rows: Sequence[int] | None = None) -> None:
        """Append `other`'s sessions (only those at session rows `rows` when given), in order."""
        self.settle()
        other = other.select(rows) if rows is not None else other
        other.settle()
        for part in ("sessions", "messages", "probes"):
            mine: dict[str, list[Any]] = getattr(self, part)
            for name, values in getattr(other, part).items():
                mine[name].extend(values)
        self.counts.extend(other.counts)
        self.probe_counts.extend(other.probe_counts)
        self.ids.extend(other.ids)
        self.objects.extend(other.objects)
        self.calls += other.calls
        self.message_count += other.message_count
        self.chars += other.chars

    def tables(self, clean: bool = False) -> dict[str, dict[str, Any]]:
        """The batch as {table name: {column: numpy array}}, which DuckDB scans directly (no copy
        through pandas or Arrow). `clean` replaces lone surrogates, which DuckDB rejects."""
        import numpy as np

        dtypes = {
            "idx": np.int32,
            "message_count": np.int32,
            "call_count": np.int32,
            "from_call": np.int32,
            "importance": np.float64,
            "observation": np.bool_,
        }
        self.settle()

        def column(name: str, values: list[Any]) -> Any:
            dtype = dtypes.get(name, object)
            if dtype is not object:
                return np.asarray(values, dtype=dtype)
            array = np.empty(len(values), dtype=object)
            array[:] = [_clean_text(v) for v in values] if clean else values
            return array

        tables = {
            table: {name: column(name, values) for name, values in columns.items()}
            for table, columns in (
                ("_wb_sessions", self.sessions),
                ("_wb_messages", self.messages),
                ("_wb_probes", self.probes),
            )
        }
        tables["_wb_messages"]["tokens"] = np.asarray(self.counts, dtype=np.int32)
        return tables


def _starts(counts: Sequence[int]) -> list[int]:
    """Where each row's items start in the flat list, and (last) where they end."""
    starts = [0]
    for count in counts:
        starts.append(starts[-1] + count)
    return starts
