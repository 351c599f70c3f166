"""The recorded agent's own compactions, replayed: the strategy named `recorded` (its trigger,
also `recorded`, is in `workbench.triggers`).

Claude Code, Codex and OpenHands record when they compacted and the summary they continued from.
A session keeps the full original history and lists those compactions as annotations
(`Session.recorded_compactions`); no other kind ever sees the recorded summaries. Paired (the
`as-recorded` preset), these two kinds make the production agent one more row in a comparison:

- trigger `recorded` fires before each call the agent compacted before, once per point;
- strategy `recorded` replaces everything before the recorded boundary (leading system messages
  and pinned steps excepted) with the recorded summary, as one `compacted_synthetic` user message.

Both need the session they replay: the engine calls `bind_session(session)` on every trigger and
strategy that defines it (combinators and pipelines included) before the walk. Unbound, the
trigger never fires and the strategy changes nothing; so does the strategy at a call where the
agent did not compact (e.g. when paired with another trigger).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from workbench.compaction import CompactionEnv, Context
from workbench.registry import register_strategy
from workbench.session import Message, RecordedCompaction, Session, flatten, group_steps


@register_strategy("recorded")
@dataclass(frozen=True)
class RecordedSummary:
    """Replace the context before the recorded boundary with the agent's recorded summary.

    The boundary is the session message the agent continued with after compacting. Everything in
    the context before it, except the leading system messages and pinned steps (kept, in order,
    after the summary), becomes one `compacted_synthetic` user message holding the recorded
    summary; an earlier recorded summary is replaced with the rest. A boundary inside a step (a
    tool result whose call came before it) moves back to the step's start, so tool pairing holds.
    A recorded compaction without summary text drops the older part and adds no message.
    """

    summarizes: ClassVar[bool] = False

    # A config's strategy is shared by the replays of an experiment's threads: the session bound is
    # kept per thread (a replay binds and compacts in one thread), so replays never read another's.
    _by_thread: dict[int, dict[int, tuple[RecordedCompaction, Message | None]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def bind_session(self, session: Session) -> None:
        messages = session.messages
        by_call = {}
        for record in session.recorded_compactions:
            boundary = messages[record.message_index] if 0 <= record.message_index < len(messages) else None
            by_call[record.call_index] = (record, boundary)
        self._by_thread[threading.get_ident()] = by_call

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        found = self._by_thread.get(threading.get_ident(), {}).get(env.call_index)
        if found is None:
            return list(context.messages)
        record, boundary = found
        body = context.body
        cut = len(body)
        if boundary is not None:
            for index in range(len(body) - 1, -1, -1):
                if body[index] is boundary:
                    cut = index
                    break
        while 0 < cut < len(body) and body[cut].is_observation:
            cut -= 1
        pinned = flatten(s for s in group_steps(body[:cut]) if s.pinned)
        summary: list[Message] = []
        if record.summary.strip():
            env.record_summary(record.summary)
            summary.append(
                Message(
                    role="user",
                    content=record.summary,
                    origin="compacted_synthetic",
                    metadata=_summary_metadata(record),
                )
            )
        return [*context.system, *summary, *pinned, *body[cut:]]


def uses_recorded(spec: Any) -> bool:
    """Whether a config spec (a dict, or any table within it) replays the agent's own compactions:
    a trigger or strategy of kind `recorded`, also inside combinators and pipelines."""
    if isinstance(spec, Mapping):
        return spec.get("kind") == "recorded" or any(uses_recorded(value) for value in spec.values())
    if isinstance(spec, (list, tuple)):
        return any(uses_recorded(value) for value in spec)
    return False


def nothing_recorded_note(config: str, sessions: int, where: str) -> str:
    """The warning for a config replaying recorded compactions where none were recorded (`where`:
    e.g. "of dataset 'samples'" for `sessions` sessions, or "session 1a2b3c" for one): there it never
    compacts, and its rows repeat no-compaction."""
    what = f"none of the {sessions} sessions {where} has" if sessions > 1 else f"{where} has no"
    return (
        f"{config}: {what} recorded compactions (the agent did not compact, or its format does not record "
        f"it): it replays the whole history, the same rows as no-compaction"
    )


def _summary_metadata(record: RecordedCompaction) -> dict[str, Any]:
    return {"recorded_compaction": True, "trigger": record.trigger, "tokens_before": record.tokens_before}


__all__ = ["RecordedSummary", "nothing_recorded_note", "uses_recorded"]
