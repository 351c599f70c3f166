"""Reads and writes of sessions in the DuckDB database (schema: `workbench.store.db`).

    with Store("data/workbench.duckdb") as store:
        report = store.import_paths(["recordings/"])        # streamed, batched, per-file errors
        frame = store.sessions(dataset="samples")           # one row per session (pandas)
        session = store.load_session(frame.id[0])           # messages, probes, tools, metadata

Imports (`import_sessions`, `import_paths`) go through the batch writer (`workbench.store.writer`):
writes go in batches of whole sessions (about `batch_messages` messages each); a batch is one
transaction, so a session is stored whole or not at all. Batches are built as columns (NumPy
arrays, which DuckDB scans without pandas or a copy through Arrow) and inserted with
`INSERT ... SELECT` (never row by row). A session whose id is already stored is
skipped and counted as a duplicate; one that continues a stored session of the same recording
(a live session read again after it grew, `continues`) replaces it once the import holds.
`import_paths` streams each file through
`workbench.importers` and keeps the importers' rule that a file which fails to read contributes
no session: what a failing file had already written is deleted again.

Each message's content is stored once: a string in `content` (VARCHAR), a list of parts in
`parts` (the JSON array); the view `message_texts` gives every message's text (`Message.text`)
for SQL readers.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import duckdb

from workbench.errors import ConfigError, SessionFilterError, StoreError
from workbench.importers.observations import TEXT_ACTION_FORMATS, mark_observations
from workbench.importers.report import FileOutcome, ImportReport
from workbench.session import Message, Probe, Session, ToolCall
from workbench.session_pool import canonical
from workbench.store import db
from workbench.store.batch import json_text
from workbench.store.hub import Connection, raw
from workbench.store.import_workers import PIECE_BYTES, SPLIT_BYTES, default_workers
from workbench.store.labels import SUMMARY_LABEL_COLUMNS, SUMMARY_LABELS, SummaryLabel, summary_labels_frame
from workbench.store.writer import Writer

if TYPE_CHECKING:  # pandas loads on first use: keeps `workbench --help` fast
    import pandas as pd
    import pyarrow as pa

    from workbench.importers.outcomes import OutcomeMatch, OutcomeTable
    from workbench.store.model_cache import DuckDBCache
    from workbench.store.results import RunResults

DEFAULT_BATCH_MESSAGES = 10_000
DEFAULT_BATCH_BYTES = 24_000_000
COUNTABLE = ("sessions", "messages", "calls", "probes")

#: The tables holding a session, the session's own row first, each with the column naming the session.
SESSION_TABLES = (
    ("sessions", "id"),
    ("messages", "session_id"),
    ("probes", "session_id"),
    ("token_counts", "session_id"),
)
#: The columns of `Store.session_rows` and `Store.sessions()`.
SESSION_COLUMNS = (
    "id",
    "dataset",
    "format",
    "messages",
    "calls",
    "observations",
    "recorded_compactions",
    "probes",
    "source",
    "imported_at",
)

#: The outcomes `attach_outcomes` stored, as nullable boolean columns of the sessions filter
#: (`where = "outcome_resolved"`); NULL for a session without an outcome.
OUTCOME_COLUMNS_SQL = (
    "TRY_CAST(json_extract_string(metadata, '$.outcome.resolved') AS BOOLEAN) AS outcome_resolved, "
    "TRY_CAST(json_extract_string(metadata, '$.outcome.patch_applied') AS BOOLEAN) "
    "AS outcome_patch_applied"
)


# --------------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------------


class Store:
    """The workbench database: sessions, messages, probes, token counts.

    `Store(path)` opens (creating and migrating) the DuckDB file; `path` defaults to
    `$WORKBENCH_DB`, else `data/workbench.duckdb`. A file another process holds past
    `$WORKBENCH_LOCK_WAIT` seconds (10 by default, see `db.connect`) raises `StoreError`. With
    `read_only=True` nothing is created or migrated and other readers may open the file at the
    same time; with `create=False` a missing file raises
    `db.MissingDatabaseError` instead of being created, and a file that is not a DuckDB database
    always raises `db.NotADatabaseError` (and is left untouched). `batch_messages`/`batch_bytes` size the write batches;
    `import_workers` processes (default: one per core) read files of at least `split_bytes` in parts of
    about `piece_bytes` where their format allows it (`workbench.store.import_workers`);
    `memory_limit` (e.g. "512MB"; default `$WORKBENCH_MEMORY_LIMIT`) caps DuckDB's buffer cache,
    which otherwise keeps written blocks up to DuckDB's default (80 % of RAM). Use it as a context
    manager, or call `close()`.

    An import lets go of the file between its batches once it has held it for `HOLD_SECONDS`
    (`release`): the next use opens it again, so other processes (the CLI, the app, a notebook)
    read the database while a long import goes on.
    """

    #: How long an import holds the file before it lets other processes in between two batches.
    HOLD_SECONDS = db.HOLD_SECONDS

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        read_only: bool = False,
        batch_messages: int = DEFAULT_BATCH_MESSAGES,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        memory_limit: str | None = None,
        create: bool = True,
        import_workers: int | None = None,
        split_bytes: int = SPLIT_BYTES,
        piece_bytes: int = PIECE_BYTES,
        _borrowed: Connection | None = None,
    ):
        self.path = os.fspath(path) if path is not None else db.default_path()
        self.read_only = read_only
        self.batch_messages = max(1, int(batch_messages))
        self.batch_bytes = max(1, int(batch_bytes))
        self.import_workers = default_workers() if import_workers is None else max(1, int(import_workers))
        self.split_bytes = max(1, int(split_bytes))
        self.piece_bytes = max(1, int(piece_bytes))
        self._memory_limit = memory_limit
        self._closed = False
        self._connection_lock = threading.Lock()
        self.opened_at = time.monotonic()
        self._con: Connection | None = _borrowed
        if _borrowed is not None:  # `held_store`: the hold opened and migrated the file, and closes it
            return
        self._con = db.connect(self.path, read_only=read_only, create=create, memory_limit=memory_limit)
        if read_only and self.path != ":memory:":
            pending = db.pending_migrations(self._con)
            if pending:
                self.close()
                raise StoreError(
                    f"database {self.path} has an older schema (missing {', '.join(pending)}); open "
                    f"it once for writing to upgrade it, e.g. `workbench datasets --db {self.path}`"
                )
        if not read_only:
            self.derive_observations()

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def connection(self) -> Connection:
        """The open connection (opened again after a `release`)."""
        with self._connection_lock:
            if self._con is None:
                if self._closed:
                    raise StoreError(f"the store of {self.path} is closed")
                self._con = db.connect(self.path, read_only=self.read_only, memory_limit=self._memory_limit)
                self.opened_at = time.monotonic()
            return self._con

    @property
    def releasable(self) -> bool:
        """Whether `release` lets go of a file (an in-memory database would be lost instead)."""
        return self.path != ":memory:"

    def release(self) -> None:
        """Close the file until the next use, so another process may open it meanwhile (no transaction
        may be open, and objects holding the old connection, such as `results`, are done with)."""
        if not self.releasable:
            return
        with self._connection_lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    @property
    def results(self) -> RunResults:
        """The experiment tables (runs, cells, calls, compactions) through this store's connection."""
        from workbench.store.results import RunResults

        return RunResults(self.connection)

    def model_cache(self) -> DuckDBCache:
        """The model cache (`llm_cache`) through this store's connection, usable while the store is open."""
        from workbench.store.model_cache import DuckDBCache

        return DuckDBCache(self.connection)

    def set_memory_limit(self, limit: str) -> None:
        """Cap DuckDB's buffer cache (e.g. "512MB"): the process's, which this store's file shares
        (`workbench.store.hub`)."""
        db.set_memory_limit(self.connection, limit)
        self._memory_limit = limit

    def close(self) -> None:
        with self._connection_lock:
            self._closed = True
            if self._con is not None:
                self._con.close()
                self._con = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.path!r}{', read_only=True' if self.read_only else ''})"

    def _query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        try:
            return self.connection.execute(sql, params or []).fetchall()
        except duckdb.Error as exc:
            raise StoreError(f"query on {self.path} failed: {exc}") from exc

    def derive_observations(self, batch_sessions: int = 256) -> int:
        """Mark the observations of messages stored before the store recorded them (their
        `observation` is NULL), by the rule of each session's format (`mark_observations`), as an
        import marks them now; returns how many sessions were derived. Runs when the store opens
        for writing, so an older database is never read with its observations unmarked."""
        con = self.connection
        if not con.execute("SELECT count(*) FROM messages WHERE observation IS NULL").fetchall()[0][0]:
            return 0
        con.execute(
            "UPDATE messages SET observation = false WHERE observation IS NULL AND session_id NOT IN "
            "(SELECT id FROM sessions WHERE format IN (SELECT unnest(?::VARCHAR[])))",
            [sorted(TEXT_ACTION_FORMATS)],
        )
        ids = [
            row[0]
            for row in con.execute(
                "SELECT DISTINCT session_id FROM messages WHERE observation IS NULL ORDER BY session_id"
            ).fetchall()
        ]
        for start in range(0, len(ids), batch_sessions):
            derived = self._load(ids[start : start + batch_sessions], pooled=False)  # read once, let go
            import numpy as np

            _wb_observations = {  # read by DuckDB's replacement scan below
                "session_id": np.array([s.id for s in derived for _ in s.messages], dtype=object),
                "idx": np.array([i for s in derived for i in range(len(s.messages))], dtype=np.int32),
                "observation": np.array([m.observation for s in derived for m in s.messages], dtype=np.bool_),
            }
            con.execute("BEGIN TRANSACTION")
            try:
                with db.python_scans:
                    raw(con).execute("""UPDATE messages SET observation = o.observation
                                   FROM (SELECT * FROM _wb_observations) o
                                   WHERE messages.session_id = o.session_id AND messages.idx = o.idx""")
                con.execute(  # measured on messages that read otherwise now
                    "DELETE FROM measure_memo WHERE session_id IN (SELECT unnest(?::VARCHAR[]))",
                    [[s.id for s in derived]],
                )
                con.execute("COMMIT")
            except BaseException:
                db.rollback_quietly(con)
                raise
        con.execute("UPDATE messages SET observation = false WHERE observation IS NULL")  # of no stored session
        return len(ids)

    # -- writing ----------------------------------------------------------------------------------
    def import_sessions(
        self, sessions: Iterable[Session], dataset: str | None = None, *, source: str | None = None
    ) -> ImportReport:
        """Write `sessions` (any iterable, consumed in batches); ids already stored are skipped.

        `dataset` overrides each session's dataset; `source` each session's metadata `source`.
        """
        started = time.perf_counter()
        report = ImportReport()
        with Writer(self, report, dataset) as writer:
            for session in sessions:
                writer.add(session, source)
        report.seconds = time.perf_counter() - started
        return report

    def import_paths(
        self,
        paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        format: str = "auto",
        dataset: str | None = None,
        progress: Callable[[FileOutcome], None] | None = None,
        outcomes: str | os.PathLike[str] | OutcomeTable | None = None,
    ) -> ImportReport:
        """Import files or folders (walked recursively) through `workbench.importers`.

        Each file is streamed (JSONL line by line) into the batches. A file that fails to read is
        reported in `report.files` with its error, and what it had already written is removed,
        so it contributes nothing; the other files are imported. `progress` is called with each
        file's `FileOutcome` when the file is done.

        `outcomes` (a CSV such as a SWE-bench run's `results_summary.csv`, read before anything is
        imported: a bad file raises `FormatError` and imports nothing) is attached to the sessions
        of this import, the ones already stored included (`attach_outcomes`); `report.outcomes`
        says how many matched.
        """
        from workbench.collector import fewer_collections
        from workbench.importers import ignored_files
        from workbench.importers.outcomes import OutcomeTable, read_outcomes
        from workbench.importers.pipeline import read_paths

        table = outcomes if isinstance(outcomes, OutcomeTable) or outcomes is None else read_outcomes(outcomes)
        started = time.perf_counter()
        report = ImportReport()
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        given = [os.fspath(p) for p in paths]
        report.ignored = [FileOutcome(path=path, skipped=why) for path, why in ignored_files(given)]

        def done(outcome: FileOutcome) -> None:
            report.files.append(outcome)
            if progress is not None:
                progress(outcome)

        with fewer_collections(), Writer(self, report, dataset) as writer:
            read_paths(given, writer, format, dataset, done, read=writer.read)
        if table is not None:
            report.outcomes = self.attach_outcomes(table, [*report.session_ids, *sorted(writer.existing)])
        report.seconds = time.perf_counter() - started
        return report

    def attach_outcomes(
        self,
        outcomes: str | os.PathLike[str] | OutcomeTable,
        ids: Sequence[str] | None = None,
        dataset: str | None = None,
    ) -> OutcomeMatch:
        """Store per-instance outcomes (a CSV path or a read table) in the metadata `outcome` of
        the stored sessions `ids` (default: those of `dataset`, all when None) that ran a listed
        instance (metadata `instance_id`). Attaching again replaces an earlier outcome. Returns the
        match: sessions given an outcome, instances with no session, sessions with no row."""
        from workbench.importers.outcomes import INSTANCE_KEY, OUTCOME_KEY, OutcomeTable, match_outcomes, read_outcomes

        table = outcomes if isinstance(outcomes, OutcomeTable) else read_outcomes(outcomes)
        wanted = self.session_ids(dataset) if ids is None else list(dict.fromkeys(ids))
        rows = self._query(
            "SELECT id, json_extract_string(metadata, ?) FROM sessions "
            "WHERE id IN (SELECT unnest(?::VARCHAR[])) ORDER BY id",
            [f"$.{INSTANCE_KEY}", wanted],
        )
        match = match_outcomes(table, rows)
        if match.attached:
            session_ids = list(match.attached)
            values = [
                json_text({OUTCOME_KEY: outcome.to_metadata(match.source)}) for outcome in match.attached.values()
            ]
            self._query(
                """
                UPDATE sessions SET metadata = json_merge_patch(coalesce(sessions.metadata, '{}'::JSON), u.patch::JSON)
                FROM (SELECT unnest(?::VARCHAR[]) AS id, unnest(?::VARCHAR[]) AS patch) u
                WHERE sessions.id = u.id""",
                [session_ids, values],
            )
        return match

    def delete_sessions(self, ids: Iterable[str]) -> int:
        """Delete sessions (with their messages, probes, token counts and measures); returns how many existed."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return 0
        con = self.connection
        try:
            con.execute("BEGIN TRANSACTION")
            existing = con.execute(
                "SELECT count(*) FROM sessions WHERE id IN (SELECT unnest(?::VARCHAR[]))", [ids]
            ).fetchall()[0][0]
            for table, column in (*reversed(SESSION_TABLES), ("measure_memo", "session_id")):
                con.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT unnest(?::VARCHAR[]))", [ids])
            con.execute("COMMIT")
        except duckdb.Error as exc:
            db.rollback_quietly(con)
            raise StoreError(f"cannot delete sessions from {self.path}: {exc}") from exc
        return int(existing)

    def session_tables(self, ids: Sequence[str]) -> dict[str, pa.Table]:
        """Every row of the sessions `ids` in each of `SESSION_TABLES`, as Arrow tables, which
        `sessions_from_tables` builds the sessions from (worker processes and Ray get sessions this
        way). Read through a cursor of its own, so other threads may use the store meanwhile."""
        cursor = self.connection.cursor()
        try:
            return {
                table: cursor.sql(
                    f"SELECT * FROM {table} WHERE {column} IN (SELECT unnest(?::VARCHAR[]))", params=[list(ids)]
                ).to_arrow_table()
                for table, column in SESSION_TABLES
            }
        finally:
            cursor.close()

    def session_tables_each(self, ids: Sequence[str]) -> dict[str, dict[str, pa.Table]]:
        """`session_tables` of each of the sessions `ids` (those stored), read together: one query per
        table for them all, where a session at a time cost a query per table each. Each session's rows
        are taken by their positions, found in one pass over a table (a comparison of the whole table
        per session cost five times more), in the order the table holds them."""
        import array

        import pyarrow as pa

        tables = self.session_tables(ids)
        stored = set(tables["sessions"].column("id").to_pylist())
        wanted = [session_id for session_id in dict.fromkeys(ids) if session_id in stored]
        out: dict[str, dict[str, pa.Table]] = {session_id: {} for session_id in wanted}
        for table, column in SESSION_TABLES:
            rows: dict[str, array.array[int]] = {}
            for position, session_id in enumerate(tables[table].column(column).to_pylist()):
                found = rows.get(session_id)
                if found is None:
                    found = rows[session_id] = array.array("q")
                found.append(position)
            for session_id in wanted:
                positions = rows.get(session_id, array.array("q"))
                # from the buffer: `pa.array` of Python values imports pandas (a fifth of a second) to check for it
                taken = pa.Array.from_buffers(pa.int64(), len(positions), [None, pa.py_buffer(positions)])
                out[session_id][table] = tables[table].take(taken)
        return out

    def model_cache_rows(self) -> pa.Table:
        """The model cache's answers (`key` and the `CacheEntry` columns) as one Arrow table."""
        from workbench.llm.cache import ENTRY_COLUMNS

        cursor = self.connection.cursor()
        try:
            return cursor.sql(f"SELECT {', '.join(('key', *ENTRY_COLUMNS))} FROM llm_cache").to_arrow_table()
        finally:
            cursor.close()

    def describe_dataset(self, name: str, description: str) -> None:
        """Create the dataset `name` if needed and set its description."""
        self._query(
            "INSERT INTO datasets (name, description) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET description = excluded.description",
            [name, description],
        )

    def save_token_counts(self, session: Session, tokenizer_name: str | Any = "heuristic") -> int:
        """Store the per-message token counts of `session` under the tokenizer's name.

        Counts are computed (and cached on the messages) when not yet known; returns the total.
        """
        self.save_token_counts_many([session], tokenizer_name)
        return sum(int(m._token_cache[self._tokenizer_name(tokenizer_name)]) for m in session.messages)

    def save_token_counts_many(self, sessions: Sequence[Session], tokenizer_name: str | Any = "heuristic") -> int:
        """Store the per-message token counts of every session of `sessions` under the tokenizer's
        name, replacing those stored, in one transaction; returns how many counts were written.

        The messages not yet counted are counted in one batch (`tokens.prime`), so a run that meets
        a tokenizer for the first time pays it once for a whole batch of sessions and never again."""
        from workbench import tokens

        tokenizer = tokens.resolve(tokenizer_name)
        sessions = list({s.id: s for s in sessions}.values())
        if not sessions:
            return 0
        tokens.prime([m for s in sessions for m in s.messages], tokenizer)
        import numpy as np

        name = tokenizer.name
        rows = sum(len(s.messages) for s in sessions)
        table = {
            "session_id": np.array([s.id for s in sessions for _ in s.messages], dtype=object),
            "idx": np.array([i for s in sessions for i in range(len(s.messages))], dtype=np.int32),
            "tokenizer": np.full(rows, name, dtype=object),
            "tokens": np.array([m._token_cache[name] for s in sessions for m in s.messages], dtype=np.int32),
        }
        con = self.connection
        try:
            con.execute("BEGIN TRANSACTION")
            con.execute(
                "DELETE FROM token_counts WHERE tokenizer = ? AND session_id IN (SELECT unnest(?::VARCHAR[]))",
                [name, [s.id for s in sessions]],
            )
            db.insert_rows(con, "token_counts", table)
            con.execute("COMMIT")
        except duckdb.Error as exc:
            db.rollback_quietly(con)
            raise StoreError(f"cannot save token counts to {self.path}: {exc}") from exc
        return rows

    def sessions_without_counts(self, ids: Sequence[str], tokenizer_name: str | Any) -> list[str]:
        """The sessions of `ids` (stored ones, in the order given) this database holds no token counts
        of under the tokenizer. Asked of the database, not of the sessions read: a session read before
        in this process (`workbench.session_pool`) may carry counts another database stored."""
        if not ids:
            return []
        lacking = {
            row[0]
            for row in self._query(
                "SELECT id FROM sessions WHERE id IN (SELECT unnest(?::VARCHAR[])) AND NOT EXISTS "
                "(SELECT 1 FROM token_counts t WHERE t.session_id = sessions.id AND t.tokenizer = ?)",
                [list(ids), self._tokenizer_name(tokenizer_name)],
            )
        }
        return [i for i in dict.fromkeys(ids) if i in lacking]

    @staticmethod
    def _tokenizer_name(tokenizer: str | Any) -> str:
        from workbench import tokens

        return tokens.resolve(tokenizer).name

    def datasets_of(self, ids: Iterable[str]) -> dict[str, int]:
        """How many of the stored sessions `ids` each dataset holds (ids not stored are not counted)."""
        rows = self._query(
            "SELECT dataset, count(*) FROM sessions WHERE id IN (SELECT unnest(?::VARCHAR[])) GROUP BY dataset",
            [sorted(ids)],
        )
        return {str(name): int(count) for name, count in rows}

    def token_counts(self, session_id: str, tokenizer_name: str | None = None) -> dict[str, list[int]]:
        """Stored counts of one session: {tokenizer name: [tokens per message idx]}."""
        sql = "SELECT tokenizer, idx, tokens FROM token_counts WHERE session_id = ?"
        params: list[Any] = [session_id]
        if tokenizer_name is not None:
            sql += " AND tokenizer = ?"
            params.append(tokenizer_name)
        out: dict[str, dict[int, int]] = {}
        for name, idx, count in self._query(sql + " ORDER BY tokenizer, idx", params):
            out.setdefault(name, {})[idx] = count
        return {name: [by_idx[i] for i in sorted(by_idx)] for name, by_idx in out.items()}

    # -- reading ----------------------------------------------------------------------------------
    def session_rows(self, dataset: str | None = None, where: str | None = None) -> list[dict[str, Any]]:
        """One dict per session (id, dataset, format, messages, calls, observations (tool results and
        user observations, `Message.is_observation`), recorded_compactions (the agent's own, which
        `as-recorded` replays), probes, source, imported_at); the pandas-free form of `sessions()`."""
        sql, params = self._select_sessions(dataset, where)
        rows = self._query(
            f"""
            SELECT s.id, s.dataset, s.format, s.message_count, s.call_count, coalesce(o.n, 0),
                   s.recorded_compactions, coalesce(p.n, 0), s.source, s.imported_at
            FROM ({sql}) s LEFT JOIN (SELECT session_id, count(*) AS n FROM probes GROUP BY session_id) p
                 ON p.session_id = s.id
            LEFT JOIN (SELECT session_id, count(*) AS n FROM messages WHERE role = 'tool' OR observation
                       GROUP BY session_id) o ON o.session_id = s.id
            ORDER BY s.dataset, s.imported_at, s.id""",
            params,
        )
        return [dict(zip(SESSION_COLUMNS, row, strict=False)) for row in rows]

    def session_metadata(
        self, dataset: str, keys: Sequence[str], *, format: str | None = None
    ) -> Iterator[tuple[str, int, dict[str, str | None]]]:
        """(id, message count, {key: the metadata value as text, None when absent}) of each session of
        `dataset` (of `format`, when given), streamed in chunks: cheap over millions of sessions."""
        fields = ", json_extract_string(metadata, ?)" * len(keys)
        cursor = self.connection.execute(
            f"SELECT id, message_count{fields} FROM sessions WHERE dataset = ?"
            + (" AND format = ?" if format is not None else ""),
            [*keys, dataset] + ([] if format is None else [format]),
        )
        while rows := cursor.fetchmany(10_000):
            for sid, count, *values in rows:
                yield str(sid), int(count), dict(zip(keys, values, strict=True))

    def message_characters(self) -> dict[str, int]:
        """Each session's size: the characters of its messages' text (`Message.text`), by session id."""
        rows = self._query(
            "SELECT session_id, sum(length(coalesce(text, '')))::BIGINT FROM message_texts GROUP BY session_id"
        )
        return {str(session_id): int(characters) for session_id, characters in rows}

    def message_counts(self, ids: Sequence[str]) -> dict[str, int]:
        """The message count of each stored session of `ids`, by id (the others are left out)."""
        rows = self._query(
            "SELECT id, message_count FROM sessions WHERE id IN (SELECT unnest(?::VARCHAR[]))", [list(ids)]
        )
        return {str(session_id): int(count) for session_id, count in rows}

    def sessions(self, dataset: str | None = None, where: str | None = None) -> pd.DataFrame:
        """A DataFrame with one row per session: id, dataset, format, messages, calls, observations,
        recorded_compactions, probes, source, imported_at."""
        import pandas as pd

        return pd.DataFrame(self.session_rows(dataset, where), columns=list(SESSION_COLUMNS))

    def dataset_rows(self) -> list[dict[str, Any]]:
        """One dict per dataset (name, description, sessions, messages, calls, created_at)."""
        rows = self._query("""
            SELECT d.name, d.description, count(s.id) AS sessions,
                   coalesce(sum(s.message_count), 0)::BIGINT AS messages,
                   coalesce(sum(s.call_count), 0)::BIGINT AS calls, d.created_at
            FROM datasets d LEFT JOIN sessions s ON s.dataset = d.name
            GROUP BY d.name, d.description, d.created_at ORDER BY d.name""")
        keys = ("name", "description", "sessions", "messages", "calls", "created_at")
        return [dict(zip(keys, row, strict=False)) for row in rows]

    def datasets(self) -> pd.DataFrame:
        """One row per dataset: name, description, sessions, messages, calls, created_at."""
        import pandas as pd

        return pd.DataFrame(
            self.dataset_rows(), columns=["name", "description", "sessions", "messages", "calls", "created_at"]
        )

    def count(self, what: str = "sessions", dataset: str | None = None) -> int:
        """How many sessions (or messages, calls, probes) are stored, in `dataset` or overall."""
        if what not in COUNTABLE:
            raise StoreError(f"cannot count {what!r}; choose one of: {', '.join(COUNTABLE)}")
        if what == "probes":
            sql = "SELECT count(*) FROM probes p JOIN sessions s ON s.id = p.session_id"
        else:
            expr = {"sessions": "count(*)", "messages": "sum(message_count)", "calls": "sum(call_count)"}[what]
            sql = f"SELECT coalesce({expr}, 0) FROM sessions s"
        params: list[Any] = []
        if dataset is not None:
            sql += " WHERE s.dataset = ?"
            params.append(dataset)
        return int(self._query(sql, params)[0][0])

    def has_session(self, session_id: str) -> bool:
        return bool(self._query("SELECT count(*) FROM sessions WHERE id = ?", [session_id])[0][0])

    def session_ids(self, dataset: str | None = None, where: str | None = None) -> list[str]:
        sql, params = self._select_sessions(dataset, where)
        return [r[0] for r in self._query(f"SELECT id FROM ({sql}) ORDER BY dataset, imported_at, id", params)]

    def load_session(self, session_id: str) -> Session:
        """The stored session: messages in order (token caches primed from `token_counts`),
        probes, tools and metadata. Raises StoreError when the id is unknown."""
        sessions = self._load([session_id])
        if not sessions:
            raise StoreError(f"no session {session_id!r} in {self.path}")
        return sessions[0]

    def load_sessions(
        self, dataset: str | None = None, where: str | None = None, ids: Iterable[str] | None = None
    ) -> list[Session]:
        """The stored sessions of `dataset` (all when None) matching `where`, an SQL condition over
        the sessions table (columns id, dataset, format, source, message_count or messages,
        call_count or calls, metadata, imported_at), e.g. `calls >= 50`."""
        wanted = self.session_ids(dataset, where)
        if ids is not None:
            keep = set(ids)
            wanted = [i for i in wanted if i in keep]
        return self._load(wanted)

    def sessions_by_id(self, ids: Sequence[str]) -> list[Session]:
        """The stored sessions with these ids, in the order given, read together (four queries
        whatever their number); ids not in the database are left out."""
        return self._load(list(dict.fromkeys(ids)))

    def iter_sessions(
        self, dataset: str | None = None, where: str | None = None, *, batch_sessions: int = 64
    ) -> Iterator[Session]:
        """The sessions `load_sessions` would return, loaded `batch_sessions` at a time: memory
        holds one batch of sessions (plus the ids), whatever the size of the dataset."""
        wanted = self.session_ids(dataset, where)
        step = max(1, int(batch_sessions))
        for start in range(0, len(wanted), step):
            yield from self._load(wanted[start : start + step])

    def _select_sessions(self, dataset: str | None, where: str | None) -> tuple[str, list[Any]]:
        sql = (
            "SELECT *, message_count AS messages, call_count AS calls, "
            "coalesce(json_array_length(metadata -> '$.recorded_compactions'), 0) AS recorded_compactions, "
            + OUTCOME_COLUMNS_SQL
            + " FROM sessions WHERE (? IS NULL OR dataset = ?)"
        )
        params: list[Any] = [dataset, dataset]
        if where and where.strip():
            filtered = f"SELECT * FROM ({sql}) WHERE ({where}\n)"  # the newline ends a trailing -- comment
            try:  # run once over the sessions (a small table): a value it cannot convert fails here, named
                self.connection.execute(f"SELECT count(*) FROM ({filtered})", params)
            except duckdb.Error as exc:
                raise self._filter_error(where, sql, params, exc) from exc
            sql = filtered
        return sql, params

    def _filter_error(self, where: str, sql: str, params: list[Any], exc: duckdb.Error) -> SessionFilterError:
        reason = str(exc).split("\n\nLINE ")[0].strip().replace("\n", " ")
        try:
            columns = [row[0] for row in self.connection.execute(f"DESCRIBE {sql}", params).fetchall()]
        except duckdb.Error:
            columns = []
        listed = f"; columns: {', '.join(columns)}" if columns else ""
        return SessionFilterError(f"the condition {where.strip()!r} over the sessions cannot run: {reason}{listed}")

    def _load(self, ids: Sequence[str], *, pooled: bool = True) -> list[Session]:
        """The stored sessions `ids`; `pooled`: the process's one object per content
        (`workbench.session_pool`), else objects of their own, kept by nobody else."""
        if not ids:
            return []
        heads = self._query(
            f"SELECT {', '.join(_HEAD_COLUMNS)} FROM sessions WHERE id IN (SELECT unnest(?::VARCHAR[]))", [list(ids)]
        )
        found = [row[0] for row in heads]
        messages = self._query(
            f"SELECT {', '.join(_MESSAGE_COLUMNS)} FROM messages WHERE session_id IN (SELECT unnest(?::VARCHAR[])) "
            "ORDER BY session_id, idx",
            [found],
        )
        probes = self._query(
            f"SELECT {', '.join(_PROBE_COLUMNS)} FROM probes WHERE session_id IN (SELECT unnest(?::VARCHAR[])) "
            "ORDER BY session_id, idx",
            [found],
        )
        counts = self._query(
            f"SELECT {', '.join(_COUNT_COLUMNS)} FROM token_counts WHERE session_id IN (SELECT unnest(?::VARCHAR[]))",
            [found],
        )
        return _assemble(ids, heads, messages, probes, counts, pooled=pooled)

    # -- human labels of summaries (`summary_labels`; see `SummaryLabel`) ----------------------------
    def set_summary_label(
        self,
        session_id: str,
        config_hash: str,
        compaction: int,
        label: str,
        *,
        config: str = "",
        note: str | None = None,
    ) -> SummaryLabel:
        """Store a researcher's label of one compaction's summary and return it as stored. A label
        already stored for the same (session, config hash, compaction) is replaced. `label` is
        'good' or 'bad' (ConfigError otherwise); a blank note is stored as none."""
        if label not in SUMMARY_LABELS:
            raise ConfigError(f"a summary label is {' or '.join(map(repr, SUMMARY_LABELS))}, not {label!r}")
        if not str(session_id).strip() or not str(config_hash).strip():
            raise ConfigError("a summary label needs a session id and a config hash")
        if isinstance(compaction, bool) or int(compaction) != compaction or compaction < 0:
            raise ConfigError(f"the compaction of a label is its event index (0 or more), not {compaction!r}")
        stored = SummaryLabel(
            session_id=str(session_id),
            config_hash=str(config_hash),
            config=str(config or ""),
            compaction=int(compaction),
            label=label,
            note=(note or "").strip() or None,
            labelled_at=datetime.now(UTC).replace(tzinfo=None),
        )
        self._query(
            "INSERT OR REPLACE INTO summary_labels (session_id, config_hash, config, compaction, label, "
            "note, labelled_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            list(asdict(stored).values()),
        )
        return stored

    def summary_label(self, session_id: str, config_hash: str, compaction: int) -> SummaryLabel | None:
        """The label of one compaction's summary, or None when it has none."""
        rows = self._query(
            f"SELECT {', '.join(SUMMARY_LABEL_COLUMNS)} FROM summary_labels "
            "WHERE session_id = ? AND config_hash = ? AND compaction = ?",
            [session_id, config_hash, int(compaction)],
        )
        return SummaryLabel(*rows[0]) if rows else None

    def summary_labels(self, session_id: str | None = None, config_hash: str | None = None) -> pd.DataFrame:
        """Every stored label (or those of one session and/or config hash), one row per labelled
        compaction, columns `SUMMARY_LABEL_COLUMNS`: session_id, config_hash, config (its name when
        labelled, for display), compaction (the event index in the replay), label ('good' | 'bad'),
        note (None when none), labelled_at. This is the `labels` frame the metric audit takes."""
        return summary_labels_frame(self.connection, session_id=session_id, config_hash=config_hash)

    def delete_summary_label(self, session_id: str, config_hash: str, compaction: int) -> bool:
        """Remove one compaction's label; returns whether there was one."""
        rows = self._query(
            "DELETE FROM summary_labels WHERE session_id = ? AND config_hash = ? AND compaction = ? RETURNING 1",
            [session_id, config_hash, int(compaction)],
        )
        return bool(rows)


@contextmanager
def held_store(hold: db.FileHold) -> Iterator[Store]:
    """The store through `hold` for the block: a cursor on the hold's connection, with no open or
    migration of its own (the hold's first open migrated the file). A run reads its sessions in many
    brief reads; opening the file for each (and checking its migrations) cost a quarter of them."""
    with hold.open() as connection:
        store = Store(hold.path, _borrowed=connection)
        try:
            yield store
        finally:
            store._con = None  # the hold's: it closes it
            store._closed = True


_HEAD_COLUMNS = ("id", "dataset", "format", "tools", "metadata")
_MESSAGE_COLUMNS = (
    "session_id", "idx", "role", "content", "parts", "tool_calls", "tool_call_id", "name", "origin",
    "importance", "metadata", "observation",
)  # fmt: skip
_PROBE_COLUMNS = ("session_id", "question", "expected", "kind", "from_call")
_COUNT_COLUMNS = ("session_id", "idx", "tokenizer", "tokens")


def sessions_from_tables(tables: Mapping[str, pa.Table], *, pooled: bool = True) -> list[Session]:
    """The sessions that `Store.session_tables` exported, built from its Arrow tables as `load_session`
    builds them from the database's rows (a worker process reads its sessions so, with no database)."""

    def rows(table: str, columns: Sequence[str], order: bool = True) -> Iterable[tuple[Any, ...]]:
        found = tables[table]
        if order:
            found = found.sort_by([("session_id", "ascending"), ("idx", "ascending")])
        return zip(*(found.column(column).to_pylist() for column in columns), strict=True)

    heads = list(rows("sessions", _HEAD_COLUMNS, order=False))
    return _assemble(
        [head[0] for head in heads],
        heads,
        rows("messages", _MESSAGE_COLUMNS),
        rows("probes", _PROBE_COLUMNS),
        rows("token_counts", _COUNT_COLUMNS, order=False),
        pooled=pooled,
    )


def _assemble(
    ids: Sequence[str],
    head_rows: Iterable[Sequence[Any]],
    message_rows: Iterable[Sequence[Any]],
    probe_rows: Iterable[Sequence[Any]],
    count_rows: Iterable[Sequence[Any]],
    *,
    pooled: bool,
) -> list[Session]:
    """Sessions `ids` (those with a head, in that order) from their rows: heads (`_HEAD_COLUMNS`),
    messages and probes (their columns, in session and index order) and token counts."""
    heads = {row[0]: row for row in head_rows}
    messages: dict[str, list[Message]] = {i: [] for i in heads}
    underived: set[str] = set()
    for row in message_rows:
        sid, _idx, role, text, parts, calls, call_id, name, origin, importance, meta, observation = row
        content: Any = text if parts is None else json.loads(parts)
        tool_calls = tuple(ToolCall.from_openai(c) for c in json.loads(calls)) if calls else ()
        if observation is None:
            underived.add(sid)
        messages[sid].append(
            Message(
                role=role,
                content=content,
                tool_calls=tool_calls,
                tool_call_id=call_id,
                name=name,
                origin=origin,
                importance=importance,
                metadata=json.loads(meta) if meta else {},
                observation=bool(observation) and role == "user",
            )
        )
    for sid in underived:  # stored before observations were: the format's rule, as at import
        messages[sid] = mark_observations(heads[sid][2], messages[sid])
    probes: dict[str, list[Probe]] = {i: [] for i in heads}
    for sid, question, expected, kind, from_call in probe_rows:
        probes[sid].append(Probe(question=question, expected=expected, kind=kind, from_call=from_call))
    for sid, idx, tokenizer, count in count_rows:
        stored = messages.get(sid)
        if stored is not None and 0 <= idx < len(stored):
            stored[idx]._token_cache[tokenizer] = int(count)
    out = []
    for sid in ids:
        head = heads.get(sid)
        if head is None:
            continue
        _, dataset, fmt, tools, meta = head
        session = Session(
            messages=tuple(messages[sid]),
            id=sid,
            dataset=dataset,
            format=fmt,
            tools=tuple(json.loads(tools)) if tools else (),
            probes=tuple(probes[sid]),
            metadata=json.loads(meta) if meta else {},
        )
        out.append(canonical(session) if pooled else session)
    return out
