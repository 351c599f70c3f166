"""Tool-output strategies: shrink tool traffic in place instead of dropping steps.

- `tool_result_truncation` (aisopod, 003): cut every oversized tool result and mark the cut.
- `observation_masking`: replace tool results older than the last few steps by a short note.
- `clear_tool_uses`: replace the results (and optionally the arguments) of all but the most
  recent tool uses, as a provider's server-side context editing does.

"Tool result" means any observation (`Message.is_observation`): a `tool` message, or the `user`
turn in which a text-action agent (mini-swe-agent, SWE-agent, OpenHands' CodeAct) is shown its
command's output; its step (the action with its observations) is one tool use, named `command`.

No message is dropped, so tool pairing is untouched. A changed message is a copy with origin
`compacted_modified` and a `compaction` entry in its metadata saying what was done; everything
else is returned as the very same object (prompt-cache prefixes are computed by identity). A
changed message is built once per original and parameters (`common.derived`): later compactions
and replays get the same copy, with its token count already cached. Pinned
steps (any message with importance >= 10) and the leading system messages are never changed.
A message already masked or cleared is left as it is, so compacting twice changes nothing more,
and a result is only replaced by a placeholder when the placeholder is shorter than the result.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from functools import partial
from itertools import accumulate, chain, compress, count, islice
from operator import attrgetter, is_, is_not
from typing import Any, ClassVar

from workbench.compaction import CompactionEnv, Context
from workbench.errors import ConfigError
from workbench.registry import param, register_strategy
from workbench.session import Message, Step, ToolCall
from workbench.strategies.common import (
    BodySteps,
    StepList,
    body_steps,
    derived,
    rewrite_run,
    settle,
    settled_steps,
    steps_of,
)

TRUNCATION_MARKER = "[truncated]"
TRUNCATION_SEPARATOR = "\n"
CLEARED_ARGUMENTS = '{"cleared": true}'
#: Fields a placeholder may use: `{chars}` (length of the replaced text) and `{tool}` (tool name).
PLACEHOLDER_FIELDS = ("chars", "tool")
METADATA_KEY = "compaction"  # "truncated" | "masked" | "cleared" on messages these kinds changed
_messages = attrgetter("messages")
_tool_uses = attrgetter("tool_uses")


def _placeholder_param(name: str, value: str) -> str:
    """Check a placeholder template (the registry has checked that it is a string)."""
    if not value.strip():
        raise ConfigError(f"{name} must be a non-empty string, not {value!r}")
    try:
        value.format(chars=0, tool="tool")
    except (KeyError, IndexError, ValueError) as exc:
        fields = ", ".join("{" + f + "}" for f in PLACEHOLDER_FIELDS)
        raise ConfigError(
            f"{name} {value!r} is not a valid template ({exc}); it may use {fields}; "
            "write {{ and }} for literal braces"
        ) from exc
    return value


def _with_text(message: Message, text: str, how: str, **details: Any) -> Message:
    """A copy of `message` whose text is `text` (non-text parts kept), marked as modified."""
    content: Any = text
    if isinstance(message.content, tuple) and message.has_non_text_parts and how == "truncated":
        content = ({"type": "text", "text": text}, *(p for p in message.content if p.get("type") != "text"))
    metadata = {**message.metadata, METADATA_KEY: how, **details}
    return message.replace(content=content, origin="compacted_modified", metadata=metadata)


def _already_replaced(message: Message) -> bool:
    return message.metadata.get(METADATA_KEY) in ("masked", "cleared")


def _call_names(step: Step) -> dict[str, str]:
    return {c.id: c.name for c in step.head.tool_calls} if step.kind == "assistant" else {}


#: The tool name a placeholder gives a user observation, and the use id `clear_tool_uses` gives its action.
TEXT_ACTION = "command"


def _tool_name(message: Message, names: Mapping[str, str]) -> str:
    if message.role != "tool":
        return TEXT_ACTION
    return message.name or names.get(message.tool_call_id or "", "") or "tool"


def _use_id(message: Message) -> str | None:
    """The tool use an observation answers: its call's id, or `TEXT_ACTION` for a user observation."""
    return message.tool_call_id if message.role == "tool" else TEXT_ACTION


def _placeholder_for(message: Message, placeholder: str, tool_name: str, how: str) -> Message | None:
    """`message` with its text replaced by the placeholder, or None when the placeholder is not shorter."""
    text = message.text
    note = placeholder.format(chars=len(text), tool=tool_name)
    if len(note) < len(text):
        return _with_text(message, note, how, original_chars=len(text))
    return None


def _masked(message: Message, step: Step, placeholder: str, how: str) -> Message | None:
    """The placeholder version of tool result `message` of `step` (built once per message), or None
    when it stays as it is (already masked or cleared, or not longer than its placeholder)."""
    if _already_replaced(message):
        return None
    tool_name = _tool_name(message, {} if message.name else _call_names(step))
    build = partial(_placeholder_for, message, placeholder, tool_name, how)
    return derived(message, (how, placeholder, tool_name), build)


class _Rewriter:
    """Builds a strategy's output from ranges of rewritten steps; keeps the input list when nothing changed.

    A strategy rewrites each step on its own (`rewrite` takes a function of the step alone that
    gives the output step, the step itself when nothing changes). Every output of such a function
    is marked settled under the strategy's `key` (`common.settle`): the next compaction starts
    after the leading settled steps, which a rewrite would give back unchanged. A rewritten step is
    built once per original (`common.derived`), and per step of the session the replay lends
    (`common.rewrite_run`), so later compactions and replays meet the very same steps in one look.
    The output carries its steps (`common.StepList`) for the next strategy or compaction: a
    replacement has its original's role, tool_call_id and tool call ids, so the output groups the
    same as the input, each step as many messages long, and a step pairs its calls and results
    when its input did.
    """

    def __init__(self, context: Context, key: str, start: int):
        """Steps before `start` are kept as they are (they are settled under `key`)."""
        self.context = context
        self.key = key
        self.known = body_steps(context)
        self.steps = steps = self.known.steps
        self.leading = leading = len(context.system)
        self.out = StepList(islice(context.messages, leading + self.known.offset(start)), leading, None)
        self.new = list(steps)
        self.first_changed = len(steps)
        self.counted = self.known.counted or ""
        self.tokens = None if self.known.tokens is None or not self.counted else list(self.known.tokens)
        self.settled_through = start  # every output step before it is settled under `key`

    def rewrite(self, start: int, stop: int, rewrite: Callable[[Step], Step]) -> None:
        """Steps [start:stop] replaced by `rewrite(step)` (a function of the step and the strategy alone)."""
        if stop <= start:
            return
        outputs = rewrite_run(self.steps, start, stop, self.key, rewrite)
        self._put(start, stop, outputs)
        if start == self.settled_through:
            self.settled_through = stop

    def rewrite_one(self, index: int, new: Step | None) -> None:
        """Step `index` replaced by `new` (None: kept as it is), not settled: a later compaction may change more."""
        self._put(index, index + 1, [new or self.steps[index]])

    def _put(self, start: int, stop: int, outputs: list[Step]) -> None:
        self.out += chain.from_iterable(map(_messages, outputs))
        inputs = self.steps[start:stop]
        if not all(map(is_, outputs, inputs)):
            self.first_changed = min(self.first_changed, start)
            if self.tokens is not None:  # a changed step's tokens, where an earlier compaction counted it
                for offset in compress(count(), map(is_not, outputs, inputs)):
                    self.tokens[start + offset] = outputs[offset]._token_cache.get(self.counted)
        self.new[start:stop] = outputs

    def result(self, rest: int | None = None) -> list[Message]:
        """The output, with the steps from `rest` on kept as they are."""
        known, leading = self.known, self.leading
        changed = self.first_changed  # other rewrites' settled steps are known only before it
        settled = {name: min(count, changed) for name, count in known.settled.items()}
        settled[self.key] = max(settled.get(self.key, 0), self.settled_through)
        if changed == len(self.steps):
            return StepList(
                self.context.messages,
                leading,
                BodySteps(
                    self.steps,
                    known.lengths,
                    known.strays,
                    known.pinned,
                    settled,
                    known.paired,
                    known.tokens,
                    known.counted,
                ),
            )
        if rest is not None:
            self.out.extend(islice(self.context.messages, leading + known.offset(rest), None))
        self.out.known = BodySteps(
            self.new,
            known.lengths,
            known.strays,
            known.pinned,
            settled,
            known.paired,
            self.tokens,
            None if self.tokens is None else self.counted,
        )
        return self.out


def _rewritten(step: Step, rewrite: Callable[[Message], Message | None]) -> Step | None:
    """`step` with each message rewritten, or None when no message changes."""
    replacements = [rewrite(m) for m in step.messages]
    if not any(replacements):
        return None
    return Step(tuple(m if r is None else r for m, r in zip(step.messages, replacements, strict=True)))


def _step_rewrite(
    step: Step, *, key: str, detail: Hashable, rewrite: Callable[[Message], Message | None], settled: bool = True
) -> Step:
    """`step` with each message rewritten (`rewrite` gives None to keep one), built once per step and
    (`key`, `detail`), and marked settled under `key` (unless `settled` is False); a pinned step is
    kept as it is."""
    if step.pinned:
        return settle(step, key)
    new = derived(step, (key, detail), partial(_rewritten, step, rewrite)) or step
    return settle(new, key) if settled else new


def _strategy_key(strategy: Any) -> str:
    """The name of a strategy's per-step rewrite: its kind and parameters (`repr` of the frozen dataclass)."""
    return repr(strategy)


@register_strategy("tool_result_truncation")
@dataclass(frozen=True)
class ToolResultTruncation:
    """Cut every tool result longer than `max_chars` characters.

    The new text is the first `max_chars` characters of the result, a newline and the marker
    `[truncated]`; non-text parts of the result are kept. A result this strategy cut before is
    not cut again.
    """

    summarizes: ClassVar[bool] = False

    max_chars: int = param(1000, doc="characters a tool result keeps before it is cut", min=1)

    def truncated(self, text: str) -> str:
        return text[: self.max_chars] + TRUNCATION_SEPARATOR + TRUNCATION_MARKER

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        key = _strategy_key(self)
        steps = steps_of(context)
        start = settled_steps(context, key)
        rewriter = _Rewriter(context, key, start)
        rewriter.rewrite(start, len(steps), partial(_step_rewrite, key=key, detail=None, rewrite=self._rewrite))
        return rewriter.result()

    def _rewrite(self, message: Message) -> Message | None:
        if not message.is_observation or len(message.text) <= self.max_chars:
            return None
        return derived(message, self, partial(self._cut, message))

    def _cut(self, message: Message) -> Message | None:
        """`message` cut to `max_chars`, or None when this strategy (at this size) cut it before or
        another tool kind replaced it."""
        text = message.text
        if text[self.max_chars :] == TRUNCATION_SEPARATOR + TRUNCATION_MARKER or _already_replaced(message):
            return None
        return _with_text(message, self.truncated(text), "truncated", original_chars=len(text))


@register_strategy("observation_masking")
@dataclass(frozen=True)
class ObservationMasking:
    """Replace the tool results of all but the last `keep_recent` steps by a short placeholder.

    The assistant messages and their tool calls stay, so the model still sees what it did, only not
    what it saw. `placeholder` may use `{chars}` (the length of the hidden output) and `{tool}`.
    """

    summarizes: ClassVar[bool] = False

    keep_recent: int = param(10, doc="most recent steps whose tool results stay", min=0)
    placeholder: str = param(
        "[earlier {tool} output hidden to save context ({chars} chars)]",
        doc="text replacing a hidden result; may use {tool} and {chars}",
    )

    def __post_init__(self) -> None:
        _placeholder_param("placeholder", self.placeholder)

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        key = _strategy_key(self)
        steps = steps_of(context)
        cut = max(0, len(steps) - self.keep_recent)
        start = settled_steps(context, key, cut)
        rewriter = _Rewriter(context, key, start)
        rewriter.rewrite(start, cut, partial(self._mask_step, key=key))
        return rewriter.result(rest=cut)

    def _mask_step(self, step: Step, *, key: str) -> Step:
        mask = partial(_mask_result, step=step, placeholder=self.placeholder, how="masked")
        return _step_rewrite(step, key=key, detail=None, rewrite=mask)


def _mask_result(
    message: Message, *, step: Step, placeholder: str, how: str, only: frozenset[str] | None = None
) -> Message | None:
    """The placeholder version of `message` when it is an observation (answering one of the uses
    `only` names, when given), else None."""
    if not message.is_observation or (only is not None and _use_id(message) not in only):
        return None
    return _masked(message, step, placeholder, how)


@register_strategy("clear_tool_uses")
@dataclass(frozen=True)
class ClearToolUses:
    """Clear the results of every tool use except the `keep` most recent ones.

    A tool use is one tool call with its result, counted across the whole context in order; the
    last `keep` uses are untouched whatever their tool. Older results become `placeholder` (which
    may use `{chars}` and `{tool}`); with `clear_inputs = true` the older calls' arguments become
    `{"cleared": true}` too. Uses of the tools named in `exclude_tools` are never cleared.
    """

    summarizes: ClassVar[bool] = False

    keep: int = param(3, doc="most recent tool uses left untouched", min=0)
    clear_inputs: bool = param(False, doc="also replace the arguments of the cleared tool calls")
    exclude_tools: tuple[str, ...] = param((), doc="names of tools whose uses are never cleared")
    placeholder: str = param("[tool result cleared]", doc="text replacing a cleared result; may use {tool} and {chars}")

    def __post_init__(self) -> None:
        _placeholder_param("placeholder", self.placeholder)

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        key = _strategy_key(self)
        steps = steps_of(context)
        uses_before = list(accumulate(map(_tool_uses, steps), initial=0))  # tool uses before each step
        clear_before = uses_before[-1] - self.keep  # tool uses with a lower ordinal are old enough to clear
        stop = min(bisect_left(uses_before, clear_before), len(steps))  # every later use is recent enough
        whole = max(0, min(bisect_right(uses_before, clear_before) - 1, stop))  # steps before: every use old enough
        start = settled_steps(context, key, whole)
        rewriter = _Rewriter(context, key, start)
        rewriter.rewrite(start, whole, partial(self._clear_step, key=key, cleared=None))
        if whole < stop:  # the step holding the oldest uses kept: only its older uses are cleared
            step = steps[whole]
            calls = step.head.tool_calls
            cleared = frozenset(
                c.id
                for i, c in enumerate(calls, start=uses_before[whole])
                if i < clear_before and c.name not in self.exclude_tools
            )
            rewriter.rewrite_one(whole, self._clear_step(step, key=key, cleared=cleared, settled=False))
        return rewriter.result(rest=stop)

    def _clear_step(self, step: Step, *, key: str, cleared: frozenset[str] | None, settled: bool = True) -> Step:
        """`step` with the uses named in `cleared` cleared (None: every use whose tool is not excluded)."""
        calls = step.head.tool_calls if step.kind == "assistant" else ()
        if cleared is None:
            cleared = frozenset(c.id for c in calls if c.name not in self.exclude_tools)
            if not calls and step.tool_uses and TEXT_ACTION not in self.exclude_tools:
                cleared = frozenset((TEXT_ACTION,))
        rewrite = partial(self._clear, step=step, cleared=cleared)
        return _step_rewrite(step, key=key, detail=cleared, rewrite=rewrite, settled=settled)

    def _clear(self, message: Message, *, step: Step, cleared: frozenset[str]) -> Message | None:
        if not cleared:
            return None
        if message is step.head:
            if not self.clear_inputs:
                return None
            return derived(message, ("cleared_inputs", cleared), partial(self._clear_arguments, message, cleared))
        return _mask_result(message, step=step, placeholder=self.placeholder, how="cleared", only=cleared)

    @staticmethod
    def _clear_arguments(message: Message, cleared: frozenset[str]) -> Message | None:
        calls: list[ToolCall] = []
        changed = False
        for call in message.tool_calls:
            if call.id in cleared and len(CLEARED_ARGUMENTS) < len(call.arguments):
                calls.append(ToolCall(id=call.id, name=call.name, arguments=CLEARED_ARGUMENTS))
                changed = True
            else:
                calls.append(call)
        if not changed:
            return None
        metadata = {**message.metadata, METADATA_KEY: "cleared_inputs"}
        return message.replace(tool_calls=tuple(calls), origin="compacted_modified", metadata=metadata)


__all__ = [
    "CLEARED_ARGUMENTS",
    "ClearToolUses",
    "ObservationMasking",
    "PLACEHOLDER_FIELDS",
    "TRUNCATION_MARKER",
    "ToolResultTruncation",
]
