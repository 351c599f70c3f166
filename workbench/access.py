"""Reading sessions back from the workbench database: `wb.sessions(...)` and `wb.session(id)`, and
the read models the app shows (`overview` of a database, `session_detail` of one session, and
`compaction_view` of one compaction: its summary, what it replaced, its quality and lost facts).

Both open the database read-only through `workbench.store.Store` (so they work beside a running
app or another reader) and close it again; `db` defaults to `$WORKBENCH_DB`, else
`data/workbench.duckdb`. The store is imported on first use, so `import workbench` stays light.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.errors import StoreError
from workbench.session import Message, Session

if TYPE_CHECKING:
    from workbench.replay import ReplayResult

__all__ = [
    "CompactionView",
    "ContextMessage",
    "LostFact",
    "QualityRow",
    "compaction_view",
    "iter_sessions",
    "overview",
    "result_compaction",
    "session",
    "session_detail",
    "sessions",
]


def sessions(
    dataset: str | None = None, where: str | None = None, db: str | os.PathLike[str] | None = None
) -> list[Session]:
    """The stored sessions of `dataset` (every dataset when None) matching `where`, an SQL
    condition over the sessions table (columns id, dataset, format, source, messages, calls,
    metadata, imported_at; e.g. `"calls >= 50 AND format = 'claude-code'"`), in the store's order
    (dataset, import time, id). A bad condition raises StoreError naming the database."""
    from workbench.store import Store

    with Store(db, read_only=True) as store:
        return store.load_sessions(dataset, where)


def iter_sessions(
    dataset: str | None = None,
    where: str | None = None,
    db: str | os.PathLike[str] | None = None,
    *,
    batch_sessions: int = 64,
) -> Iterator[Session]:
    """The sessions `sessions()` returns, streamed: loaded `batch_sessions` at a time, so a dataset
    of any size can be walked with memory for one batch (the database stays open, read-only,
    until the iteration ends or the iterator is closed)."""
    from workbench.store import Store

    with Store(db, read_only=True) as store:
        yield from store.iter_sessions(dataset, where, batch_sessions=batch_sessions)


def session(id: str, db: str | os.PathLike[str] | None = None) -> Session:
    """The stored session whose id is `id` or starts with it (a unique prefix, as `workbench
    sessions` prints them). StoreError when no session matches or the prefix is ambiguous."""
    from workbench.store import Store

    wanted = str(id).strip()
    if not wanted:
        raise StoreError("a session id (or a unique prefix of one) is required")
    with Store(db, read_only=True) as store:
        if store.has_session(wanted):
            return store.load_session(wanted)
        matches = [i for i in store.session_ids() if i.startswith(wanted)]
        if not matches:
            raise StoreError(f"no session id starts with {wanted!r} in {store.path}")
        if len(matches) > 1:
            shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
            raise StoreError(
                f"{len(matches)} sessions start with {wanted!r} in {store.path} ({shown}); give more of the id"
            )
        return store.load_session(matches[0])


def overview(db: str | os.PathLike[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Datasets, and sessions with their size in characters and their recorded compaction count."""
    from workbench.store import Store

    with Store(db, read_only=True) as store:
        sessions = store.session_rows()
        characters = store.message_characters()
        for row in sessions:
            row["characters"] = int(characters.get(row["id"], 0))
        return {"datasets": store.dataset_rows(), "sessions": sessions}


def _non_text_parts(content: Any) -> list[str]:
    if not isinstance(content, tuple):
        return []
    return [str(p.get("type")) for p in content if isinstance(p, dict) and p.get("type") != "text"]


def session_detail(session: Session, tokenizer: str = "heuristic") -> dict[str, Any]:
    """One session as plain data: messages (role, text, tool calls, tokens and running total), the
    recorded compactions by the message they precede, probes, tools, metadata."""
    from workbench.tokens import message_tokens

    messages = []
    total = 0
    for index, message in enumerate(session.messages):
        tokens = message_tokens(message, tokenizer)
        total += tokens
        messages.append(
            {
                "index": index,
                "role": message.role,
                "text": message.text,
                "name": message.name,
                "tool_call_id": message.tool_call_id,
                "importance": message.importance,
                "origin": message.origin,
                "observation": message.is_observation,
                "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls],
                "non_text_parts": _non_text_parts(message.content),
                "tokens": tokens,
                "cumulative_tokens": total,
            }
        )
    metadata = {k: v for k, v in session.metadata.items() if k != "recorded_compactions"}
    return {
        "id": session.id,
        "dataset": session.dataset,
        "format": session.format,
        "messages": messages,
        "recorded_compactions": [c.to_dict() for c in session.recorded_compactions],
        "probes": [p.to_dict() for p in session.probes],
        "tools": [dict(t) for t in session.tools],
        "metadata": metadata,
        "calls": session.calls,
        "tokens": total,
    }


# -- one compaction, as the app shows it ----------------------------------------------------------

#: Characters each side of a lost fact in its excerpt.
EXCERPT_CHARS = 60
#: Lines of a long text shown before the rest is folded away.
FOLDED_LINES = 8
#: Characters of a long text shown before the rest is folded away (a text of few, long lines).
FOLDED_CHARS = 1200


@dataclass(frozen=True)
class ContextMessage:
    """A message of a compaction's context: its `position` in the context the strategy received
    (a replaced message) or returned (a message the strategy wrote), its role, name, text and tool
    calls (each as `name(arguments)`)."""

    position: int
    role: str
    name: str | None
    text: str
    calls: tuple[str, ...] = ()

    @property
    def searchable(self) -> str:
        """The text and the tool calls (`name(arguments)`), where a fact may be stated."""
        return "\n".join((self.text, *self.calls)) if self.calls else self.text

    @property
    def heading(self) -> str:
        """`#3 tool · read_file`: where the message sat and whose it is."""
        return f"#{self.position} {self.role}" + (f" · {self.name}" if self.name else "")


def direction_label(direction: str) -> str:
    """How a metric's direction reads beside its value: "↑ better", "↓ better", or "" for none."""
    return {"higher": "↑ better", "lower": "↓ better"}.get(direction, "")


@dataclass(frozen=True)
class QualityRow:
    """One measured value of a compaction, with the direction its registered metric declares
    (`higher`, `lower`; `none` for a count or a column no metric declares)."""

    metric: str
    value: float
    direction: str

    @property
    def better(self) -> str:
        return direction_label(self.direction)


@dataclass(frozen=True)
class LostFact:
    """A fact the compaction removed and the context after it no longer states, with the first
    replaced message holding it (`source`, None when no replaced message states it verbatim) and a
    short excerpt around it there. `needed`: the recording uses it again later."""

    fact: str
    source: ContextMessage | None
    excerpt: str
    needed: bool


@dataclass(frozen=True)
class CompactionView:
    """What one compaction did, as plain data: the summary (None for a strategy that edits or drops
    messages), the messages it replaced and those it wrote in their place, its measured quality and
    the facts it lost, each traced to the message it came from."""

    event_index: int
    call_index: int
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    summary: str | None
    replaced: tuple[ContextMessage, ...]
    written: tuple[ContextMessage, ...]
    quality: tuple[QualityRow, ...]
    lost_facts: tuple[LostFact, ...]
    error: str | None = None
    fell_back: bool = False

    @property
    def edits(self) -> bool:
        """The strategy edited or dropped messages rather than summarizing (masking, truncation,
        clearing, windows): what it did reads as a diff."""
        return not self.summary

    def diff(self, context_lines: int = 2) -> list[str]:
        """A unified diff (difflib) of the replaced messages against those written in their place,
        each message a `[role · name]` line followed by its text."""
        import difflib

        return list(
            difflib.unified_diff(
                _diff_lines(self.replaced),
                _diff_lines(self.written),
                fromfile=f"replaced ({len(self.replaced)} message{'s' * (len(self.replaced) != 1)})",
                tofile=f"written in their place ({len(self.written)} message{'s' * (len(self.written) != 1)})",
                n=context_lines,
                lineterm="",
            )
        )


def _diff_lines(messages: Sequence[ContextMessage]) -> list[str]:
    lines: list[str] = []
    for message in messages:
        lines.append(f"[{message.role}" + (f" · {message.name}" if message.name else "") + "]")
        lines.extend(message.searchable.splitlines() or [""])
    return lines


def folded(text: str, lines: int = FOLDED_LINES, chars: int = FOLDED_CHARS) -> tuple[str, str]:
    """`text` cut after its first `lines` lines or `chars` characters, whichever comes first: (what is
    shown, the rest; "" when nothing is left). Joined, they are the text."""
    cut = sum(len(line) for line in text.splitlines(keepends=True)[:lines])
    cut = min(cut, chars)
    return text[:cut], text[cut:]


def metric_direction_of(name: str) -> str:
    """The direction a registered metric declares (`higher`, `lower`), `none` for any other name."""
    from workbench.errors import ConfigError
    from workbench.registry import lookup

    try:
        direction = getattr(lookup("metric", name), "direction", "none")
    except ConfigError:
        return "none"
    return direction if direction in ("higher", "lower") else "none"


def excerpt(text: str, fact: str, width: int = EXCERPT_CHARS) -> str:
    """The text around the first mention of `fact` (`width` characters each side, on one line)."""
    at = text.find(fact)
    if at < 0:
        return ""
    start, end = max(0, at - width), min(len(text), at + len(fact) + width)
    shown = " ".join(text[start:end].split())
    return ("…" if start else "") + shown + ("…" if end < len(text) else "")


def compaction_view(
    before: Sequence[Message],
    after: Sequence[Message],
    event: Any,
    measured: Mapping[str, Any] | None = None,
    *,
    event_index: int = 0,
) -> CompactionView:
    """The view of one compaction from the context the strategy received (`before`) and returned
    (`after`), its event (a `CompactionEvent` or anything with its fields) and its per-compaction
    metrics (`measured`: numbers become the quality table, `lost_facts` / `lost_needed_facts` the lost
    facts). A message is replaced when `after` does not hold it (the same object); a message is written
    when `before` did not hold it."""
    kept = {id(m) for m in after}
    given = {id(m) for m in before}
    replaced = tuple(_shown(i, m) for i, m in enumerate(before) if id(m) not in kept)
    written = tuple(_shown(i, m) for i, m in enumerate(after) if id(m) not in given)
    values = dict(measured or {})
    quality = tuple(
        QualityRow(str(name), float(value), metric_direction_of(str(name)))
        for name, value in values.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    )
    needed = {str(f) for f in values.get("lost_needed_facts") or ()}
    listed = [str(f) for f in values.get("lost_facts") or ()]
    listed += [f for f in needed if f not in listed]
    lost = []
    for fact in listed:
        source = next((m for m in replaced if fact in m.searchable), None)
        lost.append(LostFact(fact, source, excerpt(source.searchable, fact) if source else "", fact in needed))
    return CompactionView(
        event_index=event_index,
        call_index=int(event.call_index),
        tokens_before=int(event.tokens_before),
        tokens_after=int(event.tokens_after),
        messages_before=len(before),
        messages_after=len(after),
        summary=event.summary or None,
        replaced=replaced,
        written=written,
        quality=quality,
        lost_facts=tuple(lost),
        error=getattr(event, "error", None),
        fell_back=bool(getattr(event, "fell_back", False)),
    )


def _shown(position: int, message: Message) -> ContextMessage:
    calls = tuple(f"{call.name}({call.arguments})" for call in message.tool_calls)
    return ContextMessage(position, message.role, message.name, message.text, calls)


def result_compaction(result: ReplayResult, event_index: int) -> CompactionView:
    """`compaction_view` of compaction event `event_index` of a replay (which keeps its context
    snapshots: not a `detached` result)."""
    before, after = result.compaction_contexts(event_index)
    metrics = result.compaction_metrics
    measured = metrics[event_index] if event_index < len(metrics) else {}
    return compaction_view(before, after, result.compactions[event_index], measured, event_index=event_index)
