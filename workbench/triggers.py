"""Trigger kinds: when a replay compacts.

Every kind is a frozen dataclass whose fields are exactly its TOML parameters; state that belongs
to one replay (stat_threshold's counter snapshots) lives in a private, non-init field, so
`spec_of(trigger)` stays the parameters and a fresh build starts from a clean slate.

| kind              | parameters (defaults)                                   | reference design |
|-------------------|---------------------------------------------------------|------------------|
| `token_threshold` | `threshold` (200000; 0 disables)                        | 001              |
| `utilization`     | `ratio` (0.8), `reactive` (true)                        | 002 (goat)       |
| `stat_threshold`  | `counters` {key = delta}, `gauges` {key = value}        | 000 (gent)       |
| `pressure`        | `turns` (8), `tokens` (none)                            | 004 (ptc_runner) |
| `guard`           | `warn_threshold` (0.8), `hard_limit` (128000), `min_available` (0) | 003 (aisopod) |
| `any`, `all`      | `triggers` [spec, ...]                                  | combinators      |
| `recorded`        | none: where the recorded agent compacted                | the agent itself |

Every trigger answers `should_compact(view)` before a call and hears `notify_compacted(view)` after
a compaction. `guard` also reports `severity(view)` (`none`, `warn`, `critical`), and `any` / `all`
pass on the severity of the first inner trigger that reports one, so `trigger_severity()` (and the
`guard_select` strategy) see it through combinators.

Overflow retry belongs to the designs that have one. Every kind says so in `overflow_retry`, read
by the replay engine on the instance (`getattr(trigger, "overflow_retry", False)`): when a call
would not fit the window, a trigger with `overflow_retry` is asked again and, if the compaction
frees room, the call is retried once; without it the replay ends with `context_overflow` (unless
the config's `overflow_retry` says otherwise). True for `guard` (aisopod compacts and retries on a
context-overflow error) and for `utilization` with `reactive = true` (goat); false for the others;
`any` / `all` have it when an inner trigger has it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from workbench.compaction import CallSpan, TriggerView, trigger_answer, trigger_severity
from workbench.errors import ConfigError
from workbench.registry import TriggerSpec, param, register_trigger
from workbench.session import Message, Session
from workbench.tokens import HeuristicTokenizer, counted_text

#: Counters the replay engine maintains (keys ending in `*` match by prefix, e.g. `input_tokens_for:*`).
KNOWN_COUNTERS = ("iterations", "input_tokens", "output_tokens", "input_tokens_for:<model>", "compactions")
#: Gauges the replay engine maintains.
KNOWN_GAUGES = ("context_messages", "context_steps", "context_tokens", "tokens_last_call")


# Parameters are declared with `registry.param` and checked by the registry (type, bounds) when a
# trigger is built; a `__post_init__` only checks what relates several parameters.


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# --------------------------------------------------------------------------------------------
# token_threshold (001)


@register_trigger("token_threshold")
@dataclass(frozen=True)
class TokenThreshold:
    """Fire when the previous call's prompt + completion tokens reached `threshold`.

    Reads the gauge `tokens_last_call`. `threshold = 0` switches the trigger off.
    """

    overflow_retry: ClassVar[bool] = False
    threshold: int = param(200_000, doc="tokens (prompt + completion) of the previous call that fire it; 0: off", min=0)

    def should_compact(self, view: TriggerView) -> bool:
        if self.threshold == 0:
            return False
        return view.gauges.get("tokens_last_call", 0) >= self.threshold

    def firing_mask(self, span: CallSpan) -> Any:
        if self.threshold == 0:
            return span.tokens_last_call < 0
        return span.tokens_last_call >= self.threshold

    def notify_compacted(self, view: TriggerView) -> None:
        return None


# --------------------------------------------------------------------------------------------
# utilization (002)


@register_trigger("utilization")
@dataclass(frozen=True)
class Utilization:
    """Fire when the messages fill more than `ratio` of the room left for them (goat, seed 002).

    One test decides every case, goat's `ShouldCompact(budget)`: message tokens (the context
    without its leading system messages) divided by `context_limit - system tokens - max_output`
    is above `ratio` (strictly). When that room is zero or negative, any message counts as over.

    - Proactive: the test runs before every call.
    - Reactive (`reactive = true`): goat reacts to one stop reason only, the model hitting its
      output limit (`finish_reason == "length"`); no provider error is handled. It then drops the
      truncated tool blocks, recomputes the budget (the truncated reply included) and runs the same
      test: over ratio, it compacts and the loop sends the call again; not over, compaction cannot
      help and goat ends the run (`ExitMaxTokens`). So a length stop alone never fires this
      trigger: in a replay the next recorded call sees the budget goat would recompute.
    - "Overflow" in goat is its budget's `Available` going negative (context + max_output past the
      window), i.e. utilization above 1, which the test already catches since `ratio` <= 1; the
      engine's `overflow` flag (its own count says the call does not fit) is read as the same
      thing when `reactive` is on.

    `overflow_retry` is `reactive`: after a length stop or an overflow goat compacts and sends
    the call again, once per stop; with `reactive = false` the trigger is proactive only.
    """

    ratio: float = param(
        0.8, doc="share of the room for messages above which it fires", min=0, max=1, min_exclusive=True
    )
    reactive: bool = param(True, doc="also fire when the engine reports that the call overflows the window")

    def utilization(self, view: TriggerView) -> float:
        """message tokens / (context_limit - system tokens - max_output); inf when there is no room."""
        room = view.context_limit - view.system_tokens - view.max_output
        used = view.message_tokens
        if room <= 0:
            return math.inf if used > 0 else 0.0
        return used / room

    @property
    def overflow_retry(self) -> bool:
        """goat compacts and retries a call that stopped at its output limit or overflowed, when reactive."""
        return self.reactive

    def should_compact(self, view: TriggerView) -> bool:
        return self.utilization(view) > self.ratio or (self.reactive and view.overflow)

    def firing_mask(self, span: CallSpan) -> Any:
        """`should_compact` over a span (no overflow views there): the same float test, per call."""
        room = span.context_limit - span.system_tokens - span.max_output
        used = span.context_tokens - span.system_tokens
        if room <= 0:
            return used > 0
        return used / room > self.ratio

    def notify_compacted(self, view: TriggerView) -> None:
        return None


# --------------------------------------------------------------------------------------------
# stat_threshold (000)


def _matches(pattern: str, key: str) -> bool:
    return key.startswith(pattern[:-1]) if pattern.endswith("*") else key == pattern


def _matching(pattern: str, stats: Mapping[str, float]) -> Iterator[tuple[str, float]]:
    """(key, value) pairs of `stats` matched by `pattern`; an exact key that is absent reads as 0."""
    if pattern.endswith("*"):
        prefix = pattern[:-1]
        for key, value in stats.items():
            if key.startswith(prefix):
                yield key, value
    else:
        yield pattern, stats.get(pattern, 0)


def _threshold_table(name: str, table: Any, *, what: str) -> dict[str, float]:
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{name} must be a table of {{stat key = {what}}}, not {table!r}")
    out: dict[str, float] = {}
    for key, value in table.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{name}: stat keys must be non-empty strings, not {key!r}")
        if "*" in key[:-1]:
            raise ConfigError(f"{name}: key {key!r} may only use '*' as its last character (prefix match)")
        if not _is_number(value) or value <= 0:
            raise ConfigError(f"{name}: {key!r} needs a {what} > 0, not {value!r}")
        out[key] = value
    return out


@register_trigger("stat_threshold")
@dataclass(frozen=True)
class StatThreshold:
    """Fire when a counter grew by at least its delta since the last compaction, or a gauge reached
    its value.

    `counters = { iterations = 10, input_tokens = 100000 }` compares `current - snapshot >= delta`,
    where the snapshot is the counter's value at the last compaction (0 before the first). After
    every compaction the snapshots of all counters named by any counter threshold are renewed,
    prefix-matched keys included, so one firing threshold also restarts the others (gent's rule:
    otherwise a counter that is past its delta would fire on every call).

    `gauges = { context_tokens = 90000 }` compares `current >= value`; gauges fall by themselves
    after a compaction, so they need no snapshot.

    A key ending in `*` matches every stat key with that prefix (`"input_tokens_for:*"`). Known
    counters: iterations, input_tokens, output_tokens, input_tokens_for:<model>, compactions; known
    gauges: context_messages, context_steps, context_tokens, tokens_last_call. Other keys are
    accepted (a custom engine may publish more) and simply read as absent (0 for exact counters).

    The summarizer's own calls count (seed 000, summarization test case 11: the summarizing model
    call increments the input/output token counters, and `input_tokens_for:<its model>`). gent
    notifies the trigger after the compaction, its summarizer call included, so the snapshots
    taken then contain that usage: the next delta is measured from after the summarizer's tokens,
    which therefore never count toward the next firing, while the counters themselves (and any
    total read from them) include them. The engine passes those counters to `notify_compacted`.
    """

    overflow_retry: ClassVar[bool] = False
    counters: Mapping[str, int | float] = param(
        {}, doc="{counter = delta}: fire when a counter grew by delta since the last compaction"
    )
    gauges: Mapping[str, int | float] = param({}, doc="{gauge = value}: fire when a gauge reached value")
    _snapshots: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        counters = _threshold_table("counters", self.counters, what="delta")
        gauges = _threshold_table("gauges", self.gauges, what="value")
        if not counters and not gauges:
            raise ConfigError(
                "stat_threshold needs at least one entry in counters or gauges "
                f"(counters: {', '.join(KNOWN_COUNTERS)}; gauges: {', '.join(KNOWN_GAUGES)})"
            )
        object.__setattr__(self, "counters", counters)
        object.__setattr__(self, "gauges", gauges)

    def _counter_fires(self, view: TriggerView) -> bool:
        for pattern, delta in self.counters.items():
            for key, current in _matching(pattern, view.counters):
                if current - self._snapshots.get(key, 0) >= delta:
                    return True
        return False

    def _gauge_fires(self, view: TriggerView) -> bool:
        for pattern, value in self.gauges.items():
            for _key, current in _matching(pattern, view.gauges):
                if current >= value:
                    return True
        return False

    def should_compact(self, view: TriggerView) -> bool:
        return self._counter_fires(view) or self._gauge_fires(view)

    def firing_mask(self, span: CallSpan) -> Any:
        """`should_compact` over a span; per-model counters (and patterns that may match them) need
        the per-call path."""
        counters = {
            "iterations": span.call_index,
            "input_tokens": span.input_tokens,
            "output_tokens": span.output_tokens,
            "compactions": span.compactions,
        }
        gauges = {
            "context_messages": span.context_messages,
            "context_steps": span.context_steps,
            "context_tokens": span.context_tokens,
            "tokens_last_call": span.tokens_last_call,
        }
        mask = span.context_tokens < 0
        for pattern, delta in self.counters.items():
            if (
                pattern.endswith("*")
                and "input_tokens_for:".startswith(pattern[:-1])
                or pattern.startswith("input_tokens_for:")
            ):
                raise NotImplementedError("per-model counters are read call by call")
            for key, current in _matching(pattern, counters):
                mask = mask | (current - self._snapshots.get(key, 0) >= delta)
        for pattern, value in self.gauges.items():
            for _key, current in _matching(pattern, gauges):
                mask = mask | (current >= value)
        return mask

    def notify_compacted(self, view: TriggerView) -> None:
        for pattern in self.counters:
            for key, current in _matching(pattern, view.counters):
                self._snapshots[key] = current

    def snapshot(self, key: str) -> float:
        """The counter value recorded for `key` at the last compaction (0 before the first)."""
        return self._snapshots.get(key, 0)


# --------------------------------------------------------------------------------------------
# pressure (004)


_LEN4 = HeuristicTokenizer()


def ptc_message_tokens(message: Message) -> int:
    """ptc_runner's per-message estimate: len/4 (floor 1) of its text and tool calls; 0 for system messages."""
    if message.role in ("system", "developer"):
        return 0
    return _LEN4.count(counted_text(message))


class _HistoryTokens:
    """A running total of `ptc_message_tokens` over a history that grows call by call.

    The engine passes the recorded prefix before each call; only the new messages are counted (a
    history that is not an extension of the last one is counted afresh).
    """

    __slots__ = ("count", "last", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.last: Message | None = None

    def measure(self, history: Sequence[Message]) -> int:
        size = len(history)
        if size < self.count or (self.count and history[self.count - 1] is not self.last):
            self.count, self.total, self.last = 0, 0, None
        for index in range(self.count, size):
            self.total += ptc_message_tokens(history[index])
        if size:
            self.count, self.last = size, history[size - 1]
        return self.total


@register_trigger("pressure")
@dataclass(frozen=True)
class Pressure:
    """Fire when the session has made at least `turns` calls, or its history holds at least
    `tokens` estimated tokens (ptc_runner, seed 004).

    - Turns: ptc_runner counts turns from 1 and fires when `turn > turns`; before call k (0-based)
      the turn is k + 1, so this fires when `call_index >= turns`.
    - Tokens: ptc_runner never shortens its history. Every turn it estimates the tokens of the
      whole accumulated message list (the user/assistant messages, tool feedback included; the
      system prompt is built separately and not counted, nor are tool schemas) with its len/4
      counter (floor 1 for non-empty text, no per-message overhead), fires when that is >= `tokens`,
      and trims a copy for the call. So the tokens are measured on `view.history` (the recorded
      messages before this call, system messages left out), each message's text and tool calls
      counted with `ptc_message_tokens`, not on the replayed context. When the engine passes no
      history, the context's message tokens stand in.

    Both conditions only grow, so once past a threshold this fires at every call, as ptc_runner
    rebuilds its trimmed input every turn; compacting does not reset it. `turns = 0` (or none)
    switches the turn condition off, `tokens` is off unless set; at least one must be on.
    """

    overflow_retry: ClassVar[bool] = False
    turns: int | None = param(8, doc="fire from this call index on; 0 or none: off", min=0)
    tokens: int | None = param(None, doc="fire when the history holds this many tokens; none: off", min=0)
    _history: _HistoryTokens = field(default_factory=lambda: _HistoryTokens(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.turns and not self.tokens:
            raise ConfigError("pressure needs turns >= 1 or tokens >= 1 (both are off)")

    def history_tokens(self, view: TriggerView) -> int:
        """ptc_runner's estimate: len/4 tokens of the recorded messages before this call, system excluded."""
        if not view.history:
            return view.message_tokens
        return self._history.measure(view.history)

    def should_compact(self, view: TriggerView) -> bool:
        if self.turns and view.call_index >= self.turns:
            return True
        return self.tokens is not None and self.tokens > 0 and self.history_tokens(view) >= self.tokens

    def firing_mask(self, span: CallSpan) -> Any:
        """The turn condition over a span; the token condition reads the history call by call."""
        if self.tokens:
            raise NotImplementedError("pressure's token condition is measured call by call")
        return span.call_index >= self.turns

    def notify_compacted(self, view: TriggerView) -> None:
        return None


# --------------------------------------------------------------------------------------------
# guard (003)


@register_trigger("guard")
@dataclass(frozen=True)
class Guard:
    """A context-window guard with severities, measured on the context's tokens.

    - `critical`: tokens >= hard_limit, or fewer than `min_available` tokens are left under it;
    - `warn`: tokens >= warn_threshold * hard_limit;
    - `none`: otherwise.

    Fires at `warn` and `critical`; `guard_select` picks its strategy by the severity.

    aisopod also compacts when the provider reports a context overflow and then retries the call
    (`overflow_retry`): an overflow view (`view.overflow`) fires the guard whatever the severity.
    The severity stays the token count's, as aisopod selects its strategy from the count alone.
    """

    overflow_retry: ClassVar[bool] = True
    warn_threshold: float = param(
        0.8, doc="share of hard_limit from which the severity is warn", min=0, max=1, min_exclusive=True
    )
    hard_limit: int = param(128_000, doc="context tokens from which the severity is critical", min=1)
    min_available: int = param(0, doc="critical when fewer tokens than this are left under hard_limit", min=0)

    def __post_init__(self) -> None:
        if self.min_available >= self.hard_limit:
            raise ConfigError(
                f"min_available ({self.min_available}) must be below hard_limit ({self.hard_limit}), "
                "or the guard is always critical"
            )

    def severity(self, view: TriggerView) -> str:
        tokens = view.context_tokens
        if tokens >= self.hard_limit or self.hard_limit - tokens < self.min_available:
            return "critical"
        if tokens >= self.warn_threshold * self.hard_limit:
            return "warn"
        return "none"

    def should_compact(self, view: TriggerView) -> bool:
        return view.overflow or self.severity(view) != "none"

    def firing_mask(self, span: CallSpan) -> Any:
        """A severity other than `none` at each call of the span (no overflow views there)."""
        tokens = span.context_tokens
        return (
            (tokens >= self.hard_limit)
            | (self.hard_limit - tokens < self.min_available)
            | (tokens >= self.warn_threshold * self.hard_limit)
        )

    def notify_compacted(self, view: TriggerView) -> None:
        return None


# --------------------------------------------------------------------------------------------
# any / all


@dataclass(frozen=True)
class _Combinator:
    triggers: tuple[TriggerSpec, ...] = param(doc="the inner triggers, as a list of trigger specs")

    def __post_init__(self) -> None:
        if not self.triggers:
            raise ConfigError("triggers needs at least one trigger")

    @property
    def overflow_retry(self) -> bool:
        """True when an inner trigger's design retries a call that overflowed."""
        return any(getattr(trigger, "overflow_retry", False) for trigger in self.triggers)

    def severity(self, view: TriggerView) -> str | None:
        """The severity of the first inner trigger that reports one (None when none does)."""
        for trigger in self.triggers:
            found = trigger_severity(trigger, view)
            if found is not None:
                return found
        return None

    def notify_compacted(self, view: TriggerView) -> None:
        for trigger in self.triggers:
            trigger.notify_compacted(view)

    def _masks(self, span: CallSpan) -> list[Any]:
        masks = []
        for trigger in self.triggers:
            method = getattr(trigger, "firing_mask", None)
            if not callable(method):
                raise NotImplementedError(f"inner trigger {type(trigger).__name__} is asked call by call")
            masks.append(method(span))
        return masks


@register_trigger("any")
@dataclass(frozen=True)
class AnyOf(_Combinator):
    """Fire when at least one of `triggers` fires; every inner trigger hears about compactions."""

    def should_compact(self, view: TriggerView) -> bool:
        return any(trigger_answer(t.should_compact(view), t) for t in self.triggers)

    def firing_mask(self, span: CallSpan) -> Any:
        masks = self._masks(span)
        mask = masks[0]
        for other in masks[1:]:
            mask = mask | other
        return mask


@register_trigger("all")
@dataclass(frozen=True)
class AllOf(_Combinator):
    """Fire when every one of `triggers` fires; every inner trigger hears about compactions."""

    def should_compact(self, view: TriggerView) -> bool:
        return all(trigger_answer(t.should_compact(view), t) for t in self.triggers)

    def firing_mask(self, span: CallSpan) -> Any:
        masks = self._masks(span)
        mask = masks[0]
        for other in masks[1:]:
            mask = mask & other
        return mask


@register_trigger("recorded")
@dataclass(frozen=True)
class RecordedTrigger:
    """Fire before each call at which the recorded agent compacted its context (once per call).

    It needs the session it replays: the engine calls `bind_session(session)` before the walk;
    unbound, it never fires. Paired with the `recorded` strategy (`workbench.strategies.recorded`)
    it replays the agent's own compactions.

    Never fires before the first call (the engine does not ask) and has no overflow retry of its
    own: a recorded session whose replayed context does not fit ends with `context_overflow`.
    """

    _calls: set[int] = field(default_factory=set, init=False, repr=False, compare=False)
    _done: set[int] = field(default_factory=set, init=False, repr=False, compare=False)

    def bind_session(self, session: Session) -> None:
        self._calls.clear()
        self._done.clear()
        self._calls.update(r.call_index for r in session.recorded_compactions)

    def should_compact(self, view: TriggerView) -> bool:
        return view.call_index in self._calls and view.call_index not in self._done

    def notify_compacted(self, view: TriggerView) -> None:
        self._done.add(view.call_index)


__all__ = [
    "AllOf",
    "AnyOf",
    "Guard",
    "KNOWN_COUNTERS",
    "KNOWN_GAUGES",
    "Pressure",
    "RecordedTrigger",
    "StatThreshold",
    "TokenThreshold",
    "Utilization",
    "ptc_message_tokens",
]
