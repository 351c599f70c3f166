"""Plain data for the pages (no streamlit here): the database path and stamp, reads that say when a run of
the app holds the database, the SQL console. The read models themselves are in `workbench.access`.

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

from workbench.errors import StoreError
from workbench.store import console
from workbench.store.console import is_busy
from workbench.store.db import default_path

if TYPE_CHECKING:
    import pandas as pd

    from workbench.session import Session
    from workbench.store import Store

#: Rows a console query returns at most (the page shows a table, not a dump).
SQL_ROW_LIMIT = 10_000

#: What a page says when a run launched from this app holds the database for writing.
BUSY_MESSAGE = (
    "An experiment or regression check launched from this app is writing to the database, and DuckDB "
    "lets the app read it again only when that run has finished: wait for it to finish (its progress "
    "shows on the Experiments or Regression page), then reload this page."
)


class DatabaseBusyError(StoreError):
    """The database is held for writing by a run in this process (an experiment or a regression check
    launched from the app): the process's DuckDB holds one attachment of a file, the run's, for writing,
    and a read-only open is refused until the run lets it go."""


@contextmanager
def busy_as_message() -> Iterator[None]:
    """DuckDB's refusal to open the file while a run of this app writes, as `DatabaseBusyError`."""
    try:
        yield
    except Exception as exc:
        if is_busy(exc):
            raise DatabaseBusyError(BUSY_MESSAGE) from exc
        raise


@contextmanager
def reading(path: str) -> Iterator[Store]:
    """The database opened read-only for one read, closed after it; `DatabaseBusyError` (with
    `BUSY_MESSAGE`) while a run of this app is writing to it."""
    from workbench.store import Store

    with busy_as_message():
        store = Store(path, read_only=True)
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
    """`workbench.access.overview`, with `DatabaseBusyError` while a run of this app writes."""
    from workbench.access import overview

    with busy_as_message():
        return overview(path)


def load_session(path: str, session_id: str) -> Session:
    with reading(path) as store:
        return store.load_session(session_id)


def pretty_arguments(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


def run_sql(path: str, sql: str, limit: int = SQL_ROW_LIMIT) -> tuple[pd.DataFrame, bool]:
    """`workbench.store.console.run_sql` (read-only, no file access), with `DatabaseBusyError` while a
    run of this app writes."""
    with busy_as_message():
        return console.run_sql(path, sql, limit)


def table_names(path: str) -> list[str]:
    """The tables and views a console query can read."""
    with busy_as_message():
        return console.table_names(path)
