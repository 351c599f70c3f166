"""Fact keys as bits, so that retention is integer arithmetic rather than set building.

Every compaction of every replay compares the facts of the messages it removed with those of
the context it returned, and the dangling-reference walk does the same at every later call.
Held as Python ints with one bit per fact key, a message's facts are a mask, the facts of a
whole context are the OR of a few hundred masks, a share is a ratio of popcounts, and "still
used at or after call c" is one precomputed mask per call.

An index is built once per session (memoised on it, from the per-message facts that
`message_facts` caches per message): bit positions in first-seen order, the masks of the
session's messages, and per recorded call the masks of its assistant message, of the messages
it spans, and of the facts the recording states at or after it. Messages a compaction wrote get
their bits the first time their content is seen (cached by their facts mapping, which
`message_facts` shares between messages of the same content).
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from itertools import accumulate, compress, islice
from operator import not_, or_
from typing import Any, cast

from workbench.quality.facts import (
    CASE_ODD,
    QUOTE_CHARS,
    Fact,
    drop_quotes,
    message_facts,
    message_text,
    prime,
    searched_text,
)
from workbench.quality.trace import assistant_positions, memo
from workbench.session import Message, Session

FUZZY_KINDS = ("error", "command", "constraint")


@dataclass(frozen=True, slots=True)
class Masks:
    """The facts of one message as bit masks (all of them, its constraints, its error/command/constraint
    facts), with its facts in order of mention and the bit position of each (`order`, counted from the
    lowest, `low`; `width` positions from there hold them all); `rank`, each relative position's place
    in that order, is filled the first time a few facts are chosen."""

    every: int
    constraint: int
    fuzzy: int
    facts: tuple[Fact, ...]
    order: tuple[int, ...]
    low: int
    width: int
    rank: dict[int, int] = field(default_factory=dict, compare=False, repr=False)

    def chosen(self, mask: int, limit: int | None = None) -> list[Fact]:
        """This message's facts whose bits are in `mask`, in order of mention (the first `limit`)."""
        hit = self.every & mask
        if hit == self.every:
            return list(self.facts[:limit])
        if not hit:
            return []
        facts = self.facts
        if hit.bit_count() * 8 <= len(facts):  # a few of many: looked up by position
            rank = self.rank
            if not rank:
                rank.update(zip(self.order, range(len(facts)), strict=True))
            return [facts[i] for i in sorted([rank[p] for p in positions(hit >> self.low)])[:limit]]
        bits = format(hit >> self.low, "b").zfill(self.width)[::-1]  # bits[p]: is position low + p set
        return list(islice(compress(facts, map("1".__eq__, map(bits.__getitem__, self.order))), limit))


class FactIndex:
    """Bit positions of fact keys and the masks of messages (see the module docstring).

    `keys[p]` is the key at bit p and `bits[key]` its position. For a session's index, per recorded
    call c: `replies[c]` (the non-constraint facts of its assistant message), `spans[c]` (the facts
    of the messages from that one to the next call's), `used_from[c]` (facts an assistant message
    states at or after c; one more entry, 0, past the end) and `last_used_at[c]` (those stated last at c).
    """

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.bits: dict[str, int] = {}
        self._own: dict[int, Masks] = {}
        self._every: dict[int, int] = {}
        self._foreign: dict[int, tuple[Mapping[str, Fact], Masks]] = {}
        self._texts: dict[int, str] = {}
        self._held: list[Message] = []
        self._lock = threading.Lock()
        self.replies: list[int] = []
        self.spans: list[int] = []
        self.used_from: list[int] = [0]
        self.last_used_at: list[int] = []
        self._layers: dict[int, list[tuple[str, int]]] = {}
        self._holders: dict[str, frozenset[int]] = {}
        self._lowered: tuple[str, list[int]] = ("", [])
        self._bytes: tuple[bytes, list[int], list[int]] = (b"", [], [])

    def _build(self, facts: Mapping[str, Fact]) -> Masks:
        bits, keys = self.bits, self.keys
        order: list[int] = []
        every = constraint = fuzzy = 0
        with self._lock:
            for key, fact in facts.items():
                position = bits.get(key)
                if position is None:
                    position = bits[key] = len(keys)
                    keys.append(key)
                order.append(position)
                bit = 1 << position
                every |= bit
                if fact.kind in FUZZY_KINDS:
                    fuzzy |= bit
                    if fact.kind == "constraint":
                        constraint |= bit
        low = min(order, default=0)
        return Masks(
            every,
            constraint,
            fuzzy,
            tuple(facts.values()),
            tuple(p - low for p in order),
            low,
            (every >> low).bit_length(),
        )

    def own(self, messages: Iterable[Message]) -> None:
        """Index messages for the index's whole life (a session's own): held, cached by identity."""
        messages = list(messages)
        prime(messages)
        for message in messages:
            if id(message) not in self._own:
                self._held.append(message)
                masks = self._build(message_facts(message))
                self._own[id(message)] = masks
                self._every[id(message)] = masks.every

    def masks(self, message: Message) -> Masks:
        """The masks of a message: by identity for the index's own, else by its facts mapping, which
        `message_facts` shares between messages a compaction wrote with the same content."""
        found = self._own.get(id(message))
        if found is not None:
            return found
        facts = message_facts(message)
        entry = self._foreign.get(id(facts))
        if entry is not None and entry[0] is facts:
            return entry[1]
        masks = self._build(facts)
        with self._lock:
            self._foreign[id(facts)] = (facts, masks)
        return masks

    def masks_of(self, messages: Sequence[Message]) -> list[Masks]:
        """`[self.masks(m) for m in messages]`, looked up by identity in one pass where it can."""
        found = list(map(self._own.get, map(id, messages)))
        if not all(found):  # (`None in found` would call the dataclass's __eq__ on each)
            prime([message for message, masks in zip(messages, found, strict=True) if masks is None])
            found = [
                self.masks(message) if masks is None else masks for message, masks in zip(messages, found, strict=True)
            ]
        return cast("list[Masks]", found)

    def seen(self) -> dict[int, int]:
        """A copy of the own messages' masks by identity, for `union` to add other messages to while
        they live (e.g. during one result's analysis, whose result holds the messages its compactions wrote)."""
        return dict(self._every)

    def union(self, messages: Sequence[Message], seen: dict[int, int] | None = None) -> int:
        """The mask of every fact the messages state (`seen`: see `FactIndex.seen`)."""
        return reduce(or_, self.every_of(messages, seen), 0)

    def every_of(self, messages: Sequence[Message], seen: dict[int, int] | None = None) -> list[int]:
        """Each message's mask of every fact it states (`seen`: see `FactIndex.seen`)."""
        known = self._every if seen is None else seen
        found = list(map(known.get, map(id, messages)))
        if None in found:
            prime([message for message, mask in zip(messages, found, strict=True) if mask is None])
            for place, (message, mask) in enumerate(zip(messages, found, strict=True)):
                if mask is None:
                    mask = found[place] = self.masks(message).every
                    if seen is not None:
                        seen[id(message)] = mask
        return cast("list[int]", found)  # every None was replaced

    def seen_texts(self) -> dict[int, str]:
        """Like `seen`, for `texts`."""
        return dict(self._texts)

    def texts(self, messages: Sequence[Message], seen: dict[int, str] | None = None) -> list[str]:
        """The messages' normalised texts (`message_text`), kept by identity for the index's own
        (`seen`: see `FactIndex.seen`)."""
        known = self._texts if seen is None else seen
        found = list(map(known.get, map(id, messages)))
        if None in found:
            own, texts = self._own, self._texts
            for place, (message, text) in enumerate(zip(messages, found, strict=True)):
                if text is None:
                    text = found[place] = message_text(message)
                    if id(message) in own:
                        texts[id(message)] = text
                    if seen is not None:
                        seen[id(message)] = text
        return found  # type: ignore[return-value]  # every None was replaced

    def owns(self, message: Message) -> bool:
        """Whether the message is one of the index's own (a recorded one, for a session's index)."""
        return id(message) in self._own

    def foreign(self, messages: Sequence[Message]) -> list[Message]:
        """The messages that are not the index's own (those a compaction wrote), in order."""
        return list(compress(messages, map(not_, map(self._own.__contains__, map(id, messages)))))

    def holders(self, wanted: str) -> frozenset[int]:
        """The ids of the own messages whose normalised text (`message_text`) contains `wanted`, a
        normalised string; cached per string, so a probe asked again (the same fact, in the next
        configuration of a grid) costs a set lookup per message of its context.

        The own messages are searched as one text, lowered and without quotes but with their
        whitespace as written (normalising them would cost more): a string with no space is in a
        message's normalised text exactly when it is in that text; a string with spaces is looked
        for there by its longest word, and confirmed in the normalised text of the few messages
        that have it."""
        found = self._holders.get(wanted)
        if found is not None:
            return found
        words = wanted.split(" ")
        if "\0" in wanted:  # could span two messages of the joined text
            holders = [m for m in self._held if wanted in message_text(m)]
        else:
            holders = self._having(max(words, key=len))
            if len(words) > 1:
                holders = [m for m in holders if wanted in message_text(m)]
        found = self._holders[wanted] = frozenset(map(id, holders))
        return found

    def _having(self, needle: str) -> list[Message]:
        """The own messages whose lowered, quote-free text (`_lowered`) contains `needle` (lower case,
        no quotes, no NUL).

        An ASCII needle is looked for in the UTF-8 bytes of the texts with their ASCII letters
        lowered: a message's text lowered in full differs from that only at its non-ASCII capitals,
        and of those only the ones of `CASE_ODD` lower to something holding an ASCII letter, so a
        message with none of them has the needle in one exactly when it has it in the other (UTF-8
        bytes match only at whole characters). Messages with one, and any other needle, are searched
        in the text lowered in full."""
        if needle.isascii():
            blob, starts, odd = self._bytes_blob()
            found = _places(blob, starts, needle.encode("ascii"))
            if odd:
                found = sorted({*found, *(place for place in odd if needle in _lowered(self._held[place]))})
        else:
            if len(self._lowered[1]) != len(self._held):
                texts = [_lowered(message) for message in self._held]
                self._lowered = ("\0".join(texts), list(accumulate([len(t) + 1 for t in texts[:-1]], initial=0)))
            found = _places(*self._lowered, needle)
        held = self._held
        return [held[place] for place in found]

    def _bytes_blob(self) -> tuple[bytes, list[int], list[int]]:
        """The own messages' texts as `_having` searches an ASCII needle in them: UTF-8, ASCII
        letters lowered, quotes dropped, joined by NULs; where each starts; the messages with a
        character of `CASE_ODD`."""
        blob, starts, odd = self._bytes
        if len(starts) != len(self._held):
            texts: list[bytes] = []
            odd = []
            for place, message in enumerate(self._held):
                text = searched_text(message)
                data = text.encode("utf-8", "surrogatepass").lower()
                for quote, encoded in _ASCII_QUOTE_BYTES if text.isascii() else _QUOTE_BYTES:
                    if quote in text:  # (looked for in the text: a single character is found faster there)
                        data = data.replace(encoded, b"")
                if not text.isascii() and any(char in text for char in CASE_ODD):
                    odd.append(place)
                texts.append(data)
            blob, starts = b"\0".join(texts), list(accumulate([len(t) + 1 for t in texts[:-1]], initial=0))
            self._bytes = (blob, starts, odd)
        return blob, starts, odd

    def has(self, mask: int, key: str) -> bool:
        position = self.bits.get(key)
        return position is not None and (mask >> position) & 1 == 1

    def bit(self, key: str) -> int:
        return 1 << self.bits[key]

    def keys_of(self, mask: int) -> list[str]:
        """The keys of a mask, in bit order."""
        keys = self.keys
        return [keys[p] for p in sorted(positions(mask))]

    def layer_keys(self, call: int) -> list[tuple[str, int]]:
        """(key, bit position) of the facts the recording states last at `call`, by key (cached)."""
        found = self._layers.get(call)
        if found is None:
            keys = self.keys
            found = self._layers[call] = sorted((keys[p], p) for p in positions(self.last_used_at[call]))
        return found

    def mask_of(self, keys: Iterable[str]) -> int:
        """The mask of the given keys (keys the index has never seen are left out)."""
        bits = self.bits
        total = 0
        for key in keys:
            position = bits.get(key)
            if position is not None:
                total |= 1 << position
        return total


_QUOTE_BYTES = tuple((quote, quote.encode("utf-8")) for quote in QUOTE_CHARS)
_ASCII_QUOTE_BYTES = tuple((quote, encoded) for quote, encoded in _QUOTE_BYTES if quote.isascii())


def _places(blob: str | bytes, starts: list[int], needle: Any) -> list[int]:
    """The places (in `starts`) of the joined texts of `blob` that contain `needle`, in order."""
    places: list[int] = []
    at = blob.find(needle)
    while at >= 0:
        place = bisect_right(starts, at) - 1
        places.append(place)
        if place + 1 == len(starts):
            break
        at = blob.find(needle, starts[place + 1])
    return places


def _lowered(message: Message) -> str:
    """`message_text` without collapsing whitespace: lower case, no quotes."""
    return drop_quotes(searched_text(message).lower())


def positions(mask: int) -> list[int]:
    """The positions of a mask's set bits (in no particular order)."""
    if not mask:
        return []
    low = (mask & -mask).bit_length() - 1  # a message's facts sit close together: format only their span
    digits = format(mask >> low, "b")
    top = len(digits) - 1 + low
    out: list[int] = []
    at = digits.find("1")
    while at >= 0:
        out.append(top - at)
        at = digits.find("1", at + 1)
    return out


def _session_index(session: Session) -> FactIndex:
    index = FactIndex()
    messages = session.messages
    index.own(messages)
    positions = assistant_positions(session)
    every = index._every
    index.replies = [every[id(messages[p])] & ~index._own[id(messages[p])].constraint for p in positions]
    ends = [*positions[1:], len(messages)][: len(positions)]  # a recording may hold no call
    index.spans = [index.union(messages[start:end]) for start, end in zip(positions, ends, strict=True)]
    used_from = [0] * (len(positions) + 1)
    for call in range(len(positions) - 1, -1, -1):
        used_from[call] = used_from[call + 1] | index.replies[call]
    index.used_from = used_from
    index.last_used_at = [used_from[c] & ~used_from[c + 1] for c in range(len(positions))]
    return index


def session_index(session: Session) -> FactIndex:
    """The fact index of a session, built once (memoised on the session)."""
    found: FactIndex = memo(session, "fact_index", lambda: _session_index(session))
    return found


def messages_index(messages: Sequence[Message]) -> FactIndex:
    """A throwaway index over some messages (for accounting outside a replayed session)."""
    index = FactIndex()
    index.own(messages)
    return index
