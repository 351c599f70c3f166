"""The process's one DuckDB (workbench.store.hub): each file attached once while in use, under an alias
that is the default catalog of its connections, and detached when its last connection closes."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from contextlib import contextmanager

import duckdb
import pyarrow as pa
import pytest

from workbench import samples
from workbench.store import Store, db
from workbench.store.console import is_busy
from workbench.store.hub import HUB, ROW_GROUP_SIZE, HeldInProcessError
from workbench.store.sessions import DEFAULT_BATCH_MESSAGES


def _real(path) -> str:
    return os.path.realpath(path)


@contextmanager
def connections(*targets):
    """A connection to each target, closed after the block."""
    opened = [db.connect(target) for target in targets]
    try:
        yield opened
    finally:
        for connection in opened:
            connection.close()


def _other_process_reads(path) -> bool:
    """Whether a process of its own can open the file (the hub has let it go)."""
    probe = "import sys, duckdb; duckdb.connect(sys.argv[1], read_only=True).close()"
    return subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True).returncode == 0


def test_a_file_stays_attached_while_any_of_its_connections_is_open(tmp_path):
    path = tmp_path / "wb.duckdb"
    first = db.connect(path)
    second = db.connect(path)  # shares the attachment: DuckDB refuses a second one
    assert first.alias == second.alias
    first.close()
    assert HUB.attached(_real(path))
    assert second.execute("SELECT count(*) FROM sessions").fetchall() == [(0,)]
    second.close()
    assert not HUB.attached(_real(path))
    assert _other_process_reads(path)


def test_unqualified_names_are_each_connections_own_file(tmp_path):
    with connections(tmp_path / "one.duckdb", tmp_path / "two.duckdb") as (one, two):
        one.execute("INSERT INTO datasets (name) VALUES ('only-in-one')")
        assert one.execute("SELECT name FROM datasets").fetchall() == [("only-in-one",)]
        assert two.execute("SELECT name FROM datasets").fetchall() == []
        assert one.cursor().execute("SELECT name FROM main.datasets").fetchall() == [("only-in-one",)]


def test_a_cursor_does_not_keep_the_file(tmp_path):
    path = tmp_path / "wb.duckdb"
    connection = db.connect(path)
    cursor = connection.cursor()
    cursor.close()
    assert HUB.attached(_real(path))
    other = connection.cursor()
    connection.close()
    assert not HUB.attached(_real(path))
    with pytest.raises(duckdb.Error):
        other.execute("SELECT count(*) FROM sessions").fetchall()  # its database went with the file


def test_the_migrations_read_their_own_files_record(tmp_path):
    migrated = db.connect(tmp_path / "migrated.duckdb")
    bare = db.connect(tmp_path / "bare.duckdb", migrate=False)
    try:
        assert db.applied_migrations(migrated) == [name for name, _ in db.MIGRATIONS]
        assert db.applied_migrations(bare) == []
        assert db.pending_migrations(bare) == [name for name, _ in db.MIGRATIONS]
    finally:
        migrated.close()
        bare.close()


def test_in_memory_databases_are_private():
    with connections(":memory:", ":memory:") as (one, two):
        one.execute("INSERT INTO datasets (name) VALUES ('here')")
        assert two.execute("SELECT count(*) FROM datasets").fetchall() == [(0,)]


def test_a_file_open_for_writing_is_refused_read_only_in_the_same_process_and_said_busy(tmp_path):
    path = tmp_path / "wb.duckdb"
    writer = db.connect(path)
    try:
        with pytest.raises(HeldInProcessError, match="open for writing in this process") as refused:
            db.connect(path, read_only=True)
        assert is_busy(refused.value)
        with pytest.raises(duckdb.Error) as own_instance:
            duckdb.connect(str(path), read_only=True)  # what the SQL console opens
        assert is_busy(own_instance.value)
    finally:
        writer.close()
    db.connect(path, read_only=True).close()  # let go: opened in the other mode now


def test_rows_named_by_a_python_variable_are_inserted_through_a_connection(tmp_path):
    connection = db.connect(tmp_path / "wb.duckdb")
    try:
        db.insert_rows(connection, "datasets", pa.table({"name": ["a", "b"], "description": ["x", None]}))
        assert connection.execute("SELECT name FROM datasets ORDER BY name").fetchall() == [("a",), ("b",)]
    finally:
        connection.close()


def test_spilled_blocks_go_to_a_folder_of_the_process_not_the_working_directory(tmp_path):
    connection = db.connect(tmp_path / "wb.duckdb")
    try:
        folder = connection.execute("SELECT current_setting('temp_directory')").fetchall()[0][0]
    finally:
        connection.close()
    assert folder.startswith(tempfile.gettempdir()) and str(os.getpid()) in folder


def test_an_import_batch_is_written_to_the_file_as_row_groups_not_to_the_log(tmp_path):
    """A batch of more than a row group is written to the file, compressed, as it is appended: the
    write-ahead log gets none of its text for a checkpoint to compress again (the import's speed
    rests on this; at DuckDB's default row group size the log holds all of it)."""
    sessions = [samples.generate_session(seed, 400, dataset="big") for seed in range(11)]
    messages = sum(len(s.messages) for s in sessions)
    assert ROW_GROUP_SIZE < messages < DEFAULT_BATCH_MESSAGES  # one batch, more than a row group
    text_bytes = sum(len(m.text.encode()) for s in sessions for m in s.messages)
    path = tmp_path / "wb.duckdb"
    with Store(path) as store:
        store.import_sessions(sessions)
        log = path.with_name(path.name + ".wal")
        assert (log.stat().st_size if log.exists() else 0) < text_bytes / 10
        groups = store.connection.execute(
            "SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('messages')"
        ).fetchall()[0][0]
    assert groups == -(-messages // ROW_GROUP_SIZE)
