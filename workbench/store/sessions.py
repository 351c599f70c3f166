"""Reads and writes of sessions in the DuckDB database (schema: `workbench.store.db`).

    with Store("data/workbench.duckdb") as store:
        report = store.import_paths(["recordings/"])        # streamed, batched, per-file errors
        frame = store.sessions(dataset="samples")           # one row per session (pandas)
        session = store.load_session(frame.id[0])           # messages, probes, tools, metadata

Writes go in batches of whole sessions (about `batch_messages` messages each); a batch is one
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
import queue
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import duckdb

from workbench.errors import ConfigError, FormatError, SessionFilterError, StoreError
from workbench.importers.observations import TEXT_ACTION_FORMATS, mark_observations
from workbench.session import NO_RESULT_TEXT, Message, Probe, Session, ToolCall, content_hash
from workbench.store import db

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

_MESSAGE_INSERT = """
    INSERT INTO messages (session_id, idx, role, content, parts, tool_calls, tool_call_id, name, origin,
                          importance, metadata, observation)
    SELECT session_id, idx, role, content, parts::JSON, tool_calls::JSON, tool_call_id, name, origin,
           importance, metadata::JSON, observation
    FROM _wb_messages
"""
_SESSION_INSERT = """
    INSERT INTO sessions (id, dataset, format, source, message_count, call_count, tools, metadata)
    SELECT id, dataset, format, source, message_count, call_count, tools::JSON, metadata::JSON FROM _wb_sessions
"""
_PROBE_INSERT = """
    INSERT INTO probes (session_id, idx, question, expected, kind, from_call)
    SELECT session_id, idx, question, expected, kind, from_call FROM _wb_probes
"""
_DATASET_INSERT = """
    INSERT INTO datasets (name)
    SELECT DISTINCT dataset FROM _wb_sessions WHERE dataset NOT IN (SELECT name FROM datasets)
"""


# --------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------


@dataclass
class FileOutcome:
    """What importing one file did."""

    path: str
    sessions: int = 0
    messages: int = 0
    duplicates: int = 0
    bytes: int = 0
    error: str | None = None
    skipped: str | None = None  # why a file met in a folder walk was not imported (not an error)
    warnings: list[str] = field(default_factory=list)  # e.g. a live session's incomplete last line

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class ImportReport:
    """Counts of an import: sessions/messages/calls written, duplicates skipped, per-file errors."""

    sessions: int = 0
    messages: int = 0
    calls: int = 0
    duplicates: int = 0
    repeated: int = 0  # of the duplicates: sessions met more than once in this import
    stored_in: dict[str, int] = field(default_factory=dict)  # of the duplicates: already stored, per dataset
    dataset: str | None = None  # the dataset asked for (None: each session's own)
    session_ids: list[str] = field(default_factory=list)
    files: list[FileOutcome] = field(default_factory=list)
    ignored: list[FileOutcome] = field(default_factory=list)  # walked past without reading (with why)
    #: earlier imports of recordings that have grown since (old id -> the new id that replaced it)
    replaced: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    outcomes: OutcomeMatch | None = None  # what `outcomes=` attached (import_paths)

    @property
    def errors(self) -> list[FileOutcome]:
        """The files that failed (each with its `error` message)."""
        return [f for f in self.files if f.error is not None]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def skipped_files(self) -> list[FileOutcome]:
        """Files and folders met in folder walks and not imported, each with why (not errors):
        the ones the walk ignored (skipped folders, config files, other file types), then the
        ones read that match no session format."""
        return [*self.ignored, *(f for f in self.files if f.skipped is not None)]

    @property
    def warnings(self) -> list[str]:
        return [w for f in self.files for w in f.warnings]

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for --json)."""
        return {
            "sessions": self.sessions,
            "messages": self.messages,
            "calls": self.calls,
            "duplicates": self.duplicates,
            "repeated": self.repeated,
            "already_stored": dict(self.stored_in),
            "files": len(self.files),
            "failed_files": len(self.errors),
            "skipped_files": len(self.skipped_files),
            "skipped": [{"path": f.path, "reason": f.skipped} for f in self.skipped_files],
            "warnings": self.warnings,
            "errors": [{"path": f.path, "error": f.error} for f in self.errors],
            "session_ids": list(self.session_ids),
            "replaced": [{"old": old, "new": new} for old, new in self.replaced.items()],
            "seconds": round(self.seconds, 3),
            "file_outcomes": [asdict(f) for f in self.files],
            **({"outcomes": self.outcomes.to_dict()} if self.outcomes is not None else {}),
        }

    def duplicates_text(self) -> str:
        """What was skipped as a duplicate, and why: a session met twice in this import, or one
        already stored (a session is stored once, in the dataset it was first imported into)."""
        text = f"skipped {self.duplicates} duplicate session{'s' * (self.duplicates != 1)}"
        reasons = []
        if self.repeated:
            reasons.append(f"{self.repeated} met more than once in this import")
        if self.stored_in:
            stored = sum(self.stored_in.values())
            if len(self.stored_in) == 1:
                where = f" in dataset {next(iter(self.stored_in))!r}"
            else:
                where = " (" + ", ".join(f"{n} in {name!r}" for name, n in sorted(self.stored_in.items())) + ")"
            elsewhere = self.dataset is not None and set(self.stored_in) != {self.dataset}
            reasons.append(
                f"{stored} already stored{where}"
                + (
                    ", not added to " + repr(self.dataset) + " (a session is stored once, in the dataset it was "
                    "first imported into)"
                    if elsewhere
                    else ""
                )
            )
        return f"{text}: {'; '.join(reasons)}" if reasons else text

    def replaced_text(self) -> str:
        """Which imported sessions replaced an earlier import of the same recording that has grown since."""
        count = len(self.replaced)
        pairs = ", ".join(f"{old[:8]} -> {new[:8]}" for old, new in list(self.replaced.items())[:3])
        text = (
            f"{count} of them replaced {'an earlier import' if count == 1 else 'earlier imports'} of the same "
            f"recording{'s' * (count != 1)}, which grew since ({pairs}{', ...' if count > 3 else ''})"
        )
        if self.dataset is not None:
            text += "; each stays in its dataset (a session is stored once, in the dataset it was first imported into)"
        return text

    def summary(self) -> str:
        """One line: what was imported and skipped."""
        text = (
            f"imported {self.sessions} session{'s' * (self.sessions != 1)} "
            f"({self.messages} messages, {self.calls} calls)"
        )
        if self.replaced:
            text += f"; {self.replaced_text()}"
        if self.duplicates:
            text += f"; {self.duplicates_text()}"
        if self.files:
            text += f"; {len(self.files)} file{'s' * (len(self.files) != 1)} read"
        if self.errors:
            text += f", {len(self.errors)} failed"
        if self.skipped_files:
            text += f", {len(self.skipped_files)} skipped (not session files)"
        return text


# --------------------------------------------------------------------------------------------
# Row building
# --------------------------------------------------------------------------------------------

_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
_quote = json.encoder.encode_basestring  # a JSON string literal (the C function when available)


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def _tool_calls_json(calls: Sequence[ToolCall]) -> str:
    """`[c.to_openai() for c in calls]` as JSON, written directly (this runs for every assistant message)."""
    return (
        "["
        + ",".join(
            f'{{"id":{_quote(c.id)},"type":"function","function":{{"name":{_quote(c.name)},'
            f'"arguments":{_quote(c.arguments)}}}}}'
            for c in calls
        )
        + "]"
    )


def _clean_text(value: str | None) -> str | None:
    """`value` as valid UTF-8 (lone surrogates from \\ud800-style JSON escapes are replaced)."""
    if value is None:
        return None
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")


def _chars(values: Iterable[str | None]) -> int:
    return sum(len(v) for v in values if v is not None)


class _Batch:
    """Column lists of the sessions, messages and probes about to be written together."""

    def __init__(self) -> None:
        self.sessions: dict[str, list[Any]] = {
            k: [] for k in ("id", "dataset", "format", "source", "message_count", "call_count", "tools", "metadata")
        }
        self.messages: dict[str, list[Any]] = {
            k: []
            for k in (
                "session_id",
                "idx",
                "role",
                "content",
                "parts",
                "tool_calls",
                "tool_call_id",
                "name",
                "origin",
                "importance",
                "metadata",
                "observation",
            )
        }
        self.probes: dict[str, list[Any]] = {
            k: [] for k in ("session_id", "idx", "question", "expected", "kind", "from_call")
        }
        self.ids: list[str] = []
        #: per session, itself when an earlier import stored sessions of its source (to compare with
        #: them, `_later_versions`), else None: a batch holds columns, not the sessions
        self.objects: list[Session | None] = []
        self.calls = 0
        self.message_count = 0
        self.chars = 0

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, session: Session, dataset: str, source: str | None, *, keep: bool = False) -> None:
        sid = session.id
        msgs = session.messages
        n = len(msgs)
        m = self.messages
        contents = [msg.content for msg in msgs]
        strings = [c if isinstance(c, str) else None for c in contents]
        parts = [None if c is None or isinstance(c, str) else _dumps([dict(p) for p in c]) for c in contents]
        m["content"].extend(strings)
        m["parts"].extend(parts)
        m["session_id"].extend([sid] * n)
        m["idx"].extend(range(n))
        roles = [msg.role for msg in msgs]
        m["role"].extend(roles)
        m["tool_calls"].extend(_tool_calls_json(msg.tool_calls) if msg.tool_calls else None for msg in msgs)
        m["tool_call_id"].extend([msg.tool_call_id for msg in msgs])
        m["name"].extend([msg.name for msg in msgs])
        m["origin"].extend([msg.origin for msg in msgs])
        m["importance"].extend([float(msg.importance) for msg in msgs])
        m["metadata"].extend(_dumps(dict(msg.metadata)) if msg.metadata else None for msg in msgs)
        m["observation"].extend([msg.observation for msg in msgs])
        calls = roles.count("assistant")
        chars = _chars(strings) + _chars(parts)
        s = self.sessions
        s["id"].append(sid)
        s["dataset"].append(dataset)
        s["format"].append(session.format or "unknown")
        s["source"].append(source)
        s["message_count"].append(n)
        s["call_count"].append(calls)
        s["tools"].append(_dumps([dict(t) for t in session.tools]) if session.tools else None)
        s["metadata"].append(_dumps(dict(session.metadata)) if session.metadata else None)
        p = self.probes
        for idx, probe in enumerate(session.probes):
            p["session_id"].append(sid)
            p["idx"].append(idx)
            p["question"].append(probe.question)
            p["expected"].append(probe.expected)
            p["kind"].append(probe.kind)
            p["from_call"].append(int(probe.from_call))
        self.ids.append(sid)
        self.objects.append(session if keep else None)
        self.calls += calls
        self.message_count += n
        self.chars += chars

    def tables(self, clean: bool = False) -> dict[str, dict[str, Any]]:
        """The batch as {table name: {column: numpy array}}, which DuckDB scans directly (no copy
        through pandas or Arrow). `clean` replaces lone surrogates, which DuckDB rejects."""
        import numpy as np

        dtypes = {
            "idx": np.int32,
            "message_count": np.int32,
            "call_count": np.int32,
            "from_call": np.int32,
            "importance": np.float64,
            "observation": np.bool_,
        }

        def column(name: str, values: list[Any]) -> Any:
            dtype = dtypes.get(name, object)
            if dtype is not object:
                return np.asarray(values, dtype=dtype)
            array = np.empty(len(values), dtype=object)
            array[:] = [_clean_text(v) for v in values] if clean else values
            return array

        return {
            table: {name: column(name, values) for name, values in columns.items()}
            for table, columns in (
                ("_wb_sessions", self.sessions),
                ("_wb_messages", self.messages),
                ("_wb_probes", self.probes),
            )
        }


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
    `memory_limit` (e.g. "512MB"; default `$WORKBENCH_MEMORY_LIMIT`) caps DuckDB's buffer cache,
    which otherwise keeps written blocks up to DuckDB's default (80 % of RAM). Use it as a context
    manager, or call `close()`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        read_only: bool = False,
        batch_messages: int = DEFAULT_BATCH_MESSAGES,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        memory_limit: str | None = None,
        create: bool = True,
    ):
        self.path = os.fspath(path) if path is not None else db.default_path()
        self.read_only = read_only
        self.batch_messages = max(1, int(batch_messages))
        self.batch_bytes = max(1, int(batch_bytes))
        self._con: duckdb.DuckDBPyConnection | None = db.connect(
            self.path, read_only=read_only, create=create, memory_limit=memory_limit
        )
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
    def connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise StoreError(f"the store of {self.path} is closed")
        return self._con

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
        """Cap DuckDB's buffer cache for this connection (e.g. "512MB")."""
        db.set_memory_limit(self.connection, limit)

    def close(self) -> None:
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
            derived = self._load(ids[start : start + batch_sessions])
            import numpy as np

            _wb_observations = {  # read by DuckDB's replacement scan below
                "session_id": np.array([s.id for s in derived for _ in s.messages], dtype=object),
                "idx": np.array([i for s in derived for i in range(len(s.messages))], dtype=np.int32),
                "observation": np.array([m.observation for s in derived for m in s.messages], dtype=np.bool_),
            }
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute("""UPDATE messages SET observation = o.observation
                               FROM (SELECT * FROM _wb_observations) o
                               WHERE messages.session_id = o.session_id AND messages.idx = o.idx""")
                con.execute("COMMIT")
            except BaseException:
                _rollback(con)
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
        with _Writer(self, report, dataset) as writer:
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
        from workbench import importers
        from workbench.importers import IncompleteLastLine, candidate_files, ignored_files
        from workbench.importers.outcomes import OutcomeTable, read_outcomes

        table = outcomes if isinstance(outcomes, OutcomeTable) or outcomes is None else read_outcomes(outcomes)
        started = time.perf_counter()
        report = ImportReport()
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        given = [os.fspath(p) for p in paths]
        report.ignored = [FileOutcome(path=path, skipped=why) for path, why in ignored_files(given)]
        with _Writer(self, report, dataset) as writer:
            for path, root in candidate_files(given):
                outcome = FileOutcome(path=path)
                try:
                    outcome.bytes = os.path.getsize(path)
                except OSError:
                    pass
                writer.begin_file(outcome)
                try:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always", IncompleteLastLine)
                        for session in importers.iter_sessions(path, format, dataset, source=_display(path, root)):
                            writer.add(session)
                    outcome.warnings = [str(w.message) for w in caught if issubclass(w.category, IncompleteLastLine)]
                    for other in caught:
                        if not issubclass(other.category, IncompleteLastLine):
                            warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
                except FormatError as exc:
                    writer.fail_file(str(exc))
                    if root is not None and isinstance(exc, getattr(importers, "UnknownFormatError", ())):
                        outcome.error, outcome.skipped = None, str(exc)
                else:
                    writer.end_file()
                report.files.append(outcome)
                if progress is not None:
                    progress(outcome)
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
            values = [_dumps({OUTCOME_KEY: outcome.to_metadata(match.source)}) for outcome in match.attached.values()]
            self._query(
                """
                UPDATE sessions SET metadata = json_merge_patch(coalesce(sessions.metadata, '{}'::JSON), u.patch::JSON)
                FROM (SELECT unnest(?::VARCHAR[]) AS id, unnest(?::VARCHAR[]) AS patch) u
                WHERE sessions.id = u.id""",
                [session_ids, values],
            )
        return match

    def delete_sessions(self, ids: Iterable[str]) -> int:
        """Delete sessions (with their messages, probes and token counts); returns how many existed."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return 0
        con = self.connection
        try:
            con.execute("BEGIN TRANSACTION")
            existing = con.execute(
                "SELECT count(*) FROM sessions WHERE id IN (SELECT unnest(?::VARCHAR[]))", [ids]
            ).fetchall()[0][0]
            for table, column in reversed(SESSION_TABLES):
                con.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT unnest(?::VARCHAR[]))", [ids])
            con.execute("COMMIT")
        except duckdb.Error as exc:
            _rollback(con)
            raise StoreError(f"cannot delete sessions from {self.path}: {exc}") from exc
        return int(existing)

    def session_tables(self, ids: Sequence[str]) -> dict[str, pa.Table]:
        """Every row of the sessions `ids` in each of `SESSION_TABLES`, as Arrow tables: what
        `load_session_tables` stores elsewhere (Ray workers get sessions this way). Read through a
        cursor of its own, so other threads may use the store meanwhile."""
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

    def load_session_tables(self, tables: Mapping[str, pa.Table]) -> list[str]:
        """Store sessions exported by `session_tables`, replacing stored ones with the same ids, in
        one transaction; returns their ids."""
        ids = [str(i) for i in tables["sessions"].column("id").to_pylist()]
        con = self.connection
        con.execute("BEGIN TRANSACTION")
        try:
            for table, column in reversed(SESSION_TABLES):
                con.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT unnest(?::VARCHAR[]))", [ids])
            for table, _ in SESSION_TABLES:
                db.insert_rows(con, table, tables[table])
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)
            raise
        return ids

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
        from workbench import tokens

        tokenizer = tokens.resolve(tokenizer_name)
        tokens.prime(session.messages, tokenizer)
        counts = [int(m._token_cache[tokenizer.name]) for m in session.messages]
        import numpy as np

        table = {"idx": np.arange(len(counts), dtype=np.int32), "tokens": np.asarray(counts, dtype=np.int32)}
        con = self.connection
        try:
            con.execute("BEGIN TRANSACTION")
            con.execute("DELETE FROM token_counts WHERE session_id = ? AND tokenizer = ?", [session.id, tokenizer.name])
            con.register("_wb_tokens", table)
            con.execute(
                "INSERT INTO token_counts SELECT ?, idx, ?, tokens FROM _wb_tokens", [session.id, tokenizer.name]
            )
            con.execute("COMMIT")
        except duckdb.Error as exc:
            _rollback(con)
            raise StoreError(f"cannot save token counts to {self.path}: {exc}") from exc
        finally:
            _unregister(con, "_wb_tokens")
        return sum(counts)

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

    def _load(self, ids: Sequence[str]) -> list[Session]:
        if not ids:
            return []
        heads = {
            row[0]: row
            for row in self._query(
                "SELECT id, dataset, format, tools, metadata FROM sessions WHERE id IN (SELECT unnest(?::VARCHAR[]))",
                [list(ids)],
            )
        }
        messages: dict[str, list[Message]] = {i: [] for i in heads}
        underived: set[str] = set()
        for row in self._query(
            """
                SELECT session_id, idx, role, content, parts, tool_calls, tool_call_id, name, origin,
                       importance, metadata, observation
                FROM messages WHERE session_id IN (SELECT unnest(?::VARCHAR[]))
                ORDER BY session_id, idx""",
            [list(heads)],
        ):
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
        for sid, question, expected, kind, from_call in self._query(
            "SELECT session_id, question, expected, kind, from_call FROM probes "
            "WHERE session_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY session_id, idx",
            [list(heads)],
        ):
            probes[sid].append(Probe(question=question, expected=expected, kind=kind, from_call=from_call))
        for sid, idx, tokenizer, count in self._query(
            "SELECT session_id, idx, tokenizer, tokens FROM token_counts "
            "WHERE session_id IN (SELECT unnest(?::VARCHAR[]))",
            [list(heads)],
        ):
            stored = messages.get(sid)
            if stored is not None and 0 <= idx < len(stored):
                stored[idx]._token_cache[tokenizer] = int(count)
        out = []
        for sid in ids:
            head = heads.get(sid)
            if head is None:
                continue
            _, dataset, fmt, tools, meta = head
            out.append(
                Session(
                    messages=tuple(messages[sid]),
                    id=sid,
                    dataset=dataset,
                    format=fmt,
                    tools=tuple(json.loads(tools)) if tools else (),
                    probes=tuple(probes[sid]),
                    metadata=json.loads(meta) if meta else {},
                )
            )
        return out

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


# --------------------------------------------------------------------------------------------
# The batch writer
# --------------------------------------------------------------------------------------------


def check_dataset_name(name: str | None) -> None:
    """A dataset name given must not be blank: it would file the sessions under another name without
    a word (None: each session's own dataset). ConfigError otherwise."""
    if name is not None and not str(name).strip():
        raise ConfigError("a dataset name cannot be empty or blank (None: each session's own)")


class _Writer:
    """Buffers sessions into batches; a background thread writes each batch in one transaction.

    Building a batch (Python) overlaps with writing the previous one (DuckDB, which releases the
    GIL for most of its work); the queue holds at most one batch, so memory stays bounded.
    Only the writer thread touches the connection until `close()`.

    Files (for `import_paths`): when a file fails, its buffered sessions are dropped and the ones
    already written by this import are deleted again. Counts are settled in `close()`.
    """

    def __init__(self, store: Store, report: ImportReport, dataset: str | None):
        check_dataset_name(dataset)
        self.store = store
        self.report = report
        self.dataset = dataset
        self.batch = _Batch()
        self.seen: set[str] = set()
        self.file: FileOutcome | None = None
        self.file_ids: set[str] = set()
        self.files: list[tuple[FileOutcome, set[str]]] = []
        self.repeats = 0  # repeated ids within this import
        # Owned by the writer thread until it is joined:
        self.written: dict[str, tuple[int, int]] = {}  # id -> (messages, calls), in write order
        self.existing: set[str] = set()  # ids skipped because already stored
        self.later_versions: dict[str, str] = {}  # new id -> the stored id it is a later version of
        self.stored_sources = _stored_sources(store)  # sources earlier imports stored sessions of
        self.earlier: dict[str, EarlierImports] = {}  # per source, what earlier imports stored of it
        self.error: BaseException | None = None
        self.queue: queue.Queue[tuple[str, Any] | None] = queue.Queue(maxsize=1)
        self.thread: threading.Thread | None = None

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.flush()
        self.close(raise_error=exc_type is None)

    # -- the writer thread ------------------------------------------------------------------------
    def _run(self) -> None:
        # One DuckDB thread while importing: the other core parses the next batch (measured faster
        # on 2 cores than letting DuckDB compete with the importer for both).
        con = self.store.connection
        threads = None
        try:
            threads = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
            con.execute("SET threads = 1")
        except duckdb.Error:
            pass
        try:
            self._work()
        finally:
            if threads is not None:
                try:
                    con.execute(f"SET threads = {int(threads)}")
                except duckdb.Error:
                    pass

    def _work(self) -> None:
        while True:
            job = self.queue.get()
            if job is None:
                return
            if self.error is not None:
                continue
            kind, payload = job
            try:
                if kind == "batch":
                    ids, later = _write_batch(self.store, payload, self.earlier)
                    written = set(ids)
                    self.later_versions.update(later)
                    for sid, messages, calls in zip(
                        payload.sessions["id"],
                        payload.sessions["message_count"],
                        payload.sessions["call_count"],
                        strict=False,
                    ):
                        if sid in written:
                            self.written[sid] = (messages, calls)
                        else:
                            self.existing.add(sid)
                else:  # "delete": undo what this import wrote for a failed file
                    mine = [sid for sid in payload if sid in self.written]
                    self.store.delete_sessions(mine)
                    for sid in mine:
                        del self.written[sid]
            except BaseException as exc:  # re-raised in the importing thread
                self.error = exc

    def _submit(self, job: tuple[str, Any]) -> None:
        if self.error is not None:
            raise self.error
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="workbench-store-writer", daemon=True)
            self.thread.start()
        self.queue.put(job)

    def close(self, raise_error: bool = True) -> None:
        """Wait for the writes, then settle the report's and the files' counts."""
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()
            self.thread = None
        if self.error is not None and raise_error:
            raise self.error
        report = self.report
        if self.error is None:
            replaced = {old: new for new, old in self.later_versions.items() if new in self.written}
            self.store.delete_sessions(list(replaced))
            report.replaced = replaced
        report.session_ids = list(self.written)
        report.sessions = len(self.written)
        report.messages = sum(m for m, _ in self.written.values())
        report.calls = sum(c for _, c in self.written.values())
        report.duplicates = self.repeats + len(self.existing)
        report.repeated = self.repeats
        report.dataset = self.dataset
        report.stored_in = self.store.datasets_of(self.existing) if self.existing else {}
        for outcome, ids in self.files:
            if outcome.error is not None:
                continue
            mine = [sid for sid in ids if sid in self.written]
            outcome.sessions = len(mine)
            outcome.messages = sum(self.written[sid][0] for sid in mine)
            outcome.duplicates += len(ids & self.existing)

    # -- the importing thread ---------------------------------------------------------------------
    def add(self, session: Session, source: str | None = None) -> None:
        if session.id in self.seen:
            self.repeats += 1
            if self.file is not None:
                self.file.duplicates += 1
            return
        self.seen.add(session.id)
        dataset = self.dataset or session.dataset or "default"
        if source is None:
            meta_source = session.metadata.get("source") if isinstance(session.metadata, Mapping) else None
            source = str(meta_source) if meta_source is not None else None
        self.batch.add(session, dataset, source, keep=source in self.stored_sources)
        if self.file is not None:
            self.file_ids.add(session.id)
        if self.batch.message_count >= self.store.batch_messages or self.batch.chars >= self.store.batch_bytes:
            self.flush()

    def flush(self) -> None:
        batch, self.batch = self.batch, _Batch()
        if len(batch):
            self._submit(("batch", batch))

    def begin_file(self, outcome: FileOutcome) -> None:
        self.file = outcome
        self.file_ids = set()

    def end_file(self) -> None:
        """The file was read without error (its sessions may still be in the buffer)."""
        if self.file is not None:
            self.files.append((self.file, self.file_ids))
        self.file = None
        self.file_ids = set()

    def fail_file(self, error: str) -> None:
        """Undo the current file: drop its buffered sessions and delete the ones already written."""
        if self.file_ids:
            self.batch = _rebuild_without(self.batch, self.file_ids)
            self.seen -= self.file_ids
            self._submit(("delete", sorted(self.file_ids)))
        if self.file is not None:
            self.repeats -= self.file.duplicates
            self.file.duplicates = 0
            self.file.error = error
            self.files.append((self.file, set()))
        self.file = None
        self.file_ids = set()


def _rebuild_without(batch: _Batch, drop: set[str]) -> _Batch:
    """A copy of `batch` without the sessions in `drop` (rare: only when a file fails)."""
    fresh = _Batch()
    keep_rows = [i for i, sid in enumerate(batch.sessions["id"]) if sid not in drop]
    for name, values in batch.sessions.items():
        fresh.sessions[name] = [values[i] for i in keep_rows]
    for part, source in (("messages", batch.messages), ("probes", batch.probes)):
        target = getattr(fresh, part)
        rows = [i for i, sid in enumerate(source["session_id"]) if sid not in drop]
        for name, values in source.items():
            target[name] = [values[i] for i in rows]
    fresh.ids = [sid for sid in batch.ids if sid not in drop]
    fresh.objects = [session for sid, session in zip(batch.ids, batch.objects, strict=True) if sid not in drop]
    fresh.message_count = sum(fresh.sessions["message_count"])
    fresh.calls = sum(fresh.sessions["call_count"])
    fresh.chars = _chars(fresh.messages["content"]) + _chars(fresh.messages["parts"])
    return fresh


def _write_batch(store: Store, batch: _Batch, earlier: dict[str, EarlierImports]) -> tuple[list[str], dict[str, str]]:
    """Insert the batch's sessions not yet stored, in one transaction; returns the ids written and,
    for those that are later versions of stored sessions (`_later_versions`), the stored id (the
    new one takes the stored one's dataset; the caller deletes the stored one once the import holds).
    `earlier`: what `_later_versions` read of each source so far in this import."""
    con = store.connection
    try:
        existing = {
            r[0]
            for r in con.execute(
                "SELECT id FROM sessions WHERE id IN (SELECT unnest(?::VARCHAR[]))", [batch.ids]
            ).fetchall()
        }
    except duckdb.Error as exc:
        raise StoreError(f"cannot read {store.path}: {exc}") from exc
    if existing:
        batch = _rebuild_without(batch, existing)
    if not len(batch):
        return [], {}
    later = _later_versions(store, batch, earlier)
    try:
        _insert(con, batch.tables())
    except duckdb.InvalidInputException as exc:
        if "surrogate" not in str(exc):
            raise StoreError(
                f"import into {store.path} failed; the batch of {len(batch)} sessions was rolled back: {exc}"
            ) from exc
        _insert(con, batch.tables(clean=True))  # text with lone surrogates (from \ud800-style escapes)
    except duckdb.Error as exc:
        raise StoreError(
            f"import into {store.path} failed; the batch of {len(batch)} sessions was rolled back: {exc}"
        ) from exc
    return list(batch.ids), later


#: Metadata that names one recording among those of a file (a Claude Code or Codex session and its
#: sub-agent, an evaluation instance, an aider chat's start, a line of a JSONL file of sessions).
RECORDING_KEYS = ("session_id", "agent_id", "claude_code_kind", "instance_id", "started_at", "source_line")


def _recording(metadata: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(metadata.get(key) for key in RECORDING_KEYS)


def continues(old: Session, new: Session) -> bool:
    """Whether `new` is `old`'s recording read again after it grew: every message of `old` but its
    last opens `new` (the last may have been cut while the agent wrote it, and stubs for calls
    whose results were not yet written are left out), and `new` has more to say."""
    kept = list(old.messages)
    while kept and kept[-1].role == "tool" and kept[-1].text == NO_RESULT_TEXT:
        kept.pop()
    stable = kept[:-1]
    if not stable or len(new.messages) <= len(stable) or new.tools != old.tools:
        return False
    return content_hash(stable) == content_hash(new.messages[: len(stable)])


def _stored_sources(store: Store) -> frozenset[str]:
    """The sources of the sessions stored (read before an import writes anything)."""
    try:
        return frozenset(
            row[0]
            for row in store.connection.execute(
                "SELECT DISTINCT source FROM sessions WHERE source IS NOT NULL"
            ).fetchall()
        )
    except duckdb.Error as exc:
        raise StoreError(f"cannot read {store.path}: {exc}") from exc


#: Per recording (format, source, `RECORDING_KEYS` values): the (id, dataset) of the sessions stored of it.
EarlierImports = dict[tuple[Any, ...], list[tuple[str, str]]]


def _earlier_imports(store: Store, sources: list[str]) -> dict[str, EarlierImports]:
    """What the database holds of each source, by recording; a source whose stored sessions nothing
    tells apart (several, none with recording keys) is left out."""
    try:
        rows = store.connection.execute(
            "SELECT id, dataset, format, source, metadata FROM sessions WHERE source IN (SELECT unnest(?::VARCHAR[]))",
            [sources],
        ).fetchall()
    except duckdb.Error as exc:
        raise StoreError(f"cannot read {store.path}: {exc}") from exc
    found: dict[str, EarlierImports] = {source: {} for source in sources}
    for sid, dataset, fmt, source, meta in rows:
        recording = (fmt, source, *_recording(json.loads(meta) if meta else {}))
        found[source].setdefault(recording, []).append((sid, dataset))
    for recordings in found.values():
        for recording in [r for r, ids in recordings.items() if len(ids) > 1 and all(k is None for k in r[2:])]:
            del recordings[recording]
    return found


def _later_versions(store: Store, batch: _Batch, earlier: dict[str, EarlierImports]) -> dict[str, str]:
    """New id -> stored id for the batch's sessions that continue a session an earlier
    import stored (`continues`) of the same format, source and recording (`RECORDING_KEYS`): a live
    session imported again. The batch's rows take the stored session's dataset.

    `earlier` holds, per source, what the database held of it when this import first met it (read
    then, once: what this import writes is never an earlier version); a matched session is taken out."""
    columns = batch.sessions
    unread = sorted(
        {
            source
            for source, session in zip(columns["source"], batch.objects, strict=True)
            if session is not None and source is not None and source not in earlier
        }
    )
    if unread:
        earlier.update(_earlier_imports(store, unread))
    later: dict[str, str] = {}
    for row, session in enumerate(batch.objects):
        if session is None:
            continue
        source = columns["source"][row]
        recordings = earlier.get(source) if source is not None else None
        if not recordings:
            continue
        candidates = recordings.get((columns["format"][row], source, *_recording(session.metadata)), [])
        for place, (sid, dataset) in enumerate(candidates):
            found = store._load([sid])
            if found and continues(found[0], session):
                later[session.id] = sid
                columns["dataset"][row] = dataset
                del candidates[place]
                break
    return later


def _insert(con: duckdb.DuckDBPyConnection, tables: dict[str, dict[str, Any]]) -> None:
    """One transaction: the datasets, sessions, messages and probes of a batch (rolled back on failure)."""
    registered: list[str] = []
    try:
        con.execute("BEGIN TRANSACTION")
        for name, table in tables.items():
            con.register(name, table)
            registered.append(name)
        con.execute(_DATASET_INSERT)
        con.execute(_SESSION_INSERT)
        con.execute(_MESSAGE_INSERT)
        con.execute(_PROBE_INSERT)
        con.execute("COMMIT")
    except BaseException:
        _rollback(con)
        raise
    finally:
        for name in registered:
            _unregister(con, name)


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


def _unregister(con: duckdb.DuckDBPyConnection, name: str) -> None:
    try:
        con.unregister(name)
    except duckdb.Error:
        pass


def _display(path: str, root: str | None) -> str:
    """How a file is named in session metadata `source`: relative to the folder walked, else its name."""
    if root:
        try:
            return os.path.relpath(path, root).replace(os.sep, "/")
        except ValueError:
            pass
    return os.path.basename(path)


# --------------------------------------------------------------------------------------------
# Human labels of summaries
# --------------------------------------------------------------------------------------------

#: The verdicts a researcher gives a summary.
SUMMARY_LABELS = ("good", "bad")
#: The columns of `Store.summary_labels()` (and of the `summary_labels` table), in order.
SUMMARY_LABEL_COLUMNS = ("session_id", "config_hash", "config", "compaction", "label", "note", "labelled_at")


@dataclass(frozen=True)
class SummaryLabel:
    """A researcher's verdict on the summary of one compaction.

    The key is (`session_id`, `config_hash`, `compaction`): the config by `workbench.config.config_hash`
    (its spec without its name, so a renamed config keeps its labels; `config` is the name it had when
    labelled, for display) and the compaction by its `event_index` in that config's replay of the
    session (the order of `ReplayResult.compactions`, no-op firings counted; the `#i` of the Compare
    page and `cell_compactions.event_index`). A deterministic replay gives the same events again, so
    a label made on the Compare page finds its compaction in a stored run of the same config.
    """

    session_id: str
    config_hash: str
    config: str
    compaction: int
    label: str
    note: str | None
    labelled_at: datetime


def summary_labels_frame(
    con: duckdb.DuckDBPyConnection, *, session_id: str | None = None, config_hash: str | None = None
) -> pd.DataFrame:
    """The stored labels as a DataFrame of `SUMMARY_LABEL_COLUMNS` (see `Store.summary_labels`), read
    on an open connection (the exports read them on the connection they read the run with)."""
    try:
        return con.execute(
            f"SELECT {', '.join(SUMMARY_LABEL_COLUMNS)} FROM summary_labels "
            "WHERE (?::VARCHAR IS NULL OR session_id = ?) AND (?::VARCHAR IS NULL OR config_hash = ?) "
            "ORDER BY session_id, config_hash, compaction",
            [session_id, session_id, config_hash, config_hash],
        ).df()
    except duckdb.Error as exc:
        raise StoreError(f"reading the summary labels failed: {exc}") from exc
