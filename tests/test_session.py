"""The session model: messages, steps, ids, pairing checks."""

from __future__ import annotations

import re

import pytest
from builders import assistant, conversation, conversations, system, tool, user
from hypothesis import given
from hypothesis import strategies as st

import workbench as wb
from workbench.session import (
    RecordedCompaction,
    Step,
    group_steps,
    recorded_input_tokens,
    split_leading_system,
    tool_pairing_problems,
    tools_paired,
)


def test_message_round_trips_openai_dicts_with_extras():
    data = {
        "role": "assistant",
        "content": None,
        "importance": 10,
        "origin": "compacted_modified",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}}],
    }
    message = wb.Message.from_openai(data)
    assert message.pinned and message.origin == "compacted_modified"
    assert message.tool_calls[0].name == "read"
    assert message.to_openai() == {"role": "assistant", "content": None, "tool_calls": data["tool_calls"]}
    assert wb.Message.from_openai(message.to_openai(extras=True)) == message


def test_text_joins_text_parts_and_skips_images():
    message = wb.Message(
        role="user",
        content=[
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:"}},
            {"type": "text", "text": "here"},
        ],
    )
    assert message.text == "look\nhere"
    assert message.has_non_text_parts
    assert isinstance(message.content, tuple)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("role", "robot", "role"),
        ("origin", "invented", "origin"),
        ("importance", 11, "importance"),
        ("importance", -10.5, "importance"),
    ],
)
def test_invalid_messages_are_rejected(field, value, match):
    kwargs = {"role": "user", "content": "x", field: value}
    with pytest.raises(ValueError, match=match):
        wb.Message(**kwargs)


def test_pinned_only_at_ten():
    assert not user("a", importance=9.99).pinned
    assert user("a", importance=10).pinned


def test_steps_group_assistant_with_its_results():
    messages = [
        system(),
        user("go"),
        assistant("", calls=(("a", "read"), ("b", "grep"))),
        tool("a", "1"),
        tool("b", "2"),
        assistant("done"),
        user("next"),
    ]
    steps = group_steps(messages)
    assert [s.kind for s in steps] == ["system", "user", "assistant", "assistant", "user"]
    assert len(steps[2].messages) == 3


def test_session_id_is_a_stable_content_hash():
    first = wb.Session.from_messages([m.to_openai() for m in conversation(3)])
    again = wb.Session.from_messages(conversation(3))
    other = wb.Session.from_messages(conversation(4))
    assert first.id == again.id != other.id
    assert len(first.id) == 16
    assert first.calls == 4


def test_probes_are_parsed_and_validated():
    session = wb.Session.from_messages(
        conversation(1), probes=[{"question": "q?", "expected": "a", "kind": "decision"}]
    )
    assert session.probes[0].kind == "decision" and session.probes[0].from_call == 0
    with pytest.raises(ValueError, match="probe kind"):
        wb.Probe("q", "a", kind="trivia")


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"question": "q?", "expected": "a", "from_cal": 3},
            "unknown probe key 'from_cal'; valid: question, expected, kind, from_call .*; did you mean 'from_call'\\?",
        ),
        ({"question": "q?", "expected": "a", "turn": 3}, "unknown probe key 'turn'; valid: .*from_call"),
        ({"question": "q?"}, "a probe needs 'expected'"),
        ({"question": "q?", "expected": "a", "from_call": -1}, "'from_call' must be a call index >= 0, not -1"),
        ({"question": "q?", "expected": "a", "from_call": "2"}, "'from_call' must be a call index >= 0, not '2'"),
    ],
)
def test_a_probe_with_a_bad_key_is_refused_not_applied_from_call_0(data, message):
    with pytest.raises(ValueError, match=message):
        wb.Session.from_messages(conversation(1), probes=[data])
    assert wb.Probe.from_dict(wb.Probe("q?", "a", "artifact", 4).to_dict()) == wb.Probe("q?", "a", "artifact", 4)


def test_pairing_problems_name_the_orphans():
    assert tool_pairing_problems(conversation(3)) == []
    problems = tool_pairing_problems([user("x"), assistant("", calls=(("c1", "read"),)), user("y"), tool("zz", "r")])
    assert any("'c1'" in p and "no result" in p for p in problems)
    assert any("'zz'" in p and "answers no" in p for p in problems)


@given(
    conversations(max_steps=8),
    st.lists(st.integers(min_value=0, max_value=200), max_size=4),
    st.lists(st.integers(min_value=0, max_value=200), max_size=2),
)
def test_the_fast_pairing_check_agrees_with_the_readable_one(messages, dropped, moved):
    """Well-formed conversations with messages dropped and moved: orphans, stray results, results
    after a later turn; the fast check says paired exactly when there is no problem to report."""
    messages = list(messages)
    for position in dropped:
        if messages:
            messages.pop(position % len(messages))
    for position in moved:
        if messages:
            messages.append(messages.pop(position % len(messages)))
    assert tools_paired(messages) == (not tool_pairing_problems(messages))


@given(
    conversations(max_steps=8),
    st.lists(st.integers(min_value=0, max_value=200), max_size=4),
    st.lists(st.integers(min_value=0, max_value=200), max_size=3),
)
def test_steps_that_each_pair_their_calls_make_a_paired_context(messages, dropped, cuts):
    """Any split of a context into chunks that are each `Step.paired` is paired as a whole (what the
    replay's invariant check takes as a shortcut); grouped well-formed conversations are."""
    messages = list(messages)
    for position in dropped:
        if messages:
            messages.pop(position % len(messages))
    bounds = sorted({0, len(messages), *(c % (len(messages) + 1) for c in cuts)})
    for chunks in (
        group_steps(messages),
        [Step(tuple(messages[a:b])) for a, b in zip(bounds, bounds[1:], strict=False)],
    ):
        if all(chunk.paired for chunk in chunks):
            assert tools_paired(messages)
    if not dropped:
        assert all(step.paired for step in group_steps(messages))


def test_a_step_pairs_its_calls_only_with_tool_results():
    call = assistant("calling", calls=(("c1", "bash"),))
    assert Step((call, tool("c1", "ok"))).paired
    impostor = wb.Message(role="user", content="not a result", tool_call_id="c1")
    assert not Step((call, impostor)).paired and not tools_paired([call, impostor])
    assert not Step((call,)).paired and not Step((call, tool("c1", "a"), tool("c1", "b"))).paired
    assert not Step((tool("c1", "stray"),)).paired
    assert Step((user("hi"),)).paired and not Step((user("hi"), tool("c1", "ok"))).paired


@given(st.lists(st.sampled_from(["system", "user", "assistant"]), max_size=12))
def test_split_leading_system_partitions(roles):
    messages = [wb.Message(role=r, content=str(i)) for i, r in enumerate(roles)]
    head, rest = split_leading_system(messages)
    assert head + rest == messages
    assert all(m.role == "system" for m in head)
    assert not rest or rest[0].role != "system"


# --------------------------------------------------------------------------- recorded compactions and usage


def test_recorded_compactions_are_read_from_metadata_as_annotations():
    messages = conversation(4)
    entry = RecordedCompaction(
        call_index=2, message_index=6, trigger="auto", tokens_before=150_000, summary="the story so far"
    )
    session = wb.Session.from_messages(messages, metadata={"recorded_compactions": [entry.to_dict()]})
    assert session.recorded_compactions == (entry,)
    assert all(m.text != entry.summary for m in session.messages)
    assert wb.Session.from_messages(messages).recorded_compactions == ()


def test_recorded_compaction_from_older_entries_computes_the_call_index():
    messages = conversation(4)  # system, user, then (assistant, tool) pairs
    old = {"message_index": 6, "trigger": "manual", "pre_tokens": 1234, "summary": None, "timestamp": "t"}
    (compaction,) = wb.Session.from_messages(messages, metadata={"recorded_compactions": [old]}).recorded_compactions
    assert compaction == RecordedCompaction(
        call_index=2, message_index=6, trigger="manual", tokens_before=1234, summary=""
    )


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (
            {"input_tokens": 3, "cache_read_input_tokens": 900, "cache_creation_input_tokens": 40, "output_tokens": 7},
            943,
        ),
        ({"input_tokens": 12, "output_tokens": 7}, 12),
        ({"output_tokens": 7}, None),
        ("not a mapping", None),
        (None, None),
    ],
)
def test_recorded_input_tokens_sums_the_three_input_kinds(usage, expected):
    metadata = {} if usage is None else {"usage": usage}
    assert recorded_input_tokens(assistant("done", metadata=metadata)) == expected


@pytest.mark.parametrize(
    ("data", "role", "extra"),
    [
        ({"role": "developer", "content": "be brief"}, "system", {}),
        ({"role": "function", "name": "get_weather", "content": "sunny"}, "tool", {"name": "get_weather"}),
        ({"role": "developer", "content": "x", "metadata": {"model": "o3"}}, "system", {}),
    ],
)
def test_developer_and_legacy_function_roles_are_read_as_system_and_tool(data, role, extra):
    message = wb.Message.from_openai(data)
    assert message.role == role and message.metadata["original_role"] == data["role"]
    assert message.metadata.items() >= dict(data.get("metadata") or {}).items()
    assert message.to_openai() == {"role": role, "content": data["content"], **extra}
    (again,) = wb.Session.from_messages([data]).messages
    assert again == message


def test_a_legacy_function_message_answers_the_function_call_before_it():
    session = wb.Session.from_messages(
        [
            {"role": "developer", "content": "answer with the tool"},
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "function_call": {"name": "get_weather", "arguments": '{"c": 1}'}},
            {"role": "function", "name": "get_weather", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
        ]
    )
    call = session.messages[2].tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("function_call_2", "get_weather", '{"c": 1}')
    result = session.messages[3]
    assert (result.role, result.tool_call_id, result.name) == ("tool", call.id, "get_weather")
    assert tool_pairing_problems(session.messages) == [] and tools_paired(session.messages)
    assert [m["role"] for m in session.to_openai()] == ["system", "user", "assistant", "tool", "assistant"]
    assert [s.kind for s in session.steps] == ["system", "user", "assistant", "assistant"]


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi"}, {"role": "function", "name": "get", "content": "stray"}],
        [
            {"role": "assistant", "content": None, "function_call": {"name": "get", "arguments": "{}"}},
            {"role": "function", "name": "other", "content": "not its answer"},
        ],
    ],
)
def test_a_legacy_function_message_with_no_call_before_it_is_an_orphan_result(messages):
    session = wb.Session.from_messages(messages)
    assert session.messages[-1].role == "tool" and session.messages[-1].tool_call_id is None
    assert any("answers no preceding call" in p for p in tool_pairing_problems(session.messages))


@pytest.mark.parametrize(
    ("messages", "kind"),
    [
        ({"role": "user", "content": "hi"}, "dict"),
        ("hi", "str"),
        (wb.Message(role="user", content="hi"), "Message"),
    ],
)
def test_messages_given_as_one_message_are_refused_clearly(messages, kind):
    expected = f"messages must be a list of messages (dicts or Message), not a {kind}"
    with pytest.raises(TypeError, match=rf"^{re.escape(expected)}$"):
        wb.Session.from_messages(messages)
