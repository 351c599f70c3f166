"""What an import did: per file (`FileOutcome`) and in all (`ImportReport`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.importers.outcomes import OutcomeMatch


@dataclass
class FileOutcome:
    """What importing one file did."""

    path: str
    sessions: int = 0
    messages: int = 0
    duplicates: int = 0
    bytes: int = 0
    error: str | None = None
    skipped: str | None = None  # why a file met in a folder walk was not imported (not an error)
    warnings: list[str] = field(default_factory=list)  # e.g. a live session's incomplete last line

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class ImportReport:
    """Counts of an import: sessions/messages/calls written, duplicates skipped, per-file errors."""

    sessions: int = 0
    messages: int = 0
    calls: int = 0
    duplicates: int = 0
    repeated: int = 0  # of the duplicates: sessions met more than once in this import
    stored_in: dict[str, int] = field(default_factory=dict)  # of the duplicates: already stored, per dataset
    dataset: str | None = None  # the dataset asked for (None: each session's own)
    session_ids: list[str] = field(default_factory=list)
    files: list[FileOutcome] = field(default_factory=list)
    ignored: list[FileOutcome] = field(default_factory=list)  # walked past without reading (with why)
    #: earlier imports of recordings that have grown since (old id -> the new id that replaced it)
    replaced: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    outcomes: OutcomeMatch | None = None  # what `outcomes=` attached (import_paths)

    @property
    def errors(self) -> list[FileOutcome]:
        """The files that failed (each with its `error` message)."""
        return [f for f in self.files if f.error is not None]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def skipped_files(self) -> list[FileOutcome]:
        """Files and folders met in folder walks and not imported, each with why (not errors):
        the ones the walk ignored (skipped folders, config files, other file types), then the
        ones read that match no session format."""
        return [*self.ignored, *(f for f in self.files if f.skipped is not None)]

    @property
    def warnings(self) -> list[str]:
        return [w for f in self.files for w in f.warnings]

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for --json)."""
        return {
            "sessions": self.sessions,
            "messages": self.messages,
            "calls": self.calls,
            "duplicates": self.duplicates,
            "repeated": self.repeated,
            "already_stored": dict(self.stored_in),
            "files": len(self.files),
            "failed_files": len(self.errors),
            "skipped_files": len(self.skipped_files),
            "skipped": [{"path": f.path, "reason": f.skipped} for f in self.skipped_files],
            "warnings": self.warnings,
            "errors": [{"path": f.path, "error": f.error} for f in self.errors],
            "session_ids": list(self.session_ids),
            "replaced": [{"old": old, "new": new} for old, new in self.replaced.items()],
            "seconds": round(self.seconds, 3),
            "file_outcomes": [asdict(f) for f in self.files],
            **({"outcomes": self.outcomes.to_dict()} if self.outcomes is not None else {}),
        }

    def duplicates_text(self) -> str:
        """What was skipped as a duplicate, and why: a session met twice in this import, or one
        already stored (a session is stored once, in the dataset it was first imported into)."""
        text = f"skipped {self.duplicates} duplicate session{'s' * (self.duplicates != 1)}"
        reasons = []
        if self.repeated:
            reasons.append(f"{self.repeated} met more than once in this import")
        if self.stored_in:
            stored = sum(self.stored_in.values())
            if len(self.stored_in) == 1:
                where = f" in dataset {next(iter(self.stored_in))!r}"
            else:
                where = " (" + ", ".join(f"{n} in {name!r}" for name, n in sorted(self.stored_in.items())) + ")"
            elsewhere = self.dataset is not None and set(self.stored_in) != {self.dataset}
            reasons.append(
                f"{stored} already stored{where}"
                + (
                    ", not added to " + repr(self.dataset) + " (a session is stored once, in the dataset it was "
                    "first imported into)"
                    if elsewhere
                    else ""
                )
            )
        return f"{text}: {'; '.join(reasons)}" if reasons else text

    def replaced_text(self) -> str:
        """Which imported sessions replaced an earlier import of the same recording that has grown since."""
        count = len(self.replaced)
        pairs = ", ".join(f"{old[:8]} -> {new[:8]}" for old, new in list(self.replaced.items())[:3])
        text = (
            f"{count} of them replaced {'an earlier import' if count == 1 else 'earlier imports'} of the same "
            f"recording{'s' * (count != 1)}, which grew since ({pairs}{', ...' if count > 3 else ''})"
        )
        if self.dataset is not None:
            text += "; each stays in its dataset (a session is stored once, in the dataset it was first imported into)"
        return text

    def summary(self) -> str:
        """One line: what was imported and skipped."""
        text = (
            f"imported {self.sessions} session{'s' * (self.sessions != 1)} "
            f"({self.messages} messages, {self.calls} calls)"
        )
        if self.replaced:
            text += f"; {self.replaced_text()}"
        if self.duplicates:
            text += f"; {self.duplicates_text()}"
        if self.files:
            text += f"; {len(self.files)} file{'s' * (len(self.files) != 1)} read"
        if self.errors:
            text += f", {len(self.errors)} failed"
        if self.skipped_files:
            text += f", {len(self.skipped_files)} skipped (not session files)"
        return text
