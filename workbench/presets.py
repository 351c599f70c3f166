"""Named replay configurations: the baselines and one per reference design, at its defaults.

A preset is a config dict holding `name`, `trigger` and `strategy`; the simulated window
(`context_limit`, `max_output`), the tokenizer, the summarizer and `calibration` are left to the
caller, who merges them in (`preset("goat-split-summary") | {"context_limit": 200_000}`). The
design presets keep each design's own numbers, so they are absolute: the 001 agent's
`token_threshold` of 200,000 tokens only fires in a window larger than that.

One rule for a preset's number that cannot fire in the window in use (`fit_to_window`, applied
wherever a config is resolved from a preset: `parse_config` and experiment specs): a token
threshold (`token_threshold.threshold`, the guard's warn point `warn_threshold x hard_limit`) at or
above the most a context may hold, `context_limit - max_output`, is scaled down to fire at
`FIRING_SHARE` (75 %) of that, and the config's `notes` say so, naming both numbers. A threshold the
caller set is theirs and never scaled.

| preset                     | trigger                                    | strategy                          |
|----------------------------|--------------------------------------------|-----------------------------------|
| `as-recorded`              | recorded                                   | recorded (the agent's own)        |
| `no-compaction`            | token_threshold, threshold 0 (never fires) | —                                 |
| `observation-masking`      | pressure, every call                       | observation_masking, M = 10       |
| `gent-sliding-window`      | stat_threshold: 10 iterations / 20 steps   | sliding_window, 10                |
| `gent-progressive-summary` | stat_threshold: 10 iterations / 20 steps   | summarize_progressive, keep 0     |
| `agent001-full-summary`    | token_threshold, 200,000                   | summarize_full                    |
| `goat-split-summary`       | utilization, 0.8, reactive                 | summarize_split, preserve 0.4     |
| `aisopod-guard`            | guard, warn 0.8 of 128,000                 | guard_select (its defaults)       |
| `ptc-runner-trim`          | pressure, 8 turns                          | trim, last 3 turns + the task     |
| `inspect-auto`             | inspect_threshold, 0.9 of the window       | inspect_summary                   |
| `inspect-edit`             | inspect_threshold, 0.9 of the window       | inspect_edit, keep 3 tool uses    |
| `inspect-trim`             | inspect_threshold, 0.9 of the window       | inspect_trim, preserve 0.8        |

The `inspect-*` presets are Inspect AI's `CompactionAuto`, `CompactionEdit` and `CompactionTrim` at
their defaults (`workbench.strategies.inspect_kinds`); `CompactionAuto` compacts natively where the
provider can, which no replay can reproduce, and otherwise summarizes, as `inspect-auto` does.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from workbench.compaction import DEFAULT_CONTEXT_LIMIT, DEFAULT_MAX_OUTPUT
from workbench.errors import ConfigError, did_you_mean

#: The share of the usable window (context_limit - max_output) at which a preset threshold that
#: cannot fire in the window is made to fire: below 1 so that the step appended after the last
#: measured call (a large tool result) still fits before the compaction runs.
FIRING_SHARE = 0.75

#: gent's documented example trigger: every 10 iterations, or a scratchpad of 20 (steps here).
_GENT_TRIGGER = {"kind": "stat_threshold", "counters": {"iterations": 10}, "gauges": {"context_steps": 20}}
#: Inspect AI's default compaction threshold: 90 % of the model's context window.
_INSPECT_THRESHOLD = 0.9

_PRESETS: dict[str, dict[str, Any]] = {
    "as-recorded": {
        "trigger": {"kind": "recorded"},
        "strategy": {"kind": "recorded"},
    },
    "no-compaction": {
        "trigger": {"kind": "token_threshold", "threshold": 0},
        "strategy": {"kind": "sliding_window", "window": 1},
    },
    "observation-masking": {
        "trigger": {"kind": "pressure", "turns": 1},
        "strategy": {"kind": "observation_masking", "keep_recent": 10},
    },
    "gent-sliding-window": {
        "trigger": _GENT_TRIGGER,
        "strategy": {"kind": "sliding_window", "window": 10},
    },
    "gent-progressive-summary": {
        "trigger": _GENT_TRIGGER,
        "strategy": {"kind": "summarize_progressive", "keep_recent": 0},
    },
    "agent001-full-summary": {
        "trigger": {"kind": "token_threshold", "threshold": 200_000},
        "strategy": {"kind": "summarize_full"},
    },
    "goat-split-summary": {
        "trigger": {"kind": "utilization", "ratio": 0.8, "reactive": True},
        "strategy": {"kind": "summarize_split", "preserve": 0.4},
    },
    "aisopod-guard": {
        "trigger": {"kind": "guard", "warn_threshold": 0.8, "hard_limit": 128_000},
        "strategy": {"kind": "guard_select"},
    },
    "ptc-runner-trim": {
        "trigger": {"kind": "pressure", "turns": 8},
        "strategy": {"kind": "trim", "keep_recent_turns": 3, "keep_initial_user": True},
    },
    "inspect-auto": {
        "trigger": {"kind": "inspect_threshold", "threshold": _INSPECT_THRESHOLD},
        "strategy": {"kind": "inspect_summary", "threshold": _INSPECT_THRESHOLD},
    },
    "inspect-edit": {
        "trigger": {"kind": "inspect_threshold", "threshold": _INSPECT_THRESHOLD},
        "strategy": {"kind": "inspect_edit", "keep_tool_uses": 3, "threshold": _INSPECT_THRESHOLD},
    },
    "inspect-trim": {
        "trigger": {"kind": "inspect_threshold", "threshold": _INSPECT_THRESHOLD},
        "strategy": {"kind": "inspect_trim", "preserve": 0.8, "threshold": _INSPECT_THRESHOLD},
    },
}


def presets() -> dict[str, dict[str, Any]]:
    """Every preset config by name (fresh copies: edit them freely)."""
    return {name: preset(name) for name in _PRESETS}


def preset(name: str) -> dict[str, Any]:
    """The config dict of preset `name` (a fresh copy with its `name` set)."""
    spec = _PRESETS.get(name)
    if spec is None:
        raise ConfigError(
            f"unknown preset {name!r}; valid presets: {', '.join(_PRESETS)}{did_you_mean([str(name)], _PRESETS)}"
        )
    return {"name": name, **copy.deepcopy(spec)}


def fit_to_window(name: str, config: Mapping[str, Any], *, chosen: Iterable[str] = ()) -> dict[str, Any]:
    """`config` (preset `name` with the caller's keys merged in) with the preset's token threshold
    scaled to the window when it cannot fire there, and a note in `notes` naming both numbers.

    The window is the config's `context_limit` less its `max_output` (the library defaults when
    absent). `chosen` names the trigger parameters the caller set: those are left as they are, as
    is a trigger the caller replaced by another kind.
    """
    out = copy.deepcopy(dict(config))
    own = _PRESETS.get(name, {}).get("trigger", {})
    trigger = out.get("trigger")
    if not isinstance(trigger, Mapping) or trigger.get("kind") != own.get("kind"):
        return out
    limit, max_output = out.get("context_limit", DEFAULT_CONTEXT_LIMIT), out.get("max_output", DEFAULT_MAX_OUTPUT)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (limit, max_output)) or max_output >= limit:
        return out  # the config's validation names the bad value
    usable = limit - max_output
    target = int(FIRING_SHARE * usable)
    chosen = set(chosen)
    window = (
        f"a {limit:,}-token window holds at most {usable:,} tokens of context "
        f"({limit:,} - {max_output:,} kept for the reply)"
    )
    note = None
    if own.get("kind") == "token_threshold" and "threshold" not in chosen:
        threshold = trigger.get("threshold", own.get("threshold"))
        if isinstance(threshold, int) and threshold >= usable:
            out["trigger"] = {**trigger, "threshold": target}
            note = (
                f"preset {name}: its token_threshold of {threshold:,} tokens cannot fire: {window}; scaled to "
                f"{target:,} ({FIRING_SHARE:.0%} of {usable:,}); set trigger.threshold to choose another"
            )
    elif own.get("kind") == "guard" and "hard_limit" not in chosen:
        hard_limit = trigger.get("hard_limit", own.get("hard_limit"))
        warn = trigger.get("warn_threshold", own.get("warn_threshold", 0.8))
        if isinstance(hard_limit, int) and isinstance(warn, (int, float)) and warn > 0 and warn * hard_limit >= usable:
            scaled = round(target / warn)
            out["trigger"] = {**trigger, "hard_limit": scaled}
            note = (
                f"preset {name}: its guard warns at {round(warn * hard_limit):,} tokens ({warn:g} x hard_limit "
                f"{hard_limit:,}), which cannot fire: {window}; hard_limit scaled to {scaled:,} (warns at "
                f"{target:,}, {FIRING_SHARE:.0%} of {usable:,}); set trigger.hard_limit to choose another"
            )
    if note is not None:
        out["notes"] = [*out.get("notes", ()), note]
    return out


__all__ = ["FIRING_SHARE", "fit_to_window", "preset", "presets"]
