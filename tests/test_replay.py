"""The replay engine (DESIGN §6): walk, triggers, events, overflow, failure policy, metrics."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import ClassVar

import pytest
from builders import ScriptedSummarizer, agent_turns, assistant, conversation, conversations, system, tool, user
from hypothesis import given, settings
from hypothesis import strategies as st

import workbench as wb
from benchmarks.naive_replay import naive_replay
from workbench.compaction import CompactionEnv, Context
from workbench.replay import check_invariants, compact, replay
from workbench.tokens import messages_tokens

LIMITS = {"context_limit": 20_000, "max_output": 1_000}


def session_of(n_steps=30, result_chars=2000):
    return wb.Session.from_messages(conversation(n_steps, result_chars=result_chars))


def config(trigger, strategy, **extra):
    return {"trigger": trigger, "strategy": strategy, **LIMITS, **extra}


def test_every_assistant_message_is_one_call_and_the_first_is_never_compacted():
    session = session_of(10)
    result = replay(session, config({"kind": "pressure", "turns": 1}, {"kind": "sliding_window", "window": 2}))
    assert [c.message_index for c in result.calls] == [
        i for i, m in enumerate(session.messages) if m.role == "assistant"
    ]
    assert result.calls[0].compacted_before is False
    assert [e.call_index for e in result.compactions] == list(range(1, len(result.calls)))
    # a call counts as compacted before only when the firing changed its context (early ones fit the window)
    assert [c.compacted_before for c in result.calls[1:]] == [not e.noop for e in result.compactions]
    assert any(e.noop for e in result.compactions) and not all(e.noop for e in result.compactions)


def test_context_is_measured_before_the_reply_is_appended():
    session = session_of(3, result_chars=40)
    result = replay(
        session, config({"kind": "token_threshold", "threshold": 0}, {"kind": "sliding_window", "window": 1})
    )
    for call in result.calls:
        sent = session.messages[: call.message_index]
        assert call.context_messages == len(sent)
        assert call.context_tokens == messages_tokens(sent)
    assert result.final_context == list(session.messages)
    assert result.termination == "completed" and result.compactions == []


def test_a_firing_that_changes_nothing_is_recorded_as_a_noop_and_is_no_compaction():
    result = replay(session_of(6), config({"kind": "pressure", "turns": 3}, {"kind": "sliding_window", "window": 100}))
    assert len(result.compactions) == 4
    for event in result.compactions:
        assert (event.messages_before, event.tokens_before) == (event.messages_after, event.tokens_after)
        assert event.noop and event.no_progress
    assert result.metrics["compactions"] == 0 and result.metrics["noop_compactions"] == 4
    assert result.metrics["no_progress_compactions"] == 0 and result.metrics["compression_ratio"] is None
    assert not any(c.compacted_before for c in result.calls)
    for previous, call in zip(result.calls, result.calls[1:], strict=False):  # a prompt cache reuses it all
        assert call.cached_prefix_tokens == previous.context_tokens
    assert "0 compactions (+4 no-op)" in repr(result)
    frame = result.to_frame()
    assert frame["tokens_before_compaction"].isna().all() and frame["summary"].isna().all()


def test_stat_threshold_counter_snapshots_space_the_compactions():
    result = replay(
        session_of(40),
        config({"kind": "stat_threshold", "counters": {"iterations": 10}}, {"kind": "sliding_window", "window": 3}),
    )
    assert [e.call_index for e in result.compactions] == [10, 20, 30, 40]


def test_gauge_on_context_messages_fires_when_reached():
    result = replay(
        session_of(12),
        config({"kind": "stat_threshold", "gauges": {"context_messages": 12}}, {"kind": "sliding_window", "window": 2}),
    )
    for event in result.compactions:
        assert event.messages_before >= 12
    assert all(c.context_messages < 12 or c.compacted_before for c in result.calls)


def test_context_overflow_ends_the_replay_and_keeps_what_was_recorded():
    result = replay(
        session_of(45), config({"kind": "token_threshold", "threshold": 0}, {"kind": "sliding_window", "window": 2})
    )
    assert result.termination == "context_overflow"
    assert "exceeds context_limit" in result.error
    assert 0 < len(result.calls) < 46
    assert all(c.context_tokens + LIMITS["max_output"] <= LIMITS["context_limit"] for c in result.calls)


def test_utilization_at_ratio_one_compacts_just_before_the_window_overflows():
    result = replay(
        session_of(45),
        config({"kind": "utilization", "ratio": 1.0, "reactive": True}, {"kind": "sliding_window", "window": 4}),
    )
    assert result.termination == "completed"
    assert result.compactions
    assert result.metrics["peak_context_tokens"] + LIMITS["max_output"] <= LIMITS["context_limit"]


@wb.register_trigger("only_on_overflow_test")
@dataclass(frozen=True)
class OnlyOnOverflow:
    """Fires only when asked again because the call would overflow; its design has the retry."""

    overflow_retry: ClassVar[bool] = True

    def should_compact(self, view):
        return view.overflow and view.reactive

    def notify_compacted(self, view):
        pass


def test_overflow_gives_a_trigger_whose_design_retries_one_reactive_chance():
    result = replay(session_of(45), config({"kind": "only_on_overflow_test"}, {"kind": "sliding_window", "window": 4}))
    assert result.termination == "completed"
    assert result.compactions and all(e.reactive for e in result.compactions)
    assert all(e.tokens_before + LIMITS["max_output"] > LIMITS["context_limit"] for e in result.compactions)


def test_the_config_can_switch_the_designed_retry_off():
    result = replay(
        session_of(45),
        config({"kind": "only_on_overflow_test"}, {"kind": "sliding_window", "window": 4}, overflow_retry=False),
    )
    assert result.termination == "context_overflow" and result.compactions == []


@pytest.mark.parametrize(
    "trigger",
    [{"kind": "token_threshold", "threshold": 0}, {"kind": "stat_threshold", "counters": {"iterations": 1000}}],
)
def test_a_trigger_without_a_retry_ends_with_overflow_unless_the_config_asks(trigger):
    window = {"kind": "sliding_window", "window": 4}
    plain = replay(session_of(45), config(trigger, window))
    assert plain.termination == "context_overflow" and plain.compactions == []
    retried = replay(session_of(45), config(trigger, window, overflow_retry=True))
    assert retried.termination == "completed"
    assert retried.compactions and all(e.reactive for e in retried.compactions)
    assert len(retried.calls) == session_of(45).calls


def test_recorded_length_finish_reason_makes_the_next_check_reactive():
    messages = [
        system(),
        user("go"),
        assistant("partial", metadata={"finish_reason": "length"}),
        user("continue"),
        assistant("rest"),
    ]
    seen = []

    @wb.register_trigger("record_reactive_test")
    @dataclass(frozen=True)
    class Recorder:
        def should_compact(self, view):
            seen.append((view.call_index, view.reactive, view.last_finish_reason))
            return False

        def notify_compacted(self, view):
            pass

    result = replay(messages, config({"kind": "record_reactive_test"}, {"kind": "sliding_window", "window": 1}))
    assert seen == [(1, True, "length")]
    assert result.calls[0].finish_reason == "length"


SPLIT = {"kind": "summarize_split", "preserve": 0.4}


def test_fatal_failure_stops_with_compaction_failed_and_keeps_earlier_calls():
    failing = ScriptedSummarizer(responses=[RuntimeError("provider down")])
    result = replay(session_of(20), config({"kind": "pressure", "turns": 5}, SPLIT), summarizer=failing)
    assert result.termination == "compaction_failed"
    assert "provider down" in result.error
    assert len(result.calls) == 5
    assert result.compactions[-1].failed and result.metrics["compactions"] == 0


def test_fallback_policy_uses_the_strategy_fallback_and_marks_the_event():
    failing = ScriptedSummarizer(responses=[RuntimeError("timeout")])
    result = replay(
        session_of(20), config({"kind": "pressure", "turns": 5}, SPLIT, on_failure="fallback"), summarizer=failing
    )
    assert result.termination == "completed"
    first = result.compactions[0]
    assert first.fell_back and "timeout" in first.error
    assert first.tokens_after < first.tokens_before
    assert not result.compactions[1].fell_back
    assert result.metrics["fallbacks"] == 1


def test_circuit_breaker_stops_calling_the_summarizer():
    failing = ScriptedSummarizer(responses=[RuntimeError(f"fail {i}") for i in range(100)])
    result = replay(
        session_of(30),
        config(
            {"kind": "stat_threshold", "counters": {"iterations": 3}},
            SPLIT,
            on_failure="fallback",
            max_consecutive_failures=2,
        ),
        summarizer=failing,
    )
    assert len(failing.prompts) == 2
    assert [e.breaker_open for e in result.compactions[:3]] == [False, True, True]
    assert all(e.fell_back for e in result.compactions)
    assert result.termination == "completed"


def test_summaries_and_usage_are_recorded_on_events():
    summarizer = ScriptedSummarizer(default="SUMMARY of work on src/app.py")
    result = replay(session_of(20), config({"kind": "pressure", "turns": 8}, SPLIT), summarizer=summarizer)
    event = result.compactions[0]
    assert "SUMMARY of work on src/app.py" in event.summary
    assert event.summarizer_usage["calls"] == 1 and event.summarizer_usage["input_tokens"] > 0
    assert result.metrics["summarizer_calls"] == len(summarizer.prompts)
    assert result.metrics["summarizer_input_tokens"] == sum(
        e.summarizer_usage["input_tokens"] for e in result.compactions
    )


def test_cached_prefix_is_the_previous_context_until_a_compaction_breaks_it():
    session = session_of(12)
    result = replay(
        session,
        config({"kind": "stat_threshold", "counters": {"iterations": 6}}, {"kind": "sliding_window", "window": 2}),
    )
    calls = result.calls
    assert calls[0].cached_prefix_tokens == 0
    for previous, call in zip(calls, calls[1:], strict=False):
        if not call.compacted_before:
            assert call.cached_prefix_tokens == previous.context_tokens
    compacted = calls[6]
    assert compacted.compacted_before
    shared = []
    for old, new in zip(result.context_at(5), result.context_at(6), strict=False):
        if old is not new:
            break
        shared.append(new)
    assert 0 < compacted.cached_prefix_tokens == messages_tokens(shared) < compacted.context_tokens
    assert result.metrics["cached_input_tokens"] == sum(c.cached_prefix_tokens for c in calls)


def test_metrics_follow_their_definitions():
    result = replay(session_of(20), config({"kind": "pressure", "turns": 10}, {"kind": "sliding_window", "window": 3}))
    m = result.metrics
    assert m["calls"] == len(result.calls) == 21
    assert m["billed_input_tokens"] == sum(c.context_tokens for c in result.calls)
    assert m["peak_context_tokens"] == max(c.context_tokens for c in result.calls)
    ratios = [e.tokens_before / e.tokens_after for e in result.compactions]
    assert m["compression_ratio"] == pytest.approx(sum(ratios) / len(ratios))
    assert m["cache_aware_input_tokens"] == pytest.approx(
        m["billed_input_tokens"] - m["cached_input_tokens"] * 0.9, abs=0.1
    )
    frame = result.to_frame()
    assert len(frame) == 21 and frame["compacted_before"].sum() == len(result.compactions)


def test_a_replay_without_measuring_computes_the_same_metrics_later():
    spec = config({"kind": "pressure", "turns": 10}, {"kind": "sliding_window", "window": 3})
    measured = replay(session_of(20), spec)
    bare = replay(session_of(20), spec, measure=False)
    assert bare.metrics == {} and bare.compaction_metrics == []
    assert bare.calls == measured.calls
    assert [e.tokens_after for e in bare.compactions] == [e.tokens_after for e in measured.compactions]
    assert bare.measure() is bare
    assert bare.metrics == measured.metrics and "fact_retention" in bare.metrics
    assert bare.compaction_metrics == measured.compaction_metrics
    assert len(bare.compactions_frame()) == len(measured.compactions)


def test_a_strategy_that_breaks_an_invariant_fails_loudly():
    @wb.register_strategy("drop_system_test")
    @dataclass(frozen=True)
    class DropSystem:
        def compact(self, context, env):
            return list(context.body)

    with pytest.raises(wb.InvariantError, match="system"):
        replay(session_of(5), config({"kind": "pressure", "turns": 2}, {"kind": "drop_system_test"}))


def test_check_invariants_catches_orphans_and_lost_pins():
    pinned = user("keep me", importance=10)
    before = [system(), pinned, *agent_turns(2)]
    with pytest.raises(wb.InvariantError, match="pinned"):
        check_invariants(before, [before[0], *before[2:]])
    with pytest.raises(wb.InvariantError, match="tool pairing"):
        check_invariants(before, [before[0], pinned, before[3]])


def test_unknown_kind_in_config_is_a_clear_error():
    with pytest.raises(wb.ConfigError, match="unknown strategy kind 'slidng_window'; valid kinds: .*sliding_window"):
        replay(session_of(2), config({"kind": "pressure"}, {"kind": "slidng_window", "window": 2}))
    with pytest.raises(wb.ConfigError, match="unknown parameter 'windw'"):
        replay(session_of(2), config({"kind": "pressure"}, {"kind": "sliding_window", "windw": 2}))


def test_compact_runs_one_strategy_once_on_openai_dicts():
    dicts = [m.to_openai() for m in conversation(8)]
    out = compact(dicts, {"kind": "hard_clear", "keep_recent": 5})
    assert out[0].role == "system" and len(out) <= 6


def test_compact_with_the_offline_summarizer_by_default():
    out = compact(conversation(8), {"kind": "summarize_split", "preserve": 0.3})
    assert out[1].text.startswith("[COMPACT SUMMARY]")
    assert "src/" in out[1].text


def test_compact_takes_on_failure_as_a_config_does():
    """A summarizer failure raises by default; with on_failure = "fallback" the strategy's fallback
    (summarize_split's own truncation here) is returned instead."""
    messages = conversation(8)
    failing = ScriptedSummarizer(responses=[RuntimeError("provider down")])
    with pytest.raises(wb.SummarizerError, match="provider down"):
        compact(messages, {"kind": "summarize_split", "preserve": 0.3}, summarizer=failing)
    failing = ScriptedSummarizer(responses=[RuntimeError("provider down")])
    out = compact(messages, {"kind": "summarize_split", "preserve": 0.3}, summarizer=failing, on_failure="fallback")
    assert out[1].text.startswith("[COMPACT SUMMARY]\n[Context truncated:") and len(failing.prompts) == 1
    with pytest.raises(wb.ConfigError, match="on_failure must be one of 'fatal', 'fallback', not 'retry'"):
        compact(messages, {"kind": "trim"}, on_failure="retry")


@pytest.mark.parametrize(
    "trigger, strategy",
    [
        ({"kind": "pressure", "turns": 4}, {"kind": "sliding_window", "window": 3}),
        ({"kind": "utilization", "ratio": 0.5}, {"kind": "summarize_split", "preserve": 0.4}),
        ({"kind": "stat_threshold", "counters": {"iterations": 5}}, {"kind": "observation_masking", "keep_recent": 2}),
        ({"kind": "guard", "warn_threshold": 0.5, "hard_limit": 18_000}, {"kind": "guard_select"}),
    ],
)
def test_incremental_engine_matches_the_naive_recount(trigger, strategy):
    session = session_of(25)
    fast = replay(session, config(trigger, strategy), summarizer=ScriptedSummarizer())
    slow = naive_replay(session, config(trigger, strategy), summarizer=ScriptedSummarizer())
    assert fast.calls == slow.calls
    assert [(e.call_index, e.tokens_before, e.tokens_after) for e in fast.compactions] == [
        (e.call_index, e.tokens_before, e.tokens_after) for e in slow.compactions
    ]
    assert fast.metrics == slow.metrics


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 8), st.sampled_from([200, 1500, 5000]))
def test_replay_invariants_on_random_sizes(n_steps, window, size):
    session = session_of(n_steps, result_chars=size)
    result = replay(
        session,
        {
            "trigger": {"kind": "utilization", "ratio": 0.6},
            "strategy": {"kind": "sliding_window", "window": window},
            "context_limit": 30_000,
            "max_output": 2_000,
        },
    )
    assert result.termination in ("completed", "context_overflow")
    assert len(result.calls) <= session.calls
    assert all(c.cached_prefix_tokens <= c.context_tokens for c in result.calls)
    if result.termination == "completed":
        assert len(result.calls) == session.calls


# -- through the LLM gateway, over HTTP against the local OpenAI-compatible server ----------------


def http_config(server, **extra):
    return config(
        {"kind": "pressure", "turns": 6},
        SPLIT,
        summarizer="openai/test-model",
        summarizer_options={"api_base": server.api_base, "api_key": "sk-test-local"},
        **extra,
    )


@pytest.fixture
def gateway(tmp_path):
    from workbench.llm import Gateway
    from workbench.store import DuckDBCache

    with Gateway(DuckDBCache(str(tmp_path / "cache.duckdb")), backoff_base=0.01, timeout=2) as gw:
        yield gw


def test_a_replay_run_twice_makes_its_model_calls_once(gateway):
    from workbench.testing import FakeOpenAI

    session = session_of(20)
    with FakeOpenAI(responder=lambda request: "summary: edited src/app.py, tests pass") as server:
        first = replay(session, http_config(server), gateway=gateway)
        calls_made = server.request_count
        second = replay(session, http_config(server), gateway=gateway)
        assert server.request_count == calls_made > 0
    assert first.metrics == second.metrics | {"termination": first.termination}
    assert [e.summary for e in first.compactions] == [e.summary for e in second.compactions]
    assert all(e.summarizer_usage["cache_hits"] == e.summarizer_usage["calls"] for e in second.compactions)


def test_a_persistent_server_error_is_fatal_or_falls_back(gateway):
    from workbench.testing import FakeOpenAI, Fault

    session = session_of(20)
    with FakeOpenAI(responder=lambda request: Fault.error(500)) as server:
        fatal = replay(session, http_config(server), gateway=gateway)
        fallback = replay(session, http_config(server, on_failure="fallback"), gateway=gateway)
    assert fatal.termination == "compaction_failed" and len(fatal.calls) == 6
    assert "500" in fatal.error or "ProviderError" in fatal.error or "internal" in fatal.error
    assert fallback.termination == "completed"
    assert all(e.fell_back for e in fallback.compactions)
    assert fallback.compactions[-1].breaker_open


def test_a_rate_limit_is_retried_and_the_replay_completes(gateway):
    from workbench.testing import FakeOpenAI, Fault

    with FakeOpenAI() as server:
        server.script(Fault.rate_limit(0.2), "summary after a wait")
        result = replay(session_of(8), http_config(server), gateway=gateway)
    assert result.termination == "completed"
    assert "summary after a wait" in result.compactions[0].summary


# -- what a result tells about each call ---------------------------------------------------------


def test_context_at_is_what_each_call_sent():
    session = session_of(12)
    result = replay(
        session,
        config({"kind": "stat_threshold", "counters": {"iterations": 4}}, {"kind": "sliding_window", "window": 2}),
    )
    for call in result.calls:
        sent = result.context_at(call.index)
        assert len(sent) == call.context_messages
        assert messages_tokens(sent) == call.context_tokens
        assert sent[-1] is not session.messages[call.message_index]
    assert result.context_at(-1) == result.context_at(len(result.calls) - 1)
    with pytest.raises(IndexError, match="out of range: the replay made 13 calls"):
        result.context_at(13)


def test_repr_is_short_and_says_what_ran():
    result = replay(session_of(5), config({"kind": "pressure", "turns": 2}, {"kind": "sliding_window", "window": 2}))
    text = repr(result)
    assert text.startswith("<ReplayResult ") and "6 calls" in text and "completed" in text and len(text) < 200
    assert "3 compactions (+1 no-op)," in text  # the first firing finds the context within the window
    assert result.metrics["compactions"] == 3 and result.metrics["noop_compactions"] == 1


def test_a_notebook_shows_the_main_metrics_why_a_replay_stopped_and_what_summarized():
    summarized = replay(session_of(8), config({"kind": "pressure", "turns": 2}, {"kind": "summarize_split"}))
    html = summarized._repr_html_()
    billed = summarized.metrics["billed_input_tokens"]
    assert f"<th style='text-align:left'>billed_input_tokens</th><td style='text-align:right'>{billed:,}</td>" in html
    assert "summaries by <code>workbench/extractive</code>: the offline extractive baseline (not a model)" in html
    assert "stopped:" not in html
    overflowing = replay(
        session_of(8),
        {
            "context_limit": 1_500,
            "max_output": 500,
            "trigger": {"kind": "token_threshold", "threshold": 0},
            "strategy": {"kind": "sliding_window", "window": 1},
        },
    )
    assert overflowing.termination == "context_overflow"
    html = overflowing._repr_html_()
    assert "stopped: call " in html and "exceeds context_limit 1500" in html
    assert "summaries by" not in html  # no compaction, nothing summarized
    assert "&lt;ReplayResult" in html and "<ReplayResult" not in html  # escaped


def test_the_baseline_note_goes_with_results_the_offline_summarizer_summarized():
    spec = config({"kind": "pressure", "turns": 2}, {"kind": "summarize_split"})
    offline = replay(session_of(8), spec)
    assert offline.baseline_note() == (
        "Summaries by workbench/extractive: the offline extractive baseline (not a "
        "model). Read its quality figures as a floor, not as a model's."
    )
    model = replay(session_of(8), {**spec, "summarizer": "openai/gpt-4o-mini"}, summarizer=ScriptedSummarizer())
    assert model.compactions and model.baseline_note() is None
    window = replay(session_of(8), config({"kind": "pressure", "turns": 2}, {"kind": "sliding_window", "window": 2}))
    assert window.compactions and window.baseline_note() is None  # nothing summarized
    assert "summaries by" not in window._repr_html_()


def test_stat_threshold_token_counters_include_the_summarizer_usage():
    """Seed 000, summarization case 11: the summarizer's call increments the token counters."""
    seen = []

    @wb.register_trigger("input_counter_test")
    @dataclass(frozen=True)
    class Recorder:
        def should_compact(self, view):
            seen.append((view.call_index, view.counters["input_tokens"], view.counters["output_tokens"]))
            return view.call_index == 5

        def notify_compacted(self, view):
            pass

    summarizer = ScriptedSummarizer()
    result = replay(session_of(10), config({"kind": "input_counter_test"}, SPLIT), summarizer=summarizer)
    usage = result.compactions[0].summarizer_usage
    assert usage["input_tokens"] > 0
    calls_input = sum(c.context_tokens for c in result.calls[:6])
    calls_output = sum(c.completion_tokens for c in result.calls[:6])
    after = dict((i, (inp, out)) for i, inp, out in seen)[6]
    assert after == (calls_input + usage["input_tokens"], calls_output + usage["output_tokens"])


NON_LLM_KINDS = [
    ({"kind": "utilization", "ratio": 0.6}, {"kind": "sliding_window", "window": 5}),
    ({"kind": "utilization", "ratio": 0.6}, {"kind": "hard_clear", "keep_recent": 6}),
    ({"kind": "pressure", "turns": 5}, {"kind": "trim", "keep_recent_turns": 3}),
    (
        {"kind": "guard", "warn_threshold": 0.5, "hard_limit": 18_000},
        {"kind": "tool_result_truncation", "max_chars": 300},
    ),
    ({"kind": "pressure", "turns": 3}, {"kind": "observation_masking", "keep_recent": 4}),
    ({"kind": "stat_threshold", "counters": {"iterations": 4}}, {"kind": "clear_tool_uses", "keep": 3}),
]


@pytest.mark.parametrize("trigger, strategy", NON_LLM_KINDS)
def test_non_llm_kinds_match_the_naive_recount_with_tool_schemas(trigger, strategy):
    tools = ({"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},)
    session = wb.Session.from_messages(conversation(25, result_chars=2000), tools=tools)
    fast, slow = replay(session, config(trigger, strategy)), naive_replay(session, config(trigger, strategy))
    assert fast.calls == slow.calls and fast.metrics == slow.metrics
    assert [fast.context_at(i) for i in range(len(fast.calls))] == [slow.context_at(i) for i in range(len(slow.calls))]


# -- the engine's skip-ahead (`firing_mask`) against the naive per-call walk ---------------------


def multi_model_session(n_steps: int = 30) -> wb.Session:
    """A conversation whose calls alternate between two models, with some length stops."""
    messages = []
    for index, message in enumerate(conversation(n_steps, result_chars=1500)):
        if message.role == "assistant":
            metadata = {"model": "model-a" if index % 3 else "model-b"}
            if index % 7 == 0:
                metadata["finish_reason"] = "length"
            message = message.replace(metadata=metadata)
        messages.append(message)
    return wb.Session.from_messages(messages)


@wb.register_trigger("every_fourth_call_test")
@dataclass(frozen=True)
class EveryFourthCall:
    """A user trigger without `firing_mask`: the engine must ask it at every call."""

    def should_compact(self, view):
        return view.call_index % 4 == 0

    def notify_compacted(self, view):
        pass


@pytest.mark.parametrize(
    "trigger",
    [
        {"kind": "utilization", "ratio": 0.5},
        {"kind": "utilization", "ratio": 0.35, "reactive": False},
        {"kind": "guard", "warn_threshold": 0.6, "hard_limit": 15_000, "min_available": 2_000},
        {"kind": "token_threshold", "threshold": 9_000},
        {"kind": "stat_threshold", "counters": {"input_tokens": 40_000, "iterations": 9}},
        {"kind": "stat_threshold", "counters": {"input_tokens_for:model-a": 30_000}},
        {"kind": "stat_threshold", "gauges": {"context_steps": 12, "tokens_last_call": 12_000}},
        {"kind": "pressure", "turns": 6},
        {"kind": "pressure", "turns": 0, "tokens": 6_000},
        {
            "kind": "any",
            "triggers": [
                {"kind": "stat_threshold", "counters": {"output_tokens": 150}},
                {"kind": "utilization", "ratio": 0.7},
            ],
        },
        {"kind": "all", "triggers": [{"kind": "guard", "hard_limit": 14_000}, {"kind": "pressure", "turns": 3}]},
        {"kind": "any", "triggers": [{"kind": "every_fourth_call_test"}, {"kind": "utilization"}]},
        {"kind": "every_fourth_call_test"},
    ],
    ids=lambda spec: str(spec)[:70],
)
@pytest.mark.parametrize(
    "strategy",
    [{"kind": "sliding_window", "window": 6}, {"kind": "observation_masking", "keep_recent": 3}],
    ids=lambda spec: spec["kind"],
)
def test_skipping_ahead_gives_the_naive_walk_s_result(trigger, strategy):
    session = multi_model_session()
    fast, slow = replay(session, config(trigger, strategy)), naive_replay(session, config(trigger, strategy))
    assert (fast.termination, fast.error) == (slow.termination, slow.error)
    assert fast.calls == slow.calls and list(fast.calls) == list(slow.calls)
    assert [(e.call_index, e.tokens_before, e.tokens_after, e.messages_after) for e in fast.compactions] == [
        (e.call_index, e.tokens_before, e.tokens_after, e.messages_after) for e in slow.compactions
    ]
    assert fast.metrics == slow.metrics
    assert [fast.context_at(i) for i in range(len(fast.calls))] == [slow.context_at(i) for i in range(len(slow.calls))]
    assert fast.final_context == slow.final_context


def test_skipping_ahead_through_an_overflow_ends_where_the_walk_does():
    session = session_of(30, result_chars=3000)
    spec = config({"kind": "token_threshold", "threshold": 0}, {"kind": "sliding_window", "window": 4})
    fast, slow = replay(session, spec), naive_replay(session, spec)
    assert fast.termination == slow.termination == "context_overflow"
    assert fast.error == slow.error and fast.calls == slow.calls


def test_call_records_are_columns_that_read_as_a_list_of_records():
    session = session_of(12)
    result = replay(session, config({"kind": "pressure", "turns": 5}, {"kind": "sliding_window", "window": 3}))
    calls = result.calls
    records = list(calls)
    assert all(isinstance(c, wb.CallRecord) for c in records)
    assert calls == records and records == list(calls) and calls != records[:-1]
    assert calls[-1] == records[-1] and calls[3] == records[3] and calls[2:4] == records[2:4]
    with pytest.raises(IndexError):
        calls[len(records)]
    assert [c.index for c in calls] == list(range(len(records)))
    assert calls.column("context_tokens") == [c.context_tokens for c in records]
    assert pickle.loads(pickle.dumps(calls)) == calls
    frame = result.to_frame()
    assert frame["context_tokens"].tolist() == [c.context_tokens for c in records]
    assert frame["compacted_before"].tolist() == [c.compacted_before for c in records]
    assert result.context_at(-1) == result.context_at(len(records) - 1)
    with pytest.raises(IndexError):
        result.context_at(len(records))


def test_context_at_follows_each_compaction_s_new_context():
    session = session_of(20)
    result = replay(session, config({"kind": "pressure", "turns": 6}, {"kind": "sliding_window", "window": 3}))
    for index, event in enumerate(result.compactions):
        assert (
            result.context_at(event.call_index)[: len(result.compaction_contexts(index)[1])]
            == result.compaction_contexts(index)[1]
        )
    assert [len(result.context_at(i)) for i in range(len(result.calls))] == [c.context_messages for c in result.calls]


def test_a_detached_result_keeps_what_the_writer_stores_and_leaves_the_bulk():
    messages = [
        m
        if m.role != "assistant"
        else wb.Message(
            role=m.role,
            content=m.content,
            tool_calls=m.tool_calls,
            metadata={"usage": {"input_tokens": 100 + i, "cache_read_input_tokens": 7}},
        )
        for i, m in enumerate(conversation(30, result_chars=2000))
    ]
    result = replay(
        wb.Session.from_messages(messages),
        config({"kind": "utilization", "ratio": 0.5}, {"kind": "observation_masking", "keep_recent": 3}),
    )
    detached = result.detached()
    assert detached.session is None and detached.final_context == [] and result.session is not None
    assert detached.recorded_columns() == result.recorded_columns()
    assert all(billed is not None and billed > 100 for billed in detached.recorded_columns()[0])
    assert list(detached.calls) == list(result.calls) and detached.compactions == result.compactions
    assert detached.metrics == result.metrics
    assert len(pickle.dumps(detached)) < len(pickle.dumps(result)) / 4


def test_replays_in_many_threads_of_a_fresh_process_agree_with_one_thread():
    """Concurrent first use and concurrent replays (an experiment's cells): the kinds load once for
    every thread, numpy is never handed out half-imported, and the strategies' step memo is not
    shared between threads. A tiny switch interval makes the interleavings that broke these likely."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    script = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
from builders import conversation
import workbench as wb
sys.setswitchinterval(1e-6)
sessions = [wb.Session.from_messages(conversation(40, result_chars=800 + i)) for i in range(12)]
config = {"trigger": {"kind": "utilization", "ratio": 0.3}, "context_limit": 20000, "max_output": 1000,
          "strategy": {"kind": "pipeline", "steps": [{"kind": "observation_masking", "keep_recent": 3},
                                                     {"kind": "sliding_window", "window": 20}]}}
def run(session):
    try:
        return [len(wb.replay(session, config, measure=False).compactions) for _ in range(3)]
    except Exception as exc:
        return repr(exc)
with ThreadPoolExecutor(12) as pool:
    threaded = list(pool.map(run, sessions * 3))
sys.setswitchinterval(0.005)
print(json.dumps({"threaded": threaded, "alone": [run(s) for s in sessions * 3]}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=repo,
        env={**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{repo / 'tests'}"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["threaded"] == out["alone"]
    assert all(isinstance(counts, list) and counts[0] > 0 for counts in out["alone"])


# -- what a replay remembers between compactions and between replays ----------------------------

TOOL_KINDS = [
    {"kind": "tool_result_truncation", "max_chars": 100},
    {"kind": "observation_masking", "keep_recent": 2},
    {"kind": "clear_tool_uses", "keep": 1, "clear_inputs": True},
    {"kind": "clear_tool_uses", "keep": 2, "exclude_tools": ["grep"]},
    {
        "kind": "pipeline",
        "steps": [{"kind": "tool_result_truncation", "max_chars": 50}, {"kind": "sliding_window", "window": 4}],
    },
    {
        "kind": "pipeline",
        "steps": [{"kind": "observation_masking", "keep_recent": 1}, {"kind": "hard_clear", "keep_recent": 6}],
    },
    {"kind": "pipeline", "steps": [{"kind": "clear_tool_uses", "keep": 2}, {"kind": "trim", "keep_recent_turns": 2}]},
]


@settings(max_examples=60, deadline=None)
@given(conversations(max_steps=30), st.sampled_from(TOOL_KINDS), st.sampled_from(TOOL_KINDS), st.integers(1, 4))
def test_remembered_steps_and_rewrites_equal_compacting_afresh(messages, strategy, other, turns):
    """Every compaction of a replay that reuses what earlier compactions and replays settled, grouped
    and rewrote gives what the strategy makes of fresh copies of the same messages (nothing remembered)."""
    session = wb.Session.from_messages(messages)

    def spec(kind):
        return {
            "tokenizer": "heuristic",
            "trigger": {"kind": "pressure", "turns": turns},
            "strategy": kind,
            "context_limit": 1_000_000,
            "max_output": 100,
        }

    runs = [(kind, replay(session, spec(kind), measure=False)) for kind in (strategy, other, strategy)]
    assert runs[2][1].calls == runs[0][1].calls
    for kind, result in runs:
        built = wb.build_strategy(kind)
        for index in range(len(result.compactions)):
            before, after = result.compaction_contexts(index)
            assert after == built.compact(Context(tuple(m.replace() for m in before)), CompactionEnv())
            check_invariants(before, after)


STEP_LIST_CHANGES = {
    "__setitem__": lambda out, at: out.__setitem__(at, out[at]),
    "__delitem__": lambda out, at: out.__delitem__(at),
    "__iadd__": lambda out, at: out.__iadd__([]),
    "__imul__": lambda out, at: out.__imul__(1),
    "append": lambda out, at: out.append(out[at]),
    "extend": lambda out, at: out.extend([]),
    "insert": lambda out, at: out.insert(at, out[at]),
    "pop": lambda out, at: out.pop(at),
    "remove": lambda out, at: out.remove(out[at]),
    "clear": lambda out, at: out.clear(),
    "sort": lambda out, at: out.sort(key=lambda m: 0),
    "reverse": lambda out, at: out.reverse(),
}


@pytest.mark.parametrize("change", sorted(STEP_LIST_CHANGES))
def test_a_strategy_output_changed_after_it_was_built_is_grouped_afresh(change):
    """A strategy's output carries its steps (`StepList`) for the invariant check and the next
    strategy; any change to the list forgets them, so an edit that orphans a tool result is caught
    and the next strategy groups what it is given."""
    from workbench.errors import InvariantError
    from workbench.strategies.common import StepList, context_of, known_steps

    before = conversation(4)
    out = wb.build_strategy({"kind": "sliding_window", "window": 10}).compact(Context(tuple(before)), CompactionEnv())
    assert isinstance(out, StepList) and known_steps(out, 1) is not None
    assert context_of(out).__dict__["steps"] == Context(tuple(out)).steps
    call_at = next(i for i, m in enumerate(out) if m.tool_calls)
    STEP_LIST_CHANGES[change](out, call_at)
    assert known_steps(out, 1) is None and "steps" not in context_of(out).__dict__
    if change in ("__delitem__", "pop", "remove"):  # the call is gone: its result is an orphan
        with pytest.raises(InvariantError, match="tool pairing"):
            check_invariants(before, out)


@st.composite
def irregular_conversations(draw):
    """`conversations` with, now and then, a tool result that answers no call (a stray step of its own,
    inserted between two steps) or a system message after the leading ones, anywhere: also between a
    call and its result, which then is a stray step the kinds keep with its call."""
    messages = draw(conversations(max_steps=30))
    leading = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            at = draw(
                st.sampled_from(
                    [i for i in range(leading, len(messages) + 1) if i == len(messages) or messages[i].role != "tool"]
                )
            )
            messages.insert(at, tool("nobody", "a result nobody asked for " + "s" * 300))
        else:
            messages.insert(draw(st.integers(leading, len(messages))), system("mid-run note"))
    return messages


@settings(max_examples=80, deadline=None)
@given(
    irregular_conversations(),
    st.sampled_from(
        TOOL_KINDS
        + [
            {"kind": "sliding_window", "window": 3},
            {"kind": "hard_clear", "keep_recent": 4},
            {"kind": "trim", "keep_recent_turns": 1},
            {"kind": "summarize_split", "preserve": 0.3},
            {"kind": "adaptive_chunking", "keep_recent": 2},
        ]
    ),
    st.integers(1, 4),
)
def test_the_steps_a_replay_carries_are_the_steps_of_what_it_carries_them_for(messages, strategy, turns):
    """What a strategy's output says of its steps (`StepList`) and what the replay's next context is
    given (`continue_steps`) equal grouping the messages afresh: the steps, their lengths, the pinned
    ones, no stray step when it says none; and the steps it says are settled under a rewrite are."""
    import sys
    from unittest import mock

    from workbench.session import group_steps
    from workbench.strategies.common import BodySteps, body_steps

    engine = sys.modules["workbench.replay_rules"]  # where the walk reads them
    checked = {"outputs": 0, "contexts": 0, "tokens": 0}

    def holds(known: BodySteps, body) -> None:
        fresh = BodySteps.of(group_steps(body))
        assert (known.steps, known.lengths, known.pinned) == (fresh.steps, fresh.lengths, fresh.pinned)
        assert known.strays or not fresh.strays
        assert not known.paired or all(step.paired for step in known.steps)
        if known.tokens is not None:
            assert known.counted == "heuristic" and len(known.tokens) == len(known.steps)
            assert all(
                total is None or total == messages_tokens(step.messages, "heuristic")
                for step, total in zip(known.steps, known.tokens, strict=True)
            )
            checked["tokens"] += 1
        for key, count in known.settled.items():
            assert all(key in step.settled for step in known.steps[:count])

    def known_steps(messages, leading):
        known = real_known(messages, leading)
        if known is not None:
            holds(known, list(messages)[leading:])
            checked["outputs"] += 1
        return known

    def continue_steps(context, prefix, length):
        real_continue(context, prefix, length)
        if "body_steps" in context.__dict__:
            holds(body_steps(context), context.body)
            checked["contexts"] += 1

    real_known, real_continue = engine.known_steps, engine.continue_steps
    session = wb.Session.from_messages(messages)
    spec = {
        "tokenizer": "heuristic",
        "trigger": {"kind": "pressure", "turns": turns},
        "strategy": strategy,
        "context_limit": 1_000_000,
        "max_output": 100,
    }
    with (
        mock.patch.object(engine, "known_steps", known_steps),
        mock.patch.object(engine, "continue_steps", continue_steps),
    ):
        for _ in range(2):  # the second replay meets the steps the first settled
            replay(session, spec, measure=False)
    assert checked["contexts"] <= checked["outputs"] and checked["tokens"] <= checked["outputs"] + checked["contexts"]


def test_continuing_steps_regroups_a_last_step_whose_results_go_on():
    """A context whose body goes on with a tool result answering the known body's last step: that
    step is grouped again with it, and is no longer known to be settled (it is a new step)."""
    from workbench.session import group_steps
    from workbench.strategies.common import BodySteps, continue_steps, settle

    head = [system("s"), user("go"), assistant("", calls=(("a", "grep"), ("b", "bash"))), tool("a", "one")]
    steps = group_steps(head[1:])
    for step in steps:
        settle(step, "k")
    prefix = BodySteps(steps, [1, 2], False, [], {"k": 2})
    context = Context((*head, tool("b", "two"), user("next")))
    continue_steps(context, prefix, 3)
    assert context.steps == group_steps(context.body) and len(context.steps) == 3
    assert context.__dict__["body_steps"].lengths == [1, 3, 1]
    assert context.__dict__["body_steps"].settled == {"k": 1}


# ------------------------------------------------------------------------------------------------
# a user's kind that breaks the contract: an error naming the kind, not a bare Python error


class _ReturnsNone:
    def compact(self, context, env):
        return None


class _ReturnsDicts:
    def compact(self, context, env):
        return [
            m.to_openai() if hasattr(m, "to_openai") else {"role": m.role, "content": m.text} for m in context.messages
        ]


class _ReturnsText:
    def compact(self, context, env):
        return "the context, summarized"


class _FallsBackToNone:
    def compact(self, context, env):
        raise wb.SummarizerError("down")

    def fallback(self, context, env):
        return None


BAD_RETURNS = [
    # (class, on_failure, fragments the message must hold)
    (_ReturnsNone, "fatal", ["returned NoneType", "compact must return a list of Message"]),
    (
        _ReturnsDicts,
        "fatal",
        ["returned a list holding a dict at 0", "compact must return a list of Message", "Message.from_openai"],
    ),
    (_ReturnsText, "fatal", ["returned str", "compact must return a list of Message"]),
    (_FallsBackToNone, "fallback", ["returned NoneType", "fallback must return a list of Message"]),
]


#: where the user's kind sits: alone, as a pipeline's second step, as guard_select's choice (a small
#: context has no severity and no oversized tool result: the `gentle` slot)
WRAPPERS = {
    "alone": lambda name: {"kind": name},
    "in_pipeline": lambda name: {"kind": "pipeline", "steps": [{"kind": "tool_result_truncation"}, {"kind": name}]},
    "in_guard_select": lambda name: {"kind": "guard_select", "gentle": {"kind": name}},
}


@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize(("cls", "on_failure", "fragments"), BAD_RETURNS, ids=[c.__name__ for c, _, _ in BAD_RETURNS])
def test_a_strategy_returning_no_list_of_messages_is_an_error_naming_it(cls, on_failure, fragments, wrapper):
    name = f"{cls.__name__.strip('_').lower()}_{wrapper}_replay_test"  # a name per wrapper: parsed configs are kept
    wb.register_strategy(name)(cls)
    strategy = WRAPPERS[wrapper](name)
    try:
        with pytest.raises(wb.ConfigError) as replayed:
            replay(session_of(5), config({"kind": "pressure", "turns": 2}, strategy, on_failure=on_failure))
        with pytest.raises(wb.ConfigError) as compacted:
            compact(conversation(3), strategy, on_failure=on_failure)
    finally:
        wb.registry.unregister("strategy", name)
    for message in (str(replayed.value), str(compacted.value)):
        for fragment in [f"strategy {name!r}", *fragments]:
            assert fragment in message, f"{fragment!r} not in {message!r}"


def test_a_strategy_may_return_a_generator_of_messages():
    @dataclass(frozen=True)
    class Generates:
        def compact(self, context, env):
            yield from context.system
            yield from context.steps[-1].messages

    wb.register_strategy("generates_replay_test")(Generates)
    try:
        result = replay(session_of(6), config({"kind": "pressure", "turns": 2}, {"kind": "generates_replay_test"}))
    finally:
        wb.registry.unregister("strategy", "generates_replay_test")
    assert result.termination == "completed" and result.compactions
    assert all(e.messages_after < e.messages_before for e in result.compactions)


@pytest.mark.parametrize("combinator", [None, "any", "all"])
@pytest.mark.parametrize("answer", ["no", 1, None, [False]])
def test_a_trigger_answering_other_than_true_or_false_is_an_error_naming_it(answer, combinator):
    @dataclass(frozen=True)
    class Answers:
        def should_compact(self, view):
            return answer

        def notify_compacted(self, view):
            pass

    name = f"answers_{type(answer).__name__.lower()}_{combinator}_replay_test"  # parsed configs are kept by name
    wb.register_trigger(name)(Answers)
    trigger = {"kind": name} if combinator is None else {"kind": combinator, "triggers": [{"kind": name}]}
    try:
        with pytest.raises(wb.ConfigError) as info:
            replay(session_of(5), config(trigger, {"kind": "sliding_window", "window": 2}))
    finally:
        wb.registry.unregister("trigger", name)
    message = str(info.value)
    for fragment in [f"trigger {name!r}", f"should_compact returned {answer!r}", "True or False"]:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_a_trigger_may_answer_with_a_numpy_bool():
    import numpy as np

    @dataclass(frozen=True)
    class NumpyAnswer:
        def should_compact(self, view):
            return np.int64(view.call_index) % 3 == 0

        def notify_compacted(self, view):
            pass

    wb.register_trigger("numpy_answer_replay_test")(NumpyAnswer)
    try:
        result = replay(
            session_of(7), config({"kind": "numpy_answer_replay_test"}, {"kind": "sliding_window", "window": 2})
        )
    finally:
        wb.registry.unregister("trigger", "numpy_answer_replay_test")
    assert [e.call_index for e in result.compactions] == [3, 6]


@pytest.mark.parametrize(
    ("given", "fragments"),
    [
        ("0fcac6c3daafe0cd", ["replay takes a Session or a list of messages, not a str", "wb.session(id)"]),
        (b"0fcac6c3", ["not a bytes", "wb.session(id)"]),
        ({"role": "user", "content": "hi"}, ["not a dict", "wb.load(path)"]),
        (None, ["not a NoneType"]),
        (
            [wb.Session.from_messages(conversation(2))],
            ["replay takes one Session, not a list of sessions (1)", "wb.replay(s, config) for s in sessions"],
        ),
    ],
)
def test_replay_of_something_other_than_a_session_says_what_to_pass(given, fragments):
    with pytest.raises(TypeError) as info:
        wb.replay(given, "no-compaction")
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in {str(info.value)!r}"


def test_the_compactions_frame_of_a_replay_without_compactions_has_the_columns():
    spec = config({"kind": "pressure", "turns": 3}, {"kind": "sliding_window", "window": 2})
    compacted = replay(session_of(8), spec).compactions_frame()
    empty = replay(session_of(8), "no-compaction").compactions_frame()
    assert len(compacted) > 0 and len(empty) == 0
    event_columns = [c for c in compacted.columns if c in empty.columns]
    assert list(empty.columns) == event_columns  # the same columns in the same order, the metrics' aside
    assert {"call_index", "tokens_before", "tokens_after", "summary", "summarizer_calls", "summarizer_cost_usd"} <= set(
        empty.columns
    )
    assert empty.tokens_before.sum() == 0


# ------------------------------------------------------------------------------------------------
# no-op compactions: a firing whose strategy returns the context unchanged is recorded, not counted


def chat_without_observations(turns=12):
    """A session with no tool result and no observation at all: nothing for masking to mask."""
    messages = [system(), user("Plan the migration of the billing service")]
    for i in range(turns):
        messages += [assistant(f"thought {i}: " + "considering the schema " * 20), user(f"go on with part {i}")]
    return wb.Session.from_messages(messages)


EVERY_CALL = {"kind": "pressure", "turns": 1}
MASKING = {"kind": "observation_masking", "keep_recent": 2}


def test_masking_a_session_without_observations_makes_no_compaction_only_noops():
    result = replay(chat_without_observations(), config(EVERY_CALL, MASKING, name="mask-every-call"))
    assert len(result.compactions) == len(result.calls) - 1  # the trigger fired before every call but the first
    assert all(e.noop and not e.failed for e in result.compactions)
    assert result.metrics["compactions"] == 0 and result.metrics["noop_compactions"] == len(result.compactions)
    assert not any(c.compacted_before for c in result.calls)
    assert (
        result.metrics["billed_input_tokens"]
        == replay(chat_without_observations(), "no-compaction").metrics["billed_input_tokens"]
    )
    note = result.noop_note()
    assert note is not None and "'mask-every-call'" in note and "observation_masking" in note
    assert "this session" in note and f"fired {len(result.compactions)} times" in note


def test_compactions_count_only_the_firings_that_changed_the_context():
    result = replay(
        session_of(12, result_chars=400), config(EVERY_CALL, {"kind": "observation_masking", "keep_recent": 3})
    )
    noops = [e for e in result.compactions if e.noop]
    changed = [e for e in result.compactions if not e.noop]
    assert noops and changed  # the first firings find no result old enough to mask, the later ones mask one
    assert result.metrics["compactions"] == len(changed) and result.metrics["noop_compactions"] == len(noops)
    assert all(e.tokens_after < e.tokens_before for e in changed)
    assert sum(c.compacted_before for c in result.calls) == len(changed)
    ratios = [e.tokens_before / e.tokens_after for e in changed]
    assert result.metrics["compression_ratio"] == pytest.approx(sum(ratios) / len(ratios))
    per_event = [row["compression_ratio"] for row in result.compaction_metrics]
    assert [r is None for r in per_event] == [e.noop for e in result.compactions]
    assert result.noop_note() is None


def test_quality_metrics_read_only_the_compactions_that_changed_the_context():
    from workbench.quality.trace import applied_events

    result = replay(
        session_of(12, result_chars=400), config(EVERY_CALL, {"kind": "observation_masking", "keep_recent": 3})
    )
    assert applied_events(result) == [i for i, e in enumerate(result.compactions) if not e.noop]
    assert all(
        row["fact_retention"] is None
        for row, e in zip(result.compaction_metrics, result.compactions, strict=True)
        if e.noop
    )


@dataclass(frozen=True)
class _Rebuilds:
    """Returns the context as new messages built from the old ones, `change`d."""

    change: ClassVar[dict] = {}

    def compact(self, context, env):
        return [m.replace(**self.change) if m.role == "tool" else m for m in context.messages]


@pytest.mark.parametrize(
    ("change", "noop"),
    [
        ({}, True),  # equal messages, other objects: the same context
        ({"content": "[hidden]"}, False),
        ({"origin": "compacted_modified"}, False),  # the text is the same, the message is not
        ({"importance": 5.0}, False),
    ],
    ids=["copies", "content", "origin", "importance"],
)
def test_a_noop_is_the_same_messages_in_the_same_order(change, noop):
    name = f"rebuilds_{'_'.join(change) or 'nothing'}_noop_test"
    wb.register_strategy(name)(type(name, (_Rebuilds,), {"change": change}))
    try:
        result = replay(session_of(4), config({"kind": "pressure", "turns": 3}, {"kind": name}))
    finally:
        wb.registry.unregister("strategy", name)
    assert [e.noop for e in result.compactions] == [noop] * len(result.compactions) and result.compactions
    assert result.metrics["noop_compactions"] == (len(result.compactions) if noop else 0)
