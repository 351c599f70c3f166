"""Window strategies: keep the recent part of the context verbatim and drop the rest.

- `sliding_window` (gent, 000): the last `window` unpinned steps; pinned steps and the task ride along.
- `hard_clear` (aisopod, 003): the last `keep_recent` messages, the cut moved back to a step
  boundary so no tool call loses its result.
- `trim` (ptc_runner, 004): the system messages, the first user message and the last N turns.

All three work on whole steps (`workbench.session.Step`: a user message, or an assistant message
with every tool result answering it), so they never orphan a tool call or a tool result; a result
that other messages part from its call is a step of its own, kept with the call's step. They keep
the leading system messages and every pinned step (importance >= 10), and return the very same
`Message` objects for everything they keep: the replay computes prompt-cache prefixes by identity.
Each runs in one pass over the context's steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import ClassVar

from workbench.compaction import CompactionEnv, Context
from workbench.registry import param, register_strategy
from workbench.session import Message, Step
from workbench.strategies.common import (
    StepList,
    body_steps,
    flag_runs,
    glued_runs,
    has_stray_tool_step,
    last_steps_for_messages,
    pinned_flags,
    steps_of,
    task_index,
)


def rebuild(context: Context, keep: Iterable[bool]) -> list[Message]:
    """Leading system messages plus the body steps whose flag in `keep` is true, in order (see `rebuild_runs`)."""
    return rebuild_runs(context, flag_runs(keep if isinstance(keep, list) else list(keep)))


def rebuild_runs(context: Context, runs: Sequence[tuple[int, int]]) -> list[Message]:
    """Leading system messages plus the body steps of `runs` (ranges `(start, stop)` of step indices,
    in order and apart).

    When every step is kept the original message list is returned (as a new list of the same objects).
    Each run is copied as a slice of the body: a window keeps one or two runs, whatever its size.
    A stray tool result (one a system message parts from its call) is kept with its call, and the
    runs widened to keep both (`common.glued_runs`). The output carries its steps
    (`common.StepList`) unless one of them is a stray tool result, which may join the step now before it.
    """
    known = body_steps(context)
    if known.strays:
        runs = glued_runs(known.steps, runs)
    lengths = known.lengths
    leading = len(context.system)
    if len(runs) == 1 and runs[0] == (0, len(lengths)) or not lengths:
        return StepList(context.messages, leading, known)
    messages = context.messages
    out = StepList(context.system, leading, None)
    offset, at = leading, 0
    for start, stop in runs:
        offset += sum(lengths[at:start])
        end = offset + sum(lengths[start:stop])
        out.extend(islice(messages, offset, end))
        offset, at = end, stop
    if not known.strays or not has_stray_tool_step([s for start, stop in runs for s in known.steps[start:stop]]):
        out.known = known.kept(runs)
    return out


def bonus_runs(bonus: Iterable[int], cut: int, steps: int) -> list[tuple[int, int]]:
    """The runs of a cut that keeps every step from `cut` on and, before it, the `bonus` steps."""
    runs: list[tuple[int, int]] = []
    for index in sorted(set(bonus)):
        if index >= cut:
            break
        if runs and runs[-1][1] == index:
            runs[-1] = (runs[-1][0], index + 1)
        else:
            runs.append((index, index + 1))
    if cut < steps:
        if runs and runs[-1][1] == cut:
            runs[-1] = (runs[-1][0], steps)
        else:
            runs.append((cut, steps))
    return runs


@register_strategy("sliding_window")
@dataclass(frozen=True)
class SlidingWindow:
    """Keep the last `window` unpinned steps; pinned steps and the task are bonus slots.

    Pinned steps (any message with importance >= 10) are kept wherever they are and do not count
    toward the window, so pinning never starves the window of recent context. Kept steps stay in
    their original relative order (gent's order); leading system messages are always kept.

    The task is never dropped: gent compacts its scratchpad and keeps the original task outside
    it, so the first real user message (`common.task_index`) is kept like a pinned step and does
    not count toward the window either.
    """

    summarizes: ClassVar[bool] = False

    window: int = param(doc="unpinned steps kept (pinned steps and the task come on top)", min=1)

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        known = body_steps(context)
        task = task_index(known.steps)
        bonus = sorted(known.pinned if task is None else {*known.pinned, task})  # the bonus slots
        to_skip = len(known.steps) - len(bonus) - self.window  # oldest steps outside the bonus slots to drop
        if to_skip <= 0:
            return rebuild_runs(context, [(0, len(known.steps))])
        # every step after the `to_skip`-th step outside the bonus slots is kept
        return rebuild_runs(context, bonus_runs(bonus, nth_outside(bonus, to_skip) + 1, len(known.steps)))


@register_strategy("hard_clear")
@dataclass(frozen=True)
class HardClear:
    """Keep only the most recent `keep_recent` messages (plus leading system messages).

    The cut is moved earlier to the nearest step boundary when it would fall inside a step, so an
    assistant message is never kept without its tool results nor a result without its call: a
    context of tool steps may keep a few more than `keep_recent` messages. Pinned steps before the
    cut survive in place. `keep_recent` defaults to 10 (aisopod leaves it to the caller).
    """

    summarizes: ClassVar[bool] = False

    keep_recent: int = param(10, doc="most recent messages kept (widened to whole steps)", min=1)

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        known = body_steps(context)
        steps = known.steps
        cut = len(steps) - last_steps_for_messages(steps, self.keep_recent, known.lengths)
        return rebuild_runs(context, bonus_runs(known.pinned, cut, len(steps)))


def nth_outside(bonus: list[int], n: int) -> int:
    """The index of the `n`-th step (from 1) that is not among the sorted `bonus` indices: a look
    at each bonus index before it (a window's bonus slots, a few) rather than at every step."""
    index = n - 1  # where it is if no bonus step comes before it
    for taken in bonus:
        if taken > index:
            break
        index += 1
    return index


def turn_numbers(steps: list[Step]) -> tuple[list[int], int]:
    """Each step's turn number and the number of turns.

    A turn is one model exchange: an assistant step (the assistant message with its tool results)
    plus the user steps that follow it up to the next assistant message. Steps before the first
    assistant message (the opening request) are turn -1.
    """
    numbers: list[int] = []
    turn = -1
    for step in steps:
        if step.kind == "assistant":
            turn += 1
        numbers.append(turn)
    return numbers, turn + 1


@register_strategy("trim")
@dataclass(frozen=True)
class Trim:
    """Keep the system messages, the first user message (if `keep_initial_user`) and the last
    `keep_recent_turns` turns verbatim; drop everything else.

    A *turn* follows ptc_runner, whose turn is one LLM exchange (the model's reply and the feedback
    sent back to it): here an assistant message with its tool results, plus any user messages after
    it up to the next assistant message. Messages before the first assistant message form the
    opening; of those only the first user message is kept (when asked). A context with no more than
    `keep_recent_turns` turns is returned unchanged. System messages anywhere and pinned steps are
    kept in place.
    """

    summarizes: ClassVar[bool] = False

    keep_recent_turns: int = param(3, doc="most recent turns kept verbatim", min=1)
    keep_initial_user: bool = param(True, doc="also keep the first user message (the task)")

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        steps = steps_of(context)
        numbers, turns = turn_numbers(steps)
        first_kept_turn = turns - self.keep_recent_turns
        if first_kept_turn <= 0:
            return list(context.messages)
        initial_user = -1
        if self.keep_initial_user:
            initial_user = next((i for i, s in enumerate(steps) if s.kind == "user"), -1)
        pinned = pinned_flags(context)
        return rebuild(
            context,
            (
                numbers[i] >= first_kept_turn or pinned[i] or s.kind == "system" or i == initial_user
                for i, s in enumerate(steps)
            ),
        )


__all__ = ["HardClear", "SlidingWindow", "Trim", "bonus_runs", "rebuild", "rebuild_runs", "turn_numbers"]
