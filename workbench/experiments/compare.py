"""Paired comparisons: does configuration B beat A, metric by metric, with uncertainty?

Cells are aligned by session (and repeat), so every session is its own control. The repeats of a
session are averaged before anything is counted or tested: they replay the same session, so they are
not independent evidence, and a deterministic config repeated four times would otherwise look like
four times the sessions (p 0.0005 from 3 sessions). For each metric the per-session deltas B − A are
read in the metric's direction (higher or lower is better): the counts of sessions B improved /
regressed, the mean delta with a bootstrap confidence interval, and a paired sign-flip permutation
test's p-value. "B better" is said only when both agree: the interval excludes zero and
p < 1 − confidence. When only the interval does, the verdict adds "not significant": with few
sessions the percentile bootstrap is too narrow, and the exact test says so (with n sessions that
differ, its p-value cannot go below 2/2^n, 0.25 for 3).

    cmp = wb.compare("run-a", "run-b")                       # same configs in two runs
    cmp = wb.compare("run-a", configs=("window-5", "window-20"))   # two configs of one run
    cmp.to_frame()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from workbench.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

Direction = Literal["higher", "lower", "none"]
KEY_COLUMNS = ("run_id", "session_id", "dataset", "config", "repeat", "termination", "error", "duration_s")


def _metric_kind(name: str) -> Any:
    """The registered metric class named `name`, or None (unknown names, or no metric family)."""
    try:
        from workbench import registry

        return registry.kinds("metric").get(name)
    except Exception:  # the registry without a metric family: nothing known
        return None


def declared_unit(name: str) -> str | None:
    """The unit a registered metric declares (`register_metric(unit=...)`: tokens, usd, calls,
    share...); None for a name the registry does not know."""
    kind = _metric_kind(name)
    return None if kind is None else str(getattr(kind, "unit", "") or "")


def metric_direction(name: str) -> Direction:
    """The direction a registered metric declares ("none" for unknown names and counts)."""
    kind = _metric_kind(name)
    if kind is None:
        return "none"
    for attribute in ("direction", "better"):
        value = getattr(kind, attribute, None)
        if value in ("higher", "lower", "none"):
            return value
    info = getattr(kind, "metric_info", None) or getattr(kind, "__metric__", None)
    value = getattr(info, "direction", None) if info is not None else None
    return value if value in ("higher", "lower") else "none"


#: Why results of replays that stopped early mislead, said wherever they are shown beside others.
STOPPED_EARLY = ("Their totals cover only the calls made, so costs read low there; compare configs that complete, "
                 "or widen the window.")

@dataclass(frozen=True)
class MetricComparison:
    """One metric of a paired comparison; deltas are B − A, `improved` counts sessions where B is better."""

    metric: str
    direction: Direction
    pairs: int
    mean_a: float
    mean_b: float
    mean_delta: float
    ci_low: float
    ci_high: float
    p_value: float
    improved: int
    regressed: int
    unchanged: int
    alpha: float = 0.05  # 1 - the confidence of the interval: the level the p-value must be under

    @property
    def verdict(self) -> str:
        if self.pairs == 0:
            return "no pairs"
        if self.ci_low <= 0 <= self.ci_high:
            return "no clear change" if self.direction == "none" else "no clear difference"
        b_higher = self.ci_low > 0
        if self.direction == "none":
            label = "changed"
        else:
            label = "B better" if b_higher == (self.direction == "higher") else "B worse"
        return label if self.p_value < self.alpha else f"{label}, not significant"

    @property
    def relative_delta(self) -> float | None:
        return self.mean_delta / abs(self.mean_a) if self.mean_a else None


@dataclass(frozen=True)
class Comparison:
    """A paired comparison of B against A (labels say which run/config each side is)."""

    a: str
    b: str
    metrics: tuple[MetricComparison, ...]
    confidence: float = 0.95
    sessions: int = 0
    #: Pairs of cells (sessions x configs x repeats paired; as `sessions` when each session pairs once).
    cells: int = 0
    #: What the counts and the test take as independent: the pairs of cells left once the repeats of each
    #: are averaged (one per session, or per session and config when two runs pair config by config).
    units: int = 0
    unmatched: Mapping[str, int] = field(default_factory=dict)
    #: Set when either side's summaries came from the offline extractive baseline (`run.summaries_note`).
    note: str | None = None
    #: Per side (label), how many of the paired cells stopped early (`termination` other than completed).
    stopped: Mapping[str, int] = field(default_factory=dict)

    @property
    def stopped_note(self) -> str | None:
        """Said with the verdicts when a side's replays stopped early in some pairs: their totals cover fewer
        calls, so a cost reads low (better) for a reason that is no merit."""
        sides = [f"{label} in {count} of {self.cells}" for label, count in self.stopped.items() if count]
        if not sides:
            return None
        return f"Replays stopped early (e.g. context_overflow): {' and '.join(sides)} paired cells. {STOPPED_EARLY}"

    @property
    def pairing(self) -> str:
        """What was paired, in words for the output: the sessions, and whether their repeats were averaged
        (the counts and the test are over these units, never over repeats)."""
        if self.cells == self.units:  # one cell a unit: no repeats were averaged
            return (f"{self.sessions} paired session(s)" if self.cells == self.sessions
                    else f"{self.cells} paired cells ({self.sessions} session(s))")
        units = (f"{self.sessions} paired session(s)" if self.units == self.sessions
                 else f"{self.units} paired session × config units ({self.sessions} session(s))")
        return f"{units}, each the mean of its repeats ({self.cells} paired cells)"

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        rows = [{"metric": m.metric, "direction": m.direction, "pairs": m.pairs, "A": m.mean_a, "B": m.mean_b,
                 "delta": m.mean_delta, "ci_low": m.ci_low, "ci_high": m.ci_high, "p_value": m.p_value,
                 "improved": m.improved, "regressed": m.regressed, "unchanged": m.unchanged, "verdict": m.verdict}
                for m in self.metrics]
        return pd.DataFrame(rows)

    def metric(self, name: str) -> MetricComparison:
        for item in self.metrics:
            if item.metric == name:
                return item
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "confidence": self.confidence, "sessions": self.sessions, "cells": self.cells,
                "units": self.units, "pairing": self.pairing, "unmatched": dict(self.unmatched), "note": self.note,
                "stopped": dict(self.stopped), "stopped_note": self.stopped_note,
                "metrics": [{**vars(m), "verdict": m.verdict} for m in self.metrics]}


def _bootstrap_ci(deltas: np.ndarray, confidence: float, resamples: int, rng: np.random.Generator
                  ) -> tuple[float, float]:
    if len(deltas) == 1 or np.all(deltas == deltas[0]):
        return float(deltas.mean()), float(deltas.mean())
    samples = rng.integers(0, len(deltas), size=(resamples, len(deltas)))
    means = deltas[samples].mean(axis=1)
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def _sign_flip_p(deltas: np.ndarray, resamples: int, rng: np.random.Generator) -> float:
    """Two-sided p-value of a paired sign-flip permutation test (exact up to 12 non-zero pairs)."""
    nonzero = deltas[deltas != 0]
    if len(nonzero) == 0:
        return 1.0
    observed = abs(nonzero.mean()) - 1e-12
    n = len(nonzero)
    if n <= 12:
        signs = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1) * 2 - 1
        return float(np.mean(np.abs((signs * nonzero).mean(axis=1)) >= observed))
    signs = rng.choice(np.array([-1, 1]), size=(resamples, n))
    extreme = int(np.sum(np.abs((signs * nonzero).mean(axis=1)) >= observed))
    return (extreme + 1) / (resamples + 1)


def _is_number_column(column: pd.Series) -> bool:
    import pandas as pd

    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)


def compare_frames(a: pd.DataFrame, b: pd.DataFrame, *, a_label: str = "A", b_label: str = "B",
                   metrics: Sequence[str] | None = None, align: Sequence[str] = ("session_id", "repeat"),
                   confidence: float = 0.95, resamples: int = 4000, seed: int = 0) -> Comparison:
    """Compare two result frames (one row per cell) paired on the `align` columns.

    The paired cells of a unit (the `align` columns but `repeat`: a session, or a session and config)
    are averaged first, so the counts, the interval and the test see one delta per unit, never one per
    repeat."""
    import pandas as pd

    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be within (0, 1), not {confidence}")
    align = [c for c in align if c in a.columns and c in b.columns]
    if not align:
        raise ConfigError("the frames share no column to pair cells on (session_id, repeat)")
    candidates = metrics or [c for c in a.columns if c in b.columns and c not in KEY_COLUMNS]
    numeric = [c for c in candidates if c in a.columns and c in b.columns and _is_number_column(a[c])
               and _is_number_column(b[c])]
    if metrics:
        missing = [m for m in metrics if m not in numeric]
        if missing:
            raise ConfigError(f"no numeric metric {', '.join(map(repr, missing))} in both sides; "
                              f"available: {', '.join(numeric) or '(none)'}")
    ends = ["termination"] if "termination" in a.columns and "termination" in b.columns else []
    merged = a[[*align, *numeric, *ends]].merge(b[[*align, *numeric, *ends]], on=align, suffixes=("__a", "__b"),
                                                how="inner")
    stopped = {label: int((merged[f"termination__{side}"] != "completed").sum())
               for label, side in ((a_label, "a"), (b_label, "b"))} if ends else {}
    unmatched = {a_label: len(a) - len(merged), b_label: len(b) - len(merged)}
    unit = [c for c in align if c != "repeat"] or align
    rng = np.random.default_rng(seed)
    items = []
    for name in numeric:
        columns = [f"{name}__a", f"{name}__b"]
        values = merged[columns].apply(pd.to_numeric, errors="coerce")
        pair = pd.concat([merged[unit], values], axis=1).dropna(subset=columns)
        pair = pair.groupby(unit, sort=False)[columns].mean()
        items.append(_compare_metric(name, pair[columns[0]].to_numpy(dtype=float),
                                     pair[columns[1]].to_numpy(dtype=float), confidence, resamples, rng))
    units = int(merged[unit].drop_duplicates().shape[0])
    return Comparison(a=a_label, b=b_label, metrics=tuple(items), confidence=confidence,
                      sessions=int(merged["session_id"].nunique()) if "session_id" in merged else units,
                      cells=len(merged), units=units, unmatched=unmatched, stopped=stopped)


def _compare_metric(name: str, values_a: np.ndarray, values_b: np.ndarray, confidence: float, resamples: int,
                    rng: np.random.Generator) -> MetricComparison:
    """One metric over paired units (the means of their repeats): counts, bootstrap interval, sign-flip test."""
    direction = metric_direction(name)
    if len(values_a) == 0:
        return MetricComparison(name, direction, 0, float("nan"), float("nan"), float("nan"), float("nan"),
                                float("nan"), 1.0, 0, 0, 0, alpha=1 - confidence)
    deltas = values_b - values_a
    low, high = _bootstrap_ci(deltas, confidence, resamples, rng)
    tolerance = 1e-12 * np.maximum(1.0, np.abs(values_a))
    up, down = deltas > tolerance, deltas < -tolerance
    better, worse = (up, down) if direction != "lower" else (down, up)
    if direction == "none":
        better = worse = np.zeros_like(up)
    return MetricComparison(
        metric=name, direction=direction, pairs=len(deltas), mean_a=float(values_a.mean()),
        mean_b=float(values_b.mean()), mean_delta=float(deltas.mean()), ci_low=low, ci_high=high,
        p_value=_sign_flip_p(deltas, resamples, rng), improved=int(better.sum()), regressed=int(worse.sum()),
        unchanged=int(len(deltas) - up.sum() - down.sum()), alpha=1 - confidence)


def compare(run_a: str, run_b: str | None = None, *, configs: Sequence[str] | None = None, db: str | None = None,
            metrics: Sequence[str] | None = None, confidence: float = 0.95, resamples: int = 4000,
            seed: int = 0) -> Comparison:
    """Paired comparison of two runs, or of two configs (`configs=(A, B)`) of one or two runs.

    Two runs without `configs` pair cells on session, config and repeat (the configs both have).
    The comparison's `note` says so when either side's summaries came from the offline extractive baseline.
    """
    comparison = _compare(run_a, run_b, configs=configs, db=db, metrics=metrics, confidence=confidence,
                          resamples=resamples, seed=seed)
    return replace(comparison, note=_summaries_note(run_a, run_b, configs, db))


def _summaries_note(run_a: str, run_b: str | None, configs: Sequence[str] | None, db: str | None) -> str | None:
    """`run.summaries_note` of both sides, in one sentence."""
    from workbench.experiments.run import summarizers_used
    from workbench.extractive import baseline_note

    sides = [(run_a, [configs[0]] if configs else None), (run_b or run_a, [configs[1]] if configs else None)]
    return baseline_note([model for run, names in sides for model in summarizers_used(run, db=db, configs=names)])


def _compare(run_a: str, run_b: str | None, *, configs: Sequence[str] | None, db: str | None,
             metrics: Sequence[str] | None, confidence: float, resamples: int, seed: int) -> Comparison:
    from workbench.experiments.run import results

    frame_a = results(run_a, db=db)
    frame_b = results(run_b, db=db) if run_b else frame_a
    if configs is not None:
        if isinstance(configs, str):
            raise ConfigError(f"configs takes two config names, as in configs=('A', 'B'), not the string {configs!r}")
        if len(configs) != 2:
            raise ConfigError(f"configs takes two names (A B), not {len(configs)}")
        config_a, config_b = configs
        for frame, name, run in ((frame_a, config_a, run_a), (frame_b, config_b, run_b or run_a)):
            if name not in set(frame["config"]):
                raise ConfigError(f"run {run!r} has no config {name!r}; configs: "
                                  f"{', '.join(sorted(set(frame['config'])))}")
        side_a = frame_a[frame_a["config"] == config_a]
        side_b = frame_b[frame_b["config"] == config_b]
        label_a = f"{run_a}:{config_a}" if run_b else config_a
        label_b = f"{run_b}:{config_b}" if run_b else config_b
        return compare_frames(side_a, side_b, a_label=label_a, b_label=label_b, metrics=metrics,
                              confidence=confidence, resamples=resamples, seed=seed)
    if run_b is None:
        names = list(dict.fromkeys(frame_a["config"]))
        if len(names) != 2:
            raise ConfigError(f"run {run_a!r} has {len(names)} configs ({', '.join(names)}): "
                              "name two with --configs A B or give a second run")
        return _compare(run_a, None, configs=tuple(names), db=db, metrics=metrics, confidence=confidence,
                        resamples=resamples, seed=seed)
    return compare_frames(frame_a, frame_b, a_label=run_a, b_label=run_b, metrics=metrics,
                          align=("session_id", "config", "repeat"), confidence=confidence, resamples=resamples,
                          seed=seed)
