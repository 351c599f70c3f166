"""What a replay did, read from its result: the session, each compaction's input and output, the
context at a call.

Quality metrics read `ReplayResult.session`, `compaction_contexts(event_index)` and
`context_at(call_index)`. A result-like object that lacks them (e.g. one rebuilt from storage)
can be given them with `attach(result, session, contexts)`; `context_at` is then derived from
the compaction contexts and the recording.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from workbench.session import Message, Session

Contexts = tuple[list[Message], list[Message]]


def session_of(result: Any) -> Session:
    session = getattr(result, "session", None)
    if not isinstance(session, Session):
        raise ValueError(
            f"replay result of session {getattr(result, 'session_id', '?')!r} does not carry its "
            "session (result.session); quality metrics need the recording"
        )
    return session


def compaction_contexts(result: Any, event_index: int) -> Contexts:
    """(what the strategy received, what it returned) for compaction event `event_index` (lists the
    caller reads and must not change: they may be the result's own)."""
    method = getattr(result, "compaction_contexts", None)
    if not callable(method):
        raise ValueError("replay result has no compaction_contexts(event_index); quality metrics need it")
    before, after = method(event_index)
    return (before if type(before) is list else list(before)), (after if type(after) is list else list(after))


def assistant_positions(session: Session) -> list[int]:
    """Index in `session.messages` of each recorded call's assistant message (cached per session)."""
    return _memo(
        session, "assistant_positions", lambda: [i for i, m in enumerate(session.messages) if m.role == "assistant"]
    )


def context_at(result: Any, call_index: int) -> list[Message]:
    """The messages sent at call `call_index` (the result's own `context_at` when it has one)."""
    method = getattr(result, "context_at", None)
    if callable(method):
        return list(method(call_index))
    session = session_of(result)
    positions = assistant_positions(session)
    at = positions[call_index]
    latest: tuple[int, list[Message]] | None = None
    for index, event in enumerate(result.compactions):
        if event.call_index <= call_index and not getattr(event, "failed", False):
            latest = (event.call_index, compaction_contexts(result, index)[1])
    if latest is None:
        return list(session.messages[:at])
    call, after = latest
    return [*after, *session.messages[positions[call] : at]]


def applied_events(result: Any) -> list[int]:
    """Indices of the compaction events that changed the context: failed ones and no-ops (the
    strategy returned its input unchanged: nothing removed, nothing to grade) excluded."""
    return [
        i for i, e in enumerate(result.compactions) if not getattr(e, "failed", False) and not getattr(e, "noop", False)
    ]


# -- a small per-object memo (results and sessions are not hashable) -----------------------------

_MEMO: dict[int, tuple[weakref.ref[Any], dict[str, Any]]] = {}
_MEMO_LOCK = threading.RLock()  # re-entrant: `forget` takes it, and a collection may run it under the lock


_T = TypeVar("_T")


def _memo(owner: Any, name: str, compute: Callable[[], _T]) -> _T:
    key = id(owner)
    entry = _MEMO.get(key)
    if entry is None or entry[0]() is not owner:

        def forget(_: Any, key: int = key, memos: dict[int, Any] = _MEMO, lock: Any = _MEMO_LOCK) -> None:
            # bound at definition: at interpreter exit the module's globals may already be None
            with lock:
                current = memos.get(key)
                if current is not None and current[0]() is None:
                    del memos[key]

        entry = (weakref.ref(owner, forget), {})
        with _MEMO_LOCK:
            _MEMO[key] = entry
    values = entry[1]
    if name not in values:
        values[name] = compute()
    return cast("_T", values[name])


memo = _memo


# -- a fallback for engines without the trace ---------------------------------------------------


def attach(result: Any, session: Session, contexts: Sequence[Contexts]) -> Any:
    """Give `result` the `session` and `compaction_contexts` quality metrics read (returns it)."""
    frozen = [(list(b), list(a)) for b, a in contexts]
    result.session = session
    result.compaction_contexts = lambda index: frozen[index]
    return result
