"""The metric audit over stored sessions: `wb.audit_metrics` and `workbench audit-metrics`.

The audit itself (`workbench.quality.audit.audit_sessions`) works on sessions; this reads them, and
the human labels of their summaries, from the database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.quality.audit import MetricAudit, audit_sessions

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import pandas as pd

    from workbench.session import Session


def audit_metrics(
    dataset: str | None = None,
    db: Any = None,
    *,
    where: str | None = None,
    sessions: Sequence[Session] | None = None,
    config: Mapping[str, Any] | str | None = None,
    evaluator: str | None = None,
    labels: pd.DataFrame | None = None,
    seed: int = 0,
) -> MetricAudit:
    """The metric audit (`workbench.quality.audit`) of the stored sessions of `dataset` (every dataset
    when None; or of the `sessions` given), with the stored human labels unless `labels` is given."""
    if sessions is None:
        from workbench.access import sessions as stored
        from workbench.labels import summary_labels

        sessions = stored(dataset, where=where, db=db)
        if labels is None:
            labels = summary_labels(db)
    return audit_sessions(sessions, config=config, evaluator=evaluator, labels=labels, seed=seed)


__all__ = ["audit_metrics"]
