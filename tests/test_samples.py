"""The sample-session generator and the bundled `datasets/samples`."""

from __future__ import annotations

import gzip
import json

import pytest

from workbench import samples
from workbench.session import PROBE_KINDS, tool_pairing_problems

BUNDLED = samples.bundled_folder() / "samples.jsonl.gz"


@pytest.fixture(scope="module")
def dataset():
    return samples.generate_dataset()


def text_before_call(session, call_index):
    """The text (content and tool-call arguments) of the messages sent to call `call_index`."""
    parts, calls = [], 0
    for message in session.messages:
        if message.role == "assistant":
            if calls == call_index:
                break
            calls += 1
        parts.append(message.text)
        parts.extend(c.arguments for c in message.tool_calls)
    return "\n".join(parts)


def test_same_seed_same_sessions():
    first, second = samples.generate_session(7, 60), samples.generate_session(7, 60)
    assert first.id == second.id
    assert first == second
    assert samples.generate_session(8, 60).id != first.id


def test_regeneration_is_byte_identical_to_the_bundled_file(dataset):
    assert BUNDLED.is_file(), "run: python -m workbench.samples"
    assert samples.dataset_bytes(dataset) == BUNDLED.read_bytes(), (
        "datasets/samples is out of date: run python -m workbench.samples"
    )
    assert [s.id for s in samples.read_dataset(samples.bundled_folder())] == [s.id for s in dataset]


def test_bundled_file_is_small_and_one_session_per_line():
    assert BUNDLED.stat().st_size < 3_000_000
    with gzip.open(BUNDLED, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    assert len(records) == samples.DEFAULT_N
    assert set(records[0]) >= {"id", "messages", "tools", "probes", "metadata"}
    assert any("importance" in m for r in records for m in r["messages"])


def test_sizes_span_20_to_400_calls(dataset):
    calls = [s.calls for s in dataset]
    assert calls == samples.dataset_sizes()
    assert min(calls) == 20 and max(calls) == 400
    assert len(set(calls)) == len(calls)


@pytest.mark.parametrize("calls", [3, 4, 5, 8, 13, 21, 34])
def test_small_sessions_have_exactly_the_calls_asked(calls):
    for seed in range(6):
        session = samples.generate_session(seed, calls)
        assert session.calls == calls
        assert tool_pairing_problems(session.messages) == []


def test_tool_pairing_is_clean(dataset):
    for session in dataset:
        assert tool_pairing_problems(session.messages) == [], session.id
        for index, message in enumerate(session.messages):  # results come right after their call
            if message.role == "assistant" and message.tool_calls:
                following = session.messages[index + 1 : index + 1 + len(message.tool_calls)]
                assert [m.tool_call_id for m in following] == [c.id for c in message.tool_calls]


def test_probes_expected_text_is_in_the_session_by_from_call(dataset):
    kinds = set()
    for session in dataset:
        assert len(session.probes) >= 3, session.id
        for probe in session.probes:
            kinds.add(probe.kind)
            assert 0 <= probe.from_call < session.calls
            assert probe.expected in text_before_call(session, probe.from_call), (session.id, probe)
    assert kinds == set(PROBE_KINDS)


def test_pinned_messages_and_realistic_content(dataset):
    for session in dataset:
        assert any(m.pinned for m in session.messages), session.id
        assert session.messages[0].role == "system"
        assert {t["function"]["name"] for t in session.tools} == {"read_file", "grep", "run_tests", "edit_file", "bash"}
    everything = "\n".join(m.text for s in dataset for m in s.messages)
    for marker in (
        "Traceback (most recent call last)",
        "FAILED tests/",
        "passed in",
        "def ",
        "Error: file not found",
        "migrations/",
        "pytest -x",
        "backward compatible",
    ):
        assert marker in everything, marker
    topics = [m.text for s in dataset for m in s.messages if m.role == "user"]
    assert len(set(topics)) > 40  # requests change topic
    assert max(len(m.text) for s in dataset for m in s.messages) > 5000  # large tool outputs


def test_write_and_read_round_trip(tmp_path, dataset):
    target = samples.write_dataset(dataset[:3], tmp_path / "out", name="mini")
    assert target.name == "mini.jsonl.gz"
    back = samples.read_dataset(tmp_path / "out")
    assert back == dataset[:3]
    assert [s.probes for s in back] == [s.probes for s in dataset[:3]]


def test_module_cli_check(tmp_path, capsys):
    assert samples.main(["--out", str(tmp_path), "--n", "2", "--max-calls", "30"]) == 0
    assert (tmp_path / "samples.jsonl.gz").is_file()
    assert samples.main(["--out", str(tmp_path), "--n", "2", "--max-calls", "30", "--check"]) == 0
    assert samples.main(["--out", str(tmp_path), "--n", "3", "--max-calls", "30", "--check"]) == 1
