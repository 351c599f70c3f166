"""Fact retention: what each compaction kept of the facts in the content it removed or rewrote.

For compaction event j the strategy received `before` and returned `after` (messages compared by
identity: a message the strategy passed through unchanged is the same object). The *removed*
content is every message of `before` missing from `after`; its facts are the *removed facts*. A
removed fact is *retained* when the context after still states it: a kept message has the same
key, or a message the compaction wrote (a summary, a truncated result) has it, as a key or, for
multi-word facts (errors, commands, constraints), in its text (constraints match when most of
their content words are there, since summaries rephrase them).

- `fact_retention` = retained / removed facts, per compaction; per run the mean weighted by the
  tokens each compaction removed. `lost_facts` lists the rest.
- `needed_fact_retention`: the same over the removed facts the recording uses again later — they
  appear in the text or tool-call arguments of an assistant message at or after the compaction's
  call. A user's constraints and decisions hold for the rest of the session, so they count as
  needed whenever a call follows.
- `dangling_references`: recorded assistant messages that mention a fact some compaction removed
  and that is in none of the messages sent at that call (the agent acted on something its
  context no longer held).

Everything is computed once per result (memoised) from the cached per-message facts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from workbench.quality.facts import Fact, content_words, message_facts, normalize_text
from workbench.quality.trace import applied_events, assistant_positions, compaction_contexts, memo, session_of
from workbench.registry import register_metric
from workbench.session import Message, Session
from workbench.tokens import message_tokens

FUZZY_KINDS = ("error", "command", "constraint")
CONSTRAINT_OVERLAP = 0.7
MAX_LISTED = 50


@dataclass(frozen=True)
class CompactionFacts:
    """The fact accounting of one compaction event."""

    event_index: int
    call_index: int
    removed_tokens: int
    removed: Mapping[str, Fact]
    sources: Mapping[str, Message]
    retained: frozenset[str]
    needed: frozenset[str]
    after_keys: frozenset[str] = frozenset()

    @property
    def lost(self) -> list[Fact]:
        return [f for k, f in self.removed.items() if k not in self.retained]

    @property
    def needed_lost(self) -> list[Fact]:
        return [self.removed[k] for k in self.needed if k not in self.retained]

    @property
    def fact_retention(self) -> float | None:
        if not self.removed:
            return None
        return sum(1 for k in self.removed if k in self.retained) / len(self.removed)

    @property
    def needed_fact_retention(self) -> float | None:
        if not self.needed:
            return None
        return sum(1 for k in self.needed if k in self.retained) / len(self.needed)


@dataclass(frozen=True)
class RunFacts:
    compactions: tuple[CompactionFacts, ...]
    dangling_references: int

    def weighted(self, attribute: str) -> float | None:
        """Token-weighted mean of a per-compaction share (compactions with nothing to measure skipped)."""
        pairs = [(getattr(c, attribute), max(1, c.removed_tokens)) for c in self.compactions]
        pairs = [(v, w) for v, w in pairs if v is not None]
        total = sum(w for _, w in pairs)
        return sum(v * w for v, w in pairs) / total if total else None


# -- later use ----------------------------------------------------------------------------------

def last_use(session: Session) -> dict[str, int]:
    """For each fact key an assistant message states, the last call index that states it."""
    def compute() -> dict[str, int]:
        out: dict[str, int] = {}
        for call, position in enumerate(assistant_positions(session)):
            for key, fact in message_facts(session.messages[position]).items():
                if fact.kind != "constraint":
                    out[key] = call
        return out

    return memo(session, "fact_last_use", compute)


def _is_needed(fact: Fact, call_index: int, uses: Mapping[str, int], calls: int) -> bool:
    if fact.kind == "constraint":
        return call_index < calls
    return uses.get(fact.key, -1) >= call_index


# -- one compaction -----------------------------------------------------------------------------

def analyse_compaction(before: Sequence[Message], after: Sequence[Message], *, event_index: int, call_index: int,
                       uses: Mapping[str, int], calls: int, tokenizer: Any = "heuristic") -> CompactionFacts:
    """The fact accounting of one compaction (see the module docstring)."""
    after_ids = {id(m) for m in after}
    before_ids = {id(m) for m in before}
    removed_messages = [m for m in before if id(m) not in after_ids]
    written = [m for m in after if id(m) not in before_ids]
    removed: dict[str, Fact] = {}
    sources: dict[str, Message] = {}
    for message in removed_messages:
        for key, fact in message_facts(message).items():
            if key not in removed:
                removed[key] = fact
                sources[key] = message
    present: set[str] = set()
    for message in after:
        present.update(message_facts(message).keys())
    retained = {k for k in removed if k in present}
    missing = [f for k, f in removed.items() if k not in retained and f.kind in FUZZY_KINDS]
    if missing and written:
        blob = normalize_text("\n".join([m.text for m in written] +
                                          [c.arguments for m in written for c in m.tool_calls]))
        words = content_words(blob)
        for fact in missing:
            if fact.key in blob:
                retained.add(fact.key)
            elif fact.kind == "constraint":
                wanted = content_words(fact.key)
                if wanted and len(wanted & words) >= CONSTRAINT_OVERLAP * len(wanted):
                    retained.add(fact.key)
    needed = frozenset(k for k, f in removed.items() if _is_needed(f, call_index, uses, calls))
    removed_tokens = sum(message_tokens(m, tokenizer) for m in removed_messages)
    return CompactionFacts(event_index=event_index, call_index=call_index, removed_tokens=removed_tokens,
                           removed=removed, sources=sources, retained=frozenset(retained), needed=needed,
                           after_keys=frozenset(present))


# -- one run ------------------------------------------------------------------------------------

def _dangling(result: Any, session: Session, analyses: Sequence[CompactionFacts]) -> int:
    """Walk the calls from the first compaction on, tracking the removed facts missing from the context."""
    if not analyses:
        return 0
    positions = assistant_positions(session)
    messages = session.messages
    by_call: dict[int, list[CompactionFacts]] = {}
    for analysis in analyses:
        by_call.setdefault(analysis.call_index, []).append(analysis)
    lost: set[str] = set()
    missing: set[str] = set()
    dangling = 0
    first = min(by_call)
    for record in result.calls:
        call = record.index
        if call < first:
            continue
        for event in by_call.get(call, ()):
            lost.update(k for k in event.removed if k not in event.after_keys and k not in event.retained)
            missing = {k for k in lost if k not in event.after_keys}
        reply = messages[record.message_index]
        if missing and any(k in missing and f.kind != "constraint" for k, f in message_facts(reply).items()):
            dangling += 1
        if missing:
            end = positions[call + 1] if call + 1 < len(positions) else len(messages)
            for message in messages[record.message_index:end]:
                missing.difference_update(message_facts(message).keys())
    return dangling


def analyse(result: Any) -> RunFacts:
    """The fact accounting of every applied compaction of a replay result, and its dangling references."""
    def compute() -> RunFacts:
        session = session_of(result)
        uses = last_use(session)
        calls = session.calls
        tokenizer = getattr(result.config, "tokenizer", "heuristic")
        analyses: list[CompactionFacts] = []
        for index in applied_events(result):
            before, after = compaction_contexts(result, index)
            event = result.compactions[index]
            analyses.append(analyse_compaction(before, after, event_index=index, call_index=event.call_index,
                                               uses=uses, calls=calls, tokenizer=tokenizer))
        return RunFacts(compactions=tuple(analyses), dangling_references=_dangling(result, session, analyses))

    return memo(result, "quality_facts", compute)


def _rows(result: Any, columns: Any) -> list[dict[str, Any]]:
    """One row per compaction event of the result (events without an analysis get None columns)."""
    by_event = {c.event_index: c for c in analyse(result).compactions}
    return [columns(by_event.get(i)) for i in range(len(result.compactions))]


def _listed(facts: Sequence[Fact]) -> list[str]:
    return [f.text for f in facts[:MAX_LISTED]]


@register_metric("fact_retention", direction="higher", unit="share", level="compaction")
class FactRetention:
    """Share of the facts a compaction removed or rewrote that the context after it still states
    (per run: mean weighted by the tokens each compaction removed); `lost_facts` lists the rest."""

    requires_model: ClassVar[bool] = False

    def compute(self, result: Any) -> float | None:
        return analyse(result).weighted("fact_retention")

    def per_compaction(self, result: Any) -> list[dict[str, Any]]:
        return _rows(result, lambda c: {
            "fact_retention": c.fact_retention if c else None,
            "removed_facts": len(c.removed) if c else None,
            "lost_facts": _listed(c.lost) if c else [],
        })


@register_metric("needed_fact_retention", direction="higher", unit="share", level="compaction")
class NeededFactRetention:
    """Share of the removed facts the recording uses again later (assistant text or tool-call
    arguments; constraints always) that the context after the compaction still states."""

    requires_model: ClassVar[bool] = False

    def compute(self, result: Any) -> float | None:
        return analyse(result).weighted("needed_fact_retention")

    def per_compaction(self, result: Any) -> list[dict[str, Any]]:
        return _rows(result, lambda c: {
            "needed_fact_retention": c.needed_fact_retention if c else None,
            "needed_facts": len(c.needed) if c else None,
            "lost_needed_facts": _listed(c.needed_lost) if c else [],
        })


@register_metric("dangling_references", direction="lower", unit="calls", level="run")
class DanglingReferences:
    """Recorded assistant messages that mention a fact a compaction removed and that the context
    sent at their call no longer holds."""

    requires_model: ClassVar[bool] = False

    def compute(self, result: Any) -> int:
        return analyse(result).dangling_references
