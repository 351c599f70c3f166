"""The batch writer of imports: sessions built into columnar batches, each written in one
transaction by a background thread, with the bookkeeping of duplicates, failed files and sessions
that continue earlier imports of the same recording."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import duckdb

from workbench.errors import ConfigError, StoreError
from workbench.importers.report import FileOutcome, ImportReport
from workbench.session import NO_RESULT_TEXT, Message, Session, ToolCall, content_hash
from workbench.store import db
from workbench.store.hub import Connection
from workbench.tokens import DEFAULT_TOKENIZER, prime


class Store(Protocol):
    """What the writer uses of `workbench.store.Store` (named here so the two modules import one way)."""

    path: str
    batch_messages: int
    batch_bytes: int
    opened_at: float
    HOLD_SECONDS: float

    @property
    def connection(self) -> Connection: ...

    @property
    def releasable(self) -> bool: ...

    def release(self) -> None: ...

    def delete_sessions(self, ids: Iterable[str]) -> int: ...

    def datasets_of(self, ids: Iterable[str]) -> dict[str, int]: ...

    def sessions_by_id(self, ids: Sequence[str]) -> list[Session]: ...


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
_TOKEN_COUNT_INSERT = """
    INSERT INTO token_counts (session_id, idx, tokenizer, tokens)
    SELECT session_id, idx, ?, tokens FROM _wb_messages
"""
_PROBE_INSERT = """
    INSERT INTO probes (session_id, idx, question, expected, kind, from_call)
    SELECT session_id, idx, question, expected, kind, from_call FROM _wb_probes
"""
_DATASET_INSERT = """
    INSERT INTO datasets (name)
    SELECT DISTINCT dataset FROM _wb_sessions WHERE dataset NOT IN (SELECT name FROM datasets)
"""


_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
_quote = json.encoder.encode_basestring  # a JSON string literal (the C function when available)


def json_text(value: Any) -> str:
    """`value` as compact JSON text (non-ASCII kept, anything unknown as its string)."""
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
    """Column lists of the sessions, messages and probes about to be written together, and the
    messages themselves (row by row with the message columns), counted under `DEFAULT_TOKENIZER`
    in one batch when the columns are built (`tables`): a session is stored with its counts."""

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
        self.counted: list[Message] = []
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
        parts = [None if c is None or isinstance(c, str) else json_text([dict(p) for p in c]) for c in contents]
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
        m["metadata"].extend(json_text(dict(msg.metadata)) if msg.metadata else None for msg in msgs)
        m["observation"].extend([msg.observation for msg in msgs])
        self.counted.extend(msgs)
        calls = roles.count("assistant")
        chars = _chars(strings) + _chars(parts)
        s = self.sessions
        s["id"].append(sid)
        s["dataset"].append(dataset)
        s["format"].append(session.format or "unknown")
        s["source"].append(source)
        s["message_count"].append(n)
        s["call_count"].append(calls)
        s["tools"].append(json_text([dict(t) for t in session.tools]) if session.tools else None)
        s["metadata"].append(json_text(dict(session.metadata)) if session.metadata else None)
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

        prime(self.counted, DEFAULT_TOKENIZER)
        counts = np.fromiter(
            (m._token_cache[DEFAULT_TOKENIZER] for m in self.counted), dtype=np.int32, count=len(self.counted)
        )

        def column(name: str, values: list[Any]) -> Any:
            dtype = dtypes.get(name, object)
            if dtype is not object:
                return np.asarray(values, dtype=dtype)
            array = np.empty(len(values), dtype=object)
            array[:] = [_clean_text(v) for v in values] if clean else values
            return array

        tables = {
            table: {name: column(name, values) for name, values in columns.items()}
            for table, columns in (
                ("_wb_sessions", self.sessions),
                ("_wb_messages", self.messages),
                ("_wb_probes", self.probes),
            )
        }
        tables["_wb_messages"]["tokens"] = counts
        return tables


def check_dataset_name(name: str | None) -> None:
    """A dataset name given must not be blank: it would file the sessions under another name without
    a word (None: each session's own dataset). ConfigError otherwise."""
    if name is not None and not str(name).strip():
        raise ConfigError("a dataset name cannot be empty or blank (None: each session's own)")


class Writer:
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
        self.threads: Any = None  # DuckDB's thread count before the import set it to one
        self.threads_set_on: Connection | None = None

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.flush()
        self.close(raise_error=exc_type is None)

    # -- the writer thread ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._work()
        finally:
            self._restore_threads()

    def _one_thread(self) -> None:
        """One DuckDB thread while importing: the other core parses the next batch (measured faster on
        2 cores than letting DuckDB compete with the importer for both). Set again after a release."""
        con = self.store.connection
        if self.threads is not None and self.threads_set_on is con:
            return
        try:
            threads = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
            con.execute("SET threads = 1")
        except duckdb.Error:
            return
        self.threads = self.threads if self.threads is not None else threads
        self.threads_set_on = con

    def _restore_threads(self) -> None:
        if self.threads is not None and self.threads_set_on is self.store.connection:
            try:
                self.threads_set_on.execute(f"SET threads = {int(self.threads)}")
            except duckdb.Error:
                pass

    def _let_others_in(self) -> None:
        """Between batches, once the file has been held for `Store.HOLD_SECONDS`: close it, so another
        process reads (or writes) before the next batch opens it again."""
        if self.store.releasable and time.monotonic() - self.store.opened_at >= self.store.HOLD_SECONDS:
            self._restore_threads()
            self.store.release()

    def _work(self) -> None:
        while True:
            job = self.queue.get()
            if job is None:
                return
            if self.error is not None:
                continue
            kind, payload = job
            self._one_thread()
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
            else:
                self._let_others_in()

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
        if part == "messages":
            fresh.counted = [batch.counted[i] for i in rows]
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
            found = store.sessions_by_id([sid])
            if found and continues(found[0], session):
                later[session.id] = sid
                columns["dataset"][row] = dataset
                del candidates[place]
                break
    return later


def _insert(con: Connection, tables: dict[str, dict[str, Any]]) -> None:
    """One transaction: the datasets, sessions, messages, their token counts under `DEFAULT_TOKENIZER`
    and probes of a batch (rolled back on failure)."""
    registered: list[str] = []
    with db.python_scans:
        try:
            con.execute("BEGIN TRANSACTION")
            for name, table in tables.items():
                con.register(name, table)
                registered.append(name)
            con.execute(_DATASET_INSERT)
            con.execute(_SESSION_INSERT)
            con.execute(_MESSAGE_INSERT)
            con.execute(_TOKEN_COUNT_INSERT, [DEFAULT_TOKENIZER])
            con.execute(_PROBE_INSERT)
            con.execute("COMMIT")
        except BaseException:
            db.rollback_quietly(con)
            raise
        finally:
            for name in registered:
                db.unregister_quietly(con, name)
