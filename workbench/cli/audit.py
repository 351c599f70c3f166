"""`workbench audit-metrics`: does each quality metric notice when a compacted context loses what an agent needs?

Prints the sensitivity table of `workbench.quality.audit` (metrics x controlled degradations: the
share of compactions where the metric ranks the intact context above the degraded one) and, when
the database holds human labels, each metric's agreement with them.
"""

from __future__ import annotations

import click

from workbench.cli.common import CommandFailed, note, options, print_json, print_table, shared_options


def _shown(value: object) -> object:
    if isinstance(value, float) and value == value:
        return f"{value:.2f}"
    return "—" if value is None or isinstance(value, float) else value


@click.command("audit-metrics")
@click.option("--dataset", default=None, help="audit the sessions of this dataset (default: every dataset)")
@click.option(
    "--evaluator",
    default=None,
    help="model of the model metrics (judge_score, continuation_match); without one they are skipped",
)
@shared_options
def audit_metrics_cmd(dataset: str | None, evaluator: str | None) -> None:
    """Per quality metric, the share of compactions where it ranks the intact compacted context above
    each controlled degradation (drop the task / the constraints / the progress and next step;
    replace the summary by a keyword list or random removed text of equal tokens, or by nothing)."""
    from workbench.experiments.audit import audit_metrics
    from workbench.store.db import check_database_path

    path = options().db_path
    check_database_path(path, create=False)
    audit = audit_metrics(dataset, db=path, evaluator=evaluator)
    if not audit.compactions:
        raise CommandFailed(f"no compaction to audit in {'dataset ' + repr(dataset) if dataset else 'the database'}")
    if options().as_json:
        print_json(audit.to_dict())
        return
    for line in audit.notes:
        note(line)
    for metric, why in audit.skipped.items():
        note(f"{metric} skipped: {why}")
    frame = audit.to_frame()
    rows = [{str(column): _shown(value) for column, value in row.items()} for row in frame.to_dict(orient="records")]
    click.echo(
        f"{audit.compactions} compactions of {audit.sessions} sessions; share ranked intact above each "
        "degradation (ties are not above; — : nothing to compare)"
    )
    print_table(rows, list(frame.columns))
    click.echo("compactions each degradation changed: " + ", ".join(f"{d} {n}" for d, n in audit.degraded.items()))


COMMANDS = (audit_metrics_cmd,)
