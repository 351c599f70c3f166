"""The gateway: one per process or per database, holding what model calls share.

It owns the cache, one concurrency `Limiter` per model and endpoint (shared by threads and event
loops), the identical calls in flight (`Flight`: the first caller makes the call, the others
wait for its result), the `RetryPolicy`, the counters (`GatewayStats`) and the HTTP connection
pool lent to LiteLLM (`workbench.llm.transport`). `Gateway.model(...)`
hands out a `BoundModel` (see `workbench.llm.binding`), which knows the gateway only through the
`GatewayAPI` protocol (the public methods below).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from workbench.compaction import Completion
from workbench.errors import ConfigError
from workbench.llm.binding import BoundModel
from workbench.llm.cache import Cache, MemoryCache
from workbench.llm.concurrency import Flight, Limiter
from workbench.llm.retry import RetryPolicy

__all__ = ["Gateway", "GatewayStats", "default_gateway", "set_default_gateway"]

log = logging.getLogger("workbench.llm")

#: Threads at most sending asyncio callers' requests, all models together (each model's limiter bounds
#: its own calls in flight; a thread is started only when no idle one is left).
SENDER_THREADS = 256


@dataclass
class GatewayStats:
    """Counters since the gateway was made (read `Gateway.stats`; updated under a lock)."""

    requests: int = 0  # HTTP attempts (model calls actually made, retries included)
    calls: int = 0  # logical calls that reached the model (not answered by the cache)
    cache_hits: int = 0  # answered from the cache (or from an identical call in flight)
    retries: int = 0
    failures: int = 0  # calls that raised an LLMError
    cost_usd: float = 0.0  # money spent by this gateway (known prices only)
    unknown_cost_calls: int = 0


# -- gateway -------------------------------------------------------------------------------------


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

    cache: a `Cache` (`workbench.store.DuckDBCache` for the database's, `MemoryCache`), or None (a `MemoryCache`).
    concurrency: default in-flight calls per model; timeout: default seconds per attempt;
    num_retries: default retries after the first attempt; backoff_base/backoff_max: the
    exponential backoff (base * 2**n, with full jitter in [base*2**n/2, base*2**n]);
    max_retry_after: a 429 asking to wait longer than this fails at once with `RateLimited`;
    retry_bad_response: also retry malformed/empty answers (off: the same request usually gets
    the same answer); defaults: dict of options applied to every model.
    """

    def __init__(
        self,
        cache: Cache | None = None,
        *,
        concurrency: int | None = None,
        timeout: float | None = None,
        num_retries: int | None = None,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        max_retry_after: float = 120.0,
        retry_bad_response: bool = False,
        defaults: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ):
        if isinstance(cache, (str, os.PathLike)):
            raise ConfigError(
                f"Gateway(cache=...) takes a Cache, not a path: for the database's model cache pass "
                f"workbench.store.DuckDBCache({os.fspath(cache)!r})"
            )
        self.cache: Cache = MemoryCache() if cache is None else cache
        self.concurrency = int(
            concurrency if concurrency is not None else _env_number("WORKBENCH_LLM_CONCURRENCY", 8, int)
        )
        self.timeout = float(timeout if timeout is not None else _env_number("WORKBENCH_LLM_TIMEOUT", 120.0))
        self.num_retries = int(
            num_retries if num_retries is not None else _env_number("WORKBENCH_LLM_NUM_RETRIES", 4, int)
        )
        self.retry = RetryPolicy(
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            max_retry_after=max_retry_after,
            retry_bad_response=retry_bad_response,
            seed=seed,
        )
        self.defaults = dict(defaults or {})
        self.stats = GatewayStats()
        self.unknown_cost_models: set[str] = set()
        self._lock = threading.Lock()
        self._limiters: dict[str, Limiter] = {}
        self._flights: dict[str, Flight] = {}
        self._http_clients: dict[int, Any] = {}
        self._http_local = threading.local()  # the index of the calling thread's pool
        self._threads_seen = 0
        self._senders: ThreadPoolExecutor | None = None

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
        with self._lock:
            clients, self._http_clients = self._http_clients, {}
            senders, self._senders = self._senders, None
        if senders is not None:
            senders.shutdown(wait=False, cancel_futures=True)
        for client in clients.values():
            client.client.close()  # the handler was lent the httpx client, so its own close() leaves it open
        close = getattr(self.cache, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what a BoundModel uses --

    def count(self, **deltas: float) -> None:
        """Add to the `stats` counters (`requests=1`, `cost_usd=0.002`, ...)."""
        with self._lock:
            for name, delta in deltas.items():
                setattr(self.stats, name, getattr(self.stats, name) + delta)

    def join_flight(self, key: str) -> tuple[Flight, bool]:
        """(the flight of `key`, True when the caller leads it and must `land` it; False: wait for it)."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                return flight, False
            flight = self._flights[key] = Flight()
            return flight, True

    def land(
        self, key: str, flight: Flight, *, result: Completion | None = None, error: BaseException | None = None
    ) -> None:
        """End the led `flight` of `key`, handing its result (or error) to the callers waiting for it."""
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
        flight.finish(result=result, error=error)

    def note_unknown_cost(self, model: str) -> None:
        """Record a call of `model` whose price is unknown (warned once per model)."""
        with self._lock:
            first = model not in self.unknown_cost_models
            self.unknown_cost_models.add(model)
            self.stats.unknown_cost_calls += 1
        if first:
            log.warning(
                "cost unknown for model %r: it is not in LiteLLM's price map; cost_usd is None "
                "(set input_cost_per_token/output_cost_per_token in its options to price it)",
                model,
            )

    def senders(self) -> ThreadPoolExecutor:
        """The threads that send asyncio callers' requests (`BoundModel.acomplete`): made at first use,
        a thread started only when none is idle, closed with the gateway."""
        with self._lock:
            if self._senders is None:
                self._senders = ThreadPoolExecutor(SENDER_THREADS, thread_name_prefix="llm-send")
            return self._senders

    def http_client(self) -> Any:
        """The calling thread's connection pool lent to LiteLLM for synchronous calls
        (`workbench.llm.transport`): one of `POOLS`, handed to threads in turn at their first call,
        shared by every model of this gateway, made at first use and closed with the gateway."""
        from workbench.llm.transport import POOLS

        index = getattr(self._http_local, "index", None)
        with self._lock:
            if index is None:
                index = self._http_local.index = self._threads_seen % POOLS
                self._threads_seen += 1
            client = self._http_clients.get(index)
            if client is None:
                from workbench.llm.provider import load_litellm
                from workbench.llm.transport import pooled_handler

                client = self._http_clients[index] = pooled_handler(load_litellm())
            return client

    def warm_up(self) -> None:
        """Pay the one-time start-up now (importing LiteLLM, registering the offline provider)."""
        from workbench.llm.provider import load_litellm

        load_litellm()


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
