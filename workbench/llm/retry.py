"""When a failed model call is tried again, and after how long.

Retried: 429 (never sooner than its `Retry-After`), 5xx, timeouts, and a dropped connection;
an unusable answer only when asked (`retry_bad_response`). Never retried: authentication
failures, refused connections, unknown hosts and other 4xx, which another attempt cannot fix.
The backoff is exponential with jitter: attempt n waits in [base*2**(n-1)/2, base*2**(n-1)],
capped at `backoff_max`. A 429 asking to wait longer than `max_retry_after` fails at once.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Protocol

__all__ = ["Failure", "RetryPolicy", "retry_after_seconds"]


class Failure(Protocol):
    """What the policy reads from a failure (an `LLMError`)."""

    retryable: bool  # another attempt may succeed
    malformed: bool  # an unusable answer: retried only under `retry_bad_response`
    retry_after: float | None  # the wait the provider asked for


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


class RetryPolicy:
    """The gateway's retry decisions (one per gateway; thread-safe). `seed` makes the jitter reproducible."""

    def __init__(
        self,
        *,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        max_retry_after: float = 120.0,
        retry_bad_response: bool = False,
        seed: int | None = None,
    ):
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.max_retry_after = float(max_retry_after)
        self.retry_bad_response = bool(retry_bad_response)
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def gives_up(self, error: Failure, attempt: int, max_attempts: int) -> bool:
        """True when `error`, met at attempt number `attempt` (from 1), is final."""
        if error.retry_after is not None and error.retry_after > self.max_retry_after:
            return True
        retryable = error.retryable or (error.malformed and self.retry_bad_response)
        return not retryable or attempt >= max_attempts

    def delay(self, attempt: int, error: Failure) -> float:
        """Seconds to wait before attempt `attempt + 1`: the provider's `Retry-After` (plus a little), else backoff."""
        ceiling = min(self.backoff_max, self.backoff_base * (2 ** (attempt - 1)))
        with self._lock:
            jitter = self._random.uniform(ceiling / 2, ceiling)
            small = self._random.uniform(0, min(1.0, self.backoff_base) * 0.1)
        if error.retry_after is not None:
            return error.retry_after + small  # never earlier than asked
        return jitter
