"""The `workbench` command: import, sessions, init, errors, start-up cost."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from workbench import samples
from workbench.cli import FORMAT_CHOICES, main
from workbench.store import Store


def openai_line(i: int) -> str:
    return json.dumps({"messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Fix bug {i}"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": "x = 1"},
        {"role": "assistant", "content": f"Fixed bug {i}."}]})


@pytest.fixture
def files(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(openai_line(i) for i in range(3)) + "\n")
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]))
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "user", "content": "unterminated"')
    return good, other, bad


@pytest.fixture
def runner():
    return CliRunner()


def invoke(runner, *args, **kwargs):
    return runner.invoke(main, [str(a) for a in args], catch_exceptions=False, **kwargs)


def test_import_good_and_bad_files(runner, files, tmp_path):
    good, other, bad = files
    db = tmp_path / "wb.duckdb"
    result = invoke(runner, "import", good, bad, other, "--db", db)
    assert result.exit_code == 1
    assert "imported 4 sessions (17 messages, 7 calls)" in result.stdout
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "bad.json" in error_lines[0]
    assert "Traceback" not in result.output
    assert "1 of 3 files failed" in result.stderr
    with Store(db) as store:
        assert store.count() == 4

    again = invoke(runner, "import", good, "--db", db)
    assert again.exit_code == 0
    assert "imported 0 sessions" in again.stdout
    assert "skipped 3 duplicate sessions (already imported)" in again.stdout


def test_import_json_report_and_dataset(runner, files, tmp_path):
    good, _, bad = files
    db = tmp_path / "wb.duckdb"
    result = invoke(runner, "import", good, bad, "--dataset", "mine", "--format", "openai", "--json", "--db", db)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert (report["sessions"], report["messages"], report["duplicates"], report["failed_files"]) == (3, 15, 0, 1)
    assert report["errors"][0]["path"].endswith("bad.json")
    listed = json.loads(invoke(runner, "sessions", "--dataset", "mine", "--json", "--db", db).stdout)
    assert len(listed) == 3 and {r["dataset"] for r in listed} == {"mine"}


def test_sessions_json_fields(runner, files, tmp_path):
    good, other, _ = files
    db = tmp_path / "wb.duckdb"
    invoke(runner, "import", good, other, "--db", db)
    rows = json.loads(invoke(runner, "sessions", "--json", "--db", db).stdout)
    assert len(rows) == 4
    for row in rows:
        assert {"id", "dataset", "format", "messages", "calls"} <= set(row)
        assert row["format"] == "openai" and row["dataset"] == "openai"
    assert sorted((r["messages"], r["calls"]) for r in rows) == [(2, 1), (5, 2), (5, 2), (5, 2)]
    text = invoke(runner, "sessions", "--db", db).stdout
    assert text.splitlines()[0].split()[:5] == ["id", "dataset", "format", "messages", "calls"]
    assert json.loads(invoke(runner, "sessions", "--json", "--where", "calls > 1", "--db", db).stdout).__len__() == 3


def test_init_is_idempotent_and_loads_the_samples(runner, tmp_path):
    db = tmp_path / "data" / "wb.duckdb"
    first = invoke(runner, "init", "--db", db, "--json")
    assert first.exit_code == 0
    data = json.loads(first.stdout)
    assert data["created"] is True and data["imported"] == samples.DEFAULT_N == data["sessions"]
    second = invoke(runner, "init", "--db", db)
    assert second.exit_code == 0 and "nothing to import" in second.stdout
    rows = json.loads(invoke(runner, "sessions", "--json", "--db", db).stdout)
    assert len(rows) == samples.DEFAULT_N and {r["dataset"] for r in rows} == {"samples"}
    assert sorted(r["calls"] for r in rows) == samples.dataset_sizes()
    datasets = json.loads(invoke(runner, "datasets", "--json", "--db", db).stdout)
    assert datasets[0]["name"] == "samples" and datasets[0]["sessions"] == samples.DEFAULT_N


def test_db_from_environment_and_group_option(runner, files, tmp_path, monkeypatch):
    good, _, _ = files
    env_db = tmp_path / "env.duckdb"
    monkeypatch.setenv("WORKBENCH_DB", str(env_db))
    assert invoke(runner, "import", good).exit_code == 0
    with Store(env_db) as store:
        assert store.count() == 3
    group_db = tmp_path / "group.duckdb"
    assert invoke(runner, "--db", group_db, "init").exit_code == 0
    with Store(group_db) as store:
        assert store.count() == samples.DEFAULT_N


def test_format_choices_match_the_importers():
    from workbench import importers

    assert FORMAT_CHOICES == ("auto", *importers.FORMATS)


def test_a_locked_database_is_a_one_line_error(tmp_path):
    db = tmp_path / "wb.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from workbench.store import Store
        store = Store({str(db)!r})
        print("ready", flush=True)
        sys.stdin.readline()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        result = subprocess.run([sys.executable, "-m", "workbench", "sessions", "--db", str(db)],
                                capture_output=True, text=True, timeout=60)
    finally:
        holder.communicate("\n", timeout=30)
    assert result.returncode == 1
    assert result.stderr.startswith("error: database ") and "in use by another process" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_help_is_cheap_to_start():
    code = ("import sys, workbench.cli; "
            "print([m for m in ('pandas', 'litellm', 'streamlit', 'pyarrow', 'tiktoken') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
    help_run = subprocess.run([sys.executable, "-m", "workbench", "--help"], capture_output=True, text=True,
                              timeout=60)
    assert help_run.returncode == 0
    for command in ("import", "sessions", "init"):
        assert command in help_run.stdout


def test_progress_bar_on_stderr_for_many_files(runner, tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(25):
        (folder / f"s{i:02d}.jsonl").write_text(openai_line(i) + "\n" + openai_line(100 + i) + "\n")
    result = invoke(runner, "import", folder, "--db", tmp_path / "wb.duckdb")
    assert result.exit_code == 0
    assert "imported 50 sessions" in result.stdout
    assert "importing" in result.stderr and "25" in result.stderr
    quiet = invoke(runner, "import", folder, "--no-progress", "--db", tmp_path / "wb.duckdb")
    assert "importing" not in quiet.stderr and "skipped 50 duplicate sessions" in quiet.stdout


REPLAY_TOML = """
context_limit = 32000
max_output = 2000
trigger = { kind = "utilization", ratio = 0.7 }
strategy = { kind = "summarize_split", preserve = 0.4 }
"""


@pytest.fixture
def sample_db(runner, tmp_path):
    db = str(tmp_path / "wb.duckdb")
    assert runner.invoke(main, ["init", "--db", db]).exit_code == 0
    with Store(db) as store:
        rows = store.session_rows()
    return db, max(rows, key=lambda r: r["calls"])


def test_replay_prints_calls_and_compactions_from_a_toml_file(runner, sample_db, tmp_path):
    db, row = sample_db
    spec = tmp_path / "split.toml"
    spec.write_text(REPLAY_TOML)
    result = runner.invoke(main, ["replay", row["id"][:8], "--config", str(spec), "--db", db])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"session {row['id']} (openai, {row['calls']} calls) under 'utilization+summarize_split'")
    assert sum(1 for line in lines if line.split()[:1] and line.split()[0].isdigit()) > row["calls"]
    assert "[COMPACT SUMMARY]" in result.output and "billed input" in result.output


def test_replay_json_matches_the_library(runner, sample_db):
    import workbench as wb

    db, row = sample_db
    result = runner.invoke(main, ["replay", row["id"], "--config", REPLAY_TOML, "--db", db, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    with Store(db) as store:
        expected = wb.replay(store.load_session(row["id"]), REPLAY_TOML)
    assert data["metrics"] == json.loads(json.dumps(expected.metrics))
    assert len(data["calls"]) == row["calls"] and data["compactions"]
    assert data["calls"][0]["context_tokens"] == expected.calls[0].context_tokens


def test_replay_errors_are_one_line(runner, sample_db):
    db, row = sample_db
    unknown = runner.invoke(main, ["replay", "zzzz", "--config", REPLAY_TOML, "--db", db])
    assert unknown.exit_code == 2 and "no session 'zzzz'" in unknown.output
    typo = runner.invoke(main, ["replay", row["id"], "--config", REPLAY_TOML.replace("preserve", "preserv"),
                                "--db", db])
    assert typo.exit_code == 2 and "unknown parameter 'preserv'" in typo.output
    assert "Traceback" not in typo.output
