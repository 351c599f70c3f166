"""Per-instance outcomes of an agent run, attached to its sessions as metadata.

A benchmark run publishes beside its trajectories whether each instance was solved, e.g. the
`results_summary.csv` of a SWE-bench run:

    instance_id,resolved,patch_applied
    astropy__astropy-12907,True,True

`read_outcomes` reads such a file (a header naming `instance_id` and at least one of the outcome
columns; booleans written True/False, true/false, 1/0 or yes/no; an empty cell is unknown).
`match_outcomes` pairs the rows with sessions by the session metadata `instance_id` (which the
mini-swe-agent and SWE-agent importers set) and counts what matched nothing on either side. The
store writes the matched outcomes into each session's metadata under `outcome`, where the sessions
filter reads them as the columns `outcome_resolved` and `outcome_patch_applied` (nullable
booleans), so any result can be split by outcome (`where = "outcome_resolved"`).

A replay cannot change an outcome: it measures the context the same actions would have cost under
another policy. The outcome says which recordings were successful runs, to compare policies on each.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import FormatError

#: The session metadata key the outcome is stored under.
OUTCOME_KEY = "outcome"
#: The metadata key naming the benchmark instance a session ran.
INSTANCE_KEY = "instance_id"
#: The outcome columns read from the file (a file needs at least one).
OUTCOME_COLUMNS = ("resolved", "patch_applied")
_TRUE = frozenset({"true", "1", "yes", "y", "t"})
_FALSE = frozenset({"false", "0", "no", "n", "f"})
_BOOLEAN = "a boolean (True/False, true/false, 1/0, yes/no) or an empty cell"


@dataclass(frozen=True)
class Outcome:
    """What a run's evaluation said of one instance (None: not stated)."""

    instance_id: str
    resolved: bool | None = None
    patch_applied: bool | None = None

    def to_metadata(self, source: str | None = None) -> dict[str, Any]:
        """The value stored under the session metadata `outcome`."""
        value: dict[str, Any] = {"resolved": self.resolved, "patch_applied": self.patch_applied}
        if source:
            value["source"] = source
        return value


@dataclass(frozen=True)
class OutcomeTable:
    """The outcomes of one file, by instance id."""

    path: str
    outcomes: Mapping[str, Outcome]

    def __len__(self) -> int:
        return len(self.outcomes)


@dataclass(frozen=True)
class OutcomeMatch:
    """Outcomes paired with sessions: `attached` (session id -> outcome), the instances of the
    file that no session ran, and the sessions that have no row (no instance id, or one the file
    does not list)."""

    attached: Mapping[str, Outcome] = field(default_factory=dict)
    instances_without_session: tuple[str, ...] = ()
    sessions_without_outcome: tuple[str, ...] = ()
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain counts (for --json), with the unmatched instance ids."""
        resolved = sum(1 for o in self.attached.values() if o.resolved)
        return {
            "source": self.source,
            "attached": len(self.attached),
            "resolved": resolved,
            "instances_without_session": len(self.instances_without_session),
            "sessions_without_outcome": len(self.sessions_without_outcome),
            "unmatched_instances": list(self.instances_without_session),
        }

    def text(self) -> str:
        """One line: how many sessions got an outcome, and what matched nothing."""
        resolved = sum(1 for o in self.attached.values() if o.resolved)
        text = (
            f"outcomes from {self.source or 'the table'}: attached to {len(self.attached)} session"
            f"{'s' * (len(self.attached) != 1)} ({resolved} resolved)"
        )
        if self.instances_without_session:
            shown = ", ".join(self.instances_without_session[:3])
            more = ", ..." if len(self.instances_without_session) > 3 else ""
            text += f"; {len(self.instances_without_session)} instance(s) in the file have no session ({shown}{more})"
        if self.sessions_without_outcome:
            text += f"; {len(self.sessions_without_outcome)} session(s) have no row"
        return text


def _boolean(value: str | None, path: str, line: int, column: str) -> bool | None:
    text = (value or "").strip().lower()
    if not text:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise FormatError(path, f"column {column!r} holds {value!r}", line=line, expected=_BOOLEAN)


def read_outcomes(path: str | os.PathLike[str]) -> OutcomeTable:
    """Read a CSV of per-instance outcomes. Raises `FormatError` naming the file, the line and
    what was expected: a missing file or header column, a value that is not a boolean, a row
    without an instance id, an instance listed twice."""
    name = os.fspath(path)
    try:
        handle = open(name, encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise FormatError(
            name,
            f"cannot read the outcomes file: {exc.strerror or exc}",
            expected="a CSV file with a header: instance_id,resolved,patch_applied",
        ) from exc
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        columns = [c.strip() for c in header] if header else []
        wanted = [c for c in OUTCOME_COLUMNS if c in columns]
        if INSTANCE_KEY not in columns or not wanted:
            raise FormatError(
                name,
                f"the header is {','.join(columns) or 'empty'}",
                line=1,
                expected=f"a header naming {INSTANCE_KEY} and {' and/or '.join(OUTCOME_COLUMNS)}",
            )
        at = {c: columns.index(c) for c in (INSTANCE_KEY, *wanted)}
        outcomes: dict[str, Outcome] = {}
        first_line: dict[str, int] = {}
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(columns):
                raise FormatError(
                    name,
                    f"the row has {len(row)} cells",
                    line=line,
                    expected=f"{len(columns)} cells, as in the header ({','.join(columns)})",
                )
            instance = row[at[INSTANCE_KEY]].strip()
            if not instance:
                raise FormatError(name, "the row has no instance id", line=line, expected=f"a value for {INSTANCE_KEY}")
            if instance in outcomes:
                raise FormatError(
                    name,
                    f"instance {instance!r} is listed again (first on line {first_line[instance]})",
                    line=line,
                    expected="one row per instance",
                )
            values = {c: _boolean(row[at[c]], name, line, c) for c in wanted}
            outcomes[instance] = Outcome(instance, **values)
            first_line[instance] = line
    return OutcomeTable(name, outcomes)


def match_outcomes(table: OutcomeTable, instances: Iterable[tuple[str, str | None]]) -> OutcomeMatch:
    """Pair `table`'s rows with sessions, given as (session id, its instance id or None). Every
    session running an instance of the table gets that outcome (one instance may have been run
    in several sessions)."""
    attached: dict[str, Outcome] = {}
    without: list[str] = []
    seen: set[str] = set()
    for session_id, instance in instances:
        outcome = table.outcomes.get(instance) if instance else None
        if outcome is None:
            without.append(session_id)
            continue
        attached[session_id] = outcome
        seen.add(outcome.instance_id)
    missing = tuple(i for i in table.outcomes if i not in seen)
    return OutcomeMatch(
        attached=attached,
        instances_without_session=missing,
        sessions_without_outcome=tuple(without),
        source=os.path.basename(table.path),
    )
