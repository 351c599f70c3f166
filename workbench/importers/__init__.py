"""Import recorded agent sessions from the formats agents write.

Public API:
- `FORMATS`: the format names, i.e. the registry's `importer` kinds: the built-in ones
  (registered below with `register_importer`, like a plugin's) and any plugin's. Built-in:
  (`openai`, `anthropic`, `claude-code`, `codex`, `swe-agent`,
  `mini-swe-agent`, `openhands`, `aider`, `inspect-ai` (Inspect AI eval logs, `.json` or `.eval`),
  `workbench` — the workbench's own session exports,
  plain or gzip'd JSONL, e.g. the bundled samples);
- `detect(path)`: the format of one file (FormatError naming the file when unknown);
- `load(path, format="auto", dataset=None)`: every session of a file or a folder (walked
  recursively); raises FormatError on the first bad file;
- `iter_load(paths, format="auto", dataset=None)`: one `FileResult` per candidate file, so
  good files yield their sessions even when others fail;
- `iter_sessions(path, format="auto", dataset=None, *, source=None)`: the sessions of one
  file, streamed line by line for JSONL layouts (openai, anthropic, openhands eval output);
- `line_ranges(path, format, piece_bytes)` and `iter_range_sessions(...)`: a big JSONL file of
  one session per line (openai) cut into ranges of lines, each read alone to the sessions
  `iter_sessions` gives there (an import reads them in worker processes);
- `candidates(path)`: the (file, walk root) pairs a folder walk visits;
- `candidate_files(paths)`: those pairs for several paths, each real file once, and
  `ignored_files(paths)`: what the walk passes over, with the reason;
- `format_name(format, path)`: the canonical name of a format or one of its aliases;
- `IncompleteLastLine`: the warning for a JSONL file whose last line is cut off mid-write;
- `UnknownFormatError`: the FormatError subclass for a file that matches no format.

Every session gets `format`, `dataset` (the given one, else the format name) and metadata
`source` (the file's path relative to the folder walked, or its name), plus what the format
records (model, usage totals, recorded compactions...). Every message role is one of
system/user/assistant/tool and every tool call is paired with exactly one result (see
`_common` for the stray-result and missing-result rules).

Folder walks consider only `*.json`, `*.jsonl`, `*.jsonl.gz`, `*.ndjson`, `*.traj` (incl.
`*.traj.json`), `*.eval` and `.aider.chat.history.md` files, skip VCS/virtualenv/cache folders and
well-known config files, visit each real file once, and import a session (by content id) only once
per call. A walked file that matches no format is reported by `iter_load` with an `UnknownFormatError` and skipped
by `load`; a file that matches a format but does not parse fails `load`.
Claude Code `subagents/agent-acompact-*.jsonl` files (the compaction model calls) are imported
as their own sessions tagged `claude_code_kind = "compaction_call"`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..errors import ConfigError, FormatError
from ..registry import Family, register_importer
from ..session import Session
from . import (
    aider,
    anthropic,
    claude_code,
    codex,
    inspect_ai,
    mini_swe_agent,
    openai,
    openhands,
    swe_agent,
    workbench_export,
)
from ._common import IncompleteLastLine, LineRange, display_path, read_head, split_lines

__all__ = [
    "BUILTIN_FORMATS",
    "FORMATS",
    "FileResult",
    "IMPORTERS",
    "Importer",
    "IncompleteLastLine",
    "LineRange",
    "LineSplitting",
    "UnknownFormatError",
    "candidate_files",
    "candidates",
    "detect",
    "format_name",
    "formats",
    "ignored_files",
    "iter_load",
    "iter_range_sessions",
    "iter_sessions",
    "line_ranges",
    "load",
]

BUILTIN_FORMATS: tuple[str, ...] = (
    "openai",
    "anthropic",
    "claude-code",
    "codex",
    "swe-agent",
    "mini-swe-agent",
    "openhands",
    "aider",
    "inspect-ai",
    "workbench",
)

_MODULES: dict[str, ModuleType] = {
    "openai": openai,
    "anthropic": anthropic,
    "claude-code": claude_code,
    "codex": codex,
    "swe-agent": swe_agent,
    "mini-swe-agent": mini_swe_agent,
    "openhands": openhands,
    "aider": aider,
    "inspect-ai": inspect_ai,
    "workbench": workbench_export,
}
# Most specific first: openai accepts almost any message list, so it comes last.
_DETECT_ORDER: tuple[str, ...] = (
    "aider",
    "inspect-ai",
    "workbench",
    "claude-code",
    "codex",
    "openhands",
    "mini-swe-agent",
    "swe-agent",
    "anthropic",
    "openai",
)
_ALIASES = {
    "openai-chat": "openai",
    "chat": "openai",
    "claude": "claude-code",
    "claude_code": "claude-code",
    "swe_agent": "swe-agent",
    "sweagent": "swe-agent",
    "mini_swe_agent": "mini-swe-agent",
    "mini-swe": "mini-swe-agent",
    "open-hands": "openhands",
    "codex-cli": "codex",
    "inspect": "inspect-ai",
    "inspect_ai": "inspect-ai",
}
_SESSION_SUFFIXES = (".json", ".jsonl", ".ndjson", ".traj", ".jsonl.gz", ".eval")
_AIDER_NAME = ".aider.chat.history.md"
_SKIP_DIRS = {
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".ipynb_checkpoints",
}
_SKIP_FILES = {
    "package.json",
    "package-lock.json",
    "tsconfig.json",
    "composer.json",
    "composer.lock",
    "manifest.json",
    "settings.json",
    "settings.local.json",
    ".eslintrc.json",
    "bun.lock",
    "pyrightconfig.json",
    "renovate.json",
    "vercel.json",
    "app.json",
    "deno.json",
}


class UnknownFormatError(FormatError):
    """The file matches none of the known session formats."""


@dataclass(frozen=True)
class FileResult:
    """The outcome of importing one file: its sessions, or the error that stopped it.

    A file with an error contributes no sessions (import is all-or-nothing per file).
    """

    path: str
    sessions: tuple[Session, ...]
    error: FormatError | None


class Importer(Protocol):
    """A recorded-session format as `register_importer` declares it (it sets the class attributes)."""

    kind: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]]
    priority: ClassVar[int]

    def detect(self, path: str, head: bytes) -> bool: ...

    def iter_sessions(self, path: str) -> Iterable[Session]: ...


@runtime_checkable
class LineSplitting(Protocol):
    """What an importer adds when each line of some of its JSONL files is a session read alone: a
    big such file is then read in parts, in worker processes (`line_ranges`)."""

    def splits(self, path: str) -> bool:
        """Whether this file is such a file (every line a session)."""
        ...

    def iter_line_range(self, path: str, lines: LineRange) -> Iterable[Session]:
        """The sessions of the lines `lines` of such a file, as its whole reading gives them."""
        ...


#: The importer kinds, typed: `IMPORTERS.lookup(name)` is a `type[Importer]`.
IMPORTERS: Family[Importer] = Family("importer")


class _FormatModule:
    """An importer kind backed by one of this package's format modules (`detect`, `iter_sessions` or `load`)."""

    module: ClassVar[ModuleType]

    def detect(self, path: str, head: bytes) -> bool:
        return bool(self.module.detect(path, head))

    def iter_sessions(self, path: str) -> Iterable[Session]:
        reader: Callable[[str], Iterable[Session]] = getattr(self.module, "iter_sessions", self.module.load)
        return reader(path)


# The catch-all chat formats are sniffed after every other one (a plugin's format included).
_GENERIC = ("anthropic", "openai")


def _register_builtin(name: str) -> None:
    module = _MODULES[name]
    doc = (module.__doc__ or name).strip().splitlines()[0]
    priority = -1 - _GENERIC.index(name) if name in _GENERIC else len(_DETECT_ORDER) - _DETECT_ORDER.index(name)
    namespace: dict[str, Any] = {"module": module, "__doc__": doc, "__module__": __name__}
    if hasattr(module, "splits"):  # see `LineSplitting`
        namespace.update(splits=staticmethod(module.splits), iter_line_range=staticmethod(module.iter_line_range))
    cls = type(f"{module.__name__.rsplit('.', 1)[-1]}_format", (_FormatModule,), namespace)
    register_importer(name, aliases=[a for a, target in _ALIASES.items() if target == name], priority=priority)(cls)


for _name in BUILTIN_FORMATS:
    _register_builtin(_name)


def formats() -> tuple[str, ...]:
    """Every importer's format name: the built-in ones, then the plugins'."""
    return tuple(IMPORTERS.kinds())


def __getattr__(name: str) -> Any:
    if name == "FORMATS":  # computed: plugins add formats
        return formats()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _sniff_order() -> list[tuple[str, type[Importer]]]:
    found = IMPORTERS.kinds()
    ranked = sorted(enumerate(found.items()), key=lambda item: (-item[1][1].priority, item[0]))
    return [pair for _index, pair in ranked]


def detect(path: str | os.PathLike[str]) -> str:
    """The format name of one file, from its name and first bytes."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FormatError(
            path,
            "no such file" if not os.path.exists(path) else "not a regular file",
            expected="a recorded-session file",
        )
    head = read_head(path)
    if not head.strip():
        raise FormatError(path, "the file is empty", expected="a recorded session")
    for name, importer in _sniff_order():
        try:
            if importer().detect(path, head):
                return name
        except Exception:  # a sniffer must never decide by crashing
            continue
    raise UnknownFormatError(
        path, "the content matches no known session format", expected="one of: " + ", ".join(formats())
    )


def load(path: str | os.PathLike[str], format: str = "auto", dataset: str | None = None) -> list[Session]:
    """Every session in a file, or in the files of a folder (walked recursively).

    Raises FormatError for a missing path, an empty folder, and the first file that cannot be
    read (walked files matching no format are skipped).
    """
    root = os.fspath(path)
    if not os.path.exists(root):
        raise FormatError(root, "no such file or folder", expected="a session file or a folder of them")
    sessions: list[Session] = []
    seen_files = False
    for result in iter_load([root], format=format, dataset=dataset):
        if result.error is not None:
            if isinstance(result.error, UnknownFormatError) and os.path.isdir(root):
                continue
            raise result.error
        seen_files = True
        sessions.extend(result.sessions)
    if not seen_files and os.path.isdir(root):
        raise FormatError(
            root,
            "no session file found in the folder",
            expected="*.json, *.jsonl, *.traj or .aider.chat.history.md files",
        )
    return sessions


def iter_load(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], format: str = "auto", dataset: str | None = None
) -> Iterator[FileResult]:
    """One FileResult per candidate file under `paths` (files or folders), in a stable order.

    Each real file is read once; a session whose content id was already yielded in this call
    is not yielded again.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    fmt = format_name(format, "")
    seen_files: set[str] = set()
    seen_ids: set[str] = set()
    for given in paths:
        given = os.fspath(given)
        for file_path, root in candidates(given):
            real = os.path.realpath(file_path)
            if real in seen_files:
                continue
            seen_files.add(real)
            yield _load_file(file_path, root, fmt, dataset, seen_ids)


def iter_sessions(
    path: str | os.PathLike[str], format: str = "auto", dataset: str | None = None, *, source: str | None = None
) -> Iterator[Session]:
    """The sessions of one file, streamed (JSONL layouts are read line by line).

    Only FormatError escapes: an unexpected failure of a reader is reported as a FormatError
    naming the file and the format.
    """
    path = os.fspath(path)
    name = format_name(format, path)
    if name == "auto":
        name = detect(path)
    reader: Callable[[str], Iterable[Session]] = IMPORTERS.lookup(name)().iter_sessions
    yield from _stamped(_guarded(path, name, reader), name, dataset, source or os.path.basename(path))


def _stamped(sessions: Iterable[Session], name: str, dataset: str | None, label: str) -> Iterator[Session]:
    """The sessions with their format, dataset and metadata `source` as an import files them."""
    for session in sessions:
        own_dataset = session.dataset if name == "workbench" else None  # exports keep their datasets
        yield replace(
            session, format=name, dataset=dataset or own_dataset or name, metadata={**session.metadata, "source": label}
        )


def line_ranges(path: str | os.PathLike[str], format: str, piece_bytes: int) -> tuple[str, Iterator[LineRange]] | None:
    """(format, ranges) when the file is JSONL with one session per line and its importer reads a
    range of lines alone (`splits` and `iter_line_range`, as the openai importer has): the file cut at
    line ends into ranges of about `piece_bytes`, which `iter_range_sessions` reads apart (in worker
    processes) to the same sessions `iter_sessions` gives. None: read the file whole."""
    path = os.fspath(path)
    try:
        name = format_name(format, path)
        if name == "auto":
            name = detect(path)
    except FormatError:  # the whole-file reading reports it
        return None
    importer = IMPORTERS.lookup(name)()
    if not isinstance(importer, LineSplitting) or not importer.splits(path):
        return None
    return name, split_lines(path, piece_bytes)


def iter_range_sessions(
    path: str | os.PathLike[str],
    format: str,
    lines: LineRange,
    dataset: str | None = None,
    *,
    source: str | None = None,
) -> Iterator[Session]:
    """The sessions of one range `line_ranges` gave, as `iter_sessions(path, format, dataset, source=source)`
    gives them there (only FormatError escapes)."""
    path = os.fspath(path)
    importer = IMPORTERS.lookup(format)()
    if not isinstance(importer, LineSplitting):
        raise ConfigError(f"the {format} importer does not read ranges of lines")

    def reader(file: str) -> Iterable[Session]:
        return importer.iter_line_range(file, lines)

    yield from _stamped(_guarded(path, format, reader), format, dataset, source or os.path.basename(path))


def _guarded(path: str, name: str, reader: Callable[[str], Iterable[Session]]) -> Iterator[Session]:
    """Run a reader so that only FormatError escapes (the importer contract for any bytes)."""
    try:
        yield from reader(path)
    except FormatError:
        raise
    except RecursionError:
        raise FormatError(
            path, f"the {name} data is nested too deeply to read", expected=f"a well-formed {name} file"
        ) from None
    except MemoryError:
        raise
    except Exception as exc:  # the contract: bad input only ever raises FormatError
        raise FormatError(
            path, f"cannot read as {name}: {type(exc).__name__}: {exc}", expected=f"a well-formed {name} file"
        ) from exc


def _load_file(path: str, root: str | None, fmt: str, dataset: str | None, seen_ids: set[str]) -> FileResult:
    """Import one file completely (or not at all), skipping sessions already seen."""
    sessions: list[Session] = []
    ids: set[str] = set()
    try:
        for session in iter_sessions(path, fmt, dataset, source=display_path(path, root)):
            if session.id in seen_ids or session.id in ids:
                continue
            ids.add(session.id)
            sessions.append(session)
        seen_ids.update(ids)
    except FormatError as error:
        return FileResult(path=path, sessions=(), error=error)
    return FileResult(path=path, sessions=tuple(sessions), error=None)


def format_name(format: str, path: str) -> str:
    """The canonical format name for `format` (aliases such as `openai-chat` accepted)."""
    if not isinstance(format, str):
        raise FormatError(
            path or "<format>",
            f"format must be a name, not {type(format).__name__}",
            expected="auto or one of: " + ", ".join(formats()),
        )
    if format.strip().lower() == "auto":
        return "auto"
    for candidate in (format.strip(), format.strip().lower()):
        try:
            return IMPORTERS.lookup(candidate).kind
        except ConfigError:
            continue
    raise FormatError(
        path or "<format>", f"unknown format {format!r}", expected="auto or one of: " + ", ".join(formats())
    )


def candidates(given: str | os.PathLike[str]) -> Iterator[tuple[str, str | None]]:
    """(file, walk root) pairs in a stable order: `(given, None)` for a file (or a missing
    path), else every session-like file under the folder with the folder as root (the folder
    walk rules of this module). Real files are not de-duplicated here; `iter_load` does it."""
    given = os.fspath(given)
    if not os.path.isdir(given):
        yield given, None
        return
    for folder, dirs, files in os.walk(given):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(files):
            if _is_candidate(name):
                yield os.path.join(folder, name), given


def _is_candidate(name: str) -> bool:
    if name == _AIDER_NAME or name.endswith(_AIDER_NAME):
        return True
    if name in _SKIP_FILES:
        return False
    return name.lower().endswith(_SESSION_SUFFIXES)


def candidate_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[tuple[str, str | None]]:
    """(file, walk root) for every candidate file under `paths`, each real file once, in
    `candidates` order (a missing path is yielded as itself: the importer then reports it)."""
    seen: set[str] = set()
    for given in paths:
        for path, root in candidates(given):
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            yield path, root


_IGNORED_FOLDER = "folder skipped (version control, virtualenv or cache)"
_IGNORED_CONFIG = "a well-known configuration file, not a session"
_IGNORED_TYPE = "not a session file type (*.json, *.jsonl, *.traj, .aider.chat.history.md...)"


def ignored_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[tuple[str, str]]:
    """(path, why) for every folder and file a folder walk of `paths` passes over without reading:
    skipped folders (named once, not walked), well-known config files, other file types."""
    for given in paths:
        given = os.fspath(given)
        if not os.path.isdir(given):
            continue
        wanted = {path for path, _root in candidates(given)}
        for folder, dirs, files in os.walk(given):
            dirs.sort()
            for name in [d for d in dirs if d in _SKIP_DIRS]:
                yield os.path.join(folder, name), _IGNORED_FOLDER
            dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
            for name in sorted(files):
                path = os.path.join(folder, name)
                if path in wanted:
                    continue
                yield path, (_IGNORED_CONFIG if name in _SKIP_FILES else _IGNORED_TYPE)
