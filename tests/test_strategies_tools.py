"""Tool-output strategies: aisopod's truncation, observation masking, clear_tool_uses."""

from __future__ import annotations

import json

import pytest
from builders import assistant, system, tool, user

from workbench.compaction import CompactionEnv, Context
from workbench.errors import ConfigError
from workbench.registry import build_strategy, spec_of
from workbench.session import Message, ToolCall, tool_pairing_problems
from workbench.strategies.tools import CLEARED_ARGUMENTS, TRUNCATION_MARKER


def run(spec, messages: list[Message]) -> list[Message]:
    result = build_strategy(spec).compact(Context(messages), CompactionEnv())
    assert tool_pairing_problems(result) == []
    assert len(result) == len(messages)  # these kinds never drop a message
    return result


def step(i: int, chars: int = 300, tools: tuple[str, ...] = ("read_file",), importance: float = 0.0) -> list[Message]:
    calls = tuple((f"c{i}_{j}", name) for j, name in enumerate(tools))
    return [
        assistant(f"step {i}", calls=calls, importance=importance),
        *(tool(cid, (f"<{cid}> " + "x" * chars)[:chars], name=name) for cid, name in calls),
    ]


def session(*steps: list[Message]) -> list[Message]:
    return [system(), user("Investigate the flaky test"), *[m for s in steps for m in s]]


def changed(before: list[Message], after: list[Message]) -> list[int]:
    """Indices whose message is no longer the same object."""
    return [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a is not b]


# ------------------------------------------------------------------------------------------------
# tool_result_truncation (003)


def test_truncation_aisopod_10000_chars_at_1000():
    original = "".join(chr(ord("a") + i % 26) for i in range(10_000))
    call = assistant("reading", calls=(("big", "read_file"),))
    result_msg = tool("big", original)
    messages = [system(), user("summarize the log"), call, result_msg, assistant("done")]
    result = run({"kind": "tool_result_truncation", "max_chars": 1000}, messages)
    assert changed(messages, result) == [3]
    cut = result[3]
    assert cut.text.startswith(original[:1000])
    assert cut.text.endswith(TRUNCATION_MARKER)
    assert cut.text[:1000] == original[:1000] and len(cut.text) == 1000 + len("\n" + TRUNCATION_MARKER)
    assert cut.origin == "compacted_modified"
    assert (cut.role, cut.tool_call_id, cut.name) == ("tool", "big", result_msg.name)
    assert cut.metadata["original_chars"] == 10_000


TRUNCATION_CASES = [
    # (name, max_chars, result lengths, indices of the results that get cut)
    ("default 1000: only the long ones", None, [999, 1000, 1001, 5000], [2, 3]),
    ("every oversized result", 100, [50, 500, 5000], [1, 2]),
    ("nothing oversized: unchanged", 10_000, [10, 2000], []),
]


@pytest.mark.parametrize(
    ("name", "max_chars", "lengths", "cut"), TRUNCATION_CASES, ids=[c[0] for c in TRUNCATION_CASES]
)
def test_truncation_cases(name, max_chars, lengths, cut):
    steps = [step(i, chars=n) for i, n in enumerate(lengths)]
    messages = session(*steps)
    spec = {"kind": "tool_result_truncation"} | ({} if max_chars is None else {"max_chars": max_chars})
    result = run(spec, messages)
    limit = max_chars or 1000
    expected_changed = [2 + 2 * i + 1 for i in cut]  # system, user, then (assistant, tool) per step
    assert changed(messages, result) == expected_changed
    for index in expected_changed:
        assert len(result[index].text) == limit + len("\n" + TRUNCATION_MARKER)


def test_truncation_leaves_pinned_steps_and_is_idempotent():
    messages = session(step(0, chars=5000, importance=10), step(1, chars=5000))
    once = run({"kind": "tool_result_truncation", "max_chars": 100}, messages)
    assert changed(messages, once) == [5]
    twice = run({"kind": "tool_result_truncation", "max_chars": 100}, once)
    assert changed(once, twice) == []  # a cut result is not cut again


def test_truncation_keeps_non_text_parts():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    result_msg = Message(
        role="tool", tool_call_id="s", name="screenshot", content=({"type": "text", "text": "y" * 3000}, image)
    )
    messages = [user("look"), assistant(calls=(("s", "screenshot"),)), result_msg]
    cut = run({"kind": "tool_result_truncation", "max_chars": 10}, messages)[2]
    assert cut.text == "y" * 10 + "\n" + TRUNCATION_MARKER
    assert image in cut.content


def test_truncation_defaults_and_errors():
    assert spec_of(build_strategy("tool_result_truncation")) == {"kind": "tool_result_truncation", "max_chars": 1000}
    for bad in (0, -1, "1000", 2.5):
        with pytest.raises(ConfigError, match="max_chars"):
            build_strategy({"kind": "tool_result_truncation", "max_chars": bad})


# ------------------------------------------------------------------------------------------------
# observation_masking


def test_masking_replaces_old_results_and_keeps_the_calls():
    steps = [step(i, chars=400) for i in range(6)]
    messages = session(*steps)
    result = run({"kind": "observation_masking", "keep_recent": 2}, messages)
    # steps 0-3 are older than the last 2 steps: their tool results (odd body positions) are masked
    assert changed(messages, result) == [3, 5, 7, 9]
    for index in (3, 5, 7, 9):
        masked = result[index]
        assert masked.origin == "compacted_modified"
        assert "400 chars" in masked.text and "read_file" in masked.text
        assert masked.tool_call_id == messages[index].tool_call_id
        assert result[index - 1] is messages[index - 1]  # the call stays as it was


MASKING_CASES = [
    # (name, params, result lengths, steps whose results are masked)
    ("default keeps the last 10 steps", {}, [400] * 12, [0, 1]),
    ("keep_recent 0 masks every result", {"keep_recent": 0}, [400] * 3, [0, 1, 2]),
    ("results shorter than the placeholder stay", {"keep_recent": 1}, [20, 400, 400], [1]),
    ("custom placeholder", {"keep_recent": 1, "placeholder": "<{tool}: {chars}>"}, [40, 40], [0]),
]


@pytest.mark.parametrize(("name", "params", "lengths", "masked"), MASKING_CASES, ids=[c[0] for c in MASKING_CASES])
def test_masking_cases(name, params, lengths, masked):
    messages = session(*[step(i, chars=n) for i, n in enumerate(lengths)])
    # the user request counts as a step, so the last keep_recent steps are all tool steps here
    result = run({"kind": "observation_masking", **params}, messages)
    assert changed(messages, result) == [2 + 2 * i + 1 for i in masked]
    if "placeholder" in params:
        assert result[3].text == "<read_file: 40>"


def test_masking_is_idempotent_and_spares_pinned_steps():
    messages = session(step(0, importance=10), step(1), step(2), step(3))
    once = run({"kind": "observation_masking", "keep_recent": 1}, messages)
    assert changed(messages, once) == [5, 7]
    assert changed(once, run({"kind": "observation_masking", "keep_recent": 1}, once)) == []


def test_masking_defaults_and_errors():
    spec = spec_of(build_strategy("observation_masking"))
    assert spec["keep_recent"] == 10 and "{chars}" in spec["placeholder"]
    with pytest.raises(ConfigError, match="keep_recent"):
        build_strategy({"kind": "observation_masking", "keep_recent": -1})
    with pytest.raises(ConfigError, match="placeholder"):
        build_strategy({"kind": "observation_masking", "placeholder": "{nope}"})
    with pytest.raises(ConfigError, match="placeholder"):
        build_strategy({"kind": "observation_masking", "placeholder": ""})


# ------------------------------------------------------------------------------------------------
# clear_tool_uses


def test_clear_tool_uses_keeps_the_last_three_uses():
    messages = session(*[step(i) for i in range(6)])
    result = run({"kind": "clear_tool_uses"}, messages)
    assert changed(messages, result) == [3, 5, 7]  # results of uses 0-2; uses 3-5 untouched
    assert all(result[i].text == "[tool result cleared]" for i in (3, 5, 7))
    assert all(result[i].origin == "compacted_modified" for i in (3, 5, 7))


CLEAR_CASES = [
    # (name, params, tools per step, indices of changed messages)
    # layout: 0 system, 1 user, then each step = assistant + one result per tool
    (
        "keep counts tool uses, not steps",
        {"keep": 2},
        [("read_file",), ("grep", "bash", "read_file")],
        [3, 5],
    ),  # step 0's result and the first use of step 1 are older than the last two uses
    (
        "excluded tools are never cleared",
        {"keep": 1, "exclude_tools": ["bash"]},
        [("bash",), ("read_file",), ("bash",), ("grep",)],
        [5],
    ),
    ("keep 0 clears everything not excluded", {"keep": 0, "exclude_tools": ["grep"]}, [("grep",), ("read_file",)], [5]),
    ("few uses: unchanged", {"keep": 5}, [("read_file",), ("grep",)], []),
    ("clear_inputs also clears old arguments", {"keep": 1, "clear_inputs": True}, [("read_file",), ("grep",)], [2, 3]),
]


@pytest.mark.parametrize(("name", "params", "tools", "changed_at"), CLEAR_CASES, ids=[c[0] for c in CLEAR_CASES])
def test_clear_tool_uses_cases(name, params, tools, changed_at):
    messages = session(*[step(i, tools=t) for i, t in enumerate(tools)])
    result = run({"kind": "clear_tool_uses", **params}, messages)
    assert changed(messages, result) == changed_at


def test_clear_inputs_rewrites_only_the_cleared_calls():
    messages = session(step(0, tools=("read_file", "bash")), step(1, tools=("grep",)))
    result = run({"kind": "clear_tool_uses", "keep": 2, "clear_inputs": True}, messages)
    head = result[2]
    assert head.origin == "compacted_modified"
    assert head.tool_calls[0].arguments == CLEARED_ARGUMENTS and json.loads(CLEARED_ARGUMENTS) == {"cleared": True}
    assert head.tool_calls[1] == messages[2].tool_calls[1]  # the second call is within the last 2 uses
    assert [c.id for c in head.tool_calls] == [c.id for c in messages[2].tool_calls]
    assert changed(messages, result) == [2, 3]


def test_clear_inputs_false_leaves_assistant_messages_alone():
    messages = session(*[step(i) for i in range(5)])
    result = run({"kind": "clear_tool_uses", "keep": 1}, messages)
    assert all(result[i] is messages[i] for i in range(len(messages)) if messages[i].role != "tool")


def test_clear_tool_uses_is_idempotent_spares_pinned_and_uses_placeholder():
    messages = session(step(0, importance=10), step(1), step(2), step(3))
    spec = {"kind": "clear_tool_uses", "keep": 1, "clear_inputs": True, "placeholder": "[gone: {tool}]"}
    once = run(spec, messages)
    assert changed(messages, once) == [4, 5, 6, 7]
    assert once[5].text == "[gone: read_file]"
    assert changed(once, run(spec, once)) == []


def test_clear_tool_uses_defaults_and_errors():
    assert spec_of(build_strategy("clear_tool_uses")) == {
        "kind": "clear_tool_uses",
        "keep": 3,
        "clear_inputs": False,
        "exclude_tools": [],
        "placeholder": "[tool result cleared]",
    }
    for params, offender in (
        ({"keep": -1}, "keep"),
        ({"exclude_tools": "bash"}, "exclude_tools"),
        ({"exclude_tools": [3]}, "exclude_tools"),
        ({"clear_inputs": 1}, "clear_inputs"),
        ({"placeholder": "{x}"}, "placeholder"),
    ):
        with pytest.raises(ConfigError, match=offender):
            build_strategy({"kind": "clear_tool_uses", **params})


def test_tool_kinds_keep_identity_when_nothing_to_do():
    messages = [
        system(),
        user("hi"),
        assistant("hello"),
        Message(role="assistant", content="x", tool_calls=(ToolCall("a", "bash"),)),
        tool("a", "ok"),
    ]
    for spec in ("tool_result_truncation", "observation_masking", "clear_tool_uses"):
        result = run(spec, messages)
        assert changed(messages, result) == []


# ------------------------------------------------------------------------------------------------
# derived messages are built once per original message and parameters


REWRITING_SPECS = [
    {"kind": "tool_result_truncation", "max_chars": 100},
    {"kind": "observation_masking", "keep_recent": 1},
    {"kind": "clear_tool_uses", "keep": 1, "clear_inputs": True},
]


@pytest.mark.parametrize("spec", REWRITING_SPECS, ids=lambda s: s["kind"])
def test_compacting_again_returns_the_very_same_derived_messages(spec):
    messages = session(step(0, chars=2000), step(1, chars=2000), step(2, chars=2000))
    first = run(spec, messages)
    assert changed(messages, first)
    env = CompactionEnv(tokenizer="cl100k_base")
    counted = env.tokens(first)
    again = run(dict(spec), list(messages))  # a new strategy with the same parameters, a new context
    assert changed(first, again) == []
    assert all("cl100k_base" in m._token_cache for m in again)  # their counts are not computed again
    assert env.tokens(again) == counted


def test_derived_messages_depend_on_the_parameters():
    messages = session(step(0, chars=2000))
    short = run({"kind": "tool_result_truncation", "max_chars": 100}, messages)[3]
    long = run({"kind": "tool_result_truncation", "max_chars": 500}, messages)[3]
    assert len(short.text) < len(long.text)
    masked = run({"kind": "observation_masking", "keep_recent": 0, "placeholder": "[{tool} hidden]"}, messages)[3]
    cleared = run({"kind": "clear_tool_uses", "keep": 0, "placeholder": "[{tool} hidden]"}, messages)[3]
    assert masked.text == cleared.text == "[read_file hidden]"
    assert (masked.metadata["compaction"], cleared.metadata["compaction"]) == ("masked", "cleared")


def test_the_placeholder_names_the_tool_of_the_step_the_result_is_in():
    result = Message(role="tool", content="x" * 500, tool_call_id="c1")  # no name: the call names the tool
    spec = {"kind": "observation_masking", "keep_recent": 0, "placeholder": "[{tool} hidden]"}
    texts = [run(spec, [user("go"), assistant("", calls=(("c1", name),)), result])[2].text for name in ("grep", "bash")]
    assert texts == ["[grep hidden]", "[bash hidden]"]


def test_the_derived_memo_does_not_keep_messages_alive():
    import gc
    import weakref

    messages = session(step(0, chars=2000))
    original = weakref.ref(messages[3])
    derived_ref = weakref.ref(run({"kind": "observation_masking", "keep_recent": 0}, messages)[3])
    assert original() is not None
    del messages
    gc.collect()
    assert original() is None and derived_ref() is None


def test_truncation_spares_a_lone_pinned_step():
    messages = [assistant("reading", calls=(("c", "read_file"),), importance=10), tool("c", "x" * 5000)]
    assert changed(messages, run({"kind": "tool_result_truncation", "max_chars": 100}, messages)) == []


# ------------------------------------------------------------------------------------------------
# observations of text-action agents: user turns showing a command's output (DESIGN §4)


def text_step(i: int, chars: int = 300) -> list[Message]:
    return [assistant(f"```bash\nrun {i}\n```"), user((f"<output {i}> " + "o" * chars)[:chars], observation=True)]


@pytest.mark.parametrize(
    "spec, changed_at, how",
    [
        ({"kind": "observation_masking", "keep_recent": 2}, [3, 5], "masked"),
        ({"kind": "clear_tool_uses", "keep": 2}, [3, 5], "cleared"),
        ({"kind": "clear_tool_uses", "keep": 2, "exclude_tools": ["command"]}, [], None),
        ({"kind": "tool_result_truncation", "max_chars": 100}, [3, 5, 7, 9], "truncated"),
    ],
    ids=lambda value: value["kind"] if isinstance(value, dict) else None,
)
def test_tool_kinds_act_on_user_observations(spec, changed_at, how):
    messages = session(*(text_step(i) for i in range(4)))
    result = run(spec, messages)
    assert changed(messages, result) == changed_at
    for index in changed_at:
        assert result[index].role == "user" and result[index].observation
        assert result[index].metadata["compaction"] == how and result[index].origin == "compacted_modified"
    assert all(
        result[i] is messages[i]
        for i in range(len(messages))
        if messages[i].role != "user" or not messages[i].observation
    ), "the actions and the task stay as they are"


def test_a_text_action_is_one_tool_use_beside_tool_calls():
    messages = session(text_step(0), step(1, tools=("read_file", "grep")), text_step(2))
    result = run({"kind": "clear_tool_uses", "keep": 3}, messages)
    assert changed(messages, result) == [3], "only the oldest use (the text action) is cleared"
    assert (
        "command"
        in run({"kind": "observation_masking", "keep_recent": 0, "placeholder": "[{tool} output hidden]"}, messages)[
            3
        ].text
    )


def test_the_guard_counts_an_oversized_user_observation():
    messages = session(text_step(0, chars=6000))
    guard = build_strategy({"kind": "guard_select", "oversized_chars": 4000})
    assert guard.select(Context(messages), CompactionEnv())[0] == "oversized"
    result = guard.compact(Context(messages), CompactionEnv())
    assert result[3].metadata.get("compaction") == "truncated"
