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
import json
import os
import threading
import warnings
import weakref
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import accumulate, chain, compress, count, repeat
from operator import is_
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

from workbench.calibration import CALIBRATIONS, CalibrationFit, ScaledTokenizer, fit_recorded, prime_scaled, schema_text
from workbench.compaction import (
    CallSpan,
    CompactionEnv,
    Completion,
    Context,
    Summarizer,
    TriggerView,
    first_true,
    trigger_answer,
    trigger_severity,
)
from workbench.config import (
    DEFAULT_CONTEXT_LIMIT,
    DEFAULT_MAX_OUTPUT,
    DEFAULT_SUMMARIZER,
    ON_FAILURE,
    ReplayConfig,
    parse_config,
)
from workbench.errors import CompactionError, ConfigError, InvariantError, SummarizerError
from workbench.llm.lazy import LazyModel, timer_excluding_startup
from workbench.registry import evaluate_metrics, lookup
from workbench.session import (
    PINNED_IMPORTANCE,
    Message,
    MessageLike,
    Session,
    Step,
    as_messages,
    recorded_input_tokens,
    tool_pairing_problems,
    tools_paired,
)
from workbench.strategies.common import (
    BodySteps,
    Grouping,
    continue_steps,
    keep_last_fraction,
    known_steps,
    lend_grouping,
    returned_messages,
    shared_prefix_length,
)
from workbench.tokens import MESSAGE_OVERHEAD, Tokenizer, get_tokenizer, message_tokens, messages_tokens, prime

if TYPE_CHECKING:  # pandas loads on first use (`to_frame`)
    import pandas as pd

NO_PROGRESS_FRACTION = 0.10
#: The most calls `_Replay._skip` reads at once: a trigger fires every few dozen calls in a long
#: session, and the arrays of the rest of a 2,000-call session would be built for nothing.
SKIP_SPAN = 256
TERMINATIONS = ("completed", "compaction_failed", "context_overflow")


@dataclass(frozen=True)
class CallRecord:
    """One replayed LLM call (0-based `index`; `message_index` is the assistant message in the session).

    `compacted_before`: a compaction changed the context just before this call (a no-op firing does not).
    """

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
    """One firing of the trigger and what the strategy did with it.

    `noop`: the strategy returned the context it was given (`unchanged`): the event is kept (the
    trigger fired and was notified) but it is no compaction: the `compactions` metric, the charts
    and the compaction lists leave it out, and `noop_compactions` counts it. A failed event is
    never a no-op.
    """

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
    noop: bool = False

    @property
    def failed(self) -> bool:
        """The strategy failed and nothing replaced its result (fatal policy)."""
        return self.error is not None and not self.fell_back


def unchanged(before: Sequence[Message], after: Sequence[Message]) -> bool:
    """Whether a strategy's output is the context it was given: as many messages, and each the
    message at the same position (the same object, or one equal to it in every field: role,
    content, tool calls, ids, origin, importance, metadata). Its tokens then agree too."""
    return len(before) == len(after) and all(a is b or a == b for a, b in zip(before, after, strict=True))


def changed_compactions(events: Iterable[CompactionEvent]) -> list[CompactionEvent]:
    """The events that changed the context: neither failed nor no-ops (what `compactions` counts)."""
    return [e for e in events if not e.failed and not e.noop]


def strategy_kind(config: ReplayConfig) -> str:
    """The kind name of a config's strategy (`pipeline` for a pipeline)."""
    kind = getattr(getattr(config, "built_strategy", None), "kind", None)
    if kind is None and isinstance(config.strategy, Mapping):
        kind = config.strategy.get("kind")
    return str(kind or "?")


def noop_note(config: str, kind: str, firings: int, where: str) -> str:
    """What to say of a config whose trigger fired `firings` times in `where` ("this session", "500
    sessions of dataset 'samples'") and whose strategy (`kind`) never changed the context."""
    return (
        f"{config!r} ({kind}) found nothing to change in {where}: its trigger fired {firings:,} "
        f"time{'s' * (firings != 1)} and every compaction left the context as it was"
    )


#: A context as it was at some point: the engine's list and its length then (it only grows by appends).
Snapshot = tuple[list[Message], int]

CALL_COLUMNS = (
    "index",
    "message_index",
    "context_messages",
    "context_tokens",
    "completion_tokens",
    "compacted_before",
    "cached_prefix_tokens",
    "finish_reason",
)


class CallRecords(Sequence[CallRecord]):
    """`ReplayResult.calls`: the per-call records, kept as columns (one list per `CallRecord` field).

    The engine writes whole runs of calls at once; `CallRecord` objects are built only when read
    (all of them on iteration, one on `calls[i]`), and the cost metrics read the columns directly
    (`column(name)`). It compares equal to another `CallRecords` or to a list of equal records.
    """

    __slots__ = ("_columns", "_records")

    def __init__(self, columns: Mapping[str, Sequence[Any]] | None = None):
        self._columns: dict[str, list[Any]] = {
            name: list(columns[name]) if columns is not None else [] for name in CALL_COLUMNS
        }
        if len({len(values) for values in self._columns.values()}) > 1:
            raise ValueError("call columns of different lengths")
        self._records: list[CallRecord] | None = None

    def column(self, name: str) -> list[Any]:
        """One field of every call, in call order (the list itself: do not modify it)."""
        return self._columns[name]

    def _all(self) -> list[CallRecord]:
        if self._records is None:
            columns = self._columns
            self._records = [
                _make_call(dict(zip(CALL_COLUMNS, row, strict=True)))
                for row in zip(*(columns[name] for name in CALL_COLUMNS), strict=True)
            ]
        return self._records

    def __len__(self) -> int:
        return len(self._columns["index"])

    @overload
    def __getitem__(self, index: int) -> CallRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[CallRecord]: ...

    def __getitem__(self, index: int | slice) -> CallRecord | list[CallRecord]:
        if isinstance(index, slice) or self._records is not None:
            return self._all()[index]
        size = len(self)
        position = index + size if index < 0 else index
        if not 0 <= position < size:
            raise IndexError("call index out of range")
        return _make_call({name: self._columns[name][position] for name in CALL_COLUMNS})

    def __iter__(self) -> Iterator[CallRecord]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CallRecords):
            return self._columns == other._columns
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and self._all() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking sequence, compared by value

    def __repr__(self) -> str:
        return repr(self._all())

    def __reduce__(self) -> tuple[Any, ...]:
        return (CallRecords, (self._columns,))


def call_column(calls: Sequence[Any], name: str) -> Sequence[Any]:
    """One field of every call record: the stored column of a `CallRecords` (or of any calls object
    with a `column(name)` method), else read record by record. Do not modify what it returns."""
    column = getattr(calls, "column", None)
    if callable(column):
        found: Sequence[Any] = column(name)
        return found
    return [getattr(call, name) for call in calls]


#: The metrics a notebook shows of a result (`ReplayResult._repr_html_`), when it has them.
SHOWN_METRICS = (
    "calls",
    "compactions",
    "peak_context_tokens",
    "billed_input_tokens",
    "cached_input_tokens",
    "cost_usd",
    "fact_retention",
    "needed_fact_retention",
    "dangling_references",
    "probe_answerable",
)


def _shown_value(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if name == "cost_usd":
        return f"${value:,.4f}"
    if isinstance(value, float):
        return f"{value:.3f}"
    return f"{value:,}"


@dataclass
class ReplayResult:
    """What a replay produced: per-call records, compaction events, the final context, metrics.

    `calls` is a `CallRecords` (columns, records built when read). `context_at(i)` and
    `compaction_contexts(j)` rebuild the messages sent at call i / given to and returned by the
    strategy at event j from snapshots: the engine's context list (it only grows by appends between
    compactions) from the call where it became the context (`_sent`: (first call, list) pairs),
    cut at the length the call recorded, so keeping them costs nothing per call. `calibration` is the fit applied under
    `calibration = "recorded"` (None otherwise); `compaction_metrics` holds one dict of metric
    columns per event, merged into `compactions_frame()`. `gateway` is the `workbench.llm` gateway
    the replay was given, on which the model metrics bind the config's evaluator, so its calls share
    that gateway's cache, limits and counters (None: the process-wide default); it is not pickled.
    `model_failure` names the gateway's error (e.g. `AuthenticationFailed`) when the replay stopped
    because its model could not be used (`compaction_failed` under `on_failure = "fatal"`): the
    stop then says nothing of the configuration, and an experiment counts the cell as failed.
    """

    session_id: str
    config: ReplayConfig
    calls: Sequence[CallRecord]
    compactions: list[CompactionEvent]
    final_context: list[Message]
    termination: str
    error: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    session: Session | None = None
    calibration: CalibrationFit | None = None
    compaction_metrics: Sequence[Mapping[str, Any]] = field(default_factory=list)
    _sent: list[tuple[int, list[Message]]] = field(default_factory=list, repr=False, compare=False)
    _exchanges: list[tuple[Snapshot, Snapshot]] = field(default_factory=list, repr=False, compare=False)
    _recorded: tuple[list[int | None], list[bool]] | None = field(default=None, repr=False, compare=False)
    gateway: Any = field(default=None, repr=False, compare=False)
    model_failure: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "gateway": None}  # a process's connections and locks stay in it

    def __repr__(self) -> str:
        compactions = len(changed_compactions(self.compactions))
        noops = sum(1 for e in self.compactions if e.noop)
        return (
            f"<ReplayResult {self.session_id} {self.config.name!r}: {len(self.calls)} calls, "
            f"{compactions} compaction{'s' * (compactions != 1)}"
            f"{f' (+{noops} no-op)' if noops else ''}, {self.termination}>"
        )

    def _repr_html_(self) -> str:
        """What a notebook shows: the result's line, why it stopped early (if it did), its main
        metrics, and the summarizer, labelled when it is the offline extractive baseline."""
        from html import escape

        from workbench.extractive import OFFLINE_BASELINE_LABEL, is_offline_baseline

        parts = [f"<div><code>{escape(repr(self))}</code>"]
        if self.error:
            parts.append(f"<div style='color:#b00020'>stopped: {escape(self.error)}</div>")
        rows = "".join(
            f"<tr><th style='text-align:left'>{escape(name)}</th><td style='text-align:right'>"
            f"{escape(_shown_value(name, self.metrics[name]))}</td></tr>"
            for name in SHOWN_METRICS
            if self.metrics.get(name) is not None
        )
        if rows:
            parts.append(f"<table>{rows}</table>")
        if self.calibration is not None:
            parts.append(f"<div>{escape(self.calibration.describe())}</div>")
        summarizer = self.config.summarizer
        if summarizer and self.summarized:
            label = f": the {OFFLINE_BASELINE_LABEL}" if is_offline_baseline(summarizer) else ""
            parts.append(f"<div>summaries by <code>{escape(summarizer)}</code>{escape(label)}</div>")
        parts.append("<div><small>result.metrics, result.to_frame(), result.compactions_frame()</small></div></div>")
        return "".join(parts)

    def measure(self, names: Sequence[str] = ()) -> ReplayResult:
        """Compute the metrics into `metrics` and `compaction_metrics` (every registered metric that
        needs no model, plus the model metrics named in `names`) and return this result.

        `replay()` does it unless told `measure=False`."""
        values, columns = evaluate_metrics(self, names)
        self.metrics = values
        rows: list[dict[str, Any]] = [{} for _ in self.compactions]
        for metric_rows in columns.values():
            for row, extra in zip(rows, metric_rows, strict=False):
                row.update(extra)
        self.compaction_metrics = rows
        return self

    def noop_note(self) -> str | None:
        """`noop_note` for this session when the trigger fired and every firing was a no-op, else None."""
        if not self.compactions or not all(e.noop for e in self.compactions):
            return None
        return noop_note(self.config.name, strategy_kind(self.config), len(self.compactions), "this session")

    @property
    def summarized(self) -> bool:
        """Whether the config's summarizer was called (cache hits included): a recorded summary or a
        window's cut calls none."""
        return any(event.summarizer_usage.get("calls") for event in self.compactions)

    def baseline_note(self) -> str | None:
        """The sentence labelling this result's summaries as the offline extractive baseline's
        (`workbench.extractive.baseline_note`), when its summarizer is that baseline and was called."""
        from workbench.extractive import baseline_note

        return baseline_note([self.config.summarizer]) if self.summarized else None

    def context_at(self, call_index: int) -> list[Message]:
        """The messages sent at call `call_index` (0-based; negative counts from the end)."""
        made = len(self.calls) if self._sent else 0
        if not -made <= call_index < made:
            raise IndexError(f"call {call_index} out of range: the replay made {made} calls")
        if call_index < 0:
            call_index += made
        segment = bisect_right(self._sent, call_index, key=lambda item: item[0]) - 1
        length = call_column(self.calls, "context_messages")[call_index]
        return self._sent[segment][1][:length]

    def compaction_contexts(self, event_index: int) -> tuple[list[Message], list[Message]]:
        """(the context the strategy received, the context it returned) at compaction event `event_index`."""
        if not -len(self._exchanges) <= event_index < len(self._exchanges):
            raise IndexError(
                f"compaction {event_index} out of range: the replay has {len(self._exchanges)} compaction events"
            )
        (before, before_length), (after, after_length) = self._exchanges[event_index]
        return before[:before_length], after[:after_length]

    def detached(self) -> ReplayResult:
        """This result without the session, the context snapshots and the final context (what
        `context_at` and `compaction_contexts` read), its recorded columns kept: what an executor
        sends back to the run's writer, which stores none of the rest. A fraction of the size."""
        return dataclasses.replace(
            self,
            session=None,
            final_context=[],
            _sent=[],
            _exchanges=[],
            _recorded=self.recorded_columns(),
            gateway=None,
        )

    def recorded_columns(self) -> tuple[list[int | None], list[bool]]:
        """Per call: the input the provider billed for the recorded call, and whether the recorded
        agent compacted before it (from the session; None / False without one)."""
        if self._recorded is not None:
            return list(self._recorded[0]), list(self._recorded[1])
        if self.session is None:
            return [None] * len(self.calls), [False] * len(self.calls)
        messages = self.session.messages
        recorded = {r.call_index for r in getattr(self.session, "recorded_compactions", ())}
        return (
            [recorded_input_tokens(messages[i]) for i in call_column(self.calls, "message_index")],
            [i in recorded for i in call_column(self.calls, "index")],
        )

    def observation_columns(self) -> tuple[list[int | None], list[int | None]]:
        """Per call: the observations in the context sent (`Message.is_observation`: tool results and
        a text-action agent's user observations), and how many of them a compaction had replaced
        (masked, cleared or cut: origin `compacted_modified`); None without the context snapshots
        (a `detached` result)."""
        if not self._sent:
            return [None] * len(self.calls), [None] * len(self.calls)
        lengths = call_column(self.calls, "context_messages")
        seen: list[int | None] = []
        hidden: list[int | None] = []
        segment_starts = [first for first, _ in self._sent]
        for segment, (first, context) in enumerate(self._sent):
            stop = segment_starts[segment + 1] if segment + 1 < len(segment_starts) else len(self.calls)
            if first >= stop:
                continue
            flags = [m.is_observation for m in context[: lengths[stop - 1]]]
            seen_prefix = list(accumulate(flags, initial=0))
            hidden_prefix = list(
                accumulate(
                    [f and m.origin == "compacted_modified" for f, m in zip(flags, context, strict=False)], initial=0
                )
            )
            for call in range(first, stop):
                seen.append(seen_prefix[lengths[call]])
                hidden.append(hidden_prefix[lengths[call]])
        return seen, hidden

    def to_frame(self) -> pd.DataFrame:
        """One row per call, with the compaction that preceded it (if any; no-ops left out) merged in.

        `recorded_input_tokens` is the input the provider billed for the recorded call (None
        without usage); `recorded_compaction` says the recorded agent compacted before it;
        `context_observations` counts the observations in the context and `hidden_observations` those
        a compaction replaced (`observation_columns`).
        """
        import pandas as pd

        columns: dict[str, Any] = {name: list(call_column(self.calls, name)) for name in CALL_COLUMNS}
        by_call = {e.call_index: e for e in self.compactions if not e.noop}
        events = [by_call.get(index) for index in columns["index"]]
        columns["recorded_input_tokens"], columns["recorded_compaction"] = self.recorded_columns()
        columns["tokens_before_compaction"] = [e.tokens_before if e else None for e in events]
        columns["summary"] = [e.summary if e else None for e in events]
        columns["context_observations"], columns["hidden_observations"] = self.observation_columns()
        frame = pd.DataFrame(
            columns,
            columns=[
                *CALL_COLUMNS,
                "recorded_input_tokens",
                "recorded_compaction",
                "tokens_before_compaction",
                "summary",
                "context_observations",
                "hidden_observations",
            ],
        )
        for name in ("recorded_input_tokens", "context_observations", "hidden_observations"):
            frame[name] = frame[name].astype("Int64")
        frame.insert(0, "session_id", self.session_id)
        frame.insert(1, "config", self.config.name)
        return frame

    def compactions_frame(self) -> pd.DataFrame:
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
        if not rows:  # the columns a frame with events has, and one per measured compaction-level metric
            measured = [name for name in self.metrics if getattr(_metric_kind(name), "level", None) == "compaction"]
            return pd.DataFrame(columns=[*COMPACTION_COLUMNS, *measured])
        return pd.DataFrame(rows)


def _metric_kind(name: str) -> Any:
    """The registered metric kind called `name` (None for a value no registered metric gives)."""
    try:
        return lookup("metric", name)
    except ConfigError:
        return None


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
            return self._messages[: self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self._messages[index]

    def __iter__(self) -> Iterator[Message]:
        for index in range(self._length):
            yield self._messages[index]


_Record = TypeVar("_Record")


def _fast_constructor(cls: type[_Record], supplied: Sequence[str]) -> Callable[[dict[str, Any]], _Record]:
    """A constructor of the frozen dataclass `cls` from a dict of its fields, set at once.

    A frozen dataclass's __init__ sets each field through `object.__setattr__`; per replayed call
    (a trigger view and a call record each) that is most of the engine's own cost. This builds the
    same object (same fields, equality and repr) by setting its `__dict__` in one step. The fields
    not in `supplied` get their defaults. Classes with slots, a `__post_init__` or a required field
    missing from `supplied` use their constructor.
    """
    fields = dataclasses.fields(cast(Any, cls))
    names = {f.name for f in fields}
    missing = {f.name: f.default for f in fields if f.name not in supplied}
    if (
        hasattr(cls, "__post_init__")
        or "__slots__" in cls.__dict__
        or not set(supplied) <= names
        or any(v is dataclasses.MISSING for v in missing.values())
    ):
        return lambda values: cls(**values)
    new, set_attribute = object.__new__, object.__setattr__

    def make(values: dict[str, Any]) -> _Record:
        instance: _Record = new(cls)
        set_attribute(instance, "__dict__", {**missing, **values} if missing else values)
        return instance

    return make


_make_view = _fast_constructor(
    TriggerView,
    (
        "call_index",
        "counters",
        "gauges",
        "context_limit",
        "max_output",
        "system_tokens",
        "last_finish_reason",
        "overflow",
        "reactive",
        "history",
    ),
)
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


def _model_failure(exc: BaseException) -> str | None:
    """The name of the gateway error (`workbench.llm.LLMError`) behind a compaction's failure, if any."""
    from workbench.llm.errors import LLMError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, LLMError):
            return type(seen).__name__
        seen = seen.__cause__
    return None


def _known_sum(costs: Sequence[float | None]) -> float | None:
    return None if any(c is None for c in costs) else float(sum(c for c in costs if c is not None))


def _usage(completions: Sequence[Completion]) -> dict[str, Any]:
    """A compaction's summarizer usage. `cost_usd` prices every call, cache hits at their original
    cost (the config's cost, whatever the cache held); `spent_usd` only the calls that reached the
    model (what this replay paid). `truncated` counts the answers cut at the output limit
    (`finish_reason == "length"`): kept as summaries, but possibly incomplete."""
    return {
        "calls": len(completions),
        "cache_hits": sum(1 for c in completions if c.cache_hit),
        "input_tokens": sum(c.input_tokens for c in completions),
        "output_tokens": sum(c.output_tokens for c in completions),
        "cost_usd": _known_sum([c.cost_usd for c in completions]),
        "spent_usd": _known_sum([c.cost_usd for c in completions if not c.cache_hit]),
        "truncated": sum(1 for c in completions if c.finish_reason == "length"),
    }


#: `ReplayResult.compactions_frame()`'s columns before the per-compaction metrics': the event's
#: fields, its summarizer usage spread into `summarizer_<key>` columns.
COMPACTION_COLUMNS = (
    *(f.name for f in dataclasses.fields(CompactionEvent) if f.name != "summarizer_usage"),
    *(f"summarizer_{key}" for key in _usage(())),
)


_LazySummarizer = LazyModel  # binds on first use; its one-time start-up is timed apart


_NUMPY_LOCK = threading.Lock()


def _numpy() -> Any:
    """numpy, imported on the first skip-ahead. Importing it adds warning filters to the process;
    a replay must leave the process as it found it, so the filters are restored around the import.

    A module another thread is still initialising is not handed out (its attributes may not exist
    yet): the `import` statement waits for it; the lock keeps this module's own threads from
    saving and restoring the warning filters over each other.
    """
    import sys

    module = sys.modules.get("numpy")
    if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
        return module
    with _NUMPY_LOCK, warnings.catch_warnings():
        import numpy as module
    return module


@dataclass
class _RecordingArrays:
    """`_Recording`'s per-call columns as numpy int64 arrays (what `_Replay._skip` slices)."""

    at_tokens: Any
    at_steps: Any
    assistant_at: Any
    completion: Any


@dataclass
class _Recording:
    """What the walk needs of a session for one tokenizer, computed once: token and step prefix
    sums over the messages, and per recorded call its assistant message, where its follow-up ends,
    its completion tokens, finish reason and `input_tokens_for:<model>` counter key."""

    prefix: list[int]
    step_prefix: list[int]
    assistant_at: list[int]
    ends: list[int]
    completion: list[int]
    finish_reasons: list[str | None]
    model_keys: list[str]
    model_names: list[str]
    grouping: Grouping
    _arrays: _RecordingArrays | None = None

    @classmethod
    def build(cls, session: Session, counts: Sequence[int], counted: str | None = None) -> _Recording:
        """`counts`: every message's tokens under the tokenizer named `counted`."""
        messages = session.messages
        roles = [m.role for m in messages]
        assistant_at = [i for i, role in enumerate(roles) if role == "assistant"]
        default_model = str(session.metadata.get("model") or "unknown")
        metadata = [messages[i].metadata for i in assistant_at]
        model_keys = [f"input_tokens_for:{(m.get('model') if m else None) or default_model}" for m in metadata]
        prefix = list(accumulate(counts, initial=0))
        return cls(
            prefix=prefix,
            step_prefix=list(accumulate([not m.is_observation for m in messages], initial=0)),
            assistant_at=assistant_at,
            ends=[*assistant_at[1:], len(messages)],
            completion=[counts[i] - MESSAGE_OVERHEAD for i in assistant_at],
            finish_reasons=[m.get("finish_reason") if m else None for m in metadata],
            model_keys=model_keys,
            model_names=list(dict.fromkeys(model_keys)),
            grouping=Grouping(messages, counted, prefix if counted else None),
        )

    def arrays(self) -> _RecordingArrays:
        if self._arrays is None:
            np = _numpy()

            self._arrays = _RecordingArrays(
                at_tokens=np.array([self.prefix[i] for i in self.assistant_at], dtype=np.int64),
                at_steps=np.array([self.step_prefix[i] for i in self.assistant_at], dtype=np.int64),
                assistant_at=np.array(self.assistant_at, dtype=np.int64),
                completion=np.array(self.completion, dtype=np.int64),
            )
        return self._arrays


_RECORDINGS: dict[int, tuple[weakref.ref[Session], dict[str, _Recording]]] = {}


def _recording_of(session: Session, tokenizer: str, counts: Callable[[], Sequence[int]]) -> _Recording:
    """The session's `_Recording` for `tokenizer`, kept while the session lives (sessions are immutable
    and every count is cached per message, so it cannot go stale)."""
    key = id(session)
    entry = _RECORDINGS.get(key)
    if entry is None or entry[0]() is not session:

        def forget(_: Any, key: int = key) -> None:
            current = _RECORDINGS.get(key)
            if current is not None and current[0]() is None:
                del _RECORDINGS[key]

        entry = (weakref.ref(session, forget), {})
        _RECORDINGS[key] = entry
    found = entry[1].get(tokenizer)
    if found is None:
        found = entry[1][tokenizer] = _Recording.build(session, counts(), tokenizer)
    return found


def check_invariants(
    before: Sequence[Message], after: Sequence[Message], *, where: str = "", pinned_before: bool | None = None
) -> None:
    """Raise `InvariantError` if a compaction lost the system prefix, a pinned message or tool pairing.

    When `after` is a strategy's `StepList` that knows its steps pair their calls, the pairing check
    needs no pass over the messages; `pinned_before`
    says whether `before` holds a pinned message, when the caller knows (None: look)."""
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
        self.overflow_retry = (
            bool(getattr(self.trigger, "overflow_retry", False)) if configured is None else bool(configured)
        )
        self.gateway = gateway
        self.summarizer = (
            summarizer
            if summarizer is not None
            else _LazySummarizer(config.summarizer, config.summarizer_options, gateway)
        )
        self.columns: dict[str, list[Any]] = {name: [] for name in CALL_COLUMNS}
        self.events: list[CompactionEvent] = []
        self.sent: list[tuple[int, list[Message]]] = []
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
        self.model_failure: str | None = None
        self.previous_context: list[Message] = []
        self.previous_length = 0
        self.previous_tokens = 0
        #: (leading system messages, steps, body length) of the last compaction's result, when its
        #: strategy returned a `StepList`: the next compaction's context begins with that body
        self.known_steps: tuple[int, BodySteps, int] | None = None

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

    def _set_context(self, messages: list[Message], known: tuple[int, BodySteps] | None = None) -> None:
        """The context is now `messages`; `known`: (leading system messages, how the rest groups, its
        tokens counted by `_counted`), when known: then the body's tokens are a sum over its steps."""
        self.context = messages
        if known is not None and not known[1].strays:  # a step: one message that is no observation, then observations
            leading = known[0]
            self.steps = leading + len(known[1].steps)
            system_tokens = self.fixed_tokens + sum(self._counts(messages[:leading]))
            self.context_tokens = system_tokens + sum(cast("list[int]", known[1].tokens))
        else:
            counts = self._counts(messages)
            roles = [m.role for m in messages]
            leading = 0
            while leading < len(roles) and roles[leading] == "system":
                leading += 1
            self.steps = len(roles) - sum([m.is_observation for m in messages])
            system_tokens = self.fixed_tokens + sum(counts[:leading])
            self.context_tokens = self.fixed_tokens + sum(counts)
        self.system_tokens = system_tokens
        self.only_system = leading == len(messages)

    def _counted(self, known: BodySteps) -> BodySteps:
        """`known` carrying every step's tokens under this replay's tokenizer: those it carries, filled
        in where missing, else counted (`_step_tokens`). Unchanged when a step is a stray tool result
        (`_set_context` then counts message by message)."""
        name = self.tokenizer.name
        if known.strays:
            return known
        tokens = known.tokens
        if tokens is None or known.counted != name:
            counted: list[int | None] = list(self._step_tokens(known.steps))
            return dataclasses.replace(known, tokens=counted, counted=name)
        if None in tokens:
            missing = list(compress(count(), map(is_, tokens, repeat(None))))
            for position, total in zip(missing, self._step_tokens([known.steps[i] for i in missing]), strict=True):
                tokens[position] = total
        return known

    def _step_tokens(self, steps: Sequence[Step]) -> list[int]:
        """Every step's tokens (its messages' counts), cached on the step: a replay meets the same
        steps compaction after compaction and replay after replay."""
        name = self.tokenizer.name
        try:
            return [step._token_cache[name] for step in steps]
        except KeyError:
            missing = [step for step in steps if name not in step._token_cache]
            self._counts(list(chain.from_iterable(step.messages for step in missing)))  # counted in one batch
            for step in missing:
                step._token_cache[name] = sum([m._token_cache[name] for m in step.messages])
            return [step._token_cache[name] for step in steps]

    def _append(self, messages: Sequence[Message]) -> None:
        for message in messages:
            tokens = message_tokens(message, self.tokenizer)
            self.context.append(message)
            self.context_tokens += tokens
            if not message.is_observation:
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
        counters = {
            "iterations": call_index,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "compactions": len(self.events),
            **self.input_by_model,
        }
        return _make_view(
            {
                "call_index": call_index,
                "counters": counters,
                "gauges": {
                    "context_messages": len(self.context),
                    "context_steps": self.steps,
                    "context_tokens": self.context_tokens,
                    "tokens_last_call": self.tokens_last_call,
                },
                "context_limit": self.config.context_limit,
                "max_output": self.config.max_output,
                "system_tokens": self.system_tokens,
                "last_finish_reason": self.last_finish_reason,
                "overflow": overflow,
                "reactive": reactive,
                "history": _History(self.session.messages, at),
            }
        )

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
        if self.known_steps is not None and len(context.system) == self.known_steps[0]:
            continue_steps(context, self.known_steps[1], self.known_steps[2])
        elapsed = timer_excluding_startup(self.summarizer)
        fell_back = False
        error: str | None = None
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
                self.events.append(
                    CompactionEvent(
                        call_index=call_index,
                        messages_before=len(before),
                        messages_after=len(before),
                        tokens_before=tokens_before,
                        tokens_after=tokens_before,
                        summary=None,
                        summarizer_usage=_usage(env.completions),
                        duration_s=elapsed(),
                        breaker_open=self.breaker_open,
                        reactive=view.reactive,
                        severity=env.severity,
                        error=error,
                    )
                )
                self.exchanges.append(((before, len(before)), (before, len(before))))
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
        steps = known_steps(returned, leading)
        known_before: BodySteps | None = context.__dict__.get("body_steps")
        check_invariants(
            before,
            after if steps is None else returned,
            where=f"{self.strategy.kind} before call {call_index}",
            pinned_before=None
            if known_before is None
            else bool(known_before.pinned) or any(m.pinned for m in context.system),
        )
        noop = unchanged(before, after)
        counted = None if steps is None else self._counted(steps)
        self._set_context(after, None if counted is None else (leading, counted))
        self.known_steps = None if counted is None else (leading, counted, len(after) - leading)
        self._count_usage(env.completions)
        freed = tokens_before - self.context_tokens
        self.events.append(
            CompactionEvent(
                call_index=call_index,
                messages_before=len(before),
                messages_after=len(after),
                tokens_before=tokens_before,
                tokens_after=self.context_tokens,
                summary="\n\n".join(env.summaries) if env.summaries else None,
                summarizer_usage=_usage(env.completions),
                duration_s=elapsed(),
                fell_back=fell_back,
                no_progress=freed < NO_PROGRESS_FRACTION * tokens_before,
                breaker_open=self.breaker_open,
                reactive=view.reactive,
                severity=env.severity,
                error=error,
                noop=noop,
            )
        )
        self.exchanges.append(((before, len(before)), (after, len(after))))
        self.trigger.notify_compacted(self._view(call_index, at, overflow=view.overflow, reactive=view.reactive))
        return True

    # -- the walk ---------------------------------------------------------------------------
    #: Skip from one compaction to the next when the trigger has `firing_mask` (the naive
    #: reference engine turns this off and asks the trigger at every call).
    jump = True

    def _recording(self) -> _Recording:
        """The session's per-call columns for this tokenizer (memoised per session when jumping)."""
        if not self.jump:
            return _Recording.build(self.session, self._counts(self.session.messages), self.tokenizer.name)
        return _recording_of(self.session, self.tokenizer.name, lambda: self._counts(self.session.messages))

    def run(self) -> ReplayResult:
        recording = self._recording()
        self.recording = recording
        messages = self.session.messages
        self._token_prefix = recording.prefix
        self._step_prefix = recording.step_prefix
        assistant_at = recording.assistant_at
        first = assistant_at[0] if assistant_at else len(messages)
        self._set_context(list(messages[:first]))
        firing = getattr(self.trigger, "firing_mask", None) if self.jump else None
        if not callable(firing):
            firing = None
        call_index, calls = 0, len(assistant_at)
        with lend_grouping(recording.grouping):
            while call_index < calls:
                if firing is not None and call_index > 0 and not self.only_system:
                    try:
                        call_index = self._skip(call_index, firing)
                    except NotImplementedError:
                        firing = None
                        continue
                    if call_index >= calls:
                        break
                if not self._call(call_index):
                    break
                call_index += 1
        return self._measured(
            ReplayResult(
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
        )

    def _call(self, call_index: int) -> bool:
        """Replay one call, asking the trigger; False when the replay stops before it."""
        recording = self.recording
        at = recording.assistant_at[call_index]
        compacted = False
        if call_index > 0:
            view = self._view(call_index, at, reactive=self.last_finish_reason == "length")
            fires = self.trigger.should_compact(view)
            if fires is not True and fires is not False:
                fires = trigger_answer(fires, self.trigger)
            if fires:
                if not self._compact(call_index, at, view):
                    return False
                compacted = not self.events[-1].noop
        limit = self.config.context_limit - self.config.max_output
        if self.context_tokens > limit:
            if call_index > 0 and self.overflow_retry:
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
        context, tokens, length = self.context, self.context_tokens, len(self.context)
        cached = (
            self._shared_prefix_tokens(self.previous_context, self.previous_length)
            if compacted
            else self.previous_tokens
        )
        completion = recording.completion[call_index]
        finish_reason = recording.finish_reasons[call_index]
        if not self.sent or self.sent[-1][1] is not context:
            self.sent.append((call_index, context))
        columns = self.columns
        for name, value in (
            ("index", call_index),
            ("message_index", at),
            ("context_messages", length),
            ("context_tokens", tokens),
            ("completion_tokens", completion),
            ("compacted_before", compacted),
            ("cached_prefix_tokens", cached),
            ("finish_reason", finish_reason),
        ):
            columns[name].append(value)
        key = recording.model_keys[call_index]
        self.input_tokens += tokens
        self.output_tokens += completion
        self.input_by_model[key] = self.input_by_model.get(key, 0) + tokens
        self.tokens_last_call = tokens + completion
        self.last_finish_reason = finish_reason
        self.previous_context, self.previous_length, self.previous_tokens = context, length, tokens
        self._append_recorded(at, recording.ends[call_index])
        return True

    def _skip(self, start: int, firing: Any) -> int:
        """Replay the calls from `start` at which neither the trigger fires nor the context overflows,
        all at once; returns the first call that needs the per-call path (or the number of calls).

        Until the next compaction the context only grows by the recorded messages, so every gauge
        and counter of those calls follows from prefix sums: the trigger's `firing_mask` reads them
        as arrays (a `CallSpan`) and the calls before its first firing are recorded column-wise.
        Raises `NotImplementedError` (from the trigger) before changing any state.
        """
        np = _numpy()
        recording = self.recording
        arrays = recording.arrays()
        at_start = recording.assistant_at[start]
        base = self.context_tokens - recording.prefix[at_start]
        remaining = arrays.at_tokens[start:]
        limit = self.config.context_limit - self.config.max_output
        fits = int(remaining.searchsorted(limit - base, side="right"))  # calls before the first overflow
        size = min(fits + 1, len(remaining), SKIP_SPAN)
        tokens = remaining[:size] + base
        messages_base, steps_base = len(self.context) - at_start, self.steps - recording.step_prefix[at_start]
        spent_last, input_before, output_before = self.tokens_last_call, self.input_tokens, self.output_tokens
        finish_last = self.last_finish_reason

        def column(name: str) -> Any:
            if name == "context_messages":
                return arrays.assistant_at[start : start + size] + messages_base
            if name == "context_steps":
                return arrays.at_steps[start : start + size] + steps_base
            if name == "last_finish_reasons":
                return [finish_last, *recording.finish_reasons[start : start + size - 1]]
            if name in ("tokens_last_call", "input_tokens", "output_tokens"):
                completion = arrays.completion[start : start + size]
                out = np.empty(size, dtype=np.int64)
                if name == "tokens_last_call":
                    out[0] = spent_last
                    np.add(tokens[:-1], completion[:-1], out=out[1:])
                    return out
                step, initial = (tokens, input_before) if name == "input_tokens" else (completion, output_before)
                out[0] = 0
                np.cumsum(step[:-1], out=out[1:])
                return out + initial
            raise KeyError(name)

        span = CallSpan(
            first_call=start,
            context_tokens=tokens,
            system_tokens=self.system_tokens,
            compactions=len(self.events),
            context_limit=self.config.context_limit,
            max_output=self.config.max_output,
            columns=column,
        )
        fires = first_true(np.asarray(firing(span), dtype=bool))
        stop = min(fits, size if fires is None else fires)
        if stop <= 0:
            return start
        end = start + stop
        sent = tokens[:stop].tolist()
        lengths = (arrays.assistant_at[start:end] + messages_base).tolist()
        completions = recording.completion[start:end]
        if not self.sent or self.sent[-1][1] is not self.context:
            self.sent.append((start, self.context))
        columns = self.columns
        columns["index"].extend(range(start, end))
        columns["message_index"].extend(recording.assistant_at[start:end])
        columns["context_messages"].extend(lengths)
        columns["context_tokens"].extend(sent)
        columns["completion_tokens"].extend(completions)
        columns["compacted_before"].extend([False] * stop)
        columns["cached_prefix_tokens"].append(self.previous_tokens)
        columns["cached_prefix_tokens"].extend(sent[:-1])
        columns["finish_reason"].extend(recording.finish_reasons[start:end])
        sent_total = sum(sent)
        self.input_tokens += sent_total
        self.output_tokens += sum(completions)
        by_model = self.input_by_model
        if len(recording.model_names) == 1:
            key = recording.model_names[0]
            by_model[key] = by_model.get(key, 0) + sent_total
        else:
            for key, value in zip(recording.model_keys[start:end], sent, strict=True):
                by_model[key] = by_model.get(key, 0) + value
        self.tokens_last_call = sent[-1] + completions[-1]
        self.last_finish_reason = recording.finish_reasons[end - 1]
        self.previous_context, self.previous_length, self.previous_tokens = self.context, lengths[-1], sent[-1]
        self._append_recorded(at_start, recording.ends[end - 1])
        return end

    def _shared_prefix_tokens(self, previous: list[Message], previous_length: int) -> int:
        """Tokens of the longest prefix the current context shares (by identity) with the previous
        call's, the fixed preamble (tool schemas, calibrated overhead) included."""
        shared = min(shared_prefix_length(previous, self.context), previous_length)
        return self.fixed_tokens + messages_tokens(self.context[:shared], self.tokenizer)

    #: Metrics that require a model, computed on request (`replay(..., metrics=[...])`).
    metric_names: tuple[str, ...] = ()
    #: False: the result comes back without its metrics (`ReplayResult.measure()` computes them later).
    measure = True

    def _measured(self, result: ReplayResult) -> ReplayResult:
        return result.measure(self.metric_names) if self.measure else result


_PARSED: dict[str, ReplayConfig] = {}
_PARSED_SIZE = 64


def _parsed(config: ReplayConfig | Mapping[str, Any] | str) -> ReplayConfig:
    """`parse_config(config)`, remembered for plain-data dict specs (an experiment replays the same
    spec on many sessions). A parsed config is immutable and hands every replay a fresh trigger and
    its shared strategy, so a remembered one is exactly what `parse_config` would return again.
    Specs holding objects (built kinds, summarizers) are parsed every time."""
    if not isinstance(config, Mapping):
        return parse_config(config)
    try:
        key = json.dumps(config, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return parse_config(config)
    found = _PARSED.get(key)
    if found is None:
        found = parse_config(config)
        if len(_PARSED) >= _PARSED_SIZE:
            _PARSED.clear()
        _PARSED[key] = found
    return found


def as_session(session: Session | Sequence[MessageLike]) -> Session:
    """`session` itself, or the Session of a list of messages (Messages or OpenAI dicts); TypeError
    saying what to pass for anything else (a session id, a path, a list of sessions)."""
    if isinstance(session, Session):
        return session
    if isinstance(session, (str, bytes, os.PathLike, Mapping)) or not isinstance(session, Iterable):
        raise TypeError(
            f"replay takes a Session or a list of messages, not a {type(session).__name__}; "
            "`wb.session(id)` reads a stored session by its id, `wb.load(path)` the sessions of "
            "a recording"
        )
    if isinstance(session, Sequence) and session and isinstance(session[0], Session):
        raise TypeError(
            f"replay takes one Session, not a {type(session).__name__} of sessions ({len(session)}): "
            "replay each of them (`[wb.replay(s, config) for s in sessions]`)"
        )
    return Session.from_messages(session)


def replay(
    session: Session | Sequence[MessageLike],
    config: ReplayConfig | Mapping[str, Any] | str,
    *,
    summarizer: Summarizer | None = None,
    gateway: Any = None,
    metrics: Sequence[str] | None = None,
    measure: bool = True,
) -> ReplayResult:
    """Replay `session` under `config` (a dict, TOML text or path, or a `ReplayConfig`).

    `result.metrics` holds every registered metric that needs no model, plus the ones named in
    `metrics` (model metrics such as `probe_accuracy`, which use the config's `evaluator`).
    `measure=False` leaves them out (the quality metrics read every message's text, which can cost
    more than the replay itself): for reading only the calls, or measuring later with `result.measure()`.

    `summarizer` overrides the model named in the config (any object with `.complete(...)`);
    `gateway` is the `workbench.llm` gateway to bind the configured models on, the summarizer and
    the evaluator of the model metrics (default: the process-wide one). Raises `InvariantError` if
    a strategy breaks an invariant, and `ConfigError` naming the kind if a strategy returns
    anything but a list of `Message` or a trigger answers anything but True or False.
    """
    names = tuple(lookup("metric", name).kind for name in metrics or ())  # type: ignore[attr-defined]
    runner = _Replay(as_session(session), _parsed(config), summarizer, gateway)
    runner.metric_names = names
    runner.measure = measure
    return runner.run()


def compact(
    messages: Sequence[MessageLike],
    strategy: Any,
    *,
    summarizer: Summarizer | str | None = None,
    tokenizer: str = "heuristic",
    context_limit: int = DEFAULT_CONTEXT_LIMIT,
    max_output: int = DEFAULT_MAX_OUTPUT,
    severity: str | None = None,
    summarizer_options: Mapping[str, Any] | None = None,
    on_failure: str = "fatal",
    gateway: Any = None,
) -> list[Message]:
    """Run one strategy once on `messages` (Messages or OpenAI dicts) and return the new list.

    `summarizer` is a model string (default `workbench/extractive`) or a Summarizer object. The
    keyword arguments mean what the config keys of the same names mean: with `on_failure =
    "fallback"`, a compaction that fails (a summarizer error) returns the strategy's fallback instead
    of raising.
    """
    from workbench.registry import build_strategy

    if on_failure not in ON_FAILURE:
        raise ConfigError(f"on_failure must be one of {', '.join(map(repr, ON_FAILURE))}, not {on_failure!r}")
    built = build_strategy(strategy)
    model = summarizer if isinstance(summarizer, str) or summarizer is None else None
    bound: Summarizer | None = None if model is not None else summarizer  # type: ignore[assignment]
    if bound is None:
        bound = _LazySummarizer(model or DEFAULT_SUMMARIZER, summarizer_options or {}, gateway)
    env = CompactionEnv(
        tokenizer=get_tokenizer(tokenizer),
        context_limit=context_limit,
        max_output=max_output,
        summarizer=bound,
        severity=severity,
    )
    before = as_messages(messages)
    context = Context(tuple(before))
    try:
        after = list(returned_messages(built.compact(context, env), built))
    except CompactionError:
        if on_failure == "fatal":
            raise
        fallback = getattr(built, "fallback", None)
        after = list(
            returned_messages(
                fallback(context, env) if callable(fallback) else keep_last_fraction(context), built, "fallback"
            )
        )
    check_invariants(before, after, where=built.kind)
    return after
