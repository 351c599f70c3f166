"""Helpers shared by strategy kinds: step arithmetic, transcripts for summarizers, the default fallback."""

from __future__ import annotations

from collections.abc import Sequence

from workbench.compaction import CompactionEnv, Context
from workbench.session import Message, Step, flatten

DEFAULT_FALLBACK_FRACTION = 0.4


def last_steps_for_messages(steps: Sequence[Step], keep_messages: int) -> int:
    """How many trailing steps hold the last `keep_messages` messages, widened to whole steps.

    The cut moves back to a step boundary so a tool call and its results stay together.
    """
    if keep_messages <= 0:
        return 0
    kept_messages = 0
    count = 0
    for step in reversed(steps):
        if kept_messages >= keep_messages:
            break
        kept_messages += len(step.messages)
        count += 1
    return count


def keep_last_fraction(context: Context, fraction: float = DEFAULT_FALLBACK_FRACTION) -> list[Message]:
    """Leading system messages plus whole trailing steps holding about `fraction` of the body's messages.

    Pinned steps before the cut are kept too. This is the fallback of every strategy without one
    of its own (`on_failure = "fallback"`).
    """
    steps = context.steps
    keep = last_steps_for_messages(steps, max(1, round(len(context.body) * fraction)))
    cut = len(steps) - keep
    kept = [s for s in steps[:cut] if s.pinned] + list(steps[cut:])
    return [*context.system, *flatten(kept)]


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
    texts = {m.text for m in messages if is_summary(m)}
    env.summaries[:] = [s for s in env.summaries if s in texts]


__all__ = ["MIN_SUMMARY_TOKENS", "SUMMARY_RATIO", "CompactionEnv", "Context", "DEFAULT_FALLBACK_FRACTION",
           "is_recorded_summary", "is_summary", "keep_last_fraction", "keep_summaries_in",
           "last_steps_for_messages", "render_transcript", "summary_max_tokens", "task_index", "usable_window"]
