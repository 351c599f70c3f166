"""Big JSONL files read in worker processes (workbench.store.import_workers): the database, the report
and the errors are those of reading each file whole in the importing process."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench import importers, samples
from workbench.errors import ConfigError, FormatError
from workbench.importers import LineRange
from workbench.importers._common import split_lines
from workbench.store import Store, import_workers
from workbench.store.batch import Batch, filing

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpora" / "mini-swe-agent-gemini3" / "trajs"
LLM_LOGS = REPO.parent / "shared" / "sessions" / "openai-chat"
TABLES = ("sessions", "messages", "token_counts", "probes", "datasets")
#: Columns a database fills in at write time, not from the file.
WRITE_TIME = {"imported_at", "created_at"}


def _session_line(seed: int, calls: int = 4, marker: str = "") -> str:
    session = samples.generate_session(seed, calls, dataset="bench")
    messages = [m.to_openai() for m in session.messages]
    messages[1]["content"] = f"{marker}{messages[1]['content']}"
    return json.dumps({"messages": messages, "model": f"model-{seed % 3}"}, ensure_ascii=False)


def _jsonl(path: Path, lines: list[str], bom: bool = False, last_newline: bool = True) -> Path:
    text = "\n".join(lines) + ("\n" if last_newline else "")
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


def _mixed_file(path: Path) -> Path:
    """Sessions, repeats near and far, blank lines, non-ASCII and a lone surrogate, a cut last line."""
    lines = [_session_line(seed, 3 + seed % 5, marker=f"#{seed} ") for seed in range(24)]
    lines[3] = lines[2]  # a repeat next to its first
    lines[20] = lines[1]  # a repeat far from it
    lines[7] = ""
    lines[11] = "   "
    lines[13] = _session_line(99, 3, marker="naïve — ünïcode ✓ ")
    lines[15] = _session_line(98, 3, marker="lone \\ud800 surrogate ").replace("\\\\ud800", "\\ud800")
    lines.append('{"messages": [{"role": "user", "content": "cut off whi')
    return _jsonl(path, lines, bom=True, last_newline=False)


def _dump(db: Path) -> dict[str, list[tuple]]:
    with duckdb.connect(str(db), read_only=True) as con:
        dump = {}
        for table in TABLES:
            columns = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall() if r[0] not in WRITE_TIME]
            dump[table] = con.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY ALL").fetchall()
        return dump


def _report(report) -> tuple:
    files = [
        (f.path, f.sessions, f.messages, f.duplicates, f.error, f.skipped, tuple(f.warnings)) for f in report.files
    ]
    return (report.sessions, report.messages, report.calls, report.duplicates, report.repeated, files)


def _import(db: Path, paths: list[Path], workers: int, piece_bytes: int = 4096, **kwargs):
    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)
    with Store(db, import_workers=workers, split_bytes=1, piece_bytes=piece_bytes) as store:
        report = store.import_paths([str(p) for p in paths], **kwargs)
    return _report(report), _dump(db)


def _same_both_ways(tmp_path: Path, paths: list[Path], piece_bytes: int = 4096, **kwargs):
    whole = _import(tmp_path / "whole.duckdb", paths, workers=1, **kwargs)
    parts = _import(tmp_path / "parts.duckdb", paths, workers=2, piece_bytes=piece_bytes, **kwargs)
    assert parts[0] == whole[0]
    for table in TABLES:
        assert parts[1][table] == whole[1][table], table
    return whole


def test_a_file_read_in_parts_stores_what_reading_it_whole_stores(tmp_path):
    source = _mixed_file(tmp_path / "mixed.jsonl")
    assert len(list(split_lines(str(source), 4096))) > 5  # really read in several parts
    (sessions, messages, _calls, duplicates, repeated, files), dump = _same_both_ways(tmp_path, [source])
    assert (sessions, duplicates, repeated) == (20, 2, 2)
    assert files[0][6] and "incomplete" in files[0][6][0]  # the cut last line: a warning, as whole
    assert messages == len(dump["messages"]) == len(dump["token_counts"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(piece_bytes=st.integers(min_value=1, max_value=60_000))
def test_any_piece_size_gives_the_same_database(tmp_path, piece_bytes):
    source = tmp_path / "mixed.jsonl"
    if not source.exists():
        _mixed_file(source)
    _same_both_ways(tmp_path, [source], piece_bytes=piece_bytes, dataset="given")


@pytest.mark.parametrize(
    "bad_line, problem",
    [
        ('{"messages": [{"role": "user", "content": "x"}', "invalid JSON"),
        ('{"role": "user", "content": "a message, not a session"}', "not a chat session"),
        ('{"messages": [{"role": "wizard", "content": "x"}]}', "has role 'wizard'"),
    ],
)
def test_a_bad_line_in_a_later_part_fails_the_file_as_reading_it_whole_does(tmp_path, bad_line, problem):
    lines = [_session_line(seed) for seed in range(30)]
    lines[22] = bad_line
    bad = _jsonl(tmp_path / "bad.jsonl", lines)
    good = _jsonl(tmp_path / "good.jsonl", [_session_line(seed) for seed in range(100, 104)])
    (sessions, _m, _c, _d, _r, files), dump = _same_both_ways(tmp_path, [bad, good])
    error = next(f[4] for f in files if f[0].endswith("bad.jsonl"))
    assert "bad.jsonl:23:" in error
    assert problem in error
    assert sessions == 4 and {row[3] for row in dump["sessions"]} == {"good.jsonl"}  # nothing of the bad file


def test_a_grown_recording_read_again_is_matched_to_the_stored_one_as_whole(tmp_path):
    """A source an earlier import stored is read whole (its sessions are compared with the stored ones)."""
    lines = [_session_line(seed) for seed in range(12)]
    source = _jsonl(tmp_path / "live.jsonl", lines)
    outcomes = []
    for workers in (1, 2):
        db = tmp_path / f"live{workers}.duckdb"
        with Store(db, import_workers=workers, split_bytes=1, piece_bytes=2048) as store:
            store.import_paths([str(source)])
            _jsonl(source, [*lines, _session_line(500)])
            report = store.import_paths([str(source)])
            outcomes.append((report.sessions, report.duplicates, dict(report.replaced)))
        _jsonl(source, lines)
    assert outcomes[0] == outcomes[1] == (1, 12, {})


def test_the_workers_are_kept_between_imports_and_replaced_when_gone(tmp_path):
    source = _jsonl(tmp_path / "s.jsonl", [_session_line(seed) for seed in range(20)])
    _import(tmp_path / "a.duckdb", [source], workers=2)
    first = import_workers.worker_pids()
    assert len(first) >= 2
    _import(tmp_path / "b.duckdb", [source], workers=2)
    assert import_workers.worker_pids() == first
    os.kill(first[0], signal.SIGKILL)
    os.waitpid(first[0], 0)  # gone before the next import looks
    report, dump = _import(tmp_path / "c.duckdb", [source], workers=2)
    assert report[0] == 20 and len(dump["sessions"]) == 20
    assert first[0] not in import_workers.worker_pids()


def test_imports_on_two_threads_at_once_each_get_their_own_workers(tmp_path):
    files = [
        _jsonl(tmp_path / f"{name}.jsonl", [_session_line(seed, marker=f"{name} ") for seed in range(40)])
        for name in ("left", "right")
    ]
    expected = [_import(tmp_path / f"{n}-whole.duckdb", [f], workers=1) for n, f in enumerate(files)]
    with ThreadPoolExecutor(2) as pool:
        got = list(
            pool.map(
                lambda job: _import(tmp_path / f"{job[0]}-parts.duckdb", [job[1]], workers=2, piece_bytes=2048),
                enumerate(files),
            )
        )
    assert got == expected


def test_a_script_without_a_main_guard_imports_in_parts(tmp_path):
    """The workers run none of the importing program's code (multiprocessing would run this script
    again in each worker, and fail)."""
    source = _jsonl(tmp_path / "s.jsonl", [_session_line(seed) for seed in range(20)])
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from workbench.store import Store
            print("started")
            with Store({str(tmp_path / "s.duckdb")!r}, import_workers=2, split_bytes=1, piece_bytes=4096) as store:
                print(store.import_paths([{str(source)!r}]).sessions)
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["started", "20"]


def test_split_lines_covers_the_file_at_line_ends_with_each_first_line_numbered(tmp_path):
    data = b"".join(f'{{"n": {i}, "pad": "{"x" * (i * 37 % 500)}"}}\n'.encode() for i in range(200)) + b'{"n": 200}'
    path = tmp_path / "lines.jsonl"
    path.write_bytes(data)
    for piece_bytes in (1, 100, 999, 5000, len(data), 10 * len(data)):
        ranges = list(split_lines(str(path), piece_bytes))
        assert b"".join(data[r.start : r.stop] for r in ranges) == data
        assert all(r.stop == len(data) or data[r.stop - 1 : r.stop] == b"\n" for r in ranges)
        assert [r.first_line for r in ranges] == [data[: r.start].count(b"\n") + 1 for r in ranges]


def test_only_jsonl_files_of_one_session_per_line_are_split(tmp_path):
    sessions = _jsonl(tmp_path / "sessions.jsonl", [_session_line(1), _session_line(2)])
    loose = _jsonl(tmp_path / "messages.jsonl", [json.dumps({"role": "user", "content": "hi"})] * 3)
    document = tmp_path / "one.json"
    document.write_text(_session_line(3))
    assert importers.line_ranges(sessions, "auto", 100) is not None
    assert importers.line_ranges(loose, "auto", 100) is None
    assert importers.line_ranges(document, "auto", 100) is None
    assert importers.line_ranges(tmp_path / "missing.jsonl", "auto", 100) is None


def test_a_format_error_crosses_from_a_worker_whole():
    error = FormatError("a.jsonl", "the line is bad", line=7, expected="a session")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.path, copy.line, copy.problem, copy.expected) == (
        FormatError,
        str(error),
        "a.jsonl",
        7,
        "the line is bad",
        "a session",
    )
    unknown = pickle.loads(pickle.dumps(importers.UnknownFormatError("b.json", "no format")))
    assert isinstance(unknown, importers.UnknownFormatError) and unknown.path == "b.json"


@pytest.mark.parametrize(
    "value, expected", [("3", 3), ("1", 1), (" 2 ", 2), ("0", ConfigError), ("two", ConfigError), ("", None)]
)
def test_the_number_of_workers_comes_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv(import_workers.WORKERS_VARIABLE, value)
    if expected is ConfigError:
        with pytest.raises(ConfigError, match=import_workers.WORKERS_VARIABLE):
            import_workers.default_workers()
    elif expected is None:
        assert 1 <= import_workers.default_workers() <= 8
    else:
        assert import_workers.default_workers() == expected


def test_a_batch_selects_by_row_so_a_repeated_session_is_kept_once():
    one, two = samples.generate_session(1, 3), samples.generate_session(2, 4)
    batch = Batch()
    for session in (one, two, one):
        batch.add(session, *filing(session, None, "src"))
    picked = batch.select([0, 1])
    whole = Batch()
    for session in (one, two):
        whole.add(session, *filing(session, None, "src"))
    whole.settle()
    assert (picked.sessions, picked.messages, picked.counts) == (whole.sessions, whole.messages, whole.counts)
    assert picked.message_count == len(one.messages) + len(two.messages)
    merged = Batch()
    merged.extend(batch, [1, 2])
    assert merged.ids == [two.id, one.id] and len(merged.counts) == merged.message_count


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpora/mini-swe-agent-gemini3 is not present")
def test_the_real_corpus_as_one_jsonl_file_reads_the_same_in_parts(tmp_path):
    source = tmp_path / "corpus.jsonl"
    with source.open("w", encoding="utf-8") as out:
        for traj in sorted(CORPUS.glob("*/*.traj.json")):
            record = json.loads(traj.read_text(encoding="utf-8"))
            out.write(json.dumps({"messages": record["messages"], "id": traj.parent.name}) + "\n")
    (sessions, messages, *_), dump = _same_both_ways(tmp_path, [source], piece_bytes=1_000_000)
    assert sessions == 100 and messages > 5_000


@pytest.mark.skipif(not LLM_LOGS.is_dir(), reason="../shared/sessions is not present")
def test_real_litellm_request_logs_as_lines_read_the_same_in_parts(tmp_path):
    logs = sorted(LLM_LOGS.rglob("llm-logs/*.json"))
    assert logs
    records = [json.loads(p.read_text(encoding="utf-8")) for p in logs]
    lines = [json.dumps({**record, "timestamp": index}) for index, record in enumerate(records * 6)]
    source = _jsonl(tmp_path / "logs.jsonl", lines)
    (sessions, *_), dump = _same_both_ways(tmp_path, [source], piece_bytes=os.path.getsize(source) // 5)
    assert sessions >= 1 and all(row[2] == "openai" for row in dump["sessions"])


def test_a_range_is_read_by_the_importer_it_was_split_for(tmp_path):
    source = _jsonl(tmp_path / "s.jsonl", [_session_line(seed) for seed in range(3)])
    with pytest.raises(ConfigError, match="ranges"):
        list(importers.iter_range_sessions(source, "aider", LineRange(0, 10, 1)))
