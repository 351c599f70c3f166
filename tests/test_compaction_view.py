"""The compaction view's read model (`workbench.access.compaction_view`): what a compaction replaced and
wrote, its diff, its quality in each metric's direction, and its lost facts traced to their message."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from builders import assistant, conversation, system, tool, user

from workbench.access import compaction_view, folded, metric_direction_of, result_compaction


def event(summary: str | None, **kw):
    fields = {"call_index": 3, "tokens_before": 1200, "tokens_after": 300, "summary": summary, "error": None}
    return SimpleNamespace(**{**fields, **kw})


def summarized():
    """A context of six messages whose middle four a summary replaces; "585s" is in two of them."""
    before = [
        system(),
        user("Fix the slow build"),
        assistant("timing it", calls=(("c1", "run"),)),
        tool("c1", "the build took 585s on the CI runner", name="run"),
        assistant("585s is too slow; caching the wheels"),
        user("go on"),
    ]
    after = [before[0], user("[summary] the build is slow; caching wheels"), before[5]]
    return before, after


def test_a_summary_sits_beside_the_messages_it_replaced():
    before, after = summarized()
    view = compaction_view(before, after, event("the build is slow"), {}, event_index=2)
    assert [m.position for m in view.replaced] == [1, 2, 3, 4]
    assert [m.heading for m in view.replaced] == ["#1 user", "#2 assistant", "#3 tool · run", "#4 assistant"]
    assert [m.position for m in view.written] == [1] and view.written[0].text.startswith("[summary]")
    assert (view.event_index, view.messages_before, view.messages_after) == (2, 6, 3)
    assert not view.edits


def test_quality_rows_carry_each_metric_s_declared_direction_and_only_numbers():
    before, after = summarized()
    measured = {
        "fact_retention": 0.6666666667,
        "compression_ratio": 2.123456,
        "lost_count": 1,
        "lost_facts": ["585s"],
        "task_state_missing": ["next step"],
        "needed_fact_retention": None,
        "judge_score": float("nan"),
        "breaker": True,
    }
    view = compaction_view(before, after, event("s"), measured)
    rows = {row.metric: row for row in view.quality}
    assert set(rows) == {"fact_retention", "compression_ratio", "lost_count"}
    assert rows["fact_retention"].value == pytest.approx(0.6666666667)
    assert rows["fact_retention"].better == "↑ better"
    assert rows["lost_count"].better == ""  # no registered metric declares a direction for it
    assert rows["compression_ratio"].direction == metric_direction_of("compression_ratio")


def test_every_lost_fact_links_the_first_replaced_message_holding_it():
    before, after = summarized()
    measured = {
        "lost_facts": ["585s", "CI runner", "absent-token", "src/c1.py"],
        "lost_needed_facts": ["585s", "wheels"],
    }
    view = compaction_view(before, after, event("s"), measured)
    facts = {fact.fact: fact for fact in view.lost_facts}
    assert list(facts) == ["585s", "CI runner", "absent-token", "src/c1.py", "wheels"]
    assert facts["src/c1.py"].source is not None and facts["src/c1.py"].source.position == 2  # a tool call's path
    assert 'run({"path": "src/c1.py"})' in facts["src/c1.py"].excerpt
    assert facts["585s"].source is not None and facts["585s"].source.position == 3  # the tool result, not #4
    assert "585s" in facts["585s"].excerpt and facts["585s"].needed
    assert not facts["CI runner"].needed
    assert facts["absent-token"].source is None and facts["absent-token"].excerpt == ""
    assert facts["wheels"].source is not None and facts["wheels"].source.position == 4


def test_an_edit_reads_as_a_diff_of_the_replaced_messages_against_their_replacements():
    before = [system(), user("go"), assistant("", calls=(("c1", "read_file"),)), tool("c1", "line one\nline two")]
    masked = dataclasses.replace(before[3], content="[output hidden]", origin="compacted_modified")
    view = compaction_view(before, [*before[:3], masked], event(None))
    assert view.edits and view.summary is None
    assert [m.position for m in view.replaced] == [3] and [m.position for m in view.written] == [3]
    diff = view.diff()
    assert diff[0].startswith("--- replaced (1 message)") and diff[1].startswith("+++ written")
    assert {"-line one", "-line two", "+[output hidden]"} <= set(diff)
    assert " [tool · read_file]" in diff  # the unchanged heading is context


def test_a_window_that_drops_messages_diffs_to_nothing_written():
    before = [system(), user("a"), assistant("b"), user("c")]
    view = compaction_view(before, [before[0], before[3]], event(""))
    assert view.edits and not view.written
    assert {"-a", "-b"} <= set(view.diff())


@pytest.mark.parametrize(
    ("text", "lines", "chars", "shown", "rest"),
    [
        ("", 2, 100, "", ""),
        ("one\ntwo", 2, 100, "one\ntwo", ""),
        ("one\ntwo\nthree\n", 2, 100, "one\ntwo\n", "three\n"),
        ("x" * 50, 2, 20, "x" * 20, "x" * 30),
        ("ab\ncd\nef", 5, 4, "ab\nc", "d\nef"),
    ],
)
def test_folded_cuts_at_lines_or_characters_and_loses_nothing(text, lines, chars, shown, rest):
    assert folded(text, lines, chars) == (shown, rest)
    assert "".join(folded(text, lines, chars)) == text


def test_the_view_of_a_replayed_masking_compaction():
    from workbench.replay import replay
    from workbench.session import Session

    session = Session.from_messages(conversation(12, result_chars=400), id="masked")
    config = {
        "name": "masking",
        "context_limit": 1500,
        "max_output": 200,
        "trigger": {"kind": "utilization", "ratio": 0.5},
        "strategy": {"kind": "observation_masking", "keep_recent": 2},
    }
    result = replay(session, config)
    assert result.compactions
    view = result_compaction(result, 0)
    assert view.edits and view.replaced
    assert all(m.role == "tool" for m in view.replaced)
    assert [m.position for m in view.written] == [m.position for m in view.replaced]  # masked in place
    assert any(line.startswith("+") and "hidden" in line for line in view.diff())
    assert {row.metric for row in view.quality} >= {"compression_ratio"}
