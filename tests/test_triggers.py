"""Trigger kinds: the seed designs' cases, table-driven, plus combinators, config errors and properties."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from builders import assistant, system, tool, user
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.compaction import CallSpan, TriggerView, first_true, trigger_severity
from workbench.errors import ConfigError
from workbench.registry import build_trigger, kinds, spec_of
from workbench.session import Message, ToolCall
from workbench.tokens import count_tokens
from workbench.triggers import ptc_message_tokens


def view(
    call_index: int = 1,
    *,
    counters: dict[str, float] | None = None,
    gauges: dict[str, float] | None = None,
    context_tokens: int | None = None,
    context_limit: int = 128_000,
    max_output: int = 4096,
    system_tokens: int = 0,
    last_finish_reason: str | None = None,
    overflow: bool = False,
) -> TriggerView:
    gauges = dict(gauges or {})
    if context_tokens is not None:
        gauges["context_tokens"] = context_tokens
    return TriggerView(
        call_index=call_index,
        counters=dict(counters or {}),
        gauges=gauges,
        context_limit=context_limit,
        max_output=max_output,
        system_tokens=system_tokens,
        last_finish_reason=last_finish_reason,
        overflow=overflow,
    )


def test_every_trigger_kind_is_registered():
    assert set(kinds("trigger")) >= {
        "token_threshold",
        "utilization",
        "stat_threshold",
        "pressure",
        "guard",
        "any",
        "all",
    }


# ------------------------------------------------------------------------------------------------
# stat_threshold: gent's 16 cases (000). Each case is a list of (view, expected should_compact,
# notify-after?) checks run in order against one trigger.


@dataclass
class StatCase:
    name: str
    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    # (counters seen, gauges seen, expected, notify afterwards: True = with the same view, or the
    # counters the engine holds after the compaction, the summarizer's usage included)
    checks: list[tuple[dict, dict, bool, bool | dict]] = field(default_factory=list)
    snapshots: dict[str, float] | None = None  # expected snapshots after the checks


STAT_CASES = [
    StatCase("1 counter below delta", {"iterations": 10}, checks=[({"iterations": 9}, {}, False, False)]),
    StatCase("2 counter equals delta", {"iterations": 10}, checks=[({"iterations": 10}, {}, True, False)]),
    StatCase("3 counter exceeds delta", {"iterations": 10}, checks=[({"iterations": 14}, {}, True, False)]),
    StatCase(
        "4 counter needs a full delta again after compaction",
        {"iterations": 10},
        checks=[
            ({"iterations": 10}, {}, True, True),
            ({"iterations": 15}, {}, False, False),
            ({"iterations": 19}, {}, False, False),
            ({"iterations": 20}, {}, True, False),
        ],
    ),
    StatCase(
        "5 several counters, one fires",
        {"iterations": 10, "input_tokens": 100_000},
        checks=[({"iterations": 3, "input_tokens": 100_500}, {}, True, False)],
    ),
    StatCase(
        "6 several counters, none fires",
        {"iterations": 10, "input_tokens": 100_000},
        checks=[({"iterations": 9, "input_tokens": 99_999}, {}, False, False)],
    ),
    StatCase(
        "7 gauge below value", gauges={"context_messages": 20}, checks=[({}, {"context_messages": 19}, False, False)]
    ),
    StatCase(
        "8 gauge equals value", gauges={"context_messages": 20}, checks=[({}, {"context_messages": 20}, True, False)]
    ),
    StatCase(
        "9 gauge exceeds value", gauges={"context_messages": 20}, checks=[({}, {"context_messages": 31}, True, False)]
    ),
    StatCase(
        "10 gauge fell after compaction",
        gauges={"context_messages": 20},
        checks=[
            ({}, {"context_messages": 25}, True, True),
            ({}, {"context_messages": 6}, False, False),
        ],
    ),
    StatCase(
        "11 counter prefix matches one key",
        {"input_tokens_for:*": 50_000},
        checks=[({"input_tokens_for:gpt-4o": 50_001, "input_tokens_for:mini": 10}, {}, True, False)],
    ),
    StatCase(
        "12 counter prefix matches no key",
        {"input_tokens_for:*": 50_000},
        checks=[({"input_tokens": 900_000, "output_tokens": 900_000}, {}, False, False)],
    ),
    StatCase(
        "13 gauge prefix matches one key",
        gauges={"context_*": 1000},
        checks=[({}, {"context_messages": 12, "context_tokens": 5000}, True, False)],
    ),
    StatCase(
        "14 exact counter snapshot taken at compaction",
        {"iterations": 5},
        checks=[({"iterations": 7, "input_tokens": 40}, {}, True, True)],
        snapshots={"iterations": 7},
    ),
    StatCase(
        "15 every prefix-matched counter is snapshotted",
        {"input_tokens_for:*": 1000},
        checks=[
            ({"input_tokens_for:a": 1500, "input_tokens_for:b": 200, "iterations": 3}, {}, True, True),
            ({"input_tokens_for:a": 2000, "input_tokens_for:b": 1100, "iterations": 4}, {}, False, False),
            ({"input_tokens_for:a": 2000, "input_tokens_for:b": 1200, "iterations": 4}, {}, True, False),
        ],
        snapshots={"input_tokens_for:a": 1500, "input_tokens_for:b": 200},
    ),
    # 16: gent's walkthrough: iterations delta 10, input_tokens delta 100K.
    StatCase(
        "16 iteration + token walkthrough",
        {"iterations": 10, "input_tokens": 100_000},
        checks=[
            ({"iterations": 5, "input_tokens": 120_000}, {}, True, True),  # tokens +120K fire
            ({"iterations": 10, "input_tokens": 200_000}, {}, False, False),  # +5 iterations, +80K tokens
            ({"iterations": 15, "input_tokens": 250_000}, {}, True, True),  # +10 iterations fire
            ({"iterations": 16, "input_tokens": 260_000}, {}, False, False),  # both restarted
        ],
        snapshots={"iterations": 15, "input_tokens": 250_000},
    ),
    # Summarization case 11: the summarizer's call increments the token counters, and gent notifies
    # the trigger after it, so the snapshot holds the summarizer's usage: the next delta starts there.
    StatCase(
        "summarization 11: snapshot taken after the summarizer's tokens",
        {"input_tokens": 100_000},
        checks=[
            (
                {"input_tokens": 120_000},
                {},
                True,
                {"input_tokens": 150_000, "output_tokens": 2_000, "input_tokens_for:summarizer": 30_000},
            ),
            ({"input_tokens": 240_000}, {}, False, False),  # +90K since the snapshot (it would be +120K before it)
            ({"input_tokens": 250_000}, {}, True, False),
        ],
        snapshots={"input_tokens": 150_000},
    ),
    StatCase(
        "summarization 11: the summarizer's model key is snapshotted too",
        {"input_tokens_for:*": 25_000},
        checks=[
            (
                {"input_tokens_for:agent": 26_000},
                {},
                True,
                {"input_tokens_for:agent": 26_000, "input_tokens_for:summarizer": 30_000},
            ),
            ({"input_tokens_for:agent": 40_000, "input_tokens_for:summarizer": 30_000}, {}, False, False),
            ({"input_tokens_for:agent": 51_000, "input_tokens_for:summarizer": 30_000}, {}, True, False),
        ],
        snapshots={"input_tokens_for:agent": 26_000, "input_tokens_for:summarizer": 30_000},
    ),
    StatCase(
        "summarization 11: output tokens of the summarizer count once, in the snapshot",
        {"output_tokens": 5_000},
        checks=[
            ({"output_tokens": 5_000}, {}, True, {"output_tokens": 9_000}),
            ({"output_tokens": 13_999}, {}, False, False),
            ({"output_tokens": 14_000}, {}, True, False),
        ],
        snapshots={"output_tokens": 9_000},
    ),
]


@pytest.mark.parametrize("case", STAT_CASES, ids=lambda c: c.name)
def test_stat_threshold_gent_cases(case: StatCase):
    trigger = build_trigger({"kind": "stat_threshold", "counters": case.counters, "gauges": case.gauges})
    for step, (counters, gauges, expected, notify) in enumerate(case.checks):
        v = view(counters=counters, gauges=gauges)
        assert trigger.should_compact(v) is expected, f"check {step}: {counters} {gauges}"
        if isinstance(notify, dict):
            trigger.notify_compacted(view(counters=notify, gauges=gauges))
        elif notify:
            trigger.notify_compacted(v)
    if case.snapshots is not None:
        for key, value in case.snapshots.items():
            assert trigger.snapshot(key) == value


def test_stat_threshold_state_is_not_part_of_the_spec():
    spec = {"kind": "stat_threshold", "counters": {"iterations": 3}, "gauges": {"context_tokens": 9000}}
    trigger = build_trigger(spec)
    trigger.notify_compacted(view(counters={"iterations": 3}))
    assert spec_of(trigger) == spec
    assert build_trigger(spec_of(trigger)) == trigger  # snapshots do not take part in equality
    assert build_trigger(spec).snapshot("iterations") == 0  # a fresh build starts clean


def test_stat_threshold_absent_exact_counter_reads_as_zero():
    trigger = build_trigger({"kind": "stat_threshold", "counters": {"compactions": 1}})
    assert not trigger.should_compact(view(counters={}))
    trigger.notify_compacted(view(counters={}))
    assert trigger.snapshot("compactions") == 0
    assert trigger.should_compact(view(counters={"compactions": 1}))


# ------------------------------------------------------------------------------------------------
# token_threshold (001)

TOKEN_CASES = [
    # (params, tokens_last_call, expected)
    ({}, 199_999, False),
    ({}, 200_000, True),
    ({}, 250_000, True),
    ({"threshold": 1000}, 999, False),
    ({"threshold": 1000}, 1000, True),
    ({"threshold": 0}, 0, False),
    ({"threshold": 0}, 10_000_000, False),  # 0 switches auto-compaction off
]


@pytest.mark.parametrize(("params", "last_call", "expected"), TOKEN_CASES)
def test_token_threshold(params, last_call, expected):
    trigger = build_trigger({"kind": "token_threshold", **params})
    # the gauge is prompt + completion of the previous call; context_tokens must not matter
    v = view(gauges={"tokens_last_call": last_call}, context_tokens=10**9)
    assert trigger.should_compact(v) is expected


def test_token_threshold_default_and_missing_gauge():
    trigger = build_trigger("token_threshold")
    assert spec_of(trigger) == {"kind": "token_threshold", "threshold": 200_000}
    assert not trigger.should_compact(view(gauges={}))


# ------------------------------------------------------------------------------------------------
# utilization (002): goat's budget math. Window 200K, system 1,000, max output 16,384:
# room = 182,616 tokens and 80 % of it is 146,092.8, so 146,092 message tokens stay under.

GOAT = {"context_limit": 200_000, "system_tokens": 1000, "max_output": 16_384}

UTILIZATION_CASES = [
    # (name, params, view kwargs, expected)
    ("goat: just under 80 %", {}, {**GOAT, "context_tokens": 1000 + 146_092}, False),
    ("goat: just over 80 %", {}, {**GOAT, "context_tokens": 1000 + 146_093}, True),
    (
        "strictly greater than ratio",
        {"ratio": 0.5},
        {"context_limit": 1100, "system_tokens": 100, "max_output": 0, "context_tokens": 600},
        False,
    ),
    (
        "above ratio",
        {"ratio": 0.5},
        {"context_limit": 1100, "system_tokens": 100, "max_output": 0, "context_tokens": 601},
        True,
    ),
    (
        "system tokens are not message tokens",
        {},
        {"context_limit": 10_000, "system_tokens": 5000, "max_output": 0, "context_tokens": 8000},
        False,
    ),
    (
        "no room left at all",
        {},
        {"context_limit": 1000, "system_tokens": 600, "max_output": 500, "context_tokens": 601},
        True,
    ),
    # goat reacts to a max-tokens stop by recomputing the budget and running the same test:
    # under the ratio it cannot help and exits (ExitMaxTokens), so a length stop alone never fires
    (
        "reactive: length stop under the ratio does not fire",
        {},
        {**GOAT, "context_tokens": 2000, "last_finish_reason": "length"},
        False,
    ),
    (
        "reactive: length stop over the ratio fires",
        {},
        {**GOAT, "context_tokens": 1000 + 146_093, "last_finish_reason": "length"},
        True,
    ),
    ("reactive: the engine's overflow flag fires", {}, {**GOAT, "context_tokens": 2000, "overflow": True}, True),
    # goat's overflow is a negative Available: context + max_output past the window (utilization > 1)
    (
        "overflow: context + max_output beyond the window",
        {"ratio": 1.0},
        {"context_limit": 10_000, "system_tokens": 0, "max_output": 4000, "context_tokens": 6001},
        True,
    ),
    (
        "overflow: Available = 0 is not an overflow",
        {"ratio": 1.0},
        {"context_limit": 10_000, "system_tokens": 0, "max_output": 4000, "context_tokens": 6000},
        False,
    ),
    (
        "reactive off: overflow beyond the window still over the ratio",
        {"ratio": 1.0, "reactive": False},
        {"context_limit": 10_000, "system_tokens": 0, "max_output": 4000, "context_tokens": 6001},
        True,
    ),
    (
        "reactive off: length stop ignored",
        {"reactive": False},
        {**GOAT, "context_tokens": 2000, "last_finish_reason": "length"},
        False,
    ),
    (
        "reactive off: overflow flag ignored",
        {"reactive": False},
        {**GOAT, "context_tokens": 2000, "overflow": True},
        False,
    ),
    (
        "reactive off: proactive check still works",
        {"reactive": False},
        {**GOAT, "context_tokens": 1000 + 146_093},
        True,
    ),
    ("finish_reason stop is not reactive", {}, {**GOAT, "context_tokens": 2000, "last_finish_reason": "stop"}, False),
]


@pytest.mark.parametrize(
    ("name", "params", "kwargs", "expected"), UTILIZATION_CASES, ids=[c[0] for c in UTILIZATION_CASES]
)
def test_utilization(name, params, kwargs, expected):
    trigger = build_trigger({"kind": "utilization", **params})
    assert trigger.should_compact(view(**kwargs)) is expected


def test_utilization_value_uses_goat_formula():
    trigger = build_trigger("utilization")
    assert spec_of(trigger) == {"kind": "utilization", "ratio": 0.8, "reactive": True}
    v = view(context_limit=200_000, system_tokens=1000, max_output=16_384, context_tokens=1000 + 91_308)
    assert trigger.utilization(v) == pytest.approx(0.5)


def test_utilization_with_goat_heuristic_counts():
    # goat counts len/4 per message plus 4 tokens of overhead; the heuristic tokenizer does the same
    messages = [user("x" * 400), assistant("y" * 40)]
    assert count_tokens(messages) == (100 + 4) + (10 + 4)
    v = view(context_limit=200, system_tokens=0, max_output=50, context_tokens=count_tokens(messages))
    assert build_trigger({"kind": "utilization", "ratio": 0.7}).should_compact(v)  # 118 / 150 = 0.79
    assert not build_trigger({"kind": "utilization", "ratio": 0.8}).should_compact(v)


# ------------------------------------------------------------------------------------------------
# pressure (004)

# ptc_runner counts turns from 1 and fires when turn > turns: before call k the turn is k + 1.
PRESSURE_TURN_CASES = [
    # (params, call_index, expected)
    ({}, 1, False),
    ({}, 7, False),  # turn 8: not > 8
    ({}, 8, True),  # turn 9
    ({}, 30, True),  # and every call after it
    ({"turns": 3}, 2, False),
    ({"turns": 3}, 3, True),
    ({"turns": 0, "tokens": 10**9}, 100, False),  # turns = 0: the turn condition is off
]


@pytest.mark.parametrize(("params", "call_index", "expected"), PRESSURE_TURN_CASES)
def test_pressure_turns(params, call_index, expected):
    trigger = build_trigger({"kind": "pressure", **params})
    assert trigger.should_compact(view(call_index, context_tokens=0)) is expected


def call_with_args(arguments: str) -> Message:
    return Message(role="assistant", content="run", tool_calls=(ToolCall(id="c1", name="bash", arguments=arguments),))


# ptc_runner's estimate: len/4 (floor 1) per message over the whole history, no per-message overhead,
# no system prompt; a tool call's name and arguments are part of what the model wrote.
HISTORY = [system("s" * 4000), user("x" * 400), assistant("y" * 40), user("hi")]  # 0 + 100 + 10 + 1
PRESSURE_TOKEN_CASES = [
    # (name, history, tokens threshold, expected)
    ("at the threshold", HISTORY, 111, True),
    ("one below", HISTORY, 112, False),
    ("no per-message overhead (4 x 3 messages would reach it)", HISTORY, 120, False),
    ("the system prompt is not counted", [system("s" * 40_000), user("x" * 40)], 11, False),
    ("floor of 1 for short text", [user("hi"), user("yo"), user("ok")], 3, True),
    ("tool calls count", [user("x" * 40), call_with_args("a" * 200)], 10 + len("run\nbash " + "a" * 200) // 4, True),
    ("tool results count", [user("x" * 40), tool("c1", "r" * 400)], 110, True),
]


@pytest.mark.parametrize(
    ("name", "history", "tokens", "expected"), PRESSURE_TOKEN_CASES, ids=[c[0] for c in PRESSURE_TOKEN_CASES]
)
def test_pressure_tokens_on_the_history(name, history, tokens, expected):
    trigger = build_trigger({"kind": "pressure", "turns": 0, "tokens": tokens})
    # the replayed context does not matter once the history is there
    v = TriggerView(
        call_index=1,
        counters={},
        gauges={"context_tokens": 10**9 if not expected else 0},
        context_limit=10**9,
        max_output=0,
        history=tuple(history),
    )
    assert trigger.should_compact(v) is expected


def test_pressure_measures_the_uncompacted_history_and_keeps_firing():
    # ptc_runner trims a copy for each call and keeps the full history: a compaction lowers the
    # replayed context, not the measure, so the trigger fires at every call past the threshold
    history = [user("task " * 100)]
    trigger = build_trigger({"kind": "pressure", "turns": 0, "tokens": 300})
    fired = []
    for call in range(1, 8):
        history += [assistant("step " * 20), tool("c", "out " * 20)]
        v = TriggerView(
            call_index=call,
            counters={},
            gauges={"context_tokens": 50},
            context_limit=10**6,
            max_output=0,
            history=tuple(history),
        )
        fired.append(trigger.should_compact(v))
        if fired[-1]:
            trigger.notify_compacted(v)
    assert trigger.history_tokens(v) == sum(ptc_message_tokens(m) for m in history)
    assert fired == [False, False, False, True, True, True, True]  # 125 + 45 per call: 305 at call 4


def test_pressure_without_history_reads_the_context_message_tokens():
    trigger = build_trigger({"kind": "pressure", "turns": 0, "tokens": 500})
    assert trigger.should_compact(view(1, context_tokens=600, system_tokens=100))
    assert not trigger.should_compact(view(1, context_tokens=599, system_tokens=100))


def test_pressure_defaults():
    assert spec_of(build_trigger("pressure")) == {"kind": "pressure", "turns": 8, "tokens": None}


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=30), cuts=st.lists(st.integers(0, 30), max_size=8))
def test_pressure_running_total_matches_a_fresh_count(sizes: list[int], cuts: list[int]):
    messages = [user("u" * n) if i % 2 == 0 else assistant("a" * n) for i, n in enumerate(sizes)]
    other = [user("o" * (n + 1)) for n in sizes]  # same lengths shifted: a different history
    trigger = build_trigger({"kind": "pressure", "turns": 0, "tokens": 1})
    for cut in [*cuts, len(messages)]:
        for source in (messages, other, messages):
            history = tuple(source[:cut])
            v = TriggerView(call_index=1, counters={}, gauges={}, context_limit=1, max_output=0, history=history)
            expected = sum(ptc_message_tokens(m) for m in history) if history else 0
            assert trigger.history_tokens(v) == expected


# ------------------------------------------------------------------------------------------------
# guard (003)

GUARD_CASES = [
    # (params, context tokens, severity)
    ({}, 0, "none"),
    ({}, 100_000, "none"),
    ({}, 102_399, "none"),
    ({}, 102_400, "warn"),  # 0.8 x 128,000
    ({}, 127_999, "warn"),
    ({}, 128_000, "critical"),  # at the hard limit
    ({}, 300_000, "critical"),
    ({"min_available": 10_000}, 118_000, "warn"),  # exactly 10,000 left: enough
    ({"min_available": 10_000}, 118_001, "critical"),  # 9,999 left: not enough
    ({"warn_threshold": 0.5, "hard_limit": 1000}, 499, "none"),
    ({"warn_threshold": 0.5, "hard_limit": 1000}, 500, "warn"),
    ({"warn_threshold": 1.0, "hard_limit": 1000}, 999, "none"),
    ({"warn_threshold": 1.0, "hard_limit": 1000}, 1000, "critical"),
]


@pytest.mark.parametrize(("params", "tokens", "severity"), GUARD_CASES)
def test_guard_severity(params, tokens, severity):
    trigger = build_trigger({"kind": "guard", **params})
    v = view(context_tokens=tokens)
    assert trigger.severity(v) == severity
    assert trigger_severity(trigger, v) == severity
    assert trigger.should_compact(v) is (severity != "none")  # needs_compaction above the warn threshold


def test_guard_defaults():
    assert spec_of(build_trigger("guard")) == {
        "kind": "guard",
        "warn_threshold": 0.8,
        "hard_limit": 128_000,
        "min_available": 0,
    }


def test_guard_fires_on_an_overflow_whatever_the_severity():
    # aisopod compacts on a context-overflow error and retries; the strategy is still picked from the count
    trigger = build_trigger({"kind": "guard", "hard_limit": 100_000})
    v = view(context_tokens=1000, overflow=True)
    assert trigger.severity(v) == "none"
    assert trigger.should_compact(v)
    assert not trigger.should_compact(view(context_tokens=1000))


# ------------------------------------------------------------------------------------------------
# overflow retry: only the designs that have one

OVERFLOW_RETRY_CASES = [
    ("token_threshold", False),
    ({"kind": "stat_threshold", "counters": {"iterations": 5}}, False),
    ("pressure", False),
    ("guard", True),
    ("utilization", True),
    ({"kind": "utilization", "reactive": False}, False),
    ({"kind": "any", "triggers": ["pressure", "guard"]}, True),
    ({"kind": "all", "triggers": ["pressure", {"kind": "utilization", "reactive": False}]}, False),
    ({"kind": "all", "triggers": ["token_threshold", {"kind": "any", "triggers": ["utilization"]}]}, True),
]


@pytest.mark.parametrize(("spec", "expected"), OVERFLOW_RETRY_CASES, ids=[repr(c[0]) for c in OVERFLOW_RETRY_CASES])
def test_overflow_retry_belongs_to_the_designs_that_have_it(spec, expected):
    trigger = build_trigger(spec)
    assert getattr(trigger, "overflow_retry", None) is expected


def test_overflow_retry_is_a_class_attribute_where_it_does_not_depend_on_parameters():
    for kind, expected in (("token_threshold", False), ("stat_threshold", False), ("pressure", False), ("guard", True)):
        assert kinds("trigger")[kind].overflow_retry is expected
    assert "overflow_retry" not in spec_of(build_trigger("guard"))  # not a parameter


# ------------------------------------------------------------------------------------------------
# any / all


class Scripted:
    """A test trigger with a fixed answer that counts notifications."""

    kind = "scripted"

    def __init__(self, answer: bool):
        self.answer = answer
        self.notified = 0

    def should_compact(self, view):
        return self.answer

    def notify_compacted(self, view):
        self.notified += 1


@pytest.mark.parametrize(
    ("kind", "answers", "expected"),
    [
        ("any", [False, False], False),
        ("any", [False, True], True),
        ("any", [True, True], True),
        ("all", [True, False], False),
        ("all", [True, True], True),
        ("all", [False, False], False),
        ("any", [True], True),
        ("all", [False], False),
    ],
)
def test_combinators(kind, answers, expected):
    inner = [Scripted(a) for a in answers]
    trigger = build_trigger({"kind": kind, "triggers": inner})
    assert trigger.should_compact(view()) is expected
    trigger.notify_compacted(view())
    assert [t.notified for t in inner] == [1] * len(inner)  # every inner trigger hears about it


def test_combinators_build_nested_specs_and_round_trip():
    spec = {
        "kind": "any",
        "triggers": [
            {"kind": "utilization", "ratio": 0.9},
            {"kind": "all", "triggers": [{"kind": "pressure", "turns": 4}, {"kind": "token_threshold"}]},
        ],
    }
    trigger = build_trigger(spec)
    assert type(trigger.triggers[1]).kind == "all"
    again = build_trigger(spec_of(trigger))
    assert spec_of(again) == spec_of(trigger)
    assert spec_of(trigger)["triggers"][1]["triggers"][0] == {"kind": "pressure", "turns": 4, "tokens": None}


def test_combinators_forward_guard_severity():
    spec = {
        "kind": "any",
        "triggers": [
            {"kind": "pressure", "turns": 100},
            {
                "kind": "all",
                "triggers": [{"kind": "token_threshold", "threshold": 1}, {"kind": "guard", "hard_limit": 1000}],
            },
            {"kind": "guard", "hard_limit": 10},  # a later guard is not asked
        ],
    }
    trigger = build_trigger(spec)
    assert trigger_severity(trigger, view(context_tokens=100)) == "none"
    assert trigger_severity(trigger, view(context_tokens=850)) == "warn"
    assert trigger_severity(trigger, view(context_tokens=1000)) == "critical"
    assert trigger_severity(build_trigger({"kind": "all", "triggers": ["pressure"]}), view()) is None


def test_any_notifies_stat_threshold_inside():
    trigger = build_trigger(
        {"kind": "any", "triggers": [{"kind": "stat_threshold", "counters": {"iterations": 5}}, {"kind": "guard"}]}
    )
    v = view(counters={"iterations": 5}, context_tokens=10)
    assert trigger.should_compact(v)
    trigger.notify_compacted(v)
    assert not trigger.should_compact(v)


# ------------------------------------------------------------------------------------------------
# configuration errors name the offender

CONFIG_ERRORS = [
    ({"kind": "token_threshold", "threshold": -1}, "threshold"),
    ({"kind": "token_threshold", "threshold": "lots"}, "threshold"),
    ({"kind": "token_threshold", "treshold": 5}, "treshold"),
    ({"kind": "utilization", "ratio": 0}, "ratio"),
    ({"kind": "utilization", "ratio": 1.5}, "ratio"),
    ({"kind": "utilization", "reactive": "yes"}, "reactive"),
    ({"kind": "stat_threshold"}, "counters"),
    ({"kind": "stat_threshold", "counters": {"iterations": 0}}, "iterations"),
    ({"kind": "stat_threshold", "counters": {"iterations": -3}}, "iterations"),
    ({"kind": "stat_threshold", "gauges": {"context_tokens": "big"}}, "context_tokens"),
    ({"kind": "stat_threshold", "counters": {"in*put": 5}}, "in*put"),
    ({"kind": "stat_threshold", "counters": [1, 2]}, "counters"),
    ({"kind": "pressure", "turns": 0}, "pressure"),
    ({"kind": "pressure", "turns": -2}, "turns"),
    ({"kind": "pressure", "tokens": 1.5}, "tokens"),
    ({"kind": "guard", "warn_threshold": 1.2}, "warn_threshold"),
    ({"kind": "guard", "hard_limit": 0}, "hard_limit"),
    ({"kind": "guard", "hard_limit": 100, "min_available": 100}, "min_available"),
    ({"kind": "any"}, "triggers"),
    ({"kind": "any", "triggers": []}, "triggers"),
    ({"kind": "all", "triggers": {"kind": "guard"}}, "triggers"),
    ({"kind": "any", "triggers": [{"kind": "guard"}, {"kind": "utilization", "ratio": 7}]}, "triggers[1]"),
    ({"kind": "any", "triggers": [{"kind": "no_such_trigger"}]}, "no_such_trigger"),
    ({"kind": "nope"}, "nope"),
]


@pytest.mark.parametrize(("spec", "offender"), CONFIG_ERRORS, ids=[repr(s) for s, _ in CONFIG_ERRORS])
def test_config_errors_name_the_offender(spec, offender):
    with pytest.raises(ConfigError) as info:
        build_trigger(spec)
    message = str(info.value)
    assert offender in message
    if spec["kind"] in kinds("trigger"):
        assert repr(spec["kind"]) in message  # and the kind it belongs to


def test_nested_error_names_the_inner_kind_and_parameter():
    with pytest.raises(ConfigError) as info:
        build_trigger({"kind": "all", "triggers": [{"kind": "any", "triggers": [{"kind": "guard", "hard_limit": -5}]}]})
    message = str(info.value)
    assert "'all'" in message and "'any'" in message and "'guard'" in message and "hard_limit" in message


# ------------------------------------------------------------------------------------------------
# properties


@settings(max_examples=60, deadline=None)
@given(delta=st.integers(1, 20), growth=st.lists(st.integers(0, 15), min_size=1, max_size=40))
def test_stat_threshold_counter_never_fires_twice_without_growth(delta: int, growth: list[int]):
    trigger = build_trigger({"kind": "stat_threshold", "counters": {"iterations": delta}})
    current = 0
    last_compaction = 0
    for g in growth:
        current += g
        v = view(counters={"iterations": current})
        fired = trigger.should_compact(v)
        assert fired is (current - last_compaction >= delta)
        if fired:
            trigger.notify_compacted(v)
            last_compaction = current
            assert not trigger.should_compact(v)  # same counters again: no second firing


@settings(max_examples=60, deadline=None)
@given(
    hard_limit=st.integers(1, 200_000),
    warn=st.floats(0.05, 1.0),
    tokens=st.lists(st.integers(0, 300_000), min_size=2, max_size=10),
)
def test_guard_severity_is_monotone_in_tokens(hard_limit: int, warn: float, tokens: list[int]):
    trigger = build_trigger({"kind": "guard", "hard_limit": hard_limit, "warn_threshold": warn})
    order = {"none": 0, "warn": 1, "critical": 2}
    levels = [order[trigger.severity(view(context_tokens=t))] for t in sorted(tokens)]
    assert levels == sorted(levels)


@settings(max_examples=60, deadline=None)
@given(
    ratio=st.floats(0.05, 1.0),
    limit=st.integers(1000, 100_000),
    system=st.integers(0, 500),
    max_output=st.integers(0, 500),
    messages=st.integers(0, 120_000),
)
def test_utilization_matches_its_definition(ratio, limit, system, max_output, messages):
    trigger = build_trigger({"kind": "utilization", "ratio": ratio, "reactive": False})
    v = view(context_limit=limit, system_tokens=system, max_output=max_output, context_tokens=system + messages)
    room = limit - system - max_output
    expected = messages > 0 if room <= 0 else messages / room > ratio  # no room: any message is too much
    assert trigger.should_compact(v) is expected


# ------------------------------------------------------------------------------------------------
# firing_mask: the engine's skip-ahead must decide exactly as should_compact does, call by call.

MASKED_TRIGGERS = [
    {"kind": "utilization", "ratio": 0.8},
    {"kind": "utilization", "ratio": 1.0, "reactive": False},
    {"kind": "utilization", "ratio": 0.3},
    {"kind": "guard", "warn_threshold": 0.8, "hard_limit": 30_000},
    {"kind": "guard", "warn_threshold": 0.95, "hard_limit": 30_000, "min_available": 4_000},
    {"kind": "token_threshold", "threshold": 20_000},
    {"kind": "token_threshold", "threshold": 0},
    {"kind": "pressure", "turns": 7},
    {"kind": "stat_threshold", "counters": {"iterations": 5}},
    {"kind": "stat_threshold", "counters": {"input_tokens": 150_000, "output_tokens": 3_000}},
    {"kind": "stat_threshold", "counters": {"compactions": 1, "unknown_counter": 2}},
    {"kind": "stat_threshold", "gauges": {"context_messages": 40, "context_steps": 30}},
    {"kind": "stat_threshold", "gauges": {"context_*": 25_000, "tokens_last_call": 28_000, "other": 1}},
    {"kind": "any", "triggers": [{"kind": "pressure", "turns": 9}, {"kind": "guard", "hard_limit": 25_000}]},
    {
        "kind": "all",
        "triggers": [{"kind": "utilization", "ratio": 0.5}, {"kind": "stat_threshold", "counters": {"iterations": 4}}],
    },
]


def span_and_views(
    first_call: int,
    steps: list[tuple[int, int, int]],
    *,
    system_tokens: int,
    compactions: int,
    finish: list[str | None],
) -> tuple[Any, list[TriggerView]]:
    """A CallSpan and the per-call views the engine would build for the same calls.

    `steps`: per call, (tokens the context grew by before it, messages added, completion tokens).
    """
    import numpy as np

    tokens, messages, stepsn, last, inputs, outputs = [], [], [], [], [], []
    context, count, step_count, spent, total_in, total_out = system_tokens + 500, 3, 2, 0, 1_000, 100
    for grew, added, completion in steps:
        context, count, step_count = context + grew, count + added, step_count + max(1, added - 1)
        tokens.append(context)
        messages.append(count)
        stepsn.append(step_count)
        last.append(spent)
        inputs.append(total_in)
        outputs.append(total_out)
        spent, total_in, total_out = context + completion, total_in + context, total_out + completion
    reasons = [finish[i % len(finish)] for i in range(len(steps))]
    columns = {
        "context_messages": np.array(messages),
        "context_steps": np.array(stepsn),
        "tokens_last_call": np.array(last),
        "input_tokens": np.array(inputs),
        "output_tokens": np.array(outputs),
        "last_finish_reasons": reasons,
    }
    span = CallSpan(
        first_call=first_call,
        context_tokens=np.array(tokens),
        system_tokens=system_tokens,
        compactions=compactions,
        context_limit=32_000,
        max_output=2_000,
        columns=columns.__getitem__,
    )
    views = [
        TriggerView(
            call_index=first_call + i,
            counters={
                "iterations": first_call + i,
                "input_tokens": inputs[i],
                "output_tokens": outputs[i],
                "compactions": compactions,
                "input_tokens_for:m": inputs[i],
            },
            gauges={
                "context_messages": messages[i],
                "context_steps": stepsn[i],
                "context_tokens": tokens[i],
                "tokens_last_call": last[i],
            },
            context_limit=32_000,
            max_output=2_000,
            system_tokens=system_tokens,
            last_finish_reason=reasons[i],
            reactive=reasons[i] == "length",
        )
        for i in range(len(steps))
    ]
    return span, views


@pytest.mark.parametrize("spec", MASKED_TRIGGERS, ids=lambda spec: str(spec)[:60])
@settings(max_examples=25, deadline=None)
@given(
    first_call=st.integers(1, 12),
    system_tokens=st.sampled_from([0, 1_200, 29_500, 30_500]),
    compactions=st.integers(0, 2),
    notified=st.booleans(),
    steps=st.lists(st.tuples(st.integers(0, 3_000), st.integers(1, 4), st.integers(0, 900)), min_size=1, max_size=40),
)
def test_firing_mask_agrees_with_should_compact_at_every_call(
    spec, first_call, system_tokens, compactions, notified, steps
):
    trigger = build_trigger(spec)
    span, views = span_and_views(
        first_call, steps, system_tokens=system_tokens, compactions=compactions, finish=[None, "stop", "length"]
    )
    if notified:  # stat_threshold's snapshots move the counters' origin
        trigger.notify_compacted(views[len(views) // 2])
    expected = [trigger.should_compact(v) for v in views]
    assert [bool(x) for x in trigger.firing_mask(span)] == expected


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "pressure", "turns": 4, "tokens": 9_000},
        {"kind": "stat_threshold", "counters": {"input_tokens_for:*": 1_000}},
        {"kind": "stat_threshold", "counters": {"input*": 1_000}},
        {"kind": "any", "triggers": [{"kind": "guard"}, {"kind": "pressure", "tokens": 500}]},
    ],
)
def test_triggers_that_need_the_per_call_path_say_so(spec):
    span, _ = span_and_views(1, [(100, 2, 10)], system_tokens=0, compactions=0, finish=[None])
    with pytest.raises(NotImplementedError):
        build_trigger(spec).firing_mask(span)


def test_first_true_finds_the_first_marked_call():
    import numpy as np

    assert first_true(np.array([False, False, True, True])) == 2
    assert first_true(np.array([False, False])) is None
    assert first_true(np.array([], dtype=bool)) is None
