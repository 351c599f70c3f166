"""Human labels in the app: a researcher rates a compaction's summary on the Compare page; the label is
stored (read back through the Store), shown again, exported with a run of the same config, and removable."""

from __future__ import annotations

import json

import pytest
from app_support import build_database, page_script
from streamlit.testing.v1 import AppTest

from workbench.config import config_hash, with_preset
from workbench.experiments import export, run_experiment
from workbench.store import Store

pytestmark = pytest.mark.slow  # the app's labelling (AppTest)


SESSION = "generated-12"
WINDOW = {"context_limit": 1500, "max_output": 200}
PRESETS = ["observation-masking", "ptc-runner-trim"]


@pytest.fixture
def replayed(tmp_path, monkeypatch):
    path = build_database(str(tmp_path / "wb.duckdb"))
    monkeypatch.setenv("WORKBENCH_DB", path)
    at = AppTest.from_string(page_script("compare"), default_timeout=120)
    at.run()
    at.selectbox(key="compare_session").set_value(SESSION)
    at.number_input(key="compare_limit").set_value(WINDOW["context_limit"])
    at.number_input(key="compare_max_output").set_value(WINDOW["max_output"])
    at.multiselect(key="compare_presets").set_value(PRESETS)
    at.run()
    at.button(key="compare_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at, path


def label_key(at: AppTest, digest: str) -> str:
    """The key prefix of the label widgets of the compaction shown for the config with hash `digest`."""
    prefix = f"compare_label:{SESSION}:{digest}:"
    keys = [radio.key for radio in at.radio if (radio.key or "").startswith(prefix)]
    assert len(keys) == 1, [radio.key for radio in at.radio]
    return keys[0].removesuffix(":verdict")


def stored_labels(path: str):
    with Store(path, read_only=True) as store:
        return store.summary_labels()


def test_a_label_set_in_the_app_is_stored_shown_and_exported(replayed):
    at, path = replayed
    digest = config_hash(with_preset({"preset": "observation-masking", **WINDOW}))
    key = label_key(at, digest)
    compaction = int(key.rsplit(":", 1)[1])
    assert any(c.value == "Not labelled yet." for c in at.caption)
    assert at.button(key=f"{key}:save").disabled  # no verdict chosen yet

    at.radio(key=f"{key}:verdict").set_value("bad").run()  # choosing reruns, which enables the button
    at.text_input(key=f"{key}:note").input("drops the user's request")
    at.button(key=f"{key}:save").click().run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]

    labels = stored_labels(path)
    assert labels[["session_id", "config_hash", "config", "compaction", "label", "note"]].to_dict("records") == [
        {
            "session_id": SESSION,
            "config_hash": digest,
            "config": "observation-masking",
            "compaction": compaction,
            "label": "bad",
            "note": "drops the user's request",
        }
    ]
    assert any(
        c.value.startswith("Labelled bad (") and c.value.endswith(": drops the user's request") for c in at.caption
    )

    at.run()  # a full rerun: the label shows again, and the write did not make the replays look outdated
    assert at.radio(key=f"{key}:verdict").value == "bad"
    assert not any("settings changed" in c.value for c in at.caption)

    run = run_experiment(
        {"name": "labelled", "dataset": "generated", "config": [{"preset": "observation-masking", **WINDOW}]}, db=path
    )
    document = json.loads(export(run.id, "json", f"{path}.json", db=path).read_text())
    exported = [
        (row["session_id"], row["event_index"], row["label"], row["label_note"])
        for row in document["compactions"]
        if row["label"] is not None
    ]
    assert exported == [(SESSION, compaction, "bad", "drops the user's request")]


def test_a_label_is_replaced_then_removed(replayed):
    at, path = replayed
    digest = config_hash(with_preset({"preset": "ptc-runner-trim", **WINDOW}))
    key = label_key(at, digest)
    at.radio(key=f"{key}:verdict").set_value("good").run()
    at.button(key=f"{key}:save").click().run()
    at.radio(key=f"{key}:verdict").set_value("bad").run()
    at.button(key=f"{key}:save").click().run()
    assert stored_labels(path)[["config", "label", "note"]].to_dict("records") == [
        {"config": "ptc-runner-trim", "label": "bad", "note": None}
    ]
    at.button(key=f"{key}:remove").click().run()
    assert not at.exception
    assert stored_labels(path).empty
    assert any(c.value == "Not labelled yet." for c in at.caption)


def test_the_metric_audit_reads_a_label_set_in_the_app(replayed):
    """A label made on the Compare page counts in `audit-metrics` of the same config: each metric's
    agreement with it is reported."""
    import workbench as wb

    at, path = replayed
    config = {"preset": "observation-masking", **WINDOW}
    key = label_key(at, config_hash(with_preset(config)))
    at.radio(key=f"{key}:verdict").set_value("good").run()
    at.button(key=f"{key}:save").click().run()
    audit = wb.audit_metrics("generated", db=path, where=f"id = '{SESSION}'", config=config)
    assert audit.labelled == 1
    assert set(audit.agreement) >= {"task_state_coverage", "fact_retention"}
    assert "label_agreement" in audit.to_frame().columns
