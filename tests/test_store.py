"""The DuckDB store: round trips, duplicates, transactions, the file lock, token caches, migrations."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workbench.errors import ConfigError, SessionFilterError, StoreError
from workbench.session import NO_RESULT_TEXT, Message, Probe, Session, ToolCall
from workbench.store import Store, db, sessions_from_tables
from workbench.store import writer as store_module
from workbench.tokens import message_tokens


def rich_session(tag: str = "a", n_steps: int = 3) -> Session:
    """Every message shape: parts (text + image), None content, tool calls, metadata, pins, origins."""
    messages = [
        Message(role="system", content=f"You are agent {tag}.", importance=10.0),
        Message(
            role="user",
            content=(
                {"type": "text", "text": f"look at this {tag}"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ),
            metadata={"timestamp": "2025-01-01T00:00:00Z"},
        ),
    ]
    for i in range(n_steps):
        calls = (
            ToolCall(id=f"{tag}{i}a", name="read_file", arguments=json.dumps({"path": f"src/{i}.py"})),
            ToolCall(id=f"{tag}{i}b", name="bash", arguments='{"command": "ls -la"}'),
        )
        messages.append(
            Message(
                role="assistant",
                content=None if i % 2 else f"step {i} ✓ naïve",
                tool_calls=calls,
                metadata={"usage": {"prompt_tokens": 100 + i, "completion_tokens": 7}, "finish_reason": "tool_calls"},
            )
        )
        messages.append(
            Message(role="tool", content=f"file {i}\n" + "x = 1\n" * 50, tool_call_id=f"{tag}{i}a", name="read_file")
        )
        messages.append(Message(role="tool", content="", tool_call_id=f"{tag}{i}b", name="bash", importance=-2.5))
    messages.append(Message(role="assistant", content="Summary so far", origin="compacted_synthetic", importance=5.0))
    messages.append(Message(role="assistant", content='done \x00 \u2028 "quoted" \\ 😀'))
    return Session.from_messages(
        messages,
        dataset="unit",
        format="openai",
        probes=[Probe("Which file?", "src/1.py", "artifact", 2), Probe("What first?", f"look at this {tag}", "recall")],
        tools=({"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},),
        metadata={"model": "gpt-x", "source": f"{tag}.jsonl", "nested": {"a": [1, 2.5, None]}},
    )


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "wb.duckdb")


def test_round_trip_keeps_everything(db_path):
    sessions = [rich_session("a"), rich_session("b", n_steps=5)]
    with Store(db_path) as store:
        report = store.import_sessions(sessions)
        assert (report.sessions, report.duplicates) == (2, 0)
        assert report.messages == sum(len(s.messages) for s in sessions)
        assert report.calls == sum(s.calls for s in sessions)
        assert set(report.session_ids) == {s.id for s in sessions}
        for original in sessions:
            loaded = store.load_session(original.id)
            assert loaded == original
            assert loaded.messages == original.messages
            assert loaded.probes == original.probes
            assert loaded.tools == original.tools
            assert loaded.metadata == original.metadata
            assert isinstance(loaded.messages[1].content, tuple)  # parts kept as parts
            assert loaded.messages[5].content is None and loaded.messages[5].tool_calls
            assert loaded.messages[-1].text == original.messages[-1].text
        by_id = lambda s: s.id
        assert sorted(store.load_sessions(dataset="unit"), key=by_id) == sorted(sessions, key=by_id)
        assert store.load_sessions(dataset="nope") == []


def test_content_is_stored_once(db_path):
    session = rich_session()
    with Store(db_path) as store:
        store.import_sessions([session])
        rows = store.connection.execute(
            "SELECT idx, content, parts::VARCHAR, tool_calls::VARCHAR FROM messages ORDER BY idx"
        ).fetchall()
        texts = [
            r[0]
            for r in store.connection.execute(
                "SELECT text FROM message_texts WHERE session_id = ? ORDER BY idx", [session.id]
            ).fetchall()
        ]
        columns = {
            r[0]
            for r in store.connection.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'messages'"
            ).fetchall()
        }
    assert "text" not in columns
    assert rows[0][1:3] == ("You are agent a.", None)  # a string: only in `content`
    assert rows[1][1] is None and json.loads(rows[1][2])[1]["type"] == "image_url"  # parts: only in `parts`
    assert json.loads(rows[2][3])[0]["function"]["name"] == "read_file"
    assert rows[5][1:3] == (None, None)  # no content
    assert texts == [m.text for m in session.messages]


def test_migration_0003_keeps_the_content_of_an_old_database(tmp_path):
    """A database written by the 0001 schema (content as JSON plus `text`) reads back the same."""
    path = str(tmp_path / "old.duckdb")
    session = rich_session()
    con = duckdb.connect(path)
    con.execute(
        "CREATE TABLE schema_migrations (name VARCHAR PRIMARY KEY, applied_at TIMESTAMP DEFAULT current_timestamp)"
    )
    for name, sql in db.MIGRATIONS[:2]:
        con.execute(sql)
        con.execute("INSERT INTO schema_migrations (name) VALUES (?)", [name])
    con.execute(
        "INSERT INTO sessions (id, dataset, format, message_count, call_count) VALUES (?, 'unit', 'openai', ?, ?)",
        [session.id, len(session.messages), session.calls],
    )
    for idx, m in enumerate(session.messages):
        content = (
            None
            if m.content is None
            else json.dumps(m.content if isinstance(m.content, str) else [dict(p) for p in m.content])
        )
        calls = json.dumps([c.to_openai() for c in m.tool_calls]) if m.tool_calls else None
        con.execute(
            "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                session.id,
                idx,
                m.role,
                content,
                m.text,
                calls,
                m.tool_call_id,
                m.name,
                m.origin,
                m.importance,
                json.dumps(dict(m.metadata)) if m.metadata else None,
            ],
        )
    con.close()
    with pytest.raises(StoreError, match="older schema .*0003_content_once"):
        Store(path, read_only=True)  # a reader cannot upgrade it
    with Store(path) as store:
        assert db.schema_version(store.connection) == db.MIGRATIONS[-1][0]
        loaded = store.load_session(session.id)
        texts = [r[0] for r in store.connection.execute("SELECT text FROM message_texts ORDER BY idx").fetchall()]
    assert loaded.messages == session.messages
    assert texts == [m.text for m in session.messages]


@pytest.mark.parametrize(
    "name, data",
    [
        ("sessions.csv", b"id,role\n1,user\n"),
        ("sessions.json", b'[{"role": "user", "content": "hi"}]'),
        ("sessions.jsonl", b'{"messages": []}\n'),
        ("sessions.parquet", b"PAR1\x00\x00\x00\x00PAR1"),
        ("notes.txt", b"just some notes"),
    ],
)
def test_a_file_that_is_not_a_duckdb_database_is_refused_untouched(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(db.NotADatabaseError, match="not a DuckDB database"):
        Store(path)
    with pytest.raises(db.NotADatabaseError):
        Store(path, read_only=True)
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_create_false_refuses_a_missing_database_and_creates_nothing(tmp_path):
    path = tmp_path / "sub" / "wb.duckdb"
    with pytest.raises(db.MissingDatabaseError, match="does not exist"):
        Store(path, create=False)
    assert list(tmp_path.iterdir()) == []
    with Store(path):
        pass
    with Store(path, create=False) as store:
        assert store.count() == 0


def test_sessions_frame_datasets_and_counts(db_path):
    sessions = [rich_session("a"), rich_session("b", n_steps=5)]
    with Store(db_path) as store:
        store.import_sessions(sessions[:1])
        store.import_sessions(sessions[1:], dataset="other")
        frame = store.sessions()
        assert {"id", "dataset", "format", "messages", "calls", "source", "imported_at"} <= set(frame.columns)
        assert sorted(frame.dataset) == ["other", "unit"]
        assert frame.set_index("id").loc[sessions[0].id, "source"] == "a.jsonl"
        assert list(store.sessions(dataset="other").id) == [sessions[1].id]
        datasets = store.datasets().set_index("name")
        assert datasets.loc["unit", "sessions"] == 1 and datasets.loc["other", "calls"] == sessions[1].calls
        assert store.count() == 2 and store.count(dataset="other") == 1
        assert store.count("messages") == sum(len(s.messages) for s in sessions)
        assert store.count("calls", dataset="unit") == sessions[0].calls
        assert store.count("probes") == 4
        assert [s.id for s in store.load_sessions(where="calls > 5")] == [sessions[1].id]
        assert store.load_sessions(dataset="unit", where="call_count > 5") == []
        assert [s.id for s in store.load_sessions(where="calls > 5 -- the long ones")] == [sessions[1].id]
        with pytest.raises(StoreError, match="count"):
            store.count("tokens")
        for bad in ("no_such_column = 1", "calls >", "calls > 1; DROP TABLE sessions", "calls > 'many'"):
            with pytest.raises(SessionFilterError, match="sessions cannot run: .*; columns: id, dataset") as caught:
                store.load_sessions(where=bad)
            assert repr(bad) in str(caught.value) and "LINE" not in str(caught.value)  # not the query built around it
            assert isinstance(caught.value, StoreError) and isinstance(caught.value, ConfigError)
        assert store.count() == 2
        with pytest.raises(StoreError, match="no session"):
            store.load_session("missing")


def test_duplicates_are_skipped_and_counted(db_path):
    sessions = [rich_session("a"), rich_session("b")]
    with Store(db_path) as store:
        first = store.import_sessions(sessions)
        again = store.import_sessions([*sessions, rich_session("c"), rich_session("c")])
        assert first.sessions == 2
        assert (again.sessions, again.duplicates) == (1, 3)
        dataset = store.session_rows()[0]["dataset"]
        assert (again.repeated, again.stored_in) == (1, {dataset: 2})
        assert (
            f"skipped 3 duplicate sessions: 1 met more than once in this import; 2 already stored in dataset "
            f"{dataset!r}"
        ) in again.summary()
        assert store.count() == 3
        assert store.count("messages") == sum(len(s.messages) for s in [*sessions, rich_session("c")])


def test_a_session_imported_into_another_dataset_says_where_it_is_stored(db_path):
    """A session is stored once: importing it again under a new dataset name adds nothing, and the
    report says which dataset holds it rather than leaving the new dataset mysteriously empty."""
    with Store(db_path) as store:
        store.import_sessions([rich_session("a"), rich_session("b")], dataset="first")
        again = store.import_sessions([rich_session("a"), rich_session("c")], dataset="second")
        assert (again.sessions, again.stored_in, again.to_dict()["already_stored"]) == (1, {"first": 1}, {"first": 1})
        assert again.duplicates_text() == (
            "skipped 1 duplicate session: 1 already stored in dataset 'first', not added to 'second' "
            "(a session is stored once, in the dataset it was first imported into)"
        )
        same = store.import_sessions([rich_session("b")], dataset="first")
        assert same.duplicates_text() == "skipped 1 duplicate session: 1 already stored in dataset 'first'"
        assert store.import_sessions([rich_session("d")]).duplicates_text() == "skipped 0 duplicate sessions"


def _recording(n_steps: int, *, session_id: str = "live-1", stub_last: bool = False) -> Session:
    """A recording of one agent session as read after `n_steps` steps (the same session id, source and
    format every time); `stub_last`: the last call's result was not written yet (a stub stands in)."""
    messages = [Message(role="system", content="You are a coding agent."), Message(role="user", content="fix it")]
    for i in range(n_steps):
        messages.append(
            Message(
                role="assistant",
                content=f"step {i}",
                tool_calls=(ToolCall(id=f"c{i}", name="bash", arguments='{"command": "ls"}'),),
            )
        )
        text = NO_RESULT_TEXT if stub_last and i == n_steps - 1 else f"result {i}"
        messages.append(Message(role="tool", content=text, tool_call_id=f"c{i}", name="bash"))
    return Session.from_messages(
        messages, format="claude-code", dataset="first", metadata={"session_id": session_id, "source": "live.jsonl"}
    )


def test_a_recording_imported_again_after_it_grew_replaces_its_earlier_import(db_path):
    """A live session read twice is one session: the longer read replaces the shorter one (keeping its
    dataset, and saying so); a different recording of the same file, or a shorter read, is not a later version."""
    with Store(db_path) as store:
        early = _recording(3, stub_last=True)
        store.import_sessions([early])
        grown = _recording(5)
        report = store.import_sessions([grown], dataset="second")
        assert (report.sessions, report.replaced) == (1, {early.id: grown.id})
        assert store.session_ids() == [grown.id] and store.session_rows()[0]["dataset"] == "first"
        assert f"{early.id[:8]} -> {grown.id[:8]}" in report.summary() and "stays in its dataset" in report.summary()
        assert report.to_dict()["replaced"] == [{"old": early.id, "new": grown.id}]
        assert store.load_session(grown.id).messages == grown.messages

        shorter = _recording(4)
        other = _recording(6, session_id="live-2")  # another session recorded in the same file
        report = store.import_sessions([shorter, other])
        assert (report.sessions, report.replaced) == (2, {})
        assert set(store.session_ids()) == {grown.id, shorter.id, other.id}


def test_sessions_of_one_import_never_replace_each_other_nor_sessions_nothing_tells_apart(db_path):
    """Reads of growing length in one import (written in several batches) are all kept; so are later
    reads of a source holding several stored sessions with no recording keys (which one grew?)."""
    anonymous = [replace(_recording(n), metadata={"source": "many.jsonl"}) for n in range(1, 7)]
    with Store(db_path, batch_messages=8) as store:
        report = store.import_sessions(anonymous)
        assert (report.sessions, report.replaced) == (6, {})
        grown = replace(_recording(9), metadata={"source": "many.jsonl"})
        assert store.import_sessions([grown]).replaced == {} and store.count() == 7


def test_a_later_version_in_a_file_that_fails_leaves_the_earlier_import_alone(db_path, tmp_path):
    """The earlier import is deleted only once the file holding its later version imported whole."""
    from workbench.samples import session_record

    with Store(db_path) as store:
        early = _recording(2)
        source = tmp_path / "live.jsonl"
        source.write_text(json.dumps(session_record(early)) + "\n")
        store.import_paths([source])
        (stored,) = store.session_ids()
        grown = _recording(4)
        source.write_text(json.dumps(session_record(grown)) + "\n{not json\n")
        failed = store.import_paths([source])
        assert failed.errors and failed.replaced == {} and store.session_ids() == [stored]
        source.write_text(json.dumps(session_record(grown)) + "\n")
        report = store.import_paths([source])
        assert report.replaced == {stored: report.session_ids[0]} and store.session_ids() == report.session_ids


@pytest.mark.parametrize("name", ["", "  "])
def test_a_blank_dataset_name_is_refused(db_path, name):
    with Store(db_path) as store, pytest.raises(ConfigError, match="dataset name cannot be empty"):
        store.import_sessions([rich_session("a")], dataset=name)


def test_many_batches_and_memory_friendly_streaming(db_path):
    sessions = [rich_session(f"s{i}", n_steps=i % 4 + 1) for i in range(40)]
    with Store(db_path, batch_messages=25) as store:
        report = store.import_sessions(iter(sessions))
        assert report.sessions == 40
        assert sorted(s.id for s in store.load_sessions()) == sorted(s.id for s in sessions)


def test_a_failing_batch_leaves_nothing_half_written(db_path, monkeypatch):
    good = [rich_session(f"g{i}") for i in range(3)]
    bad = rich_session("bad")
    bad = Session(messages=bad.messages, dataset="unit", probes=(Probe("BOOM?", "x"),))
    # The probe insert fails for the "BOOM" probe, after that batch's sessions and messages went in.
    monkeypatch.setattr(
        store_module,
        "_PROBE_INSERT",
        store_module._PROBE_INSERT.replace(
            "from_call FROM _wb_probes",
            "CASE WHEN question LIKE 'BOOM%' THEN error('boom') ELSE from_call END FROM _wb_probes",
        ),
    )
    with Store(db_path, batch_messages=len(good[0].messages)) as store:  # one session per batch
        with pytest.raises(StoreError, match="rolled back"):
            store.import_sessions([*good, bad, rich_session("after")])
        assert sorted(r[0] for r in store.connection.execute("SELECT id FROM sessions").fetchall()) == sorted(
            s.id for s in good
        )
        for table in ("messages", "probes"):
            ids = {r[0] for r in store.connection.execute(f"SELECT DISTINCT session_id FROM {table}").fetchall()}
            assert ids == {s.id for s in good}, table
        assert store.count("messages") == sum(len(s.messages) for s in good)


def test_lone_surrogates_do_not_break_an_import(db_path):
    session = Session.from_messages(
        [{"role": "user", "content": "bad \ud800 text"}, {"role": "assistant", "content": "ok"}], id="surrogate"
    )
    with Store(db_path) as store:
        assert store.import_sessions([session]).sessions == 1
        assert store.load_session(session.id).messages[0].text.startswith("bad ")


def test_token_counts_round_trip_primes_the_cache(db_path):
    session = rich_session()
    with Store(db_path) as store:
        store.import_sessions([session])
        total = store.save_token_counts(session, "heuristic")
        fresh = rich_session()  # uncounted messages
        expected = [message_tokens(m, "heuristic") for m in fresh.messages]
        assert total == sum(expected)
        assert store.token_counts(session.id) == {"heuristic": expected}
        store.save_token_counts(session, "heuristic")  # replaces, does not duplicate
        assert store.token_counts(session.id, "heuristic") == {"heuristic": expected}
        loaded = store.load_session(session.id)
        assert [m._token_cache.get("heuristic") for m in loaded.messages] == expected
        assert all("cl100k_base" not in m._token_cache for m in loaded.messages)


def _as_loaded(session: Session) -> tuple[Session, list[dict[str, int]], list[bool]]:
    """What a load gives: the session, its messages' token counts and observation flags."""
    return session, [dict(m._token_cache) for m in session.messages], [m.is_observation for m in session.messages]


def test_sessions_built_from_exported_rows_equal_the_loaded_ones(db_path):
    a, b = rich_session("a"), rich_session("b", n_steps=5)
    with Store(db_path) as store:
        store.import_sessions([a, b])
        store.save_token_counts(a, "cl100k_base")
        each = store.session_tables_each([b.id, "missing", a.id])
        assert list(each) == [b.id, a.id]  # the order asked, sessions not stored left out
        for session_id, tables in each.items():
            alone = store.session_tables([session_id])
            assert {name: t.num_rows for name, t in tables.items()} == {name: t.num_rows for name, t in alone.items()}
            (built,) = sessions_from_tables(tables, pooled=False)
            assert _as_loaded(built) == _as_loaded(store.load_session(session_id))
        together = sessions_from_tables(store.session_tables([a.id, b.id]), pooled=False)
        assert sorted(map(_as_loaded, together), key=lambda s: s[0].id) == sorted(
            (_as_loaded(store.load_session(i)) for i in (a.id, b.id)), key=lambda s: s[0].id
        )
        (built,) = sessions_from_tables(each[a.id], pooled=False)
        assert all(set(counts) == {"heuristic", "cl100k_base"} for counts in _as_loaded(built)[1])


def test_migration_0006_flags_no_op_compactions_and_leaves_older_rows_unknown(tmp_path):
    path = str(tmp_path / "old.duckdb")
    con = duckdb.connect(path)
    con.execute(
        "CREATE TABLE schema_migrations (name VARCHAR PRIMARY KEY, applied_at TIMESTAMP DEFAULT current_timestamp)"
    )
    for name, sql in db.MIGRATIONS[: [name for name, _ in db.MIGRATIONS].index("0006_compaction_noop")]:
        con.execute(sql)
        con.execute("INSERT INTO schema_migrations (name) VALUES (?)", [name])
    con.execute(
        "INSERT INTO cell_compactions (run_id, session_id, config, repeat, event_index, call_index) "
        "VALUES ('r', 's', 'c', 0, 0, 3)"
    )
    con.close()
    upgraded = db.connect(path)
    try:
        assert upgraded.execute("SELECT call_index, noop FROM cell_compactions").fetchall() == [(3, None)]
    finally:
        upgraded.close()


def test_migrations_are_recorded(db_path):
    with Store(db_path) as store:
        names = [r[0] for r in store.connection.execute("SELECT name FROM schema_migrations ORDER BY name").fetchall()]
    assert names == sorted(name for name, _ in db.MIGRATIONS)


def test_read_only_store_and_missing_file(db_path, tmp_path):
    with Store(db_path) as store:
        store.import_sessions([rich_session()])
    with Store(db_path, read_only=True) as reader:
        assert reader.count() == 1
        with pytest.raises(StoreError):
            reader.import_sessions([rich_session("z")])
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "absent.duckdb", read_only=True)


def test_delete_sessions(db_path):
    sessions = [rich_session("a"), rich_session("b")]
    with Store(db_path) as store:
        store.import_sessions(sessions)
        store.save_token_counts(sessions[0])
        assert store.delete_sessions([sessions[0].id, "unknown"]) == 1
        assert store.count() == 1
        assert store.token_counts(sessions[0].id) == {}
        assert set(store.token_counts(sessions[1].id)) == {"heuristic"}  # stored at import, kept
        assert store.connection.execute("SELECT count(DISTINCT session_id) FROM messages").fetchall()[0][0] == 1


def test_import_paths_good_files_survive_bad_ones(tmp_path, db_path):
    folder = tmp_path / "in"
    folder.mkdir()
    lines = [
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": f"question {i}"},
                    {"role": "assistant", "content": f"answer {i}"},
                ]
            }
        )
        for i in range(6)
    ]
    (folder / "good.jsonl").write_text("\n".join(lines[:3]) + "\n")
    # valid sessions first, then a broken line: the whole file must contribute nothing
    (folder / "broken.jsonl").write_text("\n".join(lines[3:]) + "\n{not json\n")
    (folder / "notes.json").write_text('{"hello": "world"}')  # matches no session format
    seen = []
    with Store(db_path, batch_messages=2) as store:
        report = store.import_paths([folder, tmp_path / "missing.json"], progress=seen.append)
        assert report.sessions == 3 and report.messages == 6
        failed = {f.path.rsplit("/", 1)[-1]: f.error for f in report.errors}
        assert set(failed) == {"broken.jsonl", "missing.json"}
        assert "broken.jsonl" in failed["broken.jsonl"] and ":4" in failed["broken.jsonl"]
        assert [f.path.rsplit("/", 1)[-1] for f in report.skipped_files] == ["notes.json"]
        assert store.count() == 3
        texts = {s.messages[0].text for s in store.load_sessions()}
        assert texts == {"question 0", "question 1", "question 2"}
        assert {r["source"] for r in store.session_rows()} == {"good.jsonl"}
        assert len(seen) == 4
        good = next(f for f in report.files if f.path.endswith("good.jsonl"))
        assert (good.sessions, good.messages, good.error) == (3, 6, None)
        again = store.import_paths([folder / "good.jsonl"])
        assert (again.sessions, again.duplicates, again.files[0].duplicates) == (0, 3, 3)


def test_a_second_process_gets_a_clear_store_error(db_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_WAIT", "0.5")  # how long an open waits for the holder (default 10 s)
    with Store(db_path):
        pass
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time
        from workbench.store import Store
        store = Store({db_path!r})
        print("ready", flush=True)
        sys.stdin.readline()
    """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError, match=r"database .* is in use by another process"):
            Store(db_path)
    finally:
        holder.communicate("\n", timeout=30)
    with Store(db_path) as store:  # released with the process
        assert store.count() == 0


def test_closed_store_raises(db_path):
    store = Store(db_path)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.count()
    assert isinstance(duckdb.__version__, str)


_JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
)
_JSON_VALUES = st.recursive(
    _JSON_LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(_JSON_VALUES)
def test_a_compactions_details_are_written_as_the_cleaned_value_would_be(value):
    """The encoder is tried first and the walk that replaces NaN and infinities runs only when it refuses:
    the text is the same either way."""
    from workbench.store.results import _clean, _clean_json, _json

    assert _clean_json(value, sort_keys=True) == _json(_clean(value), sort_keys=True)
