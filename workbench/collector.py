"""Python's cyclic garbage collector, paced for bulk work.

An import or a grid allocates millions of small objects (messages, their analysis, replay results) that
live until the work ends, and almost none of them in reference cycles: reference counting frees them.
At its default thresholds the collector still runs a young pass every 700 allocations and a full pass
over every tracked object each time the heap grows by a quarter. On the corpus grid that was a sixth of
the run's time (9.1 s against 7.4 s, 100 sessions, 3 configs, warm), on a 100 MB import a tenth, for a
few thousand objects collected.

`fewer_collections()` raises the thresholds (`BULK_THRESHOLDS`, never lowering one a user set higher)
while bulk work runs. Cycles are still collected, less often. The setting is the process's: uses that
overlap, nested or on other threads, share it, and the thresholds found before the first are put back
when the last ends. A collector the user turned off (threshold 0) stays off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BULK_THRESHOLDS", "bulk_thresholds", "fewer_collections"]

#: Allocations between young passes; young passes per middle pass; middle passes per full pass.
BULK_THRESHOLDS = (100_000, 50, 100)

_lock = threading.Lock()
_users = 0
_saved: tuple[int, int, int] | None = None


def bulk_thresholds(current: tuple[int, int, int]) -> tuple[int, int, int]:
    """The thresholds bulk work runs under, given the current ones: each at least `BULK_THRESHOLDS`',
    and the collector left off when it is (a first threshold of 0)."""
    if current[0] == 0:
        return current
    first, second, third = (max(now, bulk) for now, bulk in zip(current, BULK_THRESHOLDS, strict=True))
    return first, second, third


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the body with the collector paced for bulk work (see the module)."""
    global _users, _saved
    with _lock:
        if _users == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*bulk_thresholds(_saved))
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
