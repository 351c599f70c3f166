"""Plain data for the pages (no streamlit here): overviews, one session's messages, ad-hoc comparison frames.

Every read opens the database read-only and closes it right after, so the app never holds DuckDB's
lock between reruns (the CLI can import while the app is open).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from workbench.db import default_path
from workbench.errors import StoreError

if TYPE_CHECKING:
    import pandas as pd

    from workbench.session import Session
    from workbench.store import Store

#: Rows a console query returns at most (the page shows a table, not a dump).
SQL_ROW_LIMIT = 10_000

#: What a page says when a run launched from this app holds the database for writing.
BUSY_MESSAGE = ("An experiment or regression check launched from this app is writing to the database, and DuckDB "
                "lets the app read it again only when that run has finished: wait for it to finish (its progress "
                "shows on the Experiments or Regression page), then reload this page.")


class DatabaseBusyError(StoreError):
    """The database is held for writing by a run in this process (an experiment or a regression check
    launched from the app): DuckDB refuses a read-only connection to it until the run closes its own."""


def is_busy(exc: BaseException) -> bool:
    """True for DuckDB's refusal to open a file this process already holds with another configuration
    (the writer's), e.g. "Can't open a connection to same database file with a different configuration"."""
    import duckdb

    return isinstance(exc, duckdb.ConnectionException) and "different configuration" in str(exc)


@contextmanager
def reading(path: str) -> Iterator[Store]:
    """The database opened read-only for one read, closed after it; `DatabaseBusyError` (with
    `BUSY_MESSAGE`) while a run of this app is writing to it."""
    from workbench.store import Store

    try:
        store = Store(path, read_only=True)
    except Exception as exc:
        if is_busy(exc):
            raise DatabaseBusyError(BUSY_MESSAGE) from exc
        raise
    with store:
        yield store


def db_path_from_args(argv: Sequence[str] | None = None) -> str:
    """`--db PATH` from the script arguments (`streamlit run app.py -- --db PATH`), else the default."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db", default=None)
    args, _ = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    return args.db or default_path()


def stamp(path: str) -> float:
    """Cache key part: the file's (and its WAL's) modification time."""
    stamps = [os.path.getmtime(p) for p in (path, path + ".wal") if os.path.exists(p)]
    return max(stamps) if stamps else 0.0


def overview(path: str) -> dict[str, list[dict[str, Any]]]:
    """Datasets, and sessions with their size in characters and their recorded compaction count."""
    with reading(path) as store:
        sessions = store.session_rows()
        characters = dict(store.connection.execute(
            "SELECT session_id, sum(length(coalesce(text, '')))::BIGINT FROM message_texts GROUP BY session_id"
        ).fetchall())
        for row in sessions:
            row["characters"] = int(characters.get(row["id"], 0))
        return {"datasets": store.dataset_rows(), "sessions": sessions}


def load_session(path: str, session_id: str) -> Session:
    with reading(path) as store:
        return store.load_session(session_id)


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
        messages.append({
            "index": index, "role": message.role, "text": message.text, "name": message.name,
            "tool_call_id": message.tool_call_id, "importance": message.importance, "origin": message.origin,
            "observation": message.is_observation,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls],
            "non_text_parts": _non_text_parts(message.content), "tokens": tokens, "cumulative_tokens": total,
        })
    metadata = {k: v for k, v in session.metadata.items() if k != "recorded_compactions"}
    return {"id": session.id, "dataset": session.dataset, "format": session.format, "messages": messages,
            "recorded_compactions": [c.to_dict() for c in session.recorded_compactions],
            "probes": [p.to_dict() for p in session.probes], "tools": [dict(t) for t in session.tools],
            "metadata": metadata, "calls": session.calls, "tokens": total}


def pretty_arguments(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


def run_sql(path: str, sql: str, limit: int = SQL_ROW_LIMIT) -> tuple[pd.DataFrame, bool]:
    """Run `sql` on a read-only connection with file access disabled and locked; (rows, truncated).

    The connection cannot read or write files outside the database (`read_csv`, `COPY`, `ATTACH`,
    extensions), cannot change that setting back, and cannot write to the database.
    """
    import duckdb

    try:
        con = duckdb.connect(path, read_only=True,
                             config={"enable_external_access": False, "lock_configuration": True})
    except duckdb.Error as exc:
        if is_busy(exc):
            raise DatabaseBusyError(BUSY_MESSAGE) from exc
        raise StoreError(f"cannot open {path} read-only: {exc}") from exc
    try:
        cursor = con.execute(sql)
        if cursor.description is None:
            import pandas as pd

            return pd.DataFrame(), False
        columns = [d[0] for d in cursor.description]
        rows = cursor.fetchmany(limit + 1)
        import pandas as pd

        return pd.DataFrame(rows[:limit], columns=columns), len(rows) > limit
    finally:
        con.close()


def table_names(path: str) -> list[str]:
    """The tables and views a console query can read."""
    frame, _ = run_sql(path, "SELECT table_name FROM information_schema.tables "
                             "WHERE table_schema = 'main' ORDER BY table_name")
    return [str(v) for v in frame["table_name"]] if len(frame) else []
