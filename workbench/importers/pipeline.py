"""Reading files and folders into a sink of sessions: the walk, format detection and per-file outcomes
of an import. Where the sessions go (the store's batch writer) is the sink's business."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable
from typing import Protocol

from workbench.errors import FormatError
from workbench.importers.report import FileOutcome
from workbench.session import Session


class SessionSink(Protocol):
    """What an import hands its sessions to, file by file (the store's batch writer)."""

    def begin_file(self, outcome: FileOutcome) -> None: ...

    def add(self, session: Session, source: str | None = None) -> None: ...

    def end_file(self) -> None:
        """The file was read whole: its sessions stand."""

    def fail_file(self, error: str) -> None:
        """The file failed: none of its sessions may stand (those already written are removed)."""


def read_paths(
    paths: Iterable[str],
    sink: SessionSink,
    format: str = "auto",
    dataset: str | None = None,
    progress: Callable[[FileOutcome], None] | None = None,
) -> list[FileOutcome]:
    """Stream every session of the files and folders `paths` (walked recursively) into `sink`, file by
    file; returns each file's outcome. A file that fails to read is failed in the sink (it contributes
    nothing) and the walk goes on. A file met in a folder walk whose format is unknown is skipped, not
    an error. `progress` is called with each file's outcome when the file is done. Incomplete last
    lines (a live session being written) are the file's warnings; other warnings pass through."""
    from workbench import importers

    outcomes = []
    for path, root in importers.candidate_files(list(paths)):
        outcome = FileOutcome(path=path)
        try:
            outcome.bytes = os.path.getsize(path)
        except OSError:
            pass
        sink.begin_file(outcome)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", importers.IncompleteLastLine)
                source = importers.display_path(path, root)
                for session in importers.iter_sessions(path, format, dataset, source=source):
                    sink.add(session)
            outcome.warnings = [str(w.message) for w in caught if issubclass(w.category, importers.IncompleteLastLine)]
            for other in caught:
                if not issubclass(other.category, importers.IncompleteLastLine):
                    warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
        except FormatError as exc:
            sink.fail_file(str(exc))
            if root is not None and isinstance(exc, importers.UnknownFormatError):
                outcome.error, outcome.skipped = None, str(exc)
        else:
            sink.end_file()
        outcomes.append(outcome)
        if progress is not None:
            progress(outcome)
    return outcomes
