"""The replay engine: (session, config) -> ReplayResult.

Walk the recording; every recorded assistant message is one LLM call. Before each call but the
first the trigger is asked; when it fires the strategy compacts the context, an event is
recorded and the trigger is notified. The context sent for the call is measured, then the
recorded assistant message and what follows it (tool results, user turns) are appended. A call
whose context + max_output would not fit is retried once after a compaction when the trigger's
design has an overflow retry (`overflow_retry` on the trigger) or the config asks for one
(`overflow_retry = true`); otherwise the replay ends with `context_overflow`.

Tokens are counted once per message (cached on the message) and the context's total is kept
incrementally, so a call costs O(1) unless a compaction happened before it. Tool schemas
(`session.tools`) and, under `calibration = "recorded"`, the fitted overhead are a fixed preamble
counted once per replay: part of every call's context tokens and of its system tokens.
Strategies see the window minus that preamble as `env.context_limit`.

Kinds that need the replayed session (the `recorded` trigger and strategy) define
`bind_session(session)`; the engine calls it before the walk, inside combinators and pipelines too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import accumulate
from typing import Any, overload

from workbench.calibration import CALIBRATIONS, CalibrationFit, ScaledTokenizer, fit_recorded, prime_scaled, schema_text
from workbench.compaction import CompactionEnv, Completion, Context, Summarizer, TriggerView, trigger_severity
from workbench.config import DEFAULT_SUMMARIZER, ReplayConfig, parse_config
from workbench.errors import CompactionError, ConfigError, InvariantError, SummarizerError
from workbench.llm.lazy import LazyModel, timer_excluding_startup
from workbench.registry import evaluate_metrics, lookup
from workbench.session import (
    PINNED_IMPORTANCE,
    Message,
    MessageLike,
    Session,
    as_messages,
    recorded_input_tokens,
    tool_pairing_problems,
)
from workbench.strategies.common import keep_last_fraction
from workbench.tokens import MESSAGE_OVERHEAD, Tokenizer, get_tokenizer, message_tokens, prime

NO_PROGRESS_FRACTION = 0.10
TERMINATIONS = ("completed", "compaction_failed", "context_overflow")


@dataclass(frozen=True)
class CallRecord:
    """One replayed LLM call (0-based `index`; `message_index` is the assistant message in the session)."""

    index: int
    message_index: int
    context_messages: int
    context_tokens: int
    completion_tokens: int
    compacted_before: bool
    cached_prefix_tokens: int
    finish_reason: str | None = None


@dataclass(frozen=True)
class CompactionEvent:
    """One firing of the trigger and what the strategy did with it."""

    call_index: int
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    summary: str | None
    summarizer_usage: Mapping[str, Any]
    duration_s: float
    fell_back: bool = False
    no_progress: bool = False
    breaker_open: bool = False
    reactive: bool = False
    severity: str | None = None
    error: str | None = None

    @property
    def failed(self) -> bool:
        """The strategy failed and nothing replaced its result (fatal policy)."""
        return self.error is not None and not self.fell_back


#: A context as it was at some point: the engine's list and its length then (it only grows by appends).
Snapshot = tuple[list[Message], int]

CALL_COLUMNS = ("index", "message_index", "context_messages", "context_tokens", "completion_tokens",
                "compacted_before", "cached_prefix_tokens", "finish_reason")


@dataclass
class ReplayResult:
    """What a replay produced: per-call records, compaction events, the final context, metrics.

    `context_at(i)` and `compaction_contexts(j)` rebuild the messages sent at call i / given to and
    returned by the strategy at event j from snapshots (the engine's context list and its length
    then), so keeping them costs nothing per call. `calibration` is the fit applied under
    `calibration = "recorded"` (None otherwise); `compaction_metrics` holds one dict of metric
    columns per event, merged into `compactions_frame()`.
    """

    session_id: str
    config: ReplayConfig
    calls: list[CallRecord]
    compactions: list[CompactionEvent]
    final_context: list[Message]
    termination: str
    error: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    session: Session | None = None
    calibration: CalibrationFit | None = None
    compaction_metrics: Sequence[Mapping[str, Any]] = field(default_factory=list)
    _sent: list[Snapshot] = field(default_factory=list, repr=False, compare=False)
    _exchanges: list[tuple[Snapshot, Snapshot]] = field(default_factory=list, repr=False, compare=False)

    def __repr__(self) -> str:
        return (f"<ReplayResult {self.session_id} {self.config.name!r}: {len(self.calls)} calls, "
                f"{len(self.compactions)} compactions, {self.termination}>")

    def context_at(self, call_index: int) -> list[Message]:
        """The messages sent at call `call_index` (0-based; negative counts from the end)."""
        if not -len(self._sent) <= call_index < len(self._sent):
            raise IndexError(f"call {call_index} out of range: the replay made {len(self._sent)} calls")
        messages, length = self._sent[call_index]
        return messages[:length]

    def compaction_contexts(self, event_index: int) -> tuple[list[Message], list[Message]]:
        """(the context the strategy received, the context it returned) at compaction event `event_index`."""
        if not -len(self._exchanges) <= event_index < len(self._exchanges):
            raise IndexError(f"compaction {event_index} out of range: the replay has "
                             f"{len(self._exchanges)} compaction events")
        (before, before_length), (after, after_length) = self._exchanges[event_index]
        return before[:before_length], after[:after_length]

    def recorded_columns(self) -> tuple[list[int | None], list[bool]]:
        if self.session is None:
            return [None] * len(self.calls), [False] * len(self.calls)
        messages = self.session.messages
        recorded = {r.call_index for r in getattr(self.session, "recorded_compactions", ())}
        return ([recorded_input_tokens(messages[c.message_index]) for c in self.calls],
                [c.index in recorded for c in self.calls])

    def to_frame(self):  # -> pandas.DataFrame
        """One row per call, with the compaction that preceded it (if any) merged in.

        `recorded_input_tokens` is the input the provider billed for the recorded call (None
        without usage); `recorded_compaction` says the recorded agent compacted before it.
        """
        import pandas as pd

        rows = [asdict(c) for c in self.calls]
        by_call = {e.call_index: e for e in self.compactions}
        billed, compacted = self.recorded_columns()
        for row, recorded_input, recorded_compaction in zip(rows, billed, compacted, strict=True):
            event = by_call.get(row["index"])
            row["tokens_before_compaction"] = event.tokens_before if event else None
            row["summary"] = event.summary if event else None
            row["recorded_input_tokens"] = recorded_input
            row["recorded_compaction"] = recorded_compaction
        frame = pd.DataFrame(rows, columns=[
            *CALL_COLUMNS, "recorded_input_tokens", "recorded_compaction", "tokens_before_compaction", "summary"])
        frame["recorded_input_tokens"] = frame["recorded_input_tokens"].astype("Int64")
        frame.insert(0, "session_id", self.session_id)
        frame.insert(1, "config", self.config.name)
        return frame

    def compactions_frame(self):  # -> pandas.DataFrame
        """One row per compaction event, with the summarizer usage and the per-compaction metrics."""
        import pandas as pd

        rows = []
        for index, event in enumerate(self.compactions):
            row = asdict(event)
            usage = row.pop("summarizer_usage")
            row.update({f"summarizer_{k}": v for k, v in usage.items()})
            if index < len(self.compaction_metrics):
                row.update(self.compaction_metrics[index])
            rows.append(row)
        return pd.DataFrame(rows)


class _History(Sequence[Message]):
    """The first `length` messages of a session, without copying them (`TriggerView.history`)."""

    __slots__ = ("_messages", "_length")

    def __init__(self, messages: Sequence[Message], length: int):
        self._messages = messages
        self._length = length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            return self._messages[:self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self._messages[index]

    def __iter__(self) -> Iterator[Message]:
        for index in range(self._length):
            yield self._messages[index]


def _fast_constructor(cls: type, supplied: Sequence[str]) -> Any:
    """A constructor of the frozen dataclass `cls` from a dict of its fields, set at once.

    A frozen dataclass's __init__ sets each field through `object.__setattr__`; per replayed call
    (a trigger view and a call record each) that is most of the engine's own cost. This builds the
    same object (same fields, equality and repr) by setting its `__dict__` in one step. The fields
    not in `supplied` get their defaults. Classes with slots, a `__post_init__` or a required field
    missing from `supplied` use their constructor.
    """
    fields = dataclasses.fields(cls)
    names = {f.name for f in fields}
    missing = {f.name: f.default for f in fields if f.name not in supplied}
    if (hasattr(cls, "__post_init__") or "__slots__" in cls.__dict__ or not set(supplied) <= names
            or any(v is dataclasses.MISSING for v in missing.values())):
        return lambda values: cls(**values)
    new, set_attribute = object.__new__, object.__setattr__

    def make(values: dict[str, Any]) -> Any:
        instance: Any = new(cls)
        set_attribute(instance, "__dict__", {**missing, **values} if missing else values)
        return instance

    return make


_make_view = _fast_constructor(TriggerView, (
    "call_index", "counters", "gauges", "context_limit", "max_output", "system_tokens", "last_finish_reason",
    "overflow", "reactive", "history"))
_make_call = _fast_constructor(CallRecord, CALL_COLUMNS)


def _bind_session(kind: Any, session: Session) -> None:
    """Call `bind_session(session)` on a kind and on the kinds it holds (combinators, pipelines)."""
    bind = getattr(kind, "bind_session", None)
    if callable(bind):
        bind(session)
    if dataclasses.is_dataclass(kind):
        for f in dataclasses.fields(kind):
            value = getattr(kind, f.name, None)
            children = value if isinstance(value, (list, tuple)) else (value,)
            for child in children:
                if hasattr(child, "kind") and not isinstance(child, (type, Mapping, str)):
                    _bind_session(child, session)


def _usage(completions: Sequence[Completion]) -> dict[str, Any]:
    costs = [c.cost_usd for c in completions]
    return {
        "calls": len(completions),
        "cache_hits": sum(1 for c in completions if c.cache_hit),
        "input_tokens": sum(c.input_tokens for c in completions),
        "output_tokens": sum(c.output_tokens for c in completions),
        "cost_usd": None if any(c is None for c in costs) else float(sum(c for c in costs if c is not None)),
    }


_LazySummarizer = LazyModel  # binds on first use; its one-time start-up is timed apart


def check_invariants(before: Sequence[Message], after: Sequence[Message], *, where: str = "") -> None:
    """Raise `InvariantError` if a compaction lost the system prefix, a pinned message or tool pairing."""
    prefix = f"{where}: " if where else ""
    leading = 0
    while leading < len(before) and before[leading].role == "system":
        leading += 1
    if len(after) < leading or any(
            a is not b and a != b for a, b in zip(before[:leading], after[:leading], strict=True)):
        raise InvariantError(f"{prefix}the leading system messages were not kept")
    pinned = [(i, m) for i, m in enumerate(before) if m.importance >= PINNED_IMPORTANCE]
    if pinned:
        kept = {id(m) for m in after}
        for index, message in pinned:
            if id(message) not in kept and message not in after:
                raise InvariantError(f"{prefix}pinned message {index} ({message.role}) was dropped or changed")
    problems = tool_pairing_problems(after)
    if problems and not tool_pairing_problems(before):
        raise InvariantError(f"{prefix}tool pairing broken: {problems[0]}")


class _Replay:
    """The state of one replay; `run()` walks the session once."""

    def __init__(self, session: Session, config: ReplayConfig, summarizer: Summarizer | None, gateway: Any):
        self.session = session
        self.config = config
        base = get_tokenizer(config.tokenizer)
        self.tokenizer: Tokenizer = base
        self.calibration: CalibrationFit | None = None
        calibration = getattr(config, "calibration", "none") or "none"
        if calibration not in CALIBRATIONS:
            raise ConfigError(f"calibration must be one of {', '.join(CALIBRATIONS)}, not {calibration!r}")
        overhead = 0
        if calibration == "recorded":
            self.calibration = fit_recorded(session, base)
            overhead = self.calibration.overhead
            if self.calibration.scale != 1.0:
                self.tokenizer = ScaledTokenizer(base, self.calibration.scale)
        self.fixed_tokens = overhead + (self.tokenizer.count(schema_text(session.tools)) if session.tools else 0)
        self.strategy_limit = max(1, config.context_limit - self.fixed_tokens)
        self.trigger = config.build_trigger()
        self.strategy = config.build_strategy()
        _bind_session(self.trigger, session)
        _bind_session(self.strategy, session)
        configured = getattr(config, "overflow_retry", None)
        self.forced_retry = configured is True
        self.overflow_retry = bool(getattr(self.trigger, "overflow_retry", False)) if configured is None \
            else bool(configured)
        self.summarizer = summarizer if summarizer is not None else _LazySummarizer(
            config.summarizer, config.summarizer_options, gateway)
        self.calls: list[CallRecord] = []
        self.events: list[CompactionEvent] = []
        self.sent: list[Snapshot] = []
        self.exchanges: list[tuple[Snapshot, Snapshot]] = []
        self.context: list[Message] = []
        self.context_tokens = 0
        self.system_tokens = 0
        self.only_system = True
        self.steps = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.input_by_model: dict[str, int] = {}
        self.tokens_last_call = 0
        self.last_finish_reason: str | None = None
        self.consecutive_failures = 0
        self.breaker_open = False
        self.termination = "completed"
        self.error: str | None = None

    # -- accounting -------------------------------------------------------------------------
    def _counts(self, messages: Sequence[Message]) -> list[int]:
        """Every message's cached token count (counting the uncounted ones first, in one batch)."""
        name = self.tokenizer.name
        try:
            return [m._token_cache[name] for m in messages]
        except KeyError:
            if isinstance(self.tokenizer, ScaledTokenizer):
                prime_scaled(messages, self.tokenizer)
            else:
                prime(messages, self.tokenizer)
            return [m._token_cache[name] for m in messages]

    def _set_context(self, messages: list[Message]) -> None:
        self.context = messages
        tokenizer = self.tokenizer
        name = tokenizer.name
        total = system = steps = 0
        leading = True
        for message in messages:
            tokens = message._token_cache.get(name)
            if tokens is None:
                tokens = message_tokens(message, tokenizer)
            total += tokens
            if message.role == "system":
                if leading:
                    system += tokens
            else:
                leading = False
            if message.role != "tool":
                steps += 1
        self.context_tokens = self.fixed_tokens + total
        self.system_tokens = self.fixed_tokens + system
        self.only_system = leading
        self.steps = steps

    def _append(self, messages: Sequence[Message]) -> None:
        for message in messages:
            tokens = message_tokens(message, self.tokenizer)
            self.context.append(message)
            self.context_tokens += tokens
            if message.role != "tool":
                self.steps += 1
            if self.only_system and message.role == "system":
                self.system_tokens += tokens
            else:
                self.only_system = False

    def _append_recorded(self, start: int, end: int) -> None:
        """Append the session's messages [start:end] in O(1) token accounting (prefix sums)."""
        if self.only_system:
            self._append(self.session.messages[start:end])
            return
        self.context.extend(self.session.messages[start:end])
        self.context_tokens += self._token_prefix[end] - self._token_prefix[start]
        self.steps += self._step_prefix[end] - self._step_prefix[start]

    def _view(self, call_index: int, at: int, *, overflow: bool = False, reactive: bool = False) -> TriggerView:
        counters = {"iterations": call_index, "input_tokens": self.input_tokens,
                    "output_tokens": self.output_tokens, "compactions": len(self.events), **self.input_by_model}
        return _make_view({
            "call_index": call_index, "counters": counters,
            "gauges": {"context_messages": len(self.context), "context_steps": self.steps,
                       "context_tokens": self.context_tokens, "tokens_last_call": self.tokens_last_call},
            "context_limit": self.config.context_limit, "max_output": self.config.max_output,
            "system_tokens": self.system_tokens, "last_finish_reason": self.last_finish_reason,
            "overflow": overflow, "reactive": reactive, "history": _History(self.session.messages, at)})

    def _overflows(self) -> bool:
        return self.context_tokens + self.config.max_output > self.config.context_limit

    def _count_usage(self, completions: Sequence[Completion]) -> None:
        """The summarizer's calls are calls of the agent too: its token counters include them (seed 000)."""
        for completion in completions:
            self.input_tokens += completion.input_tokens
            self.output_tokens += completion.output_tokens
            key = f"input_tokens_for:{completion.model}"
            self.input_by_model[key] = self.input_by_model.get(key, 0) + completion.input_tokens

    # -- compaction -------------------------------------------------------------------------
    def _compact(self, call_index: int, at: int, view: TriggerView) -> bool:
        """Run the strategy; returns False when the replay must stop (fatal failure)."""
        before = self.context
        tokens_before = self.context_tokens
        env = CompactionEnv(tokenizer=self.tokenizer, context_limit=self.strategy_limit,
                            max_output=self.config.max_output, summarizer=self.summarizer,
                            severity=trigger_severity(self.trigger, view), call_index=call_index,
                            breaker_open=self.breaker_open)
        context = Context(tuple(before))
        elapsed = timer_excluding_startup(self.summarizer)
        fell_back = False
        error: str | None = None
        try:
            after = list(self.strategy.compact(context, env))
            if env.completions:
                self.consecutive_failures = 0
        except CompactionError as exc:
            error = str(exc) or type(exc).__name__
            if isinstance(exc, SummarizerError) and not env.breaker_open:
                self.consecutive_failures += 1
                if self.consecutive_failures >= self.config.max_consecutive_failures:
                    self.breaker_open = True
            if self.config.on_failure == "fatal":
                self.events.append(CompactionEvent(
                    call_index=call_index, messages_before=len(before), messages_after=len(before),
                    tokens_before=tokens_before, tokens_after=tokens_before, summary=None,
                    summarizer_usage=_usage(env.completions), duration_s=elapsed(),
                    breaker_open=self.breaker_open, reactive=view.reactive, severity=env.severity, error=error))
                self.exchanges.append(((before, len(before)), (before, len(before))))
                self.termination = "compaction_failed"
                self.error = f"compaction before call {call_index} failed: {error}"
                return False
            env.summaries.clear()  # what the failed attempt recorded is not in the fallback's result
            fallback = getattr(self.strategy, "fallback", None)
            after = list(fallback(context, env)) if callable(fallback) else keep_last_fraction(context)
            fell_back = True
        check_invariants(before, after, where=f"{self.strategy.kind} before call {call_index}")
        self._set_context(after)
        self._count_usage(env.completions)
        freed = tokens_before - self.context_tokens
        self.events.append(CompactionEvent(
            call_index=call_index, messages_before=len(before), messages_after=len(after),
            tokens_before=tokens_before, tokens_after=self.context_tokens,
            summary="\n\n".join(env.summaries) if env.summaries else None,
            summarizer_usage=_usage(env.completions), duration_s=elapsed(),
            fell_back=fell_back, no_progress=freed < NO_PROGRESS_FRACTION * tokens_before,
            breaker_open=self.breaker_open, reactive=view.reactive, severity=env.severity, error=error))
        self.exchanges.append(((before, len(before)), (after, len(after))))
        self.trigger.notify_compacted(self._view(call_index, at, overflow=view.overflow, reactive=view.reactive))
        return True

    # -- the walk ---------------------------------------------------------------------------
    def run(self) -> ReplayResult:
        messages = self.session.messages
        counts = self._counts(messages)
        self._token_prefix = list(accumulate(counts, initial=0))
        roles = [m.role for m in messages]
        self._step_prefix = list(accumulate(map("tool".__ne__, roles), initial=0))
        assistant_at = [i for i, role in enumerate(roles) if role == "assistant"]
        first = assistant_at[0] if assistant_at else len(messages)
        self._set_context(list(messages[:first]))
        should_compact = self.trigger.should_compact
        limit = self.config.context_limit - self.config.max_output
        default_model = str(self.session.metadata.get("model") or "unknown")
        previous_context: list[Message] = []
        previous_length = previous_tokens = 0
        sent, calls, by_model = self.sent, self.calls, self.input_by_model
        model_keys: dict[Any, str] = {}
        ends = [*assistant_at[1:], len(messages)]
        for call_index, at in enumerate(assistant_at):
            compacted = False
            if call_index > 0:
                view = self._view(call_index, at, reactive=self.last_finish_reason == "length")
                if should_compact(view):
                    compacted = True
                    if not self._compact(call_index, at, view):
                        break
            if self.context_tokens > limit:
                if call_index > 0 and self.overflow_retry:
                    view = self._view(call_index, at, overflow=True, reactive=True)
                    if self.forced_retry or should_compact(view):
                        compacted = True
                        if not self._compact(call_index, at, view):
                            break
                if self.context_tokens > limit:
                    self.termination = "context_overflow"
                    self.error = (f"call {call_index}: context {self.context_tokens} + max_output "
                                  f"{self.config.max_output} exceeds context_limit {self.config.context_limit}")
                    break
            context = self.context
            tokens = self.context_tokens
            cached = self._shared_prefix_tokens(previous_context, previous_length) if compacted else previous_tokens
            metadata = messages[at].metadata
            completion = counts[at] - MESSAGE_OVERHEAD
            finish_reason = metadata.get("finish_reason") if metadata else None
            length = len(context)
            sent.append((context, length))
            calls.append(_make_call({
                "index": call_index, "message_index": at, "context_messages": length, "context_tokens": tokens,
                "completion_tokens": completion, "compacted_before": compacted, "cached_prefix_tokens": cached,
                "finish_reason": finish_reason}))
            model = metadata.get("model") if metadata else None
            key = model_keys.get(model)
            if key is None:
                key = model_keys[model] = f"input_tokens_for:{model or default_model}"
            self.input_tokens += tokens
            self.output_tokens += completion
            by_model[key] = by_model.get(key, 0) + tokens
            self.tokens_last_call = tokens + completion
            self.last_finish_reason = finish_reason
            previous_context, previous_length, previous_tokens = context, length, tokens
            self._append_recorded(at, ends[call_index])
        return self._measured(ReplayResult(session_id=self.session.id, config=self.config, calls=self.calls,
                            compactions=self.events, final_context=list(self.context),
                            termination=self.termination, error=self.error,
                            session=self.session, calibration=self.calibration,
                            _sent=self.sent, _exchanges=self.exchanges))

    def _shared_prefix_tokens(self, previous: list[Message], previous_length: int) -> int:
        """Tokens of the longest prefix the current context shares (by identity) with the previous
        call's, the fixed preamble (tool schemas, calibrated overhead) included."""
        shared = self.fixed_tokens
        for old, new in zip(previous[:previous_length], self.context, strict=False):
            if old is not new:
                break
            shared += message_tokens(new, self.tokenizer)
        return shared

    #: Metrics that require a model, computed on request (`replay(..., metrics=[...])`).
    metric_names: tuple[str, ...] = ()

    def _measured(self, result: ReplayResult) -> ReplayResult:
        """The result with its metrics, computed by the registry's metric kinds (built-in and plugins)."""
        values, columns = evaluate_metrics(result, self.metric_names)
        result.metrics = values
        rows: list[dict[str, Any]] = [{} for _ in result.compactions]
        for metric_rows in columns.values():
            for row, extra in zip(rows, metric_rows, strict=False):
                row.update(extra)
        result.compaction_metrics = rows
        return result


def as_session(session: Session | Sequence[MessageLike]) -> Session:
    return session if isinstance(session, Session) else Session.from_messages(session)


def replay(session: Session | Sequence[MessageLike], config: ReplayConfig | Mapping[str, Any] | str,
           *, summarizer: Summarizer | None = None, gateway: Any = None,
           metrics: Sequence[str] | None = None) -> ReplayResult:
    """Replay `session` under `config` (a dict, TOML text or path, or a `ReplayConfig`).

    `result.metrics` holds every registered metric that needs no model, plus the ones named in
    `metrics` (model metrics such as `probe_accuracy`, which use the config's `evaluator`).

    `summarizer` overrides the model named in the config (any object with `.complete(...)`);
    `gateway` is the `workbench.llm` gateway to bind the configured model on (default: the
    process-wide one). Raises `InvariantError` if a strategy breaks an invariant.
    """
    names = tuple(lookup("metric", name).kind for name in metrics or ())  # type: ignore[attr-defined]
    runner = _Replay(as_session(session), parse_config(config), summarizer, gateway)
    runner.metric_names = names
    return runner.run()


def compact(messages: Sequence[MessageLike], strategy: Any, *, summarizer: Summarizer | str | None = None,
            tokenizer: str = "heuristic", context_limit: int = 128_000, max_output: int = 4096,
            severity: str | None = None, summarizer_options: Mapping[str, Any] | None = None,
            gateway: Any = None) -> list[Message]:
    """Run one strategy once on `messages` (Messages or OpenAI dicts) and return the new list.

    `summarizer` is a model string (default `workbench/extractive`) or a Summarizer object.
    """
    from workbench.registry import build_strategy

    built = build_strategy(strategy)
    model = summarizer if isinstance(summarizer, str) or summarizer is None else None
    bound: Summarizer | None = None if model is not None else summarizer  # type: ignore[assignment]
    if bound is None:
        bound = _LazySummarizer(model or DEFAULT_SUMMARIZER, summarizer_options or {}, gateway)
    env = CompactionEnv(tokenizer=get_tokenizer(tokenizer), context_limit=context_limit, max_output=max_output,
                        summarizer=bound, severity=severity)
    before = as_messages(messages)
    after = list(built.compact(Context(tuple(before)), env))
    check_invariants(before, after, where=built.kind)
    return after
