"""The fast replay (`replay`) equals the reference walk (`reference_replay`) on generated sessions
and configs: every call record, every compaction event and the contexts it saw and returned, every
context sent, every metric. The reference asks the trigger at every call and recounts the context
at every change, on its own copy of the messages (no token count, step or rewrite the fast walk
cached is shared with it)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from builders import ScriptedSummarizer, conversation, conversations
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import workbench as wb
from workbench.registry import kinds
from workbench.replay import ReplayResult, reference_replay, replay
from workbench.session import Message, RecordedCompaction
from workbench.triggers import TokenThreshold

SETTINGS = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


_MAX_STEPS = st.sampled_from((4, 12, 30))
_MODEL = st.sampled_from((None, "model-a", "model-b"))
_FINISH_REASON = st.sampled_from((None, "stop", "length"))


@st.composite
def sessions(draw: st.DrawFn) -> list[Message]:
    """A generated conversation (tool calls, text actions answered by user observations, pinned
    messages, results of every size) whose assistant messages sometimes name another model or
    stopped at their output limit, and which sometimes records compactions of its own."""
    messages = draw(conversations(max_steps=draw(_MAX_STEPS)))
    out = []
    for message in messages:
        if message.role == "assistant":
            metadata = {
                "model": draw(_MODEL),
                "finish_reason": draw(_FINISH_REASON),
            }
            message = dataclasses.replace(message, metadata={k: v for k, v in metadata.items() if v})
        out.append(message)
    return out


def _recorded_compactions(messages: list[Message], picks: list[int]) -> list[dict[str, Any]]:
    """Recorded compactions before some of the assistant messages (chosen by `picks`)."""
    at = [i for i, m in enumerate(messages) if m.role == "assistant"][1:]
    chosen = sorted({at[p % len(at)] for p in picks}) if at else []
    return [
        RecordedCompaction(
            call_index=sum(1 for m in messages[:i] if m.role == "assistant"),
            message_index=i,
            summary=f"the agent's own summary {n}",
        ).to_dict()
        for n, i in enumerate(chosen)
    ]


SIMPLE_TRIGGERS = {
    "token_threshold": st.fixed_dictionaries({"threshold": st.integers(0, 12_000)}),
    "utilization": st.fixed_dictionaries({"ratio": st.floats(0.05, 1.0), "reactive": st.booleans()}),
    "stat_threshold": st.one_of(
        st.fixed_dictionaries(
            {"counters": st.dictionaries(st.sampled_from(["iterations", "compactions"]), st.integers(1, 6), min_size=1)}
        ),
        st.fixed_dictionaries(
            {
                "counters": st.dictionaries(
                    st.sampled_from(["input_tokens", "output_tokens", "input_tokens_for:*"]),
                    st.integers(1, 40_000),
                    min_size=1,
                )
            }
        ),
        st.fixed_dictionaries(
            {
                "gauges": st.dictionaries(
                    st.sampled_from(["context_tokens", "context_messages", "context_steps", "tokens_last_call"]),
                    st.integers(1, 8_000),
                    min_size=1,
                )
            }
        ),
    ),
    "pressure": st.fixed_dictionaries(
        {"turns": st.one_of(st.none(), st.integers(0, 10)), "tokens": st.one_of(st.none(), st.integers(1, 10_000))}
    ),
    "guard": st.fixed_dictionaries(
        {
            "warn_threshold": st.floats(0.2, 1.0),
            "hard_limit": st.integers(500, 20_000),
            "min_available": st.integers(0, 2_000),
        }
    ),
    "recorded": st.just({}),
    "inspect_threshold": st.fixed_dictionaries(
        {"threshold": st.one_of(st.floats(0.05, 1.0), st.integers(2, 20_000).map(float))}
    ),
}


def _kind(name: str, params: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return params.map(lambda found: {"kind": name, **found})


SIMPLE_TRIGGER = st.one_of([_kind(name, params) for name, params in SIMPLE_TRIGGERS.items()])
TRIGGERS = {
    **SIMPLE_TRIGGERS,
    "any": st.fixed_dictionaries({"triggers": st.lists(SIMPLE_TRIGGER, min_size=1, max_size=3)}),
    "all": st.fixed_dictionaries({"triggers": st.lists(SIMPLE_TRIGGER, min_size=1, max_size=3)}),
}

SIMPLE_STRATEGIES = {
    "sliding_window": st.fixed_dictionaries({"window": st.integers(1, 8)}),
    "hard_clear": st.fixed_dictionaries({"keep_recent": st.integers(1, 10)}),
    "trim": st.fixed_dictionaries({"keep_recent_turns": st.integers(1, 4), "keep_initial_user": st.booleans()}),
    "tool_result_truncation": st.fixed_dictionaries({"max_chars": st.integers(1, 500)}),
    "observation_masking": st.fixed_dictionaries({"keep_recent": st.integers(0, 5)}),
    "clear_tool_uses": st.fixed_dictionaries(
        {"keep": st.integers(0, 4), "clear_inputs": st.booleans(), "exclude_tools": st.sampled_from([[], ["bash"]])}
    ),
    "summarize_progressive": st.fixed_dictionaries({"keep_recent": st.integers(0, 4)}),
    "summarize_full": st.just({}),
    "summarize_split": st.fixed_dictionaries({"preserve": st.floats(0.0, 1.0)}),
    "adaptive_chunking": st.fixed_dictionaries(
        {
            "chunk_messages": st.integers(1, 10),
            "boundary": st.sampled_from(["topic", "count"]),
            "keep_recent": st.integers(0, 4),
        }
    ),
    "handoff": st.fixed_dictionaries({"user_tokens": st.integers(0, 2_000)}),
    "recorded": st.just({}),
    "inspect_trim": st.fixed_dictionaries({"preserve": st.floats(0.0, 1.0)}),
    "inspect_edit": st.fixed_dictionaries(
        {
            "keep_tool_uses": st.integers(0, 4),
            "keep_tool_inputs": st.booleans(),
            "exclude_tools": st.sampled_from([[], ["bash"]]),
            "keep_thinking_turns": st.one_of(st.just("all"), st.integers(0, 3)),
        }
    ),
    "inspect_summary": st.just({}),
}
SIMPLE_STRATEGY = st.one_of([_kind(name, params) for name, params in SIMPLE_STRATEGIES.items()])
STRATEGIES = {
    **SIMPLE_STRATEGIES,
    "guard_select": st.fixed_dictionaries(
        {"critical": SIMPLE_STRATEGY, "warn": SIMPLE_STRATEGY, "oversized_chars": st.integers(10, 4_000)}
    ),
    "pipeline": st.fixed_dictionaries({"steps": st.lists(SIMPLE_STRATEGY, min_size=1, max_size=3)}),
    "step_gate": st.fixed_dictionaries({"strategy": SIMPLE_STRATEGY, "min_steps": st.integers(1, 6)}),
}


def built_in(family: str) -> set[str]:
    """The kinds the workbench ships (not those a test or a plugin registered)."""
    return {name for name, kind in kinds(family).items() if kind.__module__.startswith("workbench.")}


def test_every_built_in_trigger_and_strategy_kind_is_generated():
    assert set(TRIGGERS) == built_in("trigger") and set(STRATEGIES) == built_in("strategy")


def configs(trigger: str, strategy: str) -> st.SearchStrategy[dict[str, Any]]:
    """A config of the two kinds, with a window from tight (overflows, compactions at most calls)
    to roomy, any overflow-retry and failure policy."""
    return st.fixed_dictionaries(
        {
            "trigger": _kind(trigger, TRIGGERS[trigger]),
            "strategy": _kind(strategy, STRATEGIES[strategy]),
            "context_limit": st.sampled_from([1_500, 4_000, 12_000, 200_000]),
            "max_output": st.sampled_from([50, 500]),
            "on_failure": st.sampled_from(["fatal", "fallback"]),
            "max_consecutive_failures": st.integers(1, 3),
        },
        optional={"overflow_retry": st.booleans()},
    )


def _copy(messages: list[Message]) -> list[Message]:
    """The same messages as new objects, with no token count cached on them."""
    return [dataclasses.replace(m) for m in messages]


def _same_value(a: Any, b: Any) -> bool:
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or a == b


def assert_equal(fast: ReplayResult, reference: ReplayResult) -> None:
    assert (fast.termination, fast.error, fast.model_failure) == (
        reference.termination,
        reference.error,
        reference.model_failure,
    )
    assert list(fast.calls) == list(reference.calls)
    assert len(fast.compactions) == len(reference.compactions)
    for event, expected in zip(fast.compactions, reference.compactions, strict=True):
        assert dataclasses.replace(event, duration_s=0.0) == dataclasses.replace(expected, duration_s=0.0)
    for index in range(len(fast.compactions)):
        assert fast.compaction_contexts(index) == reference.compaction_contexts(index)
    assert [fast.context_at(i) for i in range(len(fast.calls))] == [
        reference.context_at(i) for i in range(len(reference.calls))
    ]
    assert fast.final_context == reference.final_context
    assert fast.metrics.keys() == reference.metrics.keys()
    different = {
        k: (v, reference.metrics[k]) for k, v in fast.metrics.items() if not _same_value(v, reference.metrics[k])
    }
    assert not different
    assert list(fast.compaction_metrics) == list(reference.compaction_metrics)


def check(messages: list[Message], spec: dict[str, Any], picks: list[int], script: list[Any] | None) -> None:
    """Replay `messages` twice fast (the second meets what the first cached) and once by the
    reference on copies. `script`: a scripted summarizer's answers and failures for each replay;
    None: the config's summarizer (the offline one), its answers cached by a first replay on a third
    copy so that every replay compared finds them there (`cache_hits` alike)."""
    if not any(m.role == "assistant" for m in messages):
        return
    recorded = {"recorded_compactions": _recorded_compactions(messages, picks)}

    def run(engine: Any, copied: list[Message]) -> ReplayResult:
        session = wb.Session.from_messages(copied, id="generated", metadata=recorded)
        return engine(session, spec, summarizer=None if script is None else ScriptedSummarizer(list(script)))

    try:
        if script is None:
            run(replay, _copy(messages))
        reference = run(reference_replay, _copy(messages))
    except (wb.ConfigError, wb.InvariantError) as exc:  # a config no kind accepts: the fast walk says so too
        with pytest.raises(type(exc)):
            run(replay, messages)
        return
    session = wb.Session.from_messages(messages, id="generated", metadata=recorded)
    for _ in range(2):
        summarizer = None if script is None else ScriptedSummarizer(list(script))
        assert_equal(replay(session, spec, summarizer=summarizer), reference)


SCRIPTS = st.lists(
    st.sampled_from(["SUMMARY: short.", "SUMMARY: " + "a longer summary " * 40, RuntimeError("provider down")]),
    max_size=6,
)


@SETTINGS
@given(data=st.data(), messages=sessions(), picks=st.lists(st.integers(0, 50), max_size=3), script=SCRIPTS)
@pytest.mark.parametrize("trigger", sorted(TRIGGERS))
def test_the_fast_replay_equals_the_reference_for_every_trigger(trigger, data, messages, picks, script):
    spec = data.draw(configs(trigger, data.draw(st.sampled_from(sorted(STRATEGIES)))))
    check(messages, spec, picks, script)


@SETTINGS
@given(data=st.data(), messages=sessions(), picks=st.lists(st.integers(0, 50), max_size=3), script=SCRIPTS)
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_the_fast_replay_equals_the_reference_for_every_strategy(strategy, data, messages, picks, script):
    spec = data.draw(configs(data.draw(st.sampled_from(sorted(TRIGGERS))), strategy))
    check(messages, spec, picks, script)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), messages=sessions())
def test_the_offline_summarizer_gives_the_same_replay_both_ways(data, messages):
    """The project's default summarizer (`workbench/extractive`), named by the config."""
    strategy = data.draw(st.sampled_from(["summarize_progressive", "summarize_split", "adaptive_chunking", "handoff"]))
    check(messages, data.draw(configs(data.draw(st.sampled_from(sorted(TRIGGERS))), strategy)), [], None)


def test_the_reference_walk_asks_the_trigger_at_every_call_and_the_fast_one_skips():
    """The two walks differ in how, not what: the reference asks a trigger with a `firing_mask`
    before every call but the first, the fast walk only where it may fire."""

    asked = {"fast": 0, "reference": 0}
    session = wb.Session.from_messages(conversation(40))
    spec = {
        "trigger": {"kind": "token_threshold", "threshold": 600},
        "strategy": {"kind": "sliding_window", "window": 3},
    }

    def counting(walk: str):
        def should_compact(self, view):
            asked[walk] += 1
            return original(self, view)

        return should_compact

    original = TokenThreshold.should_compact
    try:
        TokenThreshold.should_compact = counting("reference")
        reference = reference_replay(session, spec)
        TokenThreshold.should_compact = counting("fast")
        fast = replay(session, spec)
    finally:
        TokenThreshold.should_compact = original
    assert_equal(fast, reference)
    assert len(fast.compactions) > 2
    assert asked["reference"] == len(reference.calls) - 1
    assert 0 < asked["fast"] < asked["reference"] // 2


@given(
    st.sampled_from([list, tuple]),
    st.integers(0, 12),
    st.integers(0, 12),
    st.one_of(st.none(), st.integers(-14, 14)),
    st.one_of(st.none(), st.integers(-14, 14)),
    st.one_of(st.none(), st.sampled_from([1, 2, 3, -1, -2])),
)
def test_the_fast_paths_history_view_slices_as_the_copied_prefix(kind, size, length, start, stop, step):
    """`History` (the views `TriggerView.history` and `.context` give on the fast path) is the prefix
    of its list: every slice, and its type, as slicing the copied prefix gives."""
    from workbench.replay_fast import History

    messages = kind(range(size))
    prefix = messages[:length]
    view = History(messages, len(prefix))
    part = slice(start, stop, step)
    assert view[part] == prefix[part] and type(view[part]) is type(prefix[part])
    assert list(view) == list(prefix) and len(view) == len(prefix)
