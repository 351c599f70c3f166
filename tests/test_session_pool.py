"""A session read twice in a process is one object: its analysis and its counts are not worked out again."""

from __future__ import annotations

import warnings

import pytest
from builders import conversation

from workbench.quality import index as fact_index
from workbench.session import Probe, Session
from workbench.session_pool import POOL_ENV, SessionPool, configured_budget, pool
from workbench.store import Store
from workbench.tokens import uncounted


def _session(steps: int = 4, sid: str = "s", **fields) -> Session:
    return Session.from_messages(conversation(steps, result_chars=300), id=sid, dataset="d", **fields)


@pytest.fixture
def stored(tmp_path) -> str:
    path = str(tmp_path / "wb.duckdb")
    with Store(path) as store:
        store.import_sessions([_session(), _session(6, "t")])
    return path


def test_a_session_read_again_is_the_same_object_and_is_not_analysed_again(stored, monkeypatch):
    pool.clear()  # the process's pool: another test may have read the same content
    with Store(stored) as store:
        first = store.load_session("s")
    built = []
    real = fact_index._session_index
    monkeypatch.setattr(fact_index, "_session_index", lambda session: built.append(session.id) or real(session))
    index = fact_index.session_index(first)
    with Store(stored) as store:  # another connection, as the next run, page or cell opens
        again = store.load_session("s")
        both = store.sessions_by_id(["t", "s"])
    assert again is first and both[1] is first and both[0].id == "t"
    assert fact_index.session_index(again) is index
    assert built == ["s"]


@pytest.mark.parametrize(
    "change",
    [
        {"steps": 5},
        {"sid": "other"},
        {"dataset": "elsewhere"},
        {"metadata": {"resolved": True}},
        {"probes": (Probe(question="Which file?", expected="src/app.py"),)},
    ],
    ids=["messages", "id", "dataset", "metadata", "probes"],
)
def test_sessions_that_differ_in_anything_a_replay_reads_stay_apart(change):
    pool = SessionPool()
    steps, sid = change.pop("steps", 4), change.pop("sid", "s")
    base = pool.canonical(_session())
    dataset = change.pop("dataset", None)
    other = _session(steps, sid, **change)
    if dataset:
        other = other.with_dataset(dataset)
    assert pool.canonical(other) is other and pool.canonical(_session()) is base
    assert len(pool) == 2


def test_counts_a_later_copy_brings_are_given_to_the_held_session():
    pool = SessionPool()
    held = pool.canonical(_session())
    fresh = _session()
    for message in fresh.messages:
        message._token_cache["cl100k_base"] = 7
    assert uncounted(held.messages, "cl100k_base")
    assert pool.canonical(fresh) is held
    assert not uncounted(held.messages, "cl100k_base")
    assert {m._token_cache["cl100k_base"] for m in held.messages} == {7}


def test_the_least_recently_read_go_first_beyond_theconfigured_budget():
    sessions = [_session(4, f"s{i}") for i in range(3)]
    size = sum(len(m.text) for m in sessions[0].messages)
    pool = SessionPool(max_characters=2 * size)
    for session in sessions[:2]:
        pool.canonical(session)
    pool.canonical(_session(4, "s0"))  # read again: now the most recent
    pool.canonical(sessions[2])  # over the budget: s1 goes
    assert len(pool) == 2
    assert pool.canonical(_session(4, "s0")) is sessions[0]
    assert pool.canonical(_session(4, "s1")) is not sessions[1]


def test_a_session_over_the_wholeconfigured_budget_or_a_pool_turned_off_holds_nothing():
    big = _session(8)
    assert SessionPool(max_characters=10).canonical(big) is big and not SessionPool(10)._held
    off = SessionPool(max_characters=0)
    assert off.canonical(big) is big and off.canonical(_session(8)) is not big


def test_theconfigured_budget_comes_from_the_environment_and_a_bad_value_is_named(monkeypatch):
    monkeypatch.setenv(POOL_ENV, "1000")
    assert configured_budget() == 1000
    monkeypatch.setenv(POOL_ENV, "lots")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert configured_budget() > 1000
    assert POOL_ENV in str(caught[0].message) and "'lots'" in str(caught[0].message)
