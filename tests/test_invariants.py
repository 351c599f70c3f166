"""Properties every built-in kind must keep, checked with hypothesis over random conversations.

Strategies (every built-in kind, a few parameter specs each): the leading system messages stay
the prefix, no tool call or result is orphaned, every pinned message survives as the same object,
roles stay valid; dropping kinds never add tokens, keep the order and are idempotent. Kinds whose
module has not landed yet are skipped with a reason and covered as soon as they register.

Triggers: answers are booleans, severities valid, specs round-trip, and stat_threshold never fires
twice on counters that did not grow.
"""

from __future__ import annotations

import pytest
from builders import ScriptedSummarizer, conversations
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.compaction import SEVERITIES, CompactionEnv, Context, TriggerView, trigger_severity
from workbench.registry import build_strategy, build_trigger, kinds, spec_of
from workbench.session import ROLES, Message, split_leading_system, tool_pairing_problems
from workbench.tokens import messages_tokens

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

# A few parameter specs per strategy kind (COMPACTION.md names); `{}` means the defaults.
STRATEGY_SPECS: dict[str, list[dict]] = {
    "sliding_window": [{"window": 1}, {"window": 4}],
    "hard_clear": [{"keep_recent": 1}, {"keep_recent": 6}],
    "trim": [{}, {"keep_recent_turns": 1, "keep_initial_user": False}],
    "tool_result_truncation": [{}, {"max_chars": 10}],
    "observation_masking": [{}, {"keep_recent": 1}],
    "clear_tool_uses": [{}, {"keep": 0, "clear_inputs": True, "exclude_tools": ["bash"]}],
    "summarize_progressive": [{}, {"keep_recent": 3}],
    "summarize_full": [{}],
    "summarize_split": [{}, {"preserve": 0.2}],
    "adaptive_chunking": [{"keep_recent": 2}, {"chunk_messages": 4, "boundary": "count", "keep_recent": 0}],
    "guard_select": [{}, {"oversized_chars": 500}],
    "pipeline": [
        {"steps": [{"kind": "tool_result_truncation", "max_chars": 200}, {"kind": "sliding_window", "window": 5}]}
    ],
    "handoff": [{}, {"user_tokens": 50}],
    "step_gate": [{"min_steps": 3}, {"min_steps": 2, "strategy": {"kind": "sliding_window", "window": 2}}],
    "recorded": [{}],  # no session bound: the context is returned unchanged
    "inspect_trim": [{}, {"preserve": 0.3}],
    "inspect_edit": [{}, {"keep_tool_uses": 0, "keep_tool_inputs": False, "exclude_tools": ["bash"]}],
    "inspect_summary": [{}],
}

# Kinds that only drop whole steps: the result is a subsequence of the input (same objects).
DROPPING = {"sliding_window", "hard_clear", "trim"}
# Kinds that rewrite tool traffic in place: same length, changed messages keep role and call id.
IN_PLACE = {"tool_result_truncation", "observation_masking", "clear_tool_uses"}
# Kinds whose output must not hold more tokens than their input.
NEVER_GROW = DROPPING | {"observation_masking", "clear_tool_uses"}
# gent's kinds keep the task (the first real user message) outside what they compact (000).
KEEPS_TASK = {"sliding_window", "summarize_progressive"}


def _builtin_strategy_kinds() -> set[str]:
    return {name for name, cls in kinds("strategy").items() if cls.__module__.startswith("workbench.")}


STRATEGY_CASES = [
    (kind, params)
    for kind in sorted(set(STRATEGY_SPECS) | _builtin_strategy_kinds())
    for params in STRATEGY_SPECS.get(kind, [{}])
]


def _is_subsequence(result: list[Message], source: list[Message]) -> bool:
    it = iter(source)
    return all(any(r is s for s in it) for r in result)


def check_strategy_invariants(kind: str, strategy, messages: list[Message], severity: str | None) -> None:
    env = CompactionEnv(summarizer=ScriptedSummarizer(), severity=severity, context_limit=16_000, max_output=1000)
    result = strategy.compact(Context(messages), env)

    assert isinstance(result, list), f"{kind} must return a list, not {type(result).__name__}"
    assert all(isinstance(m, Message) and m.role in ROLES for m in result)

    system, _body = split_leading_system(messages)
    assert len(result) >= len(system)
    assert all(a is b for a, b in zip(result, system, strict=False)), "leading system messages must stay the prefix"

    assert tool_pairing_problems(result) == []

    kept = {id(m) for m in result}
    lost = [m for m in messages if m.pinned and id(m) not in kept]
    assert not lost, f"{kind} lost pinned message(s): {[m.text[:40] for m in lost]}"

    if kind in KEEPS_TASK:
        task = next((m for m in _body if m.role == "user" and m.origin == "original" and not m.observation), None)
        assert task is None or id(task) in kept, f"{kind} dropped the task (the first user message)"

    if kind in DROPPING:
        assert _is_subsequence(result, messages), "a dropping kind keeps the original objects in order"
        again = strategy.compact(Context(result), env)
        assert len(again) == len(result) and all(a is b for a, b in zip(again, result, strict=True)), (
            "compacting a compacted context again changes nothing"
        )
    if kind in IN_PLACE:
        assert len(result) == len(messages)
        for before, after in zip(messages, result, strict=True):
            if after is not before:
                assert after.origin == "compacted_modified"
                assert (after.role, after.tool_call_id) == (before.role, before.tool_call_id)
                assert not before.pinned
        again = strategy.compact(Context(result), env)
        assert all(a is b for a, b in zip(again, result, strict=True)), "compacting again changes nothing"

    before_tokens = messages_tokens(messages, env.tokenizer)
    after_tokens = messages_tokens(result, env.tokenizer)
    if kind in NEVER_GROW:
        assert after_tokens <= before_tokens
    elif kind == "tool_result_truncation":
        modified = sum(1 for a, b in zip(messages, result, strict=True) if a is not b)
        assert after_tokens <= before_tokens + 3 * modified  # the marker may outweigh a tiny cut


@pytest.mark.parametrize(
    ("kind", "params"),
    STRATEGY_CASES,
    ids=[f"{k}-{i}" for k, i in ((k, STRATEGY_SPECS.get(k, [{}]).index(p)) for k, p in STRATEGY_CASES)],
)
def test_strategy_invariants(kind: str, params: dict):
    strategy = build_strategy({"kind": kind, **params})

    @SETTINGS
    @given(messages=conversations(), severity=st.sampled_from([None, "none", "warn", "critical"]))
    def check(messages: list[Message], severity: str | None) -> None:
        check_strategy_invariants(kind, strategy, messages, severity)

    check()


@pytest.mark.parametrize(
    ("kind", "params"),
    STRATEGY_CASES,
    ids=[f"{k}-{i}" for k, i in ((k, STRATEGY_SPECS.get(k, [{}]).index(p)) for k, p in STRATEGY_CASES)],
)
def test_strategy_invariants_when_a_message_parts_a_call_from_its_result(kind: str, params: dict):
    """A system reminder between a call and its result makes the result a step of its own: a kind
    that cuts between steps keeps it with its call or drops both."""
    strategy = build_strategy({"kind": kind, **params})

    @SETTINGS
    @given(messages=conversations(interrupted=True), severity=st.sampled_from([None, "warn", "critical"]))
    def check(messages: list[Message], severity: str | None) -> None:
        check_strategy_invariants(kind, strategy, messages, severity)

    check()


def test_strategy_table_covers_every_builtin_kind():
    missing = _builtin_strategy_kinds() - set(STRATEGY_SPECS)
    assert not missing, f"add parameter specs for {sorted(missing)} to STRATEGY_SPECS"


# ------------------------------------------------------------------------------------------------
# triggers

TRIGGER_SPECS: dict[str, list[dict]] = {
    "token_threshold": [{}, {"threshold": 5000}, {"threshold": 0}],
    "utilization": [{}, {"ratio": 0.5, "reactive": False}],
    "stat_threshold": [
        {"counters": {"iterations": 3, "input_tokens": 20_000}, "gauges": {"context_tokens": 8000}},
        {"counters": {"input_tokens_for:*": 5000}},
    ],
    "pressure": [{}, {"turns": 0, "tokens": 6000}],
    "guard": [{}, {"warn_threshold": 0.5, "hard_limit": 10_000, "min_available": 1000}],
    "any": [{"triggers": [{"kind": "pressure", "turns": 5}, {"kind": "guard", "hard_limit": 9000}]}],
    "all": [{"triggers": ["utilization", {"kind": "stat_threshold", "counters": {"iterations": 2}}]}],
    "recorded": [{}],  # no session bound: never fires
    "inspect_threshold": [{}, {"threshold": 0.5}, {"threshold": 6000}],
}

TRIGGER_CASES = [(kind, params) for kind in sorted(TRIGGER_SPECS) for params in TRIGGER_SPECS[kind]]


_MODEL = st.sampled_from(("m1", "m2"))
_FINISH_REASON = st.sampled_from(("stop", "stop", "length", None))


@st.composite
def replays(draw) -> list[TriggerView]:
    """A plausible sequence of views: counters only grow, gauges move freely."""
    views = []
    counters = {
        "iterations": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "input_tokens_for:m1": 0,
        "input_tokens_for:m2": 0,
        "compactions": 0,
    }
    for call in range(1, draw(st.integers(1, 30)) + 1):
        counters = dict(counters)
        counters["iterations"] = call
        prompt = draw(st.integers(0, 12_000))
        model = draw(_MODEL)
        counters["input_tokens"] += prompt
        counters[f"input_tokens_for:{model}"] += prompt
        counters["output_tokens"] += draw(st.integers(0, 800))
        context = draw(st.integers(0, 20_000))
        gauges = {
            "context_tokens": context,
            "context_messages": draw(st.integers(0, 200)),
            "context_steps": draw(st.integers(0, 100)),
            "tokens_last_call": prompt,
        }
        views.append(
            TriggerView(
                call_index=call,
                counters=counters,
                gauges=gauges,
                context_limit=16_000,
                max_output=1000,
                system_tokens=min(context, 300),
                last_finish_reason=draw(_FINISH_REASON),
                overflow=context + 1000 > 16_000,
            )
        )
    return views


@pytest.mark.parametrize(
    ("kind", "params"), TRIGGER_CASES, ids=[f"{k}-{TRIGGER_SPECS[k].index(p)}" for k, p in TRIGGER_CASES]
)
def test_trigger_invariants(kind: str, params: dict):
    spec = {"kind": kind, **params}

    @SETTINGS
    @given(views=replays())
    def check(views: list[TriggerView]) -> None:
        trigger, twin = build_trigger(spec), build_trigger(spec_of(build_trigger(spec)))
        assert spec_of(twin) == spec_of(trigger)
        for v in views:
            fired = trigger.should_compact(v)
            assert fired is True or fired is False
            assert twin.should_compact(v) is fired  # a rebuilt spec behaves the same
            severity = trigger_severity(trigger, v)
            assert severity is None or severity in SEVERITIES
            if fired:
                trigger.notify_compacted(v)
                twin.notify_compacted(v)
        assert spec_of(trigger) == spec_of(build_trigger(spec))  # replay state never leaks into the spec

    check()


@SETTINGS
@given(
    views=replays(),
    delta=st.integers(1, 40_000),
    key=st.sampled_from(["iterations", "input_tokens", "input_tokens_for:*"]),
)
def test_stat_threshold_never_fires_twice_without_counter_growth(views, delta, key):
    delta = min(delta, 5) if key == "iterations" else delta
    trigger = build_trigger({"kind": "stat_threshold", "counters": {key: delta}})
    for v in views:
        if trigger.should_compact(v):
            trigger.notify_compacted(v)
            assert not trigger.should_compact(v)
