"""The replay's rules: (session, config) -> ReplayResult.

Every recorded assistant message is one LLM call. Before each call but the first the trigger is
asked (`should_compact` on a `TriggerView` of the walk's counters and gauges); when it fires the
strategy compacts the context, an event is recorded and the trigger is notified (even when the
strategy changed nothing: a no-op event). A compaction may change anything but the leading system
messages, the pinned messages and the pairing of tool calls with their results (`check_invariants`).
A call whose context + max_output would not fit in the window is retried once after a compaction
when the trigger's design has an overflow retry (`overflow_retry` on the trigger) or the config
asks for one (`overflow_retry = true`); otherwise the replay ends with `context_overflow`.

What a call costs: the tokens of the context sent (each message's count, `message_tokens`, plus a
fixed preamble: the tool schemas (`session.tools`) and, under `calibration = "recorded"`, the fitted
overhead), the recorded assistant message's tokens as its completion, and as its cached prefix the
tokens it shares with the previous call's context (all of it unless a compaction came between).
Then the recorded assistant message and what follows it (tool results, user turns) are appended.
The summarizer's calls count as calls of the agent in the trigger's token counters.
Strategies see the window minus the preamble as `env.context_limit`.

`replay` walks with the speed of `workbench.replay_fast` (counts kept incrementally, the calls where
the trigger provably cannot fire recorded at once); `reference_replay` walks call by call with none
of it. Both give the same result (tests/test_replay_reference.py). The records and the result are
in `workbench.replay_result`. Kinds that need the replayed session (the `recorded` trigger and
strategy; the Inspect kinds, for its tool definitions) define `bind_session(session)`; the walk calls it
first, inside combinators and pipelines too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any, cast

from workbench.calibration import CALIBRATIONS, CalibrationFit, ScaledTokenizer, fit_recorded, schema_text
from workbench.compaction import (
    CompactionEnv,
    Completion,
    Context,
    Summarizer,
    TriggerView,
    trigger_answer,
    trigger_severity,
)
from workbench.config import ReplayConfig
from workbench.errors import CompactionError, ConfigError, InvariantError, SummarizerError
from workbench.llm.lazy import LazyModel, timer_excluding_startup
from workbench.replay_fast import (
    History,
    Recording,
    cached_counts,
    counted_steps,
    make_view,
    quiet_calls,
    recording_of,
)
from workbench.replay_result import (
    CALL_COLUMNS,
    CallRecords,
    CompactionEvent,
    ReplayResult,
    Snapshot,
    summarizer_usage,
    unchanged,
)
from workbench.session import (
    PINNED_IMPORTANCE,
    Message,
    Session,
    tool_pairing_problems,
    tools_paired,
)
from workbench.strategies.common import (
    BodySteps,
    continue_steps,
    keep_last_fraction,
    known_steps,
    lend_grouping,
    returned_messages,
    shared_prefix_length,
)
from workbench.tokens import Tokenizer, get_tokenizer, message_tokens

#: A compaction that frees less than this share of the context's tokens is marked `no_progress`.
NO_PROGRESS_FRACTION = 0.10
TERMINATIONS = ("completed", "compaction_failed", "context_overflow")


def check_invariants(
    before: Sequence[Message], after: Sequence[Message], *, where: str = "", pinned_before: bool | None = None
) -> None:
    """Raise `InvariantError` if a compaction lost the system prefix, a pinned message or tool pairing.

    When `after` is a strategy's `StepList` that knows its steps pair their calls, the pairing check
    needs no pass over the messages; `pinned_before` says whether `before` holds a pinned message,
    when the caller knows (None: look)."""
    prefix = f"{where}: " if where else ""
    leading = 0
    while leading < len(before) and before[leading].role == "system":
        leading += 1
    if len(after) < leading or any(
        a is not b and a != b for a, b in zip(before[:leading], after[:leading], strict=True)
    ):
        raise InvariantError(f"{prefix}the leading system messages were not kept")
    if pinned_before is None:
        pinned_before = bool(before) and max([m.importance for m in before]) >= PINNED_IMPORTANCE
    if pinned_before:
        kept = {id(m) for m in after}
        for index, message in enumerate(before):
            if message.importance >= PINNED_IMPORTANCE and id(message) not in kept and message not in after:
                raise InvariantError(f"{prefix}pinned message {index} ({message.role}) was dropped or changed")
    known = known_steps(after, leading)
    if (known is not None and known.paired) or tools_paired(after):
        return
    problems = tool_pairing_problems(after)
    if problems and not tool_pairing_problems(before):
        raise InvariantError(f"{prefix}tool pairing broken: {problems[0]}")


def _bind_session(kind: Any, session: Session) -> None:
    """Call `bind_session(session)` on a kind and on the kinds it holds (combinators, pipelines)."""
    bind = getattr(kind, "bind_session", None)
    if callable(bind):
        bind(session)
    if dataclasses.is_dataclass(kind):
        for f in dataclasses.fields(kind):
            value = getattr(kind, f.name, None)
            for child in value if isinstance(value, (list, tuple)) else (value,):
                if hasattr(child, "kind") and not isinstance(child, (type, Mapping, str)):
                    _bind_session(child, session)


def _model_failure(exc: BaseException) -> str | None:
    """The name of the gateway error (`workbench.llm.LLMError`) behind a compaction's failure, if any."""
    from workbench.llm.errors import LLMError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, LLMError):
            return type(seen).__name__
        seen = seen.__cause__
    return None


class ReplayWalk:
    """The state of one replay; `run()` walks the session once. `fast = False` walks call by call,
    recounting the context at every change (`reference_replay`)."""

    fast = True
    recording: Recording  # the session's per-call columns, set by `run`
    #: Metrics that require a model, computed on request (`replay(..., metrics=[...])`).
    metric_names: tuple[str, ...] = ()
    #: False: the result comes back without its metrics (`ReplayResult.measure()` computes them later).
    measure = True

    def __init__(self, session: Session, config: ReplayConfig, summarizer: Summarizer | None, gateway: Any):
        self.session, self.config, self.gateway = session, config, gateway
        base = get_tokenizer(config.tokenizer)
        self.tokenizer: Tokenizer = base
        self.calibration: CalibrationFit | None = None
        calibration = config.calibration or "none"
        if calibration not in CALIBRATIONS:
            raise ConfigError(f"calibration must be one of {', '.join(CALIBRATIONS)}, not {calibration!r}")
        if calibration == "recorded":
            self.calibration = fit_recorded(session, base)
            if self.calibration.scale != 1.0:
                self.tokenizer = ScaledTokenizer(base, self.calibration.scale)
        overhead = self.calibration.overhead if self.calibration else 0
        self.fixed_tokens = overhead + (self.tokenizer.count(schema_text(session.tools)) if session.tools else 0)
        self.strategy_limit = max(1, config.context_limit - self.fixed_tokens)
        self.trigger, self.strategy = config.build_trigger(), config.build_strategy()
        _bind_session(self.trigger, session)
        _bind_session(self.strategy, session)
        configured = config.overflow_retry
        self.forced_retry = configured is True
        designed = bool(getattr(self.trigger, "overflow_retry", False))
        self.overflow_retry = designed if configured is None else bool(configured)
        self.summarizer = (
            summarizer if summarizer is not None else LazyModel(config.summarizer, config.summarizer_options, gateway)
        )
        self.columns: dict[str, list[Any]] = {name: [] for name in CALL_COLUMNS}
        self.events: list[CompactionEvent] = []
        self.sent: list[tuple[int, list[Message]]] = []  # (first call, context list) per context
        self.exchanges: list[tuple[Snapshot, Snapshot]] = []
        self.context: list[Message] = []
        self.context_tokens = self.system_tokens = self.steps = 0
        self.only_system = True
        self.input_tokens = self.output_tokens = self.tokens_last_call = 0
        self.input_by_model: dict[str, int] = {}
        self.last_finish_reason: str | None = None
        self.consecutive_failures, self.breaker_open = 0, False
        self.termination = "completed"
        self.error: str | None = None
        self.model_failure: str | None = None
        self.previous_context: list[Message] = []
        self.previous_length = self.previous_tokens = 0
        #: (leading system messages, steps, body length) of the last compaction's result, when its
        #: strategy returned a `StepList`: the next compaction's context begins with that body (fast only)
        self.known_steps: tuple[int, BodySteps, int] | None = None

    # -- what the context holds and costs ---------------------------------------------------
    @property
    def compactions(self) -> int:
        return len(self.events)

    def _counts(self, messages: Sequence[Message]) -> list[int]:
        if self.fast:
            return cached_counts(messages, self.tokenizer)
        return [message_tokens(m, self.tokenizer) for m in messages]

    def _set_context(self, messages: list[Message], known: tuple[int, BodySteps] | None = None) -> None:
        """The context is now `messages`, measured; `known`: (leading system messages, its body's
        steps with their tokens) when a strategy said how it groups: its tokens are then their sum."""
        self.context = messages
        leading = 0
        while leading < len(messages) and messages[leading].role == "system":
            leading += 1
        self.system_tokens = self.fixed_tokens + sum(self._counts(messages[:leading]))
        if known is not None and not known[1].strays:  # a step: one message that is no observation, then observations
            self.steps = leading + len(known[1].steps)
            self.context_tokens = self.system_tokens + sum(cast("list[int]", known[1].tokens))
        else:
            self.steps = len(messages) - sum([m.is_observation for m in messages])
            self.context_tokens = self.system_tokens + sum(self._counts(messages[leading:]))
        self.only_system = leading == len(messages)

    def _append(self, messages: Sequence[Message]) -> None:
        for message in messages:
            tokens = message_tokens(message, self.tokenizer)
            self.context.append(message)
            self.context_tokens += tokens
            self.steps += not message.is_observation
            if self.only_system and message.role == "system":
                self.system_tokens += tokens
            else:
                self.only_system = False

    def _append_recorded(self, start: int, end: int) -> None:
        """Append the session's messages [start:end] (fast: their tokens from prefix sums)."""
        if not self.fast or self.only_system:
            self._append(self.session.messages[start:end])
            return
        prefix, steps = self.recording.prefix, self.recording.step_prefix
        self.context.extend(self.session.messages[start:end])
        self.context_tokens += prefix[end] - prefix[start]
        self.steps += steps[end] - steps[start]

    def _view(self, call_index: int, at: int, *, overflow: bool = False, reactive: bool = False) -> TriggerView:
        """What the trigger sees before call `call_index` (whose assistant message is at `at`)."""
        counters = {
            "iterations": call_index,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "compactions": len(self.events),
            **self.input_by_model,
        }
        gauges = {
            "context_messages": len(self.context),
            "context_steps": self.steps,
            "context_tokens": self.context_tokens,
            "tokens_last_call": self.tokens_last_call,
        }
        values: dict[str, Any] = {
            "call_index": call_index,
            "counters": counters,
            "gauges": gauges,
            "context_limit": self.config.context_limit,
            "max_output": self.config.max_output,
            "system_tokens": self.system_tokens,
            "last_finish_reason": self.last_finish_reason,
            "overflow": overflow,
            "reactive": reactive,
        }
        if self.fast:
            return make_view(
                {
                    **values,
                    "history": History(self.session.messages, at),
                    "context": History(self.context, len(self.context)),
                }
            )
        return TriggerView(**values, history=tuple(self.session.messages[:at]), context=tuple(self.context))

    def _count_usage(self, completions: Sequence[Completion]) -> None:
        """The summarizer's calls are calls of the agent too: its token counters include them (seed 000)."""
        for completion in completions:
            self.input_tokens += completion.input_tokens
            self.output_tokens += completion.output_tokens
            key = f"input_tokens_for:{completion.model}"
            self.input_by_model[key] = self.input_by_model.get(key, 0) + completion.input_tokens

    # -- a compaction -----------------------------------------------------------------------
    def _compact(self, call_index: int, at: int, view: TriggerView) -> bool:
        """Run the strategy and record the event; False when the replay must stop (fatal failure)."""
        before, tokens_before = self.context, self.context_tokens
        env = CompactionEnv(
            tokenizer=self.tokenizer,
            context_limit=self.strategy_limit,
            max_output=self.config.max_output,
            summarizer=self.summarizer,
            severity=trigger_severity(self.trigger, view),
            call_index=call_index,
            breaker_open=self.breaker_open,
        )
        context = Context(tuple(before))
        if self.fast and self.known_steps is not None and len(context.system) == self.known_steps[0]:
            continue_steps(context, self.known_steps[1], self.known_steps[2])
        elapsed = timer_excluding_startup(self.summarizer)
        fell_back, error = False, None
        try:
            returned = self.strategy.compact(context, env)
            after = returned_messages(returned, self.strategy)  # a StepList is made for us: taken as it is
            if env.completions:
                self.consecutive_failures = 0
        except CompactionError as exc:
            error = str(exc) or type(exc).__name__
            if isinstance(exc, SummarizerError) and not env.breaker_open:
                self.consecutive_failures += 1
                if self.consecutive_failures >= self.config.max_consecutive_failures:
                    self.breaker_open = True
            if self.config.on_failure == "fatal":
                self._record_event(call_index, before, before, tokens_before, env, elapsed(), view, error=error)
                self.termination = "compaction_failed"
                self.error = f"compaction before call {call_index} failed: {error}"
                self.model_failure = _model_failure(exc)
                return False
            env.summaries.clear()  # what the failed attempt recorded is not in the fallback's result
            fallback = getattr(self.strategy, "fallback", None)
            returned = fallback(context, env) if callable(fallback) else keep_last_fraction(context)
            after = list(returned_messages(returned, self.strategy, "fallback"))
            fell_back = True
        leading = len(context.system)
        steps = known_steps(returned, leading) if self.fast else None
        known_before: BodySteps | None = context.__dict__.get("body_steps")
        check_invariants(
            before,
            after if steps is None else returned,
            where=f"{self.strategy.kind} before call {call_index}",
            pinned_before=None
            if known_before is None
            else bool(known_before.pinned) or any(m.pinned for m in context.system),
        )
        counted = None if steps is None else counted_steps(steps, self.tokenizer)
        self._set_context(after, None if counted is None else (leading, counted))
        self.known_steps = None if counted is None else (leading, counted, len(after) - leading)
        self._count_usage(env.completions)
        self._record_event(call_index, before, after, tokens_before, env, elapsed(), view, error, fell_back)
        self.trigger.notify_compacted(self._view(call_index, at, overflow=view.overflow, reactive=view.reactive))
        return True

    def _record_event(
        self,
        call_index: int,
        before: list[Message],
        after: list[Message],
        tokens_before: int,
        env: CompactionEnv,
        duration_s: float,
        view: TriggerView,
        error: str | None = None,
        fell_back: bool = False,
    ) -> None:
        """The event of a compaction that gave `after` (a failed one: `before` again, and its error)."""
        failed = error is not None and not fell_back
        self.events.append(
            CompactionEvent(
                call_index=call_index,
                messages_before=len(before),
                messages_after=len(after),
                tokens_before=tokens_before,
                tokens_after=tokens_before if failed else self.context_tokens,
                summary=None if failed or not env.summaries else "\n\n".join(env.summaries),
                summarizer_usage=summarizer_usage(env.completions),
                duration_s=duration_s,
                fell_back=fell_back,
                no_progress=not failed and tokens_before - self.context_tokens < NO_PROGRESS_FRACTION * tokens_before,
                breaker_open=self.breaker_open,
                reactive=view.reactive,
                severity=env.severity,
                error=error,
                noop=not failed and unchanged(before, after),
            )
        )
        self.exchanges.append(((before, len(before)), (after, len(after))))

    # -- the walk ---------------------------------------------------------------------------
    def run(self) -> ReplayResult:
        messages = self.session.messages
        if self.fast:
            self.recording = recording_of(self.session, self.tokenizer.name, lambda: self._counts(messages))
        else:
            self.recording = Recording.build(self.session, self._counts(messages))
        assistant_at = self.recording.assistant_at
        self._set_context(list(messages[: assistant_at[0] if assistant_at else len(messages)]))
        firing = getattr(self.trigger, "firing_mask", None) if self.fast else None
        call_index, calls = 0, len(assistant_at)
        with lend_grouping(self.recording.grouping) if self.fast else nullcontext():
            while call_index < calls:
                if callable(firing) and call_index > 0 and not self.only_system:
                    try:
                        tokens, lengths = quiet_calls(self, call_index, firing)
                    except NotImplementedError:
                        firing = None
                        continue
                    if tokens:
                        self._record_calls(call_index, tokens, lengths, False, self.previous_tokens)
                        call_index += len(tokens)
                    if call_index >= calls:
                        break
                if not self._call(call_index):
                    break
                call_index += 1
        result = ReplayResult(
            session_id=self.session.id,
            config=self.config,
            calls=CallRecords(self.columns),
            compactions=self.events,
            final_context=list(self.context),
            termination=self.termination,
            error=self.error,
            session=self.session,
            calibration=self.calibration,
            _sent=self.sent,
            _exchanges=self.exchanges,
            gateway=self.gateway,
            model_failure=self.model_failure,
        )
        return result.measure(self.metric_names) if self.measure else result

    def _call(self, call_index: int) -> bool:
        """Replay one call, asking the trigger first; False when the replay stops before it."""
        at = self.recording.assistant_at[call_index]
        compacted = False
        if call_index > 0:
            view = self._view(call_index, at, reactive=self.last_finish_reason == "length")
            if trigger_answer(self.trigger.should_compact(view), self.trigger):
                if not self._compact(call_index, at, view):
                    return False
                compacted = not self.events[-1].noop
        limit = self.config.context_limit - self.config.max_output
        if self.context_tokens > limit and call_index > 0 and self.overflow_retry:
            view = self._view(call_index, at, overflow=True, reactive=True)
            if self.forced_retry or trigger_answer(self.trigger.should_compact(view), self.trigger):
                if not self._compact(call_index, at, view):
                    return False
                compacted = compacted or not self.events[-1].noop
        if self.context_tokens > limit:
            self.termination = "context_overflow"
            self.error = (
                f"call {call_index}: context {self.context_tokens} + max_output "
                f"{self.config.max_output} exceeds context_limit {self.config.context_limit}"
            )
            return False
        cached = (
            self._shared_prefix_tokens(self.previous_context, self.previous_length)
            if compacted
            else self.previous_tokens
        )
        self._record_calls(call_index, [self.context_tokens], [len(self.context)], compacted, cached)
        return True

    def _shared_prefix_tokens(self, previous: list[Message], previous_length: int) -> int:
        """Tokens of the longest prefix the context shares (by identity) with the previous call's,
        the fixed preamble (tool schemas, calibrated overhead) included."""
        shared = min(shared_prefix_length(previous, self.context), previous_length)
        return self.fixed_tokens + sum(self._counts(self.context[:shared]))

    def _record_calls(
        self, first: int, tokens: Sequence[int], lengths: Sequence[int], compacted: bool, cached: int
    ) -> None:
        """Record the calls from `first` on, one per context size in `tokens` / `lengths` (the context
        only grows by appends between them, so each one's cached prefix is the previous one's context),
        count what they cost, then append the recorded messages up to the next call."""
        recording, columns, end = self.recording, self.columns, first + len(tokens)
        completions = recording.completion[first:end]
        if not self.sent or self.sent[-1][1] is not self.context:
            self.sent.append((first, self.context))
        columns["index"].extend(range(first, end))
        columns["message_index"].extend(recording.assistant_at[first:end])
        columns["context_messages"].extend(lengths)
        columns["context_tokens"].extend(tokens)
        columns["completion_tokens"].extend(completions)
        columns["compacted_before"].extend([compacted, *[False] * (len(tokens) - 1)])
        columns["cached_prefix_tokens"].extend([cached, *tokens[:-1]])
        columns["finish_reason"].extend(recording.finish_reasons[first:end])
        self.input_tokens += sum(tokens)
        self.output_tokens += sum(completions)
        by_model = self.input_by_model
        if len(recording.model_names) == 1:  # one model: its counter takes every call's input
            by_model[recording.model_names[0]] = by_model.get(recording.model_names[0], 0) + sum(tokens)
        else:
            for key, value in zip(recording.model_keys[first:end], tokens, strict=True):
                by_model[key] = by_model.get(key, 0) + value
        self.tokens_last_call = tokens[-1] + completions[-1]
        self.last_finish_reason = recording.finish_reasons[end - 1]
        self.previous_context, self.previous_length, self.previous_tokens = self.context, lengths[-1], tokens[-1]
        self._append_recorded(recording.assistant_at[first], recording.ends[end - 1])
