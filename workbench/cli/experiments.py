"""`workbench run | export | regress | compare | runs`: experiments from the command line (DESIGN §9).

`run` shows a progress bar (cells, model calls, cache hits, spend) on stderr and prints the run id
and the leaderboard; running it again resumes the same run. `regress` exits 1 on a regression with
a readable report. `compare` prints per-metric paired deltas with a confidence interval.
"""

from __future__ import annotations

import contextlib
import math
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import click

from workbench.cli.common import CommandFailed, note, options, print_json, print_table, shared_options


def _db_must_exist() -> str:
    from workbench.store.db import check_database_path

    path = options().db_path
    check_database_path(path, create=False)
    return path


def _cell(value: Any) -> Any:
    """A value of a frame as JSON wants it, at full precision: NaN and infinities as None (JSON has
    neither), whole floats as ints, arrays as lists. Text tables go through `workbench.formatting`."""
    if hasattr(value, "tolist"):
        value = value.tolist()  # a numpy scalar, or a list column (DuckDB VARCHAR[]) read back as an array
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if value.is_integer():
            return int(value)
    return value


class _ProgressBar:
    """A tqdm bar on stderr fed by `RunProgress` updates (cells, model calls, cache hits, spend)."""

    def __init__(self) -> None:
        from tqdm import tqdm

        self._bar = tqdm(unit="cell", file=sys.stderr, desc="cells", leave=False, disable=None)  # off without a tty

    def __call__(self, progress: Any) -> None:
        self._bar.total = progress.cells_total
        self._bar.n = progress.cells_done
        self._bar.set_postfix_str(
            f"{progress.model_calls} calls, {progress.cache_hits} cached, {progress.cost}", refresh=False
        )
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()


def _progress_bar() -> _ProgressBar | None:
    """A progress bar, or None under --quiet or --json."""
    opts = options()
    return None if opts.quiet or opts.as_json else _ProgressBar()


def _leaderboard_rows(frame: Any, metrics: list[str], pairs: Any) -> tuple[list[dict[str, Any]], list[str]]:
    from workbench.experiments.charts import format_metric, leaderboard

    board = leaderboard(frame, pairs=pairs)
    wanted = ["cells", "completed", *dict.fromkeys(m for m in metrics if m in board.columns)]
    rows = [
        {"config": str(config), **{str(c): format_metric(str(c), row[c]) for c in wanted}}
        for config, row in board.iterrows()
    ]
    return rows, ["config", *wanted]


@contextlib.contextmanager
def _noop_warnings() -> Iterator[list[str]]:
    """Collect the run's `NoopCompactionsWarning`s (the command prints them as its own lines); any
    other warning is passed on as it came."""
    from workbench.errors import NoopCompactionsWarning

    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NoopCompactionsWarning)
        yield notes
    for item in caught:
        if issubclass(item.category, NoopCompactionsWarning):
            notes.append(str(item.message))
        else:
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno, source=item.source)


ALL_SESSIONS_HELP = (
    "Compare configs on every session, replays that stopped early included [default: only the "
    "sessions where every config completed]."
)
DEFAULT_COLUMNS = [
    "compactions",
    "billed_input_tokens",
    "peak_context_tokens",
    "cost_usd",
    "compression_ratio",
    "task_state_coverage",
    "fact_retention",
    "needed_fact_retention",
    "probe_answerable",
]


@click.command("run")
@click.argument("experiment", metavar="EXPERIMENT.toml")
@click.option("--concurrency", type=click.IntRange(min=1), default=None, help="Cells in flight [default: the spec's].")
@click.option("--dry-run", is_flag=True, help="Print the expanded cells and the models they call; run nothing.")
@click.option(
    "--fresh",
    is_flag=True,
    help="Recompute every cell of the run (model calls still come from the cache, and the quality measures of "
    "a replay that came out as one measured before with this code from the database).",
)
@click.option("--remeasure", is_flag=True, help="Measure the quality of every replay again, even one measured before.")
@click.option(
    "--executor",
    type=click.Choice(["auto", "local", "processes", "ray"]),
    default="auto",
    show_default=True,
    help="Where cells run: threads of this process (local), a worker process per CPU (processes: for "
    "CPU-bound grids, offline summaries and quality metrics), Ray workers (the `ray` extra), or auto: "
    "processes for an offline grid big enough to pay for their start, else local.",
)
@click.option(
    "--address",
    default=None,
    metavar="ADDRESS",
    help="With --executor ray: the cluster, e.g. auto or ray://host:10001 [default: a local Ray].",
)
@click.option("--all-sessions", is_flag=True, help=ALL_SESSIONS_HELP)
@shared_options
def run_cmd(
    experiment: str,
    concurrency: int | None,
    dry_run: bool,
    fresh: bool,
    remeasure: bool,
    executor: str,
    address: str | None,
    all_sessions: bool,
) -> None:
    """Run an experiment grid (resumable) and print the run id and a results table."""
    from workbench.experiments import run as runner
    from workbench.experiments.compare import complete_pairs

    if dry_run:
        plan = runner.dry_run(experiment, db=_db_must_exist())
        if options().as_json:
            print_json(plan)
            return
        click.echo(
            f"run {plan['run_id']}: {plan['sessions']} sessions × {len(plan['configs'])} configs × "
            f"{plan['repeats']} repeat(s) = {plan['cells']} cells, {plan['cells_done']} already done, "
            f"{plan['cells_to_run']} to run"
        )
        click.echo(f"--executor auto: {plan['executor']} ({plan['executor_reason']})")
        print_table(
            [
                {
                    "config": c["config"],
                    "trigger": c["trigger"]["kind"],
                    "strategy": c["strategy"]["kind"],
                    "models": ", ".join(c["models"]),
                    "cells": c["cells"],
                }
                for c in plan["configs"]
            ],
            ["config", "trigger", "strategy", "models", "cells"],
        )
        for line in plan["notes"]:
            note(f"note: {line}")
        return
    if address is not None and executor != "ray":
        raise click.UsageError("--address goes with --executor ray")
    bar = _progress_bar()
    try:
        with _noop_warnings() as noop_notes:
            run = runner.run_experiment(
                experiment,
                db=_db_must_exist(),
                concurrency=concurrency,
                fresh=fresh,
                remeasure=remeasure,
                progress=bar,
                executor=executor,
                address=address,
            )
    finally:
        if bar is not None:
            bar.close()
    frame = run.results
    pairs = complete_pairs(frame, complete_only=not all_sessions) if len(frame) else None
    reductions = _reductions(run, frame)
    if options().as_json:
        print_json(
            {
                "run_id": run.id,
                "status": run.status,
                "cells": run.progress.cells_total,
                "cells_reused": run.progress.cells_reused,
                "model_calls": run.progress.model_calls,
                "cache_hits": run.progress.cache_hits,
                "cost_usd": None if run.progress.unpriced_calls else run.progress.cost_usd,
                "priced_cost_usd": run.progress.cost_usd,
                "unpriced_calls": run.progress.unpriced_calls,
                "failed_cells": run.progress.failed_cells,
                "measures_reused": run.progress.measures_reused,
                "executor": run.executor.name,
                "executor_reason": run.executor.reason or None,
                "note": run.summaries_note(),
                "complete_pairs": None if pairs is None else pairs.to_dict(),
                "noop_configs": noop_notes,
                **({"reductions": [r.to_dict() for r in reductions]} if reductions is not None else {}),
                "results": [{k: _cell(v) for k, v in row.items()} for row in frame.to_dict(orient="records")],
            }
        )
    else:
        click.echo(f"run {run.id}: {run.status}, {run.progress.line()}")
        if run.executor.reason:
            note(f"cells computed {_WHERE[run.executor.name]} (--executor auto: {run.executor.reason})")
        rows, columns = _leaderboard_rows(frame, [*run.spec.metrics, *DEFAULT_COLUMNS], pairs)
        print_table(rows, columns)
        if pairs is not None and pairs.note:
            click.echo(pairs.note)
        if reductions is not None:
            from workbench.experiments.reductions import TABLE_COLUMNS, table_rows

            baseline = reductions[0].config if reductions else ""
            click.echo(f"\nreductions against {baseline!r} (per session, over the sessions where both completed):")
            print_table(table_rows(reductions), TABLE_COLUMNS)
        summaries = run.summaries_note()
        if summaries:
            click.echo(summaries)
        for line in noop_notes:
            note(f"warning: {line}")
        for line in run.spec.notes:
            note(f"note: {line}")
    if run.progress.failed_cells:
        raise CommandFailed(f"{run.progress.failed_cells} cell(s) failed; run again to retry them")


#: How `run` names where `--executor auto` computed the cells.
_WHERE = {"local": "in this process", "processes": "in a worker process per CPU"}


def _reductions(run: Any, frame: Any) -> list[Any] | None:
    """The spec's `[report]` reductions of the run (None when the spec has no `[report]`)."""
    if run.spec.report is None:
        return None
    from workbench.experiments.reductions import run_reductions

    return run_reductions(run.id, run.spec.report, db=run.db, results=frame)


@click.command("runs")
@click.option(
    "--delete",
    "delete",
    multiple=True,
    metavar="RUN_ID",
    help="Delete this run (its id or a unique prefix; repeat for several), then list what is left. "
    "The model cache is kept.",
)
@shared_options
def runs_cmd(delete: tuple[str, ...]) -> None:
    """List stored runs, newest first (or delete some with --delete)."""
    from workbench.experiments import delete_runs, runs

    if delete:
        deleted = delete_runs(delete, _db_must_exist())
        if options().as_json:
            print_json({"deleted": deleted})
            return
        for run_id, cells in deleted.items():
            click.echo(f"deleted run {run_id} ({cells} cell{'s' * (cells != 1)})")
    frame = runs(_db_must_exist())
    records = [{str(k): _cell(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]
    if options().as_json:
        print_json(records)
        return
    from workbench.formatting import format_value

    print_table(
        [
            {
                **r,
                "cells_done": format_value("cells", r["cells_done"]),
                "cells_total": format_value("cells", r["cells_total"]),
                "started_at": str(r["started_at"])[:19],
            }
            for r in records
        ],
        ["id", "name", "kind", "status", "cells_done", "cells_total", "started_at"],
    )


@click.command("export")
@click.argument("run_id", metavar="RUN_ID")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "parquet", "json", "html"]),
    default=None,
    help="[default: from the file's ending: .csv, .parquet, .json, .html]",
)
@click.option("--out", "-o", "out", required=True, metavar="PATH", help="The file to write.")
@click.option(
    "--level",
    type=click.Choice(["cells", "calls", "compactions"]),
    default="cells",
    show_default=True,
    help="Which table csv/parquet export.",
)
@click.option(
    "--all-sessions",
    is_flag=True,
    help="The html report's leaderboard and chart over every session, "
    "replays that stopped early included [default: the sessions where every config completed; tables "
    "keep every row and mark it in `in_complete_pairs`].",
)
@shared_options
def export_cmd(run_id: str, fmt: str | None, out: str, level: str, all_sessions: bool) -> None:
    """Export a run's results; html is a self-contained report with the charts."""
    from workbench.experiments import export
    from workbench.experiments.export import format_of

    fmt = fmt or format_of(out)

    path = export(run_id, fmt, out, db=_db_must_exist(), level=level, complete_only=not all_sessions)
    if options().as_json:
        print_json({"run_id": run_id, "format": fmt, "path": str(path), "bytes": path.stat().st_size})
    else:
        click.echo(f"wrote {path} ({path.stat().st_size:,} bytes)")


@click.command("regress")
@click.argument("experiment", metavar="EXPERIMENT.toml")
@click.option("--baseline", default=None, metavar="PATH", help="[default: baselines/NAME.json beside the spec]")
@click.option("--update", is_flag=True, help="Rewrite the baseline from a fresh run.")
@click.option("--verbose", "-v", is_flag=True, help="List every check, not only the failing ones.")
@shared_options
def regress_cmd(experiment: str, baseline: str | None, update: bool, verbose: bool) -> None:
    """Compare a fresh run with the stored baseline; exit 1 on regression, with a readable diff."""
    from workbench.experiments import regress

    bar = _progress_bar()
    try:
        with _noop_warnings() as noop_notes:
            report = regress(experiment, baseline=baseline, db=_db_must_exist(), update=update, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    if options().as_json:
        print_json(report.to_dict())
    else:
        click.echo(report.text(verbose=verbose))
    for line in noop_notes:
        note(f"warning: {line}")
    if not report.ok:
        raise CommandFailed("")


@click.command("compare")
@click.argument("run_a", metavar="RUN_A")
@click.argument("run_b", metavar="[RUN_B]", required=False)
@click.option("--configs", nargs=2, default=None, metavar="A B", help="Compare these two configs.")
@click.option("--metric", "metrics", multiple=True, help="Only these metrics (repeatable).")
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95, show_default=True)
@click.option("--all-sessions", is_flag=True, help=ALL_SESSIONS_HELP)
@shared_options
def compare_cmd(
    run_a: str,
    run_b: str | None,
    configs: tuple[str, str] | None,
    metrics: tuple[str, ...],
    confidence: float,
    all_sessions: bool,
) -> None:
    """Paired comparison per metric (B − A, in each metric's direction) with a confidence interval."""
    from workbench.experiments import compare

    result = compare(
        run_a,
        run_b,
        configs=configs or None,
        db=_db_must_exist(),
        metrics=list(metrics) or None,
        confidence=confidence,
        complete_only=not all_sessions,
    )
    if options().as_json:
        print_json(result.to_dict())
        return
    click.echo(f"A = {result.a}, B = {result.b}: {result.pairing}, {int(confidence * 100)} % bootstrap intervals")
    from workbench.experiments.charts import format_metric, format_metric_signed
    from workbench.formatting import format_p_value

    rows = [
        {
            "metric": m.metric,
            "better": m.direction,
            "A": format_metric(m.metric, m.mean_a),
            "B": format_metric(m.metric, m.mean_b),
            "B-A": format_metric_signed(m.metric, m.mean_delta),
            "interval": f"[{format_metric_signed(m.metric, m.ci_low)}, {format_metric_signed(m.metric, m.ci_high)}]",
            "p": format_p_value(m.p_value),
            "B better/worse/same": _counts(m),
            "verdict": m.verdict,
        }
        for m in result.metrics
    ]
    print_table(rows, ["metric", "better", "A", "B", "B-A", "interval", "p", "B better/worse/same", "verdict"])
    if result.note:
        click.echo(result.note)
    if result.stopped_note:
        click.echo(result.stopped_note)
    if any(result.unmatched.values()):
        note(f"unpaired cells left out: {result.unmatched}")


def _counts(metric: Any) -> str:
    """Sessions where B is better / worse / the same; a metric with no better direction (calls,
    compactions) has none better or worse, only sessions that differ."""
    if metric.direction == "none":
        return f"{metric.pairs - metric.unchanged} differ/{metric.unchanged} same"
    return f"{metric.improved}/{metric.regressed}/{metric.unchanged}"


COMMANDS = (run_cmd, runs_cmd, export_cmd, regress_cmd, compare_cmd)
