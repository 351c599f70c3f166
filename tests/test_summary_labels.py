"""Human labels of compaction summaries: the config hash they are keyed by, the store, the library, the exports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from builders import conversation

import workbench as wb
from workbench.config import config_hash, parse_config
from workbench.errors import ConfigError
from workbench.experiments import export, load_experiment, run_experiment
from workbench.labels import with_labels
from workbench.session import Session
from workbench.store import SUMMARY_LABEL_COLUMNS, Store, db

SPLIT = {
    "name": "split",
    "trigger": {"kind": "utilization", "ratio": 0.5},
    "strategy": {"kind": "summarize_split", "preserve": 0.4},
    "context_limit": 6000,
    "max_output": 500,
}


# -- the config hash -------------------------------------------------------------------------------


def test_a_config_hashes_alike_in_every_form_and_under_any_name():
    parsed = parse_config(SPLIT)
    assert config_hash(SPLIT) == config_hash(parsed) == config_hash(parsed.to_dict())
    assert config_hash({**SPLIT, "name": "renamed"}) == config_hash(SPLIT)
    assert config_hash("observation-masking") == config_hash(parse_config("observation-masking").to_dict())


@pytest.mark.parametrize(
    "change",
    [
        {"context_limit": 7000},
        {"strategy": {"kind": "summarize_split", "preserve": 0.5}},
        {"trigger": {"kind": "utilization", "ratio": 0.6}},
        {"summarizer": "openai/gpt-4o-mini"},
    ],
)
def test_what_changes_the_replay_changes_the_hash(change):
    assert config_hash({**SPLIT, **change}) != config_hash(SPLIT)


def test_the_hash_is_the_same_in_another_process():
    script = f"from workbench.config import config_hash; print(config_hash({SPLIT!r}))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
    assert other.stdout.strip() == config_hash(SPLIT)


def test_a_stored_spec_that_no_longer_parses_still_hashes():
    gone = {**parse_config(SPLIT).to_dict(), "strategy": {"kind": "a-kind-since-removed"}}
    assert config_hash(gone) == config_hash(dict(gone))
    with pytest.raises(ConfigError):
        config_hash("no-such-preset")


# -- the store -------------------------------------------------------------------------------------


def test_the_migration_creates_the_table():
    assert "0007_summary_labels" in [name for name, _ in db.MIGRATIONS]
    with Store(":memory:") as store:
        columns = [row[0] for row in store.connection.execute("DESCRIBE summary_labels").fetchall()]
    assert tuple(columns) == SUMMARY_LABEL_COLUMNS


def test_a_new_label_replaces_the_old_and_a_delete_removes_it():
    with Store(":memory:") as store:
        store.set_summary_label("s1", "h1", 2, "good", config="split", note="keeps the task")
        store.set_summary_label("s1", "h1", 3, "good", config="split")
        replaced = store.set_summary_label("s1", "h1", 2, "bad", config="split", note="  ")
        store.set_summary_label("s2", "h2", 0, "good", config="other")
        assert store.summary_label("s1", "h1", 2) == replaced
        assert (replaced.label, replaced.note) == ("bad", None)  # a blank note is no note
        frame = store.summary_labels()
        assert tuple(frame.columns) == SUMMARY_LABEL_COLUMNS
        assert list(zip(frame.session_id, frame.compaction, frame.label, strict=True)) == [
            ("s1", 2, "bad"),
            ("s1", 3, "good"),
            ("s2", 0, "good"),
        ]
        assert list(store.summary_labels(session_id="s1").compaction) == [2, 3]
        assert list(store.summary_labels(config_hash="h2").session_id) == ["s2"]
        assert store.delete_summary_label("s1", "h1", 2) is True
        assert store.delete_summary_label("s1", "h1", 2) is False
        assert store.summary_label("s1", "h1", 2) is None
        assert len(store.summary_labels()) == 2


@pytest.mark.parametrize(
    "session_id, compaction, label",
    [
        ("s1", 0, "fine"),
        ("s1", 0, "GOOD"),
        ("s1", -1, "good"),
        ("s1", 1.5, "good"),
        ("", 0, "good"),
    ],
)
def test_a_malformed_label_is_refused_and_nothing_stored(session_id, compaction, label):
    with Store(":memory:") as store:
        with pytest.raises(ConfigError):
            store.set_summary_label(session_id, "h1", compaction, label)
        assert store.summary_labels().empty


# -- the library ------------------------------------------------------------------------------------


@pytest.fixture
def labelled_db(tmp_path):
    session = Session.from_messages(conversation(24, result_chars=900), dataset="grid")
    path = str(tmp_path / "wb.duckdb")
    with Store(path) as store:
        store.import_sessions([session], dataset="grid")
    return path, session


def test_the_library_labels_a_replayed_compaction_under_its_config(labelled_db):
    path, session = labelled_db
    result = wb.replay(session, SPLIT)
    assert result.compactions, "the planted session must compact"
    stored = wb.label_summary(result.session_id, result.config, 0, "good", note="keeps the request", db=path)
    assert (stored.config_hash, stored.config) == (config_hash(SPLIT), "split")
    wb.label_summary(result.session_id, {**SPLIT, "name": "renamed"}, 0, "bad", db=path)  # the same config
    frame = wb.summary_labels(db=path)
    assert list(zip(frame.config, frame.label, frame.note, strict=True)) == [("renamed", "bad", None)]
    assert wb.summary_labels(db=path, config="observation-masking").empty
    assert len(wb.summary_labels(db=path, session_id=session.id, config=SPLIT)) == 1


def test_with_labels_marks_only_the_labelled_compaction():
    compactions = pd.DataFrame(
        {
            "session_id": ["s1", "s1", "s1", "s2"],
            "config": ["a", "a", "b", "a"],
            "event_index": [0, 1, 0, 0],
            "summary": ["x", "y", "z", "w"],
            "error": [None] * 4,
        }
    )
    labels = pd.DataFrame(
        [
            {
                "session_id": "s1",
                "config_hash": "ha",
                "config": "old-name",
                "compaction": 1,
                "label": "bad",
                "note": "lost the constraint",
                "labelled_at": pd.Timestamp(0),
            }
        ]
    )
    shown = with_labels(compactions, labels, {"a": "ha", "b": "hb"})
    assert list(shown.columns) == ["session_id", "config", "event_index", "summary", "label", "label_note", "error"]
    assert shown["label"].fillna("").tolist() == ["", "bad", "", ""]
    assert shown["label_note"].fillna("").tolist() == ["", "lost the constraint", "", ""]


# -- the exports -----------------------------------------------------------------------------------


def test_labels_export_with_the_run_in_every_format(grid_db):
    path, spec, ids = grid_db
    run = run_experiment(spec, db=str(path))
    split = next(cell.config for cell in load_experiment(spec).configs if cell.name == "split")
    wb.label_summary(ids[1], split, 0, "bad", note="drops <the> task", db=str(path))
    wanted = (ids[1], "split", 0)

    def labelled(rows: list[dict]) -> dict[tuple, tuple]:
        return {
            (r["session_id"], r["config"], int(r["event_index"])): (r["label"], r["label_note"])
            for r in rows
            if isinstance(r["label"], str)
        }

    for fmt in ("csv", "parquet"):
        target = export(run.id, fmt, path.parent / f"compactions.{fmt}", db=str(path), level="compactions")
        frame = pd.read_csv(target) if fmt == "csv" else pd.read_parquet(target)
        assert {"label", "label_note"} <= set(frame.columns)
        assert labelled(frame.to_dict(orient="records")) == {wanted: ("bad", "drops <the> task")}, fmt
        assert frame["label"].isna().sum() == len(frame) - 1
    document = json.loads(export(run.id, "json", path.parent / "run.json", db=str(path)).read_text())
    assert labelled(document["compactions"]) == {wanted: ("bad", "drops <the> task")}
    report = export(run.id, "html", path.parent / "run.html", db=str(path)).read_text()
    assert "labelled bad: drops &lt;the&gt; task" in report
