"""The model cache in the database: the `llm_cache` table behind the gateway's `Cache` protocol.

Keys, entries and the first-answer-wins rule are the gateway's (`workbench.llm.cache`); this module
only stores them, so every statement touching the DuckDB file stays in the store.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from workbench.compaction import REFUSED_FINISH_REASONS
from workbench.llm.cache import ENTRY_COLUMNS, AnswerTable, CacheEntry, replaces, request_json
from workbench.llm.options import redact
from workbench.store import db

__all__ = ["DuckDBCache"]

log = logging.getLogger("workbench.llm")


#: The SQL condition true of an `llm_cache` row holding an unusable answer (`CacheEntry.usable`).
_UNUSABLE_ROW = (
    r"regexp_matches(coalesce(llm_cache.response_text, ''), '^\s*$') OR llm_cache.finish_reason IN ("
    + ", ".join(f"'{reason}'" for reason in sorted(REFUSED_FINISH_REASONS))
    + ")"
)


class _ReadBatch:
    __slots__ = ("keys", "done", "found", "error")

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.done = threading.Event()
        self.found: dict[str, CacheEntry] = {}
        self.error: BaseException | None = None


def _close_if_alive(reference: Any) -> None:
    cache = reference()
    if cache is not None:
        cache.close()


class DuckDBCache:
    """The `llm_cache` table of the workbench database: a `Cache` for the gateway.

    Give it a path (the file is opened at a read or write and let go once idle after it has been open
    `db.HOLD_SECONDS`, so other processes can open it between, and a burst of lookups does not pay an
    open each), a `workbench.store.db.FileHold` of the caller's, or an open connection (shared
    with the rest of the process and held as long as it is open; this cache uses its own cursor
    behind a lock, so any thread may call it). Migrations are applied at once. The first response
    stored under a key wins (over an unusable one, see the module's docstring).

    Writes are batched (write-behind): `put` returns at once and a background thread stores the
    pending rows every `flush_interval` seconds (or when `batch_size` are waiting) in one
    statement — one DuckDB commit costs milliseconds, far more than the rows. Pending rows are
    served by `get` meanwhile, and `flush()` / `close()` (also run at interpreter exit) store them.
    `write_behind=False` stores each row before `put` returns.
    """

    _COLUMNS = ", ".join(ENTRY_COLUMNS)
    _INSERT_COLUMNS = (
        "key, model, request, response_text, input_tokens, output_tokens, cost_usd, finish_reason, duration_s"
    )
    _REPLACED = ", ".join(f"{column} = excluded.{column}" for column in ("model", "request", *ENTRY_COLUMNS))
    _ROWS_PER_STATEMENT = 200

    def __init__(
        self,
        connection_or_path: Any = None,
        *,
        write_behind: bool = True,
        flush_interval: float = 0.25,
        batch_size: int = 256,
    ):
        self._hold: db.FileHold | None = None
        self._cursor: Any = None
        if connection_or_path is None or isinstance(connection_or_path, (str, os.PathLike)):
            self._hold = db.FileHold(connection_or_path, linger=db.HOLD_SECONDS)  # not one open per lookup
        elif isinstance(connection_or_path, db.FileHold):
            self._hold = connection_or_path
        else:
            db.apply_migrations(connection_or_path)
            self._cursor = connection_or_path.cursor()
        if self._hold is not None:
            with self._hold.open():  # migrates, and fails here rather than at the first lookup
                pass
        self._db_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: dict[str, tuple[list[Any], CacheEntry, bool]] = {}  # key -> (row, entry, replace)
        self._snapshot: AnswerTable | None = None  # `preload`'s answers
        self._since: dict[str, CacheEntry] = {}  # after a preload: the answers that count, put since
        self._read_lock = threading.Lock()
        self._open_read: _ReadBatch | None = None
        self._reading = False
        self.write_behind = write_behind
        self.flush_interval = float(flush_interval)
        self.batch_size = int(batch_size)
        self._wake = threading.Event()
        self._closed = False
        self._flusher: threading.Thread | None = None
        import atexit
        import weakref

        self._atexit = functools.partial(_close_if_alive, weakref.ref(self))  # one registration per cache
        atexit.register(self._atexit)

    #: `preload` reads no cache whose answers hold more text than this: lookups keep querying.
    PRELOAD_MAX_CHARS = 64_000_000

    def preload(self) -> int:
        """Read every stored answer now, in one query; returns how many (0 for a cache whose answers
        exceed `PRELOAD_MAX_CHARS`, left unread).

        From then on lookups are answered from memory: that snapshot and the answers put since, by
        the first-answer-wins rule. A grid asks the cache thousands of times, and a query each cost a
        good share of an offline grid. What other processes store afterwards is not seen."""
        self.flush()
        with self._database() as cursor:
            chars = cursor.execute("SELECT coalesce(sum(length(response_text)), 0) FROM llm_cache").fetchall()[0][0]
            if chars > self.PRELOAD_MAX_CHARS:
                return 0
            table = cursor.sql(f"SELECT key, {self._COLUMNS} FROM llm_cache").to_arrow_table()
        snapshot = AnswerTable(table)
        with self._pending_lock:
            self._snapshot = snapshot
        return len(snapshot)

    def _preloaded(self, key: str) -> CacheEntry | None:
        """The answer the preloaded view holds under `key` (caller holds `_pending_lock`)."""
        entry = self._since.get(key)
        if entry is not None or self._snapshot is None:
            return entry
        return self._snapshot.get(key)

    def get(self, key: str) -> CacheEntry | None:
        """One key. Lookups made at the same time from several threads share one query (a DuckDB
        query costs ~0.5 ms whatever its size): the first caller reads, the others join the next batch.
        After `preload`, no query."""
        with self._pending_lock:
            if self._snapshot is not None:
                return self._preloaded(key)
            pending = self._pending.get(key)
        if pending is not None:
            return pending[1]
        with self._read_lock:
            batch = self._open_read
            if batch is None:
                batch = self._open_read = _ReadBatch()
            batch.keys.append(key)
            leader = not self._reading
            if leader:
                self._reading = True
                self._open_read = None
        if not leader:
            batch.done.wait()
            if batch.error is not None:
                raise batch.error
            return batch.found.get(key)
        mine = batch  # the leader's key is in the first batch; it then reads the batches that formed meanwhile
        while True:
            try:
                batch.found = self._select(batch.keys)
            except BaseException as exc:
                batch.error = exc
            batch.done.set()
            with self._read_lock:
                batch = self._open_read
                self._open_read = None
                if batch is None:
                    self._reading = False
                    break
        if mine.error is not None:
            raise mine.error
        return mine.found.get(key)

    @contextmanager
    def _database(self) -> Iterator[Any]:
        """A cursor on the database, for one statement or transaction, behind the cache's lock."""
        with self._db_lock:
            if self._hold is None:
                yield self._cursor
            else:
                with self._hold.open() as cursor:
                    yield cursor

    def _select(self, keys: Sequence[str]) -> dict[str, CacheEntry]:
        with self._database() as cursor:
            if len(keys) == 1:
                rows = cursor.execute(f"SELECT key, {self._COLUMNS} FROM llm_cache WHERE key = ?", [keys[0]]).fetchall()
            else:
                rows = cursor.execute(
                    f"SELECT key, {self._COLUMNS} FROM llm_cache WHERE key IN (SELECT unnest(?::VARCHAR[]))",
                    [list(dict.fromkeys(keys))],
                ).fetchall()
        return {row[0]: CacheEntry.from_row(row[1:]) for row in rows}

    def get_many(self, keys: Sequence[str]) -> dict[str, CacheEntry]:
        unique = list(dict.fromkeys(keys))
        found: dict[str, CacheEntry] = {}
        with self._pending_lock:
            if self._snapshot is not None:
                return {key: entry for key in unique if (entry := self._preloaded(key)) is not None}
            for key in unique:
                if key in self._pending:
                    found[key] = self._pending[key][1]
        missing = [key for key in unique if key not in found]
        for start in range(0, len(missing), 1000):
            found.update(self._select(missing[start : start + 1000]))
        return found

    def put(
        self, key: str, model: str, request: Mapping[str, Any] | str, entry: CacheEntry, *, replace: bool = False
    ) -> None:
        """Store `entry` under `key` unless the key holds a usable answer (`replace`: whatever it holds)."""
        row = [
            key,
            model,
            request_json(request),
            entry.text,
            entry.input_tokens,
            entry.output_tokens,
            entry.cost_usd,
            entry.finish_reason,
            entry.duration_s,
        ]
        if self._snapshot is not None:
            with self._pending_lock:
                if replace or replaces(self._preloaded(key), entry):
                    self._since[key] = entry
        if not self.write_behind or self._closed:
            self._insert([(row, replace)])
            return
        with self._pending_lock:
            pending = self._pending.get(key)
            if replace or replaces(None if pending is None else pending[1], entry):
                self._pending[key] = (row, entry, replace or (pending is not None and pending[2]))
            full = len(self._pending) >= self.batch_size
        if self._flusher is None:
            self._start_flusher()
        if full:
            self._wake.set()

    def _start_flusher(self) -> None:
        with self._pending_lock:
            if self._flusher is not None:
                return
            self._flusher = threading.Thread(target=self._flush_loop, name="llm-cache-flush", daemon=True)
            self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            if self._closed:
                break
            self.flush()

    def _insert(self, rows: list[tuple[list[Any], bool]]) -> None:
        """Store (row, replace) pairs: a row replaces an unusable answer under its key, or any with `replace`."""
        with self._database() as cursor:
            for replacing in (False, True):
                chosen = [row for row, replace in rows if replace is replacing]
                condition = "" if replacing else f" WHERE {_UNUSABLE_ROW}"
                for start in range(0, len(chosen), self._ROWS_PER_STATEMENT):
                    chunk = chosen[start : start + self._ROWS_PER_STATEMENT]
                    placeholders = ",".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(chunk))
                    cursor.execute(
                        f"INSERT INTO llm_cache ({self._INSERT_COLUMNS}) VALUES {placeholders} "
                        f"ON CONFLICT (key) DO UPDATE SET {self._REPLACED}{condition}",
                        [value for row in chunk for value in row],
                    )

    def flush(self) -> int:
        """Store the pending rows now; returns how many were written."""
        with self._pending_lock:
            batch = list(self._pending.items())
        if not batch:
            return 0
        try:
            self._insert([(row, replace) for _, (row, _, replace) in batch])
        except Exception as exc:
            log.warning("could not store %d cached responses in DuckDB: %s", len(batch), redact(str(exc)))
            return 0
        with self._pending_lock:
            for key, _ in batch:
                self._pending.pop(key, None)
        return len(batch)

    def __len__(self) -> int:
        self.flush()
        with self._database() as cursor:
            return int(cursor.execute("SELECT count(*) FROM llm_cache").fetchall()[0][0])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join(5)
        try:
            self.flush()
        finally:
            import atexit

            atexit.unregister(self._atexit)
            if self._cursor is not None:
                with self._db_lock:
                    try:
                        self._cursor.close()
                    except Exception:
                        pass
