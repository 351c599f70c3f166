"""Reading files and folders into a sink of sessions: the walk, format detection and per-file outcomes
of an import. Where the sessions go (the store's batch writer) is the sink's business, and how a file
is read may be too (the store reads big files in worker processes, in pieces of sessions)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from workbench.errors import FormatError
from workbench.importers.report import FileOutcome
from workbench.session import Session

Item = TypeVar("Item", contravariant=True)


class SessionSink(Protocol[Item]):
    """What an import hands its sessions to, file by file (the store's batch writer): what `read`
    yields (sessions by default)."""

    def begin_file(self, outcome: FileOutcome) -> None: ...

    def add(self, item: Item, /) -> None: ...

    def end_file(self) -> None:
        """The file was read whole: its sessions stand."""

    def fail_file(self, error: str) -> None:
        """The file failed: none of its sessions may stand (those already written are removed)."""


def read_paths(
    paths: Iterable[str],
    sink: SessionSink[Item],
    format: str = "auto",
    dataset: str | None = None,
    progress: Callable[[FileOutcome], None] | None = None,
    read: Callable[[str, str, str | None, str], Iterable[Item]] | None = None,
) -> list[FileOutcome]:
    """Stream every session of the files and folders `paths` (walked recursively) into `sink`, file by
    file; returns each file's outcome. A file that fails to read is failed in the sink (it contributes
    nothing) and the walk goes on. A file met in a folder walk whose format is unknown is skipped, not
    an error. `progress` is called with each file's outcome when the file is done. Incomplete last
    lines (a live session being written) are the file's warnings; other warnings pass through.
    `read(path, format, dataset, source)` reads one file for the sink (default: `importers.iter_sessions`)."""
    from workbench import importers

    def sessions(path: str, format: str, dataset: str | None, source: str) -> Iterable[Session]:
        return importers.iter_sessions(path, format, dataset, source=source)

    reader: Callable[[str, str, str | None, str], Iterable[Any]] = read if read is not None else sessions

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
                for item in reader(path, format, dataset, source):
                    sink.add(item)
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
