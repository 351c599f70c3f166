"""Helpers shared by strategy kinds: step arithmetic, transcripts for summarizers, the default fallback."""

from __future__ import annotations

import threading
import weakref
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property, partial
from itertools import accumulate, chain, compress, count, repeat
from operator import attrgetter, is_, is_not
from typing import Any, TypeVar, cast

from workbench.compaction import CompactionEnv, Context
from workbench.session import Message, Step, flatten, group_steps

DEFAULT_FALLBACK_FRACTION = 0.4


def last_steps_for_messages(steps: Sequence[Step], keep_messages: int) -> int:
    """How many trailing steps hold the last `keep_messages` messages, widened to whole steps.

    The cut moves back to a step boundary so a tool call and its results stay together.
    """
    if keep_messages <= 0:
        return 0
    from_the_end = list(accumulate([len(s.messages) for s in reversed(steps)]))
    return min(bisect_left(from_the_end, keep_messages) + 1, len(steps))


def step_offsets(steps: Sequence[Step]) -> list[int]:
    """Where each step starts among the messages of `steps` joined, and (last) their total."""
    return list(accumulate([len(s.messages) for s in steps], initial=0))


def pinned_flags(context: Context) -> list[bool]:
    """`step.pinned` for each step of the context's body."""
    return [step.pinned for step in steps_of(context)]


_messages = attrgetter("messages")


def settled_steps(steps: Sequence[Step], key: str) -> int:
    """How many leading steps are fixed points of the per-step rewrite named `key` (`settle`).

    A strategy that rewrites each step on its own (truncating, masking, clearing) marks what it
    returns; the next compaction of a replay starts with those very steps, so it skips them in one
    scan rather than asking about each again.
    """
    return next_index([key in step.settled for step in steps], False)


def next_index(items: list[Any], value: Any, start: int = 0) -> int:
    """The index of the next `value` in `items` from `start`, or `len(items)` when there is none."""
    try:
        return items.index(value, start)
    except ValueError:
        return len(items)


def shared_prefix_length(first: Sequence[Any], second: Sequence[Any]) -> int:
    """How many leading items the two sequences share by identity (the very same objects).

    Stops at the first difference: after a compaction that dropped the oldest steps that is a few
    messages in, however long the contexts are."""
    different = next(compress(count(), map(is_not, first, second)), None)
    return min(len(first), len(second)) if different is None else different


def settle(step: Step, key: str) -> Step:
    """Mark `step` as a fixed point of the rewrite named `key`: rewriting it gives it back unchanged.

    `key` must name the rewrite and everything it depends on besides the step (the kind and its
    parameters); the step is immutable, so the mark never goes stale."""
    if key not in step.settled:
        object.__setattr__(step, "settled", step.settled | {key})
    return step


def has_stray_tool_step(steps: Sequence[Step]) -> bool:
    """Whether a step starts with a tool message (a result with no call before it)."""
    return "tool" in [step.messages[0].role for step in steps]


class Grouping:
    """A message sequence (a session's recorded messages) grouped into steps once, on first use.

    A replay's context is the previous compaction's result followed by recorded messages; the
    replay lends its session's grouping (`lend_grouping`) so `steps_of` takes the steps of those
    messages from here instead of grouping them again at every compaction and in every replay.
    """

    def __init__(self, messages: Sequence[Message]):
        self.messages = tuple(messages)
        #: per rewrite name (`rewrite_run`), the rewrite of each step (None: not asked yet)
        self.rewrites: dict[str, list[Step | None]] = {}

    @cached_property
    def steps(self) -> list[Step]:
        return group_steps(self.messages)

    @cached_property
    def starts(self) -> list[int]:
        return step_offsets(self.steps)[:-1]

    @cached_property
    def step_at(self) -> dict[int, int]:
        """id(message) -> index of the step it starts."""
        return {id(self.messages[start]): index for index, start in enumerate(self.starts)}

    def group(self, messages: Sequence[Message]) -> list[Step] | None:
        """`group_steps(messages)` when `messages` is a run of this sequence starting at one of its
        steps (else None). Grouping decides each message from the ones since its step began, so
        from a step's start the steps are this sequence's own, the last one cut where the run ends."""
        if not messages:
            return []
        index = self.step_at.get(id(messages[0]))
        if index is None:
            return None
        start = self.starts[index]
        end = start + len(messages)
        if end > len(self.messages) or not all(map(is_, messages, self.messages[start:end])):
            return None
        stop = bisect_left(self.starts, end)
        steps = self.steps[index:stop]
        last_start = self.starts[stop - 1]
        if last_start + len(steps[-1].messages) > end:
            steps[-1] = Step(tuple(self.messages[last_start:end]))
        return steps


def rewrite_run(steps: list[Step], start: int, stop: int, key: str, rewrite: Callable[[Step], Step]) -> list[Step]:
    """`[rewrite(step) for step in steps[start:stop]]`, remembered per step of the grouping the replay
    lends when the steps are a run of it: a replay meets the same steps compaction after compaction
    and replay after replay, and takes their rewrites as one slice. `key` must name everything the
    rewrite depends on besides the step (the kind and its parameters)."""
    lent = _GROUPED.lent
    count = stop - start
    index = lent.step_at.get(id(steps[start].messages[0])) if lent is not None and count > 0 else None
    if lent is None or index is None or index + count > len(lent.steps) \
            or not all(map(is_, steps[start:stop], lent.steps[index:index + count])):
        return [rewrite(step) for step in steps[start:stop]]
    remembered = lent.rewrites.get(key)
    if remembered is None:
        remembered = lent.rewrites[key] = [None] * len(lent.steps)
    outputs = remembered[index:index + count]
    if True in map(is_, outputs, repeat(None)):
        for offset, output in enumerate(outputs):
            if output is None:
                outputs[offset] = remembered[index + offset] = rewrite(steps[start + offset])
    return cast("list[Step]", outputs)


class _Grouped(threading.local):
    """(a body, its steps) for the last few bodies grouped or returned by a strategy in this thread
    (held strongly: a replay needs the previous compaction's result, a few entries back), and the
    grouping lent by the replay running in this thread. Per thread: a replay runs in one thread,
    and replays in other threads (an experiment's cells) neither push its entries out nor change
    the deque while it is being read."""

    def __init__(self) -> None:
        self.bodies: deque[tuple[tuple[Message, ...], list[Step]]] = deque(maxlen=8)
        self.lent: Grouping | None = None


_GROUPED = _Grouped()


@contextmanager
def lend_grouping(grouping: Grouping) -> Iterator[None]:
    """While inside, `steps_of` in this thread takes the steps of `grouping`'s messages from it."""
    previous, _GROUPED.lent = _GROUPED.lent, grouping
    try:
        yield
    finally:
        _GROUPED.lent = previous


def _group(messages: Sequence[Message]) -> list[Step]:
    lent = _GROUPED.lent
    found = lent.group(messages) if lent is not None else None
    return group_steps(messages) if found is None else found


def remember_steps(body: Sequence[Message], steps: Sequence[Step]) -> None:
    """Record that `body` groups into `steps` (`group_steps(body) == steps`), for `steps_of`."""
    if steps:
        _GROUPED.bodies.append((tuple(body), list(steps)))


def remembered_steps(body: Sequence[Message]) -> list[Step] | None:
    """The steps a strategy in this thread just recorded for a body of `body`'s length, whose
    messages are `body`'s (checked by identity), else None."""
    for prefix, steps in reversed(_GROUPED.bodies):
        if len(prefix) == len(body) and sum(map(len, map(_messages, steps))) == len(body) \
                and all(map(is_, chain.from_iterable(map(_messages, steps)), body)):
            return steps
    return None


def steps_of(context: Context) -> list[Step]:
    """`context.steps`, grouping only what follows a body recorded by `remember_steps` or grouped before.

    A replay compacts a context that is the previous compaction's result with the recorded
    messages since appended: the steps of that result are known, so only the new messages are
    grouped (with the last known step, when the first of them is a tool result that may join it),
    taken from the session's grouping the replay lends when it does. This is exact:
    `group_steps` decides each message from the ones since its step began, so a body's steps
    before its last are steps of any longer body it begins, a message that is not a tool result
    always begins a step, and grouping again from a step's start gives the same steps. The steps
    found are stored in the context, where its `steps` property finds them.
    """
    known = context.__dict__.get("steps")
    if known is not None:
        return known
    body = context.body
    steps: list[Step] | None = None
    for prefix, prefix_steps in reversed(_GROUPED.bodies):
        if len(prefix) <= len(body) and all(map(is_, prefix, body)):
            if len(prefix) == len(body):
                steps = list(prefix_steps)
            elif body[len(prefix)].role != "tool":  # a step of its own: the prefix's last step is whole
                steps = prefix_steps + _group(body[len(prefix):])
            else:
                start = len(prefix) - len(prefix_steps[-1].messages)
                steps = prefix_steps[:-1] + _group(body[start:])
            break
    if steps is None:
        steps = _group(body)
    context.__dict__["steps"] = steps  # where the `steps` cached_property keeps its value
    remember_steps(body, steps)
    return steps


def keep_last_fraction(context: Context, fraction: float = DEFAULT_FALLBACK_FRACTION) -> list[Message]:
    """Leading system messages plus whole trailing steps holding about `fraction` of the body's messages.

    Pinned steps before the cut are kept too. This is the fallback of every strategy without one
    of its own (`on_failure = "fallback"`).
    """
    steps = steps_of(context)
    keep = last_steps_for_messages(steps, max(1, round(len(context.body) * fraction)))
    cut = len(steps) - keep
    kept = [s for s in steps[:cut] if s.pinned] + list(steps[cut:])
    return [*context.system, *flatten(kept)]


_UNBUILT = object()
#: id(original) -> (weak reference to it, {derivation key: what was derived, None for "unchanged"})
_DERIVED: dict[int, tuple[weakref.ref[Any], dict[Hashable, Any]]] = {}
Derived = TypeVar("Derived")


def _forget(key: int, ref: weakref.ref[Any]) -> None:
    entry = _DERIVED.get(key)
    if entry is not None and entry[0] is ref:
        del _DERIVED[key]


def derived(original: Message | Step, key: Hashable, build: Callable[[], Derived | None]) -> Derived | None:
    """What `build()` makes of `original` (None: leave it as it is), built once per original and `key`.

    `key` must name everything besides the original that the result depends on (the kind and its
    parameters). A strategy that rewrites messages in place (truncating, masking, clearing) thus
    returns the very same derived `Message` at every compaction and in every replay of the
    session: its token count is computed once, and the prompt-cache prefix (computed by identity)
    sees it unchanged; a step it handled before costs one look-up. The memo holds the original
    weakly: the entry goes when the original goes. What `build` returns must not refer to the
    original, or the original would never go.
    """
    ident = id(original)
    entry = _DERIVED.get(ident)
    if entry is None or entry[0]() is not original:
        entry = (weakref.ref(original, partial(_forget, ident)), {})
        _DERIVED[ident] = entry
    found = entry[1].get(key, _UNBUILT)
    if found is _UNBUILT:
        found = entry[1][key] = build()
    return cast("Derived | None", found)


def render_transcript(messages: Sequence[Message], *, max_chars_per_message: int | None = None) -> str:
    """A plain-text transcript for a summarizer: one block per message, tool calls spelled out.

    Only text reaches the summarizer; non-text parts (images...) are noted, not sent.
    """
    blocks: list[str] = []
    for message in messages:
        label = message.role
        if message.role == "tool":
            label = f"tool result ({message.name or message.tool_call_id or 'unknown'})"
        text = message.text
        if max_chars_per_message is not None and len(text) > max_chars_per_message:
            text = text[:max_chars_per_message] + " ..."
        lines = [f"[{label}]"]
        if text:
            lines.append(text)
        if message.has_non_text_parts:
            lines.append("(non-text content omitted)")
        for call in message.tool_calls:
            lines.append(f"-> call {call.name}({call.arguments})")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def is_summary(message: Message) -> bool:
    """A message a summarizing strategy wrote earlier."""
    return message.origin == "compacted_synthetic"


def is_recorded_summary(message: Message) -> bool:
    """A summary the recorded agent itself wrote (importers mark it `compact_summary`): not a user request."""
    return bool(message.metadata.get("compact_summary"))


def task_index(steps: Sequence[Step]) -> int | None:
    """Index of the step holding the task: the first real user message (not synthetic, not a recorded summary).

    gent keeps the task outside the scratchpad it compacts, so its kinds never drop or summarize
    this step. Once gent's kinds are the only ones compacting a session, it is the session's first
    user message (they always keep it in front).
    """
    for index, step in enumerate(steps):
        head = step.head
        if head.role == "user" and not is_summary(head) and not is_recorded_summary(head):
            return index
    return None


# Summary lengths. Every summarizing kind asks the summarizer for at most
# `summary_max_tokens(...)` tokens: a share `ratio` of what the summary replaces, capped by a share
# of the usable window (context_limit - max_output), never below MIN_SUMMARY_TOKENS.
SUMMARY_RATIO = 0.25
MIN_SUMMARY_TOKENS = 128


def usable_window(env: CompactionEnv) -> int:
    """The tokens a context may hold: the window less the room kept for the reply."""
    return max(1, env.context_limit - env.max_output)


def summary_max_tokens(env: CompactionEnv, source_tokens: int, *, window_share: float,
                       ratio: float = SUMMARY_RATIO, floor: int = MIN_SUMMARY_TOKENS) -> int:
    """max(floor, min(ratio x source_tokens, window_share x usable window))."""
    return max(floor, min(int(source_tokens * ratio), int(window_share * usable_window(env))))


def keep_summaries_in(env: CompactionEnv, messages: Sequence[Message]) -> None:
    """Forget recorded summaries that are not in `messages` (a later step or a fallback dropped them)."""
    if not env.summaries:
        return
    texts = {m.text for m in messages if is_summary(m)}
    env.summaries[:] = [s for s in env.summaries if s in texts]


__all__ = ["MIN_SUMMARY_TOKENS", "SUMMARY_RATIO", "CompactionEnv", "Context", "DEFAULT_FALLBACK_FRACTION", "Grouping",
           "derived", "has_stray_tool_step", "is_recorded_summary", "is_summary", "keep_last_fraction",
           "keep_summaries_in", "last_steps_for_messages", "lend_grouping", "next_index", "pinned_flags",
           "remember_steps", "remembered_steps", "render_transcript", "rewrite_run", "settle", "settled_steps",
           "shared_prefix_length", "step_offsets", "steps_of", "summary_max_tokens", "task_index", "usable_window"]
