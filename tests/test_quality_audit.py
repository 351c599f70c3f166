"""The metric audit (quality/audit.py) and `workbench audit-metrics`."""

from __future__ import annotations

import json

from click.testing import CliRunner
from test_quality_task_state import PROSE, planted

from workbench.cli import main
from workbench.quality.audit import DEGRADATIONS, audit_sessions, audited_metrics
from workbench.store import Store


def test_the_sensitivity_table_on_planted_sessions():
    audit = audit_sessions([planted()])
    metrics, skipped = audited_metrics()
    assert set(skipped) >= {"judge_score", "continuation_match"}  # no evaluator: the model metrics are skipped
    frame = audit.to_frame()
    assert list(frame["metric"]) == metrics
    assert list(frame.columns) == ["metric", *DEGRADATIONS, "compactions"]
    assert audit.compactions == 1 and audit.degraded == dict.fromkeys(DEGRADATIONS, 1)
    shares = audit.sensitivity
    for degradation in DEGRADATIONS:
        assert shares["task_state_coverage"][degradation] == 1.0
    assert shares["task_state_task"]["drop_task"] == 1.0
    assert shares["task_state_constraints"]["drop_constraints"] == 1.0
    # the keyword list of equal tokens keeps more lexical facts than the prose summary: fact_retention prefers it
    assert shares["fact_retention"]["keyword_list"] == 0.0
    assert shares["fact_retention"]["empty"] == 1.0
    assert audit.notes and "recorded" in audit.notes[0]


def test_labels_give_each_metric_its_agreement():
    import pandas as pd

    from workbench.config import config_hash
    from workbench.quality.audit import RECORDED_CONFIG

    good, bad = planted(), planted(summary="Nothing much happened.", system="You are a careless agent.")
    assert good.id != bad.id
    labels = pd.DataFrame(
        {
            "session_id": [good.id, bad.id],
            "config_hash": [config_hash(RECORDED_CONFIG)] * 2,
            "compaction": [0, 0],
            "label": ["good", "bad"],
        }
    )
    audit = audit_sessions([good, bad], labels=labels)
    assert audit.labelled == 2
    assert audit.agreement["task_state_coverage"] == 1.0
    assert "label_agreement" in audit.to_frame().columns


def test_a_degradation_that_changes_nothing_is_not_counted():
    audit = audit_sessions(
        [planted(summary=PROSE.replace("The user said never change the public API of fetch_json.\n", ""))]
    )
    assert audit.degraded["drop_constraints"] == 0  # no message of the context states the constraint any more
    assert audit.sensitivity["task_state_constraints"]["drop_constraints"] is None
    without = audit_sessions([planted(summary="")])  # nothing written: nothing to replace or empty
    assert without.degraded["keyword_list"] == without.degraded["empty"] == 0
    assert without.sensitivity["task_state_coverage"]["empty"] is None


def test_the_audit_command(tmp_path):
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.import_sessions([planted()], dataset="planted")
    runner = CliRunner()
    shown = runner.invoke(main, ["audit-metrics", "--dataset", "planted", "--db", str(db)], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    header = next(line for line in shown.stdout.splitlines() if line.startswith("metric"))
    assert header.split() == ["metric", *DEGRADATIONS, "compactions"]
    assert any(line.startswith("task_state_coverage") for line in shown.stdout.splitlines())
    data = json.loads(runner.invoke(main, ["audit-metrics", "--db", str(db), "--json"], catch_exceptions=False).stdout)
    assert data["compactions"] == 1 and data["sensitivity"]["task_state_coverage"]["keyword_list"] == 1.0
    assert "judge_score" in data["skipped"]
