"""The SQL page: queries on a read-only connection with no file access, results and CSV download."""

from __future__ import annotations

import pytest
from app_support import build_database, page_script
from streamlit.testing.v1 import AppTest

from workbench.errors import StoreError
from workbench.ui.data import run_sql

pytestmark = pytest.mark.slow  # the app's SQL page (AppTest)


@pytest.fixture(scope="module")
def app_db(tmp_path_factory):
    return build_database(str(tmp_path_factory.mktemp("sql") / "wb.duckdb"))


@pytest.fixture
def sql_page(app_db, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DB", app_db)
    at = AppTest.from_string(page_script("sql"), default_timeout=60)
    at.run()
    assert not at.exception
    return at


def submit(at: AppTest, sql: str) -> AppTest:
    at.text_area(key="sql_text").set_value(sql)
    at.button[0].click().run()
    assert not at.exception
    return at


def test_query_shows_a_table_and_offers_csv(sql_page):
    at = submit(sql_page, "SELECT id, dataset FROM sessions WHERE dataset <> 'samples' ORDER BY id")
    frame = at.dataframe[0].value
    assert list(frame["id"]) == ["generated-12", "planted-html"]
    assert len(at.get("download_button")) == 1
    assert any("2 rows" in c.value for c in at.caption)


def test_the_example_query_runs(sql_page):
    at = sql_page
    at.button[0].click().run()
    assert not at.exception and not at.error
    assert set(at.dataframe[0].value["dataset"]) == {"samples", "planted", "generated"}


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELEC nonsense", "Parser Error"),
        ("SELECT * FROM read_csv('/etc/passwd')", "disabled by configuration"),
        ("COPY sessions TO '/tmp/leak.csv'", "disabled by configuration"),
        ("SET enable_external_access = true", "locked"),
        ("DELETE FROM sessions", "read-only"),
    ],
)
def test_errors_and_forbidden_statements_are_readable_messages(sql_page, sql, expected):
    at = submit(sql_page, sql)
    assert at.error and expected in at.error[0].value
    assert "Traceback" not in at.error[0].value


def test_run_sql_leaves_the_database_unchanged(app_db):
    with pytest.raises(Exception, match="read-only"):
        run_sql(app_db, "DROP TABLE sessions")
    frame, truncated = run_sql(app_db, "SELECT count(*) AS n FROM sessions")
    assert int(frame["n"][0]) > 0 and not truncated
    frame, truncated = run_sql(app_db, "SELECT * FROM range(20)", limit=5)
    assert len(frame) == 5 and truncated


def test_missing_database_is_a_store_error(tmp_path):
    with pytest.raises(StoreError):
        run_sql(str(tmp_path / "none.duckdb"), "SELECT 1")


@pytest.mark.parametrize(
    ("sql", "columns"),
    [
        ("SELECT 1 AS a, 2 AS a, 3 AS a_2", ["a", "a_3", "a_2"]),
        ("SELECT * FROM cells c JOIN sessions s ON c.session_id = s.id", None),  # no rows, the names still shared
        ("SELECT * FROM sessions a JOIN sessions b ON a.id = b.id LIMIT 3", None),
        ("SELECT s.id, t.id FROM sessions s JOIN sessions t USING (id) LIMIT 3", ["id", "id_2"]),
    ],
)
def test_columns_sharing_a_name_are_numbered_not_a_crash(sql_page, sql, columns):
    at = submit(sql_page, sql)
    assert not at.error, [e.value for e in at.error]
    shown = list(at.dataframe[0].value.columns)
    assert len(set(shown)) == len(shown)
    if columns is not None:
        assert shown == columns
    assert any("numbered" in c.value for c in at.caption)
