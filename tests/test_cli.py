"""The `workbench` command: import, sessions, init, errors, start-up cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench import samples
from workbench.cli import FORMAT_CHOICES, format_names, main
from workbench.formatting import format_value
from workbench.store import Store

pytestmark = pytest.mark.slow  # the command line, many commands in processes of their own


def openai_line(i: int) -> str:
    return json.dumps(
        {
            "messages": [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": f"Fix bug {i}"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"c{i}",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": f"c{i}", "content": "x = 1"},
                {"role": "assistant", "content": f"Fixed bug {i}."},
            ]
        }
    )


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
    assert "duplicate" not in result.stdout  # nothing skipped, nothing said
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "bad.json" in error_lines[0]
    assert "Traceback" not in result.output
    assert "1 of 3 files failed" in result.stderr
    with Store(db) as store:
        assert store.count() == 4

    again = invoke(runner, "import", good, "--db", db)
    assert again.exit_code == 0
    assert "imported 0 sessions" in again.stdout
    assert "skipped 3 duplicate sessions: 3 already stored in dataset" in again.stdout


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
    bad = invoke(runner, "sessions", "--where", "cals > 1", "--db", db)
    assert bad.exit_code == 2  # a usage error, like a bad config
    assert bad.stderr.startswith("error: the condition 'cals > 1' over the sessions cannot run: Binder Error")


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


def test_init_samples_adds_the_samples_to_a_database_of_other_sessions(runner, files, tmp_path):
    """The shipped experiments run on the samples; a database filled with one's own recordings gets them on asking."""
    good, _, _ = files
    db = tmp_path / "wb.duckdb"
    invoke(runner, "import", good, "--db", db)
    assert "nothing to import" in invoke(runner, "init", "--db", db).stdout  # not asked: left alone
    added = json.loads(invoke(runner, "init", "--samples", "--db", db, "--json").stdout)
    assert added["imported"] == samples.DEFAULT_N and added["sessions"] == samples.DEFAULT_N + 3
    again = invoke(runner, "init", "--samples", "--db", db)
    assert again.exit_code == 0 and "the samples are there already" in again.stdout


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
    assert format_names()[: len(FORMAT_CHOICES)] == FORMAT_CHOICES


def test_a_locked_database_is_a_one_line_error(tmp_path):
    db = tmp_path / "wb.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys
        from workbench.store import Store
        store = Store({str(db)!r})
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
        result = subprocess.run(
            [sys.executable, "-m", "workbench", "sessions", "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "WORKBENCH_LOCK_WAIT": "0.5"},
        )  # not the default 10 s
    finally:
        holder.communicate("\n", timeout=30)
    assert result.returncode == 1
    assert result.stderr.startswith("error: database ") and "in use by another process" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_help_is_cheap_to_start():
    code = (
        "import sys, workbench.cli; "
        "print([m for m in ('pandas', 'litellm', 'streamlit', 'pyarrow', 'tiktoken') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
    help_run = subprocess.run([sys.executable, "-m", "workbench", "--help"], capture_output=True, text=True, timeout=60)
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


def _initialised(db: Path) -> None:
    assert CliRunner().invoke(main, ["init", "--db", str(db)]).exit_code == 0


@pytest.fixture
def sample_db(tmp_path, database_copy):
    """A copy of what `workbench init` writes, and its session of the most calls."""
    db = str(tmp_path / "wb.duckdb")
    database_copy(Path(db), "init", _initialised)
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
    assert lines[0].startswith(
        f"session {row['id']} (openai, {row['calls']} calls) under 'utilization+summarize_split'"
    )
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


def test_replay_shows_what_each_compaction_kept_and_labels_the_offline_summaries(runner, sample_db):
    import workbench as wb

    db, row = sample_db
    text = runner.invoke(main, ["replay", row["id"], "--config", REPLAY_TOML, "--db", db, "--no-calls"])
    assert text.exit_code == 0, text.output
    with Store(db) as store:
        expected = wb.replay(store.load_session(row["id"]), REPLAY_TOML)
    header = next(line for line in text.output.splitlines() if line.startswith("call "))
    assert "task state" in header and "lexical kept" in header and "needed kept" in header
    assert "lexical facts removed (paths, identifiers, numbers, commands)" in text.output
    first = next(
        line for line in text.output.splitlines() if line.split()[:1] == [str(expected.compactions[0].call_index)]
    )
    assert format_value("number", expected.compaction_metrics[0]["fact_retention"]) in first
    assert f"lexical facts kept {expected.metrics['fact_retention']:.3f}" in text.output
    assert f"task state stated {expected.metrics['task_state_coverage']:.3f}" in text.output
    assert "Summaries by workbench/extractive: the offline extractive baseline (not a model)" in text.output
    data = json.loads(
        runner.invoke(main, ["replay", row["id"], "--config", REPLAY_TOML, "--db", db, "--json", "--no-calls"]).output
    )
    assert data["note"] == expected.baseline_note() and "offline extractive baseline" in data["note"]
    assert [c["fact_retention"] for c in data["compactions"]] == [
        m["fact_retention"] for m in expected.compaction_metrics
    ]
    assert data["compactions"][0]["lost_facts"] == expected.compaction_metrics[0]["lost_facts"]
    window = REPLAY_TOML.replace(
        '{ kind = "summarize_split", preserve = 0.4 }', '{ kind = "sliding_window", window = 4 }'
    )
    plain = runner.invoke(main, ["replay", row["id"], "--config", window, "--db", db, "--no-calls"])
    assert plain.exit_code == 0 and "lexical facts kept" in plain.output and "offline extractive" not in plain.output


def _evaluator_answers(body):
    """A judge's scores, a next action, or a probe answer, as an evaluator model would send them."""
    system = body["messages"][0]["content"]
    if system.startswith("You grade"):
        from workbench.quality.judge import DIMENSIONS

        return json.dumps(dict.fromkeys(DIMENSIONS, 3))
    if system.startswith("You are continuing"):
        return json.dumps({"tool": "read_file", "arguments": {"path": "src/app.py"}})
    return "UNKNOWN"


def test_replay_computes_the_model_metrics_asked_for_and_caches_their_answers(runner, sample_db):
    from workbench.testing import FakeOpenAI, Fault

    db, row = sample_db
    with FakeOpenAI(responder=_evaluator_answers) as server:
        config = (
            REPLAY_TOML + 'evaluator = "openai/fake-judge"\n'
            f'evaluator_options = {{ api_base = "{server.api_base}", api_key = "sk-dummy" }}\n'
        )
        asked = [
            "replay",
            row["id"],
            "--config",
            config,
            "--db",
            db,
            "--json",
            "--no-calls",
            "--metric",
            "judge_score",
            "--metric",
            "probe_accuracy",
        ]
        first = runner.invoke(main, asked)
        assert first.exit_code == 0, first.output
        metrics = json.loads(first.output)["metrics"]
        assert metrics["judge_score"] == 3.0 and metrics["probe_accuracy"] == 0.0
        assert metrics["evaluator_calls"] == server.request_count > 0
        again = runner.invoke(main, asked)
        assert again.exit_code == 0 and json.loads(again.output)["metrics"]["judge_score"] == 3.0
        assert server.request_count == metrics["evaluator_calls"]  # answered from the database's cache
        server.responder = lambda body: Fault.error(400, "no such model")
        failed = runner.invoke(main, [*asked[:3], config.replace("fake-judge", "other-judge"), *asked[4:]])
    assert failed.exit_code == 1
    assert "judge_score" in failed.output and "no such model" in failed.output
    plain = runner.invoke(main, ["replay", row["id"], "--config", REPLAY_TOML, "--db", db, "--metric", "judge_score"])
    assert plain.exit_code == 2 and "judge_score asks a model: set `evaluator` in the config" in plain.output


def test_replay_takes_a_preset_by_name(runner, sample_db):
    import workbench as wb

    db, row = sample_db
    result = runner.invoke(main, ["replay", row["id"], "--config", "ptc-runner-trim", "--db", db, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["config"]["name"] == "ptc-runner-trim" and data["config"]["strategy"]["kind"] == "trim"
    with Store(db) as store:
        assert data["metrics"] == json.loads(
            json.dumps(wb.replay(store.load_session(row["id"]), wb.preset("ptc-runner-trim")).metrics)
        )
    typo = runner.invoke(main, ["replay", row["id"], "--config", "ptc-runner-trin", "--db", db])
    assert typo.exit_code == 2 and "did you mean 'ptc-runner-trim'?" in typo.output


def test_replay_errors_are_one_line(runner, sample_db):
    db, row = sample_db
    unknown = runner.invoke(main, ["replay", "zzzz", "--config", REPLAY_TOML, "--db", db])
    assert unknown.exit_code == 2 and "no session 'zzzz'" in unknown.output
    typo = runner.invoke(
        main, ["replay", row["id"], "--config", REPLAY_TOML.replace("preserve", "preserv"), "--db", db]
    )
    assert typo.exit_code == 2 and "unknown parameter 'preserv'" in typo.output
    assert "Traceback" not in typo.output


# --------------------------------------------------------------------------------------------
# --db safety, read-only commands, exit statuses, JSON errors
# --------------------------------------------------------------------------------------------

NOT_DATABASES = [
    ("sessions.csv", b"id,role,content\n1,user,hi\n"),
    ("sessions.json", b'[{"role": "user", "content": "hi"}]'),
    ("sessions.jsonl", (openai_line(7) + "\n").encode()),
    ("sessions.parquet", b"PAR1\x15\x00\x15\x1c\x15\x1c,\x15\x02\x15\x00PAR1"),
    ("notes.txt", b"some notes, not a database\n"),
]


@pytest.mark.parametrize("name, data", NOT_DATABASES)
@pytest.mark.parametrize("command", [["import"], ["sessions"], ["datasets"], ["init"]])
def test_a_db_that_is_not_a_duckdb_file_is_refused_untouched(runner, files, tmp_path, name, data, command):
    folder = tmp_path / "target"
    folder.mkdir()
    target = folder / name
    target.write_bytes(data)
    args = [*command, files[0]] if command == ["import"] else command
    result = runner.invoke(main, [*map(str, args), "--db", str(target)])
    assert result.exit_code == 2, result.output
    assert "not a DuckDB database" in result.stderr and "Traceback" not in result.output
    assert target.read_bytes() == data
    assert [p.name for p in folder.iterdir()] == [name]  # no .wal or other file beside it
    as_json = runner.invoke(main, [*map(str, args), "--db", str(target), "--json"])
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout)["error"]["type"] == "NotADatabaseError"
    assert target.read_bytes() == data


@pytest.mark.parametrize("command", [["sessions"], ["datasets"], ["replay", "abc", "--config", "x = 1"]])
def test_read_only_commands_on_a_missing_db_create_nothing(runner, tmp_path, command):
    missing = tmp_path / "sub" / "wb.duckdb"
    result = runner.invoke(main, [*command, "--db", str(missing)])
    assert result.exit_code == 2, result.output
    assert "does not exist" in result.stderr and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []
    result = runner.invoke(main, ["--json", *command], env={"WORKBENCH_DB": str(missing)})
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["type"] == "MissingDatabaseError"
    assert list(tmp_path.iterdir()) == []


def test_kinds_needs_no_database(runner, tmp_path):
    missing = tmp_path / "sub" / "wb.duckdb"
    text = runner.invoke(main, ["kinds", "--db", str(missing)])
    assert text.exit_code == 0, text.output
    assert "summarize_split" in text.stdout and "preserve" in text.stdout
    listing = json.loads(runner.invoke(main, ["kinds", "strategy", "--json"]).stdout)
    assert list(listing) == ["strategy"]
    split = next(k for k in listing["strategy"] if k["name"] == "summarize_split")
    assert "preserve" in [p["name"] for p in split["params"]]
    everything = json.loads(runner.invoke(main, ["--json", "kinds"]).stdout)
    assert {"trigger", "strategy", "importer", "metric"} <= set(everything)
    assert list(tmp_path.iterdir()) == []
    bad = runner.invoke(main, ["kinds", "strategies", "--json"])
    assert bad.exit_code == 2 and json.loads(bad.stdout)["error"]["type"] == "BadParameter"


def test_usage_errors_are_json_under_json(runner, tmp_path):
    missing_option = runner.invoke(main, ["replay", "abc", "--json"])
    assert missing_option.exit_code == 2
    error = json.loads(missing_option.stdout)["error"]
    assert error["type"] == "MissingParameter" and "--config" in error["message"]
    unknown_command = runner.invoke(main, ["--json", "replays"])
    assert unknown_command.exit_code == 2 and "replays" in json.loads(unknown_command.stdout)["error"]["message"]
    text = runner.invoke(main, ["replay", "abc"])
    assert text.exit_code == 2 and "--config" in text.stderr and not text.stdout
    bad_format = runner.invoke(
        main, ["import", str(tmp_path), "--format", "nope", "--json", "--db", str(tmp_path / "wb.duckdb")]
    )
    assert bad_format.exit_code == 2 and "unknown format 'nope'" in json.loads(bad_format.stdout)["error"]["message"]
    assert not (tmp_path / "wb.duckdb").exists()
    alias = runner.invoke(
        main, ["import", str(tmp_path), "--format", "openai-chat", "--db", str(tmp_path / "a.duckdb")]
    )
    assert alias.exit_code == 1 and "no session file found" in alias.stderr, alias.output  # accepted, nothing found


def test_the_last_shared_option_wins_and_quiet_is_accepted_anywhere(runner, files, tmp_path):
    first, second = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    result = runner.invoke(main, ["--db", str(first), "-q", "import", str(files[0]), "--db", str(second)])
    assert result.exit_code == 0, result.output
    assert not first.exists()
    with Store(second) as store:
        assert store.count() == 3


NO_LLM_TOML = """
context_limit = 32000
max_output = 1000
trigger = { kind = "utilization", ratio = 0.6 }
strategy = { kind = "observation_masking", keep_recent = 2 }
"""
OVERFLOW_TOML = """
context_limit = 3000
max_output = 1000
trigger = { kind = "token_threshold", threshold = 0 }
strategy = { kind = "hard_clear" }
"""


def _compaction_count(text: str) -> int:
    line = next(line for line in text.splitlines() if "compaction(s)" in line)
    return int(line.split()[0])


@pytest.mark.parametrize(
    "spec, status, termination", [(NO_LLM_TOML, 0, "completed"), (OVERFLOW_TOML, 1, "context_overflow")]
)
def test_replay_exit_status_and_compaction_counts_agree(runner, sample_db, spec, status, termination):
    db, row = sample_db
    text = runner.invoke(main, ["replay", row["id"], "--config", spec, "--db", db])
    data = runner.invoke(main, ["replay", row["id"], "--config", spec, "--db", db, "--json"])
    assert (text.exit_code, data.exit_code) == (status, status), text.output
    result = json.loads(data.stdout)
    assert result["termination"] == termination
    assert text.stdout.splitlines()[0].endswith(termination)
    done = [e for e in result["compactions"] if not e.get("error") and not e["noop"]]
    assert _compaction_count(text.stdout) == result["compaction_count"] == len(done) == result["metrics"]["compactions"]
    assert (
        result["noop_compactions"]
        == result["metrics"]["noop_compactions"]
        == sum(1 for e in result["compactions"] if e["noop"])
    )
    if termination == "completed":
        assert result["compaction_count"] > 0
    else:
        assert "stopped:" in text.stderr and "Traceback" not in text.output


def test_no_calls_omits_the_calls(runner, sample_db):
    db, row = sample_db
    with_calls = json.loads(
        runner.invoke(main, ["replay", row["id"], "--config", NO_LLM_TOML, "--db", db, "--json"]).stdout
    )
    without = json.loads(
        runner.invoke(main, ["replay", row["id"], "--config", NO_LLM_TOML, "--db", db, "--json", "--no-calls"]).stdout
    )
    assert len(with_calls["calls"]) == row["calls"]
    assert "calls" not in without and without["metrics"] == with_calls["metrics"]
    text = runner.invoke(main, ["replay", row["id"], "--config", NO_LLM_TOML, "--db", db, "--no-calls"]).stdout
    full = runner.invoke(main, ["replay", row["id"], "--config", NO_LLM_TOML, "--db", db]).stdout
    assert "per call (" not in text and "per call (" in full
    assert len(full.splitlines()) - len(text.splitlines()) == row["calls"] + 3  # a blank, the title, the header


# --------------------------------------------------------------------------------------------
# What import reports: ignored files, live sessions
# --------------------------------------------------------------------------------------------


def test_import_names_every_file_it_ignored_and_why(runner, tmp_path):
    folder = tmp_path / "in"
    (folder / ".git").mkdir(parents=True)
    (folder / ".git" / "config.json").write_text("{}")
    (folder / "package.json").write_text('{"name": "x"}')
    (folder / "README.md").write_text("# notes")
    (folder / "notes.json").write_text('{"hello": "world"}')
    (folder / "good.jsonl").write_text(openai_line(1) + "\n")
    result = runner.invoke(main, ["import", str(folder), "--db", str(tmp_path / "wb.duckdb")])
    assert result.exit_code == 0, result.output
    assert "imported 1 session " in result.stdout
    lines = {line.strip().split(": ", 1)[0]: line for line in result.stderr.splitlines() if ": " in line}
    assert "folder skipped" in lines[str(folder / ".git")]
    assert "configuration file" in lines[str(folder / "package.json")]
    assert "not a session file type" in lines[str(folder / "README.md")]
    assert "matches no known session format" in lines[str(folder / "notes.json")]
    report = json.loads(
        runner.invoke(main, ["import", str(folder), "--json", "--db", str(tmp_path / "wb.duckdb")]).stdout
    )
    assert {s["path"].rsplit("/", 1)[-1] for s in report["skipped"]} == {
        ".git",
        "package.json",
        "README.md",
        "notes.json",
    }
    quiet = runner.invoke(main, ["import", str(folder), "--quiet", "--db", str(tmp_path / "wb.duckdb")])
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_an_import_that_finds_nothing_fails_and_a_missing_path_creates_no_database(runner, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "README.md").write_text("# not a session")
    db = tmp_path / "wb.duckdb"
    empty = runner.invoke(main, ["import", str(folder), "--db", str(db)])
    assert empty.exit_code == 1 and "imported 0 sessions" in empty.stdout
    assert f"error: no session file found in {folder}" in empty.stderr and "README.md" in empty.stderr
    report = runner.invoke(main, ["import", str(folder), "--json", "--db", str(db)])
    assert report.exit_code == 1 and json.loads(report.stdout)["files"] == 0
    blank = runner.invoke(main, ["import", str(folder), "--dataset", " ", "--db", str(db)])
    assert blank.exit_code == 2 and "dataset name cannot be empty" in blank.stderr
    elsewhere = tmp_path / "other.duckdb"
    missing = runner.invoke(main, ["import", str(tmp_path / "nope"), "--db", str(elsewhere)])
    assert missing.exit_code == 1 and "nope: no such file or folder" in missing.stderr
    assert not elsewhere.exists()


def test_a_session_file_imported_again_after_it_grew_replaces_the_earlier_import(runner, tmp_path):
    record = json.loads(openai_line(1))
    live = tmp_path / "live.json"
    live.write_text(json.dumps({"messages": record["messages"][:4]}))  # read while the agent worked
    db = tmp_path / "wb.duckdb"
    assert runner.invoke(main, ["import", str(live), "--db", str(db)]).exit_code == 0
    live.write_text(json.dumps(record))
    again = runner.invoke(main, ["import", str(live), "--db", str(db)])
    assert again.exit_code == 0 and "imported 1 session" in again.stdout
    assert "1 of them replaced an earlier import of the same recording, which grew since" in again.stdout
    listed = json.loads(runner.invoke(main, ["sessions", "--json", "--db", str(db)]).stdout)
    assert [row["messages"] for row in listed] == [5]


def test_a_live_session_imports_its_complete_lines_with_a_warning(runner, tmp_path):
    live = tmp_path / "live.jsonl"
    partial = openai_line(3)[:57]
    live.write_text(openai_line(1) + "\n" + openai_line(2) + "\n" + partial)  # the recorder is mid-line
    db = tmp_path / "wb.duckdb"
    result = runner.invoke(main, ["import", str(live), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "imported 2 sessions" in result.stdout
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "live.jsonl:3" in warning[0] and "incomplete" in warning[0]
    report = json.loads(runner.invoke(main, ["import", str(live), "--json", "--db", str(db)]).stdout)
    assert report["duplicates"] == 2 and len(report["warnings"]) == 1
    broken_middle = tmp_path / "broken.jsonl"
    broken_middle.write_text(openai_line(4) + "\n" + partial + "\n" + openai_line(5) + "\n")
    failed = runner.invoke(main, ["import", str(broken_middle), "--db", str(db)])
    assert failed.exit_code == 1 and "broken.jsonl:2" in failed.stderr


# --------------------------------------------------------------------------------------------
# Ctrl-C
# --------------------------------------------------------------------------------------------

SLOW_IMPORT = textwrap.dedent("""
    import sys, time, pathlib
    from workbench.store import writer as store
    marker = pathlib.Path(sys.argv[1])
    original = store.Writer.add
    added = [0]

    def add(self, session, source=None):  # small batches, then slow: Ctrl-C lands mid-import
        original(self, session, source)
        added[0] += 1
        if added[0] % 10 == 0:
            self.flush()
        if added[0] == 30:
            marker.write_text("go")
        if added[0] >= 30:
            time.sleep(0.2)

    store.Writer.add = add
    from workbench.cli import main
    main(sys.argv[2:])
""")

SLOW_REPLAY = textwrap.dedent("""
    import sys, time, pathlib
    from dataclasses import dataclass
    import workbench as wb
    marker = pathlib.Path(sys.argv[1])

    @wb.register_strategy("slow_test_strategy")
    @dataclass(frozen=True)
    class Slow:
        def compact(self, context, env):
            marker.write_text("go")
            time.sleep(0.2)
            return list(context)

    from workbench.cli import main
    main(sys.argv[2:])
""")


def _interrupt(script: str, marker, args: list[str], stop: int | None = None) -> subprocess.CompletedProcess:
    """Run the script, and once it wrote the marker send it `stop` (default SIGINT, as Ctrl-C does)."""
    import signal
    import time

    process = subprocess.Popen(
        [sys.executable, "-c", script, str(marker), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGINT if stop is None else stop)
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _assert_whole(db) -> int:
    with Store(db) as store:  # opens fine afterwards
        rows = store.connection.execute("""
            SELECT s.id, s.message_count, count(m.idx), coalesce(max(m.idx), -1)
            FROM sessions s LEFT JOIN messages m ON m.session_id = s.id GROUP BY ALL""").fetchall()
        orphans = store.connection.execute(
            "SELECT count(*) FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)"
        ).fetchall()[0][0]
    assert orphans == 0
    assert all(n == stored == last + 1 for _, n, stored, last in rows)
    return len(rows)


def test_ctrl_c_during_import_keeps_whole_sessions_only(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(20):
        (folder / f"s{i:02d}.jsonl").write_text("".join(openai_line(i * 10 + k) + "\n" for k in range(5)))
    db = tmp_path / "wb.duckdb"
    result = _interrupt(SLOW_IMPORT, tmp_path / "marker", ["import", str(folder), "--db", str(db), "--no-progress"])
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip().splitlines() == ["error: interrupted; nothing partial was written"]
    assert "Traceback" not in result.stderr
    stored = _assert_whole(db)
    assert 30 <= stored < 100
    again = subprocess.run(
        [sys.executable, "-m", "workbench", "import", str(folder), "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["sessions"] == 100 - stored
    assert _assert_whole(db) == 100


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_ctrl_c_or_sigterm_during_replay_exits_130(tmp_path, sample_db, stop):
    import signal

    db, row = sample_db
    config = 'trigger = { kind = "token_threshold", threshold = 1 }\nstrategy = { kind = "slow_test_strategy" }'
    result = _interrupt(
        SLOW_REPLAY,
        tmp_path / "marker",
        ["replay", row["id"], "--config", config, "--db", db],
        stop=getattr(signal, stop),
    )
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip().splitlines() == ["error: interrupted; nothing partial was written"]
    assert result.stdout == ""
    assert _assert_whole(db) == samples.DEFAULT_N


def test_repr_of_a_stored_session_is_one_short_line(tmp_path):
    long_line = json.dumps(
        {"messages": [{"role": "user", "content": "x" * 200_000}, {"role": "assistant", "content": "ok"}]}
    )
    (tmp_path / "big.jsonl").write_text(long_line + "\n")
    with Store(tmp_path / "wb.duckdb") as store:
        store.import_paths([tmp_path / "big.jsonl"])
        session = store.load_session(store.session_ids()[0])
    for value in (session, session.messages[0]):
        text = repr(value)
        assert "\n" not in text and len(text) < 200, text
    assert "messages=2" in repr(session) and "200,000 chars" in repr(session.messages[0])


def test_make_clean_never_deletes_a_database():
    import shutil
    from pathlib import Path

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    root = Path(__file__).resolve().parents[1]
    recipe = subprocess.run(["make", "-n", "clean"], cwd=root, capture_output=True, text=True, timeout=60)
    assert recipe.returncode == 0, recipe.stderr
    assert "rm -rf .venv" in recipe.stdout
    assert "duckdb" not in recipe.stdout and "data" not in recipe.stdout.replace("__pycache__", "")


@pytest.mark.parametrize(
    ("value", "numeric"),
    [
        (3, True),
        (2.5, True),
        (None, True),
        ("", True),
        ("1,234", True),
        ("-1,844", True),
        ("$0.0123", True),
        ("57%", True),
        ("0.863", True),
        (True, False),
        ("completed", False),
        ("[0, 6]", False),
        ("2 differ/5 same", False),
    ],
)
def test_numbers_and_numbers_written_out_count_as_numeric(value, numeric):
    from workbench.cli.common import _numeric

    assert _numeric(value) is numeric


def test_tables_right_align_numbers_even_when_written_out(capsys):
    from workbench.cli.common import print_table

    print_table(
        [{"config": "a", "tokens": "1,234,567", "share": "57%"}, {"config": "longer", "tokens": "89", "share": ""}],
        ["config", "tokens", "share"],
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["config     tokens  share", "a       1,234,567    57%", "longer         89"]


def test_replay_shows_the_billed_input_beside_the_replayed_tokens_when_the_recording_has_it(runner, grid_db):
    import workbench as wb

    db, _, ids = grid_db
    result = runner.invoke(main, ["replay", ids[0], "--config", REPLAY_TOML, "--db", db], catch_exceptions=False)
    lines = result.output.splitlines()
    assert lines[1].startswith("billed input "), "the totals come right after the header"
    at = next(i for i, line in enumerate(lines) if line.startswith("per call ("))
    header, first = lines[at + 1 : at + 3]
    assert header.split()[-2:] == ["recorded", "input"] and "agent compacted" not in header
    with Store(str(db)) as store:
        billed = wb.replay(store.load_session(ids[0]), REPLAY_TOML).recorded_columns()[0]
    assert first.split()[-1] == str(billed[0]) and billed[0] is not None


MASK_EVERY_CALL = (
    'name = "mask"\ntrigger = { kind = "pressure", turns = 1 }\n'
    'strategy = { kind = "observation_masking", keep_recent = 3 }\ncontext_limit = 20000'
)


def test_replay_lists_only_the_compactions_that_changed_the_context_and_counts_the_noops(runner, tmp_path):
    from builders import assistant, conversation, system, user

    import workbench as wb

    chat = [system(), user("Plan the release")]
    for i in range(6):
        chat += [assistant(f"thinking about part {i} " * 10), user(f"next part {i}")]
    sessions = [wb.Session.from_messages(chat), wb.Session.from_messages(conversation(10, result_chars=400))]
    db = str(tmp_path / "wb.duckdb")
    with Store(db) as store:
        store.import_sessions(sessions, dataset="mixed")
    masked = wb.replay(sessions[1], MASK_EVERY_CALL)
    changed = [e for e in masked.compactions if not e.noop]
    noops = len(masked.compactions) - len(changed)
    assert changed and noops
    text = runner.invoke(main, ["replay", sessions[1].id, "--config", MASK_EVERY_CALL, "--db", db, "--no-calls"])
    assert text.exit_code == 0, text.output
    assert f"{len(changed)} compaction(s); {noops} no-op firing(s) not listed" in text.stdout
    rows = [
        line.split()[0]
        for line in text.stdout.split("no-op firing(s)")[1].splitlines()[2:]
        if line.split()[:1] and line.split()[0].isdigit()
    ]
    assert rows == [str(e.call_index) for e in changed]
    assert "found nothing to change" not in text.stderr

    nothing = runner.invoke(main, ["replay", sessions[0].id, "--config", MASK_EVERY_CALL, "--db", db, "--no-calls"])
    assert nothing.exit_code == 0 and "0 compaction(s); 5 no-op firing(s) not listed" in nothing.stdout
    said = [line for line in nothing.stderr.splitlines() if "found nothing" in line]
    assert said == [
        "warning: 'mask' (observation_masking) found nothing to change in this session: its trigger "
        "fired 5 times and every compaction left the context as it was"
    ]
    data = json.loads(
        runner.invoke(
            main, ["replay", sessions[0].id, "--config", MASK_EVERY_CALL, "--db", db, "--json", "--no-calls"]
        ).stdout
    )
    assert (data["compaction_count"], data["noop_compactions"], data["metrics"]["compactions"]) == (0, 5, 0)
    assert all(event["noop"] for event in data["compactions"]) and "this session" in data["noop_note"]


def test_run_and_compare_say_what_replays_that_stopped_early_left_out(runner, early_stop_db):
    """`raw` overflows on two of the three sessions: `run` prints the leaderboard over the session both
    configs completed and the same note as the app and the report; `--all-sessions` compares on all."""
    from workbench.experiments import results
    from workbench.experiments.compare import complete_pairs

    db, spec = early_stop_db
    shown = invoke(runner, "run", spec, "--db", db)
    assert shown.exit_code == 0, shown.output
    run_id = shown.output.split()[1].rstrip(":")
    note = complete_pairs(results(run_id, str(db))).note
    assert note.startswith(
        "Compared on 1 of 3 sessions where every config completed; left out: raw 2 (context_overflow)."
    )
    assert note in shown.output
    rows = {line.split()[0]: line.split() for line in shown.output.splitlines() if line.startswith(("clear", "raw"))}
    billed = 4  # config, cells, completed, compactions, then billed_input_tokens
    assert rows["clear"][billed] == rows["raw"][billed]  # the short session: neither compacts
    every = invoke(runner, "run", spec, "--db", db, "--all-sessions")
    assert "replays that stopped early included" in every.output
    rows = {line.split()[0]: line.split() for line in every.output.splitlines() if line.startswith(("clear", "raw"))}
    assert int(rows["raw"][billed].replace(",", "")) < int(rows["clear"][billed].replace(",", ""))
    as_json = json.loads(invoke(runner, "run", spec, "--db", db, "--json").output)
    assert as_json["complete_pairs"]["left_out"] == {"clear": {}, "raw": {"context_overflow": 2}}
    compared = invoke(runner, "compare", run_id, "--db", db)
    assert "1 paired session(s)" in compared.output.splitlines()[0]
    assert (
        "Compared on 1 of 3 sessions where both sides completed; left out: raw 2 (context_overflow)." in compared.output
    )
    assert "3 paired session(s)" in invoke(runner, "compare", run_id, "--db", db, "--all-sessions").output
