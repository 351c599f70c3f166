"""Observations (DESIGN §4): which messages each format marks, how they group, how they are stored,
and that every kind acting on tool results acts on them (masking on a text-action corpus)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import assistant, conversations, system, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import workbench as wb
from benchmarks.naive_replay import naive_replay
from workbench.importers.observations import mark_observations
from workbench.replay import replay
from workbench.session import group_steps
from workbench.store import Store

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CORPUS = SHARED / "corpora" / "mini-swe-agent-gemini3"
MASKING = {"trigger": {"kind": "pressure", "turns": 1}, "strategy": {"kind": "observation_masking", "keep_recent": 10}}


def _roles(messages: list[wb.Message]) -> list[str]:
    return [("obs" if m.observation else m.role) for m in messages]


# -- each format's rule, on messages made here -------------------------------------------------

_TASK = user("Fix the failing test in src/app.py")
_ACTION = assistant("```bash\npytest -q\n```")
_OUTPUT = user("<returncode>1</returncode>\n<output>1 failed</output>")


@pytest.mark.parametrize(
    "fmt, messages, expected",
    [
        (
            "mini-swe-agent",
            [system(), _TASK, _ACTION, _OUTPUT, _ACTION, _OUTPUT],
            ["system", "user", "assistant", "obs", "assistant", "obs"],
        ),
        (
            "mini-swe-agent",
            [system(), _TASK, user("also keep the API"), _ACTION, _OUTPUT, user("Format error: no command")],
            ["system", "user", "user", "assistant", "obs", "obs"],
        ),
        (
            "swe-agent",
            [
                system(),
                user("issue text", metadata={"message_type": "observation"}),
                _ACTION,
                user("out", metadata={"message_type": "observation"}),
                _ACTION,
                user("out"),
            ],
            ["system", "user", "assistant", "obs", "assistant", "obs"],
        ),
        (
            "openhands",
            [_TASK, _ACTION, user("ran", metadata={"observation": "run"}), user("thanks")],
            ["user", "assistant", "obs", "user"],
        ),
        (
            "aider",
            [_TASK, assistant("edit"), user("bad edit", metadata={"aider_reflection": "edit_format_error"})],
            ["user", "assistant", "obs"],
        ),
        ("claude-code", [_TASK, _ACTION, _OUTPUT], ["user", "assistant", "user"]),
        ("openai", [_TASK, _ACTION, user("a real reply", observation=True)], ["user", "assistant", "obs"]),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_each_format_marks_its_own_observations(fmt, messages, expected):
    assert _roles(mark_observations(fmt, messages)) == expected


def test_an_observation_joins_the_action_it_answers():
    messages = [system(), _TASK, _ACTION, _OUTPUT.replace(observation=True), assistant("done")]
    steps = group_steps(messages)
    assert [len(s.messages) for s in steps] == [1, 1, 2, 1]
    assert steps[2].paired and steps[2].tool_uses == 1
    stray = group_steps([_TASK, _OUTPUT.replace(observation=True)])
    assert [len(s.messages) for s in stray] == [1, 1], "an observation after no action starts its own step"
    with pytest.raises(ValueError, match="only a user or tool message"):
        wb.Message(role="assistant", content="x", observation=True)


def test_observations_survive_openai_dicts_and_keep_the_session_id():
    session = wb.Session.from_messages([_TASK, _ACTION, _OUTPUT])
    marked = wb.Session.from_messages(mark_observations("mini-swe-agent", session.messages))
    assert marked.id == session.id, "marking derives from the content: re-importing adds nothing"
    again = wb.Message.from_openai(marked.messages[2].to_openai(extras=True))
    assert again.observation and again.is_observation
    assert "observation" not in marked.messages[2].to_openai()


# -- the store -------------------------------------------------------------------------------


def _trajectory(tmp_path: Path, steps: int = 14) -> Path:
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "<pr_description>Fix the parser</pr_description>"},
    ]
    for index in range(steps):
        messages.append(
            {
                "role": "assistant",
                "content": f"THOUGHT: look\n```bash\ncat src/file_{index}.py\n```",
                "extra": {"response": {"usage": {"prompt_tokens": 1000 + index, "completion_tokens": 20}}},
            }
        )
        messages.append(
            {
                "role": "user",
                "content": "<returncode>0</returncode>\n<output>\n"
                + f"def handler_{index}(): pass\n" * 40
                + "</output>",
            }
        )
    path = tmp_path / "task.traj.json"
    path.write_text(
        json.dumps(
            {
                "info": {"exit_status": "Submitted"},
                "messages": messages,
                "trajectory_format": "mini-swe-agent-1.1",
                "instance_id": "demo__demo-1",
            }
        )
    )
    return path


def test_the_store_keeps_observations_and_lists_their_count(tmp_path):
    path = _trajectory(tmp_path)
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.import_paths([str(path)])
        [row] = store.session_rows()
        session = store.load_session(row["id"])
    assert row["observations"] == 14
    assert _roles(list(session.messages))[:4] == ["system", "user", "assistant", "obs"]
    assert sum(m.observation for m in session.messages) == 14


def test_a_database_stored_before_observations_is_derived_again(tmp_path):
    """Rows written before the `observation` column (NULL) are marked by the format's rule when the
    store next opens for writing, so an older database is never replayed unmasked."""
    db = tmp_path / "wb.duckdb"
    with Store(db) as store:
        store.import_paths([str(_trajectory(tmp_path))])
        [row] = store.session_rows()
        store.connection.execute("UPDATE messages SET observation = NULL")
        store.results.save_cells("a-run", [], [("f1", row["id"], "[{}, {}]")], "v1")  # measured before
    with Store(db) as store:
        assert store.connection.execute("SELECT count(*) FROM messages WHERE observation IS NULL").fetchall() == [(0,)]
        assert store.results.stored_measures([row["id"]], "v1").num_rows == 0, "measured on other messages"
        assert store.session_rows()[0]["observations"] == 14
        assert sum(m.observation for m in store.load_session(row["id"]).messages) == 14
        assert store.derive_observations() == 0, "nothing is left to derive"


def test_workbench_sessions_prints_the_observations(tmp_path):
    from click.testing import CliRunner

    from workbench.cli import main

    db = str(tmp_path / "wb.duckdb")
    runner = CliRunner()
    assert runner.invoke(main, ["import", str(_trajectory(tmp_path)), "--db", db]).exit_code == 0
    listed = runner.invoke(main, ["sessions", "--db", db, "--json"])
    assert json.loads(listed.output)[0]["observations"] == 14
    table = runner.invoke(main, ["sessions", "--db", db]).output
    assert "observations" in table.splitlines()[0]


# -- replays --------------------------------------------------------------------------------


def test_masking_hides_a_text_action_agent_s_old_outputs(tmp_path):
    [session] = wb.load(str(_trajectory(tmp_path, steps=16)))
    masked = replay(session, {"name": "masking", **MASKING})
    raw = replay(session, "no-compaction")
    assert masked.metrics["billed_input_tokens"] < raw.metrics["billed_input_tokens"]
    final = masked.final_context
    hidden = [m for m in final if m.metadata.get("compaction") == "masked"]
    # before the last call: the task and 15 answered actions; the last 10 steps keep their outputs
    assert len(hidden) == 5 and all(m.role == "user" and m.observation for m in hidden)
    assert "command output hidden" in hidden[0].text
    frame = masked.to_frame()
    assert frame["context_observations"].iloc[-1] == 15 and frame["hidden_observations"].iloc[-1] == 5
    assert frame["hidden_observations"].iloc[10] == 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    messages=conversations(max_steps=30),
    kind=st.sampled_from(
        [
            {"kind": "observation_masking", "keep_recent": 3},
            {"kind": "clear_tool_uses", "keep": 2},
            {"kind": "tool_result_truncation", "max_chars": 30},
            {"kind": "sliding_window", "window": 3},
            {"kind": "hard_clear", "keep_recent": 4},
            {"kind": "trim", "keep_recent_turns": 2},
        ]
    ),
    turns=st.integers(1, 4),
)
def test_the_fast_replay_equals_the_naive_walk_with_observations(messages, kind, turns):
    if not any(m.role == "assistant" for m in messages):
        return
    session = wb.Session.from_messages(messages)
    spec = {
        "trigger": {"kind": "pressure", "turns": turns},
        "strategy": kind,
        "context_limit": 60_000,
        "max_output": 1_000,
    }
    fast, slow = replay(session, spec), naive_replay(session, spec)
    assert (fast.termination, list(fast.calls)) == (slow.termination, list(slow.calls))
    assert fast.metrics == slow.metrics
    assert [fast.context_at(i) for i in range(len(fast.calls))] == [slow.context_at(i) for i in range(len(slow.calls))]


# -- the shared recordings and the corpus ----------------------------------------------------

#: Per shared format folder: user observations the importer marks (tool results are observations by role).
SHARED_USER_OBSERVATIONS = {
    "mini-swe-agent": 10,
    "swe-agent": 106,
    "openhands": 2,
    "aider": 8,
    "claude-code": 0,
    "codex": 0,
    "openai-chat": 0,
}


@pytest.mark.shared
@pytest.mark.parametrize("folder, expected", sorted(SHARED_USER_OBSERVATIONS.items()))
def test_shared_recordings_mark_their_observations(folder, expected):
    path = SHARED / "sessions" / folder
    if not path.is_dir():
        pytest.skip("../shared/sessions is not present")
    sessions = wb.load(str(path))
    assert sum(m.observation for s in sessions for m in s.messages) == expected
    for session in sessions:
        users = [m for m in session.messages if m.role == "user"]
        if users and session.format in ("mini-swe-agent", "swe-agent"):
            assert not users[0].observation, "the task comes before any action"
        for previous, message in zip(session.messages, session.messages[1:], strict=False):
            if message.observation:
                assert previous.role == "assistant" or previous.is_observation, "an observation answers an action"
    light = {"preset": "observation-masking", "strategy": {"keep_recent": 2}}
    raw = sum(replay(s, "no-compaction").metrics["billed_input_tokens"] for s in sessions)
    masked = sum(replay(s, light).metrics["billed_input_tokens"] for s in sessions)
    if any(m.is_observation for s in sessions for m in s.messages) and raw:
        assert masked < raw, f"masking (M = 2) hides nothing of {folder}"
    else:
        assert masked == raw


@pytest.mark.shared
@pytest.mark.slow
def test_masking_cuts_the_corpus_input_by_a_third():
    """The Complexity Trap's agent (mini-swe-agent, text actions): masking the observations older
    than the last 10 turns cuts the billed input by at least 30 % over 100 real trajectories."""
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpora is not present")
    from workbench.metrics import BilledInputTokens

    sessions = wb.load(str(CORPUS / "trajs"))
    assert len(sessions) == 100
    config = {"context_limit": 1_048_576, "tokenizer": "cl100k_base"}
    billed = BilledInputTokens().compute  # the one metric asserted: the quality metrics are left unmeasured
    raw = sum(billed(replay(s, {"preset": "no-compaction", **config}, measure=False)) for s in sessions)
    masked = [replay(s, {"preset": "observation-masking", **config}, measure=False) for s in sessions]
    assert all(r.termination == "completed" for r in masked)
    assert sum(billed(r) for r in masked) <= 0.7 * raw
