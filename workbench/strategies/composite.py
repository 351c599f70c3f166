"""Strategy kinds made of other strategies: `guard_select` (003) and `pipeline`.

Nested strategies are given as specs (`{"kind": ..., **params}`, a kind name, or an already
built strategy) and built through `workbench.registry.build_strategy`, so this module imports no
other strategy module and `spec_of` of a composite spells out every nested parameter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.compaction import SEVERITIES, CompactionEnv, Context
from workbench.errors import CompactionError, ConfigError
from workbench.registry import build_strategy, register_strategy
from workbench.session import Message
from workbench.strategies.common import keep_last_fraction

GUARD_WARN_RATIO = 0.8
GUARD_CRITICAL_RATIO = 1.0
SLOTS = ("critical", "warn", "oversized", "gentle")


def _build_nested(owner: str, slot: str, spec: Any) -> Any:
    if isinstance(spec, Mapping) or isinstance(spec, str):
        try:
            return build_strategy(spec)
        except ConfigError as exc:
            raise ConfigError(f"{slot}: {exc}") from exc
    if hasattr(spec, "compact"):
        return spec
    raise ConfigError(f"{slot} must be a strategy spec (a table with a 'kind'), not {type(spec).__name__}")


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

    critical: Any = field(default_factory=lambda: {"kind": "hard_clear", "keep_recent": 10})
    warn: Any = field(default_factory=lambda: {"kind": "summarize_split", "preserve": 0.4})
    oversized: Any = field(default_factory=lambda: {"kind": "tool_result_truncation", "max_chars": 1000})
    gentle: Any = field(default_factory=lambda: {"kind": "adaptive_chunking"})
    oversized_chars: int = 4000

    def __post_init__(self) -> None:
        for slot in SLOTS:
            object.__setattr__(self, slot, _build_nested("guard_select", slot, getattr(self, slot)))
        if isinstance(self.oversized_chars, float) and self.oversized_chars.is_integer():
            object.__setattr__(self, "oversized_chars", int(self.oversized_chars))
        if isinstance(self.oversized_chars, bool) or not isinstance(self.oversized_chars, int) \
                or self.oversized_chars < 0:
            raise ConfigError(f"oversized_chars must be a whole number >= 0, not {self.oversized_chars!r}")

    @classmethod
    def from_params(cls, **params: Any) -> GuardSelect:
        """Build from TOML params: nested specs become strategies (in `__post_init__`)."""
        return cls(**params)

    def has_oversized(self, context: Context) -> bool:
        return any(m.role == "tool" and len(m.text) > self.oversized_chars for m in context.body)

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
        return self.select(context, env)[1].compact(context, env)

    def fallback(self, context: Context, env: CompactionEnv) -> list[Message]:
        """The chosen strategy's own fallback, else the default (keep the last 40 %)."""
        strategy = self.select(context, env)[1]
        own = getattr(strategy, "fallback", None)
        return own(context, env) if callable(own) else keep_last_fraction(context)


@register_strategy("pipeline")
@dataclass(frozen=True)
class Pipeline:
    """Run strategies in order, each on the previous one's result.

    Summarizer calls and summaries of every step accumulate in the same `env`. An empty pipeline
    changes nothing. `fallback` runs the steps again, replacing each failing step by its own
    fallback (or the default one).
    """

    steps: Sequence[Any] = ()

    def __post_init__(self) -> None:
        if isinstance(self.steps, (str, Mapping)) or not isinstance(self.steps, Sequence):
            raise ConfigError("steps must be a list of strategy specs")
        object.__setattr__(self, "steps", tuple(
            _build_nested("pipeline", f"steps[{i}]", spec) for i, spec in enumerate(self.steps)))

    @classmethod
    def from_params(cls, **params: Any) -> Pipeline:
        return cls(**params)

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        messages = list(context.messages)
        for step in self.steps:
            messages = step.compact(Context(tuple(messages)), env)
        return messages

    def fallback(self, context: Context, env: CompactionEnv) -> list[Message]:
        messages = list(context.messages)
        for step in self.steps:
            current = Context(tuple(messages))
            try:
                messages = step.compact(current, env)
            except CompactionError:
                own = getattr(step, "fallback", None)
                messages = own(current, env) if callable(own) else keep_last_fraction(current)
        return messages


__all__ = ["GuardSelect", "Pipeline", "severity_of"]
