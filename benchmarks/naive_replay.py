"""A naive replay engine: the same walk, but the whole context is recounted at every call.

It is the baseline of the replay benchmark and the reference the test suite compares the
incremental engine against (their results must be equal).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.config import parse_config
from workbench.replay import ReplayResult, _Replay, as_session
from workbench.session import Message, split_leading_system
from workbench.tokens import IMAGE_TOKENS, MESSAGE_OVERHEAD, counted_text, image_parts


class NaiveReplay(_Replay):
    """Counts every message of the context from its text at every change, with no cache, and asks
    the trigger at every call (never skipping ahead with `firing_mask`)."""

    fast = False

    def _count(self, messages: Sequence[Message]) -> int:
        return sum(
            self.tokenizer.count(counted_text(m)) + IMAGE_TOKENS * image_parts(m) + MESSAGE_OVERHEAD for m in messages
        )

    def _recount(self) -> None:
        self.context_tokens = self.fixed_tokens + self._count(self.context)
        self.system_tokens = self.fixed_tokens + self._count(split_leading_system(self.context)[0])
        self.only_system = not split_leading_system(self.context)[1]
        self.steps = sum(1 for m in self.context if not m.is_observation)

    def _set_context(self, messages: list[Message], known: Any = None) -> None:
        self.context = messages  # what is known of its steps is of no use to a full recount
        self._recount()

    def _append(self, messages: Sequence[Message]) -> None:
        self.context.extend(messages)
        self._recount()

    def _append_recorded(self, start: int, end: int) -> None:
        self._append(self.session.messages[start:end])

    def _shared_prefix_tokens(self, previous: list[Message], previous_length: int) -> int:
        shared: list[Message] = []
        for old, new in zip(previous[:previous_length], self.context, strict=False):
            if old is not new:
                break
            shared.append(new)
        return self.fixed_tokens + self._count(shared)


def naive_replay(session, config, *, summarizer=None, measure: bool = True) -> ReplayResult:
    runner = NaiveReplay(as_session(session), parse_config(config), summarizer, None)
    runner.measure = measure
    return runner.run()
