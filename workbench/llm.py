"""The one gateway every model call of the workbench goes through (summaries, probe answers, judges).

    from workbench.llm import Gateway, DuckDBCache

    gateway = Gateway(DuckDBCache("data/workbench.duckdb"))
    summarizer = gateway.model("openai/gpt-4o-mini", {"temperature": 0, "concurrency": 16})
    completion = summarizer.complete([{"role": "user", "content": "Summarize: ..."}])
    completion = await summarizer.acomplete(messages)          # the same, from asyncio

Built on LiteLLM (`litellm.completion` / `litellm.acompletion`), so any provider string works:
`openai/...`, `anthropic/...`, `ollama/...`, an OpenAI-compatible server (`openai/<name>` with
`api_base`), and the offline `workbench/extractive`.

Options (a config's `summarizer_options`, merged over the gateway's defaults):
- sent to the model and part of the cache key: `temperature`, `max_tokens`, `top_p`, `stop`,
  `seed`, `response_format`, ... (anything not listed below);
- transport only, sent but never part of the cache key: `api_base`/`base_url`, `api_version`,
  `timeout` (seconds per attempt), `extra_headers`, `organization`;
- secrets, sent but never part of the cache key, never stored, redacted from error messages:
  `api_key` and any option whose name says key/secret/token/password/credentials;
  `api_key_env` names an environment variable holding the key (so configs never hold keys);
  without either, LiteLLM reads the provider's usual variable (`OPENAI_API_KEY`, ...);
- the gateway's own, never sent: `concurrency` (in-flight calls per model and endpoint, one
  bound shared by threads and event loops), `repeat` (sample number: repeats of the same request
  are cached separately), `num_retries` (retries after the first attempt; `max_retries` is an
  alias), `cache` (False bypasses the cache), `input_cost_per_token` and
  `output_cost_per_token` (your own prices, e.g. for a self-hosted model).
Defaults come from the Gateway's arguments, which default to the environment variables
`WORKBENCH_LLM_TIMEOUT`, `WORKBENCH_LLM_CONCURRENCY` and `WORKBENCH_LLM_NUM_RETRIES`.

Behaviour:
- Cache: the key hashes (model, messages, parameters, repeat); a hit returns the stored record
  (text, tokens, cost and duration of the original call) with `cache_hit=True`, `attempts=0`.
  Errors are never cached. Identical requests in flight at the same time are made once (the
  others wait and receive the result as a cache hit, or the same error), so a grid never pays
  twice. `complete_many` / `acomplete_many` ask the cache once per batch and return results in
  input order. `DuckDBCache` stores rows in batches shortly after (see its docstring): call
  `Gateway.close()` (or `cache.flush()`) before another process reads the table.
- `model`, `messages` and `stream` cannot be set as options (`ConfigError`).
- Retries (the only ones: LiteLLM's and the OpenAI client's are disabled): 429 (waiting at least
  its `Retry-After`), 5xx, timeouts and connection errors, with exponential backoff and jitter.
  Other 4xx fail at once. Failures raise `RateLimited`, `ProviderError`, `Timeout` or
  `BadResponse`, all `LLMError`, itself a `SummarizerError`.
- `finish_reason == "length"` is reported in the returned `Completion`, not raised.
- Usage comes from the response, or is counted with the `heuristic` tokenizer when the provider
  omits it; cost from LiteLLM's (local) price map. Unknown prices give `cost_usd=None` and a
  "cost unknown" warning (once per model, logged, and listed in `Gateway.unknown_cost_models`).

LiteLLM is imported on first use, not when this module is imported.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import functools
import hashlib
import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, runtime_checkable

from workbench.compaction import Completion
from workbench.errors import SummarizerError

__all__ = [
    "BadResponse", "BoundModel", "Cache", "CacheEntry", "DuckDBCache", "Gateway", "GatewayStats", "LLMError",
    "Limiter", "MemoryCache", "ProviderError", "RateLimited", "Timeout", "cache_key", "classify",
    "default_gateway", "key_material", "load_litellm", "redact", "retry_after_seconds", "set_default_gateway",
    "split_options",
]

log = logging.getLogger("workbench.llm")

KEY_VERSION = 1
OFFLINE_PREFIX = "workbench/"

#: Options the gateway consumes itself (never sent to LiteLLM).
GATEWAY_OPTIONS = frozenset({
    "concurrency", "repeat", "num_retries", "max_retries", "cache", "api_key_env",
    "input_cost_per_token", "output_cost_per_token",
})
#: Options sent to LiteLLM that do not change the answer (not part of the cache key).
TRANSPORT_OPTIONS = frozenset({
    "api_base", "base_url", "api_version", "timeout", "request_timeout", "stream_timeout", "extra_headers",
    "headers", "organization", "client", "aws_region_name", "vertex_location", "vertex_project",
    "metadata", "litellm_logging_obj", "drop_params",
})
#: Options a model's configuration may not set.
RESERVED_OPTIONS = frozenset({"model", "messages", "stream"})
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:api_?key|key|keys|secret|secrets|password|passwd|pwd|token|credentials?|authorization|auth|cookie)(?:$|_)",
    re.IGNORECASE)
_SECRET_PATTERNS = (
    (re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_\-]{6,}"), r"\1-***"),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9_\-.=:+/]{6,}"), r"\1 ***"),
    (re.compile(r"(?i)((?:api[_-]?key|x-api-key|authorization|token|secret)[\"']?\s*[:=]\s*[\"']?)[^\"'\s,}&]{4,}"),
     r"\1***"),
)


def is_secret_option(name: str) -> bool:
    """True for option names that hold credentials (`api_key`, `aws_secret_access_key`, ...)."""
    return bool(_SECRET_NAME.search(name)) and name not in ("max_tokens", "max_completion_tokens")


# -- errors --------------------------------------------------------------------------------------


class LLMError(SummarizerError):
    """A model call failed for good (after the gateway's retries). Messages never hold secrets.

    model: the model string; attempts: HTTP attempts made; status_code: the provider's HTTP
    status when known; retry_after: the wait the provider asked for (seconds), when it did;
    provider_error: the name of LiteLLM's exception type.
    """

    retryable = False

    def __init__(self, message: str, *, model: str | None = None, attempts: int = 0, status_code: int | None = None,
                 retry_after: float | None = None, provider_error: str | None = None,
                 retryable: bool | None = None):
        super().__init__(message)
        self.model = model
        self.attempts = attempts
        self.status_code = status_code
        self.retry_after = retry_after
        self.provider_error = provider_error
        if retryable is not None:
            self.retryable = retryable

    def __reduce__(self):  # keep keyword attributes through copy/pickle
        return (_rebuild_error, (type(self), self.args, self.__dict__))


def _rebuild_error(cls: type[LLMError], args: tuple, state: dict) -> LLMError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class RateLimited(LLMError):
    """HTTP 429 still returned after the retries (or asking for a longer wait than allowed)."""

    retryable = True


class ProviderError(LLMError):
    """The provider failed: 5xx or connection error after the retries, or a 4xx (not retried)."""


class Timeout(LLMError):
    """No answer within the per-attempt `timeout`, after the retries."""

    retryable = True


class BadResponse(LLMError):
    """The provider answered something unusable: malformed JSON, no choices, `content: null`."""


# -- secrets -------------------------------------------------------------------------------------


def _env_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    environ = os.environ if environ is None else environ
    return [value for name, value in environ.items()
            if value and len(value) >= 8 and is_secret_option(name.lower())]


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with the given secret values, the environment's keys and key-like strings masked."""
    for secret in sorted({s for s in (*secrets, *_env_secrets()) if isinstance(s, str) and len(s) >= 4},
                         key=len, reverse=True):
        text = text.replace(secret, "***")
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _secret_values(options: Mapping[str, Any]) -> list[str]:
    values: list[str] = []
    for name, value in options.items():
        if is_secret_option(name) and isinstance(value, str):
            values.append(value)
        elif name in ("extra_headers", "headers") and isinstance(value, Mapping):
            values.extend(str(v) for v in value.values())
    return values


# -- options and keys ----------------------------------------------------------------------------


def split_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(params, transport, gateway): what is part of the cache key, what is only sent, what the gateway keeps.

    Secrets go to `transport` (sent, never hashed or stored).
    """
    params: dict[str, Any] = {}
    transport: dict[str, Any] = {}
    gateway: dict[str, Any] = {}
    for name, value in options.items():
        if name in GATEWAY_OPTIONS:
            gateway[name] = value
        elif name in TRANSPORT_OPTIONS or is_secret_option(name):
            transport[name] = value
        else:
            params[name] = value
    return params, transport, gateway


def _plain_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        if isinstance(message, Mapping):
            out.append(dict(message))
        elif hasattr(message, "to_openai"):
            out.append(message.to_openai())
        else:
            raise TypeError(f"a message must be a dict or a workbench Message, not {type(message).__name__}")
    return out


def key_material(model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any],
                 repeat: int = 0) -> dict[str, Any]:
    """What the cache key hashes (and what `llm_cache.request` stores): no secrets, no transport."""
    clean = {k: v for k, v in params.items() if v is not None and not is_secret_option(k)
             and k not in TRANSPORT_OPTIONS and k not in GATEWAY_OPTIONS}
    return {"v": KEY_VERSION, "model": model, "messages": list(messages), "params": clean, "repeat": int(repeat)}


def _canonical(material: Mapping[str, Any]) -> str:
    return json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def cache_key(model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any], repeat: int = 0) -> str:
    """The sha256 of the canonical JSON of `key_material(...)`."""
    return hashlib.sha256(_canonical(key_material(model, messages, params, repeat)).encode()).hexdigest()


# -- caches --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheEntry:
    """A stored successful response."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    finish_reason: str | None = "stop"
    duration_s: float = 0.0


@runtime_checkable
class Cache(Protocol):
    def get(self, key: str) -> CacheEntry | None: ...

    def get_many(self, keys: Sequence[str]) -> dict[str, CacheEntry]: ...

    def put(self, key: str, model: str, request: Mapping[str, Any], entry: CacheEntry) -> None: ...


class MemoryCache:
    """A process-local cache (a dict behind a lock); `requests` keeps what was stored for inspection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, CacheEntry] = {}
        self.requests: dict[str, dict[str, Any]] = {}

    def get(self, key: str) -> CacheEntry | None:
        with self._lock:
            return self._entries.get(key)

    def get_many(self, keys: Sequence[str]) -> dict[str, CacheEntry]:
        with self._lock:
            return {k: self._entries[k] for k in keys if k in self._entries}

    def put(self, key: str, model: str, request: Mapping[str, Any], entry: CacheEntry) -> None:
        with self._lock:
            self._entries.setdefault(key, entry)
            self.requests.setdefault(key, json.loads(_canonical(request)))

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def close(self) -> None:
        pass


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
    """The `llm_cache` table of the workbench database (`workbench.db`).

    Give it an open connection (shared with the rest of the process; this cache uses its own
    cursor behind a lock, so any thread may call it) or a path (opened with migrations applied,
    closed by `close()`). The first response stored under a key wins.

    Writes are batched (write-behind): `put` returns at once and a background thread stores the
    pending rows every `flush_interval` seconds (or when `batch_size` are waiting) in one
    statement — one DuckDB commit costs milliseconds, far more than the rows. Pending rows are
    served by `get` meanwhile, and `flush()` / `close()` (also run at interpreter exit) store them.
    `write_behind=False` stores each row before `put` returns.
    """

    _COLUMNS = "response_text, input_tokens, output_tokens, cost_usd, finish_reason, duration_s"
    _INSERT_COLUMNS = ("key, model, request, response_text, input_tokens, output_tokens, cost_usd, finish_reason, "
                       "duration_s")
    _ROWS_PER_STATEMENT = 200

    def __init__(self, connection_or_path: Any = None, *, write_behind: bool = True, flush_interval: float = 0.25,
                 batch_size: int = 256):
        from workbench import db

        if connection_or_path is None or isinstance(connection_or_path, (str, os.PathLike)):
            self._connection = db.connect(connection_or_path)
            self._owned = True
        else:
            self._connection = connection_or_path
            db.apply_migrations(self._connection)
            self._owned = False
        self._cursor = self._connection.cursor()
        self._db_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: dict[str, tuple[list[Any], CacheEntry]] = {}
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

    @staticmethod
    def _entry(row: Sequence[Any]) -> CacheEntry:
        text, input_tokens, output_tokens, cost, finish, duration = row
        return CacheEntry(text=text, input_tokens=int(input_tokens or 0), output_tokens=int(output_tokens or 0),
                          cost_usd=None if cost is None else float(cost), finish_reason=finish,
                          duration_s=float(duration or 0.0))

    def get(self, key: str) -> CacheEntry | None:
        """One key. Lookups made at the same time from several threads share one query (a DuckDB
        query costs ~0.5 ms whatever its size): the first caller reads, the others join the next batch."""
        with self._pending_lock:
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

    def _select(self, keys: Sequence[str]) -> dict[str, CacheEntry]:
        with self._db_lock:
            if len(keys) == 1:
                rows = self._cursor.execute(f"SELECT key, {self._COLUMNS} FROM llm_cache WHERE key = ?",
                                            [keys[0]]).fetchall()
            else:
                rows = self._cursor.execute(
                    f"SELECT key, {self._COLUMNS} FROM llm_cache WHERE key IN (SELECT unnest(?::VARCHAR[]))",
                    [list(dict.fromkeys(keys))]).fetchall()
        return {row[0]: self._entry(row[1:]) for row in rows}

    def get_many(self, keys: Sequence[str]) -> dict[str, CacheEntry]:
        unique = list(dict.fromkeys(keys))
        found: dict[str, CacheEntry] = {}
        with self._pending_lock:
            for key in unique:
                if key in self._pending:
                    found[key] = self._pending[key][1]
        missing = [key for key in unique if key not in found]
        for start in range(0, len(missing), 1000):
            found.update(self._select(missing[start:start + 1000]))
        return found

    def put(self, key: str, model: str, request: Mapping[str, Any], entry: CacheEntry) -> None:
        row = [key, model, _canonical(request), entry.text, entry.input_tokens, entry.output_tokens, entry.cost_usd,
               entry.finish_reason, entry.duration_s]
        if not self.write_behind or self._closed:
            self._insert([row])
            return
        with self._pending_lock:
            self._pending.setdefault(key, (row, entry))
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

    def _insert(self, rows: list[list[Any]]) -> None:
        with self._db_lock:
            for start in range(0, len(rows), self._ROWS_PER_STATEMENT):
                chunk = rows[start:start + self._ROWS_PER_STATEMENT]
                placeholders = ",".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(chunk))
                self._cursor.execute(
                    f"INSERT INTO llm_cache ({self._INSERT_COLUMNS}) VALUES {placeholders} "
                    "ON CONFLICT (key) DO NOTHING", [value for row in chunk for value in row])

    def flush(self) -> int:
        """Store the pending rows now; returns how many were written."""
        with self._pending_lock:
            batch = list(self._pending.items())
        if not batch:
            return 0
        try:
            self._insert([row for _, (row, _) in batch])
        except Exception as exc:
            log.warning("could not store %d cached responses in DuckDB: %s", len(batch), redact(str(exc)))
            return 0
        with self._pending_lock:
            for key, _ in batch:
                self._pending.pop(key, None)
        return len(batch)

    def __len__(self) -> int:
        self.flush()
        with self._db_lock:
            return int(self._cursor.execute("SELECT count(*) FROM llm_cache").fetchall()[0][0])

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
            with self._db_lock:
                try:
                    self._cursor.close()
                except Exception:
                    pass
                finally:
                    if self._owned:
                        self._connection.close()


# -- concurrency primitives usable from threads and from asyncio ---------------------------------


class _Waiter:
    __slots__ = ("event", "loop", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self.loop = loop
        self.event = threading.Event() if loop is None else None
        self.future = loop.create_future() if loop is not None else None


class Limiter:
    """A FIFO counting semaphore shared by threads (`with limiter:`) and event loops (`async with`).

    One limit per model however the calls are made. `max_in_use` records the peak.
    """

    def __init__(self, limit: int):
        self._lock = threading.Lock()
        self._limit = max(1, int(limit))
        self._in_use = 0
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self.max_in_use = 0

    @property
    def limit(self) -> int:
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        with self._lock:
            self._limit = max(1, int(value))
            self._dispatch()

    @property
    def in_use(self) -> int:
        return self._in_use

    def _take(self) -> None:
        self._in_use += 1
        self.max_in_use = max(self.max_in_use, self._in_use)

    def _dispatch(self) -> None:
        """Hand free slots to waiters, oldest first (caller holds the lock)."""
        while self._waiters and self._in_use < self._limit:
            waiter = self._waiters.popleft()
            self._take()
            if waiter.loop is None:
                waiter.event.set()
                continue
            try:
                waiter.loop.call_soon_threadsafe(self._deliver, waiter.future)
            except RuntimeError:  # its loop is closed: nobody will use the slot
                self._in_use -= 1

    def _deliver(self, future: asyncio.Future) -> None:
        if future.cancelled():
            self.release()
        else:
            future.set_result(None)

    def acquire(self) -> None:
        with self._lock:
            if self._in_use < self._limit and not self._waiters:
                self._take()
                return
            waiter = _Waiter()
            self._waiters.append(waiter)
        waiter.event.wait()

    async def acquire_async(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._in_use < self._limit and not self._waiters:
                self._take()
                return
            waiter = _Waiter(loop)
            self._waiters.append(waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                    raise
            if waiter.future.done() and not waiter.future.cancelled():
                self.release()  # granted just before the cancellation: give it back
            raise  # else `_deliver` sees the cancelled future and releases

    def release(self) -> None:
        with self._lock:
            self._in_use -= 1
            self._dispatch()

    def __enter__(self) -> Limiter:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def __aenter__(self) -> Limiter:
        await self.acquire_async()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class _Flight:
    """One model call in progress; identical requests wait for it instead of calling again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._async: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        self.result: Completion | None = None
        self.error: BaseException | None = None

    def finish(self, result: Completion | None = None, error: BaseException | None = None) -> None:
        with self._lock:
            self.result, self.error = result, error
            self._done.set()
            waiting, self._async = self._async, []
        for loop, future in waiting:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:
                pass

    def wait(self) -> None:
        self._done.wait()

    async def wait_async(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._done.is_set():
                return
            future = loop.create_future()
            self._async.append((loop, future))
        await future


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


# -- LiteLLM -------------------------------------------------------------------------------------

_litellm_lock = threading.Lock()
_litellm: Any = None


def load_litellm() -> Any:
    """Import LiteLLM once (slow: seconds), quiet it, and register the offline `workbench/` provider."""
    global _litellm
    if _litellm is not None:
        return _litellm
    with _litellm_lock:
        if _litellm is None:
            import litellm

            import workbench._offline  # noqa: F401 - offline price map and tokenizers

            litellm.suppress_debug_info = True
            if hasattr(litellm, "telemetry"):
                litellm.telemetry = False
            try:
                from workbench import extractive

                extractive.register(litellm)
            except (ImportError, AttributeError) as exc:
                log.debug("offline provider workbench/extractive not registered: %s", exc)
            except Exception as exc:
                log.warning("offline provider workbench/extractive could not be registered: %s", exc)
            _litellm = litellm
    return _litellm


_JSON_ERROR = re.compile(r"Expecting value|Expecting property name|Unterminated string|Extra data|"
                         r"Invalid control character|JSONDecodeError|Empty or invalid response")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < 12 and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _headers(exc: BaseException) -> dict[str, str]:
    """Response headers of a LiteLLM exception (1.106: `litellm_response_headers`; else `response.headers`)."""
    found: dict[str, str] = {}
    for source in (getattr(getattr(exc, "response", None), "headers", None),
                   getattr(exc, "headers", None),
                   getattr(exc, "litellm_response_headers", None)):
        if source:
            try:
                found.update({str(k).lower(): str(v) for k, v in dict(source).items()})
            except Exception:
                pass
    return found


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The wait asked by `retry-after-ms` or `retry-after` (seconds or an HTTP date), if any."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def classify(exc: BaseException, *, model: str, attempts: int, secrets: Sequence[str] = ()) -> LLMError:
    """Map an exception raised by a LiteLLM call to the gateway's error types (retryable or not)."""
    if isinstance(exc, LLMError):
        return exc
    name = type(exc).__name__
    message = redact(str(exc) or name, secrets)
    status = getattr(exc, "status_code", None)
    try:
        status = int(status) if status is not None else None
    except (TypeError, ValueError):
        status = None
    common = {"model": model, "attempts": attempts, "provider_error": name}
    chain = _chain(exc)
    if any(isinstance(e, json.JSONDecodeError) for e in chain) or _JSON_ERROR.search(message):
        return BadResponse(f"{model}: malformed response body: {message}", **common, status_code=status)
    if any(type(e).__name__ in ("Timeout", "APITimeoutError", "TimeoutException", "ReadTimeout",
                                "ConnectTimeout", "TimeoutError") for e in chain[:1]) \
            or isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or status == 408:
        return Timeout(f"{model}: timed out: {message}", **common, status_code=status)
    if name == "RateLimitError" or status == 429:
        wait = retry_after_seconds(_headers(exc))
        return RateLimited(f"{model}: rate limited (HTTP 429): {message}", **common, status_code=429, retry_after=wait)
    if name in ("APIConnectionError", "ConnectError", "RemoteProtocolError", "ReadError", "ConnectionError",
                "ServerDisconnectedError", "ClientConnectionError", "ConnectionResetError", "ConnectionRefusedError"):
        return ProviderError(f"{model}: connection failed: {message}", **common, status_code=status, retryable=True)
    if status is not None and (status >= 500 or status in (409, 425)):
        return ProviderError(f"{model}: provider error (HTTP {status}): {message}", **common, status_code=status,
                             retryable=True)
    if name in ("InternalServerError", "ServiceUnavailableError", "BadGatewayError", "APIError"):
        return ProviderError(f"{model}: provider error: {message}", **common, status_code=status, retryable=True)
    if status is not None:
        return ProviderError(f"{model}: request rejected (HTTP {status}): {message}", **common, status_code=status,
                             retryable=False)
    return ProviderError(f"{model}: call failed ({name}): {message}", **common, retryable=False)


# -- gateway -------------------------------------------------------------------------------------


@dataclass
class GatewayStats:
    """Counters since the gateway was made (read `Gateway.stats`; updated under a lock)."""

    requests: int = 0          # HTTP attempts (model calls actually made, retries included)
    calls: int = 0             # logical calls that reached the model (not answered by the cache)
    cache_hits: int = 0        # answered from the cache (or from an identical call in flight)
    retries: int = 0
    failures: int = 0          # calls that raised an LLMError
    cost_usd: float = 0.0      # money spent by this gateway (known prices only)
    unknown_cost_calls: int = 0


def _env_number(name: str, default: float, kind: type = float) -> Any:
    value = os.environ.get(name)
    if not value:
        return kind(default)
    try:
        return kind(value)
    except ValueError:
        log.warning("ignoring %s=%r: not a number", name, value)
        return kind(default)


class Gateway:
    """Every model call goes through here: cache, per-model concurrency, retries, usage and cost.

    cache: a `Cache` (`DuckDBCache`, `MemoryCache`), a database path, or None (a `MemoryCache`).
    concurrency: default in-flight calls per model; timeout: default seconds per attempt;
    num_retries: default retries after the first attempt; backoff_base/backoff_max: the
    exponential backoff (base * 2**n, with full jitter in [base*2**n/2, base*2**n]);
    max_retry_after: a 429 asking to wait longer than this fails at once with `RateLimited`;
    retry_bad_response: also retry malformed/empty answers (off: the same request usually gets
    the same answer); defaults: dict of options applied to every model.
    """

    def __init__(self, cache: Cache | str | os.PathLike[str] | None = None, *, concurrency: int | None = None,
                 timeout: float | None = None, num_retries: int | None = None, backoff_base: float = 1.0,
                 backoff_max: float = 60.0, max_retry_after: float = 120.0, retry_bad_response: bool = False,
                 defaults: Mapping[str, Any] | None = None, seed: int | None = None):
        if cache is None:
            cache = MemoryCache()
        elif isinstance(cache, (str, os.PathLike)):
            cache = DuckDBCache(cache)
        self.cache: Cache = cache
        self.concurrency = int(concurrency if concurrency is not None
                               else _env_number("WORKBENCH_LLM_CONCURRENCY", 8, int))
        self.timeout = float(timeout if timeout is not None else _env_number("WORKBENCH_LLM_TIMEOUT", 120.0))
        self.num_retries = int(num_retries if num_retries is not None
                               else _env_number("WORKBENCH_LLM_NUM_RETRIES", 4, int))
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.max_retry_after = float(max_retry_after)
        self.retry_bad_response = retry_bad_response
        self.defaults = dict(defaults or {})
        self.stats = GatewayStats()
        self.unknown_cost_models: set[str] = set()
        self._lock = threading.Lock()
        self._limiters: dict[str, Limiter] = {}
        self._flights: dict[str, _Flight] = {}
        self._random = random.Random(seed)

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> Gateway:
        """A gateway caching into the workbench database at `path` (default: `workbench.db.default_path()`)."""
        return cls(DuckDBCache(path), **kwargs)

    def model(self, model: str, options: Mapping[str, Any] | None = None, **more: Any) -> BoundModel:
        """`model` bound to its options (defaults < `options` < keyword options): a `Summarizer`."""
        merged = {**self.defaults, **(options or {}), **more}
        return BoundModel(self, model, merged)

    def limiter(self, model: str, concurrency: int | None = None, api_base: str | None = None) -> Limiter:
        """The limiter of `model` at `api_base`, shared by every BoundModel of that pair, sync or async
        (the latest explicit `concurrency` wins)."""
        name = f"{model}@{(api_base or '').rstrip('/')}"
        with self._lock:
            limiter = self._limiters.get(name)
            if limiter is None:
                limiter = self._limiters[name] = Limiter(concurrency or self.concurrency)
            elif concurrency is not None and limiter.limit != int(concurrency):
                limiter.limit = int(concurrency)
            return limiter

    def close(self) -> None:
        close = getattr(self.cache, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals shared by BoundModel --

    def _count(self, **deltas: float) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self.stats, name, getattr(self.stats, name) + delta)

    def _delay(self, attempt: int, error: LLMError) -> float:
        ceiling = min(self.backoff_max, self.backoff_base * (2 ** (attempt - 1)))
        with self._lock:
            jitter = self._random.uniform(ceiling / 2, ceiling)
            small = self._random.uniform(0, min(1.0, self.backoff_base) * 0.1)
        if error.retry_after is not None:
            return error.retry_after + small  # never earlier than asked
        return jitter

    def _flight(self, key: str) -> tuple[_Flight, bool]:
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                return flight, False
            flight = self._flights[key] = _Flight()
            return flight, True

    def _land(self, key: str, flight: _Flight) -> None:
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]

    def _unknown_cost(self, model: str) -> None:
        with self._lock:
            first = model not in self.unknown_cost_models
            self.unknown_cost_models.add(model)
            self.stats.unknown_cost_calls += 1
        if first:
            log.warning("cost unknown for model %r: it is not in LiteLLM's price map; cost_usd is None "
                        "(set input_cost_per_token/output_cost_per_token in its options to price it)", model)


_default_lock = threading.Lock()
_default: Gateway | None = None


def default_gateway() -> Gateway:
    """The process-wide gateway used when none is given (e.g. by replays): in-memory cache until
    `set_default_gateway` installs another (the CLI and app install one on their DuckDB file)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Gateway(MemoryCache())
        return _default


def set_default_gateway(gateway: Gateway | None) -> Gateway | None:
    """Install `gateway` as the process-wide default (None: back to a fresh in-memory one on next use);
    returns the previous one (not closed)."""
    global _default
    with _default_lock:
        previous, _default = _default, gateway
        return previous


@dataclass
class _Request:
    key: str
    material: dict[str, Any]
    kwargs: dict[str, Any]
    use_cache: bool
    attempts: int
    timeout: float


class BoundModel:
    """A model with its options, handed out by `Gateway.model`; satisfies `workbench.compaction.Summarizer`."""

    def __init__(self, gateway: Gateway, model: str, options: Mapping[str, Any]):
        if not model or not isinstance(model, str):
            raise ValueError("model must be a non-empty string such as 'openai/gpt-4o-mini'")
        self.gateway = gateway
        self.model = model
        self.options = dict(options)
        reserved = sorted(RESERVED_OPTIONS & set(self.options))
        if reserved:
            from workbench.errors import ConfigError

            raise ConfigError(f"model {model!r}: option(s) {', '.join(reserved)} cannot be set "
                              f"(the gateway sets the model and messages, and does not stream)")
        params, transport, own = split_options(self.options)
        if "api_key_env" in own and "api_key" not in transport:
            variable = str(own["api_key_env"])
            value = os.environ.get(variable)
            if value is None:
                from workbench.errors import ConfigError

                raise ConfigError(f"model {model!r}: environment variable {variable} (api_key_env) is not set")
            transport["api_key"] = value
        self._params = params
        self._transport = transport
        self._secrets = _secret_values(transport)
        self.repeat = int(own.get("repeat", 0) or 0)
        retries = own.get("num_retries", own.get("max_retries"))
        self.num_retries = int(gateway.num_retries if retries is None else retries)
        self.timeout = float(transport.get("timeout") or gateway.timeout)
        self.use_cache = bool(own.get("cache", True))
        self.concurrency = int(own["concurrency"]) if own.get("concurrency") else None
        self.limiter = gateway.limiter(model, self.concurrency,
                                       transport.get("api_base") or transport.get("base_url"))
        self.input_cost_per_token = own.get("input_cost_per_token")
        self.output_cost_per_token = own.get("output_cost_per_token")

    def __repr__(self) -> str:
        shown = {k: ("***" if is_secret_option(k) else v) for k, v in self.options.items()}
        return f"BoundModel({self.model!r}, {shown!r})"

    def with_options(self, **changes: Any) -> BoundModel:
        return BoundModel(self.gateway, self.model, {**self.options, **changes})

    # -- request building --

    def _request(self, messages: Sequence[Any], max_tokens: int | None, repeat: int | None) -> _Request:
        plain = _plain_messages(messages)
        params = dict(self._params)
        if max_tokens is not None:
            params["max_tokens"] = int(max_tokens)
        repeat = self.repeat if repeat is None else int(repeat)
        material = key_material(self.model, plain, params, repeat)
        key = hashlib.sha256(_canonical(material).encode()).hexdigest()
        kwargs = {**params, **self._transport, "model": self.model, "messages": plain,
                  "timeout": self.timeout, "num_retries": 0, "max_retries": 0}
        return _Request(key, material, kwargs, self.use_cache, self.num_retries + 1, self.timeout)

    def cache_key(self, messages: Sequence[Any], *, max_tokens: int | None = None, repeat: int | None = None) -> str:
        return self._request(messages, max_tokens, repeat).key

    def _hit(self, entry: CacheEntry) -> Completion:
        return Completion(text=entry.text, model=self.model, input_tokens=entry.input_tokens,
                          output_tokens=entry.output_tokens, cost_usd=entry.cost_usd, cache_hit=True,
                          finish_reason=entry.finish_reason, duration_s=entry.duration_s, attempts=0)

    # -- response handling --

    def _parse(self, response: Any, messages: list[dict[str, Any]], duration: float, attempts: int) -> Completion:
        choices = getattr(response, "choices", None)
        if not choices:
            raise BadResponse(f"{self.model}: the response has no choices", model=self.model, attempts=attempts)
        choice = choices[0]
        message = getattr(choice, "message", None)
        content = getattr(message, "content", None) if message is not None else None
        finish_reason = getattr(choice, "finish_reason", None)
        if content is None:
            what = "tool calls instead of text" if getattr(message, "tool_calls", None) else "content: null"
            raise BadResponse(f"{self.model}: the response has {what} (finish_reason={finish_reason!r})",
                              model=self.model, attempts=attempts)
        if not isinstance(content, str):  # a list of content parts
            content = "".join(part.get("text", "") if isinstance(part, Mapping) else str(part) for part in content)
        usage = getattr(response, "usage", None)
        input_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        output_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        estimated = not input_tokens and not output_tokens
        if estimated:
            from workbench.tokens import count_tokens

            input_tokens = count_tokens(messages, "heuristic")
            output_tokens = count_tokens(content, "heuristic")
        cost = self._cost(response, input_tokens, output_tokens, estimated)
        return Completion(text=content, model=self.model, input_tokens=input_tokens, output_tokens=output_tokens,
                          cost_usd=cost, cache_hit=False, finish_reason=finish_reason, duration_s=duration,
                          attempts=attempts)

    def _cost(self, response: Any, input_tokens: int, output_tokens: int, estimated: bool) -> float | None:
        if self.model.startswith(OFFLINE_PREFIX):
            return 0.0
        if self.input_cost_per_token is not None or self.output_cost_per_token is not None:
            return (input_tokens * float(self.input_cost_per_token or 0.0)
                    + output_tokens * float(self.output_cost_per_token or 0.0))
        litellm = load_litellm()
        try:
            if estimated:
                prompt_cost, completion_cost = litellm.cost_per_token(
                    model=self.model, prompt_tokens=input_tokens, completion_tokens=output_tokens)
                cost = float(prompt_cost) + float(completion_cost)
            else:
                cost = float(litellm.completion_cost(completion_response=response, model=self.model))
        except Exception:
            cost = None
        if cost is None:
            self.gateway._unknown_cost(self.model)
        return cost

    def _store(self, request: _Request, completion: Completion) -> None:
        cost = completion.cost_usd or 0.0
        self.gateway._count(calls=1, cost_usd=cost)
        if not request.use_cache:
            return
        entry = CacheEntry(text=completion.text, input_tokens=completion.input_tokens,
                           output_tokens=completion.output_tokens, cost_usd=completion.cost_usd,
                           finish_reason=completion.finish_reason, duration_s=completion.duration_s)
        try:
            self.gateway.cache.put(request.key, self.model, request.material, entry)
        except Exception as exc:
            log.warning("could not store a response of %s in the cache: %s", self.model, redact(str(exc)))

    def _give_up(self, error: LLMError, attempt: int) -> bool:
        retryable = error.retryable or (isinstance(error, BadResponse) and self.gateway.retry_bad_response)
        if isinstance(error, RateLimited) and error.retry_after is not None \
                and error.retry_after > self.gateway.max_retry_after:
            return True
        return not retryable or attempt >= self._max_attempts

    def _failed(self, error: LLMError, attempt: int) -> LLMError:
        error.attempts = attempt
        error.model = self.model
        self.gateway._count(failures=1)
        text = error.args[0] if error.args else str(error)
        if attempt > 1 and "attempt" not in text:
            error.args = (f"{text} (after {attempt} attempts)",)
        return error

    # -- the synchronous path (replay engine, worker threads) --

    def complete(self, messages: Sequence[Any], *, purpose: str = "summary", max_tokens: int | None = None,
                 repeat: int | None = None) -> Completion:
        """Answer `messages` (from the cache when possible); raises an `LLMError` when it fails for good.

        `purpose` ("summary", "probe", "judge", ...) is for logs only: it is not sent, nor part of
        the cache key. `repeat` overrides the bound `repeat` option (the sample number).
        """
        return self._complete(self._request(messages, max_tokens, repeat), looked_up=False)

    def _lookup(self, request: _Request) -> Completion | None:
        if not request.use_cache:
            return None
        entry = self.gateway.cache.get(request.key)
        if entry is None:
            return None
        self.gateway._count(cache_hits=1)
        return self._hit(entry)

    def _complete(self, request: _Request, *, looked_up: bool) -> Completion:
        if not looked_up:
            hit = self._lookup(request)
            if hit is not None:
                return hit
        flight: _Flight | None = None
        if request.use_cache:
            while True:
                flight, leader = self.gateway._flight(request.key)
                if leader:
                    break
                flight.wait()
                shared = self._shared(flight)
                if shared is not None:
                    return shared
        try:
            completion = self._call_sync(request)
        except BaseException as exc:
            self._finish(request, flight, error=exc)
            raise
        self._store(request, completion)
        self._finish(request, flight, result=completion)
        return completion

    def _finish(self, request: _Request, flight: _Flight | None, *, result: Completion | None = None,
                error: BaseException | None = None) -> None:
        if flight is not None:
            self.gateway._land(request.key, flight)
            flight.finish(result=result, error=error)

    def _shared(self, flight: _Flight) -> Completion | None:
        """The result of an identical call that was in flight (a hit), its error (raised), or None (retry)."""
        if flight.result is not None:
            self.gateway._count(cache_hits=1)
            return replace(flight.result, cache_hit=True, attempts=0)
        if isinstance(flight.error, LLMError):
            raise copy.copy(flight.error)
        return None  # the leader was cancelled or crashed: make the call ourselves

    @property
    def _max_attempts(self) -> int:
        return self.num_retries + 1

    def _call_sync(self, request: _Request) -> Completion:
        litellm = load_litellm()
        attempt = 0
        while True:
            attempt += 1
            try:
                with self.limiter:
                    self.gateway._count(requests=1)
                    started = time.perf_counter()
                    response = litellm.completion(**request.kwargs)
                    duration = time.perf_counter() - started
                return self._parse(response, request.kwargs["messages"], duration, attempt)
            except Exception as exc:
                error = classify(exc, model=self.model, attempts=attempt, secrets=self._secrets)
            if self._give_up(error, attempt):
                raise self._failed(error, attempt) from None
            self.gateway._count(retries=1)
            delay = self.gateway._delay(attempt, error)
            log.info("%s: %s; retry %d in %.2fs", self.model, type(error).__name__, attempt, delay)
            time.sleep(delay)

    # -- the asynchronous path --

    async def acomplete(self, messages: Sequence[Any], *, purpose: str = "summary", max_tokens: int | None = None,
                        repeat: int | None = None) -> Completion:
        """`complete` for asyncio (`litellm.acompletion`); the same cache, limits and retries."""
        return await self._acomplete(self._request(messages, max_tokens, repeat), looked_up=False)

    async def _acomplete(self, request: _Request, *, looked_up: bool) -> Completion:
        if not looked_up:
            hit = self._lookup(request)
            if hit is not None:
                return hit
        flight: _Flight | None = None
        if request.use_cache:
            while True:
                flight, leader = self.gateway._flight(request.key)
                if leader:
                    break
                await flight.wait_async()
                shared = self._shared(flight)
                if shared is not None:
                    return shared
        try:
            completion = await self._call_async(request)
        except BaseException as exc:
            self._finish(request, flight, error=exc)
            raise
        self._store(request, completion)
        self._finish(request, flight, result=completion)
        return completion

    async def _call_async(self, request: _Request) -> Completion:
        litellm = load_litellm()
        attempt = 0
        guard = request.timeout * 1.5 + 5.0  # in case the transport ignores the timeout
        while True:
            attempt += 1
            try:
                async with self.limiter:
                    self.gateway._count(requests=1)
                    started = time.perf_counter()
                    response = await asyncio.wait_for(litellm.acompletion(**request.kwargs), guard)
                    duration = time.perf_counter() - started
                return self._parse(response, request.kwargs["messages"], duration, attempt)
            except Exception as exc:
                error = classify(exc, model=self.model, attempts=attempt, secrets=self._secrets)
            if self._give_up(error, attempt):
                raise self._failed(error, attempt) from None
            self.gateway._count(retries=1)
            delay = self.gateway._delay(attempt, error)
            log.info("%s: %s; retry %d in %.2fs", self.model, type(error).__name__, attempt, delay)
            await asyncio.sleep(delay)

    # -- batches (results in input order, whatever the scheduling) --

    def _prefetch(self, batch: Sequence[Sequence[Any]], max_tokens: int | None,
                  repeat: int | None) -> tuple[list[_Request], list[Completion | None]]:
        """Build the requests and answer the cached ones with one cache query."""
        requests = [self._request(messages, max_tokens, repeat) for messages in batch]
        hits: list[Completion | None] = [None] * len(requests)
        keys = [r.key for r in requests if r.use_cache]
        if keys:
            found = self.gateway.cache.get_many(keys)
            for index, request in enumerate(requests):
                entry = found.get(request.key) if request.use_cache else None
                if entry is not None:
                    hits[index] = self._hit(entry)
            count = sum(hit is not None for hit in hits)
            if count:
                self.gateway._count(cache_hits=count)
        return requests, hits

    async def acomplete_many(self, batch: Sequence[Sequence[Any]], *, purpose: str = "summary",
                             max_tokens: int | None = None, repeat: int | None = None,
                             return_exceptions: bool = False) -> list[Any]:
        """Answer every message list concurrently (bounded by the model's limiter); results in input order.

        The cache is asked once for the whole batch; only the misses reach the model.
        """
        requests, hits = self._prefetch(batch, max_tokens, repeat)

        async def answer(index: int) -> Completion:
            hit = hits[index]
            return hit if hit is not None else await self._acomplete(requests[index], looked_up=True)

        return list(await asyncio.gather(*(answer(i) for i in range(len(requests))),
                                         return_exceptions=return_exceptions))

    def complete_many(self, batch: Sequence[Sequence[Any]], *, purpose: str = "summary",
                      max_tokens: int | None = None, repeat: int | None = None,
                      max_workers: int | None = None) -> list[Completion]:
        """The synchronous path from a pool of threads; results in input order (the first error is raised)."""
        requests, hits = self._prefetch(batch, max_tokens, repeat)
        misses = [i for i, hit in enumerate(hits) if hit is None]
        if misses:
            from concurrent.futures import ThreadPoolExecutor

            workers = max_workers or max(1, min(len(misses), self.limiter.limit))
            with ThreadPoolExecutor(workers, thread_name_prefix="llm") as pool:
                answers = pool.map(lambda i: self._complete(requests[i], looked_up=True), misses)
                for index, completion in zip(misses, answers, strict=False):
                    hits[index] = completion
        return [hit for hit in hits if hit is not None]
