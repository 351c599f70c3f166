"""Composite strategies: guard_select (003's strategy selection by severity) and pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from builders import ScriptedSummarizer, agent_turns, conversations, system, tool, user
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.compaction import CompactionEnv, Context
from workbench.errors import ConfigError, SummarizerError
from workbench.registry import build_strategy, register_strategy, spec_of
from workbench.session import Message, Step, ToolCall, group_steps, split_leading_system, tool_pairing_problems
from workbench.strategies.common import Grouping, keep_last_fraction, lend_grouping, may_summarize, steps_of
from workbench.strategies.composite import GuardSelect, Pipeline, severity_of


@register_strategy("_test_append_marker")
@dataclass(frozen=True)
class AppendMarker:
    """Test-only kind: appends a synthetic user message saying `label` (shows the order steps ran in)."""

    label: str = "marker"

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        return [*context.messages, Message(role="user", content=self.label, origin="compacted_synthetic")]


@register_strategy("_test_failing")
@dataclass(frozen=True)
class Failing:
    """Test-only kind: always fails like a summarizer would; its fallback appends a marker."""

    def compact(self, context: Context, env: CompactionEnv) -> list[Message]:
        raise SummarizerError("always down")

    def fallback(self, context: Context, env: CompactionEnv) -> list[Message]:
        return [*context.messages, Message(role="user", content="fell back", origin="compacted_synthetic")]


def session(n_steps: int = 12, result_chars: int = 200) -> list[Message]:
    return [system(), user("Port the CLI to click"), *agent_turns(n_steps, result_chars=result_chars)]


def with_oversized() -> list[Message]:
    messages = session(8)
    return [*messages, user("and now?"), *agent_turns(1, result_chars=5000, start=90)]


# ------------------------------------------------------------------------------------------------
# guard_select


@pytest.mark.parametrize(
    "name, messages, env_kw, slot, kind",
    [
        ("critical -> hard clear", session(), {"severity": "critical"}, "critical", "hard_clear"),
        ("warn -> summary", session(), {"severity": "warn"}, "warn", "summarize_split"),
        ("warn beats oversized", with_oversized(), {"severity": "warn"}, "warn", "summarize_split"),
        ("critical beats oversized", with_oversized(), {"severity": "critical"}, "critical", "hard_clear"),
        (
            "oversized tool result -> truncation",
            with_oversized(),
            {"severity": "none"},
            "oversized",
            "tool_result_truncation",
        ),
        ("otherwise gentle -> adaptive chunking", session(), {"severity": "none"}, "gentle", "adaptive_chunking"),
        # no severity from the trigger: computed from tokens vs the window (warn 80 %, critical 100 %)
        ("computed critical", session(12), {"context_limit": 500}, "critical", "hard_clear"),
        ("computed warn", session(12), {"context_limit": 850}, "warn", "summarize_split"),
        (
            "computed none, oversized",
            with_oversized(),
            {"context_limit": 100_000},
            "oversized",
            "tool_result_truncation",
        ),
        ("computed none", session(12), {"context_limit": 100_000}, "gentle", "adaptive_chunking"),
    ],
)
def test_guard_select_table(name: str, messages: list[Message], env_kw: dict[str, Any], slot: str, kind: str) -> None:
    strategy = build_strategy({"kind": "guard_select"})
    env = CompactionEnv(summarizer=ScriptedSummarizer(), **env_kw)
    context = Context(tuple(messages))
    chosen_slot, chosen = strategy.select(context, env)
    assert (chosen_slot, chosen.kind) == (slot, kind)
    result = strategy.compact(context, env)
    assert result == chosen.compact(context, CompactionEnv(summarizer=ScriptedSummarizer(), **env_kw))
    assert result[0] is messages[0]
    assert tool_pairing_problems(result) == []


def test_computed_severity_thresholds() -> None:
    messages = session(12)
    context = Context(tuple(messages))
    tokens = CompactionEnv().tokens(messages)
    assert severity_of(context, CompactionEnv(context_limit=tokens)) == "critical"
    assert severity_of(context, CompactionEnv(context_limit=int(tokens / 0.8))) == "warn"
    assert severity_of(context, CompactionEnv(context_limit=int(tokens / 0.8) + 2)) == "none"
    assert severity_of(context, CompactionEnv(context_limit=10, severity="none")) == "none"  # the trigger's word wins


def test_guard_select_runs_the_chosen_strategy() -> None:
    messages = session(12)
    strategy = build_strategy({"kind": "guard_select"})
    critical_env = CompactionEnv(summarizer=ScriptedSummarizer(), severity="critical")
    cleared = strategy.compact(Context(tuple(messages)), critical_env)
    assert len(cleared) - 1 <= 10 and critical_env.completions == []  # hard clear: no summarizer
    warn_env = CompactionEnv(summarizer=ScriptedSummarizer(), severity="warn")
    summarized = strategy.compact(Context(tuple(messages)), warn_env)
    assert summarized[1].text.startswith("[COMPACT SUMMARY]") and len(warn_env.completions) == 1
    oversized = with_oversized()
    truncated = strategy.compact(Context(tuple(oversized)), CompactionEnv(severity="none"))
    assert len(truncated) == len(oversized)
    assert truncated[-1].origin == "compacted_modified" and "[truncated]" in truncated[-1].text


def test_guard_select_custom_specs_and_oversized_chars() -> None:
    spec = {
        "kind": "guard_select",
        "critical": {"kind": "sliding_window", "window": 3},
        "gentle": "summarize_progressive",
        "oversized_chars": 100,
    }
    strategy = build_strategy(spec)
    assert strategy.critical.kind == "sliding_window" and strategy.gentle.kind == "summarize_progressive"
    context = Context(tuple(session(4, result_chars=150)))
    assert strategy.select(context, CompactionEnv(severity="none"))[0] == "oversized"
    assert (
        build_strategy({**spec, "oversized_chars": 200}).select(context, CompactionEnv(severity="none"))[0] == "gentle"
    )


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"kind": "guard_select", "warn": {"kind": "no_such_kind"}}, "warn"),
        ({"kind": "guard_select", "critical": {"kind": "hard_clear", "keep": 3}}, "critical"),
        ({"kind": "guard_select", "gentle": 42}, "gentle"),
        ({"kind": "guard_select", "oversized_chars": -1}, "oversized_chars"),
        ({"kind": "pipeline", "steps": [{"kind": "trim"}, {"kind": "nope"}]}, r"steps\[1\]"),
        ({"kind": "pipeline", "steps": {"kind": "trim"}}, "steps"),
    ],
)
def test_composite_config_errors(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_strategy(spec)


def test_guard_select_fallback_delegates() -> None:
    messages = session(12)
    strategy = build_strategy({"kind": "guard_select"})
    context = Context(tuple(messages))
    warn_env = CompactionEnv(summarizer=ScriptedSummarizer(responses=[RuntimeError("down")]), severity="warn")
    with pytest.raises(SummarizerError):
        strategy.compact(context, warn_env)
    fallen = strategy.fallback(context, warn_env)
    assert fallen[1].text.startswith("[COMPACT SUMMARY]\n[Context truncated:")  # summarize_split's own fallback
    assert fallen == strategy.warn.fallback(context, warn_env)
    # hard_clear has no fallback of its own: the default one (keep the last 40 %)
    assert strategy.fallback(context, CompactionEnv(severity="critical")) == keep_last_fraction(context)


# ------------------------------------------------------------------------------------------------
# pipeline


def test_pipeline_runs_steps_in_order() -> None:
    messages = session(3)
    first = build_strategy(
        {
            "kind": "pipeline",
            "steps": [{"kind": "_test_append_marker", "label": "A"}, {"kind": "_test_append_marker", "label": "B"}],
        }
    )
    result = first.compact(Context(tuple(messages)), CompactionEnv())
    assert [m.text for m in result[-2:]] == ["A", "B"]
    assert all(a is b for a, b in zip(result, messages, strict=False))


def test_pipeline_each_step_sees_the_previous_result() -> None:
    messages = [*session(6, result_chars=3000)]
    summarizer = ScriptedSummarizer()
    pipeline = build_strategy(
        {
            "kind": "pipeline",
            "steps": [
                {"kind": "tool_result_truncation", "max_chars": 50},
                {"kind": "summarize_split", "preserve": 0.3},
            ],
        }
    )
    env = CompactionEnv(summarizer=summarizer)
    result = pipeline.compact(Context(tuple(messages)), env)
    assert "[truncated]" in summarizer.prompts[0][1]["content"]  # the summarizer saw truncated results
    assert result[1].text.startswith("[COMPACT SUMMARY]")
    assert all(len(m.text) < 100 for m in result if m.role == "tool")
    assert tool_pairing_problems(result) == []


def test_pipeline_accumulates_summaries_and_completions() -> None:
    messages = session(10)
    summarizer = ScriptedSummarizer(responses=["S1", "S2"])
    pipeline = build_strategy(
        {
            "kind": "pipeline",
            "steps": [
                {"kind": "summarize_split", "preserve": 0.5},
                {"kind": "summarize_progressive", "keep_recent": 2},
            ],
        }
    )
    env = CompactionEnv(summarizer=summarizer)
    result = pipeline.compact(Context(tuple(messages)), env)
    assert len(env.completions) == 2
    assert "S1" in summarizer.prompts[1][1]["content"]  # the split summary was folded into the progressive one
    assert result[1].text.endswith("S2")
    assert env.summaries == [result[1].text]  # S1 is no longer in the result: not reported


def test_pipeline_reports_only_summaries_left_in_the_result() -> None:
    """A later step that drops a summary (here a window of one step) leaves no summary to report."""
    messages = session(10)
    pipeline = build_strategy(
        {
            "kind": "pipeline",
            "steps": [{"kind": "summarize_split", "preserve": 0.5}, {"kind": "sliding_window", "window": 1}],
        }
    )
    env = CompactionEnv(summarizer=ScriptedSummarizer(responses=["S1"]))
    result = pipeline.compact(Context(tuple(messages)), env)
    assert not any(m.text.endswith("S1") for m in result)
    assert env.summaries == [] and len(env.completions) == 1


def test_pipeline_fallback_forgets_what_the_failed_attempt_recorded() -> None:
    """A partly successful run (first step summarized, second failed) does not report the first
    step's summary beside the fallback's result unless the fallback put it there."""
    messages = session(10)
    pipeline = build_strategy(
        {"kind": "pipeline", "steps": [{"kind": "summarize_split", "preserve": 0.5}, {"kind": "_test_failing"}]}
    )
    env = CompactionEnv(summarizer=ScriptedSummarizer(responses=["S1", RuntimeError("down")]))
    context = Context(tuple(messages))
    with pytest.raises(SummarizerError):
        pipeline.compact(context, env)
    assert len(env.summaries) == 1  # recorded by the first step before the second failed
    result = pipeline.fallback(context, env)  # the rerun of the split step fails too: truncation
    assert any("[Context truncated:" in m.text for m in result)
    assert env.summaries == []


def test_empty_pipeline_changes_nothing() -> None:
    messages = session(2)
    assert build_strategy({"kind": "pipeline"}).compact(Context(tuple(messages)), CompactionEnv()) == messages


def test_pipeline_fallback_replaces_failing_steps() -> None:
    messages = session(2)
    pipeline = build_strategy(
        {
            "kind": "pipeline",
            "steps": [
                {"kind": "_test_append_marker", "label": "A"},
                {"kind": "_test_failing"},
                {"kind": "_test_append_marker", "label": "B"},
            ],
        }
    )
    context = Context(tuple(messages))
    with pytest.raises(SummarizerError):
        pipeline.compact(context, CompactionEnv())
    result = pipeline.fallback(context, CompactionEnv())
    assert [m.text for m in result[-3:]] == ["A", "fell back", "B"]


# ------------------------------------------------------------------------------------------------
# spec_of round trips


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "guard_select"},
        {
            "kind": "guard_select",
            "critical": {"kind": "hard_clear", "keep_recent": 4},
            "warn": {"kind": "summarize_full", "prompt": "Be terse."},
            "oversized_chars": 123,
        },
        {
            "kind": "pipeline",
            "steps": [
                {"kind": "tool_result_truncation", "max_chars": 300},
                {"kind": "guard_select", "gentle": {"kind": "handoff", "user_tokens": 50}},
            ],
        },
        {"kind": "pipeline", "steps": []},
    ],
)
def test_spec_of_round_trip(spec: dict[str, Any]) -> None:
    built = build_strategy(spec)
    full = spec_of(built)
    assert spec_of(build_strategy(full)) == full
    assert covers(full, spec)


def covers(full: Any, partial: Any) -> bool:
    """Every value given in `partial` is in `full` (which adds the defaults), recursively."""
    if isinstance(partial, dict):
        return isinstance(full, dict) and all(k in full and covers(full[k], v) for k, v in partial.items())
    if isinstance(partial, list):
        return isinstance(full, list) and len(full) == len(partial) and all(map(covers, full, partial))
    return full == partial


def test_default_guard_select_spec_spells_out_nested_params() -> None:
    full = spec_of(GuardSelect())
    assert full["critical"] == {"kind": "hard_clear", "keep_recent": 10}
    assert full["warn"]["kind"] == "summarize_split" and full["warn"]["preserve"] == 0.4
    assert full["oversized"] == {"kind": "tool_result_truncation", "max_chars": 1000}
    assert full["gentle"]["kind"] == "adaptive_chunking" and full["gentle"]["keep_recent"] == 4
    assert full["oversized_chars"] == 4000
    assert spec_of(Pipeline()) == {"kind": "pipeline", "steps": []}


def test_already_built_strategies_are_accepted() -> None:
    inner = build_strategy({"kind": "hard_clear", "keep_recent": 2})
    pipeline = Pipeline(steps=[inner])
    assert pipeline.steps[0] is inner
    assert spec_of(pipeline) == {"kind": "pipeline", "steps": [{"kind": "hard_clear", "keep_recent": 2}]}
    messages = [system(), *agent_turns(3), tool("x", "stray")][:-1]
    assert len(pipeline.compact(Context(tuple(messages)), CompactionEnv())) == 3


# ------------------------------------------------------------------------------------------------
# the steps of a strategy's result are known without grouping it again (`common.steps_of`)

FIRST_STEPS = [
    {"kind": "tool_result_truncation", "max_chars": 100},
    {"kind": "observation_masking", "keep_recent": 2},
    {"kind": "clear_tool_uses", "keep": 1, "clear_inputs": True},
    {"kind": "sliding_window", "window": 3},
    {"kind": "hard_clear", "keep_recent": 3},
    {"kind": "trim", "keep_recent_turns": 1},
    {"kind": "_test_append_marker"},
]
SECOND_STEPS = [
    {"kind": "sliding_window", "window": 3},
    {"kind": "hard_clear", "keep_recent": 4},
    {"kind": "trim", "keep_recent_turns": 2},
    {"kind": "observation_masking", "keep_recent": 1},
]


@settings(max_examples=80, deadline=None)
@given(conversations(), st.sampled_from(FIRST_STEPS), st.sampled_from(SECOND_STEPS), conversations(max_steps=4))
def test_known_steps_equal_a_fresh_grouping(messages, first, second, appended):
    context = Context(tuple(messages))
    out = build_strategy(first).compact(context, CompactionEnv())
    later = Context((*out, *(m for m in appended if m.role != "system")))  # as the replay appends messages
    for known in (Context(tuple(out)), later):
        assert steps_of(known) == group_steps(split_leading_system(known.messages)[1])
        assert all(
            a is b
            for s, t in zip(steps_of(known), known.steps, strict=True)
            for a, b in zip(s.messages, t.messages, strict=True)
        )
    expected = build_strategy(second).compact(Context(tuple(out)), CompactionEnv())
    piped = Pipeline(steps=(build_strategy(first), build_strategy(second))).compact(
        Context(tuple(messages)), CompactionEnv()
    )
    assert piped == expected


@settings(max_examples=80, deadline=None)
@given(conversations(), st.data())
def test_a_lent_grouping_gives_the_steps_of_any_run_from_a_step_start(messages, data):
    grouping = Grouping(messages)
    start = data.draw(st.integers(0, len(messages)))
    stop = data.draw(st.integers(start, len(messages)))
    run = messages[start:stop]
    found = grouping.group(run)
    if run and start not in grouping.starts:
        assert found is None  # a run must begin where a step of the grouping begins
    else:
        assert found == group_steps(run)
        first = grouping.starts.index(start) if run else 0
        # whole steps are the grouping's own objects (what settles and rewrites are remembered on)
        assert all(step is grouping.steps[first + i] for i, step in enumerate(found[:-1]))
    if run:
        assert grouping.group([m.replace() for m in run]) is None  # equal copies are not the messages
    with lend_grouping(grouping):
        body = split_leading_system(messages)[1]
        assert steps_of(Context(tuple(messages))) == group_steps(body)


def test_a_stray_tool_result_keeps_its_call_and_what_parts_them():
    """A result parted from its pinned call is a step of its own; keeping the last message keeps the
    call, so the message between stays too (dropping it would join the result to its call, a step
    the output's carried grouping would not know)."""
    call = Message(
        role="assistant", content=None, importance=10, tool_calls=(ToolCall(id="c1", name="bash", arguments="{}"),)
    )
    answer = Message(role="tool", content="late result", tool_call_id="c1")
    messages = [call, system("in between"), answer]
    out = build_strategy({"kind": "hard_clear", "keep_recent": 1}).compact(Context(tuple(messages)), CompactionEnv())
    assert out == messages
    assert steps_of(Context(tuple(out))) == group_steps(out) == [Step((call,)), Step((messages[1],)), Step((answer,))]


@pytest.mark.parametrize(
    "spec, summarizes",
    [
        ({"kind": "sliding_window", "window": 3}, False),
        ({"kind": "observation_masking"}, False),
        ({"kind": "recorded"}, False),
        ({"kind": "summarize_split"}, True),
        ({"kind": "handoff"}, True),
        ({"kind": "pipeline", "steps": [{"kind": "tool_result_truncation"}, {"kind": "trim"}]}, False),
        ({"kind": "pipeline", "steps": [{"kind": "trim"}, {"kind": "summarize_progressive"}]}, True),
        ({"kind": "guard_select"}, True),  # its default warn and gentle slots summarize
        ({"kind": "guard_select", "warn": {"kind": "trim"}, "gentle": {"kind": "hard_clear"}}, False),
        ({"kind": "_test_append_marker"}, True),  # a kind that does not say may summarize
    ],
)
def test_may_summarize_says_which_configs_call_the_summarizer(spec, summarizes):
    assert may_summarize(build_strategy(spec)) is summarizes


# ------------------------------------------------------------------------------------------------
# step_gate: run a strategy only once the context is long enough


@pytest.mark.parametrize("steps, min_steps, ran", [(3, 6, False), (4, 6, True), (10, 6, True), (0, 2, True)])
def test_step_gate_runs_its_strategy_only_from_min_steps(steps, min_steps, ran):
    """Context steps count as the `context_steps` gauge does: system, the task, then each turn."""
    messages = [system(), user("the task"), *agent_turns(steps)]
    gate = build_strategy(
        {"kind": "step_gate", "min_steps": min_steps, "strategy": {"kind": "_test_append_marker", "label": "ran"}}
    )
    result = gate.compact(Context(messages), CompactionEnv())
    assert (result[-1].text == "ran") is ran
    if not ran:
        assert all(a is b for a, b in zip(result, messages, strict=True))
    assert may_summarize(build_strategy({"kind": "step_gate", "strategy": {"kind": "observation_masking"}})) is False
    assert may_summarize(build_strategy({"kind": "step_gate"})) is True


def test_step_gate_in_a_pipeline_summarizes_at_its_own_pace():
    """The Complexity Trap's hybrid: masking at every firing, a summary only from 8 context steps."""
    spec = {
        "kind": "pipeline",
        "steps": [
            {"kind": "step_gate", "min_steps": 8, "strategy": {"kind": "summarize_progressive", "keep_recent": 2}},
            {"kind": "observation_masking", "keep_recent": 2},
        ],
    }
    pipeline = build_strategy(spec)
    short = [system(), user("the task"), *agent_turns(4)]
    env = CompactionEnv(summarizer=ScriptedSummarizer())
    assert not any(m.origin == "compacted_synthetic" for m in pipeline.compact(Context(short), env))
    long = [system(), user("the task"), *agent_turns(7)]
    result = pipeline.compact(Context(long), env)
    assert sum(m.origin == "compacted_synthetic" for m in result) == 1
    assert tool_pairing_problems(result) == []
