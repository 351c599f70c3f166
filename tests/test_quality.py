"""Offline quality metrics (workbench.quality) on the sample datasets and on hand-built compactions."""

from __future__ import annotations

import pytest
from builders import SMALL_STRATEGIES, assistant, conversations, system, tool, user
from hypothesis import HealthCheck, given, settings

import workbench as wb
from workbench.quality.facts import message_facts
from workbench.quality.probes import answerable, asked_probes
from workbench.quality.retention import MAX_LISTED, analyse, analyse_compaction
from workbench.registry import evaluate_metrics, kinds
from workbench.samples import bundled_samples
from workbench.session import Message, Session, ToolCall

TRIGGER = {"kind": "utilization", "ratio": 0.8}
CONTEXT_LIMIT = 48_000
WINDOWS = (10, 20, 30, 40)
SUMMARIZING = ("summarize_progressive", "summarize_full", "summarize_split")
CONFIGS = {
    "hard_clear": {"kind": "hard_clear"},
    **{f"window_{w}": {"kind": "sliding_window", "window": w} for w in WINDOWS},
    **{name: {"kind": name} for name in SUMMARIZING},
    "observation_masking": {"kind": "observation_masking"},
}
QUALITY = ("fact_retention", "needed_fact_retention", "dangling_references", "probe_answerable")


@pytest.fixture(scope="module")
def grid():
    """(session id, config name) -> (run metrics, per-compaction rows) for every sample that compacts."""
    out = {}
    for session in bundled_samples():
        if session.calls < 50:
            continue
        for name, strategy in CONFIGS.items():
            result = wb.replay(session, {"trigger": TRIGGER, "strategy": strategy, "context_limit": CONTEXT_LIMIT})
            out[session.id, name] = (result, *evaluate_metrics(result))
    return out


def _mean(grid, config, metric):
    values = [values[metric] for (_, name), (_, values, _) in grid.items() if name == config]
    values = [v for v in values if v is not None]
    assert values, (config, metric)
    return sum(values) / len(values)


def test_quality_metrics_are_registered_with_direction_and_level():
    metrics = kinds("metric")
    for name in (*QUALITY, "probe_accuracy", "judge_score", "continuation_match", "evaluator_cost_usd"):
        assert name in metrics

    def attribute(name, key):
        return getattr(metrics[name], key)

    assert attribute("fact_retention", "direction") == "higher"
    assert attribute("fact_retention", "level") == "compaction"
    assert attribute("dangling_references", "direction") == "lower"
    assert attribute("probe_accuracy", "requires_model") and not attribute("probe_answerable", "requires_model")


def test_every_configuration_compacts_and_no_compaction_keeps_everything(grid):
    for (session_id, name), (result, values, columns) in grid.items():
        assert result.termination == "completed", (session_id, name, result.error)
        rows = columns["fact_retention"]
        assert len(rows) == len(result.compactions)
        for row in rows:
            assert row["fact_retention"] is None or 0 <= row["fact_retention"] < 1.0, (session_id, name, row)
            assert row["fact_retention"] is None or row["lost_facts"]
        if result.compactions:
            assert 0 <= values["fact_retention"] < 1.0
            assert 0 <= values["needed_fact_retention"] <= 1.0


def test_hard_clear_scores_lowest_and_summaries_between(grid):
    for metric in ("fact_retention", "needed_fact_retention", "probe_answerable"):
        floor = _mean(grid, "hard_clear", metric)
        others = {name: _mean(grid, name, metric) for name in CONFIGS if name != "hard_clear"}
        assert all(floor < value for value in others.values()), (metric, floor, others)
        for name in SUMMARIZING:
            assert floor < others[name] < 1.0, (metric, name, others[name])
    assert _mean(grid, "hard_clear", "dangling_references") > max(
        _mean(grid, name, "dangling_references") for name in SUMMARIZING
    )


def test_sliding_window_retention_never_falls_as_the_window_grows(grid):
    sessions = sorted({session_id for session_id, _ in grid})
    for session_id in sessions:
        values = [grid[session_id, f"window_{w}"][1]["fact_retention"] for w in WINDOWS]
        measured = [v for v in values if v is not None]
        assert measured == sorted(measured), (session_id, values)
    means = [_mean(grid, f"window_{w}", "needed_fact_retention") for w in WINDOWS]
    assert means == sorted(means)


def test_needed_fact_retention_differs_from_fact_retention(grid):
    differing = [
        key
        for key, (_, values, _) in grid.items()
        if values["fact_retention"] is not None
        and abs(values["fact_retention"] - values["needed_fact_retention"]) > 0.05
    ]
    assert len(differing) > len(grid) // 2


def test_replay_result_reports_quality_per_compaction(grid):
    result, values, columns = next(v for v in grid.values() if len(v[0].compactions) > 1)
    analysis = analyse(result)
    assert [c.event_index for c in analysis.compactions] == list(range(len(result.compactions)))
    lost = columns["fact_retention"][0]["lost_facts"]
    assert lost and all(isinstance(f, str) for f in lost)
    assert set(columns["needed_fact_retention"][0]) == {
        "needed_fact_retention",
        "needed_facts",
        "lost_needed_count",
        "lost_needed_facts",
    }
    for row, facts in zip(columns["fact_retention"], analysis.compactions, strict=True):
        assert row["lost_count"] == len(facts.lost) >= len(row["lost_facts"])
        assert len(row["lost_facts"]) == min(row["lost_count"], MAX_LISTED)
    assert any(row["lost_count"] > MAX_LISTED for row in columns["fact_retention"])


# -- hand-built compactions: the definitions ------------------------------------------------------


def _session() -> tuple[Session, list[Message]]:
    messages = [
        system(),
        user("Fix the bug. Please use httpx instead of requests."),
        assistant("Reading.", calls=(("c1", "read_file"),)),
        tool("c1", "src/app/net.py: TIMEOUT_SECONDS = 30 and class RetryPolicy; see src/app/other.py"),
        assistant("Found it.", calls=(("c2", "read_file"),)),
        tool("c2", "ok"),
        Message(
            role="assistant",
            content="Editing src/app/net.py, TIMEOUT_SECONDS stays",
            tool_calls=(ToolCall("c3", "edit_file", '{"path": "src/app/net.py"}'),),
        ),
        tool("c3", "edited"),
        assistant("Done."),
    ]
    return Session.from_messages(messages), messages


def test_definitions_on_a_hand_built_compaction():
    session, messages = _session()
    before = messages[:6]
    summary = Message(
        role="user",
        content="Summary: working on src/app/net.py. The user wants httpx instead of requests.",
        origin="compacted_synthetic",
    )
    after = [messages[0], summary, *messages[4:6]]
    from workbench.quality.retention import last_use

    analysis = analyse_compaction(
        before, after, event_index=0, call_index=2, uses=last_use(session), calls=session.calls
    )
    removed = analysis.removed
    assert {"src/app/net.py", "src/app/other.py", "timeout_seconds", "retrypolicy"} <= set(removed)
    assert "src/app/net.py" in analysis.retained
    assert "please use httpx instead of requests" in analysis.retained  # rephrased constraint still matches
    assert "src/app/other.py" not in analysis.retained
    assert "timeout_seconds" in analysis.needed and "src/app/other.py" not in analysis.needed
    assert {f.key for f in analysis.needed_lost} >= {"timeout_seconds"}
    share, needed_share = analysis.fact_retention, analysis.needed_fact_retention
    assert share is not None and needed_share is not None
    assert 0 < share < 1 and 0 < needed_share < 1 and share != needed_share


def test_dangling_references_count_later_uses_of_lost_facts():
    session, _ = _session()
    config = {
        "trigger": {"kind": "token_threshold", "threshold": 1},
        "strategy": {"kind": "hard_clear", "keep_recent": 1},
        "context_limit": 10_000,
        "max_output": 100,
    }
    result = wb.replay(session, config)
    values, _ = evaluate_metrics(result)
    assert values["dangling_references"] >= 1
    assert values["needed_fact_retention"] < 1


def test_no_compaction_means_nothing_to_measure():
    session, _ = _session()
    result = wb.replay(
        session,
        {
            "trigger": {"kind": "token_threshold", "threshold": 10**6},
            "strategy": {"kind": "sliding_window", "window": 5},
        },
    )
    values, columns = evaluate_metrics(result)
    assert values["fact_retention"] is None and values["dangling_references"] == 0
    assert columns["fact_retention"] == []
    frame = result.compactions_frame()
    assert frame.empty and {"fact_retention", "needed_fact_retention"} <= set(frame.columns)
    assert "dangling_references" not in frame.columns  # a run-level metric has no per-compaction column


def test_probes_are_asked_at_their_call_and_answerable_offline(grid):
    result, values, _ = grid[next(k for k in grid if k[1] == "hard_clear")]
    probes = asked_probes(result)
    assert {p.source for p in probes} == {"session", "generated"}
    last = result.calls[-1].index
    assert all(p.call_index == last for p in probes if p.source == "session")
    generated = [p for p in probes if p.source == "generated"]
    assert all(result.compactions[p.event_index].call_index <= p.call_index for p in generated)
    assert all("_____" in p.question for p in generated)
    flags = answerable(result)
    assert values["probe_answerable"] == pytest.approx(sum(flags) / len(flags))
    assert 0 < values["probe_answerable"] < 1


def test_a_result_without_its_session_is_refused_clearly():
    from workbench.quality.trace import session_of

    class Bare:
        session_id = "abc"

    with pytest.raises(ValueError, match="abc.*does not carry its session"):
        session_of(Bare())


def test_facts_of_kept_messages_are_shared_across_replays(grid):
    (first, *_), (second, *_) = list(grid.values())[:2]
    kept = first.session.messages[1]
    assert message_facts(kept) is message_facts(second.session.messages[1])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(max_steps=30), SMALL_STRATEGIES)
def test_retention_invariants_on_random_conversations(messages, strategy):
    if not any(m.role == "assistant" for m in messages):
        return
    result = wb.replay(
        Session.from_messages(messages),
        {
            "trigger": {"kind": "token_threshold", "threshold": 200},
            "strategy": strategy,
            "context_limit": 100_000,
            "max_output": 100,
        },
    )
    for analysis in analyse(result).compactions:
        assert analysis.needed <= set(analysis.removed)
        assert analysis.retained <= set(analysis.removed)
        assert not {f.key for f in analysis.lost} & analysis.retained
        for share in (analysis.fact_retention, analysis.needed_fact_retention):
            assert share is None or 0.0 <= share <= 1.0
    for name in ("fact_retention", "needed_fact_retention", "probe_answerable"):
        value = result.metrics[name]
        assert value is None or 0.0 <= value <= 1.0
    assert result.metrics["dangling_references"] <= len(result.calls)
