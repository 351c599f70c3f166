"""What a replay produces: a record per call, an event per compaction, and the `ReplayResult` that
holds them with the final context, the metrics and the frames a notebook or the store reads.

The rules that fill them are in `workbench.replay`; this module holds no walk.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING, Any, overload

from workbench.calibration import CalibrationFit
from workbench.compaction import Completion
from workbench.config import ReplayConfig
from workbench.errors import ConfigError
from workbench.registry import METRICS, Metric, MetricMemo, evaluate_metrics
from workbench.replay_fast import fast_constructor
from workbench.session import Message, Session, recorded_input_tokens

if TYPE_CHECKING:  # pandas loads on first use (`to_frame`)
    import pandas as pd


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
                make_call(dict(zip(CALL_COLUMNS, row, strict=True)))
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
        return make_call({name: self._columns[name][position] for name in CALL_COLUMNS})

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

    def measure(self, names: Sequence[str] = (), memo: MetricMemo | None = None) -> ReplayResult:
        """Compute the metrics into `metrics` and `compaction_metrics` (every registered metric that
        needs no model, plus the model metrics named in `names`) and return this result.

        `replay()` does it unless told `measure=False`; an experiment passes its `memo` (see
        `evaluate_metrics`)."""
        values, columns = evaluate_metrics(self, names, memo)
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

    def snapshots(self) -> tuple[list[tuple[int, list[Message]]], list[tuple[Snapshot, Snapshot]]]:
        """The lists `context_at` and `compaction_contexts` cut: (the context from each call on, as
        (first call, list); per compaction event, ((list, length) the strategy received, (list, length)
        it returned)). A list is shared by the calls and events that saw it grow (the engine appends to
        the context a strategy returned). Read, never changed, they fingerprint a replay's contexts
        without copying them (`workbench.quality.measure_memo`)."""
        return list(self._sent), list(self._exchanges)

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
            measured = [name for name in self.metrics if (kind := _metric_kind(name)) and kind.level == "compaction"]
            return pd.DataFrame(columns=[*COMPACTION_COLUMNS, *measured])
        return pd.DataFrame(rows)


def _metric_kind(name: str) -> type[Metric] | None:
    """The registered metric kind called `name` (None for a value no registered metric gives)."""
    try:
        return METRICS.lookup(name)
    except ConfigError:
        return None


def _known_sum(costs: Sequence[float | None]) -> float | None:
    return None if any(c is None for c in costs) else float(sum(c for c in costs if c is not None))


def summarizer_usage(completions: Sequence[Completion]) -> dict[str, Any]:
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
    *(f"summarizer_{key}" for key in summarizer_usage(())),
)


#: A `CallRecord` of a dict of its fields, built without the frozen dataclass's per-field set-up.
make_call = fast_constructor(CallRecord, CALL_COLUMNS)
