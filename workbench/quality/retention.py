"""Fact retention: what each compaction kept of the facts in the content it removed or rewrote.

For compaction event j the strategy received `before` and returned `after` (messages compared by
identity: a message the strategy passed through unchanged is the same object). The *removed*
content is every message of `before` missing from `after`; its facts are the *removed facts*. A
removed fact is *retained* when the context after still states it: a kept message has the same
key, or a message the compaction wrote (a summary, a truncated result) has it, as a key or, for
multi-word facts (errors, commands, constraints), in its text (constraints match when most of
their content words are there, since summaries rephrase them).

- `fact_retention` = retained / removed facts, per compaction; per run the mean weighted by the
  tokens each compaction removed. `lost_count` counts the rest and `lost_facts` lists the first
  `MAX_LISTED` of them.
- `needed_fact_retention`: the same over the removed facts the recording uses again later — they
  appear in the text or tool-call arguments of an assistant message at or after the compaction's
  call. A user's constraints and decisions hold for the rest of the session, so they count as
  needed whenever a call follows.
- `dangling_references`: recorded assistant messages that mention a fact some compaction removed
  and that is in none of the messages sent at that call (the agent acted on something its
  context no longer held).

Everything is computed once per result (memoised) on the session's fact index
(`workbench.quality.index`): each message's facts as a bit mask, so a compaction's accounting is
a few integer operations per message; facts are decoded (in first-mention order) only to be
listed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, reduce
from itertools import accumulate, compress, count, repeat
from operator import attrgetter, is_not, not_, or_
from typing import Any, ClassVar

from workbench.quality.facts import Fact, content_words, message_facts, message_text, normalize_text, text_words
from workbench.quality.index import FUZZY_KINDS, FactIndex, Masks, messages_index, session_index
from workbench.quality.trace import (
    applied_events,
    assistant_positions,
    compaction_contexts,
    memo,
    session_of,
)
from workbench.registry import register_metric
from workbench.replay import call_column
from workbench.session import Message, Session
from workbench.strategies.common import shared_prefix_length
from workbench.tokens import messages_tokens

__all__ = ["FUZZY_KINDS", "CompactionFacts", "RunFacts", "analyse", "analyse_compaction", "last_use"]

CONSTRAINT_OVERLAP = 0.7
MAX_LISTED = 50


@dataclass(frozen=True, eq=False)
class CompactionFacts:
    """The fact accounting of one compaction event, as masks of the index's fact keys.

    `removed_mask`: the facts of the removed messages; `retained_mask`: those the context after
    still states; `needed_mask`: those the recording uses again; `after_mask`: the facts of the
    context after; `constraint_mask`: removed facts first stated as a user's constraint. The
    mappings (`removed`, `sources`) and key sets are decoded on demand.
    """

    event_index: int
    call_index: int
    removed_tokens: int
    removed_mask: int
    retained_mask: int
    needed_mask: int
    after_mask: int
    constraint_mask: int
    index: FactIndex = field(repr=False)
    removed_messages: tuple[Message, ...] = field(repr=False)
    removed_masks: tuple[Masks, ...] = field(repr=False)

    def mentions(self, mask: int, limit: int | None = None) -> list[tuple[Fact, Message]]:
        """The removed facts of `mask`, each with the first removed message stating it, in order of mention
        (the first `limit` of them)."""
        out: list[tuple[Fact, Message]] = []
        remaining = mask & self.removed_mask
        if not remaining or limit == 0:
            return out
        for message, masks in zip(self.removed_messages, self.removed_masks, strict=True):
            hit = masks.every & remaining
            if not hit:
                continue
            out += zip(masks.chosen(hit, None if limit is None else limit - len(out)), repeat(message))
            if limit is not None and len(out) >= limit:
                return out
            remaining ^= hit
            if not remaining:
                break
        return out

    def first_mention(self, key: str) -> tuple[Fact, Message]:
        return self.mentions(self.index.bit(key), 1)[0]

    @cached_property
    def removed(self) -> Mapping[str, Fact]:
        return {f.key: f for f, _ in self.mentions(self.removed_mask)}

    @cached_property
    def sources(self) -> Mapping[str, Message]:
        return {f.key: m for f, m in self.mentions(self.removed_mask)}

    @property
    def retained(self) -> frozenset[str]:
        return frozenset(self.index.keys_of(self.retained_mask))

    @property
    def needed(self) -> frozenset[str]:
        return frozenset(self.index.keys_of(self.needed_mask))

    @property
    def after_keys(self) -> frozenset[str]:
        return frozenset(self.index.keys_of(self.after_mask))

    @property
    def removed_count(self) -> int:
        return self.removed_mask.bit_count()

    @property
    def needed_count(self) -> int:
        return self.needed_mask.bit_count()

    @property
    def lost(self) -> list[Fact]:
        return [f for f, _ in self.mentions(self.removed_mask & ~self.retained_mask)]

    @property
    def needed_lost(self) -> list[Fact]:
        return [f for f, _ in self.mentions(self.needed_mask & ~self.retained_mask)]

    @property
    def lost_count(self) -> int:
        return (self.removed_mask & ~self.retained_mask).bit_count()

    @property
    def needed_lost_count(self) -> int:
        return (self.needed_mask & ~self.retained_mask).bit_count()

    def listed_lost(self, *, needed: bool = False, limit: int = MAX_LISTED) -> list[str]:
        """The texts of the first `limit` lost facts (of the needed ones with `needed`), in order of mention."""
        mask = (self.needed_mask if needed else self.removed_mask) & ~self.retained_mask
        return [f.text for f, _ in self.mentions(mask, limit)]

    @property
    def fact_retention(self) -> float | None:
        removed = self.removed_mask.bit_count()
        return (self.retained_mask & self.removed_mask).bit_count() / removed if removed else None

    @property
    def needed_fact_retention(self) -> float | None:
        needed = self.needed_mask.bit_count()
        return (self.needed_mask & self.retained_mask).bit_count() / needed if needed else None


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

    found: dict[str, int] = memo(session, "fact_last_use", compute)
    return found


# -- one compaction -----------------------------------------------------------------------------

_every, _constraint, _fuzzy = attrgetter("every"), attrgetter("constraint"), attrgetter("fuzzy")


class _PrefixUnions:
    """The facts stated by successive contexts of one replay, each from where it stops sharing the
    previous one's messages (by identity): a compaction's result begins with most of the previous
    result, whose running unions (`ors[i]`: the facts of its first i + 1 messages) are kept."""

    def __init__(self, index: FactIndex, seen: dict[int, int] | None):
        self.index, self.seen = index, seen
        self.messages: Sequence[Message] = ()
        self.ors: list[int] = []

    def union(self, messages: Sequence[Message]) -> int:
        shared = shared_prefix_length(self.messages, messages)
        tail = self.index.every_of(messages[shared:], self.seen)
        self.ors = self.ors[:shared] + list(accumulate(tail, or_, initial=self.ors[shared - 1] if shared else 0))[1:]
        self.messages = messages
        return self.ors[-1] if self.ors else 0


def removed_from(before: Sequence[Message], after: Sequence[Message]) -> tuple[Message, ...]:
    """The messages of `before` that are not in `after` (by identity), in order.

    A compaction's result shares a prefix and a suffix with its input (the system prompt and the
    older steps a masking kept; the recent steps a window kept), so only the span between them is
    compared in full. A message found only there is removed unless `before` also holds it a second
    time within the shared ends, which one pass over the ends rules out."""
    shared = shared_prefix_length(before, after)
    shortest = min(len(before), len(after)) - shared
    tail = min(next(compress(count(), map(is_not, reversed(before), reversed(after))), shortest), shortest)
    kept = set(map(id, after[shared : len(after) - tail]))
    middle = before[shared : len(before) - tail]
    removed = tuple(compress(middle, map(not_, map(kept.__contains__, map(id, middle)))))
    if removed:
        removed_ids = set(map(id, removed))
        if not (
            removed_ids.isdisjoint(map(id, before[:shared]))
            and removed_ids.isdisjoint(map(id, before[len(before) - tail :]))
        ):
            kept = set(map(id, after))
            return tuple(compress(before, map(not_, map(kept.__contains__, map(id, before)))))
    return removed


def _account(
    index: FactIndex,
    before: Sequence[Message],
    after: Sequence[Message],
    *,
    event_index: int,
    call_index: int,
    used_later: int,
    calls: int,
    tokenizer: Any,
    seen: dict[int, int] | None = None,
    unions: _PrefixUnions | None = None,
) -> CompactionFacts:
    """The accounting of one compaction given the mask of the facts used at or after its call (`seen`:
    see `FactIndex.union`; `unions`: the union of the previous compaction's result, kept to go on from)."""
    removed_messages = removed_from(before, after)
    removed_masks = tuple(index.masks_of(removed_messages))
    removed = reduce(or_, map(_every, removed_masks), 0)
    constraint = reduce(or_, map(_constraint, removed_masks), 0)
    fuzzy = reduce(or_, map(_fuzzy, removed_masks), 0)
    present = unions.union(after) if unions is not None else index.union(after, seen)
    retained = removed & present
    missing = removed & ~retained & fuzzy
    stated_constraints = removed & constraint
    if missing or stated_constraints:  # both need the removed facts in order of mention
        accounting = CompactionFacts(
            event_index=event_index,
            call_index=call_index,
            removed_tokens=0,
            removed_mask=removed,
            retained_mask=retained,
            needed_mask=0,
            after_mask=present,
            constraint_mask=0,
            index=index,
            removed_messages=removed_messages,
            removed_masks=removed_masks,
        )
    if missing:
        before_ids = set(map(id, before))
        written = list(compress(after, map(not_, map(before_ids.__contains__, map(id, after)))))
        if written:
            retained |= _rephrased(accounting, missing, written)
    constraints = 0
    if stated_constraints:
        for fact, _ in accounting.mentions(stated_constraints):
            if fact.kind == "constraint":
                constraints |= index.bit(fact.key)
    needed = (removed & ~constraints & used_later) | (constraints if call_index < calls else 0)
    removed_tokens = messages_tokens(removed_messages, tokenizer)
    return CompactionFacts(
        event_index=event_index,
        call_index=call_index,
        removed_tokens=removed_tokens,
        removed_mask=removed,
        retained_mask=retained,
        needed_mask=needed,
        after_mask=present,
        constraint_mask=constraints,
        index=index,
        removed_messages=removed_messages,
        removed_masks=removed_masks,
    )


def _rephrased(accounting: CompactionFacts, missing: int, written: Sequence[Message]) -> int:
    """The missing multi-word facts (first stated as error, command or constraint) that the written
    messages state in their text; constraints also when most of their content words are there."""
    if any(m.tool_calls for m in written):
        parts = [m.text for m in written] + [c.arguments for m in written for c in m.tool_calls]
        blob = normalize_text("\n".join(parts))
        pieces = [blob]
    else:  # the same text: normalising joins pieces with single spaces (`message_text` is cached per message)
        pieces = [text for text in map(message_text, written) if text]
        blob = " ".join(pieces)
    words: frozenset[str] | None = None
    found = 0
    for fact, _ in accounting.mentions(missing):
        if fact.kind not in FUZZY_KINDS:
            continue
        if fact.key in blob:
            found |= accounting.index.bit(fact.key)
        elif fact.kind == "constraint":
            wanted = content_words(fact.key)
            if words is None:
                words = frozenset().union(*map(text_words, pieces))
            if wanted and len(wanted & words) >= CONSTRAINT_OVERLAP * len(wanted):
                found |= accounting.index.bit(fact.key)
    return found


def analyse_compaction(
    before: Sequence[Message],
    after: Sequence[Message],
    *,
    event_index: int,
    call_index: int,
    uses: Mapping[str, int],
    calls: int,
    tokenizer: Any = "heuristic",
) -> CompactionFacts:
    """The fact accounting of one compaction (see the module docstring); `uses` maps a fact key to
    the last call that uses it (`last_use`)."""
    index = messages_index([*before, *after])
    used_later = index.mask_of(k for k, call in uses.items() if call >= call_index)
    return _account(
        index,
        before,
        after,
        event_index=event_index,
        call_index=call_index,
        used_later=used_later,
        calls=calls,
        tokenizer=tokenizer,
    )


# -- one run ------------------------------------------------------------------------------------


def _dangling(result: Any, session: Session, index: FactIndex, analyses: Sequence[CompactionFacts]) -> int:
    """Walk the calls from the first compaction on, tracking the removed facts missing from the context."""
    if not analyses:
        return 0
    positions = assistant_positions(session)
    messages = session.messages
    by_call: dict[int, list[CompactionFacts]] = {}
    for analysis in analyses:
        by_call.setdefault(analysis.call_index, []).append(analysis)
    lost = missing = 0
    dangling = 0
    first = min(by_call)
    for call, at in zip(call_column(result.calls, "index"), call_column(result.calls, "message_index"), strict=True):
        if call < first:
            continue
        for event in by_call.get(call, ()):
            gone = event.removed_mask | event.after_mask | event.retained_mask
            lost |= gone ^ (event.after_mask | event.retained_mask)
            missing = lost ^ (lost & event.after_mask)
        if not missing:
            continue
        reply = messages[at]
        if at == positions[call]:
            stated, span = index.replies[call], index.spans[call]
        else:
            masks = index.masks(reply)
            end = positions[call + 1] if call + 1 < len(positions) else len(messages)
            stated, span = masks.every & ~masks.constraint, index.union(messages[at:end])
        if stated & missing:
            dangling += 1
        missing ^= missing & span
    return dangling


def analyse(result: Any) -> RunFacts:
    """The fact accounting of every applied compaction of a replay result, and its dangling references."""

    def compute() -> RunFacts:
        session = session_of(result)
        applied = applied_events(result)
        if not applied:  # nothing to account: the session's facts are not read
            return RunFacts(compactions=(), dangling_references=0)
        index = session_index(session)
        calls = len(assistant_positions(session))
        tokenizer = getattr(result.config, "tokenizer", "heuristic")
        used_from = index.used_from
        analyses: list[CompactionFacts] = []
        seen = index.seen()
        unions = _PrefixUnions(index, seen)
        for event_index in applied:
            before, after = compaction_contexts(result, event_index)
            call = result.compactions[event_index].call_index
            used_later = used_from[call] if 0 <= call < len(used_from) else 0
            analyses.append(
                _account(
                    index,
                    before,
                    after,
                    event_index=event_index,
                    call_index=call,
                    used_later=used_later,
                    calls=calls,
                    tokenizer=tokenizer,
                    seen=seen,
                    unions=unions,
                )
            )
        return RunFacts(compactions=tuple(analyses), dangling_references=_dangling(result, session, index, analyses))

    found: RunFacts = memo(result, "quality_facts", compute)
    return found


def _rows(result: Any, columns: Any) -> list[dict[str, Any]]:
    """One row per compaction event of the result (events without an analysis get None columns)."""
    by_event = {c.event_index: c for c in analyse(result).compactions}
    return [columns(by_event.get(i)) for i in range(len(result.compactions))]


@register_metric("fact_retention", direction="higher", unit="share", level="compaction")
class FactRetention:
    """Share of the facts a compaction removed or rewrote that the context after it still states
    (per run: mean weighted by the tokens each compaction removed); per compaction `lost_count`
    counts the rest and `lost_facts` lists the first `MAX_LISTED` of them, in order of mention."""

    requires_model: ClassVar[bool] = False
    reusable: ClassVar[bool] = True

    def compute(self, result: Any) -> float | None:
        return analyse(result).weighted("fact_retention")

    def per_compaction(self, result: Any) -> list[dict[str, Any]]:
        return _rows(
            result,
            lambda c: {
                "fact_retention": c.fact_retention if c else None,
                "removed_facts": c.removed_count if c else None,
                "lost_count": c.lost_count if c else None,
                "lost_facts": c.listed_lost() if c else [],
            },
        )


@register_metric("needed_fact_retention", direction="higher", unit="share", level="compaction")
class NeededFactRetention:
    """Share of the removed facts the recording uses again later (assistant text or tool-call
    arguments; constraints always) that the context after the compaction still states; per
    compaction `lost_needed_count` counts the others and `lost_needed_facts` lists the first `MAX_LISTED`."""

    requires_model: ClassVar[bool] = False
    reusable: ClassVar[bool] = True

    def compute(self, result: Any) -> float | None:
        return analyse(result).weighted("needed_fact_retention")

    def per_compaction(self, result: Any) -> list[dict[str, Any]]:
        return _rows(
            result,
            lambda c: {
                "needed_fact_retention": c.needed_fact_retention if c else None,
                "needed_facts": c.needed_count if c else None,
                "lost_needed_count": c.needed_lost_count if c else None,
                "lost_needed_facts": c.listed_lost(needed=True) if c else [],
            },
        )


@register_metric("dangling_references", direction="lower", unit="calls", level="run")
class DanglingReferences:
    """Recorded assistant messages that mention a fact a compaction removed and that the context
    sent at their call no longer holds."""

    requires_model: ClassVar[bool] = False
    reusable: ClassVar[bool] = True

    def compute(self, result: Any) -> int:
        return analyse(result).dangling_references
