"""The `recorded` trigger and strategy, and the preset configs (DESIGN §6, recorded compactions)."""

from __future__ import annotations

import pytest
from builders import ScriptedSummarizer, agent_turns, assistant, system, user

import workbench as wb
from workbench.config import parse_config
from workbench.presets import preset, presets
from workbench.replay import replay
from workbench.session import Message, RecordedCompaction, tool_pairing_problems

LIMITS = {"context_limit": 200_000, "max_output": 1_000}
SUMMARY = "RECORDED SUMMARY: the agent fixed src/app.py and was about to run the tests."


def recorded_session(boundary_offset: int = 0, summary: str = SUMMARY) -> wb.Session:
    """system, task, 12 tool steps, a new user turn, 6 more steps; the agent compacted before the
    call that follows the new user turn (its boundary is that user turn, shifted by `boundary_offset`)."""
    messages = [
        system(),
        user("Fix the failing test in src/app.py"),
        *agent_turns(12, result_chars=400),
        user("Now also update the changelog"),
        *agent_turns(6, result_chars=400, start=12),
        assistant("Done."),
    ]
    boundary = 2 + 24 + boundary_offset
    call_index = sum(1 for m in messages[:boundary] if m.role == "assistant")
    record = RecordedCompaction(
        call_index=call_index, message_index=boundary, trigger="auto", tokens_before=12_345, summary=summary
    )
    return wb.Session.from_messages(messages, metadata={"recorded_compactions": [record.to_dict()]})


def as_recorded(**extra):
    return parse_config(preset("as-recorded") | LIMITS | extra)


def test_as_recorded_compacts_once_at_the_recorded_call_with_the_recorded_summary():
    session = recorded_session()
    (record,) = session.recorded_compactions
    result = replay(session, as_recorded())
    assert [e.call_index for e in result.compactions] == [record.call_index]
    assert result.compactions[0].summary == SUMMARY
    assert result.baseline_note() is None  # the agent wrote this summary, not the offline baseline
    assert result.calls[record.call_index].compacted_before
    sent = result.context_at(record.call_index)
    assert sent[0] == session.messages[0]
    assert sent[1].origin == "compacted_synthetic" and sent[1].role == "user" and sent[1].text == SUMMARY
    assert sent[2] is session.messages[record.message_index]
    assert sent[2:] == list(session.messages[record.message_index : result.calls[record.call_index].message_index])
    assert result.termination == "completed"
    frame = result.to_frame()
    assert frame["recorded_compaction"].tolist() == [c.index == record.call_index for c in result.calls]
    assert (frame["compacted_before"] == frame["recorded_compaction"]).all()


def test_compaction_contexts_give_what_the_strategy_received_and_returned():
    session = recorded_session()
    result = replay(session, as_recorded())
    before, after = result.compaction_contexts(0)
    call = result.compactions[0].call_index
    assert before == list(session.messages[: result.calls[call].message_index])
    assert after == result.context_at(call)
    with pytest.raises(IndexError, match="compaction 1 out of range"):
        result.compaction_contexts(1)


def test_a_boundary_inside_a_step_moves_back_to_the_step_start():
    session = recorded_session(boundary_offset=-1)  # the boundary is the last tool result before the user turn
    assert session.messages[session.recorded_compactions[0].message_index].role == "tool"
    result = replay(session, as_recorded())
    sent = result.context_at(result.compactions[0].call_index)
    assert sent[2].role == "assistant" and sent[3].role == "tool"
    assert not tool_pairing_problems(sent)


def test_pinned_steps_before_the_boundary_are_kept_after_the_summary():
    session = recorded_session()
    messages = list(session.messages)
    messages[1] = messages[1].replace(importance=10.0)
    pinned = wb.Session.from_messages(messages, metadata=dict(session.metadata))
    result = replay(pinned, as_recorded())
    sent = result.context_at(result.compactions[0].call_index)
    assert sent[1].text == SUMMARY and sent[2] is messages[1]


def test_a_second_recorded_compaction_replaces_the_first_summary():
    session = recorded_session()
    first = session.recorded_compactions[0]
    later = len(session.messages) - 5
    second = RecordedCompaction(
        call_index=sum(1 for m in session.messages[:later] if m.role == "assistant"),
        message_index=later,
        trigger="manual",
        tokens_before=None,
        summary="SECOND SUMMARY",
    )
    both = wb.Session.from_messages(
        session.messages, metadata={"recorded_compactions": [first.to_dict(), second.to_dict()]}
    )
    result = replay(both, as_recorded())
    assert [e.summary for e in result.compactions] == [SUMMARY, "SECOND SUMMARY"]
    final = result.context_at(second.call_index)
    assert [m.text for m in final if m.origin == "compacted_synthetic"] == ["SECOND SUMMARY"]


def test_the_recorded_strategy_changes_nothing_where_the_agent_did_not_compact():
    session = recorded_session()
    result = replay(session, {"trigger": {"kind": "pressure", "turns": 3}, "strategy": {"kind": "recorded"}, **LIMITS})
    changed = [
        e for e in result.compactions if (e.messages_before, e.tokens_before) != (e.messages_after, e.tokens_after)
    ]
    assert [e.call_index for e in changed] == [session.recorded_compactions[0].call_index]


def test_a_session_without_recorded_compactions_never_fires_the_recorded_trigger():
    plain = wb.Session.from_messages(recorded_session().messages)
    result = replay(plain, as_recorded())
    assert result.compactions == [] and result.termination == "completed"


def test_no_recorded_summary_reaches_a_replay_that_is_not_recorded():
    session = recorded_session()
    for name, spec in presets().items():
        if name == "as-recorded":
            continue
        result = replay(session, spec | LIMITS | {"context_limit": 8_000}, summarizer=ScriptedSummarizer())
        for index in range(len(result.calls)):
            assert all(SUMMARY not in m.text for m in result.context_at(index)), (name, index)


def test_presets_are_valid_configs_named_after_themselves():
    table = presets()
    assert {
        "as-recorded",
        "no-compaction",
        "observation-masking",
        "gent-sliding-window",
        "gent-progressive-summary",
        "agent001-full-summary",
        "goat-split-summary",
        "aisopod-guard",
        "ptc-runner-trim",
    } <= set(table)
    for name, spec in table.items():
        config = parse_config(spec)
        assert config.name == name
    assert preset("observation-masking")["strategy"] == {"kind": "observation_masking", "keep_recent": 10}
    table["goat-split-summary"]["trigger"]["ratio"] = 0.1
    assert preset("goat-split-summary")["trigger"]["ratio"] == 0.8


def test_an_unknown_preset_names_the_valid_ones():
    with pytest.raises(wb.ConfigError, match="unknown preset 'goat'; valid presets: as-recorded"):
        preset("goat")


def test_no_compaction_never_fires():
    result = replay(recorded_session(), preset("no-compaction") | LIMITS)
    assert result.compactions == [] and result.termination == "completed"


def test_an_empty_recorded_summary_drops_the_older_part_and_adds_no_message():
    session = recorded_session(summary="")
    result = replay(session, as_recorded())
    sent = result.context_at(result.compactions[0].call_index)
    assert result.compactions[0].summary is None
    assert sent[0].role == "system" and sent[1] is session.messages[session.recorded_compactions[0].message_index]


# -- the shared recordings --------------------------------------------------------------------

NON_LLM_PRESETS = ("no-compaction", "observation-masking", "gent-sliding-window", "ptc-runner-trim", "aisopod-guard")


def _recorded_sessions(shared_sessions) -> list[wb.Session]:
    sessions = [s for s in wb.load(shared_sessions / "claude-code") if s.recorded_compactions]
    if not sessions:
        pytest.skip("the shared claude-code sessions record no compactions")
    assert not any(m.metadata.get("compact_summary") for s in sessions for m in s.messages), (
        "recorded summaries are annotations, never messages"
    )
    return sessions


def _holds(message: Message, summaries: list[str]) -> bool:
    text = message.text
    return any(summary[:200] in text for summary in summaries)


def test_shared_recordings_hold_no_recorded_summary_except_under_recorded(shared_sessions):
    for session in _recorded_sessions(shared_sessions):
        summaries = [r.summary for r in session.recorded_compactions if r.summary]
        assert not any(_holds(m, summaries) for m in session.messages)
        for name in NON_LLM_PRESETS:
            result = replay(session, preset(name) | {"context_limit": 1_000_000}, summarizer=ScriptedSummarizer())
            assert not any(_holds(m, summaries) for i in range(len(result.calls)) for m in result.context_at(i)), name
        recorded = replay(session, preset("as-recorded") | {"context_limit": 1_000_000})
        assert [e.call_index for e in recorded.compactions] == [r.call_index for r in session.recorded_compactions]
        after = recorded.context_at(session.recorded_compactions[0].call_index)
        assert sum(_holds(m, summaries) for m in after) == 1


def test_recorded_kinds_are_bound_inside_combinators_and_pipelines():
    session = recorded_session()
    spec = {
        "trigger": {"kind": "any", "triggers": [{"kind": "recorded"}, {"kind": "token_threshold", "threshold": 0}]},
        "strategy": {"kind": "pipeline", "steps": [{"kind": "recorded"}]},
    } | LIMITS
    result = replay(session, spec)
    assert [e.summary for e in result.compactions] == [SUMMARY]
    assert result.compactions[0].call_index == session.recorded_compactions[0].call_index


def test_stored_sessions_list_their_recorded_compactions_and_filter_on_them(tmp_path):
    """`workbench sessions` shows how many compactions the agent recorded (what `as-recorded` replays),
    and `--where recorded_compactions > 0` finds the sessions to compare the production agent on."""
    from click.testing import CliRunner

    from workbench.cli import main
    from workbench.store import Store

    plain = wb.Session.from_messages([system(), user("Fix it"), *agent_turns(3), assistant("Done.")])
    db = str(tmp_path / "wb.duckdb")
    with Store(db) as store:
        store.import_sessions([recorded_session(), plain], dataset="mine")
        assert {r["id"]: r["recorded_compactions"] for r in store.session_rows()} == {
            recorded_session().id: 1,
            plain.id: 0,
        }
        assert list(store.sessions(where="recorded_compactions > 0").id) == [recorded_session().id]
    listed = CliRunner().invoke(main, ["sessions", "--db", db], catch_exceptions=False)
    header, *rows = listed.output.splitlines()
    column = header.split().index("recorded")
    assert sorted(row.split()[column] for row in rows) == ["0", "1"]
    replayed = CliRunner().invoke(
        main, ["replay", recorded_session().id, "--config", "as-recorded", "--db", db], catch_exceptions=False
    )
    lines = replayed.output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("per call (")) + 1
    assert lines[at].split()[-2:] == ["agent", "compacted"] and "recorded input" not in lines[at]  # no usage
    call = recorded_session().recorded_compactions[0].call_index
    assert next(line for line in lines[at + 1 :] if line.split()[0] == str(call)).split()[-2:] == ["yes", "yes"]
    plain_replay = CliRunner().invoke(main, ["replay", plain.id, "--config", "as-recorded", "--db", db])
    assert "agent compacted" not in plain_replay.output
