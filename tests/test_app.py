"""The Streamlit sessions page, rendered with AppTest over a temporary database."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from workbench import samples
from workbench.cli import init_database
from workbench.store import Store
from workbench.ui.sessions import db_path_from_args

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("app") / "wb.duckdb")
    init_database(path)
    return path


def test_db_path_from_args(monkeypatch):
    monkeypatch.setenv("WORKBENCH_DB", "/tmp/from-env.duckdb")
    assert db_path_from_args(["--db", "x.duckdb"]) == "x.duckdb"
    assert db_path_from_args(["unrelated", "-q"]) == "/tmp/from-env.duckdb"


def test_page_lists_sample_sessions_and_shows_one(sample_db, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DB", sample_db)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    assert at.title[0].value == "Compaction Workbench"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Sessions"] == str(samples.DEFAULT_N)
    datasets_frame = at.dataframe[0].value
    assert list(datasets_frame["name"]) == ["samples"]
    sessions_frame = at.dataframe[1].value
    with Store(sample_db, read_only=True) as store:
        ids = [r["id"] for r in store.session_rows()]
    assert sorted(sessions_frame["id"]) == sorted(ids)

    picker = at.selectbox(key="session")
    target = ids[-1]
    picker.set_value(target).run()
    assert not at.exception
    assert any(target in h.value for h in at.subheader)
    roles = {c.name for c in at.chat_message}
    assert {"system", "user", "assistant", "tool"} <= roles
    assert len(at.chat_message) <= 40  # paged


def test_page_without_database_explains_what_to_do(tmp_path, monkeypatch):
    missing = tmp_path / "none.duckdb"
    monkeypatch.setenv("WORKBENCH_DB", str(missing))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    assert "workbench init" in at.info[0].value
    assert not missing.exists()  # the page never creates the database
