"""The memo of quality measures (workbench.quality.measure_memo): a replay that came out as one measured
before, with the same code, gets the same values read back, and nothing else does."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import ClassVar

import pyarrow as pa
import pytest
from builders import SMALL_STRATEGIES, ScriptedSummarizer, assistant, conversation, conversations, user
from hypothesis import HealthCheck, given, settings

import workbench as wb
from workbench.quality import retention, task_state
from workbench.quality.measure_memo import StoredMeasures, _message_digest, replay_fingerprint
from workbench.registry import evaluate_metrics, register_metric, reusable_metrics, unregister
from workbench.session import Session, ToolCall

MASKING = {
    "trigger": {"kind": "token_threshold", "threshold": 1500},
    "strategy": {"kind": "observation_masking", "keep_recent": 2},
    "context_limit": 100_000,
    "max_output": 100,
}
SUMMARY = {**MASKING, "strategy": {"kind": "summarize_full"}}


def _session() -> Session:
    return Session.from_messages(conversation(30, result_chars=400))


def _table(texts: dict[str, str]) -> pa.Table:
    """Measures as `RunResults.stored_measures` reads them: fingerprint -> JSON."""
    return pa.table({"fingerprint": list(texts), "measures": list(texts.values())})


def _stored(memo: StoredMeasures) -> StoredMeasures:
    """What a later run of the same code starts from: the rows `memo` took, as the database gives them back."""
    return StoredMeasures(memo.version, _table({fingerprint: text for fingerprint, _, text in memo.drain()}))


def test_the_reusable_metrics_are_the_workbenchs_quality_measures_that_read_the_recording():
    assert reusable_metrics() == {
        "fact_retention",
        "needed_fact_retention",
        "dangling_references",
        "probe_answerable",
        "task_state_coverage",
        *(f"task_state_{d}" for d in task_state.DIMENSIONS),
    }


def test_a_replay_done_again_has_the_same_fingerprint_and_any_other_replay_another():
    session = _session()
    first, again = wb.replay(session, MASKING), wb.replay(session, MASKING)
    assert first is not again and first.compactions
    fingerprint = replay_fingerprint(first, "v1")
    assert fingerprint is not None and replay_fingerprint(again, "v1") == fingerprint
    others = {
        "another version": replay_fingerprint(first, "v2"),
        "another strategy": replay_fingerprint(wb.replay(session, SUMMARY), "v1"),
        "another keep_recent": replay_fingerprint(
            wb.replay(session, {**MASKING, "strategy": {"kind": "observation_masking", "keep_recent": 3}}), "v1"
        ),
        "another tokenizer": replay_fingerprint(wb.replay(session, {**MASKING, "tokenizer": "cl100k_base"}), "v1"),
        "another session": replay_fingerprint(
            wb.replay(Session.from_messages(conversation(31, result_chars=400)), MASKING), "v1"
        ),
    }
    assert len({fingerprint, *others.values()}) == len(others) + 1, others


def test_summaries_that_differ_give_replays_that_differ():
    session = _session()
    one, other = (
        wb.replay(session, SUMMARY, summarizer=ScriptedSummarizer(default=f"SUMMARY: the test in src/app.py {state}."))
        for state in ("fails", "passes")
    )
    assert [e.call_index for e in one.compactions] == [e.call_index for e in other.compactions]
    assert replay_fingerprint(one, "v1") != replay_fingerprint(other, "v1")


def test_a_replay_that_changed_no_context_has_no_fingerprint():
    raw = wb.replay(_session(), "no-compaction")
    assert not raw.compactions and replay_fingerprint(raw, "v1") is None
    assert replay_fingerprint(raw.detached(), "v1") is None  # no session, no snapshots: measured, never reused


FIELD_CHANGES = {
    "role": {"role": "user"},
    "content": {"content": "the same words, but other ones"},
    "content parts": {"content": [{"type": "text", "text": "a part"}]},
    "tool calls": {"tool_calls": (ToolCall("c1", "bash", '{"cmd": "ls"}'),)},
    "tool call arguments": {"tool_calls": (ToolCall("c1", "read_file", '{"path": "b.py"}'),)},
    "tool call id": {"tool_call_id": "c9"},
    "name": {"name": "someone"},
    "origin": {"origin": "compacted_synthetic"},
    "importance": {"importance": 5.0},
    "metadata": {"metadata": {"kept": True}},
}


@pytest.mark.parametrize("field", sorted(FIELD_CHANGES))
def test_a_message_not_of_the_recording_is_told_apart_by_any_of_its_fields(field):
    base = assistant("reading a file", calls=(("c1", "read_file"),))
    base = dataclasses.replace(base, tool_calls=(ToolCall("c1", "read_file", '{"path": "a.py"}'),))
    assert _message_digest(base) == _message_digest(dataclasses.replace(base))
    assert _message_digest(dataclasses.replace(base, **FIELD_CHANGES[field])) != _message_digest(base)


def test_an_observation_is_told_apart_from_the_same_user_message():
    said = user("<output>3 passed</output>")
    assert _message_digest(dataclasses.replace(said, observation=True)) != _message_digest(said)


def _measured(result, memo=None):
    values, columns = evaluate_metrics(result, memo=memo)
    reusable = reusable_metrics()
    return {n: values[n] for n in reusable}, {n: columns[n] for n in reusable if n in columns}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(max_steps=30), SMALL_STRATEGIES)
def test_measures_read_back_are_those_measuring_gives_on_random_conversations(messages, strategy):
    if not any(m.role == "assistant" for m in messages):
        return
    session = Session.from_messages(messages)
    config = {**MASKING, "trigger": {"kind": "token_threshold", "threshold": 200}, "strategy": strategy}
    first, again = wb.replay(session, config, measure=False), wb.replay(session, config, measure=False)
    taking = StoredMeasures("v1")
    assert _measured(first, taking) == _measured(wb.replay(session, config, measure=False))
    reading = _stored(taking)
    fingerprint = replay_fingerprint(again, "v1")
    assert reading.answered(again) is False
    assert _measured(again, reading) == _measured(first)
    assert reading.answered(again) is (fingerprint is not None)
    assert reading.drain() == ()  # what it read back, it does not store again


def test_a_replay_measured_before_is_not_measured_again(monkeypatch):
    session = _session()
    taking = StoredMeasures("v1")
    expected = _measured(wb.replay(session, MASKING, measure=False), taking)
    reading = _stored(taking)
    analysed: list[str] = []
    for module in (task_state, retention):
        monkeypatch.setattr(module, "analyse", lambda result, name=module.__name__: analysed.append(name))
    again = wb.replay(session, MASKING, measure=False)
    assert _measured(again, reading) == expected
    assert analysed == [] and reading.answered(again)


def test_a_measure_that_failed_is_not_kept(monkeypatch):
    def fails(self, result):
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(task_state.TaskStateCoverage, "compute", fails)
    memo = StoredMeasures("v1")
    with pytest.warns(RuntimeWarning, match="task_state_coverage.*broken on purpose"):
        values, _ = evaluate_metrics(wb.replay(_session(), MASKING, measure=False), memo=memo)
    assert values["task_state_coverage"] is None and values["dangling_references"] is not None
    assert memo.drain() == ()


def test_values_json_cannot_hold_exactly_are_not_kept():
    session = _session()
    replays = [
        wb.replay(session, config, measure=False)
        for config in (MASKING, SUMMARY, {**MASKING, "tokenizer": "o200k_base"})
    ]
    memo = StoredMeasures("v1")
    memo.put(replays[0], ({"fact_retention": math.nan}, {}))
    memo.put(replays[1], ({"fact_retention": object()}, {}))
    memo.put(replays[2], ({"fact_retention": 0.25}, {"fact_retention": [{"lost_facts": ["a.py"]}]}))
    rows = memo.drain()
    assert [row[:2] for row in rows] == [(replay_fingerprint(replays[2], "v1"), session.id)]
    assert json.loads(rows[0][2]) == [{"fact_retention": 0.25}, {"fact_retention": [{"lost_facts": ["a.py"]}]}]
    assert memo.get(replays[0], frozenset()) is None and memo.get(replays[1], frozenset()) is None


def test_a_users_metric_is_measured_every_time_even_when_it_says_it_could_be_reused():
    @register_metric("user_reusable_probe", direction="higher")
    class UsersMetric:
        reusable: ClassVar[bool] = True
        calls = 0

        def compute(self, result):
            UsersMetric.calls += 1
            return 1.0

    try:
        assert "user_reusable_probe" not in reusable_metrics()
        session = _session()
        taking = StoredMeasures("v1")
        evaluate_metrics(wb.replay(session, MASKING, measure=False), memo=taking)
        reading = _stored(taking)
        values, _ = evaluate_metrics(wb.replay(session, MASKING, measure=False), memo=reading)
        assert values["user_reusable_probe"] == 1.0 and UsersMetric.calls == 2
    finally:
        unregister("metric", "user_reusable_probe")


def test_the_stored_table_is_what_a_worker_starts_from():
    taking = StoredMeasures("v1")
    result = wb.replay(_session(), MASKING, measure=False)
    expected = _measured(result, taking)
    reading = _stored(taking)
    table = reading.stored_table()
    assert table.column_names == ["fingerprint", "measures"] and table.num_rows == 1
    in_a_worker = StoredMeasures("v1", table)
    assert _measured(wb.replay(_session(), MASKING, measure=False), in_a_worker) == expected
    assert len(StoredMeasures("v1").stored_table()) == 0


def test_only_the_replay_whose_measures_were_read_counts_as_reused():
    """Two replays alike in one run: the first is measured, the second reads what the first stored."""
    session = _session()
    memo = StoredMeasures("v1")
    first, second = wb.replay(session, MASKING, measure=False), wb.replay(session, MASKING, measure=False)
    assert _measured(first, memo) == _measured(second, memo)
    assert not memo.answered(first) and memo.answered(second)
    assert len(memo.drain()) == 1


def test_values_stored_for_fewer_metrics_than_are_reusable_now_are_measured_again():
    session = _session()
    taking = StoredMeasures("v1")
    expected = _measured(wb.replay(session, MASKING, measure=False), taking)
    fingerprint, session_id, text = taking.drain()[0]
    values, columns = json.loads(text)
    del values["probe_answerable"]
    reading = StoredMeasures("v1", _table({fingerprint: json.dumps([values, columns])}))
    again = wb.replay(session, MASKING, measure=False)
    assert _measured(again, reading) == expected
    assert not reading.answered(again) and len(reading.drain()) == 1
