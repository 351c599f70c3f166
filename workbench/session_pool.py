"""One object per distinct session in a process: what was worked out on a session read before is kept.

A session's quality analysis (its facts, its task state, the next use of each fact) and its token
counts live on the `Session` and `Message` objects (`workbench.quality.trace.memo`, `Message._token_cache`):
a session read again from a database is new objects, and all of it would be worked out again. Every run
reads its sessions afresh, as do the app's pages and a notebook's cells, so a grid re-run or a second
spec over the same sessions would analyse each session once per run. `canonical` hands back the session
already held when one with the same content (messages, tools, id, dataset, format, probes, metadata) was
read before, after giving it the counts the new copy brought.

The pool holds the sessions read last, up to `POOL_CHARACTERS` characters of message text (default 64
million: a corpus of a hundred long agent sessions; `WORKBENCH_SESSION_POOL_CHARS` sets it, 0 turns the
pool off), and forgets the least recently read first.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections import OrderedDict

from workbench.session import Session, content_hash

__all__ = ["POOL_CHARACTERS", "POOL_ENV", "SessionPool", "canonical", "pool"]

POOL_ENV = "WORKBENCH_SESSION_POOL_CHARS"
POOL_CHARACTERS = 64_000_000


def _identity(session: Session) -> tuple[str, ...]:
    """What makes two sessions the same: everything a replay or a metric reads."""
    return (
        content_hash(session.messages, session.tools),
        session.id,
        str(session.dataset),
        str(session.format),
        json.dumps([probe.to_dict() for probe in session.probes], sort_keys=True, default=str),
        json.dumps(session.metadata, sort_keys=True, default=str),
    )


def _characters(session: Session) -> int:
    return sum(len(message.text) for message in session.messages)


class SessionPool:
    """The sessions read last, by content, within a budget of message characters (see the module)."""

    def __init__(self, max_characters: int = POOL_CHARACTERS):
        self.max_characters = max(0, int(max_characters))
        self._held: OrderedDict[tuple[str, ...], tuple[Session, int]] = OrderedDict()
        self._characters = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    def canonical(self, session: Session) -> Session:
        """The session held with the same content as `session` (given the token counts `session`
        carries that it lacks), else `session`, now held."""
        if not self.max_characters:
            return session
        key = _identity(session)
        with self._lock:
            found = self._held.get(key)
            if found is not None:
                self._held.move_to_end(key)
                held = found[0]
                for kept, fresh in zip(held.messages, session.messages, strict=True):
                    for tokenizer, count in fresh._token_cache.items():
                        kept._token_cache.setdefault(tokenizer, count)
                return held
            size = _characters(session)
            if size > self.max_characters:
                return session
            self._held[key] = (session, size)
            self._characters += size
            while self._characters > self.max_characters:
                _, (_, dropped) = self._held.popitem(last=False)
                self._characters -= dropped
            return session

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self._characters = 0


def configured_budget() -> int:
    """The pool's budget in characters: `POOL_ENV` when set to a whole number, else `POOL_CHARACTERS`."""
    value = os.environ.get(POOL_ENV, "").strip()
    try:
        return int(value) if value else POOL_CHARACTERS
    except ValueError:
        warnings.warn(
            f"{POOL_ENV}={value!r} is not a whole number of characters; the default, {POOL_CHARACTERS}, is used",
            stacklevel=2,
        )
        return POOL_CHARACTERS


pool = SessionPool(configured_budget())


def canonical(session: Session) -> Session:
    """`pool.canonical(session)`: the process's one object for this session's content."""
    return pool.canonical(session)
