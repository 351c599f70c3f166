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
  `SummarizerError`) with a `max_tokens` budget the kind derives from its design (see each
  kind, and `common.summary_max_tokens`), so that a model, or the offline extractive
  summarizer, writes to the strategy's budget;
- each summary put into the context is passed to `env.record_summary`, only once the resulting
  list is built: a strategy that fails part-way leaves no recorded summary behind;
- the fillers of 001's cleaning ("no response", "(tool results received)") and the
  acknowledgement after a split summary are synthetic but carry no information: they are never
  sent as an existing summary;
- when there is nothing to condense the context is returned unchanged;
- `prompt` (every kind) replaces the built-in instructions (`workbench.strategies.prompts`); the
  default "" means the built-in prompt. A prompt containing `{transcript}` / `{existing_summary}`
  is sent as one user message with the material filled in.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from workbench.compaction import CompactionEnv, Context
from workbench.registry import param, register_strategy
from workbench.session import Message, Step, flatten
from workbench.strategies import prompts
from workbench.strategies.common import (
    MIN_SUMMARY_TOKENS,
    SUMMARY_RATIO,
    glued_cut,
    glued_flags,
    glued_pins,
    is_recorded_summary,
    is_summary,
    is_user_request,
    keep_last_fraction,
    render_transcript,
    summary_max_tokens,
    task_index,
    usable_window,
)

TOOL_NO_RESPONSE = "no response (this tool call never returned a result)"
AFTER_TOOLS_TEXT = "(tool results received)"
ACKNOWLEDGEMENT = "acknowledgement"
FILLER = "filler"

# Shares of the usable window (context_limit - max_output) a kind's summary may take at most
# (`common.summary_max_tokens`); each kind's docstring says why.
PROGRESSIVE_WINDOW_SHARE = 0.1
FULL_WINDOW_SHARE = 0.15
SPLIT_WINDOW_SHARE = 0.1
HANDOFF_WINDOW_SHARE = 0.1
CHUNKS_WINDOW_SHARE = 0.25
CHUNKS_CONTEXT_TARGET = 0.5
MIN_CHUNK_SUMMARY_TOKENS = 64
NOT_SUMMARIES = (ACKNOWLEDGEMENT, FILLER)


# ---------------------------------------------------------------------------------------------
# shared helpers


def is_acknowledgement(message: Message) -> bool:
    """The assistant reply a strategy inserts after a summary (not itself a summary)."""
    return message.origin == "compacted_synthetic" and message.metadata.get("compaction") == ACKNOWLEDGEMENT


def is_filler(message: Message) -> bool:
    """A message `clean_history` inserted (a missing tool result, an assistant note after tools)."""
    return message.origin == "compacted_synthetic" and (
        message.metadata.get("compaction") == FILLER or message.text in (TOOL_NO_RESPONSE, AFTER_TOOLS_TEXT)
    )


def is_prior_summary(message: Message) -> bool:
    """A summary an earlier compaction wrote (fed back to the summarizer as the existing summary).

    Acknowledgements and cleaning fillers are synthetic too, but they are not summaries.
    """
    return is_summary(message) and message.metadata.get("compaction") not in NOT_SUMMARIES and not is_filler(message)


def summary_message(text: str, strategy: str, **metadata: Any) -> Message:
    return Message(
        role="user",
        content=text,
        origin="compacted_synthetic",
        metadata={"compaction": "summary", "strategy": strategy, **metadata},
    )


def acknowledgement_message(strategy: str) -> Message:
    return Message(
        role="assistant",
        content=prompts.SPLIT_ACKNOWLEDGEMENT,
        origin="compacted_synthetic",
        metadata={"compaction": ACKNOWLEDGEMENT, "strategy": strategy},
    )


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

    Walking back from the end: the first real unpinned user message, unless an earlier
    `summarize_full` summary comes first, whose quoted request is then carried over. Synthetic
    messages (summaries, placeholders) and summaries the recorded agent wrote itself
    (`compact_summary` metadata) are never the request.
    Pinned user messages (usually standing instructions, and moved after the summary by
    `summarize_full`) count only when nothing else is found.
    """
    pinned_fallback = ""
    for message in reversed(messages):
        if message.role != "user" or message.observation:
            continue
        if is_summary(message):
            carried = message.metadata.get("last_user_request")
            if carried:
                return str(carried)
        elif is_recorded_summary(message):
            continue
        elif message.text.strip():
            if not message.pinned:
                return message.text
            pinned_fallback = pinned_fallback or message.text
    return pinned_fallback


def clean_history(messages: Sequence[Message]) -> list[Message]:
    """The history made well-formed for a summarizer (001's cleaning).

    Every tool call gets a result (a "no response" filler where the recording has none) and the
    history does not end with a tool message (an assistant note is appended). The original
    messages are reused; fillers are new `compacted_synthetic` messages marked `compaction =
    "filler"`, never taken for a summary.
    """
    out: list[Message] = []
    pending: dict[str, str] = {}

    def flush() -> None:
        for call_id, name in pending.items():
            out.append(
                Message(
                    role="tool",
                    content=TOOL_NO_RESPONSE,
                    tool_call_id=call_id,
                    name=name,
                    origin="compacted_synthetic",
                    metadata={"compaction": FILLER},
                )
            )
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
        out.append(
            Message(
                role="assistant",
                content=AFTER_TOOLS_TEXT,
                origin="compacted_synthetic",
                metadata={"compaction": FILLER},
            )
        )
    return out


def unchanged(context: Context) -> list[Message]:
    return list(context.messages)


#: The `prompt` parameter every summarizing kind has.
PROMPT_DOC = (
    'instructions replacing the kind\'s built-in summarizer prompt ("": the built-in one); '
    "{transcript} and {existing_summary} in it are filled in"
)


def prompt_param() -> Any:
    """The declaration of the `prompt` parameter shared by the summarizing kinds."""
    return param("", doc=PROMPT_DOC)


class _Summarizing:
    """Mixin: one summarizer call from a prompt and a list of messages."""

    kind: str
    prompt: str
    default_prompt: str = prompts.STRUCTURED_PROMPT
    summarizes: ClassVar[bool] = True

    def _prompt(self) -> str:
        """The `prompt` parameter, or the kind's built-in prompt when it is empty."""
        return self.prompt if self.prompt.strip() else self.default_prompt

    def _summarize(
        self,
        env: CompactionEnv,
        messages: Sequence[Message],
        *,
        purpose: str,
        max_tokens: int,
        always_existing: bool = False,
    ) -> str:
        """Summarize `messages` in at most `max_tokens`; earlier summaries among them are sent as the
        existing summary.

        With `always_existing`, the existing-summary section is sent even when there is none
        (saying so), as progressive summarization does.
        """
        existing, rest = split_material(messages)
        if existing is None and always_existing:
            existing = ""
        request = prompts.build_request(self._prompt(), render_transcript(rest), existing)
        return env.summarize(request, purpose=purpose, max_tokens=max_tokens).strip()


# ---------------------------------------------------------------------------------------------
# summarize_progressive (000)


@register_strategy("summarize_progressive")
@dataclass(frozen=True)
class SummarizeProgressive(_Summarizing):
    """Fold the older unpinned steps into one running summary; keep pinned and recent steps.

    The existing synthetic summary (if any) is handed to the summarizer as the summary so far and
    replaced by the new one. `keep_recent = 0` is pure progressive summarization (every unpinned
    step is folded in); `keep_recent = N` keeps the last N unpinned steps verbatim.

    Decisions taken from gent (000):

    - the task stays outside the scratchpad: the first real user message (`common.task_index`)
      is never summarized nor dropped, and stays first after the system messages; the failure
      fallback (the default one, keeping the last 40 %) keeps it too;
    - gent's order: result = [system..., task, summary, pinned steps (in their relative order),
      the last keep_recent unpinned steps]. A pinned step among the recent ones therefore moves
      ahead of them, as gent rebuilds its scratchpad (steps move whole: no tool pair is split);
    - only text reaches the summarizer; non-text parts of summarized steps are dropped.

    Budget: the summary may take a quarter of what it replaces (existing summary + folded steps),
    at most a tenth of the usable window (`PROGRESSIVE_WINDOW_SHARE`), so the running summary stays
    bounded however long the session runs.
    """

    keep_recent: int = param(0, doc="most recent unpinned steps kept verbatim (0: fold in every step)", min=0)
    prompt: str = prompt_param()
    default_prompt = prompts.PROGRESSIVE_PROMPT

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        steps = context.steps
        task = task_index(steps)
        scratchpad = [s for i, s in enumerate(steps) if i != task]
        held = glued_pins(scratchpad)
        summaries = [s for s, h in zip(scratchpad, held, strict=True) if not h and is_summary(s.head)]
        candidates = [s for s, h in zip(scratchpad, held, strict=True) if not h and not is_summary(s.head)]
        if not candidates or (self.keep_recent and len(candidates) <= self.keep_recent):
            return unchanged(context)
        cut = glued_cut(candidates, len(candidates) - self.keep_recent)
        if cut <= 0:
            return unchanged(context)
        to_summarize, recent = candidates[:cut], candidates[cut:]
        pinned = [s for s, h in zip(scratchpad, held, strict=True) if h]
        material = flatten(summaries + to_summarize)
        budget = summary_max_tokens(env, env.tokens(material), window_share=PROGRESSIVE_WINDOW_SHARE)
        text = self._summarize(env, material, purpose="summary", max_tokens=budget, always_existing=True)
        content = prompts.PROGRESSIVE_HEADER + text
        head = list(steps[task].messages) if task is not None else []
        result = [*context.system, *head, summary_message(content, self.kind), *flatten(pinned), *flatten(recent)]
        env.record_summary(content)
        return result

    def fallback(self, context: Context, env: CompactionEnv) -> list[Message]:
        """The default fallback (the last 40 %, pinned steps kept), which keeps the task too: it is
        outside the scratchpad, so a summarizer failure cannot take it away."""
        return keep_last_fraction(context, also=(task_index(context.steps),))


# ---------------------------------------------------------------------------------------------
# summarize_full (001)


@register_strategy("summarize_full")
@dataclass(frozen=True)
class SummarizeFull(_Summarizing):
    """Replace the whole history by one structured summary that ends with the last user request.

    Decisions taken from the 001 agent:

    - the request is the native conversation, as the agent itself would send it: the system
      messages, then the history cleaned by `clean_history` (every tool call has a result, no
      trailing tool message), as OpenAI messages, with the summarization prompt appended as the
      final user message. There is no transcript flattening and no system message of ours; an
      earlier summary is simply part of the conversation, as it is in the agent's own history.
      (A custom `prompt` with `{transcript}` / `{existing_summary}` placeholders is the exception:
      it is sent as one user message with the material filled in.)
    - the "last request from user" appended to the summary is the last real user request
      (`last_user_request`): never a synthetic message nor a summary the recorded agent wrote.
    - pinned steps are workbench additions: they are left out of the request and kept verbatim
      after the summary. Result: [system..., user: summary + the request quoted, pinned...].

    Budget: the summary becomes the whole history, so it may take a quarter of what it replaces,
    at most 15 % of the usable window (`FULL_WINDOW_SHARE`), more than the other kinds' share.
    """

    prompt: str = prompt_param()
    default_prompt = prompts.STRUCTURED_PROMPT

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        held = glued_pins(context.steps)
        pinned = [s for s, h in zip(context.steps, held, strict=True) if h]
        material = flatten(s for s, h in zip(context.steps, held, strict=True) if not h)
        if not has_new_material(material):
            return unchanged(context)
        budget = summary_max_tokens(env, env.tokens(material), window_share=FULL_WINDOW_SHARE)
        summary_request = self.build_request(context.system, material)
        text = env.summarize(summary_request, purpose="summary", max_tokens=budget).strip()
        request = last_user_request(context.body)
        content = text
        if request:
            content = f"{text}\n\n{prompts.LAST_REQUEST_LEAD}\n{prompts.quote(request)}"
        message = (
            summary_message(content, self.kind, last_user_request=request)
            if request
            else summary_message(content, self.kind)
        )
        result = [*context.system, message, *flatten(pinned)]
        env.record_summary(content)
        return result

    def build_request(self, system: Sequence[Message], material: Sequence[Message]) -> list[dict[str, Any]]:
        """The summarizer request: the cleaned native conversation plus the prompt as the last user message."""
        prompt = self._prompt()
        if prompts.TRANSCRIPT_PLACEHOLDER in prompt or prompts.EXISTING_PLACEHOLDER in prompt:
            existing, rest = split_material(material)
            return prompts.build_request(prompt, render_transcript(rest), existing)
        conversation = [m.to_openai() for m in [*system, *clean_history(material)]]
        return [*conversation, {"role": "user", "content": prompt}]


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

    Result: [system..., user: "[COMPACT SUMMARY]\n" + summary, assistant: acknowledgement,
    pinned steps of the older part (verbatim), preserved tail...].

    Decisions taken from goat (002):

    - the split walks back from the end keeping about `preserve` of the messages and moves to a
      step boundary (`split_index`), so the preserved tail never starts inside a step: no tool
      result is kept without its call, no call loses its results;
    - when the summarizer fails, `fallback` is goat's truncation: the same preserved tail, and in
      place of the summary the same "[COMPACT SUMMARY]" header followed by a "[Context
      truncated: ...]" placeholder naming how many messages were dropped (and the user requests
      among them), then the acknowledgement, exactly the shape of a successful compaction.

    Budget: a quarter of the summarized part, at most a tenth of the usable window
    (`SPLIT_WINDOW_SHARE`): the preserved tail keeps the detail of the recent work.
    """

    preserve: float = param(0.4, doc="share of the messages kept verbatim at the end", min=0, max=1)
    prompt: str = prompt_param()
    default_prompt = prompts.SPLIT_PROMPT

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
        older = older[: glued_cut(steps, len(older))]
        preserved = flatten(steps[len(older) :])
        held = glued_pins(older)
        pinned = [s for s, h in zip(older, held, strict=True) if h]
        dropped = [s for s, h in zip(older, held, strict=True) if not h]
        if not has_new_material(flatten(dropped)):
            return None
        return pinned, dropped, preserved

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        parts = self._parts(context)
        if parts is None:
            return unchanged(context)
        pinned, dropped, preserved = parts
        material = flatten(dropped)
        budget = summary_max_tokens(env, env.tokens(material), window_share=SPLIT_WINDOW_SHARE)
        text = self._summarize(env, material, purpose="summary", max_tokens=budget)
        content = prompts.COMPACT_SUMMARY_HEADER + text
        result = [
            *context.system,
            summary_message(content, self.kind),
            acknowledgement_message(self.kind),
            *flatten(pinned),
            *preserved,
        ]
        env.record_summary(content)
        return result

    def fallback(self, context: Context, env: CompactionEnv) -> list[Message]:
        """Plain truncation: the same preserved tail, with a placeholder for what was dropped."""
        parts = self._parts(context)
        if parts is None:
            return unchanged(context)
        pinned, dropped, preserved = parts
        dropped_messages = flatten(dropped)
        topics = [
            m.text.strip().splitlines()[0][:80] for m in dropped_messages if is_user_request(m) and m.text.strip()
        ]
        text = (
            f"{prompts.COMPACT_SUMMARY_HEADER}[Context truncated: {len(dropped_messages)} earlier "
            f"message{'s were' if len(dropped_messages) != 1 else ' was'} dropped without a summary "
            f"because the summarizer was unavailable."
        )
        if topics:
            shown = topics[:3] + ([f"... and {len(topics) - 3} more"] if len(topics) > 3 else [])
            text += " The user's requests in that part: " + "; ".join(f'"{t}"' for t in shown) + "."
        text += "]"
        placeholder = Message(
            role="user",
            content=text,
            origin="compacted_synthetic",
            metadata={"compaction": "truncation", "strategy": self.kind, "dropped_messages": len(dropped_messages)},
        )
        return [*context.system, placeholder, acknowledgement_message(self.kind), *flatten(pinned), *preserved]


# ---------------------------------------------------------------------------------------------
# adaptive_chunking (003)

BOUNDARIES = ("topic", "count")
_CHUNK_HEADER_RE = re.compile(
    r"\A" + re.escape(prompts.CHUNK_HEADER).replace(r"\{index\}", r"\d+").replace(r"\{total\}", r"\d+")
)


@dataclass(frozen=True)
class _ChunkSummary:
    """A summary in adaptive chunking's plan: its text, the messages it covers, the earlier message if any."""

    text: str
    messages: int
    original: Message | None = None


def _covered(message: Message) -> int:
    value = message.metadata.get("chunk_messages", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _strip_chunk_header(text: str) -> str:
    return _CHUNK_HEADER_RE.sub("", text, count=1)


def _runs(items: Sequence[Step | _ChunkSummary]) -> list[Step | list[_ChunkSummary]]:
    """`items` with consecutive summaries grouped into lists (verbatim steps separate the runs)."""
    out: list[Step | list[_ChunkSummary]] = []
    for item in items:
        if isinstance(item, Step):
            out.append(item)
        elif out and isinstance(out[-1], list):
            out[-1].append(item)
        else:
            out.append([item])
    return out


@register_strategy("adaptive_chunking")
@dataclass(frozen=True)
class AdaptiveChunking(_Summarizing):
    """Summarize the older steps chunk by chunk, one synthetic message per chunk.

    The last `keep_recent` steps stay verbatim. The older ones are cut into chunks at step
    boundaries: with `boundary = "topic"` each new user request opens a chunk (and a chunk that
    would grow past `chunk_messages` is closed early); with `"count"` a chunk closes before it
    would exceed `chunk_messages` messages. Pinned steps and earlier summaries stay verbatim where
    they are and close the chunk before them, so relative order is preserved. A stray tool result
    (other messages part it from its call) stays with its call's step, in the recent tail or
    verbatim. Each summary opens with a header numbering it among the summaries in the result
    ("1/3", "2/3", ...).

    Budget and re-condensing (003 keeps the result within budget): the chunk summaries together
    may take at most a quarter of the usable window (`CHUNKS_WINDOW_SHARE`), and less when the
    context would otherwise exceed half of it (`CHUNKS_CONTEXT_TARGET`: system messages, pinned
    steps and the recent tail count first), never less than `MIN_SUMMARY_TOKENS`. Each chunk is
    asked for its share of that budget (at most a quarter of the chunk, at least
    `MIN_CHUNK_SUMMARY_TOKENS`). When the summaries (new ones and earlier ones in the condensed
    part) still exceed the budget, consecutive ones are merged again with `prompts.MERGE_PROMPT`
    in groups sized to fit, round after round, until they fit or every run of summaries between
    two verbatim steps is down to one. Merging never moves a summary across a pinned step.
    """

    chunk_messages: int = param(20, doc="most messages in one chunk", min=1)
    boundary: str = param("topic", doc="topic: a new user request opens a chunk; count: size only", choices=BOUNDARIES)
    keep_recent: int = param(4, doc="most recent steps kept verbatim", min=0)
    prompt: str = prompt_param()
    default_prompt = prompts.CHUNK_PROMPT

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

        verbatim = glued_flags(steps, [step.pinned or is_summary(step.head) for step in steps])
        for step, kept in zip(steps, verbatim, strict=True):
            if kept:
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
        cut = glued_cut(steps, len(steps) - self.keep_recent)
        if cut <= 0:
            return unchanged(context)
        plan = self.chunks(steps[:cut])
        if not any(isinstance(item, list) for item in plan):
            return unchanged(context)
        recent = flatten(steps[cut:])
        verbatim = [
            m for item in plan if isinstance(item, Step) and not is_prior_summary(item.head) for m in item.messages
        ]
        budget = self.summaries_budget(env, env.tokens([*context.system, *verbatim, *recent]))
        n_summaries = sum(1 for item in plan if isinstance(item, list) or is_prior_summary(item.head))
        share = budget // max(1, n_summaries)
        items: list[Step | _ChunkSummary] = []
        for item in plan:
            if isinstance(item, Step):
                items.append(
                    _ChunkSummary(item.head.text, _covered(item.head), item.head)
                    if is_prior_summary(item.head)
                    else item
                )
                continue
            material = flatten(item)
            max_tokens = max(MIN_CHUNK_SUMMARY_TOKENS, min(share, int(env.tokens(material) * SUMMARY_RATIO)))
            text = self._summarize(env, material, purpose="chunk_summary", max_tokens=max_tokens)
            items.append(_ChunkSummary(text, len(material)))
        items = self._recondense(env, items, budget)
        total = sum(1 for item in items if isinstance(item, _ChunkSummary))
        out: list[Message] = list(context.system)
        written: list[str] = []
        index = 0
        for entry in items:
            if isinstance(entry, Step):
                out.extend(entry.messages)
                continue
            index += 1
            if entry.original is not None:
                out.append(entry.original)  # an earlier summary left as it was: the very same message
                continue
            content = prompts.CHUNK_HEADER.format(index=index, total=total) + entry.text
            written.append(content)
            out.append(summary_message(content, self.kind, chunk_messages=entry.messages))
        out.extend(recent)
        for content in written:
            env.record_summary(content)
        return out

    @staticmethod
    def summaries_budget(env: CompactionEnv, fixed_tokens: int) -> int:
        """Tokens all chunk summaries may take together (see the class docstring)."""
        usable = usable_window(env)
        room = int(CHUNKS_CONTEXT_TARGET * usable) - fixed_tokens
        return max(MIN_SUMMARY_TOKENS, min(int(CHUNKS_WINDOW_SHARE * usable), room))

    def _recondense(
        self, env: CompactionEnv, items: list[Step | _ChunkSummary], budget: int
    ) -> list[Step | _ChunkSummary]:
        """Merge consecutive summaries until they fit `budget` or no two summaries are adjacent."""
        while True:
            summaries = [item for item in items if isinstance(item, _ChunkSummary)]
            total_tokens = sum(env.tokenizer.count(item.text) for item in summaries)
            runs = _runs(items)
            if total_tokens <= budget or all(len(run) < 2 for run in runs if isinstance(run, list)):
                return items
            group = max(2, -(-total_tokens // budget))
            merged_count = sum(-(-len(run) // group) if isinstance(run, list) else 0 for run in runs)
            share = max(MIN_CHUNK_SUMMARY_TOKENS, budget // max(1, merged_count))
            rebuilt: list[Step | _ChunkSummary] = []
            for run in runs:
                if isinstance(run, Step):
                    rebuilt.append(run)
                    continue
                for start in range(0, len(run), group):
                    batch = run[start : start + group]
                    rebuilt.append(batch[0] if len(batch) == 1 else self._merge(env, batch, share))
            items = rebuilt

    def _merge(self, env: CompactionEnv, batch: Sequence[_ChunkSummary], max_tokens: int) -> _ChunkSummary:
        request = prompts.build_merge_request([_strip_chunk_header(item.text) for item in batch])
        text = env.summarize(request, purpose="chunk_summary", max_tokens=max_tokens).strip()
        return _ChunkSummary(text, sum(item.messages for item in batch))


# ---------------------------------------------------------------------------------------------
# handoff (a CLI agent's compaction)


@register_strategy("handoff")
@dataclass(frozen=True)
class Handoff(_Summarizing):
    """Hand the task over: the user's own messages plus a note written for another model.

    All tool traffic and assistant messages are dropped. The real user messages (not synthetic,
    not a summary the recorded agent wrote) are kept newest
    first while they fit in `user_tokens` (whole messages; the first one that does not fit stops
    the walk) and are put back in chronological order; pinned steps are kept too (pinning wins
    over "no tool traffic"). Result: [system..., kept user messages and pinned steps in order,
    user: handoff note].

    Budget: the note may take a quarter of what it condenses, at most a tenth of the usable
    window (`HANDOFF_WINDOW_SHARE`); the user's own messages travel beside it.
    """

    user_tokens: int = param(20000, doc="token budget for the user's own messages kept, newest first", min=0)
    prompt: str = prompt_param()
    default_prompt = prompts.HANDOFF_PROMPT

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        steps = context.steps
        held = glued_pins(steps)
        material = flatten(s for s, h in zip(steps, held, strict=True) if not h)
        if not has_new_material(material):
            return unchanged(context)
        candidates = [m for s, h in zip(steps, held, strict=True) if not h for m in s.messages if is_user_request(m)]
        kept: set[int] = set()
        budget = self.user_tokens
        for message in reversed(candidates):
            cost = env.tokens(message)
            if cost > budget:
                break
            kept.add(id(message))
            budget -= cost
        budget = summary_max_tokens(env, env.tokens(material), window_share=HANDOFF_WINDOW_SHARE)
        text = self._summarize(env, material, purpose="handoff", max_tokens=budget)
        content = prompts.HANDOFF_HEADER + text
        body = [m for s, h in zip(steps, held, strict=True) for m in s.messages if h or id(m) in kept]
        result = [*context.system, *body, summary_message(content, self.kind)]
        env.record_summary(content)
        return result


__all__ = [
    "AdaptiveChunking",
    "Handoff",
    "SummarizeFull",
    "SummarizeProgressive",
    "SummarizeSplit",
    "clean_history",
    "is_acknowledgement",
    "is_prior_summary",
    "last_user_request",
    "split_index",
    "summary_message",
]
