"""Reading sessions back from the workbench database: `wb.sessions(...)` and `wb.session(id)`.

Both open the database read-only through `workbench.store.Store` (so they work beside a running
app or another reader) and close it again; `db` defaults to `$WORKBENCH_DB`, else
`data/workbench.duckdb`. The store is imported on first use, so `import workbench` stays light.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from workbench.errors import StoreError
from workbench.session import Session

__all__ = ["iter_sessions", "session", "sessions"]


def sessions(dataset: str | None = None, where: str | None = None,
             db: str | os.PathLike[str] | None = None) -> list[Session]:
    """The stored sessions of `dataset` (every dataset when None) matching `where`, an SQL
    condition over the sessions table (columns id, dataset, format, source, messages, calls,
    metadata, imported_at; e.g. `"calls >= 50 AND format = 'claude-code'"`), in the store's order
    (dataset, import time, id). A bad condition raises StoreError naming the database."""
    from workbench.store import Store

    with Store(db, read_only=True) as store:
        return store.load_sessions(dataset, where)


def iter_sessions(dataset: str | None = None, where: str | None = None,
                  db: str | os.PathLike[str] | None = None, *, batch_sessions: int = 64) -> Iterator[Session]:
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
            raise StoreError(f"{len(matches)} sessions start with {wanted!r} in {store.path} ({shown}); "
                             "give more of the id")
        return store.load_session(matches[0])
