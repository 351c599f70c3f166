"""Concurrency primitives usable from threads and from asyncio alike.

`Limiter`: a FIFO counting semaphore bounding the calls in flight per model and endpoint,
however they are made. `Flight`: one model call in progress, which identical requests wait for
instead of calling again.
"""

from __future__ import annotations

import asyncio
import collections
import threading

from workbench.compaction import Completion

__all__ = ["Flight", "Limiter"]


class _ThreadWaiter:
    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = threading.Event()


class _LoopWaiter:
    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()


class Limiter:
    """A FIFO counting semaphore shared by threads (`with limiter:`) and event loops (`async with`).

    One limit per model however the calls are made. `max_in_use` records the peak.
    """

    def __init__(self, limit: int):
        self._lock = threading.Lock()
        self._limit = max(1, int(limit))
        self._in_use = 0
        self._waiters: collections.deque[_ThreadWaiter | _LoopWaiter] = collections.deque()
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
            if isinstance(waiter, _ThreadWaiter):
                waiter.event.set()
                continue
            try:
                waiter.loop.call_soon_threadsafe(self._deliver, waiter.future)
            except RuntimeError:  # its loop is closed: nobody will use the slot
                self._in_use -= 1

    def _deliver(self, future: asyncio.Future[None]) -> None:
        if future.cancelled():
            self.release()
        else:
            future.set_result(None)

    def acquire(self) -> None:
        with self._lock:
            if self._in_use < self._limit and not self._waiters:
                self._take()
                return
            waiter = _ThreadWaiter()
            self._waiters.append(waiter)
        waiter.event.wait()

    async def acquire_async(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._in_use < self._limit and not self._waiters:
                self._take()
                return
            waiter = _LoopWaiter(loop)
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


class Flight:
    """One model call in progress; identical requests wait for it instead of calling again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._async: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
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


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
