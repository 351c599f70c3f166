"""Regression gates: a fresh run of an experiment against its stored baseline.

The baseline (`experiments/baselines/NAME.json` beside the spec) holds, per config and dataset,
the mean of every numeric metric over the dataset's sessions where every config completed (a replay
that stops early totals fewer calls; `complete_pairs`), how many those were, and the summary texts
of every config whose summarizer is deterministic (the offline provider, or `temperature = 0`).
The spec's `[regress]` table says how far each metric may move (see `Tolerance`); `summaries =
"exact"` asks that the snapshots match, and a mismatch is shown as a unified diff. `update=True`
rewrites the baseline from the fresh run.

A check fails, rather than passes, when cells of the fresh run failed (their metrics are missing, so
the means cover fewer sessions), when fewer sessions completed under every config than in the
baseline, or when a spec with tolerances had nothing to check; a baseline is never written from a
run with failed cells or without metrics. The baseline (read, or to be written) is checked before
the run starts, so a bad path does not cost a whole run.

    report = wb.regress("experiments/reference-designs.toml")
    report.ok, print(report.text())
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from workbench.errors import ConfigError, WorkbenchError, unwritable
from workbench.experiments.compare import complete_pairs
from workbench.experiments.spec import ExperimentSpec, Tolerance, load_experiment, parse_tolerance

if TYPE_CHECKING:
    from workbench.store import RunResults

BASELINE_VERSION = 1
OFFLINE_MODEL_PREFIX = "workbench/"


@dataclass(frozen=True)
class MetricDiff:
    """One metric of one config and dataset against the baseline."""

    config: str
    dataset: str
    metric: str
    baseline: float | None
    current: float | None
    tolerance: Tolerance
    ok: bool

    @property
    def change(self) -> float | None:
        """current − baseline (None when either is missing)."""
        return None if self.current is None or self.baseline is None else self.current - self.baseline

    @property
    def relative_change(self) -> float | None:
        """The change as a share of |baseline| (None when either is missing or the baseline is 0)."""
        change = self.change
        return None if change is None or not self.baseline else change / abs(self.baseline)

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        if self.current is None:
            return f"{mark} {self.config} / {self.dataset}: {self.metric} is missing from the fresh run"
        if self.baseline is None:
            return f"{mark} {self.config} / {self.dataset}: {self.metric} is not in the baseline"
        relative = f" ({self.relative_change:+.1%})" if self.relative_change is not None else ""
        return (
            f"{mark} {self.config} / {self.dataset}: {self.metric} {_fmt(self.baseline)} → {_fmt(self.current)} "
            f"({self.change:+.4g}{relative}; {self.tolerance.describe()})"
        )


@dataclass(frozen=True)
class SummaryDiff:
    config: str
    session_id: str
    diff: str


@dataclass
class RegressionReport:
    """The outcome of a regression check: `ok`, the metric diffs, the summary diffs, notes."""

    experiment: str
    baseline_path: Path
    run_id: str | None
    diffs: list[MetricDiff] = field(default_factory=list)
    summary_diffs: list[SummaryDiff] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    updated: bool = False
    #: Cells of the fresh run that failed (they hold no metrics), of `cells_total`.
    failed_cells: int = 0
    cells_total: int = 0
    #: Summary snapshots compared (changed or not).
    summary_checks: int = 0
    #: The spec's [regress] names (metrics, and `summaries`): a spec with any must check something.
    tolerances: tuple[str, ...] = ()
    #: What to do about failed cells (how to see their errors and retry them).
    failed_hint: str = ""
    #: Datasets where fewer sessions completed under every config than in the baseline (`complete_pairs`).
    coverage_problems: list[str] = field(default_factory=list)

    @property
    def checks(self) -> int:
        """Metric checks and summary snapshots compared."""
        return len(self.diffs) + self.summary_checks

    @property
    def problems(self) -> list[str]:
        """Why the check cannot pass whatever the diffs say: failed cells, or nothing checked."""
        found = []
        if self.failed_cells:
            found.append(
                f"{self.failed_cells} of {self.cells_total} cells of run {self.run_id} failed, so its "
                f"means cover only the cells that finished{self.failed_hint}"
            )
        found.extend(self.coverage_problems)
        if self.tolerances and not self.checks:
            found.append(
                f"nothing was checked: neither the baseline nor the fresh run holds what the [regress] table "
                f"names ({', '.join(self.tolerances)})"
            )
        return found

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.diffs) and not self.summary_diffs and not self.problems

    @property
    def failures(self) -> list[MetricDiff]:
        return [d for d in self.diffs if not d.ok]

    def text(self, *, verbose: bool = False) -> str:
        if self.updated:
            return f"baseline {self.baseline_path} written from run {self.run_id}"
        verdict = "PASS" if self.ok else "REGRESSION" if self.failures or self.summary_diffs else "FAIL"
        lines = [f"{verdict}: {self.experiment} against {self.baseline_path} (run {self.run_id})"]
        lines.extend(self.problems)
        failures = self.failures
        shown = self.diffs if verbose else failures
        if failures:
            lines.append(f"{len(failures)} of {len(self.diffs)} metric checks failed:")
        elif self.diffs:
            lines.append(f"all {len(self.diffs)} metric checks within tolerance")
        lines.extend(f"  {d.line()}" for d in shown)
        if self.summary_diffs:
            lines.append(f"{len(self.summary_diffs)} summary snapshot(s) changed:")
            for item in self.summary_diffs:
                lines.append(f"--- {item.config} / session {item.session_id[:16]}")
                lines.append(item.diff.rstrip("\n"))
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "experiment": self.experiment,
            "baseline": str(self.baseline_path),
            "run_id": self.run_id,
            "updated": self.updated,
            "problems": self.problems,
            "failed_cells": self.failed_cells,
            "cells_total": self.cells_total,
            "checks": self.checks,
            "diffs": [
                {
                    "config": d.config,
                    "dataset": d.dataset,
                    "metric": d.metric,
                    "baseline": d.baseline,
                    "current": d.current,
                    "tolerance": d.tolerance.describe(),
                    "ok": d.ok,
                }
                for d in self.diffs
            ],
            "summary_diffs": [vars(s) for s in self.summary_diffs],
            "notes": self.notes,
        }


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def baseline_path(spec: ExperimentSpec, baseline: str | os.PathLike[str] | None = None) -> Path:
    """Where a spec's baseline lives: given, else `baselines/NAME.json` beside the spec file."""
    if baseline is not None:
        return Path(baseline)
    folder = Path(spec.source).parent if spec.source else Path("experiments")
    return folder / "baselines" / f"{spec.name}.json"


def is_deterministic(config: Mapping[str, Any]) -> bool:
    """Whether a config's summaries can be snapshotted: the offline provider or temperature 0."""
    model = str(config.get("summarizer", ""))
    options = config.get("summarizer_options") or {}
    return model.startswith(OFFLINE_MODEL_PREFIX) or options.get("temperature") == 0


def _clean(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def snapshot(stored: RunResults, run_id: str, spec: ExperimentSpec) -> dict[str, Any]:
    """The baseline document of a run: metric means per config and dataset over the sessions of the
    dataset where every config completed (`complete_pairs`; how many, and what was left out, under
    `complete_pairs`), and (when the spec asks `summaries = "exact"`) the summaries of its
    deterministic configs."""
    import pandas as pd

    frame = stored.results_frame(run_id)
    skip = {"run_id", "session_id", "dataset", "config", "repeat", "termination", "error", "duration_s"}
    numeric = [c for c in frame.columns if c not in skip and pd.api.types.is_numeric_dtype(frame[c])]
    metrics: dict[str, dict[str, dict[str, float | None]]] = {}
    coverage: dict[str, dict[str, Any]] = {}
    for dataset, cells in frame.groupby("dataset", sort=False, dropna=False):
        pairs = complete_pairs(cells)
        coverage[str(dataset)] = {
            "sessions": pairs.sessions,
            "total": pairs.total,
            "left_out": {c: dict(ends) for c, ends in pairs.left_out.items() if ends},
            "note": pairs.note,
        }
        for compared, rows in pairs.results.groupby("config", sort=False):
            means = {name: _clean(rows[name].mean()) for name in numeric if rows[name].notna().any()}
            metrics.setdefault(str(compared), {})[str(dataset)] = dict(sorted(means.items()))
    deterministic = {c.name for c in spec.configs if is_deterministic(c.config.to_dict())}
    summaries: dict[str, dict[str, list[str | None]]] = {}
    compactions = stored.compactions_frame(run_id) if "summaries" in spec.regress else None
    if compactions is not None and len(compactions):
        first = compactions[(compactions["repeat"] == 0) & compactions["config"].isin(deterministic)]
        for (config, session_id), rows in first.groupby(["config", "session_id"], sort=True):
            texts = [s if isinstance(s, str) else None for s in rows.sort_values("event_index")["summary"]]
            if any(texts):
                summaries.setdefault(str(config), {})[str(session_id)] = texts
    info = stored.run_info(run_id)
    return {
        "version": BASELINE_VERSION,
        "experiment": spec.name,
        "run_id": run_id,
        "code_version": info.code_version,
        "dataset_version": info.dataset_version,
        "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "metrics": metrics,
        "complete_pairs": coverage,
        "summaries": summaries,
    }


def _summary_diff(old: Sequence[str | None], new: Sequence[str | None], label: str) -> str:
    def lines(texts: Sequence[str | None]) -> list[str]:
        out: list[str] = []
        for index, text in enumerate(texts):
            out.append(f"=== compaction {index} ===\n")
            out.extend(line + "\n" for line in (text or "(no summary)").splitlines())
        return out

    return "".join(
        difflib.unified_diff(lines(old), lines(new), fromfile=f"baseline {label}", tofile=f"fresh {label}", n=2)
    )


#: What a spec without a `[regress]` table is checked on: task-state coverage, the quality metric the
#: metric audit finds ranks real summaries above keyword lists (`workbench audit-metrics`).
DEFAULT_TOLERANCES = {"task_state_coverage": parse_tolerance("task_state_coverage", -0.02)}


def check(
    current: Mapping[str, Any], baseline: Mapping[str, Any], spec: ExperimentSpec, path: Path
) -> RegressionReport:
    """Compare two baseline documents under the spec's tolerances (`DEFAULT_TOLERANCES` when the spec
    has none: a check the spec did not ask for, so finding nothing to compare is no failure)."""
    report = RegressionReport(
        experiment=spec.name, baseline_path=path, run_id=current.get("run_id"), tolerances=tuple(spec.regress)
    )
    tolerances = {m: t for m, t in (spec.regress or DEFAULT_TOLERANCES).items() if t.kind != "exact"}
    if not spec.regress:
        report.notes.append(
            "the spec has no [regress] table: checked by default on task_state_coverage (may drop by at most 0.02)"
        )
    base_metrics: Mapping[str, Mapping[str, Mapping[str, Any]]] = baseline.get("metrics", {})
    now_metrics: Mapping[str, Mapping[str, Mapping[str, Any]]] = current.get("metrics", {})
    for config, datasets in base_metrics.items():
        if config not in now_metrics:
            for metric, tolerance in tolerances.items():
                report.diffs.append(MetricDiff(config, "*", metric, None, None, tolerance, False))
            report.notes.append(f"config {config!r} is in the baseline but not in the fresh run")
            continue
        for dataset, values in datasets.items():
            fresh = now_metrics[config].get(dataset, {})
            for metric, tolerance in tolerances.items():
                old, new = _clean(values.get(metric)), _clean(fresh.get(metric))
                if old is None and new is None:
                    continue
                ok = old is not None and new is not None and tolerance.allows(old, new)
                report.diffs.append(MetricDiff(config, dataset, metric, old, new, tolerance, ok))
    _check_coverage(report, baseline.get("complete_pairs"), current.get("complete_pairs"))
    unchecked = [m for m in tolerances if not any(d.metric == m for d in report.diffs)]
    if unchecked:
        report.notes.append(
            f"{', '.join(unchecked)}: in neither the baseline nor the fresh run, so not checked "
            "(a metric the spec's `metrics` list does not compute?)"
        )
    for config in now_metrics:
        if config not in base_metrics:
            report.notes.append(f"config {config!r} is new (not in the baseline); run with --update to add it")
    if "summaries" in spec.regress:
        old_summaries: Mapping[str, Mapping[str, Sequence[str | None]]] = baseline.get("summaries", {})
        new_summaries: Mapping[str, Mapping[str, Sequence[str | None]]] = current.get("summaries", {})
        for config, sessions in old_summaries.items():
            for session_id, texts in sessions.items():
                fresh_texts = new_summaries.get(config, {}).get(session_id, [])
                report.summary_checks += 1
                if list(texts) != list(fresh_texts):
                    report.summary_diffs.append(
                        SummaryDiff(
                            config, session_id, _summary_diff(texts, fresh_texts, f"{config}/{session_id[:12]}")
                        )
                    )
    return report


def _check_coverage(report: RegressionReport, baseline: Any, current: Any) -> None:
    """The sessions the means are over: fewer where every config completed than in the baseline fails the
    check (a config now stops early where it completed, and the means would cover other sessions); more is
    a note. A baseline written before it recorded them is not checked."""
    for dataset, fresh in (current or {}).items():
        if fresh.get("note"):
            report.notes.append(f"{dataset}: {fresh['note']}")
        old = (baseline or {}).get(dataset) if isinstance(baseline, Mapping) else None
        if not isinstance(old, Mapping) or not isinstance(old.get("sessions"), int):
            continue
        was, now = old["sessions"], fresh["sessions"]
        if now < was:
            report.coverage_problems.append(
                f"{dataset}: every config completed {now} of {fresh['total']} sessions, {was} in the baseline, so "
                "a config now stops early where it completed (the means cover fewer sessions)"
            )
        elif now > was:
            report.notes.append(
                f"{dataset}: every config completed {now} sessions, {was} in the baseline: the means "
                "cover more sessions; run with --update to make them the baseline's"
            )


class BaselineRefused(WorkbenchError):
    """`update=True` on a run a baseline must not be made of (failed cells, or no metrics): the work
    failed, so the CLI exits 1; the baseline on disk is left as it was."""


def regress(
    path: str | os.PathLike[str] | ExperimentSpec | Mapping[str, Any],
    baseline: str | os.PathLike[str] | None = None,
    db: str | None = None,
    *,
    update: bool = False,
    concurrency: int | None = None,
    progress: Any = None,
) -> RegressionReport:
    """Run the experiment (resuming its run) and compare it with the baseline; `update` rewrites it.

    The baseline is read and validated (or, with `update`, its place checked for writing) before the run
    starts. The report fails when cells of the run failed; `update` refuses such a run (`BaselineRefused`).
    """
    from workbench.experiments.run import run_experiment
    from workbench.store import open_results

    spec = load_experiment(path if not isinstance(path, os.PathLike) else Path(path))
    target = baseline_path(spec, baseline)
    stored = None if update else read_baseline(target, spec, given=baseline is not None)
    if stored is None:
        writable_baseline(target, spec)
    run = run_experiment(spec, db=db, concurrency=concurrency, progress=progress)
    with open_results(run.db) as results:
        current = snapshot(results, run.id, spec)
        info = results.run_info(run.id)
    total = info.cells_total or 0
    failed = max(total - info.cells_done, run.progress.failed_cells)
    hint = _failed_hint(spec)
    if stored is None:
        if failed:
            raise BaselineRefused(
                f"baseline {target} not written: {failed} of {total} cells of run {run.id} "
                f"failed, and a baseline must cover every cell{hint}"
            )
        if not any(values for datasets in current["metrics"].values() for values in datasets.values()):
            raise BaselineRefused(
                f"baseline {target} not written: run {run.id} has no metrics ({info.cells_done} cells)"
            )
        _write_baseline(target, current)
        return RegressionReport(
            experiment=spec.name, baseline_path=target, run_id=run.id, updated=True, cells_total=total
        )
    report = check(current, stored, spec, target)
    report.failed_cells, report.cells_total, report.failed_hint = failed, total, hint
    summaries = run.summaries_note()
    if summaries:
        report.notes.append(summaries)
    return report


def _failed_hint(spec: ExperimentSpec) -> str:
    """Where a failed cell's error shows, and how to retry it (the tail of a sentence)."""
    how = f"`workbench run {spec.source}`" if spec.source else "`wb.run_experiment(spec)`"
    return (
        f"; each failed cell's error was reported as a warning during the run (`cell ... failed: ...`), "
        f"and {how} retries them"
    )


def _update_hint(spec: ExperimentSpec, target: Path, given: bool) -> str:
    """How to write the baseline `target`: the CLI command (with `--baseline` when one was given)."""
    if not spec.source:
        return "`wb.regress(spec, update=True)` (a spec given as a table or text has no file for the CLI)"
    return f"`workbench regress {spec.source}{f' --baseline {target}' if given else ''} --update`"


def read_baseline(target: Path, spec: ExperimentSpec, *, given: bool = False) -> dict[str, Any]:
    """The baseline document at `target`, validated; a ConfigError names the file and what was expected
    (missing, a folder, not UTF-8, not JSON, or not shaped as a baseline)."""
    if target.is_dir():
        raise ConfigError(
            f"baseline {target} is a folder, not a baseline file; give its JSON file, such as "
            f"{target / f'{spec.name}.json'}"
        )
    if not target.is_file():
        raise ConfigError(f"no baseline at {target}; create it with {_update_hint(spec, target, given)}")
    try:
        stored = json.loads(target.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{target}: not a baseline (not UTF-8 text: byte {exc.object[exc.start]:#04x} at "
            f"offset {exc.start}; expected the JSON that --update writes)"
        ) from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{target}: not a baseline (invalid JSON at line {exc.lineno}: {exc.msg})") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read the baseline {target}: {exc.strerror or exc}") from exc
    problem = baseline_problem(stored)
    if problem:
        raise ConfigError(f"{target}: not a baseline ({problem}; --update writes one)")
    return cast("dict[str, Any]", stored)


def _kind(value: Any) -> str:
    """A JSON value as a message names it: `an object`, `a list`, or the value itself (`5`, `"many"`)."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return json.dumps(value)


def baseline_problem(document: Any) -> str | None:
    """What is wrong with the shape of a baseline document, or None: `metrics` maps config -> dataset ->
    metric -> number or null; `summaries`, when present, config -> session -> list of texts or nulls."""
    if not isinstance(document, Mapping) or "metrics" not in document:
        return "expected an object with 'metrics'"
    metrics = document["metrics"]
    if not isinstance(metrics, Mapping):
        return f"'metrics' is {_kind(metrics)}, expected an object of configs"
    for config, datasets in metrics.items():
        if not isinstance(datasets, Mapping):
            return f"metrics[{config!r}] is {_kind(datasets)}, expected an object of datasets"
        for dataset, values in datasets.items():
            where = f"metrics[{config!r}][{dataset!r}]"
            if not isinstance(values, Mapping):
                return f"{where} is {_kind(values)}, expected an object of metric values"
            for metric, value in values.items():
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                    return f"{where}[{metric!r}] is {_kind(value)}, expected a number or null"
    summaries = document.get("summaries", {})
    if not isinstance(summaries, Mapping):
        return f"'summaries' is {_kind(summaries)}, expected an object of configs"
    for config, sessions in summaries.items():
        if not isinstance(sessions, Mapping):
            return f"summaries[{config!r}] is {_kind(sessions)}, expected an object of sessions"
        for session_id, texts in sessions.items():
            if not isinstance(texts, list) or not all(t is None or isinstance(t, str) for t in texts):
                return f"summaries[{config!r}][{session_id!r}] is not a list of summary texts"
    return None


def writable_baseline(target: Path, spec: ExperimentSpec) -> None:
    """Refuse, before the run, a baseline path no file can be written at (a folder, a path under a
    file, a folder that refuses files)."""
    if target.is_dir():
        raise ConfigError(
            f"baseline {target} is a folder; give the file to write, such as {target / f'{spec.name}.json'}"
        )
    reason = unwritable(target)
    if reason is not None:
        raise ConfigError(f"cannot write the baseline {target}: {reason}")


def _write_baseline(target: Path, document: Mapping[str, Any]) -> None:
    """Write through a hidden partial file that replaces `target` once complete, and is removed on failure."""
    partial = target.with_name(f".{target.name}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(document, indent=1, sort_keys=False, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(partial, target)
    except OSError as exc:
        raise ConfigError(f"cannot write the baseline {target}: {exc.strerror or exc}") from exc
    finally:
        if partial.is_file() or partial.is_symlink():
            partial.unlink()
