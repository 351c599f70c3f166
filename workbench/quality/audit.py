"""The metric audit: does each quality metric notice when a compacted context loses what an agent needs?

For each compaction in the data, the compacted context is degraded in controlled ways and every
registered compaction-level quality metric is computed on the intact and on each degraded context.
A metric *passes* a degradation at a compaction when it ranks the intact context above the degraded
one in its direction (a tie is not above); the sensitivity table gives, per metric and degradation,
the share of compactions where it does.

Compactions come from the agent's own recorded compactions first (the `recorded` trigger and
strategy, at the points and with the summaries the agent recorded); sessions that recorded none are
replayed under a default summarizing config (`DEFAULT_CONFIG`), and the audit says so in its notes.
Each degraded variant is a replay under a private strategy wrapping the config's strategy and
degrading what it returned, so every metric computes on an ordinary `ReplayResult`, unchanged:

- `drop_task`, `drop_constraints`, `drop_progress_next`: the task-state items of those dimensions
  (`task_state.task_state_at`) are found in the compacted context; the sentences stating them are
  cut from every message, and a kept user message carrying one is dropped;
- `keyword_list`: what the compaction wrote (the summary) is replaced by the removed text's facts
  and words, most frequent first, joined by commas, of the summary's tokens;
- `random_text`: it is replaced by random lines of the removed text (seeded), of the summary's tokens;
- `empty`: it is dropped.

Model metrics (`judge_score`, `continuation_match`) are audited only when an evaluator is given;
otherwise they are listed as skipped. With human `labels` (session_id, config_hash, compaction,
label good/bad), the audit also reports per metric its agreement with them: the share of labelled
compactions where "the metric is at or above its median (in its direction)" agrees with "good".
"""

from __future__ import annotations

import random
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from workbench.compaction import STRATEGIES, TRIGGERS, CompactionEnv, Context, Strategy, TriggerView
from workbench.quality.facts import content_words, message_facts
from workbench.quality.retention import removed_from
from workbench.quality.task_state import covered_items, task_state_at
from workbench.quality.trace import applied_events
from workbench.registry import METRICS
from workbench.session import Message, Session
from workbench.tokens import count_tokens

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DEFAULT_CONFIG", "DEGRADATIONS", "MetricAudit", "audit_sessions", "audited_metrics", "degrade"]

DEGRADATIONS: tuple[str, ...] = (
    "drop_task",
    "drop_constraints",
    "drop_progress_next",
    "keyword_list",
    "random_text",
    "empty",
)
#: The task-state dimensions each dropping degradation removes.
DROPPED: dict[str, tuple[str, ...]] = {
    "drop_task": ("task",),
    "drop_constraints": ("constraints",),
    "drop_progress_next": ("progress", "next_step"),
}
#: The config of the sessions that recorded no compaction (a preset; see `workbench.presets`).
DEFAULT_CONFIG = "goat-split-summary"
RECORDED_CONFIG: dict[str, Any] = {
    "name": "as-recorded",
    "tokenizer": "cl100k_base",
    "context_limit": 200_000,
    "max_output": 8192,
    "trigger": {"kind": "recorded"},
    "strategy": {"kind": "recorded"},
}
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


# -- degradations --------------------------------------------------------------------------------


def _written(before: Sequence[Message], after: Sequence[Message]) -> list[Message]:
    """The messages the compaction wrote (in `after`, not in `before`): its summary. A rewritten tool
    exchange (a masked or cut observation, a call with cleared arguments) is no summary: replacing or
    dropping it would break the pairing of calls and results, so the summary degradations leave it."""
    ids = {id(m) for m in before}
    return [m for m in after if id(m) not in ids and not m.is_observation and not m.tool_calls]


def _tokens(messages: Iterable[Message], tokenizer: str) -> int:
    return sum(count_tokens(m.text, tokenizer) for m in messages)


def keyword_list(removed: Sequence[Message], budget: int, tokenizer: str) -> str:
    """The removed text's facts (paths, identifiers, commands...) and then its content words, each by
    the number of removed messages mentioning it (first mention breaks ties), joined by commas up to
    `budget` tokens."""
    facts: Counter[str] = Counter()
    words: Counter[str] = Counter()
    for message in removed:
        facts.update(list(dict.fromkeys(f.text for f in message_facts(message).values() if f.kind != "constraint")))
        words.update(content_words(message.text))
    chosen: list[str] = []
    used = 0
    for term in [*(t for t, _ in facts.most_common()), *(w for w, _ in words.most_common())]:
        if term in chosen:
            continue
        cost = count_tokens(term, tokenizer) + 1
        if used + cost > budget:
            break
        chosen.append(term)
        used += cost
    return ", ".join(chosen)


def random_text(removed: Sequence[Message], budget: int, tokenizer: str, seed: int) -> str:
    """Random lines of the removed text (seeded), up to `budget` tokens."""
    lines = [line for m in removed for line in m.text.splitlines() if line.strip()]
    random.Random(seed).shuffle(lines)
    chosen: list[str] = []
    used = 0
    for line in lines:
        cost = count_tokens(line, tokenizer) + 1
        if used + cost > budget:
            if not chosen:
                chosen.append(line[: max(1, budget * 4)])
            break
        chosen.append(line)
        used += cost
    return "\n".join(chosen)


def _without_statements(message: Message, items: Sequence[Any]) -> Message | None:
    """The message with the sentences stating any of `items` cut (the message itself when none does;
    None when nothing is left of a text-only message)."""
    if not any(covered_items(items, [message])):
        return message
    lines = []
    for line in message.text.splitlines():
        kept = [s for s in _SENTENCE.split(line) if not any(covered_items(items, [Message(role="user", content=s)]))]
        if kept:
            lines.append(" ".join(kept))
    text = "\n".join(lines)
    if not text.strip() and not message.tool_calls and not message.is_observation:
        return None
    origin = message.origin if message.origin != "original" else "compacted_modified"
    return message.replace(content=text, origin=origin)


def degrade(
    degradation: str,
    before: Sequence[Message],
    after: Sequence[Message],
    *,
    session: Session,
    call_index: int,
    tokenizer: str = "cl100k_base",
    seed: int = 0,
) -> list[Message]:
    """`after` (what a strategy returned for `before` at call `call_index`) degraded (see the module
    docstring); a degradation with nothing to act on returns `after` unchanged."""
    if degradation not in DEGRADATIONS:
        raise ValueError(f"unknown degradation {degradation!r}; valid: {', '.join(DEGRADATIONS)}")
    if degradation in DROPPED:
        state = task_state_at(session, call_index)
        items = [i for i in state.items if i.dimension in DROPPED[degradation]]
        if not items:
            return list(after)
        sources = {id(session.messages[i.source]) for i in items if 0 <= i.source < len(session.messages)}
        out: list[Message] = []
        for message in after:
            if id(message) in sources and message.role == "user" and not message.pinned and not message.is_observation:
                continue
            changed = message if message.pinned else _without_statements(message, items)
            if changed is not None:
                out.append(changed)
        return out
    written = _written(before, after)
    if not written:
        return list(after)
    written_ids = {id(m) for m in written}
    if degradation == "empty":
        return [m for m in after if id(m) not in written_ids]
    removed = removed_from(before, after)
    budget = _tokens(written, tokenizer)
    text = (
        keyword_list(removed, budget, tokenizer)
        if degradation == "keyword_list"
        else random_text(removed, budget, tokenizer, seed)
    )
    replacement = written[0].replace(content=text)
    out = []
    for message in after:
        if message is written[0]:
            out.append(replacement)
        elif id(message) not in written_ids:
            out.append(message)
    return out


@dataclass(frozen=True)
class _Degraded:
    """A private strategy: `inner`'s result, degraded by `degradation` (never registered: the audit's own)."""

    inner: Strategy
    degradation: str
    tokenizer: str
    seed: int = 0
    kind: ClassVar[str] = "audit_degraded"
    _session: list[Session] = field(default_factory=list, compare=False, repr=False)
    #: The calls at which the degradation changed what `inner` returned.
    changed: set[int] = field(default_factory=set, compare=False, repr=False)

    @property
    def summarizes(self) -> bool:
        return bool(getattr(self.inner, "summarizes", False))

    def bind_session(self, session: Session) -> None:
        bind = getattr(self.inner, "bind_session", None)
        if callable(bind):
            bind(session)
        self._session[:] = [session]

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        after = list(self.inner.compact(context, env))
        before = list(context.messages)
        if not self._session or [id(m) for m in after] == [id(m) for m in before]:
            return after
        session = self._session[0]
        seed = zlib.crc32(f"{session.id}:{env.call_index}:{self.seed}".encode())
        degraded = degrade(
            self.degradation,
            before,
            after,
            session=session,
            call_index=env.call_index,
            tokenizer=self.tokenizer,
            seed=seed,
        )
        if [id(m) for m in degraded] != [id(m) for m in after]:
            self.changed.add(env.call_index)
        return degraded


@dataclass(frozen=True)
class _AtCalls:
    """A private trigger: fire once before each of `calls` (the intact replay's compaction points), so a
    degraded replay compacts where the intact one did whatever its contexts weigh."""

    calls: frozenset[int]
    kind: ClassVar[str] = "audit_at_calls"
    _done: set[int] = field(default_factory=set, compare=False, repr=False)

    def should_compact(self, view: TriggerView) -> bool:
        return view.call_index in self.calls and view.call_index not in self._done

    def notify_compacted(self, view: TriggerView) -> None:
        self._done.add(view.call_index)


# -- the audit -----------------------------------------------------------------------------------


def audited_metrics(*, evaluator: bool = False) -> tuple[list[str], dict[str, str]]:
    """(the compaction-level quality metrics audited, {metric: why skipped}); model metrics only with an
    evaluator. Cost metrics (`workbench.metrics`) are not quality metrics and are left out, as are those
    that do not read the compacted context (`reads_context = False`: the recovery metrics)."""
    audited: list[str] = []
    skipped: dict[str, str] = {}
    for name, cls in METRICS.kinds().items():
        if (
            cls.level != "compaction"
            or cls.direction == "none"
            or cls.__module__ == "workbench.metrics"
            or not cls.reads_context
        ):
            continue
        if cls.requires_model and not evaluator:
            skipped[name] = "needs a model: no evaluator configured"
            continue
        audited.append(name)
    return audited, skipped


@dataclass(frozen=True)
class MetricAudit:
    """The audit's result: `sensitivity` {metric: {degradation: share of compactions ranked intact above}},
    `compared` {metric: compactions where the intact value was defined}, `compactions` audited,
    `degraded` {degradation: compactions it changed (the others test nothing and are left out of its share)},
    `agreement` {metric: share agreeing with the human labels} (empty without labels), `skipped`
    {metric: why}, `notes` (what was replayed how)."""

    sensitivity: Mapping[str, Mapping[str, float | None]]
    compared: Mapping[str, int]
    compactions: int
    sessions: int
    degraded: Mapping[str, int] = field(default_factory=dict)
    agreement: Mapping[str, float | None] = field(default_factory=dict)
    labelled: int = 0
    skipped: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    degradations: tuple[str, ...] = DEGRADATIONS

    def to_frame(self) -> pd.DataFrame:
        """One row per metric: a column per degradation (the share), `compactions` compared and, with
        labels, `label_agreement`."""
        import pandas as pd

        rows = []
        for metric, shares in self.sensitivity.items():
            row: dict[str, Any] = {
                "metric": metric,
                **{d: shares.get(d) for d in self.degradations},
                "compactions": self.compared.get(metric, 0),
            }
            if self.labelled:
                row["label_agreement"] = self.agreement.get(metric)
            rows.append(row)
        columns = ["metric", *self.degradations, "compactions", *(["label_agreement"] if self.labelled else [])]
        return pd.DataFrame(rows, columns=columns)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "compactions": self.compactions,
            "degraded": dict(self.degraded),
            "degradations": list(self.degradations),
            "sensitivity": {m: dict(s) for m, s in self.sensitivity.items()},
            "compared": dict(self.compared),
            "agreement": dict(self.agreement),
            "labelled": self.labelled,
            "skipped": dict(self.skipped),
            "notes": list(self.notes),
        }


def _config_for(session: Session, default: dict[str, Any]) -> dict[str, Any]:
    """The intact config of a session: its recorded compactions, else `default` (itself, not a copy)."""
    return dict(RECORDED_CONFIG) if session.recorded_compactions else default


def _direction(name: str) -> str:
    cls = METRICS.kinds().get(name)
    return cls.direction if cls is not None else "higher"


def _above(intact: Any, degraded: Any, direction: str) -> bool:
    if not isinstance(intact, (int, float)) or not isinstance(degraded, (int, float)):
        return False
    return intact > degraded if direction == "higher" else intact < degraded


def audit_sessions(
    sessions: Sequence[Session],
    *,
    config: Mapping[str, Any] | str | None = None,
    evaluator: str | None = None,
    labels: pd.DataFrame | None = None,
    seed: int = 0,
) -> MetricAudit:
    """The audit of these sessions (see the module docstring). `config`: the config (dict or preset
    name) of the sessions without recorded compactions (default `DEFAULT_CONFIG`); `evaluator`: the
    model of the model metrics (they are skipped without one)."""
    from workbench.config import config_hash, with_preset
    from workbench.presets import preset
    from workbench.replay import replay

    default = preset(config) if isinstance(config, str) else with_preset(config) if config else preset(DEFAULT_CONFIG)
    metrics, skipped = audited_metrics(evaluator=evaluator is not None)
    model_metrics = [m for m in metrics if METRICS.lookup(m).requires_model]
    values: dict[str, list[tuple[Any, dict[str, Any]]]] = {m: [] for m in metrics}
    labelled_values: dict[str, list[tuple[Any, str]]] = {m: [] for m in metrics}
    label_of = _labels(labels)
    notes: list[str] = []
    recorded = [s for s in sessions if s.recorded_compactions]
    if recorded:
        notes.append(
            f"{len(recorded)} sessions replayed at their recorded compactions with the recorded summaries (as-recorded)"
        )
    if len(recorded) < len(sessions):
        notes.append(
            f"{len(sessions) - len(recorded)} sessions recorded no compaction: replayed under "
            f"{default.get('name', 'the given config')} (a summarizing config of the workbench)"
        )
    compactions = 0
    degraded: Counter[str] = Counter()
    for session in sessions:
        spec = _config_for(session, default)
        # labels name the config the summary came from: the evaluator that grades it is no part of that
        hashed = {config_hash(spec)} | ({config_hash("as-recorded")} if spec.get("name") == "as-recorded" else set())
        if evaluator is not None:
            spec = {**spec, "evaluator": evaluator}
        tokenizer = str(spec.get("tokenizer", "heuristic"))
        rows: dict[str, dict[int, Mapping[str, Any]]] = {}
        intact_events: list[tuple[int, int]] = []
        for variant in ("intact", *DEGRADATIONS):
            rest = dict(spec)
            inner = STRATEGIES.build(rest.pop("strategy"))
            trigger = TRIGGERS.build(rest.pop("trigger"))
            strategy: Strategy = inner
            if variant != "intact":
                strategy = _Degraded(inner, variant, tokenizer, seed)
                trigger = _AtCalls(frozenset(call for _, call in intact_events))
            result = replay(session, {**rest, "trigger": trigger, "strategy": strategy}, metrics=model_metrics)
            applied = [(event, result.compactions[event].call_index) for event in applied_events(result)]
            by_call: dict[int, Mapping[str, Any]] = {}
            for event, call in applied:
                if event < len(result.compaction_metrics):
                    by_call.setdefault(call, result.compaction_metrics[event])
            if isinstance(strategy, _Degraded):  # a degradation that changed nothing at a point tests nothing there
                by_call = {call: row for call, row in by_call.items() if call in strategy.changed}
                degraded[variant] += len(by_call)
            rows[variant] = by_call
            if variant == "intact":
                intact_events = applied
        compactions += len(intact_events)
        for event, call in intact_events:
            for metric in metrics:
                intact = rows["intact"].get(call, {}).get(metric)
                if intact is None:
                    continue
                values[metric].append(
                    (intact, {d: rows[d][call].get(metric) if call in rows[d] else _UNTESTED for d in DEGRADATIONS})
                )
                label = next((label_of[key] for h in hashed if (key := (session.id, h, event)) in label_of), None)
                if label is not None:
                    labelled_values[metric].append((intact, label))
    sensitivity = {m: {d: _share(found, d, _direction(m)) for d in DEGRADATIONS} for m, found in values.items()}

    agreement = {m: _agreement(found, _direction(m)) for m, found in labelled_values.items()}
    labelled = max((len(v) for v in labelled_values.values()), default=0)
    return MetricAudit(
        sensitivity=sensitivity,
        compared={m: len(v) for m, v in values.items()},
        compactions=compactions,
        sessions=len(sessions),
        degraded={d: degraded[d] for d in DEGRADATIONS},
        agreement=agreement if labelled else {},
        labelled=labelled,
        skipped=skipped,
        notes=tuple(notes),
    )


_UNTESTED = object()


def _share(found: Sequence[tuple[Any, Mapping[str, Any]]], degradation: str, direction: str) -> float | None:
    """Share of the compactions the degradation changed where the metric ranks the intact context above."""
    pairs = [(intact, degraded[degradation]) for intact, degraded in found if degraded[degradation] is not _UNTESTED]
    return sum(_above(i, d, direction) for i, d in pairs) / len(pairs) if pairs else None


def _labels(labels: pd.DataFrame | None) -> dict[tuple[str, str, int], str]:
    """(session_id, config_hash, compaction) -> good/bad, from a labels frame (`compaction` or
    `compaction_index` names the compaction)."""
    if labels is None or len(labels) == 0:
        return {}
    column = "compaction" if "compaction" in labels.columns else "compaction_index"
    return {
        (str(s), str(h), int(c)): str(label).lower()
        for s, h, c, label in zip(
            labels["session_id"], labels["config_hash"], labels[column], labels["label"], strict=True
        )
    }


def _agreement(found: Sequence[tuple[Any, str]], direction: str) -> float | None:
    """Share of labelled compactions where "at or above the median (in the metric's direction)" agrees with good."""
    if not found:
        return None
    numbers = sorted(float(v) for v, _ in found)
    median = (
        numbers[len(numbers) // 2]
        if len(numbers) % 2
        else (numbers[len(numbers) // 2 - 1] + numbers[len(numbers) // 2]) / 2
    )
    agree = sum(
        ((float(v) >= median) if direction == "higher" else (float(v) <= median)) == (label == "good")
        for v, label in found
    )
    return agree / len(found)
