"""Trigger kinds: when a replay compacts.

Every kind is a frozen dataclass whose fields are exactly its TOML parameters; state that belongs
to one replay (stat_threshold's counter snapshots) lives in a private, non-init field, so
`spec_of(trigger)` stays the parameters and a fresh build starts from a clean slate.

| kind              | parameters (defaults)                                   | reference design |
|-------------------|---------------------------------------------------------|------------------|
| `token_threshold` | `threshold` (200000; 0 disables)                        | 001              |
| `utilization`     | `ratio` (0.8), `reactive` (true)                        | 002 (goat)       |
| `stat_threshold`  | `counters` {key = delta}, `gauges` {key = value}        | 000 (gent)       |
| `pressure`        | `turns` (8), `tokens` (none)                            | 004 (ptc_runner) |
| `guard`           | `warn_threshold` (0.8), `hard_limit` (128000), `min_available` (0) | 003 (aisopod) |
| `any`, `all`      | `triggers` [spec, ...]                                  | combinators      |

Every trigger answers `should_compact(view)` before a call and hears `notify_compacted(view)` after
a compaction. `guard` also reports `severity(view)` (`none`, `warn`, `critical`), and `any` / `all`
pass on the severity of the first inner trigger that reports one, so `trigger_severity()` (and the
`guard_select` strategy) see it through combinators.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.compaction import TriggerView, trigger_severity
from workbench.errors import ConfigError
from workbench.registry import build_trigger, register_trigger

#: Counters the replay engine maintains (keys ending in `*` match by prefix, e.g. `input_tokens_for:*`).
KNOWN_COUNTERS = ("iterations", "input_tokens", "output_tokens", "input_tokens_for:<model>", "compactions")
#: Gauges the replay engine maintains.
KNOWN_GAUGES = ("context_messages", "context_steps", "context_tokens", "tokens_last_call")


# --------------------------------------------------------------------------------------------
# parameter checks (each message names the parameter and the value it got)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int_param(name: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigError(f"{name} must be an integer >= {minimum}, not {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, not {value!r}")
    return value


def _bool_param(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, not {value!r}")
    return value


# --------------------------------------------------------------------------------------------
# token_threshold (001)


@register_trigger("token_threshold")
@dataclass(frozen=True)
class TokenThreshold:
    """Fire when the previous call's prompt + completion tokens reached `threshold`.

    Reads the gauge `tokens_last_call`. `threshold = 0` switches the trigger off.
    """

    threshold: int = 200_000

    def __post_init__(self) -> None:
        object.__setattr__(self, "threshold", _int_param("threshold", self.threshold, minimum=0))

    def should_compact(self, view: TriggerView) -> bool:
        if self.threshold == 0:
            return False
        return view.gauges.get("tokens_last_call", 0) >= self.threshold

    def notify_compacted(self, view: TriggerView) -> None:
        return None


# --------------------------------------------------------------------------------------------
# utilization (002)


@register_trigger("utilization")
@dataclass(frozen=True)
class Utilization:
    """Fire when the messages fill more than `ratio` of the room left for them.

    Proactive check: message tokens (the context without its leading system messages) divided by
    `context_limit - system tokens - max_output` is above `ratio` (strictly). When that room is
    zero or negative, any message at all counts as over.

    Reactive check (only with `reactive = true`): the previous call stopped because it hit its
    output limit (`finish_reason == "length"`), or sending this context would overflow the window
    (the engine's `overflow` flag, or context + max_output > context_limit).
    """

    ratio: float = 0.8
    reactive: bool = True

    def __post_init__(self) -> None:
        if not _is_number(self.ratio) or not 0 < self.ratio <= 1:
            raise ConfigError(f"ratio must be a number in (0, 1], not {self.ratio!r}")
        object.__setattr__(self, "ratio", float(self.ratio))
        _bool_param("reactive", self.reactive)

    def utilization(self, view: TriggerView) -> float:
        """message tokens / (context_limit - system tokens - max_output); inf when there is no room."""
        room = view.context_limit - view.system_tokens - view.max_output
        used = view.message_tokens
        if room <= 0:
            return math.inf if used > 0 else 0.0
        return used / room

    def should_compact(self, view: TriggerView) -> bool:
        if self.reactive and (
            view.last_finish_reason == "length"
            or view.overflow
            or view.context_tokens + view.max_output > view.context_limit
        ):
            return True
        return self.utilization(view) > self.ratio

    def notify_compacted(self, view: TriggerView) -> None:
        return None


# --------------------------------------------------------------------------------------------
# stat_threshold (000)


def _matches(pattern: str, key: str) -> bool:
    return key.startswith(pattern[:-1]) if pattern.endswith("*") else key == pattern


def _matching(pattern: str, stats: Mapping[str, float]) -> Iterator[tuple[str, float]]:
    """(key, value) pairs of `stats` matched by `pattern`; an exact key that is absent reads as 0."""
    if pattern.endswith("*"):
        prefix = pattern[:-1]
        for key, value in stats.items():
            if key.startswith(prefix):
                yield key, value
    else:
        yield pattern, stats.get(pattern, 0)


def _threshold_table(name: str, table: Any, *, what: str) -> dict[str, float]:
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{name} must be a table of {{stat key = {what}}}, not {table!r}")
    out: dict[str, float] = {}
    for key, value in table.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{name}: stat keys must be non-empty strings, not {key!r}")
        if "*" in key[:-1]:
            raise ConfigError(f"{name}: key {key!r} may only use '*' as its last character (prefix match)")
        if not _is_number(value) or value <= 0:
            raise ConfigError(f"{name}: {key!r} needs a {what} > 0, not {value!r}")
        out[key] = value
    return out


@register_trigger("stat_threshold")
@dataclass(frozen=True)
class StatThreshold:
    """Fire when a counter grew by at least its delta since the last compaction, or a gauge reached
    its value.

    `counters = { iterations = 10, input_tokens = 100000 }` compares `current - snapshot >= delta`,
    where the snapshot is the counter's value at the last compaction (0 before the first). After
    every compaction the snapshots of all counters named by any counter threshold are renewed,
    prefix-matched keys included, so one firing threshold also restarts the others (gent's rule:
    otherwise a counter that is past its delta would fire on every call).

    `gauges = { context_tokens = 90000 }` compares `current >= value`; gauges fall by themselves
    after a compaction, so they need no snapshot.

    A key ending in `*` matches every stat key with that prefix (`"input_tokens_for:*"`). Known
    counters: iterations, input_tokens, output_tokens, input_tokens_for:<model>, compactions; known
    gauges: context_messages, context_steps, context_tokens, tokens_last_call. Other keys are
    accepted (a custom engine may publish more) and simply read as absent (0 for exact counters).
    """

    counters: Mapping[str, float] = field(default_factory=dict)
    gauges: Mapping[str, float] = field(default_factory=dict)
    _snapshots: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        counters = _threshold_table("counters", self.counters, what="delta")
        gauges = _threshold_table("gauges", self.gauges, what="value")
        if not counters and not gauges:
            raise ConfigError("stat_threshold needs at least one entry in counters or gauges "
                              f"(counters: {', '.join(KNOWN_COUNTERS)}; gauges: {', '.join(KNOWN_GAUGES)})")
        object.__setattr__(self, "counters", counters)
        object.__setattr__(self, "gauges", gauges)

    def _counter_fires(self, view: TriggerView) -> bool:
        for pattern, delta in self.counters.items():
            for key, current in _matching(pattern, view.counters):
                if current - self._snapshots.get(key, 0) >= delta:
                    return True
        return False

    def _gauge_fires(self, view: TriggerView) -> bool:
        for pattern, value in self.gauges.items():
            for _key, current in _matching(pattern, view.gauges):
                if current >= value:
                    return True
        return False

    def should_compact(self, view: TriggerView) -> bool:
        return self._counter_fires(view) or self._gauge_fires(view)

    def notify_compacted(self, view: TriggerView) -> None:
        for pattern in self.counters:
            for key, current in _matching(pattern, view.counters):
                self._snapshots[key] = current

    def snapshot(self, key: str) -> float:
        """The counter value recorded for `key` at the last compaction (0 before the first)."""
        return self._snapshots.get(key, 0)


# --------------------------------------------------------------------------------------------
# pressure (004)


@register_trigger("pressure")
@dataclass(frozen=True)
class Pressure:
    """Fire when the session has made at least `turns` calls, or the context holds at least
    `tokens` tokens.

    Like ptc_runner, which rebuilds its trimmed input on every turn once under pressure, this fires
    at every call past the threshold; compacting does not reset it. `turns = 0` (or none) switches
    the turn condition off, `tokens` is off unless set; at least one must be on.
    """

    turns: int | None = 8
    tokens: int | None = None

    def __post_init__(self) -> None:
        turns = None if self.turns is None else _int_param("turns", self.turns, minimum=0)
        tokens = None if self.tokens is None else _int_param("tokens", self.tokens, minimum=0)
        if not turns and not tokens:
            raise ConfigError("pressure needs turns >= 1 or tokens >= 1 (both are off)")
        object.__setattr__(self, "turns", turns)
        object.__setattr__(self, "tokens", tokens)

    def should_compact(self, view: TriggerView) -> bool:
        if self.turns and view.call_index >= self.turns:
            return True
        return bool(self.tokens) and view.context_tokens >= self.tokens

    def notify_compacted(self, view: TriggerView) -> None:
        return None


# --------------------------------------------------------------------------------------------
# guard (003)


@register_trigger("guard")
@dataclass(frozen=True)
class Guard:
    """A context-window guard with severities, measured on the context's tokens.

    - `critical`: tokens >= hard_limit, or fewer than `min_available` tokens are left under it;
    - `warn`: tokens >= warn_threshold * hard_limit;
    - `none`: otherwise.

    Fires at `warn` and `critical`; `guard_select` picks its strategy by the severity.
    """

    warn_threshold: float = 0.8
    hard_limit: int = 128_000
    min_available: int = 0

    def __post_init__(self) -> None:
        if not _is_number(self.warn_threshold) or not 0 < self.warn_threshold <= 1:
            raise ConfigError(f"warn_threshold must be a number in (0, 1], not {self.warn_threshold!r}")
        object.__setattr__(self, "warn_threshold", float(self.warn_threshold))
        hard_limit = _int_param("hard_limit", self.hard_limit, minimum=1)
        min_available = _int_param("min_available", self.min_available, minimum=0)
        if min_available >= hard_limit:
            raise ConfigError(f"min_available ({min_available}) must be below hard_limit ({hard_limit}), "
                              "or the guard is always critical")
        object.__setattr__(self, "hard_limit", hard_limit)
        object.__setattr__(self, "min_available", min_available)

    def severity(self, view: TriggerView) -> str:
        tokens = view.context_tokens
        if tokens >= self.hard_limit or self.hard_limit - tokens < self.min_available:
            return "critical"
        if tokens >= self.warn_threshold * self.hard_limit:
            return "warn"
        return "none"

    def should_compact(self, view: TriggerView) -> bool:
        return self.severity(view) != "none"

    def notify_compacted(self, view: TriggerView) -> None:
        return None


# --------------------------------------------------------------------------------------------
# any / all


def _build_inner(kind: str, triggers: Any) -> tuple[Any, ...]:
    if isinstance(triggers, (str, Mapping)) or not isinstance(triggers, Sequence):
        raise ConfigError(f"triggers must be a list of trigger specs, not {triggers!r}")
    if not triggers:
        raise ConfigError(f"{kind} needs at least one trigger in triggers")
    built = []
    for index, spec in enumerate(triggers):
        try:
            built.append(build_trigger(spec))
        except ConfigError as exc:
            raise ConfigError(f"triggers[{index}]: {exc}") from exc
    return tuple(built)


@dataclass(frozen=True)
class _Combinator:
    triggers: tuple[Any, ...]

    @classmethod
    def from_params(cls, **params: Any) -> _Combinator:
        return cls(**params)

    def __post_init__(self) -> None:
        object.__setattr__(self, "triggers", _build_inner(self.kind, self.triggers))  # type: ignore[attr-defined]

    def severity(self, view: TriggerView) -> str | None:
        """The severity of the first inner trigger that reports one (None when none does)."""
        for trigger in self.triggers:
            found = trigger_severity(trigger, view)
            if found is not None:
                return found
        return None

    def notify_compacted(self, view: TriggerView) -> None:
        for trigger in self.triggers:
            trigger.notify_compacted(view)


@register_trigger("any")
@dataclass(frozen=True)
class AnyOf(_Combinator):
    """Fire when at least one of `triggers` fires; every inner trigger hears about compactions."""

    def should_compact(self, view: TriggerView) -> bool:
        return any(t.should_compact(view) for t in self.triggers)


@register_trigger("all")
@dataclass(frozen=True)
class AllOf(_Combinator):
    """Fire when every one of `triggers` fires; every inner trigger hears about compactions."""

    def should_compact(self, view: TriggerView) -> bool:
        return all(t.should_compact(view) for t in self.triggers)


__all__ = ["AllOf", "AnyOf", "Guard", "KNOWN_COUNTERS", "KNOWN_GAUGES", "Pressure", "StatThreshold",
           "TokenThreshold", "Utilization"]
