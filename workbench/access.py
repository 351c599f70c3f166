"""Reading sessions back from the workbench database: `wb.sessions(...)` and `wb.session(id)`, and
the read models the app shows (`overview` of a database, `session_detail` of one session).

Both open the database read-only through `workbench.store.Store` (so they work beside a running
app or another reader) and close it again; `db` defaults to `$WORKBENCH_DB`, else
`data/workbench.duckdb`. The store is imported on first use, so `import workbench` stays light.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from workbench.errors import StoreError
from workbench.session import Session

__all__ = ["iter_sessions", "overview", "session", "session_detail", "sessions"]


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
