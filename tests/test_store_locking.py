"""The database file is shared between processes: a run holds it only while it writes a batch, and
readers (the CLI, the app, a notebook) wait for a batch to end instead of failing on DuckDB's lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import duckdb
import pytest

from workbench.errors import StoreError
from workbench.experiments import results, runs
from workbench.store import Store, db

pytestmark = pytest.mark.slow  # two processes sharing a database


ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

HOLDER = textwrap.dedent("""
    import sys
    import duckdb
    con = duckdb.connect(sys.argv[1])
    print("holding", flush=True)
    sys.stdin.readline()
    con.close()
    print("released", flush=True)
    sys.stdin.readline()
""")


def _holder(path: Path) -> subprocess.Popen[str]:
    """Another process holding the file for writing until it reads a line from its stdin."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "holding"
    return process


def test_opening_a_held_file_waits_for_the_holder_to_release_it(tmp_path, monkeypatch):
    path = tmp_path / "wb.duckdb"
    db.connect(path).close()
    holder = _holder(path)
    refused = threading.Event()
    attach = db.HUB.attach

    def counting_attach(*args, **kwargs):
        try:
            return attach(*args, **kwargs)
        except duckdb.IOException:
            refused.set()
            raise

    monkeypatch.setattr(db.HUB, "attach", counting_attach)
    opened: list[object] = []
    waiter = threading.Thread(target=lambda: opened.append(db.connect(path, lock_wait=60)))
    try:
        waiter.start()
        assert refused.wait(30), "the first attempt was not refused"
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
        waiter.join(60)
        assert len(opened) == 1  # it kept trying, and got the file once it was free
        opened[0].close()  # type: ignore[attr-defined]
    finally:
        holder.communicate("\n", timeout=30)


@pytest.mark.parametrize("setting", ["0", "0.2"])
def test_a_file_held_past_the_wait_is_the_readable_error(tmp_path, monkeypatch, setting):
    path = tmp_path / "wb.duckdb"
    db.connect(path).close()
    monkeypatch.setenv(db.LOCK_WAIT_ENV, setting)
    holder = _holder(path)
    try:
        with pytest.raises(StoreError, match=rf"database .* is in use by another process \(pid {holder.pid}\)"):
            Store(path, read_only=True)
    finally:
        holder.communicate("\n\n", timeout=30)


def test_a_lock_wait_that_is_not_a_number_is_said(monkeypatch):
    monkeypatch.setenv(db.LOCK_WAIT_ENV, "soon")
    with pytest.raises(StoreError, match="WORKBENCH_LOCK_WAIT must be a number of seconds"):
        db.default_lock_wait()


def test_the_model_cache_lets_the_file_go_once_idle(tmp_path, monkeypatch):
    """Held for a burst of lookups (not opened for each), let go after `db.HOLD_SECONDS` idle."""
    from workbench.llm import CacheEntry
    from workbench.store import DuckDBCache
    from workbench.store import db as database

    monkeypatch.setattr(database, "HOLD_SECONDS", 1.0)  # longer than the burst takes on a loaded machine
    path = tmp_path / "wb.duckdb"
    cache = DuckDBCache(path)
    cache.put("k", "m", {"q": 1}, CacheEntry("an answer"))
    assert cache.flush() == 1
    assert all(cache.get("k") == CacheEntry("an answer") for _ in range(20))
    assert cache._hold is not None and cache._hold.opened == 1  # one open for the burst

    def read_only_opens() -> bool:
        # a DuckDB instance of its own is refused the file while the process's hub has it attached
        try:
            duckdb.connect(str(path), read_only=True).close()
        except duckdb.ResourceInUseException:
            return False
        return True

    assert not read_only_opens()  # held right after its last use
    deadline = time.monotonic() + 5
    while not read_only_opens():  # and let go once idle
        assert time.monotonic() < deadline, "the cache still holds the file 5 s after its last use"
        time.sleep(0.1)
    cache.close()


STEPPED_RUN = textwrap.dedent("""
    import sys, threading
    from workbench.experiments import run_experiment
    from workbench.experiments.run import LocalExecutor
    from workbench.store import db

    db.HOLD_SECONDS = 0.1  # the run lets go of the file sooner after each use: the test's reads wait less

    stored = threading.Semaphore(0)

    class OneByOne(LocalExecutor):
        \"\"\"Hands over the next cell only once the previous one is stored: a batch is one cell.\"\"\"

        def map(self, work, tasks):
            for outcome in super().map(work, tasks):
                yield outcome
                stored.acquire()

    def step(progress):
        if progress.cells_done:
            print(f"done {progress.cells_done}", flush=True)
            sys.stdin.readline()  # the test reads the database meanwhile
            stored.release()

    run = run_experiment(sys.argv[1], db=sys.argv[2], executor=OneByOne(1), progress=step)
    print(f"finished {run.status}", flush=True)
""")


def _experiments_page_labels(path: Path) -> list[str]:
    from app_support import page_script
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_string(page_script("experiments"), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return [str(option) for box in at.selectbox for option in box.options]


def test_while_a_run_writes_another_process_lists_sessions_and_reads_its_finished_cells(grid_db, tmp_path, monkeypatch):
    """A run in another process, stopped after each stored cell: here the sessions list (in this
    process and with the CLI), the run shows as running with its finished cells, its results hold
    them, and the app's Experiments page shows the progress."""
    path, spec, ids = grid_db
    monkeypatch.setenv("WORKBENCH_DB", str(path))
    script = tmp_path / "stepped.py"
    script.write_text(STEPPED_RUN)
    run = subprocess.Popen(
        [sys.executable, str(script), str(spec), str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert run.stdin is not None and run.stdout is not None
    seen: list[int] = []
    try:
        for line in run.stdout:
            if not line.startswith("done "):
                break
            done = int(line.split()[1])
            with Store(path, read_only=True) as store:
                assert sorted(store.session_ids()) == sorted(ids)
            listed = runs(str(path))
            assert len(listed) == 1 and listed["status"][0] == "running"
            assert int(listed["cells_done"][0]) == done and int(listed["cells_total"][0]) == 9
            seen.append(len(results(str(listed["id"][0]), db=str(path))))
            if done == 2:
                cli = subprocess.run(
                    [sys.executable, "-m", "workbench", "sessions", "--json", "--db", str(path)],
                    capture_output=True,
                    text=True,
                    timeout=120,
                    env=ENV,
                )
                assert cli.returncode == 0, cli.stderr
                assert sorted(row["id"] for row in json.loads(cli.stdout)) == sorted(ids)
            if done == 5:
                assert any("running · 5/9 cells" in label for label in _experiments_page_labels(path))
            run.stdin.write("\n")
            run.stdin.flush()
        assert line.strip() == "finished finished"
    finally:
        run.stdin.close()
        run.wait(timeout=120)
    assert run.returncode == 0
    assert seen == list(range(1, 10))  # every stored cell was read while the run went on
    assert runs(str(path))["status"][0] == "finished"


STEPPED_IMPORT = textwrap.dedent("""
    import sys
    from workbench.store import Store, writer

    released = writer.Writer._let_others_in
    batches = 0

    def step(self):
        global batches
        released(self)
        batches += 1
        print(f"batch {batches}", flush=True)
        sys.stdin.readline()  # the test reads the database meanwhile

    writer.Writer._let_others_in = step
    Store.HOLD_SECONDS = 0.0  # every batch lets others in (a long import does so once a second)
    with Store(sys.argv[1], batch_messages=int(sys.argv[3])) as store:
        report = store.import_paths([sys.argv[2]])
    print(f"imported {report.sessions}", flush=True)
""")


def test_while_an_import_writes_another_process_reads_the_sessions_stored_so_far(tmp_path):
    """An import in another process, stopped after each batch: here the database opens (read-only, and
    through the CLI) and lists the sessions stored so far, more after every batch."""
    from workbench import synthetic

    path = tmp_path / "wb.duckdb"
    source = synthetic.write_jsonl(tmp_path / "sessions.jsonl", sessions=8, messages=400, seed=3, dataset="big")
    script = tmp_path / "stepped_import.py"
    script.write_text(STEPPED_IMPORT)
    child = subprocess.Popen(
        [sys.executable, str(script), str(path), str(source), "60"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert child.stdin is not None and child.stdout is not None
    counts: list[int] = []
    try:
        for line in child.stdout:
            if not line.startswith("batch "):
                break
            with Store(path, read_only=True) as store:
                counts.append(store.count("sessions"))
            if len(counts) == 2:
                cli = subprocess.run(
                    [sys.executable, "-m", "workbench", "sessions", "--json", "--db", str(path)],
                    capture_output=True,
                    text=True,
                    timeout=120,
                    env=ENV,
                )
                assert cli.returncode == 0, cli.stderr
                assert len(json.loads(cli.stdout)) == counts[-1]
            child.stdin.write("\n")
            child.stdin.flush()
        assert line.strip() == "imported 8"
    finally:
        child.stdin.close()
        child.wait(timeout=120)
    assert child.returncode == 0
    assert len(counts) >= 3, counts  # several batches, each read from here while the import went on
    assert counts == sorted(counts) and counts[0] < 8 and counts[-1] == 8, counts


def test_a_second_open_in_the_holding_process_keeps_other_processes_out(tmp_path):
    """Closing any descriptor of a file drops every POSIX lock the process has on it: the header check
    of a second open must not let another process in while this one holds the file for writing."""
    path = tmp_path / "wb.duckdb"
    holding = db.connect(path)
    try:
        db.connect(path).close()  # another thread's open, e.g. a session loader beside the writer
        probe = subprocess.run(
            [sys.executable, "-c", "import sys, duckdb; duckdb.connect(sys.argv[1], read_only=True)", str(path)],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=60,
        )
        assert probe.returncode != 0 and "lock" in probe.stderr.lower(), probe.stderr[-500:]
    finally:
        holding.close()
