"""Window strategies: gent's sliding-window cases, aisopod's hard clear, ptc_runner's trim."""

from __future__ import annotations

import pytest
from builders import assistant, conversations, system, tool, user
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.compaction import CompactionEnv, Context
from workbench.errors import ConfigError
from workbench.registry import build_strategy, spec_of
from workbench.session import Message, Step, tool_pairing_problems
from workbench.strategies.common import last_steps_for_messages, shared_prefix_length


def tool_step(i: int, importance: float = 0.0, results: int = 1) -> list[Message]:
    """One assistant step: a call (or several) and its results; `importance` sits on the assistant message."""
    calls = tuple((f"c{i}_{j}", "read_file") for j in range(results))
    return [
        assistant(f"step {i}", calls=calls, importance=importance),
        *(tool(cid, f"result {i}.{j}") for j, (cid, _) in enumerate(calls)),
    ]


def run(spec, messages: list[Message]) -> list[Message]:
    result = build_strategy(spec).compact(Context(messages), CompactionEnv())
    assert tool_pairing_problems(result) == []
    return result


def same(result: list[Message], expected: list[Message]) -> bool:
    """Equal by identity, element by element."""
    return len(result) == len(expected) and all(a is b for a, b in zip(result, expected, strict=True))


# ------------------------------------------------------------------------------------------------
# sliding_window: gent's 10 cases (000). A gent iteration is a step here.

SLIDING_CASES = [
    # (name, window, importances of the steps, kept step indices)
    ("1 within the window: no change", 5, [0, 0, 0], [0, 1, 2]),
    ("2 over the window: oldest dropped", 3, [0] * 6, [3, 4, 5]),
    ("3 all pinned: no change", 2, [10] * 5, [0, 1, 2, 3, 4]),
    ("4 mixed: pinned are bonus slots", 3, [0, 10, 0, 0, 10, 0, 0, 0], [1, 4, 5, 6, 7]),
    ("5a pinned keeps its place before the window", 2, [0, 0, 10, 0, 0, 0], [2, 4, 5]),
    ("5b pinned keeps its place inside the window", 2, [0, 0, 0, 0, 10, 0], [3, 4, 5]),
    ("6 window of one", 1, [0] * 5, [4]),
    ("7 importance below 10 is not pinned", 2, [0, 9.99, 0, 0, 0], [3, 4]),
    ("8 negative importance is not pinned", 2, [-10, 0, -3, 0, 0], [3, 4]),
    ("9 no importance is not pinned", 2, [0.0] * 4, [2, 3]),
]


@pytest.mark.parametrize(("name", "window", "importances", "kept"), SLIDING_CASES, ids=[c[0] for c in SLIDING_CASES])
def test_sliding_window_gent_cases(name, window, importances, kept):
    steps = [tool_step(i, imp) for i, imp in enumerate(importances)]
    sys = system()
    result = run({"kind": "sliding_window", "window": window}, [sys, *[m for s in steps for m in s]])
    expected = [sys, *[m for i in kept for m in steps[i]]]
    assert same(result, expected)


@pytest.mark.parametrize("window", [0, -1, 2.5, "3", True])
def test_sliding_window_10_rejects_window_below_one(window):
    with pytest.raises(ConfigError, match="window"):
        build_strategy({"kind": "sliding_window", "window": window})


def test_sliding_window_requires_window():
    with pytest.raises(ConfigError, match="window"):
        build_strategy({"kind": "sliding_window"})


def test_sliding_window_counts_user_steps_and_keeps_all_leading_system():
    sys_a, sys_b = system("a"), system("b")
    u1, a1, u2, a2, u3, a3 = (
        user("one"),
        assistant("answer one"),
        user("two"),
        assistant("answer two"),
        user("three"),
        assistant("answer three"),
    )
    result = run({"kind": "sliding_window", "window": 2}, [sys_a, sys_b, u1, a1, u2, a2, u3, a3])
    assert same(result, [sys_a, sys_b, u1, u3, a3])  # u1 is the task: kept, outside the window


def test_sliding_window_pinned_tool_result_keeps_the_whole_step():
    call = assistant("look", calls=(("k", "bash"),))
    result_msg = tool("k", "important output", importance=10)
    tail = [*tool_step(1), *tool_step(2)]
    task = user("go")
    result = run({"kind": "sliding_window", "window": 1}, [task, call, result_msg, *tail])
    assert same(result, [task, call, result_msg, *tail[2:]])


@pytest.mark.parametrize(
    ("name", "window", "body", "kept"),
    [
        # body codes: U = the task (first user message), u = a later user message, s = a tool step,
        # S = a summary written by an earlier compaction, R = a summary the recorded agent wrote
        ("task kept outside the window", 2, "Ususs", [0, 3, 4]),
        ("task after some steps is still the task", 1, "ssUss", [2, 4]),
        ("window counts only the scratchpad", 3, "Usss", [0, 1, 2, 3]),
        ("a synthetic summary is not the task", 1, "SUss", [1, 3]),
        ("a recorded agent summary is not the task", 1, "RUss", [1, 3]),
    ],
)
def test_sliding_window_never_drops_the_task(name, window, body, kept):
    """gent keeps the task outside the scratchpad (COMPACTION.md, points settled against the seeds)."""
    steps: list[list[Message]] = []
    for i, code in enumerate(body):
        if code == "U":
            steps.append([user("TASK: port the CLI to click")])
        elif code == "u":
            steps.append([user(f"later request {i}")])
        elif code == "S":
            steps.append([Message(role="user", content="summary", origin="compacted_synthetic")])
        elif code == "R":
            steps.append([user("This session continues an earlier one...", metadata={"compact_summary": True})])
        else:
            steps.append(tool_step(i))
    sys = system()
    messages = [sys, *[m for s in steps for m in s]]
    result = run({"kind": "sliding_window", "window": window}, messages)
    assert same(result, [sys, *[m for i in kept for m in steps[i]]])
    assert same(run({"kind": "sliding_window", "window": window}, result), result)  # stable when run again


# ------------------------------------------------------------------------------------------------
# hard_clear (003)


def chat(n: int) -> list[Message]:
    """`n` plain messages alternating user / assistant, no tools."""
    return [user(f"question {i}") if i % 2 == 0 else assistant(f"answer {i}") for i in range(n)]


def test_hard_clear_aisopod_20_messages_keep_5():
    messages = chat(20)
    result = run({"kind": "hard_clear", "keep_recent": 5}, messages)
    assert len(result) == 5
    assert same(result, messages[-5:])


def test_hard_clear_keeps_leading_system_messages():
    messages = [system(), *chat(20)]
    result = run({"kind": "hard_clear", "keep_recent": 5}, messages)
    assert same(result, [messages[0], *messages[-5:]])


HARD_CLEAR_CASES = [
    # (name, keep_recent, steps as (importance, results), kept step indices)
    ("cut inside a pair moves back to the step start", 5, [(0, 1)] * 10, [7, 8, 9]),
    ("cut on a step boundary stays", 4, [(0, 1)] * 10, [8, 9]),
    ("multi-call step is kept whole", 2, [(0, 1), (0, 3)], [1]),
    ("pinned step before the cut survives in place", 2, [(0, 1), (10, 1), (0, 1), (0, 1)], [1, 3]),
    ("everything fits: unchanged", 50, [(0, 1)] * 4, [0, 1, 2, 3]),
]


@pytest.mark.parametrize(
    ("name", "keep_recent", "shape", "kept"), HARD_CLEAR_CASES, ids=[c[0] for c in HARD_CLEAR_CASES]
)
def test_hard_clear_tool_pairs(name, keep_recent, shape, kept):
    steps = [tool_step(i, imp, results) for i, (imp, results) in enumerate(shape)]
    sys = system()
    result = run({"kind": "hard_clear", "keep_recent": keep_recent}, [sys, *[m for s in steps for m in s]])
    assert same(result, [sys, *[m for i in kept for m in steps[i]]])


def test_hard_clear_default_and_errors():
    assert spec_of(build_strategy("hard_clear")) == {"kind": "hard_clear", "keep_recent": 10}
    for bad in (0, -4, "5"):
        with pytest.raises(ConfigError, match="keep_recent"):
            build_strategy({"kind": "hard_clear", "keep_recent": bad})


# ------------------------------------------------------------------------------------------------
# trim (004). A turn is one exchange: an assistant message with its tool results plus the user
# messages after it, up to the next assistant message.


def agent_session(turns: int) -> tuple[Message, Message, list[list[Message]]]:
    sys, first = system(), user("Build the report generator")
    return sys, first, [tool_step(i) for i in range(turns)]


def test_trim_defaults_keep_system_initial_user_and_last_three_turns():
    sys, first, turns = agent_session(6)
    result = run({"kind": "trim"}, [sys, first, *[m for t in turns for m in t]])
    assert same(result, [sys, first, *turns[3], *turns[4], *turns[5]])
    assert spec_of(build_strategy("trim")) == {"kind": "trim", "keep_recent_turns": 3, "keep_initial_user": True}


def test_trim_without_initial_user():
    sys, first, turns = agent_session(6)
    result = run({"kind": "trim", "keep_initial_user": False}, [sys, first, *[m for t in turns for m in t]])
    assert same(result, [sys, *turns[3], *turns[4], *turns[5]])


def test_trim_few_turns_is_unchanged():
    sys, first, turns = agent_session(3)
    messages = [sys, first, user("and add a test"), *[m for t in turns for m in t]]
    assert same(run({"kind": "trim"}, messages), messages)


def test_trim_turn_includes_the_user_messages_after_the_reply():
    sys, first = system(), user("start")
    a1, a2, a3 = (assistant(f"reply {i}") for i in range(1, 4))
    u1, u2, u3 = user("feedback 1"), user("feedback 2"), user("feedback 3")
    t4 = tool_step(4)
    messages = [sys, first, a1, u1, a2, u2, a3, u3, *t4]
    result = run({"kind": "trim", "keep_recent_turns": 2}, messages)
    assert same(result, [sys, first, a3, u3, *t4])


def opening_with_two_user_messages():
    u0, u0b, replies = user("first"), user("second"), [assistant(f"r{i}") for i in range(4)]
    return [u0, u0b, *replies], [u0, replies[2], replies[3]]


def first_user_after_a_reply():
    hello, request, replies = assistant("hello"), user("the request"), [assistant(f"r{i}") for i in range(3)]
    return [hello, request, *replies], [request, replies[-1]]


def pinned_and_inner_system_steps():
    pinned, mode = user("remember: tabs, not spaces", importance=10), system("mode: careful")
    r = [assistant(f"r{i}") for i in range(4)]
    return [r[0], pinned, r[1], mode, r[2], r[3]], [pinned, mode, r[3]]


TRIM_CASES = [
    # (name, params, builder returning (messages, expected))
    ("only the first opening user message is kept", {"keep_recent_turns": 2}, opening_with_two_user_messages),
    ("the first user message may come after a reply", {"keep_recent_turns": 1}, first_user_after_a_reply),
    (
        "pinned and mid-conversation system steps are kept in place",
        {"keep_recent_turns": 1, "keep_initial_user": False},
        pinned_and_inner_system_steps,
    ),
]


@pytest.mark.parametrize(("name", "params", "make"), TRIM_CASES, ids=[c[0] for c in TRIM_CASES])
def test_trim_cases(name, params, make):
    messages, expected = make()
    assert same(run({"kind": "trim", **params}, messages), expected)


def test_trim_errors_name_the_parameter():
    with pytest.raises(ConfigError, match="keep_recent_turns"):
        build_strategy({"kind": "trim", "keep_recent_turns": 0})
    with pytest.raises(ConfigError, match="keep_initial_user"):
        build_strategy({"kind": "trim", "keep_initial_user": "yes"})


# ------------------------------------------------------------------------------------------------
# shared behaviour


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "sliding_window", "window": 2},
        {"kind": "hard_clear", "keep_recent": 2},
        {"kind": "trim", "keep_recent_turns": 1},
    ],
)
def test_window_kinds_handle_empty_and_system_only_contexts(spec):
    assert run(spec, []) == []
    sys = system()
    assert same(run(spec, [sys]), [sys])


def test_window_kinds_on_a_long_context():
    """5,000 steps: each kind keeps what it should (speed is measured in benchmarks/, not asserted here)."""
    messages = [system(), user("go"), *[m for i in range(5000) for m in tool_step(i, results=2)]]
    env = CompactionEnv()
    expected = {"sliding_window": 2 + 10 * 3, "hard_clear": 1 + 30, "trim": 2 + 3 * 3}
    for spec in ({"kind": "sliding_window", "window": 10}, {"kind": "hard_clear", "keep_recent": 30}, {"kind": "trim"}):
        result = build_strategy(spec).compact(Context(messages), env)
        assert len(result) == expected[spec["kind"]], spec
        assert result[-1] is messages[-1]


# ------------------------------------------------------------------------------------------------
# ptc_runner's configuration: `compaction: true` means trim with its defaults under a turns-8
# pressure trigger; a partial table is merged with the defaults; bad values are refused by name.

TRIM_CONFIGS = [
    # (spec, expected full spec)
    ("trim", {"kind": "trim", "keep_recent_turns": 3, "keep_initial_user": True}),
    ({"kind": "trim"}, {"kind": "trim", "keep_recent_turns": 3, "keep_initial_user": True}),
    ({"kind": "trim", "keep_recent_turns": 5}, {"kind": "trim", "keep_recent_turns": 5, "keep_initial_user": True}),
    (
        {"kind": "trim", "keep_initial_user": False},
        {"kind": "trim", "keep_recent_turns": 3, "keep_initial_user": False},
    ),
    ({"kind": "trim", "keep_recent_turns": 4.0}, {"kind": "trim", "keep_recent_turns": 4, "keep_initial_user": True}),
]


@pytest.mark.parametrize(("spec", "full"), TRIM_CONFIGS)
def test_trim_config_normalisation(spec, full):
    assert spec_of(build_strategy(spec)) == full


def test_trim_rejects_unknown_parameters():
    with pytest.raises(ConfigError, match="token_counter"):
        build_strategy({"kind": "trim", "token_counter": "len/4"})


def test_ptc_runner_defaults_pressure_and_trim_together():
    from workbench.compaction import TriggerView
    from workbench.registry import build_trigger

    trigger, strategy = build_trigger("pressure"), build_strategy("trim")
    sys, first = system(), user("Compute the totals")
    context: list[Message] = [sys, first]
    env = CompactionEnv()
    for call in range(12):
        if call > 0:
            view = TriggerView(
                call_index=call, counters={"iterations": call}, gauges={}, context_limit=10**6, max_output=0
            )
            if trigger.should_compact(view):
                assert call >= 8
                context = strategy.compact(Context(context), env)
                trigger.notify_compacted(view)
                # system, the initial request and the last three exchanges, verbatim
                assert context[:2] == [sys, first] and context[0] is sys and context[1] is first
                assert sum(1 for m in context if m.role == "assistant") == 3
            else:
                assert call < 8
        context = [*context, *tool_step(call)]


@given(sizes=st.lists(st.integers(1, 4), max_size=12), keep=st.integers(-1, 30))
def test_the_trailing_steps_holding_the_last_messages_widen_to_step_boundaries(sizes, keep):
    """`last_steps_for_messages`: the fewest trailing steps holding at least `keep` messages (all of
    them when there are not that many), none for keep <= 0."""
    steps = [Step(tuple(user(f"{i}.{j}") for j in range(size))) for i, size in enumerate(sizes)]
    count = last_steps_for_messages(steps, keep)
    held = sum(sizes[len(sizes) - count :]) if count else 0
    if keep <= 0:
        assert count == 0
    elif held < keep:
        assert count == len(steps)
    else:
        assert count == 0 or held - sizes[len(sizes) - count] < keep  # one step fewer would not hold them


@given(st.lists(st.integers(0, 3), max_size=12), st.lists(st.integers(0, 3), max_size=12))
def test_shared_prefix_length_counts_leading_identical_objects(first_ids, second_ids):
    """Equal values that are different objects do not count: the prompt cache is keyed by identity."""
    pool = [Message(role="user", content="same text") for _ in range(4)]  # four equal, distinct messages
    first, second = [pool[i] for i in first_ids], [pool[i] for i in second_ids]
    expected = 0
    while expected < min(len(first), len(second)) and first[expected] is second[expected]:
        expected += 1
    assert shared_prefix_length(first, second) == expected
    assert shared_prefix_length(tuple(first), second) == expected


@given(st.sets(st.integers(0, 59), max_size=20), st.integers(1, 60))
def test_nth_outside_is_where_the_count_of_steps_outside_the_bonus_reaches_n(bonus, n):
    from workbench.strategies.windows import nth_outside

    outside = [index for index in range(80) if index not in bonus]
    assert nth_outside(sorted(bonus), n) == outside[n - 1]


@given(st.sets(st.integers(0, 30), max_size=8), st.integers(0, 32), st.integers(0, 32))
def test_bonus_runs_are_the_bonus_steps_before_the_cut_and_every_step_after_it(bonus, cut, steps):
    from workbench.strategies.windows import bonus_runs

    runs = bonus_runs(bonus, cut, steps)
    kept = [index for start, stop in runs for index in range(start, stop)]
    assert kept == sorted({i for i in bonus if i < cut} | set(range(cut, steps)))
    assert all(stop < start for (_, stop), (start, _) in zip(runs, runs[1:], strict=False))  # apart, never adjacent


@settings(max_examples=80, deadline=None)
@given(conversations(max_steps=14), st.data())
def test_rebuilding_kept_steps_carries_how_the_result_groups(messages, data):
    """`rebuild` keeps the flagged steps' messages in order, and what its result carries (steps,
    counts, pinned positions, settled counts, tokens) is what grouping the result afresh finds."""
    from workbench.strategies.common import BodySteps, StepList, body_steps, settle
    from workbench.strategies.windows import rebuild

    context = Context(messages)
    known = body_steps(context)
    tokens = [len(step.messages) * 7 for step in known.steps]
    settled = data.draw(st.integers(0, len(known.steps)))
    for step in known.steps[:settled]:
        settle(step, "test-key")
    context.__dict__["body_steps"] = BodySteps(
        known.steps, known.lengths, known.strays, known.pinned, {"test-key": settled}, known.paired, tokens, "test"
    )
    flags = data.draw(st.lists(st.booleans(), min_size=len(known.steps), max_size=len(known.steps)))
    out = rebuild(context, flags)
    kept_steps = [step for step, flag in zip(known.steps, flags, strict=True) if flag]
    assert out == [*context.system, *(m for step in kept_steps for m in step.messages)]
    if isinstance(out, StepList) and out.known is not None:
        carried = out.known
        assert carried.steps == kept_steps
        assert carried.lengths == [len(step.messages) for step in kept_steps]
        assert carried.pinned == [i for i, step in enumerate(kept_steps) if step.pinned]
        assert carried.tokens == [len(step.messages) * 7 for step in kept_steps]
        settled_now = next((i for i, step in enumerate(kept_steps) if "test-key" not in step.settled), len(kept_steps))
        assert carried.settled["test-key"] <= settled_now
        assert carried.settled["test-key"] == sum(flags[:settled])


# -- a result a system message parts from its call -----------------------------------------------


def _parted_steps() -> list[Step]:
    """[call c1] [reminder] [result c1] [user] [call c2 + result] [reminder] [call c3] [reminder] [result c3]"""
    from workbench.session import group_steps

    messages = [
        assistant("one", calls=(("c1", "bash"),)),
        system("reminder"),
        tool("c1", "out 1"),
        user("more"),
        assistant("two", calls=(("c2", "bash"),)),
        tool("c2", "out 2"),
        system("reminder"),
        assistant("three", calls=(("c3", "grep"),)),
        system("reminder"),
        tool("c3", "out 3"),
    ]
    return group_steps(messages)


def test_a_parted_result_is_a_step_owned_by_its_call():
    from workbench.strategies.common import stray_owners

    steps = _parted_steps()
    assert [s.kind for s in steps] == [
        "assistant",
        "system",
        "tool",
        "user",
        "assistant",
        "system",
        "assistant",
        "system",
        "tool",
    ]
    assert stray_owners(steps) == {2: 0, 8: 6}


@pytest.mark.parametrize(("cut", "glued"), [(0, 0), (1, 0), (2, 0), (3, 3), (5, 5), (7, 6), (8, 6), (9, 9)])
def test_a_kept_tail_reaches_back_to_the_call_of_a_parted_result(cut, glued):
    from workbench.strategies.common import glued_cut

    assert glued_cut(_parted_steps(), cut) == glued


@pytest.mark.parametrize(
    ("runs", "glued"),
    [
        ([(3, 6)], [(3, 6)]),  # no parted result nor its call kept
        ([(2, 3)], [(0, 3)]),  # the result brings its call and the reminder between
        ([(0, 1)], [(0, 3)]),  # the call brings its result
        ([(0, 1), (4, 5)], [(0, 3), (4, 5)]),
        ([(3, 4), (8, 9)], [(3, 4), (6, 9)]),
        ([(1, 2), (5, 6)], [(1, 2), (5, 6)]),  # reminders alone bind nothing
    ],
)
def test_kept_runs_keep_a_parted_result_with_its_call(runs, glued):
    from workbench.strategies.common import glued_flags, glued_runs

    steps = _parted_steps()
    assert glued_runs(steps, runs) == glued
    flags = [any(start <= i < stop for start, stop in runs) for i in range(len(steps))]
    assert glued_flags(steps, flags) == [any(start <= i < stop for start, stop in glued) for i in range(len(steps))]


def test_a_window_keeps_a_parted_result_with_its_call():
    """The last two steps of the body are a reminder and a result whose call sits before it: the
    window keeps the call too, so nothing is orphaned (the replay's pairing check holds)."""
    from workbench.session import flatten

    steps = _parted_steps()
    messages = [system(), user("the task"), *flatten(steps)]
    out = build_strategy({"kind": "sliding_window", "window": 1}).compact(Context(tuple(messages)), CompactionEnv())
    assert tool_pairing_problems(out) == []
    assert out == [*messages[:2], *flatten(steps[6:])]
