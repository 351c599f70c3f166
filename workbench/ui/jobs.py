"""Background work for the pages: one worker thread per launch, its progress readable from any rerun.

A page starts a `Job` (e.g. `run_experiment` or `regress`) and keeps it in `st.session_state`; the
worker reports progress into the job under a lock, and the page (a fragment refreshed every second)
reads a consistent snapshot. No streamlit call happens in the worker.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench.ui.common import readable_error

#: What a job's work receives: the callback to report progress with (any object; copied on report).
Report = Callable[[Any], None]


@dataclass(frozen=True)
class JobState:
    """A snapshot of a job: the last progress reported, and once finished, its result or error."""

    label: str
    progress: Any
    done: bool
    result: Any
    error: str | None


class Job:
    """One unit of background work running in its own daemon thread."""

    def __init__(self, label: str, work: Callable[[Report], Any]) -> None:
        self.label = label
        self._lock = threading.Lock()
        self._progress: Any = None
        self._done = False
        self._result: Any = None
        self._error: str | None = None
        self.announced = False  # set by the page once it has refreshed for the finished job
        self._thread = threading.Thread(target=self._run, args=(work,), name=f"workbench-job:{label}", daemon=True)
        self._thread.start()

    def _report(self, progress: Any) -> None:
        snapshot = copy.copy(progress)
        with self._lock:
            self._progress = snapshot

    def _run(self, work: Callable[[Report], Any]) -> None:
        try:
            result = work(self._report)
        except BaseException as exc:  # any failure becomes the job's readable error
            with self._lock:
                self._error, self._done = readable_error(exc), True
            return
        with self._lock:
            self._result, self._done = result, True

    def state(self) -> JobState:
        with self._lock:
            return JobState(self.label, self._progress, self._done, self._result, self._error)

    @property
    def done(self) -> bool:
        with self._lock:
            return self._done

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends (for tests and scripts); True when it has."""
        self._thread.join(timeout)
        return self.done
