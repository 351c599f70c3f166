"""Tool-output strategies: shrink tool traffic in place instead of dropping steps.

- `tool_result_truncation` (aisopod, 003): cut every oversized tool result and mark the cut.
- `observation_masking`: replace tool results older than the last few steps by a short note.
- `clear_tool_uses`: replace the results (and optionally the arguments) of all but the most
  recent tool uses, as a provider's server-side context editing does.

No message is dropped, so tool pairing is untouched. A changed message is a copy with origin
`compacted_modified` and a `compaction` entry in its metadata saying what was done; everything
else is returned as the very same object (prompt-cache prefixes are computed by identity). Pinned
steps (any message with importance >= 10) and the leading system messages are never changed.
A message already masked or cleared is left as it is, so compacting twice changes nothing more,
and a result is only replaced by a placeholder when the placeholder is shorter than the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.compaction import CompactionEnv, Context
from workbench.errors import ConfigError
from workbench.registry import param, register_strategy
from workbench.session import Message, Step, ToolCall

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


def _rewrite(context: Context, rewrite_step: Callable[[int, Step], Sequence[Message] | None]) -> list[Message]:
    """Leading system + each body step as `rewrite_step` returns it (None: unchanged).

    Returns the original list (same objects) when no step changed.
    """
    out = list(context.system)
    changed = False
    for index, step in enumerate(context.steps):
        new = rewrite_step(index, step)
        if new is None:
            out.extend(step.messages)
        else:
            changed = True
            out.extend(new)
    return out if changed else list(context.messages)


def _mask_results(step: Step, should_mask: Callable[[Message], bool], placeholder: str,
                  how: str) -> list[Message] | None:
    """The step with every tool result chosen by `should_mask` replaced (None when nothing changed)."""
    names = _call_names(step)
    new: list[Message] = []
    changed = False
    for message in step.messages:
        if message.role == "tool" and not _already_replaced(message) and should_mask(message):
            text = message.text
            note = placeholder.format(chars=len(text), tool=_tool_name(message, names))
            if len(note) < len(text):
                new.append(_with_text(message, note, how, original_chars=len(text)))
                changed = True
                continue
        new.append(message)
    return new if changed else None


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
        limit = self.max_chars
        suffix = TRUNCATION_SEPARATOR + TRUNCATION_MARKER

        def rewrite(_index: int, step: Step) -> list[Message] | None:
            if step.pinned:
                return None
            new: list[Message] = []
            changed = False
            for message in step.messages:
                if message.role == "tool":
                    text = message.text
                    # the second test keeps a result cut before (by this size) as it is
                    if len(text) > limit and text[limit:] != suffix and not _already_replaced(message):
                        new.append(_with_text(message, self.truncated(text), "truncated", original_chars=len(text)))
                        changed = True
                        continue
                new.append(message)
            return new if changed else None

        return _rewrite(context, rewrite)


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
        cut = len(context.steps) - self.keep_recent

        def rewrite(index: int, step: Step) -> list[Message] | None:
            if index >= cut or step.pinned:
                return None
            return _mask_results(step, lambda m: True, self.placeholder, "masked")

        return _rewrite(context, rewrite)


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
        steps = context.steps
        total = sum(len(s.head.tool_calls) for s in steps if s.kind == "assistant")
        clear_before = total - self.keep  # tool uses with a lower ordinal are old enough to clear
        excluded = set(self.exclude_tools)
        seen = 0

        def rewrite(_index: int, step: Step) -> list[Message] | None:
            nonlocal seen
            if step.kind != "assistant" or not step.head.tool_calls:
                return None
            calls = step.head.tool_calls
            first = seen
            seen += len(calls)
            if step.pinned or first >= clear_before:
                return None
            cleared = {c.id for i, c in enumerate(calls, start=first)
                       if i < clear_before and c.name not in excluded}
            if not cleared:
                return None
            new = _mask_results(step, lambda m: m.tool_call_id in cleared, self.placeholder, "cleared")
            if self.clear_inputs:
                head = self._clear_arguments(step.head, cleared)
                if head is not None:
                    new = [head, *(new if new is not None else step.messages)[1:]]
            return new

        return _rewrite(context, rewrite)

    @staticmethod
    def _clear_arguments(message: Message, cleared: set[str]) -> Message | None:
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
