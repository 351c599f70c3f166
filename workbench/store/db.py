"""The DuckDB database file: where it is, how it is opened, and its schema migrations.

Every table of the workbench is created here by append-only, named migrations recorded in
`schema_migrations`; a migration is never edited once released, only followed by a new one.
Higher layers (`store`, `llm`, `experiments`) read and write through `connect()`, which refuses
a path naming a file that is not a DuckDB database (a CSV or JSON file passed as `--db` by mistake
is never opened, so never changed) and, with `create=False`, a path that does not exist.

DuckDB lets one process open a file for writing and then no other process open it at all, so a
process holds the file only while it reads or writes: `connect()` waits a while for another
process's hold to end (`WORKBENCH_LOCK_WAIT` seconds, 10 by default) before saying the file is in
use, and a long writer (a run, the model cache) opens it through a `FileHold`, which closes it
again as soon as no thread of the process uses it. Opening is cheap for that: a file is attached to
the process's one DuckDB instance (`workbench.store.hub`) rather than starting one of its own.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from workbench.errors import StoreError
from workbench.store.hub import HUB, AnyConnection, Connection, raw

DEFAULT_DB = "data/workbench.duckdb"

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_sessions",
        """
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
    """,
    ),
    (
        "0002_llm_cache",
        """
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
    """,
    ),
    # Each message's content once: a string in `content`, a list of parts in `parts` (0001 kept the
    # string twice, as JSON and as `text`), zstd-compressed (DuckDB leaves long strings uncompressed
    # otherwise). `message_texts` gives the text of every message.
    (
        "0003_content_once",
        """
        CREATE TABLE messages_0003 (
            session_id VARCHAR NOT NULL,
            idx INTEGER NOT NULL,
            role VARCHAR NOT NULL,
            content VARCHAR USING COMPRESSION zstd,
            parts JSON USING COMPRESSION zstd,
            tool_calls JSON USING COMPRESSION zstd,
            tool_call_id VARCHAR,
            name VARCHAR,
            origin VARCHAR NOT NULL,
            importance DOUBLE NOT NULL,
            metadata JSON USING COMPRESSION zstd
        );
        INSERT INTO messages_0003
        SELECT session_id, idx, role,
               CASE WHEN json_type(content) = 'VARCHAR' THEN text END,
               CASE WHEN json_type(content) <> 'VARCHAR' THEN content END,
               tool_calls, tool_call_id, name, origin, importance, metadata
        FROM messages ORDER BY session_id, idx;
        DROP TABLE messages;
        ALTER TABLE messages_0003 RENAME TO messages;
        CREATE VIEW message_texts AS
        SELECT session_id, idx, role,
               coalesce(content, array_to_string(list_transform(
                   list_filter(CAST(parts AS JSON[]), lambda p: p ->> 'type' = 'text'),
                   lambda p: p ->> 'text'), chr(10)), '') AS text
        FROM messages;
    """,
    ),
    # Experiment results at four levels (run, cell, call, compaction); see workbench.experiments.results.
    (
        "0004_experiment_results",
        """
    CREATE TABLE runs (
        id VARCHAR PRIMARY KEY,
        name VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,
        spec JSON NOT NULL,
        code_version VARCHAR,
        dataset_version VARCHAR,
        datasets VARCHAR[],
        cells_total INTEGER,
        status VARCHAR NOT NULL,
        started_at TIMESTAMP NOT NULL,
        finished_at TIMESTAMP
    );
    CREATE TABLE run_configs (
        run_id VARCHAR NOT NULL,
        config VARCHAR NOT NULL,
        position INTEGER NOT NULL,
        spec JSON NOT NULL,
        PRIMARY KEY (run_id, config)
    );
    CREATE TABLE cells (
        run_id VARCHAR NOT NULL,
        session_id VARCHAR NOT NULL,
        dataset VARCHAR,
        config VARCHAR NOT NULL,
        repeat INTEGER NOT NULL,
        termination VARCHAR NOT NULL,
        error VARCHAR,
        duration_s DOUBLE,
        summarizer VARCHAR,
        metrics JSON NOT NULL,
        finished_at TIMESTAMP NOT NULL,
        PRIMARY KEY (run_id, session_id, config, repeat)
    );
    CREATE TABLE cell_metrics (
        run_id VARCHAR NOT NULL,
        session_id VARCHAR NOT NULL,
        config VARCHAR NOT NULL,
        repeat INTEGER NOT NULL,
        metric VARCHAR NOT NULL,
        value DOUBLE,
        text VARCHAR
    );
    CREATE TABLE cell_calls (
        run_id VARCHAR NOT NULL,
        session_id VARCHAR NOT NULL,
        config VARCHAR NOT NULL,
        repeat INTEGER NOT NULL,
        call_index INTEGER NOT NULL,
        message_index INTEGER,
        context_messages INTEGER,
        context_tokens BIGINT,
        completion_tokens BIGINT,
        cached_prefix_tokens BIGINT,
        compacted_before BOOLEAN,
        recorded_input_tokens BIGINT,
        recorded_compaction BOOLEAN
    );
    CREATE TABLE cell_compactions (
        run_id VARCHAR NOT NULL,
        session_id VARCHAR NOT NULL,
        config VARCHAR NOT NULL,
        repeat INTEGER NOT NULL,
        event_index INTEGER NOT NULL,
        call_index INTEGER NOT NULL,
        messages_before INTEGER,
        messages_after INTEGER,
        tokens_before BIGINT,
        tokens_after BIGINT,
        summary VARCHAR,
        duration_s DOUBLE,
        fell_back BOOLEAN,
        no_progress BOOLEAN,
        breaker_open BOOLEAN,
        error VARCHAR,
        summarizer_calls INTEGER,
        summarizer_input_tokens BIGINT,
        summarizer_output_tokens BIGINT,
        summarizer_cost_usd DOUBLE,
        details JSON
    );
    CREATE VIEW results_long AS
        SELECT c.run_id, c.session_id, c.dataset, c.config, c.repeat, c.termination, m.metric, m.value, m.text
        FROM cells c JOIN cell_metrics m USING (run_id, session_id, config, repeat);
    CREATE VIEW config_metrics AS
        SELECT run_id, config, metric, avg(value) AS mean, min(value) AS min, max(value) AS max,
               count(value) AS n
        FROM cell_metrics WHERE value IS NOT NULL GROUP BY ALL;
""",
    ),
    # Which user messages are observations (a text-action agent's command output; tool results are by
    # role). NULL on rows stored before: the store derives them again (`Store.derive_observations`).
    (
        "0005_message_observations",
        """
    ALTER TABLE messages ADD COLUMN observation BOOLEAN;
""",
    ),
    # Whether a compaction event left the context unchanged (a no-op firing: not counted in `compactions`).
    # NULL on rows stored before, which did not tell.
    (
        "0006_compaction_noop",
        """
    ALTER TABLE cell_compactions ADD COLUMN noop BOOLEAN;
""",
    ),
    # A researcher's verdict on one compaction's summary: the session, the config's hash
    # (`workbench.config.config_hash`, so a renamed config keeps its labels), and the compaction's
    # `event_index` in the replay. A new label for the same key replaces the old one.
    (
        "0007_summary_labels",
        """
    CREATE TABLE summary_labels (
        session_id VARCHAR NOT NULL,
        config_hash VARCHAR NOT NULL,
        config VARCHAR NOT NULL,
        compaction INTEGER NOT NULL,
        label VARCHAR NOT NULL CHECK (label IN ('good', 'bad')),
        note VARCHAR,
        labelled_at TIMESTAMP NOT NULL,
        PRIMARY KEY (session_id, config_hash, compaction)
    );
""",
    ),
    # The process writing a run (host name and pid): other processes read a run while it goes on, and
    # tell a run still under way from one cut short by whether that process lives. NULL on runs before.
    (
        "0008_run_process",
        """
    ALTER TABLE runs ADD COLUMN host VARCHAR;
    ALTER TABLE runs ADD COLUMN pid INTEGER;
""",
    ),
    # The reusable quality measures of replays, by a fingerprint of what they read
    # (`workbench.quality.measure_memo`): the values as JSON, the session (its rows go with it) and the
    # code's version (a run keeps only its own version's).
    (
        "0009_measure_memo",
        """
    CREATE TABLE measure_memo (
        fingerprint VARCHAR PRIMARY KEY,
        session_id VARCHAR NOT NULL,
        version VARCHAR NOT NULL,
        measures VARCHAR NOT NULL,
        measured_at TIMESTAMP NOT NULL
    );
""",
    ),
)


def default_path() -> str:
    """`$WORKBENCH_DB`, else `data/workbench.duckdb` (relative to the working directory)."""
    return os.environ.get("WORKBENCH_DB") or DEFAULT_DB


MEMORY_LIMIT_ENV = "WORKBENCH_MEMORY_LIMIT"
LOCK_WAIT_ENV = "WORKBENCH_LOCK_WAIT"
DEFAULT_LOCK_WAIT = 10.0


def default_lock_wait() -> float:
    """`$WORKBENCH_LOCK_WAIT` (seconds to wait for a file another process holds), else 10."""
    raw = os.environ.get(LOCK_WAIT_ENV)
    if not raw:
        return DEFAULT_LOCK_WAIT
    try:
        return max(0.0, float(raw))
    except ValueError as exc:
        raise StoreError(f"${LOCK_WAIT_ENV} must be a number of seconds, not {raw!r}") from exc


def default_memory_limit() -> str | None:
    """`$WORKBENCH_MEMORY_LIMIT` (e.g. "1GB"), else None: DuckDB's own default (80 % of RAM)."""
    return os.environ.get(MEMORY_LIMIT_ENV) or None


def set_memory_limit(connection: AnyConnection, limit: str) -> None:
    """Cap DuckDB's memory (its buffer cache and operators, which spill to disk beyond it)."""
    try:
        connection.execute(f"SET memory_limit = '{str(limit).replace(chr(39), '')}'")
    except duckdb.Error as exc:
        raise StoreError(f"invalid memory limit {limit!r} (e.g. 512MB, 2GB): {exc}") from exc


#: Held while DuckDB scans a Python object (a replacement scan, a registered table). Two threads doing so
#: at once on one database (a run's cell writer storing cells while its session reader stores token
#: counts) once failed with "Table Function with name python_arrow_scan does not exist": DuckDB's scans of
#: Python objects have a history of races between threads, so the store never runs two at once.
python_scans = threading.RLock()


def insert_rows(connection: AnyConnection, table: str, rows: Any, existing: str = "fail") -> None:
    """`INSERT INTO table BY NAME` the rows of `rows` (an Arrow table, or anything DuckDB can scan);
    `existing="replace"` replaces a stored row whose primary key a new one repeats.

    DuckDB finds `_wb_insert_rows` among this function's local variables (a replacement scan):
    one statement, where registering the rows under a name and removing it again took three.
    """
    _wb_insert_rows = rows  # read by DuckDB's replacement scan in the statement below
    verb = {"fail": "INSERT", "replace": "INSERT OR REPLACE"}[existing]
    with python_scans:
        raw(connection).execute(f"{verb} INTO {table} BY NAME SELECT * FROM _wb_insert_rows")


def object_columns(columns: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """Columns of Python values (None for NULL) as numpy object arrays, which `insert_rows` scans as they
    are, each into its column's type: an Arrow table built from Python lists imports pandas (a fifth of
    a second) to check whether they are pandas objects."""
    import numpy as np

    return {name: np.fromiter(values, dtype=object, count=len(values)) for name, values in columns.items()}


_LOCK_PID = re.compile(r"PID (\d+)")
_MAGIC = b"DUCK"
_MAGIC_OFFSET = 8


class NotADatabaseError(StoreError):
    """The path names an existing file that is not a DuckDB database (it is left untouched)."""


class MissingDatabaseError(StoreError):
    """The database file does not exist and the caller asked not to create it."""


#: The database files this process has opened (real paths). Their header is not read again: closing any
#: descriptor of a file releases every POSIX lock the process holds on it, so reading the header of a file
#: another thread holds open would let another process in while that thread writes.
_OPENED: set[str] = set()


def _opened_here(path: str) -> bool:
    return os.path.realpath(path) in _OPENED


def check_database_path(path: str, *, create: bool = True) -> None:
    """Refuse a path that is a folder or a file other than a DuckDB database, and (unless
    `create`) a path that does not exist. An empty file counts as a new database."""
    if path == ":memory:":
        return
    if not os.path.exists(path):
        if not create:
            raise MissingDatabaseError(
                f"database {path} does not exist; create it with "
                f"`workbench init --db {path}` or `workbench import ... --db {path}`"
            )
        return
    if os.path.isdir(path):
        raise NotADatabaseError(f"--db {path} is a folder, not a DuckDB database file")
    if _opened_here(path):
        return
    try:
        with open(path, "rb") as handle:
            head = handle.read(_MAGIC_OFFSET + len(_MAGIC))
    except OSError as exc:
        raise StoreError(f"cannot read database {path}: {exc.strerror or exc}") from exc
    if head and head[_MAGIC_OFFSET:] != _MAGIC:
        raise NotADatabaseError(
            f"{path} is not a DuckDB database (left untouched); pass a .duckdb file "
            f"to --db, or import this file with `workbench import {path}`"
        )


def connect(
    path: str | os.PathLike[str] | None = None,
    *,
    read_only: bool = False,
    migrate: bool = True,
    create: bool = True,
    memory_limit: str | None = None,
    lock_wait: float | None = None,
) -> Connection:
    """Open the database file (creating it and its folder unless `create` is False or `read_only`)
    and bring its schema up to date.

    `":memory:"` opens a private in-memory database. A file held by another process is tried again,
    at growing intervals, for `lock_wait` seconds (default `$WORKBENCH_LOCK_WAIT`, else 10: another
    process holds it only while it writes a batch), then raises `StoreError` saying it is in use,
    rather than DuckDB's lock message; a file that is not a DuckDB database raises
    `NotADatabaseError`; a missing file with `create=False` or `read_only` raises
    `MissingDatabaseError`. `memory_limit` (default `$WORKBENCH_MEMORY_LIMIT`) caps DuckDB's memory:
    that of the process's one DuckDB (`workbench.store.hub`), shared by every database it has open.
    """
    target = str(path) if path is not None else default_path()
    check_database_path(target, create=create and not read_only)
    if target != ":memory:" and not read_only:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    connection = _open_waiting(target, read_only, default_lock_wait() if lock_wait is None else lock_wait)
    if target != ":memory:":
        _OPENED.add(os.path.realpath(target))
    limit = memory_limit or default_memory_limit()
    if limit:
        try:
            set_memory_limit(connection, limit)
        except StoreError:
            connection.close()
            raise
    if migrate and not read_only:
        apply_migrations(connection)
    return connection


def _open_waiting(target: str, read_only: bool, lock_wait: float) -> Connection:
    """Attach `target` to the process's DuckDB (`hub`), tried again while another process holds the
    file, until `lock_wait` has passed."""
    key = target if target == ":memory:" else os.path.realpath(target)
    deadline = time.monotonic() + max(0.0, lock_wait)
    pause = 0.02
    while True:
        try:
            return HUB.attach(key, read_only)
        except duckdb.IOException as exc:
            message = str(exc)
            if "lock" not in message.lower():
                raise StoreError(f"cannot open database {target}: {message}") from exc
            left = deadline - time.monotonic()
            if left <= 0:
                pid = _LOCK_PID.search(message)
                holder = f" (pid {pid.group(1)})" if pid else ""
                raise StoreError(
                    f"database {target} is in use by another process{holder}; close it or pass another --db"
                ) from exc
        # jittered, so that two waiting processes do not keep trying at the same instants
        time.sleep(min(left, pause * random.uniform(0.5, 1.0)))
        pause = min(pause * 1.5, 0.25)


#: How long a writer holds the file before it lets other processes in (between an import's batches,
#: after a run's last read or write): long enough that opening the file is not paid per batch or per
#: model-cache lookup, short enough that a reader waits about that long at most.
HOLD_SECONDS = 1.0


class FileHold:
    """One process's hold on a database file, shared by its threads: `open()` yields a cursor on a
    connection opened for the first user, so the file is held only while some thread reads or writes
    (another process can open it in between, see `connect`).

    `linger` (seconds, default 0) keeps the connection open after its last user, until it has been
    open that long: a run making many brief reads and writes (model-cache lookups, cell batches)
    then opens the file about once per `linger` seconds instead of once per read (an open and the
    checkpoint on closing cost milliseconds each), and still lets other processes in at least that often.
    `close()` lets go at once. The schema is migrated on the first open only. Each user gets a cursor
    of its own (DuckDB cursors are not shared between threads); a transaction begun on it ends before
    the `with` does.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        memory_limit: str | None = None,
        lock_wait: float | None = None,
        linger: float = 0.0,
    ):
        self.path = str(path) if path is not None else default_path()
        self.memory_limit = memory_limit
        self.lock_wait = lock_wait
        self.linger = max(0.0, float(linger))
        self._lock = threading.Lock()
        self._connection: Connection | None = None
        self._opened_at = 0.0
        self._users = 0
        self._migrated = False
        self._timer: threading.Timer | None = None
        self.opened = 0  # how many times the file was opened: a figure for tests and progress reports

    @contextmanager
    def open(self) -> Iterator[Connection]:
        with self._lock:
            if self._connection is None:
                self._connection = connect(
                    self.path, migrate=not self._migrated, memory_limit=self.memory_limit, lock_wait=self.lock_wait
                )
                self._opened_at = time.monotonic()
                self._migrated = True
                self.opened += 1
            self._users += 1
            cursor = self._connection.cursor()
        try:
            yield cursor
        finally:
            cursor.close()
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    left = self._opened_at + self.linger - time.monotonic()
                    if left <= 0:
                        self._close_connection()
                    elif self._timer is None:
                        self._timer = threading.Timer(left, self._close_when_idle)
                        self._timer.daemon = True
                        self._timer.start()

    def _close_when_idle(self) -> None:
        with self._lock:
            self._timer = None
            if self._users == 0:
                self._close_connection()

    def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def close(self) -> None:
        """Let go of the file now (a lingering connection is closed; users still inside keep theirs
        until they are done, and the last one closes it)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._users == 0:
                self._close_connection()
            else:
                self._opened_at = float("-inf")

    @property
    def held(self) -> bool:
        """Whether a thread of this process has the file open through this hold now."""
        return self._connection is not None


def applied_migrations(connection: AnyConnection) -> list[str]:
    exists = connection.execute(
        "SELECT count(*) FROM duckdb_tables() "
        "WHERE table_name = 'schema_migrations' AND database_name = current_database()"
    ).fetchall()[0][0]
    if not exists:
        return []
    return [row[0] for row in connection.execute("SELECT name FROM schema_migrations ORDER BY name").fetchall()]


def apply_migrations(connection: AnyConnection) -> list[str]:
    """Apply every migration not yet recorded, each in its own transaction; returns their names.

    An up-to-date database is only read (every open of a file for writing asks)."""
    done = set(applied_migrations(connection))
    if all(name in done for name, _ in MIGRATIONS):
        return []
    connection.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(name VARCHAR PRIMARY KEY, applied_at TIMESTAMP DEFAULT current_timestamp)"
    )
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


def pending_migrations(connection: AnyConnection) -> list[str]:
    """The names of the migrations not yet applied to this database."""
    done = set(applied_migrations(connection))
    return [name for name, _ in MIGRATIONS if name not in done]


def schema_version(connection: AnyConnection) -> str | None:
    """The name of the newest applied migration."""
    names = applied_migrations(connection)
    return names[-1] if names else None


def rollback_quietly(connection: AnyConnection) -> None:
    """Roll back the open transaction, if any: a failure's own error is the one to report."""
    try:
        connection.execute("ROLLBACK")
    except duckdb.Error:
        pass


def unregister_quietly(connection: AnyConnection, name: str) -> None:
    """Drop a registered view, if it is still there."""
    try:
        connection.unregister(name)
    except duckdb.Error:
        pass
