"""The app's navigation and the Sessions page, rendered with AppTest over a temporary database."""

from __future__ import annotations

import pytest
from app_support import APP, HOSTILE, build_database, page_script
from streamlit.testing.v1 import AppTest

from workbench import samples
from workbench.errors import StoreError
from workbench.store import Store
from workbench.ui.data import db_path_from_args, load_session

pytestmark = pytest.mark.slow  # the app's pages (AppTest)


@pytest.fixture(scope="module")
def app_db(tmp_path_factory):
    return build_database(str(tmp_path_factory.mktemp("app") / "wb.duckdb"))


@pytest.fixture
def sessions_page(app_db, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DB", app_db)
    at = AppTest.from_string(page_script("sessions"), default_timeout=60)
    at.run()
    assert not at.exception
    return at


def test_db_path_from_args(monkeypatch):
    monkeypatch.setenv("WORKBENCH_DB", "/tmp/from-env.duckdb")
    assert db_path_from_args(["--db", "x.duckdb"]) == "x.duckdb"
    assert db_path_from_args(["unrelated", "-q"]) == "/tmp/from-env.duckdb"


def test_app_opens_on_the_sessions_page(app_db, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DB", app_db)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    assert at.title[0].value == "Compaction Workbench"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Sessions"] == str(samples.DEFAULT_N + 2)


def test_every_page_path_opens_its_page(app_db, monkeypatch):
    """A URL path resolves the way Streamlit resolves a browser's (by `url_pathname`): /sessions too,
    though the default page is served at / (its own url_path is reserved, never served)."""
    from streamlit.runtime.pages_manager import PagesManager

    monkeypatch.setenv("WORKBENCH_DB", app_db)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    registered = at._registered_pages  # what st.navigation gave the pages manager
    titles = {
        "sessions": "Compaction Workbench",
        "compare": "Compare",
        "experiments": "Experiments",
        "regression": "Regression",
        "sql": "SQL",
    }
    for name, title in titles.items():
        manager = PagesManager(APP)
        manager.set_script_intent("", name)
        found = manager.set_pages_and_resolve(registered)
        assert found is not None and found["url_pathname"] == name, f"/{name} is not found"
        at._page_hash = found["page_script_hash"]
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.title[0].value == title


def test_pages_explain_a_database_written_by_a_run_of_the_app(tmp_path, monkeypatch):
    """While a run launched from the app holds DuckDB's write connection (in this process), the pages
    say to wait for it rather than show the store's refusal to open it read-only."""
    from workbench.store import db

    path = build_database(str(tmp_path / "wb.duckdb"))
    monkeypatch.setenv("WORKBENCH_DB", path)

    def busy_message(at: AppTest) -> None:
        assert not at.exception, [e.value for e in at.exception]
        assert not at.error, [e.value for e in at.error]
        assert any("wait for it to finish" in i.value for i in at.info), [i.value for i in at.info]

    writer = db.connect(path)  # what an experiment's runner holds while it runs
    try:
        for module in ("sessions", "compare", "sql"):
            at = AppTest.from_string(page_script(module), default_timeout=60)
            at.run()
            busy_message(at)
        with pytest.raises(StoreError, match="wait for it to finish"):
            load_session(path, "generated-12")
    finally:
        writer.close()
    at = AppTest.from_string(page_script("sessions"), default_timeout=60)
    at.run()  # the overview read (and cached) before the next run starts
    assert not at.exception and not at.info
    writer = db.connect(path)
    try:
        assert at.selectbox(key="session").value == "generated-12"
        at.selectbox(key="session").set_value("planted-html").run()  # its messages: a read while busy
        busy_message(at)
    finally:
        writer.close()


def test_page_lists_datasets_and_sessions_with_sizes(sessions_page, app_db):
    at = sessions_page
    datasets_frame = at.dataframe[0].value
    assert sorted(datasets_frame["name"]) == ["generated", "planted", "samples"]
    sessions_frame = at.dataframe[1].value
    with Store(app_db, read_only=True) as store:
        ids = [r["id"] for r in store.session_rows()]
    assert sorted(sessions_frame["id"]) == sorted(ids)
    planted = sessions_frame.set_index("id").loc["planted-html"]
    assert planted["recorded_compactions"] == 2
    with Store(app_db, read_only=True) as store:
        assert planted["observations"] == sum(m.is_observation for m in store.load_session("planted-html").messages) > 0
    assert planted["characters"] > 3 * len(HOSTILE)
    assert planted["format"] == "openai"


def test_filters_narrow_the_session_list(sessions_page, app_db):
    at = sessions_page
    at.checkbox(key="only_recorded").check().run()
    assert not at.exception
    with Store(app_db, read_only=True) as store:
        recorded = {r["id"] for r in store.session_rows() if r["recorded_compactions"]}
    assert "planted-html" in recorded and "generated-12" not in recorded
    assert set(at.dataframe[1].value["id"]) == recorded
    at.checkbox(key="only_recorded").uncheck().run()
    at.selectbox(key="dataset").set_value("generated").run()
    assert list(at.dataframe[1].value["id"]) == ["generated-12"]
    at.text_input(key="search").set_value("no-such-id").run()
    assert not at.exception
    assert any("No session matches" in i.value for i in at.info)


def test_viewer_shows_roles_tokens_and_pages(sessions_page, app_db):
    at = sessions_page
    with Store(app_db, read_only=True) as store:
        target = max(store.session_rows(dataset="samples"), key=lambda r: r["messages"])["id"]
    at.selectbox(key="session").set_value(target).run()
    assert not at.exception
    assert any(target in h.value for h in at.subheader)
    roles = {c.name for c in at.chat_message}
    assert {"system", "user", "assistant", "tool"} <= roles
    assert len(at.chat_message) <= 40  # paged
    captions = [c.value for c in at.caption]
    assert any(" tokens · " in c and " so far" in c for c in captions)
    assert at.number_input(key=f"page:{target}").value == 1


def test_session_text_is_shown_literally_with_recorded_compactions_marked(sessions_page):
    at = sessions_page
    at.selectbox(key="session").set_value("planted-html").run()
    assert not at.exception
    shown = [t.value for t in at.text] + [c.value for c in at.code]
    assert any(HOSTILE in value for value in shown)
    assert not [m for m in at.markdown if "<script>" in m.value]  # never handed to markdown
    markers = [w.value for w in at.warning if "Recorded compaction" in w.value]
    assert len(markers) == 2
    assert "before call 2" in markers[0] and "1,234 tokens before" in markers[0]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Recorded compactions"] == "2"


def test_roles_filter_belongs_to_the_session_viewed(sessions_page):
    at = sessions_page
    at.selectbox(key="session").set_value("planted-html").run()
    at.multiselect(key="roles:planted-html").set_value(["assistant"]).run()
    assert not at.exception
    assert {c.name for c in at.chat_message} == {"assistant"}
    at.selectbox(key="session").set_value("generated-12").run()
    assert not at.exception
    roles = {c.name for c in at.chat_message}
    assert "tool" in roles and "user" in roles  # the other session's filter did not follow
    at.selectbox(key="session").set_value("planted-html").run()
    assert {c.name for c in at.chat_message} == {"assistant"}  # and each session keeps its own


def test_page_without_database_explains_what_to_do(tmp_path, monkeypatch):
    missing = tmp_path / "none.duckdb"
    monkeypatch.setenv("WORKBENCH_DB", str(missing))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    assert "workbench init" in at.info[0].value
    assert not missing.exists()  # the page never creates the database


def test_folder_import_reports_each_file_and_shows_the_new_sessions(tmp_path, monkeypatch):
    from builders import conversation

    from workbench.samples import write_dataset
    from workbench.session import Session

    path = build_database(str(tmp_path / "wb.duckdb"))
    folder = tmp_path / "recordings"
    sessions = [Session.from_messages(conversation(3 + i), dataset="fresh") for i in range(2)]
    write_dataset(sessions, folder, name="fresh")
    (folder / "broken.jsonl").write_text('{"messages": [\n')
    monkeypatch.setenv("WORKBENCH_DB", path)
    at = AppTest.from_string(page_script("sessions"), default_timeout=60)
    at.run()
    at.text_input(key="import_folder").set_value(str(folder)).run()
    at.button(key="import_run").click().run()
    assert not at.exception
    report = at.dataframe[0].value  # the import report comes first, in the import panel
    assert sorted(report["file"]) == sorted(["broken.jsonl", "fresh.jsonl.gz"])
    assert int(report.set_index("file").loc["fresh.jsonl.gz", "sessions"]) == 2
    assert any("broken.jsonl" in e.value for e in at.error)
    with Store(path, read_only=True) as store:
        assert {s.id for s in sessions} <= set(store.session_ids())
    at.run()
    assert "fresh" in set(at.dataframe[0].value["name"])
    at.text_input(key="import_dataset").set_value("other").run()
    at.button(key="import_run").click().run()  # the same recordings again, under another name: nothing added
    assert any("2 already stored in dataset 'fresh', not added to 'other'" in i.value for i in at.info)


def test_import_of_a_missing_folder_is_a_message(sessions_page):
    at = sessions_page
    at.text_input(key="import_folder").set_value("/no/such/folder").run()
    at.button(key="import_run").click().run()
    assert not at.exception
    assert any("No such file or folder" in e.value for e in at.error)


def test_counts_show_thousands_separators(sessions_page):
    """The tables' counts read like the totals above them (3,434, not 3434)."""
    import json

    for table, column in ((0, "messages"), (1, "characters")):
        config = json.loads(sessions_page.dataframe[table].proto.columns)
        assert config[column]["type_config"]["format"] == "localized", config.get(column)
