"""The batch writer of imports: sessions built into columnar batches, each written in one
transaction by a background thread, with the bookkeeping of duplicates, failed files and sessions
that continue earlier imports of the same recording."""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import duckdb

from workbench import importers
from workbench.errors import ConfigError, StoreError
from workbench.importers.report import FileOutcome, ImportReport
from workbench.session import NO_RESULT_TEXT, Session, content_hash
from workbench.store import db, import_workers
from workbench.store.batch import Batch, filing
from workbench.store.hub import Connection
from workbench.store.import_workers import Piece
from workbench.tokens import DEFAULT_TOKENIZER


class Store(Protocol):
    """What the writer uses of `workbench.store.Store` (named here so the two modules import one way)."""

    path: str
    batch_messages: int
    batch_bytes: int
    import_workers: int
    split_bytes: int
    piece_bytes: int
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


def check_dataset_name(name: str | None) -> None:
    """A dataset name given must not be blank: it would file the sessions under another name without
    a word (None: each session's own dataset). ConfigError otherwise."""
    if name is not None and not str(name).strip():
        raise ConfigError("a dataset name cannot be empty or blank (None: each session's own)")


class Writer:
    """Buffers sessions into batches; a background thread writes each batch in one transaction.
    A big file's sessions may come as pieces worker processes read (`read`), merged in file order.

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
        self.batch = Batch()
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
    def read(self, path: str, format: str, dataset: str | None, source: str) -> Iterator[Session | Piece]:
        """What `add` takes of one file: its sessions, or, for a big file of one session per line
        whose source no earlier import stored, the pieces worker processes read of it
        (`import_workers`); `add` files both alike."""
        store = self.store
        split = None
        if store.import_workers > 1 and source not in self.stored_sources and import_workers.can_start_workers():
            try:
                big = os.path.getsize(path) >= store.split_bytes
            except OSError:
                big = False
            split = importers.line_ranges(path, format, store.piece_bytes) if big else None
        if split is None:
            yield from importers.iter_sessions(path, format, dataset, source=source)
            return
        name, ranges = split
        yield from import_workers.read_pieces(path, name, ranges, dataset, source, self.dataset, store.import_workers)

    def add(self, item: Session | Piece, source: str | None = None) -> None:
        """Buffer a session (or a worker's piece of sessions) unless this import met its id before."""
        if isinstance(item, Piece):
            self._add_piece(item.batch)
            return
        if not self._first(item.id):
            return
        dataset, source = filing(item, self.dataset, source)
        self.batch.add(item, dataset, source, keep=source in self.stored_sources)
        self._flush_when_full()

    def _first(self, session_id: str) -> bool:
        """Note a session id; False (a repeat, counted) when this import met it before."""
        if session_id in self.seen:
            self.repeats += 1
            if self.file is not None:
                self.file.duplicates += 1
            return False
        self.seen.add(session_id)
        if self.file is not None:
            self.file_ids.add(session_id)
        return True

    def _add_piece(self, batch: Batch) -> None:
        rows = [row for row, sid in enumerate(batch.ids) if self._first(sid)]
        self.batch.extend(batch, rows if len(rows) < len(batch) else None)
        self._flush_when_full()

    def _flush_when_full(self) -> None:
        if self.batch.message_count >= self.store.batch_messages or self.batch.chars >= self.store.batch_bytes:
            self.flush()

    def flush(self) -> None:
        batch, self.batch = self.batch, Batch()
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
            self.batch = self.batch.without(self.file_ids)
            self.seen -= self.file_ids
            self._submit(("delete", sorted(self.file_ids)))
        if self.file is not None:
            self.repeats -= self.file.duplicates
            self.file.duplicates = 0
            self.file.error = error
            self.files.append((self.file, set()))
        self.file = None
        self.file_ids = set()


def _write_batch(store: Store, batch: Batch, earlier: dict[str, EarlierImports]) -> tuple[list[str], dict[str, str]]:
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
        batch = batch.without(existing)
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


def _later_versions(store: Store, batch: Batch, earlier: dict[str, EarlierImports]) -> dict[str, str]:
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
