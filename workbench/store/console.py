"""The read-only SQL console: a user's query on a connection that can read the database and nothing else."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.errors import StoreError

if TYPE_CHECKING:
    import pandas as pd

#: The query the console opens with: sessions and calls per dataset and format.
EXAMPLE_QUERY = (
    "SELECT dataset, format, count(*) AS sessions, sum(call_count) AS calls\n"
    "FROM sessions\nGROUP BY ALL\nORDER BY sessions DESC"
)


def is_busy(exc: BaseException) -> bool:
    """True for a refusal to open a file this process already holds in another way: the store's read-only
    open of a file a run of this process writes (`HeldInProcessError`), or the console's own DuckDB
    refused a file the store has open ("Unique file handle conflict")."""
    import duckdb

    from workbench.store.hub import HeldInProcessError

    return isinstance(exc, HeldInProcessError) or (
        isinstance(exc, duckdb.ResourceInUseException) and "file handle conflict" in str(exc)
    )


def run_sql(path: str, sql: str, limit: int) -> tuple[pd.DataFrame, bool]:
    """Run `sql` on a read-only connection with file access disabled and locked; (at most `limit`
    rows, whether there were more).

    The connection cannot read or write files outside the database (`read_csv`, `COPY`, `ATTACH`,
    extensions), cannot change that setting back, and cannot write to the database. A file this
    process holds for writing raises DuckDB's own error (`is_busy` tells it apart); another that
    cannot be opened raises `StoreError`; an error in the query is DuckDB's, for the user to read.
    """
    import duckdb
    import pandas as pd

    try:
        con = duckdb.connect(path, read_only=True, config={"enable_external_access": False, "lock_configuration": True})
    except duckdb.Error as exc:
        if is_busy(exc):
            raise
        raise StoreError(f"cannot open {path} read-only: {exc}") from exc
    try:
        cursor = con.execute(sql)
        if cursor.description is None:
            return pd.DataFrame(), False
        columns = [d[0] for d in cursor.description]
        rows = cursor.fetchmany(limit + 1)
        return pd.DataFrame(rows[:limit], columns=columns), len(rows) > limit
    finally:
        con.close()


def table_names(path: str) -> list[str]:
    """The tables and views a console query can read."""
    frame, _ = run_sql(
        path,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY table_name",
        limit=10_000,
    )
    return [str(v) for v in frame["table_name"]] if len(frame) else []
