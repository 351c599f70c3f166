"""The compaction contract: what triggers and strategies see and must provide.

A *trigger* answers "compact now?" before each recorded LLM call from a `TriggerView` (stats
and gauges of the replay) and is told when a compaction happened. A *strategy* turns a
`Context` (the messages about to be sent) into a shorter message list, using the
`CompactionEnv` for token counts and summarizer calls. Both are registered by kind name
(`workbench.registry`) and built from TOML specs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice
from typing import Any, Protocol, runtime_checkable

from workbench.errors import ConfigError, SummarizerError
from workbench.registry import Family
from workbench.session import Message, Step, group_steps, leading_system
from workbench.tokens import Tokenizer, message_tokens, messages_tokens, resolve

SEVERITIES = ("none", "warn", "critical")


@dataclass(frozen=True)
class TriggerView:
    """What a trigger sees before call `call_index` (0-based).

    counters: `iterations` (calls made so far), `input_tokens`, `output_tokens` (sums over the
    calls made so far), `input_tokens_for:<model>`, `compactions`.
    gauges: `context_messages`, `context_steps`, `context_tokens` (of the context about to be
    sent, system messages included), `tokens_last_call` (prompt + completion of the previous call).
    `reactive` is True when the engine asks again because the call would overflow the window
    (`overflow`), or because the previous recorded call stopped at its output limit
    (`last_finish_reason == "length"`).
    `history`: the session's recorded messages before this call, uncompacted (what an agent that
    rebuilds its input from the full history every turn measures, as `pressure` does); empty when
    the engine does not provide it.
    `context`: the messages about to be sent (leading system messages included), for a trigger that
    measures them its own way (`inspect_threshold` counts as Inspect does); read it during the call
    only, the engine goes on changing the context after. Empty when the engine does not provide it.
    """

    call_index: int
    counters: Mapping[str, float]
    gauges: Mapping[str, float]
    context_limit: int
    max_output: int
    system_tokens: int = 0
    last_finish_reason: str | None = None
    overflow: bool = False
    reactive: bool = False
    history: Sequence[Message] = ()
    context: Sequence[Message] = ()

    @property
    def context_tokens(self) -> int:
        return int(self.gauges.get("context_tokens", 0))

    @property
    def message_tokens(self) -> int:
        """Context tokens outside the leading system messages."""
        return self.context_tokens - self.system_tokens


@runtime_checkable
class Trigger(Protocol):
    """Decides when to compact. Instances are built fresh for each replay and may keep state.

    Both methods are required (registration refuses a kind without them, or whose methods take other
    arguments); `should_compact` answers True or False, not merely a truthy value (the replay
    refuses "no", which would compact at every call).
    """

    def should_compact(self, view: TriggerView) -> bool: ...

    def notify_compacted(self, view: TriggerView) -> None: ...


@dataclass(frozen=True)
class CallSpan:
    """The calls from `first_call` on as a trigger would see them if no compaction happened before
    any of them: one numpy array entry per call (offset 0 = `first_call`).

    A trigger may define `firing_mask(span) -> numpy bool array`: for every call of the span,
    whether `should_compact` would return True for the ordinary (non-overflow) view the engine
    builds there. It must agree exactly with `should_compact` (the engine asks `should_compact` at
    the first call the mask marks and compacts through the usual path), and may raise
    `NotImplementedError` when its parameters need the per-call path (the engine then asks call by
    call for the rest of the replay). With it the engine skips from one compaction to the next
    instead of building a view per call; a trigger without it is asked call by call.

    Within a span the context only grows by the recorded messages, so `context_tokens`,
    `context_messages` and `context_steps` are non-decreasing; `system_tokens`, `compactions`,
    `context_limit` and `max_output` are constant. `input_tokens` / `output_tokens` are the
    counters before each call; `tokens_last_call` is the gauge (prompt + completion of the call
    before); `last_finish_reasons` the previous call's finish reason (a list, None when unknown).
    Columns other than `context_tokens` are computed when first read (`columns(name)`).
    """

    first_call: int
    context_tokens: Any
    system_tokens: int
    compactions: int
    context_limit: int
    max_output: int
    columns: Callable[[str], Any] = field(repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.context_tokens)

    @cached_property
    def call_index(self) -> Any:
        """The call index of every entry (the `iterations` counter)."""
        import numpy as np

        return np.arange(self.first_call, self.first_call + len(self.context_tokens))

    @cached_property
    def context_messages(self) -> Any:
        return self.columns("context_messages")

    @cached_property
    def context_steps(self) -> Any:
        return self.columns("context_steps")

    @cached_property
    def tokens_last_call(self) -> Any:
        return self.columns("tokens_last_call")

    @cached_property
    def input_tokens(self) -> Any:
        return self.columns("input_tokens")

    @cached_property
    def output_tokens(self) -> Any:
        return self.columns("output_tokens")

    @cached_property
    def last_finish_reasons(self) -> Sequence[str | None]:
        reasons: Sequence[str | None] = self.columns("last_finish_reasons")
        return reasons


def first_true(mask: Any) -> int | None:
    """The index of the first True of a boolean numpy array, or None when there is none."""
    if len(mask) == 0:
        return None
    index = int(mask.argmax())
    return index if mask[index] else None


def trigger_severity(trigger: Any, view: TriggerView) -> str | None:
    """The severity a trigger reports (`guard`, or a combinator holding one), else None."""
    severity = getattr(trigger, "severity", None)
    return severity(view) if callable(severity) else None


@dataclass(frozen=True)
class Completion:
    """One model response as the workbench records it.

    `cost_usd` is None when the price is unknown (never a silent 0); `cache_hit` says the gateway
    answered from its cache without calling the model.
    """

    text: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    cache_hit: bool = False
    finish_reason: str | None = "stop"
    duration_s: float = 0.0
    attempts: int = 1


#: Finish reasons that make an answer a refusal rather than a summary, whatever text it holds.
REFUSED_FINISH_REASONS = frozenset({"content_filter"})


def unusable_answer(text: str | None, finish_reason: str | None) -> str | None:
    """Why a model's answer cannot serve as a summary (a refusal, no text), or None when it can.

    The one rule for both sides: `CompactionEnv.summarize` rejects such an answer, and the gateway
    does not cache it (a re-run asks the provider again). An answer cut at its output limit
    (`length`) is usable: it is what that request, with that `max_tokens`, gets.
    """
    if finish_reason in REFUSED_FINISH_REASONS:
        return f"refused it (finish_reason {finish_reason!r})"
    if not text or not text.strip():
        return f"returned an empty summary (finish_reason {finish_reason!r})"
    return None


@runtime_checkable
class Summarizer(Protocol):
    """A model bound to its options; raises `SummarizerError` when the call fails for good."""

    model: str

    def complete(
        self, messages: list[dict[str, Any]], *, purpose: str = "summary", max_tokens: int | None = None
    ) -> Completion: ...


@dataclass(frozen=True)
class Context:
    """The messages about to be sent, with the views strategies need (computed once, on demand)."""

    messages: tuple[Message, ...]
    #: The leading system messages (every strategy keeps them).
    system: list[Message] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.messages, tuple):
            object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "system", leading_system(self.messages))  # every strategy reads it: now

    @property
    def body(self) -> list[Message]:
        """Everything after the leading system messages (made on first use: a strategy given the
        context's steps needs no copy of its messages)."""
        found: list[Message] | None = self.__dict__.get("_body")
        if found is None:
            found = self.__dict__["_body"] = list(islice(self.messages, len(self.system), None))
        return found

    @cached_property
    def steps(self) -> list[Step]:
        """The body grouped into steps."""
        return group_steps(self.body)

    @property
    def observations(self) -> list[int]:
        """The indices (into `messages`) of the observations: tool results and the user turns that
        show a text-action agent its command's output (`Message.is_observation`). A kind that acts
        on tool results acts on these, whatever their role."""
        return [index for index, message in enumerate(self.messages) if message.is_observation]


#: The simulated window when none is given: the one default of the library, the CLI and the app
#: (`workbench.config` re-exports it; every caller imports it from there or here, none restates it).
DEFAULT_CONTEXT_LIMIT = 128_000
#: The tokens kept free for the reply when none is given.
DEFAULT_MAX_OUTPUT = 4096


@dataclass
class CompactionEnv:
    """What a strategy may use while compacting: tokens, the window, the summarizer.

    Every summarizer call made through `summarize` is recorded in `completions`, and every summary
    text a strategy puts into the context should be passed to `record_summary`, so the replay's
    compaction event can report them.
    """

    tokenizer: Tokenizer = field(default_factory=lambda: resolve("heuristic"))
    context_limit: int = DEFAULT_CONTEXT_LIMIT
    max_output: int = DEFAULT_MAX_OUTPUT
    summarizer: Summarizer | None = None
    severity: str | None = None
    call_index: int = 0
    breaker_open: bool = False
    completions: list[Completion] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tokenizer = resolve(self.tokenizer)

    def tokens(self, item: Message | Sequence[Message]) -> int:
        if isinstance(item, Message):
            return message_tokens(item, self.tokenizer)
        return messages_tokens(item, self.tokenizer)

    def summarize(
        self, messages: list[dict[str, Any]], *, purpose: str = "summary", max_tokens: int | None = None
    ) -> str:
        """Ask the summarizer; returns the text. Raises `SummarizerError` on failure, on empty text
        and on a refusal (`unusable_answer`); a text cut at the output limit is returned (the
        replay counts it in the compaction's `truncated` usage)."""
        if self.summarizer is None:
            raise SummarizerError("this strategy needs a summarizer, and none is configured")
        if self.breaker_open:
            raise SummarizerError("circuit breaker open: too many consecutive summarizer failures")
        started = time.perf_counter()
        try:
            completion = self.summarizer.complete(messages, purpose=purpose, max_tokens=max_tokens)
        except SummarizerError:
            raise
        except Exception as exc:  # any provider failure is a summarizer failure to the replay
            raise SummarizerError(f"{type(exc).__name__}: {exc}") from exc
        if not completion.duration_s:
            completion = _with_duration(completion, time.perf_counter() - started)
        self.completions.append(completion)
        problem = unusable_answer(completion.text, completion.finish_reason)
        if problem is not None:
            raise SummarizerError(f"summarizer {completion.model!r} {problem}")
        return completion.text

    def record_summary(self, text: str) -> None:
        self.summaries.append(text)


def _with_duration(completion: Completion, duration_s: float) -> Completion:
    from dataclasses import replace

    return replace(completion, duration_s=duration_s)


@runtime_checkable
class Strategy(Protocol):
    """Decides how to compact: returns the new message list (may be the same messages).

    A strategy may define `fallback(context, env)`, used when it fails under `on_failure =
    "fallback"`; strategies without one fall back to keeping the last 40 % (`hard_clear`). It may
    return a `strategies.common.StepList`, which tells the next strategy and the next compaction how
    the list groups into steps (the built-in kinds do); a new one each time, as the replay keeps it
    as its context. Anything but a list (or other iterable) of `Message` stops the replay with a
    ConfigError naming the kind; registration refuses a kind whose `compact` takes other arguments.
    """

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]: ...


#: The trigger kinds, typed: `TRIGGERS.build(spec)` is a `Trigger` (the registry's `trigger` family).
TRIGGERS: Family[Trigger] = Family("trigger")
#: The strategy kinds, typed: `STRATEGIES.lookup(name)` is a `type[Strategy]`.
STRATEGIES: Family[Strategy] = Family("strategy")


def kind_name(kind: Any) -> str:
    """The registered name of a trigger or strategy (its class name when it has none), for messages."""
    return str(getattr(kind, "kind", None) or type(kind).__name__)


def trigger_answer(answer: Any, trigger: Any) -> bool:
    """`should_compact`'s answer, which must be True or False (a numpy bool is read as one):
    ConfigError naming the kind otherwise ("no" is truthy: it would compact at every call)."""
    if answer is True or answer is False:
        return answer
    if type(answer).__module__ == "numpy" and type(answer).__name__ in ("bool", "bool_"):
        return bool(answer)
    raise ConfigError(
        f"trigger {kind_name(trigger)!r}: should_compact returned {answer!r} "
        f"({type(answer).__name__}); it must return True or False"
    )
