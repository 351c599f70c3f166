"""The replay engine: (session, config) -> ReplayResult.

Walk the recording; every recorded assistant message is one LLM call. Before each call but the
first the trigger is asked; when it fires the strategy compacts the context, an event is
recorded and the trigger is notified. The context sent for the call is measured, then the
recorded assistant message and what follows it (tool results, user turns) are appended. A call
whose context + max_output would not fit gives the trigger one reactive chance; if the context
still does not fit the replay ends with `context_overflow`.

Tokens are counted once per message (cached on the message) and the context's total is kept
incrementally, so a call costs O(1) unless a compaction happened before it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import accumulate
from typing import Any

from workbench.compaction import CompactionEnv, Completion, Context, Summarizer, TriggerView, trigger_severity
from workbench.config import DEFAULT_SUMMARIZER, ReplayConfig, parse_config
from workbench.errors import CompactionError, InvariantError, SummarizerError
from workbench.session import Message, MessageLike, Session, as_messages, split_leading_system, tool_pairing_problems
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


@dataclass
class ReplayResult:
    session_id: str
    config: ReplayConfig
    calls: list[CallRecord]
    compactions: list[CompactionEvent]
    final_context: list[Message]
    termination: str
    error: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_frame(self):  # -> pandas.DataFrame
        """One row per call, with the compaction that preceded it (if any) merged in."""
        import pandas as pd

        rows = [asdict(c) for c in self.calls]
        by_call = {e.call_index: e for e in self.compactions}
        for row in rows:
            event = by_call.get(row["index"])
            row["tokens_before_compaction"] = event.tokens_before if event else None
            row["summary"] = event.summary if event else None
        frame = pd.DataFrame(rows, columns=[
            "index", "message_index", "context_messages", "context_tokens", "completion_tokens",
            "compacted_before", "cached_prefix_tokens", "finish_reason", "tokens_before_compaction", "summary"])
        frame.insert(0, "session_id", self.session_id)
        frame.insert(1, "config", self.config.name)
        return frame

    def compactions_frame(self):  # -> pandas.DataFrame
        import pandas as pd

        rows = []
        for event in self.compactions:
            row = asdict(event)
            usage = row.pop("summarizer_usage")
            row.update({f"summarizer_{k}": v for k, v in usage.items()})
            rows.append(row)
        return pd.DataFrame(rows)


def _usage(completions: Sequence[Completion]) -> dict[str, Any]:
    costs = [c.cost_usd for c in completions]
    return {
        "calls": len(completions),
        "cache_hits": sum(1 for c in completions if c.cache_hit),
        "input_tokens": sum(c.input_tokens for c in completions),
        "output_tokens": sum(c.output_tokens for c in completions),
        "cost_usd": None if any(c is None for c in costs) else float(sum(costs)),
    }


class _LazySummarizer:
    """Creates the gateway model on first use, so replays that never summarize never import litellm."""

    def __init__(self, model: str, options: Mapping[str, Any], gateway: Any = None):
        self.model = model
        self._options = dict(options)
        self._gateway = gateway
        self._bound: Summarizer | None = None

    def complete(self, messages, *, purpose="summary", max_tokens=None) -> Completion:
        if self._bound is None:
            from workbench import llm

            gateway = self._gateway or llm.default_gateway()
            self._bound = gateway.model(self.model, self._options)
        return self._bound.complete(messages, purpose=purpose, max_tokens=max_tokens)


def _completion_tokens(message: Message, tokenizer: Tokenizer) -> int:
    return message_tokens(message, tokenizer) - MESSAGE_OVERHEAD


def _model_of(message: Message, session: Session) -> str:
    return str(message.metadata.get("model") or session.metadata.get("model") or "unknown")


def _step_count(messages: Sequence[Message]) -> int:
    return sum(1 for m in messages if m.role != "tool")


def check_invariants(before: Sequence[Message], after: Sequence[Message], *, where: str = "") -> None:
    """Raise `InvariantError` if a compaction lost the system prefix, a pinned message or tool pairing."""
    prefix = f"{where}: " if where else ""
    system_before, _ = split_leading_system(before)
    system_after = list(after[:len(system_before)])
    if len(system_after) != len(system_before) or any(
            a is not b and a != b for a, b in zip(system_before, system_after, strict=True)):
        raise InvariantError(f"{prefix}the leading system messages were not kept")
    kept = {id(m) for m in after}
    for index, message in enumerate(before):
        if message.pinned and id(message) not in kept and message not in after:
            raise InvariantError(f"{prefix}pinned message {index} ({message.role}) was dropped or changed")
    problems = tool_pairing_problems(after)
    if problems and not tool_pairing_problems(before):
        raise InvariantError(f"{prefix}tool pairing broken: {problems[0]}")


class _Replay:
    """The state of one replay; `run()` walks the session once."""

    def __init__(self, session: Session, config: ReplayConfig, summarizer: Summarizer | None, gateway: Any):
        self.session = session
        self.config = config
        self.tokenizer = get_tokenizer(config.tokenizer)
        self.trigger = config.build_trigger()
        self.strategy = config.build_strategy()
        self.summarizer = summarizer if summarizer is not None else _LazySummarizer(
            config.summarizer, config.summarizer_options, gateway)
        self.calls: list[CallRecord] = []
        self.events: list[CompactionEvent] = []
        self.context: list[Message] = []
        self.context_tokens = 0
        self.system_tokens = 0
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
    def _set_context(self, messages: list[Message]) -> None:
        self.context = messages
        self.context_tokens = sum(message_tokens(m, self.tokenizer) for m in messages)
        system, rest = split_leading_system(messages)
        self.system_tokens = sum(message_tokens(m, self.tokenizer) for m in system)
        self.only_system = not rest
        self.steps = _step_count(messages)

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

    def _view(self, call_index: int, *, overflow: bool = False, reactive: bool = False) -> TriggerView:
        counters = {"iterations": call_index, "input_tokens": self.input_tokens,
                    "output_tokens": self.output_tokens, "compactions": len(self.events)}
        for model, tokens in self.input_by_model.items():
            counters[f"input_tokens_for:{model}"] = tokens
        gauges = {"context_messages": len(self.context), "context_steps": self.steps,
                  "context_tokens": self.context_tokens, "tokens_last_call": self.tokens_last_call}
        return TriggerView(call_index=call_index, counters=counters, gauges=gauges,
                           context_limit=self.config.context_limit, max_output=self.config.max_output,
                           system_tokens=self.system_tokens, last_finish_reason=self.last_finish_reason,
                           overflow=overflow, reactive=reactive)

    def _overflows(self) -> bool:
        return self.context_tokens + self.config.max_output > self.config.context_limit

    # -- compaction -------------------------------------------------------------------------
    def _compact(self, call_index: int, view: TriggerView) -> bool:
        """Run the strategy; returns False when the replay must stop (fatal failure)."""
        before = self.context
        tokens_before = self.context_tokens
        env = CompactionEnv(tokenizer=self.tokenizer, context_limit=self.config.context_limit,
                            max_output=self.config.max_output, summarizer=self.summarizer,
                            severity=trigger_severity(self.trigger, view), call_index=call_index,
                            breaker_open=self.breaker_open)
        context = Context(tuple(before))
        started = time.perf_counter()
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
                    summarizer_usage=_usage(env.completions), duration_s=time.perf_counter() - started,
                    breaker_open=self.breaker_open, reactive=view.reactive, severity=env.severity, error=error))
                self.termination = "compaction_failed"
                self.error = f"compaction before call {call_index} failed: {error}"
                return False
            fallback = getattr(self.strategy, "fallback", None)
            after = list(fallback(context, env)) if callable(fallback) else keep_last_fraction(context)
            fell_back = True
        check_invariants(before, after, where=f"{self.strategy.kind} before call {call_index}")
        self._set_context(after)
        freed = tokens_before - self.context_tokens
        self.events.append(CompactionEvent(
            call_index=call_index, messages_before=len(before), messages_after=len(after),
            tokens_before=tokens_before, tokens_after=self.context_tokens,
            summary="\n\n".join(env.summaries) if env.summaries else None,
            summarizer_usage=_usage(env.completions), duration_s=time.perf_counter() - started,
            fell_back=fell_back, no_progress=freed < NO_PROGRESS_FRACTION * tokens_before,
            breaker_open=self.breaker_open, reactive=view.reactive, severity=env.severity, error=error))
        self.trigger.notify_compacted(self._view(call_index, overflow=view.overflow, reactive=view.reactive))
        return True

    # -- the walk ---------------------------------------------------------------------------
    def run(self) -> ReplayResult:
        messages = self.session.messages
        prime(messages, self.tokenizer)
        self._token_prefix = list(accumulate((message_tokens(m, self.tokenizer) for m in messages), initial=0))
        self._step_prefix = list(accumulate((m.role != "tool" for m in messages), initial=0))
        assistant_at = [i for i, m in enumerate(messages) if m.role == "assistant"]
        first = assistant_at[0] if assistant_at else len(messages)
        self._set_context(list(messages[:first]))
        previous_context: list[Message] = []
        previous_length = previous_tokens = 0
        for call_index, at in enumerate(assistant_at):
            compacted = False
            if call_index > 0:
                view = self._view(call_index, reactive=self.last_finish_reason == "length")
                if self.trigger.should_compact(view):
                    compacted = True
                    if not self._compact(call_index, view):
                        break
            if self._overflows():
                view = self._view(call_index, overflow=True, reactive=True)
                if call_index > 0 and self.trigger.should_compact(view):
                    compacted = True
                    if not self._compact(call_index, view):
                        break
                if self._overflows():
                    self.termination = "context_overflow"
                    self.error = (f"call {call_index}: context {self.context_tokens} + max_output "
                                  f"{self.config.max_output} exceeds context_limit {self.config.context_limit}")
                    break
            if compacted:
                cached = self._shared_prefix_tokens(previous_context, previous_length)
            else:
                cached = previous_tokens
            reply = messages[at]
            completion = _completion_tokens(reply, self.tokenizer)
            finish_reason = reply.metadata.get("finish_reason")
            self.calls.append(CallRecord(
                index=call_index, message_index=at, context_messages=len(self.context),
                context_tokens=self.context_tokens, completion_tokens=completion, compacted_before=compacted,
                cached_prefix_tokens=cached, finish_reason=finish_reason))
            model = _model_of(reply, self.session)
            self.input_tokens += self.context_tokens
            self.output_tokens += completion
            self.input_by_model[model] = self.input_by_model.get(model, 0) + self.context_tokens
            self.tokens_last_call = self.context_tokens + completion
            self.last_finish_reason = finish_reason
            previous_context, previous_length, previous_tokens = self.context, len(self.context), self.context_tokens
            end = assistant_at[call_index + 1] if call_index + 1 < len(assistant_at) else len(messages)
            self._append_recorded(at, end)
        return ReplayResult(session_id=self.session.id, config=self.config, calls=self.calls,
                            compactions=self.events, final_context=list(self.context),
                            termination=self.termination, error=self.error, metrics=self._metrics())

    def _shared_prefix_tokens(self, previous: list[Message], previous_length: int) -> int:
        """Tokens of the longest prefix the current context shares (by identity) with the previous call's."""
        shared = 0
        for old, new in zip(previous[:previous_length], self.context, strict=False):
            if old is not new:
                break
            shared += message_tokens(new, self.tokenizer)
        return shared

    def _metrics(self) -> dict[str, Any]:
        done = [e for e in self.events if not e.failed]
        billed = sum(c.context_tokens for c in self.calls)
        cached = sum(c.cached_prefix_tokens for c in self.calls)
        usage = _usage([]) | {"calls": 0}
        costs: list[float | None] = []
        for event in self.events:
            for key in ("calls", "cache_hits", "input_tokens", "output_tokens"):
                usage[key] += event.summarizer_usage.get(key, 0)
            costs.append(event.summarizer_usage.get("cost_usd"))
        ratios = [e.tokens_before / e.tokens_after for e in done if e.tokens_after > 0]
        return {
            "calls": len(self.calls),
            "compactions": len(done),
            "peak_context_tokens": max((c.context_tokens for c in self.calls), default=0),
            "billed_input_tokens": billed,
            "cached_input_tokens": cached,
            "cache_aware_input_tokens": round(billed - cached + cached * self.config.cache_read_ratio, 1),
            "summarizer_calls": usage["calls"],
            "summarizer_input_tokens": usage["input_tokens"],
            "summarizer_output_tokens": usage["output_tokens"],
            "cost_usd": None if any(c is None for c in costs) else float(sum(costs)),
            "compression_ratio": sum(ratios) / len(ratios) if ratios else None,
            "no_progress_compactions": sum(1 for e in done if e.no_progress),
            "fallbacks": sum(1 for e in self.events if e.fell_back),
            "termination": self.termination,
        }


def as_session(session: Session | Sequence[MessageLike]) -> Session:
    return session if isinstance(session, Session) else Session.from_messages(session)


def replay(session: Session | Sequence[MessageLike], config: ReplayConfig | Mapping[str, Any] | str,
           *, summarizer: Summarizer | None = None, gateway: Any = None) -> ReplayResult:
    """Replay `session` under `config` (a dict, TOML text or path, or a `ReplayConfig`).

    `summarizer` overrides the model named in the config (any object with `.complete(...)`);
    `gateway` is the `workbench.llm` gateway to bind the configured model on (default: the
    process-wide one). Raises `InvariantError` if a strategy breaks an invariant.
    """
    return _Replay(as_session(session), parse_config(config), summarizer, gateway).run()


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
    env = CompactionEnv(tokenizer=tokenizer, context_limit=context_limit, max_output=max_output,
                        summarizer=bound, severity=severity)
    before = as_messages(messages)
    after = list(built.compact(Context(tuple(before)), env))
    check_invariants(before, after, where=built.kind)
    return after
