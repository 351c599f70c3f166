"""The quality measures of replays, kept by what they measured: a replay that compacted a recording into
the same contexts as one measured before, with the same code, is not measured again.

The task-state and fact-retention metrics read every message of a session and every context a
compaction left. Once the token counts are stored and the model cache is filled, they are most of an
offline grid's time: 5.4 s of CPU for the corpus grid's 300 cells, against 0.07 s to fingerprint the
same replays. Their values depend only on what `replay_fingerprint` covers (the metrics that say so are
`reusable`, see `registry.reusable_metrics`). So an experiment keeps them in its database (the
`measure_memo` table), and a re-run (`fresh=True`, `workbench regress`, a grid re-run after a change
to one strategy) reads them back for every replay that came out the same.

What a fingerprint covers:
- the code's version (`experiments.run.code_version`: a package release, or a checkout's commit and
  uncommitted change);
- the session's id and the tokenizer;
- the calls made (their indices, their positions in the recording, their contexts' lengths);
- each compaction event (its call, whether it failed or changed nothing);
- the messages of every context sent and of every context a compaction received and returned: a
  message of the recording as its position, any other (a placeholder, a summary) as a digest of every
  field.

The session is named by its id because, within one database, a stored session's messages never
change: an import skips the ids it holds, and deleting a session deletes its measures. So a memo
serves the database whose sessions it measured, and no other.
"""

from __future__ import annotations

import array
import hashlib
import json
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from workbench.quality.trace import memo
from workbench.registry import MetricValues
from workbench.replay_result import call_column
from workbench.session import Message, Session

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["MeasureRow", "StoredMeasures", "replay_fingerprint"]

#: A measured replay as it is stored: (fingerprint, session id, the values as JSON).
MeasureRow = tuple[str, str, str]

#: Part of every fingerprint: raised when what a fingerprint covers changes.
FINGERPRINT_FORMAT = 1


def replay_fingerprint(result: Any, version: str) -> str | None:
    """A digest of everything the reusable metrics read of `result` (see the module docstring), under
    the code's `version`. None for a result without its session and context snapshots (one rebuilt
    from storage) and for one whose compactions all failed or changed nothing (nothing costly to reuse)."""
    session = getattr(result, "session", None)
    snapshots = getattr(result, "snapshots", None)
    if not isinstance(session, Session) or not callable(snapshots):
        return None
    events = list(result.compactions)
    if all(getattr(e, "failed", False) or getattr(e, "noop", False) for e in events):
        return None
    digest = hashlib.sha256()
    head = (
        FINGERPRINT_FORMAT,
        version,
        session.id,
        getattr(result.config, "tokenizer", "heuristic"),
        [list(call_column(result.calls, name)) for name in ("index", "message_index", "context_messages")],
        [(e.call_index, bool(getattr(e, "failed", False)), bool(getattr(e, "noop", False))) for e in events],
    )
    digest.update(repr(head).encode())
    positions: dict[int, int] = memo(
        session, "message_positions", lambda: {id(m): i for i, m in enumerate(session.messages)}
    )
    recorded = session.messages
    others: dict[int, int] = {}  # id of a message not of the recording -> its negative code
    read: dict[int, list[int]] = {}  # id of a snapshot list -> codes of its messages read so far

    def add(messages: list[Message], length: int) -> None:
        codes = read.setdefault(id(messages), [])
        for message in messages[len(codes) : length]:
            position = positions.get(id(message))
            if position is None or recorded[position] is not message:
                position = others.get(id(message))
                if position is None:
                    position = others[id(message)] = -1 - len(others)
                    digest.update(_message_digest(message))
            codes.append(position)
        digest.update(array.array("q", codes[:length]).tobytes())
        digest.update(b"|")

    sent, exchanges = snapshots()
    for first_call, messages in sent:
        digest.update(str(first_call).encode())
        add(messages, len(messages))
    for received, returned in exchanges:
        add(*received)
        add(*returned)
    return digest.hexdigest()[:32]


def _message_digest(message: Message) -> bytes:
    """Every field of a message, as bytes that differ whenever one of them does."""
    fields = (
        message.role,
        message.content,
        [(call.id, call.name, call.arguments) for call in message.tool_calls],
        message.tool_call_id,
        message.name,
        message.origin,
        message.importance,
        json.dumps(message.metadata, sort_keys=True, default=repr),
        message.observation,
    )
    return hashlib.sha256(repr(fields).encode()).digest()


_ENCODER = json.JSONEncoder(allow_nan=False, check_circular=False)


class StoredMeasures:
    """A run's memo of reusable measures (`registry.MetricMemo`), by `replay_fingerprint`: those stored
    for its sessions under its code `version` (`stored`: an Arrow table of `fingerprint` and `measures`,
    as `RunResults.stored_measures` reads it), plus those measured since, which `drain()` hands over
    (once each) for the run to store. Thread-safe: a run's threads share one.

    Values that JSON cannot hold exactly (NaN, infinities, objects) are not kept: they are measured
    each time."""

    def __init__(self, version: str, stored: pa.Table | None = None):
        self.version = version
        self.table = stored
        self._texts: dict[str, str] | None = None
        self._lock = threading.Lock()
        self._made: dict[str, MetricValues] = {}
        self._unsent: list[MeasureRow] = []
        self._read: dict[int, weakref.ref[Any]] = {}  # id -> the results answered (by identity: they are unhashable)

    def _stored(self) -> Mapping[str, str]:
        if self._texts is None:
            with self._lock:
                if self._texts is None:
                    table, texts = self.table, {}
                    if table is not None:
                        keys, values = table.column("fingerprint").to_pylist(), table.column("measures").to_pylist()
                        texts = dict(zip(keys, values, strict=True))
                    self._texts = texts
        return self._texts

    def stored_table(self) -> pa.Table:
        """The measures stored when the run started, as the table they came in (what a worker process
        starts from; an empty one when none was given)."""
        import pyarrow as pa

        if self.table is not None:
            return self.table
        return pa.table({"fingerprint": pa.array([], pa.string()), "measures": pa.array([], pa.string())})

    def fingerprint(self, result: Any) -> str | None:
        """`replay_fingerprint` under this memo's version (kept per result)."""
        found: str | None = memo(
            result, f"measure_fingerprint:{self.version}", lambda: replay_fingerprint(result, self.version)
        )
        return found

    def get(self, result: Any, names: frozenset[str]) -> MetricValues | None:
        fingerprint = self.fingerprint(result)
        if fingerprint is None:
            return None
        with self._lock:
            made = self._made.get(fingerprint)
        if made is None:
            text = self._stored().get(fingerprint)
            if text is None:
                return None
            values, columns = json.loads(text)
            made = (values, columns)
        if not names <= made[0].keys():  # measured when fewer metrics were reusable
            return None
        self._read[id(result)] = weakref.ref(result)
        return made

    def answered(self, result: Any) -> bool:
        """Whether this memo gave `result`'s reusable measures (a replay like it was measured before)."""
        held = self._read.get(id(result))
        return held is not None and held() is result

    def put(self, result: Any, values: MetricValues) -> None:
        fingerprint = self.fingerprint(result)
        if fingerprint is None:
            return
        try:
            text = _ENCODER.encode([values[0], values[1]])
        except (TypeError, ValueError):  # not JSON's to hold exactly
            return
        with self._lock:
            if fingerprint in self._made:
                return
            self._made[fingerprint] = values
            self._unsent.append((fingerprint, str(result.session_id), text))

    def drain(self) -> tuple[MeasureRow, ...]:
        with self._lock:
            unsent, self._unsent = self._unsent, []
        return tuple(unsent)
