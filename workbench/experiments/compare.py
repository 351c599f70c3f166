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

Replays that stop early total only the calls they made, so every comparison of configs (here, and the
leaderboard, charts, exports and regress) takes by default only the sessions where every compared config
completed (`complete_pairs`), and says how many were left out and why (`CompletePairs.note`).

    cmp = wb.compare("run-a", "run-b")                       # same configs in two runs
    cmp = wb.compare("run-a", configs=("window-5", "window-20"))   # two configs of one run
    cmp.to_frame()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from workbench.errors import ConfigError
from workbench.registry import METRICS, Metric

if TYPE_CHECKING:
    import pandas as pd

Direction = Literal["higher", "lower", "none"]
KEY_COLUMNS = ("run_id", "session_id", "dataset", "config", "repeat", "termination", "error", "duration_s")


def _metric_kind(name: str) -> type[Metric] | None:
    """The registered metric class named `name`, or None for a name the registry does not know."""
    return METRICS.kinds().get(name)


def declared_unit(name: str) -> str | None:
    """The unit a registered metric declares (`register_metric(unit=...)`: tokens, usd, calls,
    share...); None for a name the registry does not know."""
    kind = _metric_kind(name)
    return None if kind is None else kind.unit


def metric_direction(name: str) -> Direction:
    """The direction a registered metric declares ("none" for unknown names and counts)."""
    kind = _metric_kind(name)
    direction = "none" if kind is None else kind.direction
    return cast("Direction", direction) if direction in ("higher", "lower") else "none"


#: Why results of replays that stopped early mislead, said wherever they are shown beside others
#: (the tail of `CompletePairs.note`).
STOPPED_EARLY = (
    "A replay that stops early totals only the calls it made, so it reads cheap; a config that completed "
    "fewer sessions than another is never marked best."
)
#: How a config's session reads in `CompletePairs.left_out` when the config has no cell of it (a failed cell).
NO_RESULT = "no result"


@dataclass(frozen=True, eq=False)
class CompletePairs:
    """The sessions where every compared config completed, and what was left out (`complete_pairs`).

    A replay that stops early (`context_overflow`, `compaction_failed`) has totals over the calls it made
    only, so a mean over it reads cheap: comparisons take `results` (the rows of the complete sessions)
    and say `note`. With `complete_only=False`, or when no session is complete for every config,
    `results` is every row and the note says that replays that stopped early are included."""

    #: The rows compared: those of the complete sessions (every row when `complete_only` is False).
    results: pd.DataFrame
    #: Per row of the frame given, whether its session is one where every compared config completed.
    in_complete_pairs: pd.Series
    #: The configs compared, in their order.
    configs: tuple[str, ...]
    #: Sessions where every config completed, of `total`.
    sessions: int
    total: int
    #: Per config, the sessions it did not complete, counted by how they ended (`NO_RESULT`: no cell).
    left_out: Mapping[str, Mapping[str, int]]
    #: Per config, the sessions it completed.
    completed: Mapping[str, int]
    #: The configs that may be marked best: each completed every session some compared config completed.
    rankable: tuple[str, ...]
    #: The sessions where every config completed (their `by` values; joined by "\x1f" when several).
    complete_units: frozenset[str] = frozenset()
    #: Whether `results` holds the complete sessions only (False when asked, or when none is complete).
    complete_only: bool = True
    #: What a session is, in the note (`sessions`, or `session × config units` for two runs).
    unit: str = "sessions"
    #: Which sides had to complete, in the note.
    where: str = "every config completed"

    @property
    def stopped(self) -> bool:
        """Whether any config failed to complete some session."""
        return any(self.left_out.values())

    @property
    def scope(self) -> str:
        """What was compared, in a few words (a chart's subtitle): `on 3 of 12 sessions where every config
        completed`."""
        if self.complete_only:
            return f"on {self.sessions} of {self.total} {self.unit} where {self.where}"
        if self.stopped and not self.sessions:
            return f"on all {self.total} {self.unit}: none where {self.where}, replays that stopped early included"
        return f"on all {self.total} {self.unit}, replays that stopped early included"

    @property
    def note(self) -> str | None:
        """The warning every view shows (app, CLI, HTML report, exports) when a config stopped early;
        None when every config completed every session."""
        if not self.stopped:
            return None
        sides = ", ".join(
            f"{config} {sum(ends.values())} ({_how_ended(ends)})" for config, ends in self.left_out.items() if ends
        )
        told = "left out" if self.complete_only else "stopped early"
        return f"Compared {self.scope}; {told}: {sides}. {STOPPED_EARLY}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "complete_only": self.complete_only,
            "sessions": self.sessions,
            "total": self.total,
            "left_out": {c: dict(ends) for c, ends in self.left_out.items()},
            "completed": dict(self.completed),
            "rankable": list(self.rankable),
            "note": self.note,
        }


def _how_ended(ends: Mapping[str, int]) -> str:
    """`context_overflow`, or `context_overflow 7, compaction_failed 2` when sessions ended in more than one way."""
    if len(ends) == 1:
        return next(iter(ends))
    return ", ".join(f"{end} {count}" for end, count in sorted(ends.items(), key=lambda item: -item[1]))


def complete_pairs(
    results: pd.DataFrame,
    configs: Sequence[str] | None = None,
    *,
    complete_only: bool = True,
    by: Sequence[str] = ("session_id",),
    config_column: str = "config",
    unit: str = "sessions",
    where: str = "every config completed",
) -> CompletePairs:
    """The complete-pairs view of result rows (session × config cells with `termination`): the sessions
    (`by`) where every config of `configs` (default: all, in their order) completed every cell (all
    repeats), and per config how many sessions it did not complete and how they ended. A session a
    config has no cell of counts as `NO_RESULT` for it. Frames without `termination` (or without the
    `by` columns) count every cell as completed.

    Every comparison of configs (leaderboard, cost-versus-quality chart, `compare`, the exports'
    `in_complete_pairs`, regress) starts here, so all say the same."""
    import pandas as pd

    names = (
        [str(c) for c in configs] if configs is not None else [str(c) for c in dict.fromkeys(results[config_column])]
    )
    chosen = results[config_column].astype(str).isin(names)
    rows = results[chosen]
    keys = [c for c in by if c in rows.columns]
    if "termination" not in rows.columns or not keys or not len(rows):
        total = int(rows[keys].drop_duplicates().shape[0]) if keys else len(rows)
        return CompletePairs(
            results=rows,
            in_complete_pairs=chosen,
            configs=tuple(names),
            sessions=total,
            total=total,
            left_out={n: {} for n in names},
            completed={n: total for n in names},
            rankable=tuple(names),
            complete_units=frozenset(_unit_key(rows, keys)) if keys else frozenset(),
            unit=unit,
            where=where,
        )
    session = _unit_key(rows, keys)
    ends = rows["termination"].astype(object).where(rows["termination"].notna(), "unknown").astype(str)
    first_stop = (
        pd.DataFrame({"unit": session, "config": rows[config_column].astype(str), "end": ends})
        .groupby(["unit", "config"], sort=False)["end"]
        .agg(lambda values: next((v for v in values if v != "completed"), "completed"))
    )
    table = first_stop.unstack("config").reindex(columns=names).fillna(NO_RESULT)
    done = table == "completed"
    complete = set(table.index[done.all(axis=1)])
    some_done = done.any(axis=1)
    rankable = tuple(n for n in names if bool(done.loc[some_done, n].all()))
    left_out = {n: {str(k): int(v) for k, v in table.loc[~done[n], n].value_counts().items()} for n in names}
    mask = pd.Series(False, index=results.index)
    mask[chosen] = session.isin(complete).to_numpy()
    restricted = complete_only and bool(complete)
    return CompletePairs(
        results=rows[mask[chosen].to_numpy()] if restricted else rows,
        in_complete_pairs=mask,
        configs=tuple(names),
        sessions=len(complete),
        total=len(table),
        left_out=left_out,
        completed={n: int(done[n].sum()) for n in names},
        rankable=rankable,
        complete_units=frozenset(complete),
        complete_only=restricted,
        unit=unit,
        where=where,
    )


def _unit_key(rows: pd.DataFrame, keys: Sequence[str]) -> pd.Series:
    """One hashable key per row for the `keys` columns (the session, or the session and config)."""
    if len(keys) == 1:
        return rows[keys[0]].astype(str)
    return rows[list(keys)].astype(str).agg("\x1f".join, axis=1)


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
    #: Per side (label), how many of the paired cells stopped early (`termination` other than completed),
    #: before the pairs where a side stopped early were left out.
    stopped: Mapping[str, int] = field(default_factory=dict)
    #: Per side (label), the paired units left out because that side did not complete them, by how they ended.
    left_out: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: Whether only the units where both sides completed were compared (`complete_pairs`).
    complete_only: bool = True
    #: Said with the verdicts when a side's replays stopped early (`CompletePairs.note`): which pairs
    #: were left out and why, or that they were compared though their totals cover fewer calls.
    stopped_note: str | None = None

    @property
    def pairing(self) -> str:
        """What was paired, in words for the output: the sessions, and whether their repeats were averaged
        (the counts and the test are over these units, never over repeats)."""
        if self.cells == self.units:  # one cell a unit: no repeats were averaged
            return (
                f"{self.sessions} paired session(s)"
                if self.cells == self.sessions
                else f"{self.cells} paired cells ({self.sessions} session(s))"
            )
        units = (
            f"{self.sessions} paired session(s)"
            if self.units == self.sessions
            else f"{self.units} paired session × config units ({self.sessions} session(s))"
        )
        return f"{units}, each the mean of its repeats ({self.cells} paired cells)"

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        rows = [
            {
                "metric": m.metric,
                "direction": m.direction,
                "pairs": m.pairs,
                "A": m.mean_a,
                "B": m.mean_b,
                "delta": m.mean_delta,
                "ci_low": m.ci_low,
                "ci_high": m.ci_high,
                "p_value": m.p_value,
                "improved": m.improved,
                "regressed": m.regressed,
                "unchanged": m.unchanged,
                "verdict": m.verdict,
            }
            for m in self.metrics
        ]
        return pd.DataFrame(rows)

    def metric(self, name: str) -> MetricComparison:
        for item in self.metrics:
            if item.metric == name:
                return item
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "confidence": self.confidence,
            "sessions": self.sessions,
            "cells": self.cells,
            "units": self.units,
            "pairing": self.pairing,
            "unmatched": dict(self.unmatched),
            "note": self.note,
            "stopped": dict(self.stopped),
            "left_out": {k: dict(v) for k, v in self.left_out.items()},
            "complete_only": self.complete_only,
            "stopped_note": self.stopped_note,
            "metrics": [{**vars(m), "verdict": m.verdict} for m in self.metrics],
        }


def _bootstrap_ci(
    deltas: np.ndarray, confidence: float, resamples: int, rng: np.random.Generator
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
        signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
        return float(np.mean(np.abs((signs * nonzero).mean(axis=1)) >= observed))
    signs = rng.choice(np.array([-1, 1]), size=(resamples, n))
    extreme = int(np.sum(np.abs((signs * nonzero).mean(axis=1)) >= observed))
    return (extreme + 1) / (resamples + 1)


def _is_number_column(column: pd.Series) -> bool:
    import pandas as pd

    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)


def compare_frames(
    a: pd.DataFrame,
    b: pd.DataFrame,
    *,
    a_label: str = "A",
    b_label: str = "B",
    metrics: Sequence[str] | None = None,
    align: Sequence[str] = ("session_id", "repeat"),
    confidence: float = 0.95,
    resamples: int = 4000,
    seed: int = 0,
    complete_only: bool = True,
) -> Comparison:
    """Compare two result frames (one row per cell) paired on the `align` columns.

    The paired cells of a unit (the `align` columns but `repeat`: a session, or a session and config)
    are averaged first, so the counts, the interval and the test see one delta per unit, never one per
    repeat. By default only the units where both sides completed every cell are compared
    (`complete_pairs`); `complete_only=False` keeps the others, and `stopped_note` says either way."""
    import pandas as pd

    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be within (0, 1), not {confidence}")
    align = [c for c in align if c in a.columns and c in b.columns]
    if not align:
        raise ConfigError("the frames share no column to pair cells on (session_id, repeat)")
    candidates = metrics or [c for c in a.columns if c in b.columns and c not in KEY_COLUMNS]
    numeric = [
        c
        for c in candidates
        if c in a.columns and c in b.columns and _is_number_column(a[c]) and _is_number_column(b[c])
    ]
    if metrics:
        missing = [m for m in metrics if m not in numeric]
        if missing:
            raise ConfigError(
                f"no numeric metric {', '.join(map(repr, missing))} in both sides; "
                f"available: {', '.join(numeric) or '(none)'}"
            )
    ends = ["termination"] if "termination" in a.columns and "termination" in b.columns else []
    merged = a[[*align, *numeric, *ends]].merge(
        b[[*align, *numeric, *ends]], on=align, suffixes=("__a", "__b"), how="inner"
    )
    stopped = (
        {
            label: int((merged[f"termination__{side}"] != "completed").sum())
            for label, side in ((a_label, "a"), (b_label, "b"))
        }
        if ends
        else {}
    )
    unmatched = {a_label: len(a) - len(merged), b_label: len(b) - len(merged)}
    unit = [c for c in align if c != "repeat"] or align
    pairs = _paired_sides(merged, unit, a_label, b_label, complete_only) if ends else None
    if pairs is not None and pairs.complete_only:
        merged = merged[pairs.in_complete_pairs.to_numpy()[: len(merged)]]
    rng = np.random.default_rng(seed)
    items = []
    for name in numeric:
        columns = [f"{name}__a", f"{name}__b"]
        values = merged[columns].apply(pd.to_numeric, errors="coerce")
        pair = pd.concat([merged[unit], values], axis=1).dropna(subset=columns)
        pair = pair.groupby(unit, sort=False)[columns].mean()
        items.append(
            _compare_metric(
                name,
                pair[columns[0]].to_numpy(dtype=float),
                pair[columns[1]].to_numpy(dtype=float),
                confidence,
                resamples,
                rng,
            )
        )
    units = int(merged[unit].drop_duplicates().shape[0])
    return Comparison(
        a=a_label,
        b=b_label,
        metrics=tuple(items),
        confidence=confidence,
        sessions=int(merged["session_id"].nunique()) if "session_id" in merged else units,
        cells=len(merged),
        units=units,
        unmatched=unmatched,
        stopped=stopped,
        left_out={} if pairs is None else pairs.left_out,
        complete_only=pairs is not None and pairs.complete_only,
        stopped_note=None if pairs is None else pairs.note,
    )


def _paired_sides(
    merged: pd.DataFrame, unit: Sequence[str], a_label: str, b_label: str, complete_only: bool
) -> CompletePairs:
    """`complete_pairs` of the two sides of merged pairs: side A's rows then side B's, labelled by side."""
    import pandas as pd

    labels = (a_label, b_label if b_label != a_label else f"{b_label} (B)")
    sides = pd.concat(
        [
            merged[list(unit)].assign(termination=merged[f"termination__{side}"].to_numpy(), side=label)
            for side, label in zip("ab", labels, strict=True)
        ],
        ignore_index=True,
    )
    units = "sessions" if list(unit) == ["session_id"] else "session × config units"
    return complete_pairs(
        sides,
        labels,
        complete_only=complete_only,
        by=unit,
        config_column="side",
        unit=units,
        where="both sides completed",
    )


def _compare_metric(
    name: str, values_a: np.ndarray, values_b: np.ndarray, confidence: float, resamples: int, rng: np.random.Generator
) -> MetricComparison:
    """One metric over paired units (the means of their repeats): counts, bootstrap interval, sign-flip test."""
    direction = metric_direction(name)
    if len(values_a) == 0:
        return MetricComparison(
            name,
            direction,
            0,
            float("nan"),
            float("nan"),
            float("nan"),
            float("nan"),
            float("nan"),
            1.0,
            0,
            0,
            0,
            alpha=1 - confidence,
        )
    deltas = values_b - values_a
    low, high = _bootstrap_ci(deltas, confidence, resamples, rng)
    tolerance = 1e-12 * np.maximum(1.0, np.abs(values_a))
    up, down = deltas > tolerance, deltas < -tolerance
    better, worse = (up, down) if direction != "lower" else (down, up)
    if direction == "none":
        better = worse = np.zeros_like(up)
    return MetricComparison(
        metric=name,
        direction=direction,
        pairs=len(deltas),
        mean_a=float(values_a.mean()),
        mean_b=float(values_b.mean()),
        mean_delta=float(deltas.mean()),
        ci_low=low,
        ci_high=high,
        p_value=_sign_flip_p(deltas, resamples, rng),
        improved=int(better.sum()),
        regressed=int(worse.sum()),
        unchanged=int(len(deltas) - up.sum() - down.sum()),
        alpha=1 - confidence,
    )


def compare(
    run_a: str,
    run_b: str | None = None,
    *,
    configs: Sequence[str] | None = None,
    db: str | None = None,
    metrics: Sequence[str] | None = None,
    confidence: float = 0.95,
    resamples: int = 4000,
    seed: int = 0,
    complete_only: bool = True,
) -> Comparison:
    """Paired comparison of two runs, or of two configs (`configs=(A, B)`) of one or two runs.

    Two runs without `configs` pair cells on session, config and repeat (the configs both have).
    Only the sessions where both sides completed are compared unless `complete_only=False`
    (`Comparison.stopped_note` says what was left out, and why).
    The comparison's `note` says so when either side's summaries came from the offline extractive baseline.
    """
    comparison = _compare(
        run_a,
        run_b,
        configs=configs,
        db=db,
        metrics=metrics,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        complete_only=complete_only,
    )
    return replace(comparison, note=_summaries_note(run_a, run_b, configs, db))


def _summaries_note(run_a: str, run_b: str | None, configs: Sequence[str] | None, db: str | None) -> str | None:
    """`run.summaries_note` of both sides, in one sentence."""
    from workbench.experiments.run import summarizers_used
    from workbench.extractive import baseline_note

    sides = [(run_a, [configs[0]] if configs else None), (run_b or run_a, [configs[1]] if configs else None)]
    return baseline_note([model for run, names in sides for model in summarizers_used(run, db=db, configs=names)])


def _compare(
    run_a: str,
    run_b: str | None,
    *,
    configs: Sequence[str] | None,
    db: str | None,
    metrics: Sequence[str] | None,
    confidence: float,
    resamples: int,
    seed: int,
    complete_only: bool = True,
) -> Comparison:
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
                raise ConfigError(
                    f"run {run!r} has no config {name!r}; configs: {', '.join(sorted(set(frame['config'])))}"
                )
        side_a = frame_a[frame_a["config"] == config_a]
        side_b = frame_b[frame_b["config"] == config_b]
        label_a = f"{run_a}:{config_a}" if run_b else config_a
        label_b = f"{run_b}:{config_b}" if run_b else config_b
        return compare_frames(
            side_a,
            side_b,
            a_label=label_a,
            b_label=label_b,
            metrics=metrics,
            confidence=confidence,
            resamples=resamples,
            seed=seed,
            complete_only=complete_only,
        )
    if run_b is None:
        names = list(dict.fromkeys(frame_a["config"]))
        if len(names) != 2:
            raise ConfigError(
                f"run {run_a!r} has {len(names)} configs ({', '.join(names)}): "
                "name two with --configs A B or give a second run"
            )
        return _compare(
            run_a,
            None,
            configs=tuple(names),
            db=db,
            metrics=metrics,
            confidence=confidence,
            resamples=resamples,
            seed=seed,
            complete_only=complete_only,
        )
    return compare_frames(
        frame_a,
        frame_b,
        a_label=run_a,
        b_label=run_b,
        metrics=metrics,
        align=("session_id", "config", "repeat"),
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        complete_only=complete_only,
    )
