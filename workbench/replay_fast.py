"""The replay's speed, apart from its rules (`workbench.replay`): what the walk keeps so that a call
costs O(1) unless a compaction happened before it, and the run of calls it records at once where the
trigger provably cannot fire. `workbench.replay.reference_replay` walks without any of it, and the
tests hold the two equal (tests/test_replay_reference.py).

- `Recording`: a session's per-call columns for one tokenizer (token and step prefix sums, each
  call's assistant message, completion tokens, finish reason, model), kept while the session lives;
  `RecordingArrays` the same as numpy arrays, for `quiet_calls`.
- `quiet_calls`: from a call on, the calls before the trigger's first firing or the first overflow,
  read from prefix sums through the trigger's `firing_mask` (a `CallSpan`), without asking it per call.
- `cached_counts`, `counted_steps`: token counts in batches, per message and per step, cached on them.
- `fast_constructor`, `make_view`, `History`: frozen records built without their per-field set-up, and
  the session's history shown to a trigger without a copy.
- `parsed_config`: a config spec parsed once per process (an experiment replays it on many sessions).

This module knows nothing of the walk but the gauges it reads (`WalkGauges`); it imports no replay module.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, compress, count, islice, repeat
from operator import is_
from typing import Any, Protocol, TypeVar, cast, overload

from workbench.calibration import ScaledTokenizer, prime_scaled
from workbench.compaction import CallSpan, TriggerView, first_true
from workbench.config import ReplayConfig, parse_config
from workbench.session import Message, Session, Step
from workbench.strategies.common import BodySteps, Grouping
from workbench.tokens import MESSAGE_OVERHEAD, Tokenizer, prime

#: The most calls `quiet_calls` reads at once: a trigger fires every few dozen calls in a long
#: session, and the arrays of the rest of a 2,000-call session would be built for nothing.
SKIP_SPAN = 256

_Record = TypeVar("_Record")


def fast_constructor(cls: type[_Record], supplied: Sequence[str]) -> Callable[[dict[str, Any]], _Record]:
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


make_view = fast_constructor(
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
        "context",
    ),
)


class History(Sequence[Message]):
    """The first `length` messages of a list, without copying them (`TriggerView.history` and `.context`)."""

    __slots__ = ("_messages", "_length")

    def __init__(self, messages: Sequence[Message], length: int):
        self._messages = messages
        self._length = length

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[Message]:
        return islice(self._messages, self._length)  # at C speed, not through __getitem__

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step == 1:  # the usual slice: without copying the whole prefix first
                return self._messages[start:stop]
            return self._messages[: self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self._messages[index]


_NUMPY_LOCK = threading.Lock()


def _numpy() -> Any:
    """numpy, imported on the first skip-ahead. Importing it adds warning filters to the process;
    a replay must leave the process as it found it, so the filters are restored around the import.

    A module another thread is still initialising is not handed out (its attributes may not exist
    yet): the `import` statement waits for it; the lock keeps this module's own threads from
    saving and restoring the warning filters over each other.
    """
    module = sys.modules.get("numpy")
    if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
        return module
    with _NUMPY_LOCK, warnings.catch_warnings():
        import numpy as module
    return module


@dataclass
class RecordingArrays:
    """`Recording`'s per-call columns as numpy int64 arrays (what ``quiet_calls`` slices)."""

    at_tokens: Any
    at_steps: Any
    assistant_at: Any
    completion: Any


@dataclass
class Recording:
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
    _arrays: RecordingArrays | None = None

    @classmethod
    def build(cls, session: Session, counts: Sequence[int], counted: str | None = None) -> Recording:
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

    def arrays(self) -> RecordingArrays:
        if self._arrays is None:
            np = _numpy()

            self._arrays = RecordingArrays(
                at_tokens=np.array([self.prefix[i] for i in self.assistant_at], dtype=np.int64),
                at_steps=np.array([self.step_prefix[i] for i in self.assistant_at], dtype=np.int64),
                assistant_at=np.array(self.assistant_at, dtype=np.int64),
                completion=np.array(self.completion, dtype=np.int64),
            )
        return self._arrays


_RECORDINGS: dict[int, tuple[weakref.ref[Session], dict[str, Recording]]] = {}


def recording_of(session: Session, tokenizer: str, counts: Callable[[], Sequence[int]]) -> Recording:
    """The session's `Recording` for `tokenizer`, kept while the session lives (sessions are immutable
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
        found = entry[1][tokenizer] = Recording.build(session, counts(), tokenizer)
    return found


def cached_counts(messages: Sequence[Message], tokenizer: Tokenizer) -> list[int]:
    """Every message's token count, cached on the message (the uncounted ones counted in one batch)."""
    name = tokenizer.name
    try:
        return [m._token_cache[name] for m in messages]
    except KeyError:
        if isinstance(tokenizer, ScaledTokenizer):
            prime_scaled(messages, tokenizer)
        else:
            prime(messages, tokenizer)
        return [m._token_cache[name] for m in messages]


def step_tokens(steps: Sequence[Step], tokenizer: Tokenizer) -> list[int]:
    """Every step's tokens (its messages' counts), cached on the step: a replay meets the same
    steps compaction after compaction and replay after replay."""
    name = tokenizer.name
    try:
        return [step._token_cache[name] for step in steps]
    except KeyError:
        missing = [step for step in steps if name not in step._token_cache]
        cached_counts(list(chain.from_iterable(step.messages for step in missing)), tokenizer)  # one batch
        for step in missing:
            step._token_cache[name] = sum([m._token_cache[name] for m in step.messages])
        return [step._token_cache[name] for step in steps]


def counted_steps(known: BodySteps, tokenizer: Tokenizer) -> BodySteps:
    """`known` carrying every step's tokens under `tokenizer`: those it carries, filled in where
    missing, else counted. Unchanged when a step is a stray tool result (the walk then counts
    message by message)."""
    if known.strays:
        return known
    tokens = known.tokens
    if tokens is None or known.counted != tokenizer.name:
        counted: list[int | None] = list(step_tokens(known.steps, tokenizer))
        return dataclasses.replace(known, tokens=counted, counted=tokenizer.name)
    if None in tokens:
        missing = list(compress(count(), map(is_, tokens, repeat(None))))
        for position, total in zip(missing, step_tokens([known.steps[i] for i in missing], tokenizer), strict=True):
            tokens[position] = total
    return known


class WalkGauges(Protocol):
    """What `quiet_calls` reads of the walk (`workbench.replay`), at the call it starts from."""

    config: ReplayConfig
    recording: Recording
    context: list[Message]
    context_tokens: int
    system_tokens: int
    steps: int
    input_tokens: int
    output_tokens: int
    tokens_last_call: int
    last_finish_reason: str | None

    @property
    def compactions(self) -> int: ...


def quiet_calls(walk: WalkGauges, start: int, firing: Callable[[CallSpan], Any]) -> tuple[list[int], list[int]]:
    """(context tokens, context messages) of each call from `start` on before the first at which
    the trigger fires or the context overflows (at most `SKIP_SPAN` calls; none when `start` is such
    a call).

    Until the next compaction the context only grows by the recorded messages, so every gauge and
    counter of those calls follows from prefix sums: the trigger's `firing_mask` (`firing`) reads
    them as arrays (a `CallSpan`). Raises `NotImplementedError` (from the trigger) when it cannot.
    """
    np = _numpy()
    recording = walk.recording
    arrays = recording.arrays()
    at_start = recording.assistant_at[start]
    base = walk.context_tokens - recording.prefix[at_start]
    remaining = arrays.at_tokens[start:]
    limit = walk.config.context_limit - walk.config.max_output
    fits = int(remaining.searchsorted(limit - base, side="right"))  # calls before the first overflow
    size = min(fits + 1, len(remaining), SKIP_SPAN)
    tokens = remaining[:size] + base
    messages_base = len(walk.context) - at_start
    steps_base = walk.steps - recording.step_prefix[at_start]
    spent_last, input_before, output_before = walk.tokens_last_call, walk.input_tokens, walk.output_tokens
    finish_last = walk.last_finish_reason

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
        system_tokens=walk.system_tokens,
        compactions=walk.compactions,
        context_limit=walk.config.context_limit,
        max_output=walk.config.max_output,
        columns=column,
    )
    fires = first_true(np.asarray(firing(span), dtype=bool))
    stop = max(0, min(fits, size if fires is None else fires))
    lengths = (arrays.assistant_at[start : start + stop] + messages_base).tolist()
    return tokens[:stop].tolist(), lengths


_PARSED: dict[str, ReplayConfig] = {}
_PARSED_SIZE = 64


def parsed_config(config: ReplayConfig | Mapping[str, Any] | str) -> ReplayConfig:
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
