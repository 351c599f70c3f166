"""Strategy kinds made of other strategies: `guard_select` (003), `pipeline` and `step_gate`.

Nested strategies are given as specs (`{"kind": ..., **params}`, a kind name, or an already
built strategy); their parameters are declared `StrategySpec`, so the registry builds them when the
composite is built. This module imports no other strategy module, and `spec_of` of a composite
spells out every nested parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.compaction import SEVERITIES, CompactionEnv, Context
from workbench.errors import CompactionError
from workbench.registry import StrategySpec, param, register_strategy
from workbench.session import Message
from workbench.strategies.common import (
    StepList,
    body_steps,
    context_of,
    keep_last_fraction,
    keep_summaries_in,
    may_summarize,
    returned_messages,
)

GUARD_WARN_RATIO = 0.8
GUARD_CRITICAL_RATIO = 1.0
SLOTS = ("critical", "warn", "oversized", "gentle")


def severity_of(context: Context, env: CompactionEnv) -> str:
    """The guard severity: the trigger's when it reported one, else tokens vs the context window."""
    if env.severity in SEVERITIES:
        return str(env.severity)
    if env.context_limit <= 0:
        return "none"
    ratio = env.tokens(context.messages) / env.context_limit
    if ratio >= GUARD_CRITICAL_RATIO:
        return "critical"
    if ratio >= GUARD_WARN_RATIO:
        return "warn"
    return "none"


@register_strategy("guard_select")
@dataclass(frozen=True)
class GuardSelect:
    """Pick a strategy by the context-window guard's severity (003's `select_strategy`).

    critical -> `critical` (default hard_clear keeping 10 messages); warn -> `warn` (default
    summarize_split); otherwise, if some tool result is longer than `oversized_chars` characters
    -> `oversized` (default tool_result_truncation); otherwise -> `gentle` (default
    adaptive_chunking). The severity is the one the trigger reported (`env.severity`, set by the
    `guard` trigger); without one it is computed from the context's tokens against
    `env.context_limit` with the guard's defaults (warn at 80 %, critical at 100 %).
    """

    critical: StrategySpec = param({"kind": "hard_clear", "keep_recent": 10}, doc="strategy at critical severity")
    warn: StrategySpec = param({"kind": "summarize_split", "preserve": 0.4}, doc="strategy at warn severity")
    oversized: StrategySpec = param(
        {"kind": "tool_result_truncation", "max_chars": 1000},
        doc="strategy when a tool result is longer than oversized_chars",
    )
    gentle: StrategySpec = param({"kind": "adaptive_chunking"}, doc="strategy otherwise")
    oversized_chars: int = param(4000, doc="characters from which a tool result counts as oversized", min=0)

    @property
    def summarizes(self) -> bool:
        return any(may_summarize(getattr(self, slot)) for slot in ("critical", "warn", "oversized", "gentle"))

    def has_oversized(self, context: Context) -> bool:
        return any(m.is_observation and len(m.text) > self.oversized_chars for m in context.body)

    def select(self, context: Context, env: CompactionEnv) -> tuple[str, Any]:
        """(slot name, strategy) for this context."""
        severity = severity_of(context, env)
        if severity == "critical":
            slot = "critical"
        elif severity == "warn":
            slot = "warn"
        elif self.has_oversized(context):
            slot = "oversized"
        else:
            slot = "gentle"
        return slot, getattr(self, slot)

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        strategy = self.select(context, env)[1]
        return returned_messages(strategy.compact(context, env), strategy)

    def fallback(self, context: Context, env: CompactionEnv) -> list[Message]:
        """The chosen strategy's own fallback, else the default (keep the last 40 %).

        Summaries recorded by the failed attempt are forgotten: they are not in the result.
        """
        env.summaries.clear()
        strategy = self.select(context, env)[1]
        own = getattr(strategy, "fallback", None)
        if callable(own):
            return returned_messages(own(context, env), strategy, "fallback")
        return keep_last_fraction(context)


@register_strategy("pipeline")
@dataclass(frozen=True)
class Pipeline:
    """Run strategies in order, each on the previous one's result.

    Summarizer calls and summaries of every step accumulate in the same `env`; a summary a later
    step dropped is forgotten, so the compaction reports only summaries in the result. An empty
    pipeline changes nothing. `fallback` starts afresh (summaries recorded by the failed attempt
    are forgotten) and runs the steps again, replacing each failing step by its own fallback (or
    the default one).
    """

    steps: tuple[StrategySpec, ...] = param((), doc="the strategies run in order, as a list of strategy specs")

    @property
    def summarizes(self) -> bool:
        return any(map(may_summarize, self.steps))

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        messages = list(context.messages)
        for index, step in enumerate(self.steps):
            messages = returned_messages(step.compact(context_of(messages) if index else context, env), step)
        keep_summaries_in(env, messages)
        return messages

    def fallback(self, context: Context, env: CompactionEnv) -> list[Message]:
        env.summaries.clear()
        messages = list(context.messages)
        for step in self.steps:
            current = context_of(messages)
            try:
                messages = returned_messages(step.compact(current, env), step)
            except CompactionError:
                own = getattr(step, "fallback", None)
                messages = (
                    returned_messages(own(current, env), step, "fallback")
                    if callable(own)
                    else keep_last_fraction(current)
                )
        keep_summaries_in(env, messages)
        return messages


@register_strategy("step_gate")
@dataclass(frozen=True)
class StepGate:
    """Run `strategy` only once the context holds at least `min_steps` steps; otherwise change nothing.

    Inside a pipeline whose trigger fires at every call, one config then compacts at two paces:
    The Complexity Trap's hybrid masks observations at every turn and summarizes only when the
    history reaches N turns (a step is one turn: an action with its observation, or a user message).
    Steps are counted as the `context_steps` gauge counts them: the leading system messages included.
    """

    strategy: StrategySpec = param(
        {"kind": "summarize_progressive", "keep_recent": 10},
        doc="the strategy run once the context is long enough, as a strategy spec",
    )
    min_steps: int = param(2, doc="context steps (system messages included) from which the strategy runs", min=1)

    @property
    def summarizes(self) -> bool:
        return may_summarize(self.strategy)

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        known = body_steps(context)
        if len(context.system) + len(known.steps) < self.min_steps:
            return StepList(context.messages, len(context.system), known)
        return returned_messages(self.strategy.compact(context, env), self.strategy)

    def fallback(self, context: Context, env: CompactionEnv) -> list[Message]:
        """The inner strategy's own fallback (the context is long enough, or compact changed nothing)."""
        env.summaries.clear()
        own = getattr(self.strategy, "fallback", None)
        if callable(own):
            return returned_messages(own(context, env), self.strategy, "fallback")
        return keep_last_fraction(context)


__all__ = ["GuardSelect", "Pipeline", "StepGate", "severity_of"]
