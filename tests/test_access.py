"""wb.sessions / wb.session: reading sessions back from a real DuckDB file."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import conversation

import workbench as wb
from workbench.session import RecordedCompaction
from workbench.store import Store


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "wb.duckdb"
    compaction = RecordedCompaction(call_index=2, message_index=6, trigger="auto", tokens_before=9000, summary="s")
    small = wb.Session.from_messages(conversation(2), metadata={"recorded_compactions": [compaction.to_dict()]})
    large = wb.Session.from_messages(conversation(6))
    other = wb.Session.from_messages(conversation(4))
    with Store(path) as store:
        store.import_sessions([small, large], dataset="mine")
        store.import_sessions([other], dataset="theirs")
    return path


def test_sessions_filters_by_dataset_and_sql(db: Path) -> None:
    assert len(wb.sessions(db=db)) == 3
    mine = wb.sessions("mine", db=db)
    assert sorted(s.calls for s in mine) == [3, 7] and {s.dataset for s in mine} == {"mine"}
    assert sorted(s.calls for s in wb.sessions(where="calls >= 5", db=db)) == [5, 7]
    assert wb.sessions("theirs", where="calls > 100", db=db) == []
    with pytest.raises(wb.StoreError):
        wb.sessions(where="no_such_column = 1", db=db)


def test_session_by_id_or_unique_prefix(db: Path) -> None:
    everything = wb.sessions(db=db)
    target = next(s for s in everything if s.recorded_compactions)
    assert wb.session(target.id, db=db) == target
    prefix = next(target.id[:n] for n in range(1, 17) if sum(s.id.startswith(target.id[:n]) for s in everything) == 1)
    loaded = wb.session(prefix, db=db)
    assert loaded.id == target.id
    assert loaded.recorded_compactions == target.recorded_compactions, "annotations survive the database"
    with pytest.raises(wb.StoreError, match="no session id starts with 'zzz'"):
        wb.session("zzz", db=db)
    with pytest.raises(wb.StoreError, match="required"):
        wb.session("", db=db)


def test_session_with_an_ambiguous_prefix_names_the_candidates(tmp_path: Path) -> None:
    path = tmp_path / "many.duckdb"
    sessions = [wb.Session.from_messages(conversation(n)) for n in range(1, 40)]
    with Store(path) as store:
        store.import_sessions(sessions, dataset="d")
    first = max("0123456789abcdef", key=lambda c: sum(s.id.startswith(c) for s in sessions))
    sharing = [s.id for s in sessions if s.id.startswith(first)]
    assert len(sharing) >= 3, "39 hex ids over 16 first digits: some digit starts three"
    with pytest.raises(wb.StoreError, match=f"{len(sharing)} sessions start with '{first}'"):
        wb.session(first, db=path)


def test_a_missing_database_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(wb.StoreError, match="does not exist"):
        wb.sessions(db=tmp_path / "absent.duckdb")


def test_overview_counts_each_sessions_characters_and_recorded_compactions(db: Path) -> None:
    from workbench.access import overview

    shown = overview(db)
    assert sorted(d["name"] for d in shown["datasets"]) == ["mine", "theirs"]
    by_id = {row["id"]: row for row in shown["sessions"]}
    for stored in wb.sessions(db=db):
        assert by_id[stored.id]["characters"] == sum(len(m.text) for m in stored.messages)
        assert by_id[stored.id]["recorded_compactions"] == len(stored.recorded_compactions)


def test_session_detail_runs_the_token_total_and_keeps_annotations_out_of_metadata(db: Path) -> None:
    from workbench.access import session_detail
    from workbench.tokens import message_tokens

    stored = next(s for s in wb.sessions(db=db) if s.recorded_compactions)
    detail = session_detail(stored)
    tokens = [message_tokens(m, "heuristic") for m in stored.messages]
    assert [m["tokens"] for m in detail["messages"]] == tokens
    assert [m["cumulative_tokens"] for m in detail["messages"]] == [sum(tokens[: i + 1]) for i in range(len(tokens))]
    assert detail["tokens"] == sum(tokens) and detail["calls"] == stored.calls
    assert detail["recorded_compactions"] == [c.to_dict() for c in stored.recorded_compactions]
    assert "recorded_compactions" not in detail["metadata"]
