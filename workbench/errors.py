"""The workbench's exception types.

Each error says what went wrong in terms a user can act on: the file and line for bad input,
the offending name and the valid choices for a bad configuration.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def did_you_mean(given: Iterable[str], valid: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the given names that are near misses of valid ones (typos), else ``:
    the tail of an error that lists the valid names."""
    candidates = list(valid)
    guesses = [match for name in given for match in difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)]
    return f"; did you mean {' or '.join(map(repr, dict.fromkeys(guesses)))}?" if guesses else ""


def _first_names(names: list[str], shown: int = 8) -> str:
    """The first `shown` names, comma-separated, with `...` when there are more."""
    return ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")


def missing_file(what: str, path: Path) -> str:
    """`{what} {path} does not exist` and where to look instead: the files of the same type in its
    folder (a near miss first), or that the folder itself is missing from the current directory."""
    message = f"{what} {path} does not exist"
    folder = path.parent
    if folder.is_dir():
        siblings = sorted(p.name for p in folder.glob(f"*{path.suffix}") if p.is_file()) if path.suffix else []
        if siblings:
            where = "the current folder" if folder == Path() else folder
            message += f"{did_you_mean([path.name], siblings)} ({where} has {_first_names(siblings)})"
    else:
        message += f" (there is no folder {folder} in {Path.cwd()})"
    return message


def folder_given(what: str, path: Path) -> str:
    """`{what} {path} is a folder` and the files of the expected type in it, to name one instead."""
    inside = sorted(p.name for p in path.glob("*.toml") if p.is_file())
    listed = f"; name one of its files: {_first_names(inside)}" if inside else ""
    return f"{what} {path} is a folder, not a TOML file{listed}"


def unwritable(path: Path) -> str | None:
    """Why no file can be written at `path` (it is a folder, a part of its folder is a file, or its folder
    refuses a new file), or None when one can. Asked before long work whose result the file is to hold,
    so that the work is not lost to a traceback at the end; the folder is tried with a hidden probe
    file, removed at once."""
    if path.is_dir():
        return f"{path} is a folder, not a file"
    existing = next((folder for folder in path.parents if folder.exists()), Path())
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    probe = existing / f".{path.name}.probe"
    try:
        with probe.open("x"):
            pass
    except FileExistsError:
        return None
    except OSError as exc:
        return f"cannot create a file in {existing}: {exc.strerror or exc}"
    probe.unlink(missing_ok=True)
    return None


class WorkbenchError(Exception):
    """Base class of every error the workbench raises on purpose."""


class FormatError(WorkbenchError, ValueError):
    """A recorded-session file could not be read.

    The message names the file, the line or position when known, and what was expected.
    """

    def __init__(self, path: str, problem: str, *, line: int | None = None, expected: str | None = None):
        self.path = str(path)
        self.line = line
        self.problem = problem
        self.expected = expected
        where = f"{self.path}:{line}" if line is not None else self.path
        text = f"{where}: {problem}"
        if expected:
            text += f" (expected {expected})"
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled whole (an import's worker process reports the error to the importing one)."""
        return _rebuild_format_error, (type(self), self.path, self.problem, self.line, self.expected)


def _rebuild_format_error(
    cls: type[FormatError], path: str, problem: str, line: int | None, expected: str | None
) -> FormatError:
    return cls(path, problem, line=line, expected=expected)


class ConfigError(WorkbenchError, ValueError):
    """A trigger, strategy or replay configuration is invalid."""


class CompactionError(WorkbenchError):
    """A strategy could not compact the context (the replay's `on_failure` decides what follows)."""


class SummarizerError(CompactionError):
    """A summarizer model call failed (after the gateway's retries) or the breaker is open."""


class InvariantError(WorkbenchError):
    """A compaction broke a replay invariant (system prefix, tool pairing, pinned messages)."""


class StoreError(WorkbenchError):
    """The DuckDB store could not be opened or written (e.g. it is in use by another process)."""


class SessionFilterError(ConfigError, StoreError):
    """A `where` condition over the sessions that DuckDB cannot run (a usage error, like a bad config).

    The message quotes the condition, says why (DuckDB's reason, without the query the store built
    around it) and lists the columns a condition may use.
    """


class NoopCompactionsWarning(UserWarning):
    """A config's trigger fired but its strategy never changed a context (e.g. observation masking on
    sessions without observations): its rows equal no compaction at all, for a reason worth knowing.
    The message names the config, its strategy kind, how many sessions and the dataset."""


class NothingRecordedWarning(NoopCompactionsWarning):
    """A config replaying the agent's own compactions (`as-recorded`) ran on sessions that recorded
    none: there its rows repeat no-compaction. The message names the config, the dataset and how
    many of its sessions have nothing recorded (`workbench.strategies.recorded.nothing_recorded_note`)."""
