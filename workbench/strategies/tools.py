"""Tool-output strategies: shrink tool traffic in place instead of dropping steps.

- `tool_result_truncation` (aisopod, 003): cut every oversized tool result and mark the cut.
- `observation_masking`: replace tool results older than the last few steps by a short note.
- `clear_tool_uses`: replace the results (and optionally the arguments) of all but the most
  recent tool uses, as a provider's server-side context editing does.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from workbench.compaction import CompactionEnv, Context
from workbench.errors import ConfigError
from workbench.registry import param, register_strategy
from workbench.session import Message, Step, ToolCall
from workbench.strategies.common import derived, has_pins, remember_steps, steps_of

TRUNCATION_MARKER = "[truncated]"
TRUNCATION_SEPARATOR = "\n"
CLEARED_ARGUMENTS = '{"cleared": true}'
#: Fields a placeholder may use: `{chars}` (length of the replaced text) and `{tool}` (tool name).
PLACEHOLDER_FIELDS = ("chars", "tool")
METADATA_KEY = "compaction"  # "truncated" | "masked" | "cleared" on messages these kinds changed


def _placeholder_param(name: str, value: str) -> str:
    """Check a placeholder template (the registry has checked that it is a string)."""
    if not value.strip():
        raise ConfigError(f"{name} must be a non-empty string, not {value!r}")
    try:
        value.format(chars=0, tool="tool")
    except (KeyError, IndexError, ValueError) as exc:
        fields = ", ".join("{" + f + "}" for f in PLACEHOLDER_FIELDS)
        raise ConfigError(f"{name} {value!r} is not a valid template ({exc}); it may use {fields}; "
                          "write {{ and }} for literal braces") from exc
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


def _tool_name(message: Message, names: Mapping[str, str]) -> str:
    return message.name or names.get(message.tool_call_id or "", "") or "tool"


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
    """Builds a strategy's output step by step; keeps the input list when nothing changed.

    The output's steps are recorded (`common.remember_steps`) for the next strategy or compaction:
    a replacement has its original's role, tool_call_id and tool call ids, so the output groups the
    same as the input.
    """

    def __init__(self, context: Context):
        self.context = context
        self.out = list(context.system)
        self.new_steps: dict[int, Step] = {}

    def keep(self, messages: Sequence[Message]) -> None:
        self.out.extend(messages)

    def put(self, index: int, step: Step, replacements: Sequence[Message | None]) -> None:
        """Step `index`, each message swapped for its replacement (None: kept as it is)."""
        if not any(replacements):
            self.out.extend(step.messages)
            return
        messages = tuple(m if r is None else r for m, r in zip(step.messages, replacements, strict=True))
        self.new_steps[index] = Step(messages)
        self.out.extend(messages)

    def result(self) -> list[Message]:
        if not self.new_steps:
            return list(self.context.messages)
        steps = list(steps_of(self.context))
        for index, new in self.new_steps.items():
            steps[index] = new
        remember_steps(self.out[len(self.context.system):], steps)
        return self.out


@register_strategy("tool_result_truncation")
@dataclass(frozen=True)
class ToolResultTruncation:
    """Cut every tool result longer than `max_chars` characters.

    The new text is the first `max_chars` characters of the result, a newline and the marker
    `[truncated]`; non-text parts of the result are kept. A result this strategy cut before is
    not cut again.
    """

    max_chars: int = param(1000, doc="characters a tool result keeps before it is cut", min=1)

    def truncated(self, text: str) -> str:
        return text[: self.max_chars] + TRUNCATION_SEPARATOR + TRUNCATION_MARKER

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        rewriter = _Rewriter(context)
        pins = has_pins(context)
        limit = self.max_chars
        for index, step in enumerate(steps_of(context)):
            if pins and step.pinned:
                rewriter.keep(step.messages)
                continue
            rewriter.put(index, step, [
                derived(m, self, partial(self._cut, m)) if m.role == "tool" and len(m.text) > limit else None
                for m in step.messages])
        return rewriter.result()

    def _cut(self, message: Message) -> Message | None:
        """`message` cut to `max_chars`, or None when this strategy (at this size) cut it before or
        another tool kind replaced it."""
        text = message.text
        if text[self.max_chars:] == TRUNCATION_SEPARATOR + TRUNCATION_MARKER or _already_replaced(message):
            return None
        return _with_text(message, self.truncated(text), "truncated", original_chars=len(text))


@register_strategy("observation_masking")
@dataclass(frozen=True)
class ObservationMasking:
    """Replace the tool results of all but the last `keep_recent` steps by a short placeholder.

    The assistant messages and their tool calls stay, so the model still sees what it did, only not
    what it saw. `placeholder` may use `{chars}` (the length of the hidden output) and `{tool}`.
    """

    keep_recent: int = param(10, doc="most recent steps whose tool results stay", min=0)
    placeholder: str = param("[earlier {tool} output hidden to save context ({chars} chars)]",
                             doc="text replacing a hidden result; may use {tool} and {chars}")

    def __post_init__(self) -> None:
        _placeholder_param("placeholder", self.placeholder)

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        steps = steps_of(context)
        cut = max(0, len(steps) - self.keep_recent)
        rewriter = _Rewriter(context)
        pins = has_pins(context)
        placeholder = self.placeholder
        masked_messages = 0
        for index, step in enumerate(steps[:cut]):
            masked_messages += len(step.messages)
            if pins and step.pinned:
                rewriter.keep(step.messages)
                continue
            rewriter.put(index, step, [_masked(m, step, placeholder, "masked") if m.role == "tool" else None
                                       for m in step.messages])
        rewriter.keep(context.body[masked_messages:])
        return rewriter.result()


@register_strategy("clear_tool_uses")
@dataclass(frozen=True)
class ClearToolUses:
    """Clear the results of every tool use except the `keep` most recent ones.

    A tool use is one tool call with its result, counted across the whole context in order; the
    last `keep` uses are untouched whatever their tool. Older results become `placeholder` (which
    may use `{chars}` and `{tool}`); with `clear_inputs = true` the older calls' arguments become
    `{"cleared": true}` too. Uses of the tools named in `exclude_tools` are never cleared.
    """

    keep: int = param(3, doc="most recent tool uses left untouched", min=0)
    clear_inputs: bool = param(False, doc="also replace the arguments of the cleared tool calls")
    exclude_tools: tuple[str, ...] = param((), doc="names of tools whose uses are never cleared")
    placeholder: str = param("[tool result cleared]", doc="text replacing a cleared result; may use {tool} and {chars}")

    def __post_init__(self) -> None:
        _placeholder_param("placeholder", self.placeholder)

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        steps = steps_of(context)
        total = sum(len(s.head.tool_calls) for s in steps if s.kind == "assistant")
        clear_before = total - self.keep  # tool uses with a lower ordinal are old enough to clear
        excluded = set(self.exclude_tools)
        placeholder = self.placeholder
        rewriter = _Rewriter(context)
        pins = has_pins(context)
        seen = 0  # tool uses before the current step
        done = 0  # body messages handled
        for index, step in enumerate(steps):
            if seen >= clear_before:
                break  # every later use is recent enough
            done += len(step.messages)
            calls = step.head.tool_calls
            if step.kind != "assistant" or not calls or (pins and step.pinned):
                seen += len(calls) if step.kind == "assistant" else 0
                rewriter.keep(step.messages)
                continue
            cleared = frozenset(c.id for i, c in enumerate(calls, start=seen)
                                if i < clear_before and c.name not in excluded)
            seen += len(calls)
            if not cleared:
                rewriter.keep(step.messages)
                continue
            head = step.head
            new_head = None
            if self.clear_inputs:
                new_head = derived(head, ("cleared_inputs", cleared), partial(self._clear_arguments, head, cleared))
            rewriter.put(index, step, [new_head, *(
                _masked(m, step, placeholder, "cleared") if m.role == "tool" and m.tool_call_id in cleared else None
                for m in step.messages[1:])])
        rewriter.keep(context.body[done:])
        return rewriter.result()

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


__all__ = ["CLEARED_ARGUMENTS", "ClearToolUses", "ObservationMasking", "PLACEHOLDER_FIELDS",
           "TRUNCATION_MARKER", "ToolResultTruncation"]
