"""The DuckDB database file: where it is, how it is opened, and its schema migrations.

Every table of the workbench is created here by append-only, named migrations recorded in
`schema_migrations`; a migration is never edited once released, only followed by a new one.
Higher layers (`store`, `llm`, `experiments`) read and write through `connect()`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import duckdb

from workbench.errors import StoreError

DEFAULT_DB = "data/workbench.duckdb"

MIGRATIONS: tuple[tuple[str, str], ...] = (
    ("0001_sessions", """
        CREATE TABLE datasets (
            name VARCHAR PRIMARY KEY,
            description VARCHAR,
            created_at TIMESTAMP DEFAULT current_timestamp
        );
        CREATE TABLE sessions (
            id VARCHAR PRIMARY KEY,
            dataset VARCHAR NOT NULL,
            format VARCHAR NOT NULL,
            source VARCHAR,
            message_count INTEGER NOT NULL,
            call_count INTEGER NOT NULL,
            tools JSON,
            metadata JSON,
            imported_at TIMESTAMP DEFAULT current_timestamp
        );
        CREATE TABLE messages (
            session_id VARCHAR NOT NULL,
            idx INTEGER NOT NULL,
            role VARCHAR NOT NULL,
            content JSON,
            text VARCHAR,
            tool_calls JSON,
            tool_call_id VARCHAR,
            name VARCHAR,
            origin VARCHAR NOT NULL,
            importance DOUBLE NOT NULL,
            metadata JSON
        );
        CREATE TABLE probes (
            session_id VARCHAR NOT NULL,
            idx INTEGER NOT NULL,
            question VARCHAR NOT NULL,
            expected VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            from_call INTEGER NOT NULL
        );
        CREATE TABLE token_counts (
            session_id VARCHAR NOT NULL,
            idx INTEGER NOT NULL,
            tokenizer VARCHAR NOT NULL,
            tokens INTEGER NOT NULL
        );
    """),
    ("0002_llm_cache", """
        CREATE TABLE llm_cache (
            key VARCHAR PRIMARY KEY,
            model VARCHAR NOT NULL,
            request JSON NOT NULL,
            response_text VARCHAR NOT NULL,
            input_tokens INTEGER,
            output_tokens INTEGER,
            cost_usd DOUBLE,
            finish_reason VARCHAR,
            duration_s DOUBLE,
            created_at TIMESTAMP DEFAULT current_timestamp
        );
    """),
)


def default_path() -> str:
    """`$WORKBENCH_DB`, else `data/workbench.duckdb` (relative to the working directory)."""
    return os.environ.get("WORKBENCH_DB") or DEFAULT_DB


_LOCK_PID = re.compile(r"PID (\d+)")


def connect(path: str | os.PathLike[str] | None = None, *, read_only: bool = False,
            migrate: bool = True) -> duckdb.DuckDBPyConnection:
    """Open the database file (creating it and its folder) and bring its schema up to date.

    `":memory:"` opens a private in-memory database. A file held by another process raises
    `StoreError` saying so, rather than DuckDB's lock message.
    """
    target = str(path) if path is not None else default_path()
    if target != ":memory:" and not read_only:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    try:
        connection = duckdb.connect(target, read_only=read_only)
    except duckdb.IOException as exc:
        message = str(exc)
        if "lock" in message.lower():
            pid = _LOCK_PID.search(message)
            holder = f" (pid {pid.group(1)})" if pid else ""
            raise StoreError(f"database {target} is in use by another process{holder}; "
                             f"close it or pass another --db") from exc
        raise StoreError(f"cannot open database {target}: {message}") from exc
    if migrate and not read_only:
        apply_migrations(connection)
    return connection


def applied_migrations(connection: duckdb.DuckDBPyConnection) -> list[str]:
    exists = connection.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_migrations'").fetchall()[0][0]
    if not exists:
        return []
    return [row[0] for row in connection.execute("SELECT name FROM schema_migrations ORDER BY name").fetchall()]


def apply_migrations(connection: duckdb.DuckDBPyConnection) -> list[str]:
    """Apply every migration not yet recorded, each in its own transaction; returns their names."""
    connection.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                       "(name VARCHAR PRIMARY KEY, applied_at TIMESTAMP DEFAULT current_timestamp)")
    done = set(applied_migrations(connection))
    applied = []
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        connection.execute("BEGIN TRANSACTION")
        try:
            connection.execute(sql)
            connection.execute("INSERT INTO schema_migrations (name) VALUES (?)", [name])
            connection.execute("COMMIT")
        except Exception:
            connection.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied


def schema_version(connection: duckdb.DuckDBPyConnection) -> str | None:
    """The name of the newest applied migration."""
    names = applied_migrations(connection)
    return names[-1] if names else None
