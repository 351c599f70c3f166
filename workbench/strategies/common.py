"""Helpers shared by strategy kinds: step arithmetic, transcripts for summarizers, the default fallback."""

from __future__ import annotations

import threading
import weakref
from bisect import bisect_left
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property, partial
from itertools import accumulate, compress, count, repeat
from operator import attrgetter, is_, is_not, sub
from typing import Any, TypeVar, cast

from workbench.compaction import CompactionEnv, Context, kind_name
from workbench.errors import ConfigError
from workbench.session import Message, Step, flatten, group_steps

DEFAULT_FALLBACK_FRACTION = 0.4
#: How a transcript labels a user observation (a text-action agent's command output).
OBSERVATION_LABEL = "command output"


def last_steps_for_messages(steps: Sequence[Step], keep_messages: int, lengths: Sequence[int] | None = None) -> int:
    """How many trailing steps hold the last `keep_messages` messages, widened to whole steps.

    The cut moves back to a step boundary so a tool call and its results stay together. `lengths`:
    the steps' message counts, when known.
    """
    if keep_messages <= 0:
        return 0
    held = 0
    for steps_held, length in enumerate(reversed(step_lengths(steps) if lengths is None else lengths), 1):
        held += length
        if held >= keep_messages:
            return steps_held
    return len(steps)


def step_offsets(steps: Sequence[Step]) -> list[int]:
    """Where each step starts among the messages of `steps` joined, and (last) their total."""
    return list(accumulate([len(s.messages) for s in steps], initial=0))


def pinned_flags(context: Context) -> list[bool]:
    """`step.pinned` for each step of the context's body."""
    known = body_steps(context)
    flags = [False] * len(known.steps)
    for index in known.pinned:
        flags[index] = True
    return flags


_messages = attrgetter("messages")
_pinned = attrgetter("pinned")
_paired_step = attrgetter("paired")


def settled_steps(context: Context, key: str, stop: int | None = None) -> int:
    """How many leading steps of the context's body (of its first `stop`) are fixed points of the
    per-step rewrite named `key` (`settle`).

    A strategy that rewrites each step on its own (truncating, masking, clearing) marks what it
    returns; the next compaction of a replay starts with those very steps, so it skips them: those
    its context is known to begin with (`BodySteps.settled`) without a look, the others in one scan.
    """
    known = body_steps(context)
    steps = known.steps
    stop = len(steps) if stop is None else stop
    for index in range(min(known.settled.get(key, 0), stop), stop):  # usually stops at the first step looked at
        if key not in steps[index].settled:
            return index
    return stop


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
    """Whether a step starts with an observation: a tool message (a result with no call before it),
    or a user observation with no assistant step before it (either may join a step put before it)."""
    return any([step.messages[0].is_observation for step in steps])


def stray_owners(steps: Sequence[Step]) -> dict[int, int]:
    """For each step that is a stray tool result answering a call made earlier in `steps`, the index
    of the step making that call.

    A result is stray when other messages (a system reminder, say) sit between it and its call:
    `group_steps` then cannot join it to the call's step, so a cut between the two steps would
    orphan the result, or leave the call without it.
    """
    owners: dict[int, int] = {}
    callers: dict[str, int] = {}
    for index, step in enumerate(steps):
        head = step.messages[0]
        if head.role == "assistant":
            callers.update(dict.fromkeys([call.id for call in head.tool_calls], index))
        elif head.role == "tool" and head.tool_call_id in callers:
            owners[index] = callers[head.tool_call_id]
    return owners


def glued_cut(steps: Sequence[Step], cut: int) -> int:
    """`cut` (the first step of a kept tail) moved back so that the tail holds the call of every
    stray result it holds, and the steps between them (see `stray_owners`)."""
    if cut <= 0 or not has_stray_tool_step(steps[cut:]):
        return cut
    owners = stray_owners(steps)
    while True:
        earliest = min([owner for stray, owner in owners.items() if stray >= cut], default=cut)
        if earliest >= cut:
            return cut
        cut = earliest


def glued_flags(steps: Sequence[Step], flags: Sequence[bool]) -> list[bool]:
    """Per-step flags (kept, kept verbatim) widened so that a stray result, the step making its call
    and the steps between are flagged together when one of them is (see `stray_owners`)."""
    out = list(flags)
    owners = stray_owners(steps) if has_stray_tool_step(steps) else {}
    changed = bool(owners)
    while changed:
        changed = False
        for stray, owner in owners.items():
            if (out[stray] or out[owner]) and not all(out[owner : stray + 1]):
                out[owner : stray + 1] = [True] * (stray + 1 - owner)
                changed = True
    return out


def glued_pins(steps: Sequence[Step]) -> list[bool]:
    """Whether each step is kept verbatim for being pinned: `step.pinned`, widened by `glued_flags` (a
    pinned call keeps its stray result, a pinned stray result its call)."""
    return glued_flags(steps, [step.pinned for step in steps])


def glued_runs(steps: Sequence[Step], runs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """`runs` (kept ranges of step indices, in order and apart) widened like `glued_flags`."""
    if not has_stray_tool_step(steps):
        return list(runs)
    flags = [False] * len(steps)
    for start, stop in runs:
        flags[start:stop] = [True] * (stop - start)
    return flag_runs(glued_flags(steps, flags))


def flag_runs(flags: list[bool]) -> list[tuple[int, int]]:
    """The ranges `(start, stop)` of consecutive true flags, in order."""
    runs: list[tuple[int, int]] = []
    start = next_index(flags, True)
    while start < len(flags):
        stop = next_index(flags, False, start)
        runs.append((start, stop))
        start = next_index(flags, True, stop)
    return runs


class Grouping:
    """A message sequence (a session's recorded messages) grouped into steps once, on first use.

    A replay's context is the previous compaction's result followed by recorded messages; the
    replay lends its session's grouping (`lend_grouping`) so `steps_of` takes the steps of those
    messages from here instead of grouping them again at every compaction and in every replay.
    """

    def __init__(
        self, messages: Sequence[Message], counted: str | None = None, token_prefix: Sequence[int] | None = None
    ):
        """`token_prefix`: the messages' token prefix sums under the tokenizer named `counted`, when known."""
        self.messages = tuple(messages)
        #: per rewrite name (`rewrite_run`), the rewrite of each step (None: not asked yet)
        self.rewrites: dict[str, list[Step | None]] = {}
        self.counted = counted
        self.token_prefix = token_prefix

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

    @cached_property
    def lengths(self) -> list[int]:
        return step_lengths(self.steps)

    @cached_property
    def tokens(self) -> list[int | None] | None:
        """Each step's tokens (from the token prefix sums), when they are known."""
        prefix = self.token_prefix
        if prefix is None:
            return None
        starts = self.starts
        return list(
            map(sub, map(prefix.__getitem__, [*starts[1:], len(self.messages)]), map(prefix.__getitem__, starts))
        )

    @cached_property
    def pinned(self) -> list[int]:
        return pinned_positions(self.steps)

    @cached_property
    def unpaired(self) -> list[int]:
        """The indices of the steps that do not pair their own tool calls and results (`Step.paired`)."""
        return [index for index, step in enumerate(self.steps) if not step.paired]

    @cached_property
    def strays(self) -> list[int]:
        """The indices of the steps that start with an observation (`has_stray_tool_step`)."""
        return [index for index, step in enumerate(self.steps) if step.messages[0].is_observation]

    def known(self, messages: Sequence[Message]) -> BodySteps | None:
        """`BodySteps.of(group_steps(messages))` when `group` finds the steps, from what this grouping
        knows of its own (else None)."""
        steps = self.group(messages)
        if not steps:
            return None if steps is None else BodySteps([], [], False, [], paired=True)
        index = self.step_at[id(messages[0])]
        stop = index + len(steps)
        lengths = self.lengths[index:stop]
        tokens = None if self.tokens is None else self.tokens[index:stop]
        if lengths[-1] != len(steps[-1].messages):  # the last step was cut
            lengths[-1] = len(steps[-1].messages)
            if tokens is not None and self.token_prefix is not None:
                start = self.starts[stop - 1]
                tokens[-1] = self.token_prefix[start + lengths[-1]] - self.token_prefix[start]
        pinned = [
            position - index
            for position in self.pinned[bisect_left(self.pinned, index) : bisect_left(self.pinned, stop)]
        ]
        if pinned and pinned[-1] == len(steps) - 1 and not steps[-1].pinned:  # the last step was cut
            pinned.pop()
        strays = bisect_left(self.strays, index) != bisect_left(self.strays, stop)
        paired = bisect_left(self.unpaired, index) == bisect_left(self.unpaired, stop - 1) and steps[-1].paired
        return BodySteps(steps, lengths, strays, pinned, paired=paired, tokens=tokens, counted=self.counted)


def rewrite_run(steps: list[Step], start: int, stop: int, key: str, rewrite: Callable[[Step], Step]) -> list[Step]:
    """`[rewrite(step) for step in steps[start:stop]]`, remembered per step of the grouping the replay
    lends when the steps are a run of it: a replay meets the same steps compaction after compaction
    and replay after replay, and takes their rewrites as one slice. `key` must name everything the
    rewrite depends on besides the step (the kind and its parameters)."""
    lent = _GROUPED.lent
    count = stop - start
    index = lent.step_at.get(id(steps[start].messages[0])) if lent is not None and count > 0 else None
    if (
        lent is None
        or index is None
        or index + count > len(lent.steps)
        or not all(map(is_, steps[start:stop], lent.steps[index : index + count]))
    ):
        return [rewrite(step) for step in steps[start:stop]]
    remembered = lent.rewrites.get(key)
    if remembered is None:
        remembered = lent.rewrites[key] = [None] * len(lent.steps)
    outputs = remembered[index : index + count]
    if True in map(is_, outputs, repeat(None)):
        for offset, output in enumerate(outputs):
            if output is None:
                outputs[offset] = remembered[index + offset] = rewrite(steps[start + offset])
    return cast("list[Step]", outputs)


class _Grouped(threading.local):
    """The grouping lent by the replay running in this thread (per thread: replays in other threads,
    an experiment's cells, lend their own)."""

    def __init__(self) -> None:
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


def _group_known(messages: Sequence[Message]) -> BodySteps:
    lent = _GROUPED.lent
    found = lent.known(messages) if lent is not None else None
    return BodySteps.of(group_steps(messages)) if found is None else found


@dataclass(frozen=True, slots=True)
class BodySteps:
    """What is known of how a context's body groups into steps, carried from one strategy to the
    next and from one compaction to the next (`StepList`, `continue_steps`) rather than found again
    by a pass over every message: the steps, how many messages each holds (`lengths`), whether
    some step starts with a tool result (`strays`; True may also mean "not known"), which steps
    are pinned (their indices), and per per-step rewrite (`settle`'s key) how many leading steps
    are known to be its fixed points (`settled`), whether every step is known to pair its own
    tool calls and results (`paired`, what the replay's invariant check asks), and each step's
    tokens (`tokens`, what the replay's accounting sums).

    Message counts rather than offsets: keeping some steps, or appending some, copies them as they
    are, and the few offsets a strategy needs (where a run of steps starts) are sums (`offset`)."""

    steps: list[Step]
    lengths: list[int]
    strays: bool
    pinned: list[int]
    settled: Mapping[str, int] = field(default_factory=dict)
    #: True: every step pairs its own tool calls and results (`Step.paired`); False: not known.
    paired: bool = False
    #: Each step's tokens under the tokenizer named `counted` (None where not known), when known.
    tokens: list[int | None] | None = None
    counted: str | None = None

    @classmethod
    def of(cls, steps: list[Step]) -> BodySteps:
        return cls(
            steps,
            step_lengths(steps),
            has_stray_tool_step(steps),
            pinned_positions(steps),
            paired=False not in map(_paired_step, steps),
        )

    def offset(self, index: int) -> int:
        """Where step `index` starts among the body's messages (the body's length for `len(steps)`)."""
        return sum(self.lengths[:index])

    def kept(self, runs: Sequence[tuple[int, int]]) -> BodySteps:
        """How the body of the steps in `runs` groups (each run `(start, stop)` a range of step indices,
        in order and apart), when no step starts with a tool result. Runs are copied as slices: a
        window keeps one or two runs of hundreds of steps."""
        steps: list[Step] = []
        lengths: list[int] = []
        tokens: list[int | None] | None = None if self.tokens is None else []
        places = []  # (start, stop, index of `start` among the kept steps)
        for start, stop in runs:
            places.append((start, stop, len(steps)))
            steps += self.steps[start:stop]
            lengths += self.lengths[start:stop]
            if tokens is not None and self.tokens is not None:
                tokens += self.tokens[start:stop]
        pinned = [at + index - start for index in self.pinned for start, stop, at in places if start <= index < stop]
        settled = {
            name: sum(max(0, min(stop, count) - start) for start, stop, _ in places)
            for name, count in self.settled.items()
        }
        return BodySteps(steps, lengths, False, pinned, settled, self.paired, tokens, self.counted)


def step_lengths(steps: Sequence[Step]) -> list[int]:
    """How many messages each step holds."""
    return list(map(len, map(_messages, steps)))


def pinned_positions(steps: Sequence[Step]) -> list[int]:
    """The indices of the pinned steps."""
    return [index for index, pinned in enumerate(map(_pinned, steps)) if pinned]


class StepList(list[Message]):
    """A strategy's output that carries how its body (what follows its `leading` system messages)
    groups into steps (`BodySteps`).

    The next strategy of a pipeline and the replay's next compaction take the steps from here instead
    of grouping the messages again. Changing the list in any way forgets them (`known` becomes None),
    so a strategy that edits another's output before returning it is grouped afresh. A strategy
    returns a new one each time: the replay takes it as its context, without a copy, and appends
    the next recorded messages to it.
    """

    __slots__ = ("known", "leading")

    def __init__(self, messages: Iterable[Message], leading: int, known: BodySteps | None):
        """`known`: None while the list is being built (set it last)."""
        super().__init__(messages)
        self.leading = leading
        self.known: BodySteps | None = known


def _forgetting(name: str) -> Callable[..., Any]:
    method = getattr(list, name)

    def changed(self: StepList, *args: Any, **kwargs: Any) -> Any:
        self.known = None
        return method(self, *args, **kwargs)

    changed.__name__ = name
    return changed


for _name in (
    "__setitem__",
    "__delitem__",
    "__iadd__",
    "__imul__",
    "append",
    "extend",
    "insert",
    "pop",
    "remove",
    "clear",
    "sort",
    "reverse",
):
    setattr(StepList, _name, _forgetting(_name))


def known_steps(messages: Sequence[Message], leading: int) -> BodySteps | None:
    """How `messages[leading:]` groups when `messages` is an unchanged `StepList` with that many
    leading system messages, else None."""
    if type(messages) is StepList and messages.leading == leading:
        return messages.known
    return None


def _give(context: Context, known: BodySteps) -> None:
    context.__dict__["steps"] = known.steps  # where the `steps` cached_property keeps its value
    context.__dict__["body_steps"] = known


def context_of(messages: Sequence[Message]) -> Context:
    """`Context(tuple(messages))`, with the steps a `StepList` carries."""
    context = Context(tuple(messages))
    known = known_steps(messages, len(context.system))
    if known is not None:
        _give(context, known)
    return context


def continue_steps(context: Context, prefix: BodySteps, prefix_length: int) -> None:
    """Give `context` its steps when its body begins with `prefix_length` messages that group as
    `prefix` says (a replay's context is the previous compaction's result followed by recorded
    messages): only the messages after them are grouped, with the last known step when the first of
    them is a tool result that may join it, taken from the session's grouping the replay lends.

    This is exact: `group_steps` decides each message from the ones since its step began, so a
    body's steps before its last are steps of any longer body it begins, a message that is not an
    observation always begins a step, and grouping again from a step's start gives the same steps.
    """
    messages, leading = context.messages, len(context.system)  # (the body is not copied)
    body_length = len(messages) - leading
    if prefix_length > body_length:
        return
    if prefix_length == body_length:
        _give(context, prefix)
        return
    if not prefix.steps:
        _give(context, _group_known(context.body))
        return
    kept, start = len(prefix.steps), prefix_length
    if messages[leading + prefix_length].is_observation:  # it may join the prefix's last step: group that one again
        kept -= 1
        start -= prefix.lengths[kept]
    new = _group_known(messages[leading + start :])
    pinned = [index for index in prefix.pinned if index < kept] + [index + kept for index in new.pinned]
    tokens = None
    if prefix.tokens is not None and new.tokens is not None and prefix.counted == new.counted:
        tokens = prefix.tokens[:kept] + new.tokens
    _give(
        context,
        BodySteps(
            [*prefix.steps[:kept], *new.steps],
            prefix.lengths[:kept] + new.lengths,
            prefix.strays or new.strays,
            pinned,
            {key: min(settled, kept) for key, settled in prefix.settled.items()},
            prefix.paired and new.paired,
            tokens,
            None if tokens is None else prefix.counted,
        ),
    )


def steps_of(context: Context) -> list[Step]:
    """`context.steps`, from what the context was given (`context_of`, `continue_steps`) when it was,
    else grouped, taking the steps of the session's messages from the grouping the replay lends."""
    known: list[Step] | None = context.__dict__.get("steps")
    if known is not None:
        return known
    steps = _group(context.body)
    context.__dict__["steps"] = steps
    return steps


def body_steps(context: Context) -> BodySteps:
    """What is known of how the context's body groups (`BodySteps`), found once per context."""
    known = context.__dict__.get("body_steps")
    if known is None:
        known = context.__dict__["body_steps"] = BodySteps.of(steps_of(context))
    return known


def keep_last_fraction(
    context: Context, fraction: float = DEFAULT_FALLBACK_FRACTION, *, also: Collection[int | None] = ()
) -> list[Message]:
    """Leading system messages plus whole trailing steps holding about `fraction` of the body's messages.

    Pinned steps before the cut are kept too, and the steps whose indices are in `also`, and a stray
    result with its call (`glued_flags`). This is the fallback of every strategy without one of its
    own (`on_failure = "fallback"`).
    """
    steps = steps_of(context)
    keep = last_steps_for_messages(steps, max(1, round(len(context.body) * fraction)))
    cut = len(steps) - keep
    kept = glued_flags(steps, [step.pinned or index in also for index, step in enumerate(steps[:cut])] + [True] * keep)
    return [*context.system, *flatten(compress(steps, kept))]


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
        elif message.observation:
            label = f"tool result ({OBSERVATION_LABEL})"
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


def is_user_request(message: Message) -> bool:
    """A user message the user wrote: not a summary (written by a strategy or the recorded agent)
    and not an observation (the environment's answer a text-action agent is shown as a user turn)."""
    return (
        message.role == "user"
        and not message.observation
        and not is_summary(message)
        and not is_recorded_summary(message)
    )


def may_summarize(strategy: Any) -> bool:
    """Whether a built strategy may call the summarizer (what a dry run lists as the models a config
    calls): its `summarizes` attribute, which the built-in kinds set (a composite from its parts);
    a kind that does not say may."""
    return bool(getattr(strategy, "summarizes", True))


def task_index(steps: Sequence[Step]) -> int | None:
    """Index of the step holding the task: the first real user message (not synthetic, not a recorded summary).

    gent keeps the task outside the scratchpad it compacts, so its kinds never drop or summarize
    this step. Once gent's kinds are the only ones compacting a session, it is the session's first
    user message (they always keep it in front).
    """
    for index, step in enumerate(steps):
        if is_user_request(step.head):
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


def summary_max_tokens(
    env: CompactionEnv,
    source_tokens: int,
    *,
    window_share: float,
    ratio: float = SUMMARY_RATIO,
    floor: int = MIN_SUMMARY_TOKENS,
) -> int:
    """max(floor, min(ratio x source_tokens, window_share x usable window))."""
    return max(floor, min(int(source_tokens * ratio), int(window_share * usable_window(env))))


def keep_summaries_in(env: CompactionEnv, messages: Sequence[Message]) -> None:
    """Forget recorded summaries that are not in `messages` (a later step or a fallback dropped them)."""
    if not env.summaries:
        return
    texts = {m.text for m in messages if is_summary(m)}
    env.summaries[:] = [s for s in env.summaries if s in texts]


def returned_messages(returned: Any, strategy: Any, method: str = "compact") -> list[Message]:
    """What a strategy's `compact` (or `fallback`) returned, as the replay's new context list.

    A built-in kind's `StepList` is taken as it is (made for the replay, known good); any other list,
    tuple or iterable is copied and must hold `Message`s only. Anything else (None, a dict, OpenAI
    message dicts) is a ConfigError naming the kind: the kind breaks the strategy contract.
    """
    if type(returned) is StepList:
        return returned
    expected = f"{method} must return a list of Message"
    if returned is None or isinstance(returned, (str, bytes, Mapping, Message)) or not hasattr(returned, "__iter__"):
        raise ConfigError(f"strategy {kind_name(strategy)!r} returned {type(returned).__name__}; {expected}")
    after = list(returned)
    if not all(map(isinstance, after, repeat(Message))):
        index, item = next((i, m) for i, m in enumerate(after) if not isinstance(m, Message))
        hint = " (`wb.Message.from_openai(d)` makes one of an OpenAI message dict)" if isinstance(item, Mapping) else ""
        raise ConfigError(
            f"strategy {kind_name(strategy)!r} returned a list holding a {type(item).__name__} "
            f"at {index}; {expected}{hint}"
        )
    return after


__all__ = [
    "MIN_SUMMARY_TOKENS",
    "SUMMARY_RATIO",
    "CompactionEnv",
    "Context",
    "DEFAULT_FALLBACK_FRACTION",
    "Grouping",
    "derived",
    "flag_runs",
    "glued_cut",
    "glued_flags",
    "glued_pins",
    "glued_runs",
    "has_stray_tool_step",
    "is_recorded_summary",
    "is_summary",
    "keep_last_fraction",
    "keep_summaries_in",
    "last_steps_for_messages",
    "may_summarize",
    "lend_grouping",
    "next_index",
    "pinned_flags",
    "BodySteps",
    "StepList",
    "body_steps",
    "context_of",
    "continue_steps",
    "known_steps",
    "pinned_positions",
    "render_transcript",
    "returned_messages",
    "rewrite_run",
    "settle",
    "settled_steps",
    "shared_prefix_length",
    "step_lengths",
    "step_offsets",
    "steps_of",
    "stray_owners",
    "summary_max_tokens",
    "task_index",
    "usable_window",
]
