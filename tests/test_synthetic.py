"""The synthetic dataset generator: deterministic, exact sizes, shaped like real recordings."""

from __future__ import annotations

import json
import statistics

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import synthetic
from workbench.cli import main
from workbench.session import Session, recorded_input_tokens
from workbench.store import Store

USAGE_KEYS = {"input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens"}


def _check_pairing(session: Session) -> None:
    """Every call of an assistant turn is answered once, by the tool messages right after it."""
    messages = session.messages
    i = 0
    while i < len(messages):
        message = messages[i]
        if message.role == "tool":
            raise AssertionError(f"{session.id}: tool message {i} answers no call of the turn before it")
        i += 1
        if message.role == "assistant" and message.tool_calls:
            answers = messages[i : i + len(message.tool_calls)]
            assert [m.role for m in answers] == ["tool"] * len(message.tool_calls), (session.id, i)
            assert [m.tool_call_id for m in answers] == [c.id for c in message.tool_calls]
            assert [m.name for m in answers] == [c.name for c in message.tool_calls]
            i += len(message.tool_calls)


def test_same_seed_gives_the_same_sessions_and_another_seed_others():
    first = list(synthetic.iter_sessions(6, 600, seed=3))
    again = list(synthetic.iter_sessions(6, 600, seed=3))
    other = list(synthetic.iter_sessions(6, 600, seed=4))
    assert [s.id for s in first] == [s.id for s in again]
    assert [s.messages for s in first] == [s.messages for s in again]
    assert [s.metadata for s in first] == [s.metadata for s in again]
    assert [s.messages for s in first] != [s.messages for s in other]
    assert {s.id for s in first}.isdisjoint(s.id for s in other)


def test_a_session_is_the_same_alone_as_within_its_dataset():
    sessions = list(synthetic.iter_sessions(5, 500, seed=11))
    counts = synthetic.message_counts(5, 500, seed=11)
    alone = synthetic.generate_session(3, counts[3], seed=11)
    assert alone.messages == sessions[3].messages
    assert alone.id == sessions[3].id == "0000003-synthetic-11"


def test_ids_sort_in_generation_order():
    ids = [s.id for s in synthetic.iter_sessions(12, 120, seed=1)]
    assert ids == sorted(ids)


@settings(max_examples=25, deadline=None)
@given(sessions=st.integers(1, 6), extra=st.integers(0, 300), seed=st.integers(0, 10_000))
def test_message_totals_are_exact_and_every_call_is_answered(sessions, extra, seed):
    messages = synthetic.MIN_MESSAGES * sessions + extra
    counts = synthetic.message_counts(sessions, messages, seed)
    assert sum(counts) == messages and min(counts) >= synthetic.MIN_MESSAGES
    generated = list(synthetic.iter_sessions(sessions, messages, seed=seed))
    assert [len(s.messages) for s in generated] == counts
    for session in generated:
        _check_pairing(session)
        assert session.messages[-1].role in ("assistant", "tool")


@pytest.mark.parametrize(("sessions", "messages"), [(0, 10), (3, 11), (-1, 100)])
def test_impossible_sizes_are_refused(sessions, messages):
    with pytest.raises(ValueError, match="sessions|messages"):
        synthetic.message_counts(sessions, messages)


def test_shape_resembles_the_recordings():
    sessions = list(synthetic.iter_sessions(40, 20_000, seed=5))
    messages = [m for s in sessions for m in s.messages]
    roles = {
        role: sum(m.role == role for m in messages) / len(messages) for role in ("system", "user", "assistant", "tool")
    }
    # Claude Code / OpenHands: nearly half assistant, half tool, a few user turns, a system prompt or none.
    assert 0.38 < roles["assistant"] < 0.55 and 0.4 < roles["tool"] < 0.6
    assert 0.005 < roles["user"] < 0.1 and roles["system"] <= 40 / len(messages)
    assistants = [m for m in messages if m.role == "assistant"]
    assert any(len(m.tool_calls) > 1 for m in assistants) and any(not m.tool_calls for m in assistants)
    for message in assistants:
        assert set(message.metadata["usage"]) == USAGE_KEYS
        assert recorded_input_tokens(message) is not None and recorded_input_tokens(message) > 0
    outputs = sorted(len(m.text) for m in messages if m.role == "tool")
    p50, p99 = outputs[len(outputs) // 2], outputs[int(len(outputs) * 0.99)]
    assert 120 < p50 < 500 and p99 > 20 * p50  # heavy-tailed, as recorded tool outputs are
    assert max(outputs) <= synthetic.MAX_TEXT
    assert len({s.metadata["agent"] for s in sessions}) == len(synthetic.AGENTS)
    sizes = [len(s.messages) for s in sessions]
    assert statistics.pstdev(sizes) > 50  # sessions vary in length around the mean


def test_cached_agents_read_a_growing_prefix_from_the_cache():
    session = next(s for s in synthetic.iter_sessions(20, 4000, seed=2) if s.metadata["agent"] == "claude-code")
    reads = [m.metadata["usage"]["cache_read_input_tokens"] for m in session.messages if m.role == "assistant"]
    assert reads == sorted(reads) and reads[-1] > reads[0]
    totals = [recorded_input_tokens(m) for m in session.messages if m.role == "assistant"]
    assert totals == sorted(totals)


def test_jsonl_round_trips_through_the_importer(tmp_path):
    path = synthetic.write_jsonl(tmp_path / "synthetic.jsonl.gz", 5, 300, seed=9)
    assert path.exists() and not (tmp_path / "synthetic.jsonl.gz.partial").exists()
    with Store(tmp_path / "wb.duckdb") as store:
        report = store.import_paths([path])
        assert report.ok and report.sessions == 5 and report.messages == 300
        loaded = {s.id: s for s in store.load_sessions()}
    for session in synthetic.iter_sessions(5, 300, seed=9):
        assert [m.to_openai() for m in loaded[session.id].messages] == [m.to_openai() for m in session.messages]
        assert [m.metadata.get("usage") for m in loaded[session.id].messages] == [
            m.metadata.get("usage") for m in session.messages
        ]


def test_cli_generate_writes_the_database_and_skips_what_is_there(tmp_path):
    db = str(tmp_path / "wb.duckdb")
    runner = CliRunner()
    first = runner.invoke(
        main, ["generate", "--sessions", "8", "--messages", "800", "--seed", "2", "--db", db, "--json"]
    )
    assert first.exit_code == 0, first.output
    data = json.loads(first.output)
    assert (data["sessions"], data["messages"], data["duplicates"]) == (8, 800, 0)
    again = runner.invoke(
        main, ["generate", "--sessions", "8", "--messages", "800", "--seed", "2", "--db", db, "--json"]
    )
    assert json.loads(again.output)["duplicates"] == 8
    listed = runner.invoke(main, ["sessions", "--db", db, "--json", "--where", "messages >= 4"])
    assert sorted(r["id"] for r in json.loads(listed.output)) == [synthetic.session_id(i, 2) for i in range(8)]


def test_cli_generate_refuses_too_few_messages(tmp_path):
    result = CliRunner().invoke(
        main, ["generate", "--sessions", "10", "--messages", "20", "--db", str(tmp_path / "wb.duckdb")]
    )
    assert result.exit_code == 2
    assert "--messages" in result.output
    assert not (tmp_path / "wb.duckdb").exists()


def test_cli_generate_out_writes_jsonl(tmp_path):
    out = tmp_path / "data" / "synthetic.jsonl"
    result = CliRunner().invoke(main, ["generate", "--sessions", "3", "--messages", "60", "-o", str(out)])
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    assert len(lines) == 3 and sum(len(json.loads(line)["messages"]) for line in lines) == 60


@pytest.mark.parametrize(
    ("index", "seed", "dataset", "expected"),
    [
        (3, 11, "synthetic", "0000003-synthetic-11"),
        (3, 7, "syn2", "0000003-syn2-7"),
        (12, -3, "a-1", "0000012-a-1-n3"),  # not "a-1--3", which dataset "a-1-" with seed 3 would make
    ],
)
def test_session_ids_name_the_dataset_and_the_seed(index, seed, dataset, expected):
    assert synthetic.session_id(index, seed, dataset) == expected
    counts = synthetic.message_counts(index + 1, 4 * (index + 1), seed)
    assert synthetic.generate_session(index, counts[index], seed=seed, dataset=dataset).id == expected


def test_cli_generate_under_another_dataset_name_makes_new_sessions(tmp_path):
    db = str(tmp_path / "wb.duckdb")
    runner = CliRunner()
    first = runner.invoke(main, ["generate", "--sessions", "5", "--messages", "100", "--dataset", "syn", "--db", db])
    assert first.exit_code == 0, first.output
    second = runner.invoke(main, ["generate", "--sessions", "3", "--messages", "12", "--dataset", "syn2", "--db", db])
    assert second.exit_code == 0, second.output
    assert "generated 3 sessions (12 messages" in second.output and "skipped 0 sessions" in second.output
    again = runner.invoke(main, ["generate", "--sessions", "3", "--messages", "12", "--dataset", "syn2", "--db", db])
    assert again.exit_code == 0 and "generated 0 sessions" in again.output
    assert "3 already stored in dataset 'syn2'" in again.output
    listed = json.loads(runner.invoke(main, ["datasets", "--db", db, "--json"]).output)
    assert {r["name"]: (r["sessions"], r["messages"]) for r in listed} == {"syn": (5, 100), "syn2": (3, 12)}


@pytest.mark.parametrize(
    "other",
    [
        ["--sessions", "3", "--messages", "12"],
        ["--sessions", "5", "--messages", "100", "--seed", "8"],
        ["--sessions", "6", "--messages", "120"],
    ],
)
def test_cli_generate_refuses_a_dataset_holding_another_generation(tmp_path, other):
    db = str(tmp_path / "wb.duckdb")
    runner = CliRunner()
    first = runner.invoke(main, ["generate", "--sessions", "5", "--messages", "100", "--dataset", "syn", "--db", db])
    assert first.exit_code == 0, first.output
    refused = runner.invoke(main, ["generate", *other, "--dataset", "syn", "--db", db])
    assert refused.exit_code == 2, refused.output
    assert (
        "--dataset" in refused.output
        and "already holds 5 synthetic sessions (100 messages, seed 7)" in refused.output
        and "another dataset name" in refused.output
    )
    with Store(db, read_only=True) as store:
        assert store.count("sessions") == 5 and store.count("messages") == 100


def test_an_interrupted_generation_is_completed_by_running_it_again(tmp_path):
    with Store(tmp_path / "wb.duckdb") as store:
        store.import_sessions(list(synthetic.iter_sessions(6, 600, seed=3))[:2], dataset="synthetic")
        report = synthetic.generate_dataset(store, 6, 600, seed=3)
        assert (report.sessions, report.duplicates) == (4, 2)
        assert store.count("messages", dataset="synthetic") == 600
        with pytest.raises(synthetic.DatasetConflict, match="another generation"):
            synthetic.generate_dataset(store, 6, 600, seed=4)
