"""A generated dataset end to end with bounded memory: import in batches, list, filter, open, replay."""

from __future__ import annotations

import gc
import json
import tracemalloc
import weakref
from collections.abc import Callable, Iterable, Iterator

import pytest

import workbench.experiments.run as run_module
from workbench import access, synthetic
from workbench.errors import StoreError
from workbench.experiments import run_experiment
from workbench.experiments.run import CellOutcome, CellTask, LocalExecutor
from workbench.session import Session
from workbench.store import Store, db

pytestmark = pytest.mark.slow  # thousands of generated sessions: `make test-fast` leaves it out

SESSIONS = 50
MESSAGES = 50 * 120
SEED = 13

ONE_CONFIG = {
    "name": "scale-test",
    "dataset": "synthetic",
    "concurrency": 2,
    "config": [
        {
            "name": "window",
            "trigger": {"kind": "stat_threshold", "counters": {"iterations": 10}},
            "strategy": {"kind": "sliding_window", "window": 10},
            "tokenizer": "heuristic",
            "context_limit": 8000,
        }
    ],
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("scale") / "wb.duckdb")
    report = synthetic.generate_dataset(path, SESSIONS, MESSAGES, seed=SEED)
    assert (report.sessions, report.messages) == (SESSIONS, MESSAGES)
    return path


def test_generation_reports_progress_and_a_rerun_writes_nothing(generated):
    seen: list[tuple[int, int]] = []
    report = synthetic.generate_dataset(
        generated, SESSIONS, MESSAGES, seed=SEED, progress=lambda s, m: seen.append((s, m))
    )
    assert report.sessions == 0 and report.duplicates == SESSIONS
    assert [s for s, _ in seen] == list(range(1, SESSIONS + 1)) and seen[-1][1] == MESSAGES
    with Store(generated, read_only=True) as store:
        assert store.count("messages", dataset="synthetic") == MESSAGES
        assert store.dataset_rows()[0]["description"].startswith("Synthetic")


def test_the_importer_holds_no_generated_session_beyond_the_one_being_added(tmp_path):
    alive: list[weakref.ref[Session]] = []
    most = 0

    def tracked() -> Iterator[Session]:
        nonlocal most
        for session in synthetic.iter_sessions(30, 3000, seed=1):
            alive.append(weakref.ref(session))
            most = max(most, sum(ref() is not None for ref in alive))
            yield session
            del session

    with Store(tmp_path / "wb.duckdb", batch_messages=500) as store:
        report = store.import_sessions(tracked())
    assert report.sessions == 30
    assert most <= 2  # the one being added and the next: batches hold columns, never the sessions


def test_generating_into_the_store_keeps_python_memory_far_below_the_dataset(tmp_path):
    sessions, messages = 60, 60 * 500
    text_bytes = sum(len(m.text) for s in synthetic.iter_sessions(sessions, messages, seed=4) for m in s.messages)
    with Store(tmp_path / "warm.duckdb") as store:  # modules imported and the text pool built before tracing
        synthetic.generate_dataset(store, 2, 40, seed=4)
    gc.collect()
    tracemalloc.start()
    try:
        with Store(tmp_path / "wb.duckdb", batch_messages=1000, batch_bytes=2_000_000) as store:
            synthetic.generate_dataset(store, sessions, messages, seed=4)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text_bytes > 20_000_000
    # a whole-dataset list would need more than the text; the stream holds a batch plus a fixed 7-11 MB
    # (measured alone: 10.6 MB for 30 sessions, 9.9 MB for 60), which text / 3 (8.1 MB) did not leave room for
    assert peak < text_bytes / 2, (peak, text_bytes)


def test_listing_and_filtering_read_the_sessions_table_only(generated):
    with Store(generated, read_only=True) as store:
        rows = store.session_rows()
        assert [r["id"] for r in rows] == [synthetic.session_id(i, SEED) for i in range(SESSIONS)]
        assert sum(r["messages"] for r in rows) == MESSAGES
        codex = store.session_rows(where="metadata->>'agent' = 'codex' AND calls >= 10")
    expected = {
        s.id
        for s in synthetic.iter_sessions(SESSIONS, MESSAGES, seed=SEED)
        if s.metadata["agent"] == "codex" and s.calls >= 10
    }
    assert {r["id"] for r in codex} == expected and expected
    assert {
        s.id for s in access.sessions(where="metadata->>'agent' = 'codex' AND calls >= 10", db=generated)
    } == expected


def test_iter_sessions_streams_in_batches(generated):
    with Store(generated, read_only=True) as store:
        batches: list[int] = []
        load = store._load

        def counting(ids):
            batches.append(len(ids))
            return load(ids)

        store._load = counting  # type: ignore[method-assign]  # a hook that sees each batch
        streamed = [s.id for s in store.iter_sessions("synthetic", batch_sessions=8)]
    assert streamed == [synthetic.session_id(i, SEED) for i in range(SESSIONS)]
    assert max(batches) == 8 and sum(batches) == SESSIONS
    first = next(access.iter_sessions(where="calls >= 1", db=generated, batch_sessions=4))
    assert first.id == streamed[0]


def test_opening_one_session_gives_what_was_generated(generated):
    counts = synthetic.message_counts(SESSIONS, MESSAGES, SEED)
    expected = synthetic.generate_session(17, counts[17], seed=SEED)
    opened = access.session(synthetic.session_id(17, SEED), db=generated)
    assert opened.messages == expected.messages
    assert opened.metadata["agent"] == expected.metadata["agent"]


def test_memory_limit_comes_from_the_option_or_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "wb.duckdb"
    with Store(path, memory_limit="300MB") as store:
        set_to = store.connection.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert set_to.replace(" ", "").upper() in {"286.1MIB", "300.0MB", "286MIB", "300MB"}
    monkeypatch.setenv(db.MEMORY_LIMIT_ENV, "200MB")
    with Store(path, read_only=True) as store:
        from_env = store.connection.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert from_env != set_to and from_env.replace(" ", "").upper() in {"190.7MIB", "200.0MB", "190MIB", "200MB"}
    monkeypatch.setenv(db.MEMORY_LIMIT_ENV, "lots")
    with pytest.raises(StoreError, match="invalid memory limit 'lots'"):
        Store(path)


class _InOrder:
    """An executor that runs one cell at a time and hands its outcome over before starting the next."""

    def map(self, work: Callable[[CellTask], CellOutcome], tasks: Iterable[CellTask]) -> Iterator[CellOutcome]:
        for task in tasks:
            yield work(task)


def _tracking_caches(monkeypatch) -> list:
    caches: list = []

    class Tracked(run_module._SessionCache):
        def __init__(self, store, batch=1):
            super().__init__(store, batch)
            caches.append(self)

    monkeypatch.setattr(run_module, "_SessionCache", Tracked)
    return caches


def test_a_one_config_experiment_loads_each_session_for_its_cell_only(generated, monkeypatch):
    caches = _tracking_caches(monkeypatch)
    run = run_experiment({**ONE_CONFIG, "name": "scale-in-order"}, db=generated, executor=_InOrder())
    assert run.status == "finished" and run.progress.failed_cells == 0
    frame = run.results
    assert len(frame) == SESSIONS and set(frame.session_id) == {synthetic.session_id(i, SEED) for i in range(SESSIONS)}
    assert (frame.compactions > 0).any()
    (cache,) = caches
    assert cache.peak == 1 and len(cache) == 0


def test_a_one_config_experiment_over_the_whole_dataset_with_threads(generated, monkeypatch):
    caches = _tracking_caches(monkeypatch)
    updates: list[int] = []
    run = run_experiment(
        ONE_CONFIG, db=generated, executor=LocalExecutor(2), progress=lambda p: updates.append(p.cells_done)
    )
    assert run.status == "finished" and len(run.results) == SESSIONS
    assert updates[-1] == SESSIONS and updates == sorted(updates)
    (cache,) = caches
    assert len(cache) == 0 and cache.peak < SESSIONS // 4
    again = run_experiment(ONE_CONFIG, db=generated)
    assert again.id == run.id and again.progress.cells_reused == SESSIONS


def test_cli_lists_filters_and_limits_the_generated_sessions(generated):
    from click.testing import CliRunner

    from workbench.cli import main

    runner = CliRunner()
    every = runner.invoke(main, ["sessions", "--db", generated, "--json"])
    assert every.exit_code == 0, every.output
    assert len(json.loads(every.output)) == SESSIONS
    some = runner.invoke(
        main, ["sessions", "--db", generated, "--json", "--limit", "3", "--where", "metadata->>'agent' = 'claude-code'"]
    )
    rows = json.loads(some.output)
    assert len(rows) == 3 and [r["id"] for r in rows] == sorted(r["id"] for r in rows)
    bad = runner.invoke(main, ["sessions", "--db", generated, "--where", "no_such_column > 1"])
    assert bad.exit_code != 0 and "no_such_column" in bad.output
