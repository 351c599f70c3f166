"""Summarizing strategy kinds: progressive, full, split, adaptive chunking and handoff.

All five share these rules:

- the leading system messages are kept as they are, and every message that is kept is the very
  same `Message` object (the replay engine relies on identity to measure prompt-cache reuse);
- pinned messages (importance >= 10) are kept verbatim, with the rest of their step, so a pinned
  tool call keeps its results and a pinned result keeps its call;
- everything is cut at step boundaries (`workbench.session.group_steps`), so no tool call or tool
  result is ever orphaned;
- a summary is a `user` message with origin `compacted_synthetic`. `user` rather than `system`
  because many providers accept system text only at the very start of the conversation
  (Anthropic, Gemini) and some reject an assistant message that opens the conversation; a user
  message is accepted everywhere;
- an earlier synthetic summary found in the part being condensed is not re-read as conversation
  but handed to the summarizer as the existing summary, so its facts carry forward;
- each summarizer call goes through `env.summarize(...)` (which records usage and raises
  `SummarizerError`), and each summary put into the context is passed to `env.record_summary`;
- when there is nothing to condense the context is returned unchanged;
- `prompt` (every kind) replaces the built-in instructions (`workbench.strategies.prompts`); the
  default "" means the built-in prompt. A prompt containing `{transcript}` / `{existing_summary}`
  is sent as one user message with the material filled in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workbench.compaction import CompactionEnv, Context
from workbench.errors import ConfigError
from workbench.registry import register_strategy
from workbench.session import Message, Step, flatten
from workbench.strategies import prompts
from workbench.strategies.common import is_summary, render_transcript

TOOL_NO_RESPONSE = "no response (this tool call never returned a result)"
AFTER_TOOLS_TEXT = "(tool results received)"
ACKNOWLEDGEMENT = "acknowledgement"


# ---------------------------------------------------------------------------------------------
# shared helpers


def is_acknowledgement(message: Message) -> bool:
    """The assistant reply a strategy inserts after a summary (not itself a summary)."""
    return message.origin == "compacted_synthetic" and message.metadata.get("compaction") == ACKNOWLEDGEMENT


def is_prior_summary(message: Message) -> bool:
    """A summary an earlier compaction wrote (fed back to the summarizer as the existing summary)."""
    return is_summary(message) and not is_acknowledgement(message)


def summary_message(text: str, strategy: str, **metadata: Any) -> Message:
    return Message(role="user", content=text, origin="compacted_synthetic",
                   metadata={"compaction": "summary", "strategy": strategy, **metadata})


def acknowledgement_message(strategy: str) -> Message:
    return Message(role="assistant", content=prompts.SPLIT_ACKNOWLEDGEMENT, origin="compacted_synthetic",
                   metadata={"compaction": ACKNOWLEDGEMENT, "strategy": strategy})


def split_material(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """(the text of earlier summaries among `messages` or None, the other messages to transcribe).

    Acknowledgements are left out of both: they carry no information.
    """
    existing = [m.text for m in messages if is_prior_summary(m) and m.text.strip()]
    rest = [m for m in messages if not is_summary(m)]
    return ("\n\n".join(existing) if existing else None), rest


def has_new_material(messages: Sequence[Message]) -> bool:
    return any(not is_summary(m) for m in messages)


def last_user_request(messages: Sequence[Message]) -> str:
    """The user's latest request, for `summarize_full` to quote.

    Walking back from the end: the first real (not synthetic) unpinned user message, unless an
    earlier `summarize_full` summary comes first, whose quoted request is then carried over.
    Pinned user messages (usually standing instructions, and moved after the summary by
    `summarize_full`) count only when nothing else is found.
    """
    pinned_fallback = ""
    for message in reversed(messages):
        if message.role != "user":
            continue
        if is_summary(message):
            carried = message.metadata.get("last_user_request")
            if carried:
                return str(carried)
        elif message.text.strip():
            if not message.pinned:
                return message.text
            pinned_fallback = pinned_fallback or message.text
    return pinned_fallback


def clean_history(messages: Sequence[Message]) -> list[Message]:
    """The history made well-formed for a summarizer (001's cleaning).

    Every tool call gets a result (a "no response" filler where the recording has none) and the
    history does not end with a tool message (an assistant note is appended). The original
    messages are reused; fillers are new `compacted_synthetic` messages.
    """
    out: list[Message] = []
    pending: dict[str, str] = {}

    def flush() -> None:
        for call_id, name in pending.items():
            out.append(Message(role="tool", content=TOOL_NO_RESPONSE, tool_call_id=call_id, name=name,
                               origin="compacted_synthetic"))
        pending.clear()

    for message in messages:
        if message.role == "tool":
            pending.pop(message.tool_call_id or "", None)
        else:
            flush()
        out.append(message)
        if message.role == "assistant" and message.tool_calls:
            pending.update((call.id, call.name) for call in message.tool_calls)
    flush()
    if out and out[-1].role == "tool":
        out.append(Message(role="assistant", content=AFTER_TOOLS_TEXT, origin="compacted_synthetic"))
    return out


def unchanged(context: Context) -> list[Message]:
    return list(context.messages)


def _check_prompt(prompt: Any) -> None:
    if not isinstance(prompt, str):
        raise ConfigError(f"prompt must be a string (empty for the built-in prompt), not {type(prompt).__name__}")


def _whole(owner: Any, name: str, minimum: int = 0) -> None:
    """Check that parameter `name` is a whole number >= minimum (TOML's 3.0 becomes 3)."""
    value = getattr(owner, name)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
        object.__setattr__(owner, name, value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be a whole number >= {minimum}, not {value!r}")


class _Summarizing:
    """Mixin: one summarizer call from a prompt and a list of messages."""

    kind: str
    prompt: str
    default_prompt: str = prompts.STRUCTURED_PROMPT

    def _prompt(self) -> str:
        """The `prompt` parameter, or the kind's built-in prompt when it is empty."""
        return self.prompt if self.prompt.strip() else self.default_prompt

    def _summarize(self, env: CompactionEnv, messages: Sequence[Message], *, purpose: str,
                   always_existing: bool = False) -> str:
        """Summarize `messages`; earlier summaries among them are sent as the existing summary.

        With `always_existing`, the existing-summary section is sent even when there is none
        (saying so), as progressive summarization does.
        """
        existing, rest = split_material(messages)
        if existing is None and always_existing:
            existing = ""
        request = prompts.build_request(self._prompt(), render_transcript(rest), existing)
        return env.summarize(request, purpose=purpose).strip()


# ---------------------------------------------------------------------------------------------
# summarize_progressive (000)


@register_strategy("summarize_progressive")
@dataclass(frozen=True)
class SummarizeProgressive(_Summarizing):
    """Fold the older unpinned steps into one running summary; keep pinned and recent steps.

    The existing synthetic summary (if any) is handed to the summarizer as the summary so far and
    replaced by the new one. `keep_recent = 0` is pure progressive summarization (every unpinned
    step is folded in); `keep_recent = N` keeps the last N unpinned steps verbatim. Result:
    [system..., summary, pinned and recent steps in their original order]. (Pinned steps normally
    precede the recent ones, which gives 000's [summary, pinned, recent]; a pinned step inside
    the recent window stays in place rather than being moved ahead of older steps.)
    """

    keep_recent: int = 0
    prompt: str = ""
    default_prompt = prompts.PROGRESSIVE_PROMPT

    def __post_init__(self) -> None:
        _whole(self, "keep_recent")
        _check_prompt(self.prompt)

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        steps = context.steps
        summaries = [s for s in steps if not s.pinned and is_summary(s.head)]
        candidates = [s for s in steps if not s.pinned and not is_summary(s.head)]
        if not candidates or (self.keep_recent and len(candidates) <= self.keep_recent):
            return unchanged(context)
        cut = len(candidates) - self.keep_recent
        to_summarize = candidates[:cut]
        summarized = {id(s) for s in to_summarize} | {id(s) for s in summaries}
        text = self._summarize(env, flatten(summaries + to_summarize), purpose="summary",
                               always_existing=True)
        content = prompts.PROGRESSIVE_HEADER + text
        env.record_summary(content)
        kept = [s for s in steps if id(s) not in summarized]
        return [*context.system, summary_message(content, self.kind), *flatten(kept)]


# ---------------------------------------------------------------------------------------------
# summarize_full (001)


@register_strategy("summarize_full")
@dataclass(frozen=True)
class SummarizeFull(_Summarizing):
    """Replace the whole history by one structured summary that ends with the last user request.

    The history is cleaned first (`clean_history`), then everything after the system messages is
    summarized with the structured prompt. Result: [system..., user: summary + the latest user
    request quoted verbatim]. Pinned steps are not summarized but kept verbatim after the summary.
    """

    prompt: str = ""
    default_prompt = prompts.STRUCTURED_PROMPT

    def __post_init__(self) -> None:
        _check_prompt(self.prompt)

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        pinned = [s for s in context.steps if s.pinned]
        material = flatten(s for s in context.steps if not s.pinned)
        if not has_new_material(material):
            return unchanged(context)
        text = self._summarize(env, clean_history(material), purpose="summary")
        request = last_user_request(context.body)
        content = text
        if request:
            content = f"{text}\n\n{prompts.LAST_REQUEST_LEAD}\n{prompts.quote(request)}"
        env.record_summary(content)
        message = summary_message(content, self.kind, last_user_request=request) if request else \
            summary_message(content, self.kind)
        return [*context.system, message, *flatten(pinned)]


# ---------------------------------------------------------------------------------------------
# summarize_split (002)


def split_index(steps: Sequence[Step], preserve: float) -> int:
    """Where the preserved tail starts, as a message index into the body the steps cover.

    The cut aims at keeping round(preserve x messages) messages (at least one when preserve > 0),
    and then moves to a step
    boundary so no tool result is separated from its call: forward (the tool pair is summarized
    with the older part) unless that would preserve nothing, then backward.
    """
    starts: list[int] = []
    total = 0
    for step in steps:
        starts.append(total)
        total += len(step.messages)
    if total == 0:
        return 0
    keep = int(total * preserve + 0.5)
    if preserve > 0:
        keep = max(1, keep)  # a positive preserve always keeps at least the last step
    target = total - keep
    boundaries = [*starts, total]
    if target in boundaries:
        return target
    forward = min(b for b in boundaries if b > target)
    if forward < total:
        return forward
    return max(b for b in boundaries if b < target)


@register_strategy("summarize_split")
@dataclass(frozen=True)
class SummarizeSplit(_Summarizing):
    """Summarize the older part of the history and keep about `preserve` of the messages verbatim.

    Result: [system..., user: "[COMPACT SUMMARY]" + summary, assistant: acknowledgement,
    pinned steps of the older part (verbatim), preserved tail...]. When the summarizer fails, the
    `fallback` keeps the same tail and puts a placeholder saying how many messages were dropped.
    """

    preserve: float = 0.4
    prompt: str = ""
    default_prompt = prompts.SPLIT_PROMPT

    def __post_init__(self) -> None:
        if isinstance(self.preserve, bool) or not isinstance(self.preserve, (int, float)) \
                or not 0.0 <= float(self.preserve) <= 1.0:
            raise ConfigError(f"preserve must be a fraction within [0, 1], not {self.preserve!r}")
        _check_prompt(self.prompt)

    def _parts(self, context: Context) -> tuple[list[Step], list[Step], list[Message]] | None:
        """(pinned older steps, unpinned older steps, preserved tail), or None if nothing to condense."""
        steps = context.steps
        split = split_index(steps, float(self.preserve))
        older: list[Step] = []
        count = 0
        for step in steps:
            if count >= split:
                break
            older.append(step)
            count += len(step.messages)
        preserved = flatten(steps[len(older):])
        pinned = [s for s in older if s.pinned]
        dropped = [s for s in older if not s.pinned]
        if not has_new_material(flatten(dropped)):
            return None
        return pinned, dropped, preserved

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        parts = self._parts(context)
        if parts is None:
            return unchanged(context)
        pinned, dropped, preserved = parts
        text = self._summarize(env, flatten(dropped), purpose="summary")
        content = prompts.COMPACT_SUMMARY_HEADER + text
        env.record_summary(content)
        return [*context.system, summary_message(content, self.kind), acknowledgement_message(self.kind),
                *flatten(pinned), *preserved]

    def fallback(self, context: Context, env: CompactionEnv) -> list[Message]:
        """Plain truncation: the same preserved tail, with a placeholder for what was dropped."""
        parts = self._parts(context)
        if parts is None:
            return unchanged(context)
        pinned, dropped, preserved = parts
        dropped_messages = flatten(dropped)
        topics = [m.text.strip().splitlines()[0][:80] for m in dropped_messages
                  if m.role == "user" and not is_summary(m) and m.text.strip()]
        text = (f"[Context truncated: {len(dropped_messages)} earlier "
                f"message{'s were' if len(dropped_messages) != 1 else ' was'} dropped without a summary "
                f"because the summarizer was unavailable.")
        if topics:
            shown = topics[:3] + ([f"... and {len(topics) - 3} more"] if len(topics) > 3 else [])
            text += " The user's requests in that part: " + "; ".join(f'"{t}"' for t in shown) + "."
        text += "]"
        placeholder = Message(role="user", content=text, origin="compacted_synthetic",
                              metadata={"compaction": "truncation", "strategy": self.kind,
                                        "dropped_messages": len(dropped_messages)})
        return [*context.system, placeholder, acknowledgement_message(self.kind), *flatten(pinned),
                *preserved]


# ---------------------------------------------------------------------------------------------
# adaptive_chunking (003)

BOUNDARIES = ("topic", "count")


@register_strategy("adaptive_chunking")
@dataclass(frozen=True)
class AdaptiveChunking(_Summarizing):
    """Summarize the older steps chunk by chunk, one synthetic message per chunk.

    The last `keep_recent` steps stay verbatim. The older ones are cut into chunks at step
    boundaries: with `boundary = "topic"` each new user request opens a chunk (and a chunk that
    would grow past `chunk_messages` is closed early); with `"count"` a chunk closes before it
    would exceed `chunk_messages` messages. Pinned steps and earlier summaries stay verbatim where
    they are and close the chunk before them, so relative order is preserved.
    """

    chunk_messages: int = 20
    boundary: str = "topic"
    keep_recent: int = 4
    prompt: str = ""
    default_prompt = prompts.CHUNK_PROMPT

    def __post_init__(self) -> None:
        _whole(self, "chunk_messages", 1)
        if self.boundary not in BOUNDARIES:
            raise ConfigError(f"boundary must be one of {', '.join(map(repr, BOUNDARIES))}, "
                              f"not {self.boundary!r}")
        _whole(self, "keep_recent")
        _check_prompt(self.prompt)

    def chunks(self, steps: Sequence[Step]) -> list[Step | list[Step]]:
        """The older steps as a sequence of kept steps (pinned, summaries) and chunks (lists of steps)."""
        out: list[Step | list[Step]] = []
        chunk: list[Step] = []
        size = 0

        def close() -> None:
            nonlocal chunk, size
            if chunk:
                out.append(chunk)
            chunk, size = [], 0

        for step in steps:
            if step.pinned or is_summary(step.head):
                close()
                out.append(step)
                continue
            new_topic = self.boundary == "topic" and step.kind == "user"
            if chunk and (new_topic or size + len(step.messages) > self.chunk_messages):
                close()
            chunk.append(step)
            size += len(step.messages)
        close()
        return out

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        steps = context.steps
        cut = len(steps) - self.keep_recent
        if cut <= 0:
            return unchanged(context)
        plan = self.chunks(steps[:cut])
        if not any(isinstance(item, list) for item in plan):
            return unchanged(context)
        out: list[Message] = list(context.system)
        for item in plan:
            if isinstance(item, Step):
                out.extend(item.messages)
                continue
            text = self._summarize(env, flatten(item), purpose="chunk_summary")
            content = prompts.CHUNK_HEADER + text
            env.record_summary(content)
            out.append(summary_message(content, self.kind, chunk_messages=sum(len(s.messages) for s in item)))
        out.extend(flatten(steps[cut:]))
        return out


# ---------------------------------------------------------------------------------------------
# handoff (a CLI agent's compaction)


@register_strategy("handoff")
@dataclass(frozen=True)
class Handoff(_Summarizing):
    """Hand the task over: the user's own messages plus a note written for another model.

    All tool traffic and assistant messages are dropped. The real user messages are kept newest
    first while they fit in `user_tokens` (whole messages; the first one that does not fit stops
    the walk) and are put back in chronological order; pinned steps are kept too (pinning wins
    over "no tool traffic"). Result: [system..., kept user messages and pinned steps in order,
    user: handoff note].
    """

    user_tokens: int = 20000
    prompt: str = ""
    default_prompt = prompts.HANDOFF_PROMPT

    def __post_init__(self) -> None:
        _whole(self, "user_tokens")
        _check_prompt(self.prompt)

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        steps = context.steps
        material = flatten(s for s in steps if not s.pinned)
        if not has_new_material(material):
            return unchanged(context)
        candidates = [m for s in steps if not s.pinned for m in s.messages
                      if m.role == "user" and not is_summary(m)]
        kept: set[int] = set()
        budget = self.user_tokens
        for message in reversed(candidates):
            cost = env.tokens(message)
            if cost > budget:
                break
            kept.add(id(message))
            budget -= cost
        text = self._summarize(env, material, purpose="handoff")
        content = prompts.HANDOFF_HEADER + text
        env.record_summary(content)
        body = [m for s in steps for m in s.messages if s.pinned or id(m) in kept]
        return [*context.system, *body, summary_message(content, self.kind)]


__all__ = ["AdaptiveChunking", "Handoff", "SummarizeFull", "SummarizeProgressive", "SummarizeSplit",
           "clean_history", "is_acknowledgement", "is_prior_summary", "last_user_request", "split_index",
           "summary_message"]
