"""Named replay configurations: the baselines and one per reference design, at its defaults.

A preset is a config dict holding `name`, `trigger` and `strategy`; the simulated window
(`context_limit`, `max_output`), the tokenizer, the summarizer and `calibration` are left to the
caller, who merges them in (`preset("goat-split-summary") | {"context_limit": 200_000}`). The
design presets keep each design's own numbers, so they are absolute: the 001 agent's
`token_threshold` of 200,000 tokens only fires in a window larger than that.

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
"""

from __future__ import annotations

import copy
from typing import Any

from workbench.errors import ConfigError, did_you_mean

#: gent's documented example trigger: every 10 iterations, or a scratchpad of 20 (steps here).
_GENT_TRIGGER = {"kind": "stat_threshold", "counters": {"iterations": 10}, "gauges": {"context_steps": 20}}

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
}


def presets() -> dict[str, dict[str, Any]]:
    """Every preset config by name (fresh copies: edit them freely)."""
    return {name: preset(name) for name in _PRESETS}


def preset(name: str) -> dict[str, Any]:
    """The config dict of preset `name` (a fresh copy with its `name` set)."""
    spec = _PRESETS.get(name)
    if spec is None:
        raise ConfigError(f"unknown preset {name!r}; valid presets: {', '.join(_PRESETS)}"
                          f"{did_you_mean([str(name)], _PRESETS)}")
    return {"name": name, **copy.deepcopy(spec)}


__all__ = ["preset", "presets"]
