"""Recovery after a recorded compaction: what the agent re-read, re-ran, and when it went on."""

from __future__ import annotations

import json

import pytest
from builders import system, tool, user

import workbench as wb
from workbench.quality.recovery import actions, normalize_command, recoveries
from workbench.quality.recovery_table import main, relate
from workbench.session import Message, RecordedCompaction, ToolCall

TASK = "Fix the failing test in src/app.py"


def call(call_id: str, name: str, **arguments: object) -> Message:
    return Message(
        role="assistant", content=None, tool_calls=(ToolCall(id=call_id, name=name, arguments=json.dumps(arguments)),)
    )


def step(call_id: str, name: str, result: str, **arguments: object) -> list[Message]:
    return [call(call_id, name, **arguments), tool(call_id, result, name=name)]


def text_step(command: str, output: str) -> list[Message]:
    return [
        Message(role="assistant", content=f"Let me look.\n\n```bash\n{command}\n```"),
        Message(role="user", content=output, observation=True),
    ]


BEFORE = [
    *step("a1", "Read", "def main(): ...\n" * 40, file_path="/workspace/proj/src/app.py"),
    *step(
        "a2",
        "Bash",
        "1 failed, 3 passed",
        command="cd /workspace/proj && pytest tests/test_app.py -q 2>&1",
        description="run the tests",
    ),
    *step("a3", "Grep", "src/app.py:3: def main", pattern="def main", path="src"),
    *step("a4", "Write", "written", file_path="src/util.py", content="def helper(): ...\n"),
]
AFTER = {
    # a read of a file read before, a test re-run (other cd and description), then new work
    "reread, rerun, then an edit": (
        [
            *step("b1", "Read", "def main(): ...\n" * 40, file_path="src/app.py"),
            *step("b2", "Bash", "1 failed, 3 passed", command="pytest  tests/test_app.py -q", description="again"),
            *step("b3", "Edit", "edited", file_path="src/app.py", old_string="...", new_string="return 0"),
            *step("b4", "Bash", "4 passed", command="pytest -q"),
        ],
        2,
        4,
        2,
    ),
    # straight on: a file never seen, then the same search repeated
    "new read first": (
        [
            *step("b1", "Read", "config", file_path="src/config.py"),
            *step("b2", "Grep", "src/app.py:3: def main", pattern="def main", path="src"),
        ],
        1,
        2,
        0,
    ),
    # a file the agent wrote whole counts as seen; a search with other arguments is new
    "written file reread": (
        [
            *step("b1", "Read", "def helper(): ...", file_path="/workspace/proj/src/util.py"),
            *step("b2", "Grep", "nothing", pattern="def helper", path="src"),
        ],
        1,
        2,
        1,
    ),
    # nothing new follows the re-read (of another part of the file): no new action at all
    "only re-reads": (
        [
            *step("b1", "Read", "def main(): ...\n" * 40, file_path="src/app.py", offset=10, limit=20),
        ],
        1,
        1,
        None,
    ),
}


def planted(after: list[Message], *, tail: list[Message] = ()) -> wb.Session:
    messages = [system(), user(TASK), *BEFORE, *after, *tail]
    boundary = 2 + len(BEFORE)
    record = RecordedCompaction(
        call_index=sum(1 for m in messages[:boundary] if m.role == "assistant"),
        message_index=boundary,
        trigger="auto",
        tokens_before=90_000,
        summary=f"The user asked: {TASK}. Read src/app.py; tests fail; wrote src/util.py.",
    )
    return wb.Session.from_messages(messages, metadata={"recorded_compactions": [record.to_dict()]})


@pytest.mark.parametrize(("after", "reacquired", "calls", "to_new"), AFTER.values(), ids=AFTER.keys())
def test_what_the_agent_did_after_the_boundary(after, reacquired, calls, to_new):
    (recovery,) = recoveries(planted(after))
    assert (len(recovery.reacquired), len(recovery.actions), recovery.calls_to_new_action) == (
        reacquired,
        calls,
        to_new,
    )
    assert recovery.reacquired_calls_share == pytest.approx(reacquired / calls)
    re_tokens = sum(a.observation_tokens for a in recovery.reacquired)
    assert recovery.reacquired_tokens_share == pytest.approx(re_tokens / recovery.observation_tokens)


def test_tokens_share_counts_the_results_re_acquired():
    """The re-read file's long result dominates the observation tokens after the boundary."""
    (recovery,) = recoveries(planted(AFTER["reread, rerun, then an edit"][0]))
    assert recovery.reacquired_tokens_share > 0.9 > recovery.reacquired_calls_share
    assert recovery.reacquired_items() == ["src/app.py", "pytest tests/test_app.py -q"]


def test_the_window_and_the_next_compaction_bound_what_is_measured():
    after = AFTER["reread, rerun, then an edit"][0]
    assert len(recoveries(planted(after), window=2)[0].actions) == 2
    session = planted(after)
    second = RecordedCompaction(
        call_index=session.recorded_compactions[0].call_index + 1, message_index=2 + len(BEFORE) + 2, summary="again"
    )
    twice = wb.Session.from_messages(
        session.messages,
        metadata={"recorded_compactions": [session.recorded_compactions[0].to_dict(), second.to_dict()]},
    )
    first, then = recoveries(twice)
    assert len(first.actions) == 1 and len(then.actions) == 3
    assert [a.item for a in then.reacquired] == ["pytest tests/test_app.py -q"], (
        "the second compaction's history includes what came before the first"
    )


@pytest.mark.parametrize(
    ("command", "identity", "kind"),
    [
        ("cd /repo && pytest -q 2>&1", "pytest -q", "run"),
        ("cd 'my dir' &&  cd sub && make   test", "make test", "run"),
        ("cat src/app.py", "cat src/app.py", "read"),
        ("head -n 20 src/app.py", "head -n 20 src/app.py", "read"),
        ("sed -n 1,40p src/app.py", "sed -n 1,40p src/app.py", "read"),
        ("cat src/app.py | grep main", "cat src/app.py | grep main", "run"),
    ],
)
def test_shell_commands_are_identified_by_what_they_do(command, identity, kind):
    assert normalize_command(command) == identity
    (action,) = actions(wb.Session.from_messages([user(TASK), *step("x", "bash", "out", command=command)]))
    assert action.kind == kind and action.key == f"shell:{identity}"


def test_text_action_agents_re_reading_a_file_they_printed():
    messages = [
        system(),
        user(TASK),
        *text_step("cat src/app.py", "def main(): ..."),
        *text_step("pytest -q", "1 failed"),
        *text_step("head -n 5 src/app.py", "def main(): ..."),
        *text_step("sed -i s/a/b/ src/app.py", ""),
    ]
    record = RecordedCompaction(call_index=2, message_index=6, summary="s")
    session = wb.Session.from_messages(messages, metadata={"recorded_compactions": [record.to_dict()]})
    (recovery,) = recoveries(session)
    assert [a.item for a in recovery.reacquired] == ["head -n 5 src/app.py"]
    assert recovery.calls_to_new_action == 1


def test_metrics_are_measured_for_the_agents_own_compactions_only():
    session = planted(AFTER["reread, rerun, then an edit"][0])
    own = wb.replay(session, "as-recorded")
    assert own.metrics["recovery_reacquired_calls"] == pytest.approx(0.5)
    assert own.metrics["recovery_calls_to_new_action"] == 2
    row = own.compaction_metrics[0]
    assert row["recovery_calls"] == 4 and row["recovery_reacquired_items"] == [
        "src/app.py",
        "pytest tests/test_app.py -q",
    ]
    config = {"trigger": {"kind": "recorded"}, "strategy": {"kind": "observation_masking", "keep_recent": 1}}
    with pytest.warns(UserWarning, match="recovery_reacquired_tokens cannot be measured"):
        other = wb.replay(session, config, metrics=["recovery_reacquired_tokens"])
    assert other.compactions and other.metrics["recovery_reacquired_tokens"] is None
    assert other.compaction_metrics[0]["recovery_reacquired_calls"] is None


def test_re_acquired_items_are_related_to_the_lost_facts_by_the_keys_of_what_they_repeat():
    """The re-run is found among the lost facts under the command as first written (with its cd)."""
    (recovery,) = recoveries(planted(AFTER["reread, rerun, then an edit"][0]))
    lost = {
        "src/app.py": "path",
        "cd /workspace/proj && pytest tests/test_app.py -q 2>&1": "command",
        "src/other.py": "path",
        "parse_rows": "identifier",
    }
    relation = relate(recovery, lost)
    assert (relation.items, relation.items_lost, relation.lost, relation.lost_reacquired) == (2, 2, 3, 2)
    assert relate(recovery, {"src/other.py": "path"}).items_lost == 0


@pytest.mark.shared
def test_every_shared_recorded_compaction_gets_the_recovery_metrics(shared_sessions, capsys):
    from workbench.quality.recorded_table import recorded_sessions

    folders = [shared_sessions / name for name in ("claude-code", "codex", "openhands")]
    sessions = recorded_sessions([f for f in folders if f.is_dir()])
    assert sessions
    for session in sessions:
        result = wb.replay(session, "as-recorded")
        done = [i for i, e in enumerate(result.compactions) if not e.failed]
        assert len(done) == len(session.recorded_compactions)
        for index in done:
            row = result.compaction_metrics[index]
            assert 0 <= row["recovery_reacquired_calls"] <= 1 and 0 <= row["recovery_reacquired_tokens"] <= 1
            assert row["recovery_calls"] > 0 and row["recovery_calls_to_new_action"] is not None
        assert all(
            result.metrics[name] is not None
            for name in ("recovery_reacquired_calls", "recovery_reacquired_tokens", "recovery_calls_to_new_action")
        )
    assert main([str(f) for f in folders if f.is_dir()]) == 0
    printed = capsys.readouterr().out
    assert all(f"| {s.id} | {r.call_index} |" in printed for s in sessions for r in s.recorded_compactions)
    assert "re-acquired items among fact_retention's lost facts" in printed
