"""Big files of an import read in worker processes.

Reading a file is Python work that holds the GIL (parsing the JSON, building the messages, their
content ids, counting their tokens): one importing process keeps one core busy while DuckDB, which
writes a batch in a fraction of that time, leaves the others idle. A JSONL file of one session per
line (`importers.line_ranges`, the openai layout) of at least `Store.split_bytes` is therefore cut at
line ends into ranges of about `Store.piece_bytes`; worker processes read each range into a `Batch`
(columns and token counts: plain values, cheap to send back), and the importing process merges them,
in the file's order, into the writer. The sessions, their ids, rows, counts, duplicates, warnings and
errors are those of reading the file whole (tests compare the two databases). A file of a source an
earlier import stored is read whole: its sessions are compared, one by one, with the stored ones.

The workers are plain Python processes (`serve`, fed pickled requests on their standard input),
started on first need and kept for the process's later imports: the first split file of a process
waits for them to import the workbench (about 0.4 s), later ones find them ready. They run no code of
the importing program (unlike `multiprocessing`, which runs the main script again in each worker when
it was not started with `-m`). `import_workers` processes, by default one per core the process may use
(`$WORKBENCH_IMPORT_WORKERS` sets another number; 1 reads every file in the importing process).
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import subprocess
import sys
import threading
import warnings
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from workbench import importers
from workbench.collector import fewer_collections
from workbench.errors import ConfigError, FormatError, StoreError
from workbench.importers import IncompleteLastLine, LineRange
from workbench.store.batch import Batch, filing
from workbench.tokens import usable_cpus

#: Files from this size up are read in parts when their format allows it (`Store.split_bytes`).
SPLIT_BYTES = 32_000_000
#: About how much of a file one worker reads at a time (`Store.piece_bytes`).
PIECE_BYTES = 8_000_000
WORKERS_VARIABLE = "WORKBENCH_IMPORT_WORKERS"
#: Worker processes kept waiting between imports (one import's worth on most machines).
MAX_IDLE = 8


def default_workers() -> int:
    """`$WORKBENCH_IMPORT_WORKERS`, else the cores this process may run on (at most 8)."""
    given = os.environ.get(WORKERS_VARIABLE, "").strip()
    if given:
        try:
            workers = int(given)
        except ValueError:
            raise ConfigError(f"${WORKERS_VARIABLE} must be a whole number of processes, not {given!r}") from None
        if workers < 1:
            raise ConfigError(f"${WORKERS_VARIABLE} must be at least 1, not {workers}")
        return workers
    return max(1, min(usable_cpus(), 8))


@dataclass(frozen=True)
class Piece:
    """What a worker read of one range: the batch of its sessions (in line order, repeats kept: the
    importing process drops them, as it knows the sessions of the other ranges) and the warnings it
    raised, to be raised again in the importing process (`IncompleteLastLine` by its line)."""

    batch: Batch
    incomplete_line: int | None
    other_warnings: tuple[tuple[type[Warning], str], ...]


def read_piece(
    path: str, format: str, lines: LineRange, dataset: str | None, source: str, filed_dataset: str | None
) -> Piece:
    """In a worker: the sessions of `lines` as a batch, filed as `Writer.add` files them."""
    batch = Batch()
    with warnings.catch_warnings(record=True) as caught, fewer_collections():
        warnings.simplefilter("always")
        for session in importers.iter_range_sessions(path, format, lines, dataset, source=source):
            batch.add(session, *filing(session, filed_dataset, None))
        batch.settle()
    incomplete = next((w.message.line for w in caught if isinstance(w.message, IncompleteLastLine)), None)
    others = tuple((w.category, str(w.message)) for w in caught if not isinstance(w.message, IncompleteLastLine))
    return Piece(batch, incomplete, others)


def read_pieces(
    path: str,
    format: str,
    ranges: Iterator[LineRange],
    dataset: str | None,
    source: str,
    filed_dataset: str | None,
    workers: int,
) -> Iterator[Piece]:
    """The pieces of a split file in its order, read by `workers` processes, each given at most two
    ranges ahead of the piece yielded (memory stays bounded). A range's FormatError is raised when its
    turn comes, after the pieces before it, as a whole reading raises it after their sessions."""
    crew = _checkout(workers)
    pending: deque[_Worker] = deque()
    try:
        for number, lines in enumerate(ranges):
            worker = crew[number % len(crew)]
            worker.send((path, format, lines, dataset, source, filed_dataset))
            pending.append(worker)
            if len(pending) >= 2 * len(crew):
                yield _result(path, pending.popleft())
        while pending:
            yield _result(path, pending.popleft())
    finally:
        if pending:  # stopped early: their replies would answer the next import's requests
            _dismiss(set(pending))
        _checkin(crew)


def _result(path: str, worker: _Worker) -> Piece:
    outcome, value = worker.receive(path)
    if outcome == "error":
        raise value
    piece: Piece = value
    if piece.incomplete_line is not None:
        warnings.warn(IncompleteLastLine(path, piece.incomplete_line), stacklevel=2)
    for category, message in piece.other_warnings:
        warnings.warn(message, category, stacklevel=2)
    return piece


def can_start_workers() -> bool:
    """Whether this interpreter can start its workers (not a frozen program without `python -c`)."""
    return bool(sys.executable) and not getattr(sys, "frozen", False)


class _Worker:
    """One worker process and its pipes: requests go in order, replies come back in that order."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the workbench this process imported
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from {__name__} import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )

    def send(self, request: tuple[Any, ...]) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            pickle.dump(request, stdin, protocol=pickle.HIGHEST_PROTOCOL)
            stdin.flush()
        except OSError as exc:
            _dismiss({self})
            raise StoreError(f"a worker process stopped before reading {request[0]} ({exc})") from None

    def receive(self, path: str) -> tuple[str, Any]:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            reply: tuple[str, Any] = pickle.load(stdout)
        except (EOFError, pickle.UnpicklingError, OSError) as exc:
            _dismiss({self})
            raise StoreError(
                f"the worker process reading {path} stopped (exit code {self.process.poll()}): {exc or 'no reply'}"
            ) from None
        return reply

    def stop(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:  # a dead worker's pipe
                    pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def alive(self) -> bool:
        return self.process.poll() is None


_lock = threading.Lock()
_idle: list[_Worker] = []  # started, waiting for the next split file
_busy: set[_Worker] = set()  # reading a file for one import (imports on other threads get their own)


def _checkout(workers: int) -> list[_Worker]:
    """`workers` worker processes for one file, the idle ones first, others started."""
    with _lock:
        _idle[:] = [w for w in _idle if w.alive()]
        crew = _idle[:workers]
        del _idle[:workers]
        crew += [_Worker() for _ in range(workers - len(crew))]
        _busy.update(crew)
        return crew


def _checkin(crew: list[_Worker]) -> None:
    """The file is read: its workers wait for the next one (at most `MAX_IDLE` wait; others stop)."""
    with _lock:
        _busy.difference_update(crew)
        _idle.extend(w for w in crew if w.alive() and w not in _idle)
        spare, _idle[:] = _idle[MAX_IDLE:], _idle[:MAX_IDLE]
    for worker in spare:
        worker.stop()


def worker_pids() -> list[int]:
    """The process ids of the worker processes running now (idle or reading)."""
    with _lock:
        return [w.process.pid for w in [*_idle, *_busy] if w.alive()]


def _dismiss(gone: set[_Worker]) -> None:
    """Stop workers whose pipes hold replies no one will read (or that died)."""
    with _lock:
        _idle[:] = [w for w in _idle if w not in gone]
        _busy.difference_update(gone)
    for worker in gone:
        worker.process.kill()
        worker.stop()


@atexit.register
def _stop_all() -> None:
    with _lock:
        crew = [*_idle, *_busy]
        _idle.clear()
        _busy.clear()
    for worker in crew:
        worker.stop()


def serve(requests: IO[bytes] | None = None, replies: IO[bytes] | None = None) -> None:
    """A worker's loop: read each pickled request (the arguments of `read_piece`) and write back
    ("piece", Piece) or ("error", the exception), until the importing process closes the pipe."""
    requests = requests or sys.stdin.buffer
    replies = replies or sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the replies
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the importing process's to handle
    while True:
        try:
            request = pickle.load(requests)
        except EOFError:
            return
        try:
            reply: tuple[str, Any] = ("piece", read_piece(*request))
        except FormatError as exc:
            reply = ("error", exc)
        except Exception as exc:  # a bug, not the file: the importing process raises it as a StoreError
            reply = ("error", StoreError(f"reading {request[0]} failed in a worker process: {exc!r}"))
        pickle.dump(reply, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()
