"""Replaying a session under a config, and running one strategy once: the entry points.

`replay(session, config)` walks the session by the rules in `workbench.replay_rules` (when the
trigger is asked, what a compaction may change, what a call costs), with the speed of
`workbench.replay_fast`; `reference_replay` walks by the same rules call by call with none of that
speed, and is what the fast walk is held equal to. `compact(messages, strategy)` runs one strategy
once. What a replay produces (`ReplayResult`, `CallRecord`, `CompactionEvent`) is in
`workbench.replay_result`, and importable from here.

The modules import one way: replay -> replay_rules -> replay_result -> replay_fast (import-linter
holds it): the speed knows nothing of the rules, only the gauges it reads.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from workbench.compaction import CompactionEnv, Context, Summarizer
from workbench.config import (
    DEFAULT_CONTEXT_LIMIT,
    DEFAULT_MAX_OUTPUT,
    DEFAULT_SUMMARIZER,
    ON_FAILURE,
    ReplayConfig,
    parse_config,
)
from workbench.errors import CompactionError, ConfigError
from workbench.llm.lazy import LazyModel
from workbench.registry import METRICS
from workbench.replay_fast import SKIP_SPAN, parsed_config
from workbench.replay_result import (
    CALL_COLUMNS,
    COMPACTION_COLUMNS,
    SHOWN_METRICS,
    CallRecord,
    CallRecords,
    CompactionEvent,
    ReplayResult,
    Snapshot,
    call_column,
    changed_compactions,
    noop_note,
    strategy_kind,
    unchanged,
)
from workbench.replay_rules import NO_PROGRESS_FRACTION, TERMINATIONS, ReplayWalk, check_invariants
from workbench.session import Message, MessageLike, Session, as_messages
from workbench.strategies.common import keep_last_fraction, returned_messages
from workbench.tokens import get_tokenizer

#: The walk's old names (benchmarks subclass it and parse configs as `replay` does).
_Replay = ReplayWalk
_parsed = parsed_config


def as_session(session: Session | Sequence[MessageLike]) -> Session:
    """`session` itself, or the Session of a list of messages (Messages or OpenAI dicts); TypeError
    saying what to pass for anything else (a session id, a path, a list of sessions)."""
    if isinstance(session, Session):
        return session
    if isinstance(session, (str, bytes, os.PathLike, Mapping)) or not isinstance(session, Iterable):
        raise TypeError(
            f"replay takes a Session or a list of messages, not a {type(session).__name__}; "
            "`wb.session(id)` reads a stored session by its id, `wb.load(path)` the sessions of "
            "a recording"
        )
    if isinstance(session, Sequence) and session and isinstance(session[0], Session):
        raise TypeError(
            f"replay takes one Session, not a {type(session).__name__} of sessions ({len(session)}): "
            "replay each of them (`[wb.replay(s, config) for s in sessions]`)"
        )
    return Session.from_messages(session)


def replay(
    session: Session | Sequence[MessageLike],
    config: ReplayConfig | Mapping[str, Any] | str,
    *,
    summarizer: Summarizer | None = None,
    gateway: Any = None,
    metrics: Sequence[str] | None = None,
    measure: bool = True,
) -> ReplayResult:
    """Replay `session` under `config` (a dict, TOML text or path, or a `ReplayConfig`).

    `result.metrics` holds every registered metric that needs no model, plus the ones named in
    `metrics` (model metrics such as `probe_accuracy`, which use the config's `evaluator`).
    `measure=False` leaves them out (the quality metrics read every message's text, which can cost
    more than the replay itself): for reading only the calls, or measuring later with `result.measure()`.

    `summarizer` overrides the model named in the config (any object with `.complete(...)`);
    `gateway` is the `workbench.llm` gateway to bind the configured models on, the summarizer and
    the evaluator of the model metrics (default: the process-wide one). Raises `InvariantError` if
    a strategy breaks an invariant, and `ConfigError` naming the kind if a strategy returns
    anything but a list of `Message` or a trigger answers anything but True or False.
    """
    return _walk(ReplayWalk(as_session(session), parsed_config(config), summarizer, gateway), metrics, measure)


def reference_replay(
    session: Session | Sequence[MessageLike],
    config: ReplayConfig | Mapping[str, Any] | str,
    *,
    summarizer: Summarizer | None = None,
    gateway: Any = None,
    metrics: Sequence[str] | None = None,
    measure: bool = True,
) -> ReplayResult:
    """`replay` walked call by call with none of `workbench.replay_fast`: the trigger is asked before
    every call, the context recounted message by message at every compaction, the trigger views
    built by their constructor, nothing kept from one replay to the next. Slower, and equal to
    `replay` in every record, event and metric: the reference the fast walk is held to."""
    runner = ReplayWalk(as_session(session), parse_config(config), summarizer, gateway)
    runner.fast = False
    return _walk(runner, metrics, measure)


def _walk(runner: ReplayWalk, metrics: Sequence[str] | None, measure: bool) -> ReplayResult:
    """Run a walk measuring the metrics named (by their registered kind names) and, with `measure`,
    every metric that needs no model."""
    runner.metric_names = tuple(METRICS.lookup(name).kind for name in metrics or ())
    runner.measure = measure
    return runner.run()


def compact(
    messages: Sequence[MessageLike],
    strategy: Any,
    *,
    summarizer: Summarizer | str | None = None,
    tokenizer: str = "heuristic",
    context_limit: int = DEFAULT_CONTEXT_LIMIT,
    max_output: int = DEFAULT_MAX_OUTPUT,
    severity: str | None = None,
    summarizer_options: Mapping[str, Any] | None = None,
    on_failure: str = "fatal",
    gateway: Any = None,
) -> list[Message]:
    """Run one strategy once on `messages` (Messages or OpenAI dicts) and return the new list.

    `summarizer` is a model string (default `workbench/extractive`) or a Summarizer object. The
    keyword arguments mean what the config keys of the same names mean: with `on_failure =
    "fallback"`, a compaction that fails (a summarizer error) returns the strategy's fallback instead
    of raising.
    """
    from workbench.registry import build_strategy

    if on_failure not in ON_FAILURE:
        raise ConfigError(f"on_failure must be one of {', '.join(map(repr, ON_FAILURE))}, not {on_failure!r}")
    built = build_strategy(strategy)
    model = summarizer if isinstance(summarizer, str) or summarizer is None else None
    bound: Summarizer | None = None if model is not None else summarizer  # type: ignore[assignment]
    if bound is None:
        bound = LazyModel(model or DEFAULT_SUMMARIZER, summarizer_options or {}, gateway)
    env = CompactionEnv(
        tokenizer=get_tokenizer(tokenizer),
        context_limit=context_limit,
        max_output=max_output,
        summarizer=bound,
        severity=severity,
    )
    before = as_messages(messages)
    context = Context(tuple(before))
    try:
        after = list(returned_messages(built.compact(context, env), built))
    except CompactionError:
        if on_failure == "fatal":
            raise
        fallback = getattr(built, "fallback", None)
        after = list(
            returned_messages(
                fallback(context, env) if callable(fallback) else keep_last_fraction(context), built, "fallback"
            )
        )
    check_invariants(before, after, where=built.kind)
    return after


__all__ = [
    "CALL_COLUMNS",
    "COMPACTION_COLUMNS",
    "NO_PROGRESS_FRACTION",
    "SHOWN_METRICS",
    "SKIP_SPAN",
    "TERMINATIONS",
    "CallRecord",
    "CallRecords",
    "CompactionEvent",
    "ReplayResult",
    "ReplayWalk",
    "Snapshot",
    "as_session",
    "call_column",
    "changed_compactions",
    "check_invariants",
    "compact",
    "noop_note",
    "reference_replay",
    "replay",
    "strategy_kind",
    "unchanged",
]
