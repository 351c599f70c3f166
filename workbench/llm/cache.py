"""Where model answers are kept: cache keys, the `Cache` protocol and `MemoryCache` (the database's
cache, `DuckDBCache`, is in `workbench.store`).

A key hashes (model, endpoint, messages, parameters, repeat): never secrets, other transport
options (timeout, headers) or the gateway's own options, so the same request made with another
key or timeout is a hit, and one made against another endpoint (`api_base`, which may serve
another model under the same name) is not. Only answers a caller can use are stored
(`CacheEntry.usable`: not empty, not a refusal); the first stored under a key wins, except over
an unusable entry an older version stored, which a lookup ignores and a new answer replaces.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from workbench.compaction import unusable_answer
from workbench.llm.options import GATEWAY_OPTIONS, TRANSPORT_OPTIONS, endpoint, is_secret_option

__all__ = [
    "KEY_VERSION",
    "Cache",
    "CacheEntry",
    "MemoryCache",
    "cache_key",
    "canonical_json",
    "key_material",
    "request_json",
]

log = logging.getLogger("workbench.llm")

KEY_VERSION = 1


def key_material(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    repeat: int = 0,
    api_base: str | None = None,
) -> dict[str, Any]:
    """What the cache key hashes (and what `llm_cache.request` stores): no secrets, no transport
    but the endpoint (`options.endpoint(api_base)`, credentials stripped; absent without one, so
    the keys of a provider's default endpoint are those of earlier versions)."""
    clean = {
        k: v
        for k, v in params.items()
        if v is not None and not is_secret_option(k) and k not in TRANSPORT_OPTIONS and k not in GATEWAY_OPTIONS
    }
    material = {"v": KEY_VERSION, "model": model, "messages": list(messages), "params": clean, "repeat": int(repeat)}
    where = endpoint(api_base)
    if where is not None:
        material["endpoint"] = where
    return material


def canonical_json(material: Mapping[str, Any]) -> str:
    """The JSON a key hashes and the cache stores: sorted keys, no spaces."""
    return json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def request_json(request: Mapping[str, Any] | str) -> str:
    """The canonical JSON of a request given as its key material or, when the caller already made
    it to hash the key, as that JSON itself (a summarizer request can be tens of kilobytes)."""
    return request if isinstance(request, str) else canonical_json(request)


def cache_key(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    repeat: int = 0,
    api_base: str | None = None,
) -> str:
    """The sha256 of the canonical JSON of `key_material(...)`."""
    return hashlib.sha256(canonical_json(key_material(model, messages, params, repeat, api_base)).encode()).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """A stored successful response."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    finish_reason: str | None = "stop"
    duration_s: float = 0.0

    @property
    def usable(self) -> bool:
        """False for an answer every caller rejects (`workbench.compaction.unusable_answer`: empty,
        or a refusal): never stored, and ignored when an older version stored it."""
        return unusable_answer(self.text, self.finish_reason) is None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> CacheEntry:
        """The entry an `llm_cache` row holds, its `ENTRY_COLUMNS` in order (NULL counts read as 0)."""
        text, input_tokens, output_tokens, cost, finish, duration = row
        return cls(
            text=text,
            input_tokens=int(input_tokens or 0),
            output_tokens=int(output_tokens or 0),
            cost_usd=None if cost is None else float(cost),
            finish_reason=finish,
            duration_s=float(duration or 0.0),
        )


#: The `llm_cache` columns a `CacheEntry` is read from, in `CacheEntry.from_row` order.
ENTRY_COLUMNS = ("response_text", "input_tokens", "output_tokens", "cost_usd", "finish_reason", "duration_s")


class AnswerTable:
    """Answers read from `llm_cache` in one go (an Arrow table of `key` and the `ENTRY_COLUMNS`), looked
    up by key; an entry is built only when asked for."""

    def __init__(self, table: Any):
        self.table = table
        self._rows = {key: row for row, key in enumerate(table.column("key").to_pylist())}

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def get(self, key: str) -> CacheEntry | None:
        row = self._rows.get(key)
        if row is None:
            return None
        values = self.table.slice(row, 1).to_pylist()[0]
        return CacheEntry.from_row([values[column] for column in ENTRY_COLUMNS])


@runtime_checkable
class Cache(Protocol):
    def get(self, key: str) -> CacheEntry | None: ...

    def get_many(self, keys: Sequence[str]) -> dict[str, CacheEntry]: ...

    def put(
        self, key: str, model: str, request: Mapping[str, Any] | str, entry: CacheEntry, *, replace: bool = False
    ) -> None:
        """Store `entry` under `key` unless the key is there; `request` is what the key hashes, as
        key material or its canonical JSON (`request_json`). `replace=True` stores it whatever the
        key holds: the gateway passes it when its caller refused the stored answer."""


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

    def put(
        self, key: str, model: str, request: Mapping[str, Any] | str, entry: CacheEntry, *, replace: bool = False
    ) -> None:
        with self._lock:
            if replace or replaces(self._entries.get(key), entry):
                self._entries[key] = entry
                self.requests[key] = json.loads(request_json(request))

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def close(self) -> None:
        pass


def replaces(stored: CacheEntry | None, entry: CacheEntry) -> bool:
    """Whether `entry` goes in over `stored`: the first answer wins, but an unusable one gives way."""
    return stored is None or (not stored.usable and entry.usable)
