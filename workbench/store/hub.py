"""The process's one DuckDB instance, to which each database file is attached while it is in use.

Opening a file with `duckdb.connect` starts a DuckDB instance of its own: its catalog of built-in
functions, its thread pool, its buffer manager. That costs 20-40 ms of CPU however small the file,
and the store opens files often, since it lets go of a file whenever no thread of the process uses
it (so other processes get in, see `workbench.store.db`). Attaching a file to an instance that is
already running (`ATTACH`, and `DETACH` to let go) costs a few milliseconds and takes and releases
the same file lock.

A file is attached once per process however many connections use it (DuckDB refuses a second
attachment of one file), under an alias of its own; each `Connection` is a cursor of the instance
whose default catalog is that alias, so unqualified table names are the file's tables. The file is
detached when its last connection closes.

A file opened for writing is attached with row groups of `ROW_GROUP_SIZE` rows, smaller than an
import's batch (`Store.batch_messages`, 10,000 messages by default).
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

import duckdb

from workbench.errors import StoreError

#: Rows per row group of the tables a writing attachment stores (DuckDB's default is 122,880). A
#: transaction that appends a row group or more writes it to the file, compressed, as it goes; a smaller
#: append goes to the write-ahead log, and a checkpoint later compresses it into the table's last row
#: group, rewriting what that group already held. At the default size the 100 MB import bench never
#: filled a row group, so each checkpoint compressed the messages again, and the last one (0.3 s) came
#: after the parse had ended. At this size (one vector, the rows DuckDB handles at a time) every
#: batch of the import is written as it comes, and the checkpoint at the end rewrites at most 2,048
#: rows: the import's median fell from 2.17 s to 1.90 s (8 alternating runs; 2.02 s at 4,096 rows,
#: 2.11 s at 8,192), the file from 21 to 19 MB, and the corpus grid ran as fast as before.
ROW_GROUP_SIZE = 2048


class HeldInProcessError(StoreError):
    """The file is attached in this process in the other mode (read-only against read-write): DuckDB
    keeps one attachment per file, so it can be opened again only once that one is closed."""


@dataclass
class _Attachment:
    alias: str
    read_only: bool
    users: int = 0


class Hub:
    """The DuckDB instance of this process (started on first use) and the files attached to it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._instance: duckdb.DuckDBPyConnection | None = None
        self._attached: dict[str, _Attachment] = {}
        self._aliases = 0

    def _started(self) -> duckdb.DuckDBPyConnection:
        if self._instance is None:
            instance = duckdb.connect(":memory:")
            # Spilled blocks go to a folder of this process (an in-memory instance's default is ./.tmp).
            spill = os.path.join(tempfile.gettempdir(), f"workbench-duckdb-{os.getpid()}")
            instance.execute(f"SET temp_directory = '{spill.replace(chr(39), chr(39) * 2)}'")
            self._instance = instance
        return self._instance

    def attach(self, target: str, read_only: bool) -> Connection:
        """A connection to `target` (a file's real path, or ":memory:" for a private in-memory
        database), attaching the file unless a connection of this process already has it.

        Raises what DuckDB raises when the file cannot be attached (e.g. `duckdb.IOException` while
        another process holds it), and `HeldInProcessError` when this process has it attached in the
        other mode (read-only against read-write)."""
        with self._lock:
            instance = self._started()
            attachment = self._attached.get(target) if target != ":memory:" else None
            if attachment is not None and attachment.read_only != read_only:
                held = "read-only" if attachment.read_only else "for writing"
                raise HeldInProcessError(
                    f"database {target} is open {held} in this process; close it before opening it "
                    f"{'read-only' if read_only else 'for writing'}"
                )
            if attachment is None:
                self._aliases += 1
                alias = f"wb{self._aliases}"
                quoted = target.replace("'", "''")
                options = "READ_ONLY" if read_only else f"ROW_GROUP_SIZE {ROW_GROUP_SIZE}"
                instance.execute(f"ATTACH '{quoted}' AS {alias} ({options})")
                attachment = _Attachment(alias, read_only)
                if target != ":memory:":
                    self._attached[target] = attachment
            attachment.users += 1
            cursor = self._cursor(attachment.alias)
        return Connection(self, cursor, attachment.alias, lambda: self._release(target, attachment))

    def _cursor(self, alias: str) -> duckdb.DuckDBPyConnection:
        cursor = self._started().cursor()
        cursor.execute(f"USE {alias}")
        return cursor

    def cursor(self, alias: str) -> duckdb.DuckDBPyConnection:
        """Another cursor on an attached database (it does not keep the file attached)."""
        with self._lock:
            return self._cursor(alias)

    def _release(self, target: str, attachment: _Attachment) -> None:
        with self._lock:
            attachment.users -= 1
            if attachment.users > 0:
                return
            if self._attached.get(target) is attachment:
                del self._attached[target]
            assert self._instance is not None
            self._instance.execute(f"DETACH {attachment.alias}")

    def attached(self, target: str) -> bool:
        """Whether a connection of this process has `target` (a real path) attached now."""
        with self._lock:
            return target in self._attached


class Connection:
    """A connection to one database: a DuckDB cursor of the `Hub` whose default catalog is the
    database's alias. It answers what a `duckdb.DuckDBPyConnection` answers (`execute` returns the
    cursor, with the results); `close()` ends the cursor and, for the connection that attached the
    database, lets the file go once no other connection of the process uses it.

    DuckDB looks up Python objects named in a statement (replacement scans) among the locals of the
    code that calls `execute`: run such statements on `raw`, from the function holding the object."""

    __slots__ = ("_hub", "raw", "alias", "_release")

    def __init__(self, hub: Hub, raw: duckdb.DuckDBPyConnection, alias: str, release: Any = None):
        self._hub = hub
        self.raw = raw
        self.alias = alias
        self._release = release

    def execute(self, query: Any, parameters: Any = None) -> duckdb.DuckDBPyConnection:
        return self.raw.execute(query, parameters)

    def executemany(self, query: Any, parameters: Any = None) -> duckdb.DuckDBPyConnection:
        return self.raw.executemany(query, parameters)

    def cursor(self) -> Connection:
        """Another cursor on the same database, for another thread (it does not hold the file)."""
        return Connection(self._hub, self._hub.cursor(self.alias), self.alias)

    def close(self) -> None:
        """End this cursor; the connection that attached the file lets it go (once, when unused)."""
        release, self._release = self._release, None
        try:
            self.raw.close()
        finally:
            if release is not None:
                release()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


#: A connection of the store or one a caller opened with `duckdb.connect` (tests, the SQL console).
AnyConnection = Connection | duckdb.DuckDBPyConnection


def raw(connection: AnyConnection) -> duckdb.DuckDBPyConnection:
    """The DuckDB cursor under `connection`, for statements that name a Python object (see `Connection`)."""
    return connection.raw if isinstance(connection, Connection) else connection


#: The process's hub.
HUB = Hub()
