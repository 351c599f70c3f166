"""Calibration of replayed token counts against recorded usage (DESIGN §6, calibration)."""

from __future__ import annotations

import statistics

import pytest
from builders import agent_turns, assistant, system, user

import workbench as wb
from benchmarks.naive_replay import naive_replay
from workbench.calibration import ScaledTokenizer, calibration_points, fit, fit_recorded, prime_scaled, schema_text
from workbench.presets import preset
from workbench.replay import replay
from workbench.session import RecordedCompaction, recorded_input_tokens
from workbench.tokens import MESSAGE_OVERHEAD, get_tokenizer, message_tokens

OVERHEAD, SCALE = 9_000, 1.4
TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "the file to read"}},
            },
        },
    },
)


def billed_session(*, overhead=OVERHEAD, scale=SCALE, tools=(), noisy=(), compact_at=None) -> wb.Session:
    """A session whose assistant messages carry the usage a provider with a hidden `overhead` and a
    tokenizer `scale` times ours would have billed; calls in `noisy` are billed double."""
    messages = [
        system(),
        user("Fix the failing test in src/app.py"),
        *agent_turns(30, result_chars=900),
        assistant("Done."),
    ]
    text = get_tokenizer("heuristic").count(schema_text(tools)) if tools else 0
    framing = 0
    out = []
    call = 0
    for message in messages:
        if message.role == "assistant":
            billed = round(overhead + scale * text + framing) * (2 if call in noisy else 1)
            message = message.replace(
                metadata={"usage": {"input_tokens": 3, "cache_read_input_tokens": billed - 3, "output_tokens": 50}}
            )
            call += 1
        out.append(message)
        size = message_tokens(message)
        text += size - MESSAGE_OVERHEAD
        framing += MESSAGE_OVERHEAD
    metadata = {}
    if compact_at is not None:
        index = [i for i, m in enumerate(out) if m.role == "assistant"][compact_at]
        metadata["recorded_compactions"] = [
            RecordedCompaction(call_index=compact_at, message_index=index, summary="S").to_dict()
        ]
    return wb.Session.from_messages(out, tools=tools, metadata=metadata)


def no_compaction(**extra):
    return preset("no-compaction") | {"context_limit": 1_000_000, "max_output": 1_000} | extra


def relative_errors(result, before_call=None):
    """|replayed - recorded| / recorded on the calls with recorded usage (before `before_call`)."""
    frame = result.to_frame().dropna(subset=["recorded_input_tokens"])
    if before_call is not None:
        frame = frame[frame["index"] < before_call]
    return [abs(c - r) / r for c, r in zip(frame["context_tokens"], frame["recorded_input_tokens"], strict=True)]


def test_the_fit_recovers_overhead_and_scale():
    result = fit_recorded(billed_session())
    assert result.overhead == pytest.approx(OVERHEAD, abs=2)
    assert result.scale == pytest.approx(SCALE, rel=1e-3)
    assert result.calls_used == result.calls_with_usage == 31 and result.outliers == 0
    assert result.error_after < 0.001 < 0.3 < result.error_before
    assert result.raw_ratio < 0.6


def test_outliers_are_left_out_of_the_fit():
    result = fit_recorded(billed_session(noisy={5, 17, 23}))
    assert result.outliers == 3 and result.calls_used == 28
    assert result.scale == pytest.approx(SCALE, rel=1e-2)


def test_only_calls_before_the_first_recorded_compaction_are_used():
    session = billed_session(compact_at=10)
    assert len(calibration_points(session, "heuristic")) == 10
    assert fit_recorded(session).calls_with_usage == 10


def test_without_usage_the_fit_is_the_identity_and_says_why():
    plain = wb.Session.from_messages(billed_session().messages[:2] + (assistant("no usage"),))
    result = fit_recorded(plain)
    assert result.identity and result.calls_used == 0 and "no recorded usage" in result.note


def test_few_points_fit_only_the_overhead():
    result = fit([(100, 8, 5_108), (200, 12, 5_212)])
    assert (result.scale, result.overhead) == (1.0, 5_000)


def test_calibrated_replay_matches_the_recorded_input_and_reports_the_fit():
    session = billed_session()
    raw = replay(session, no_compaction())
    calibrated = replay(session, no_compaction(calibration="recorded"))
    assert raw.calibration is None and calibrated.calibration is not None
    assert statistics.median(relative_errors(raw)) > 0.3
    assert statistics.median(relative_errors(calibrated)) < 0.01
    assert calibrated.calibration.error_after < 0.01


def test_the_fit_is_reported_where_users_read_a_replay(tmp_path):
    """One line on the fit and its error: in `workbench replay` (text and JSON) and in a notebook."""
    import json

    from click.testing import CliRunner

    from workbench.cli import main
    from workbench.store import Store

    session = billed_session()
    fitted = replay(session, no_compaction(calibration="recorded"))
    line = fitted.calibration.describe()
    assert line.startswith(f"calibration: +{OVERHEAD:,} tokens per call, text tokens x {SCALE:.3f} (fitted on ")
    assert f"{fitted.calibration.error_after:.1%} calibrated" in line and line in fitted._repr_html_()
    plain = wb.Session.from_messages(session.messages[:2] + (assistant("no usage"),))
    assert "none applied (" in replay(plain, no_compaction(calibration="recorded")).calibration.describe()
    db = str(tmp_path / "wb.duckdb")
    with Store(db) as store:
        store.import_sessions([session])
    config = 'preset = "no-compaction"\ncalibration = "recorded"\ntokenizer = "heuristic"'
    text = CliRunner().invoke(main, ["replay", session.id, "--config", config, "--db", db, "--no-calls"])
    assert text.exit_code == 0 and line in text.output.splitlines()
    data = json.loads(
        CliRunner().invoke(main, ["replay", session.id, "--config", config, "--db", db, "--json", "--no-calls"]).output
    )
    assert data["calibration"] == fitted.calibration.to_dict()
    assert (
        "calibration"
        not in CliRunner()
        .invoke(main, ["replay", session.id, "--config", "no-compaction", "--db", db, "--no-calls"])
        .output
    )


def test_calibrated_counts_reach_triggers_and_billing():
    session = billed_session()
    calibrated = replay(session, no_compaction(calibration="recorded"))
    assert calibrated.metrics["billed_input_tokens"] == sum(c.context_tokens for c in calibrated.calls)
    threshold = calibrated.calls[5].context_tokens
    config = {
        "trigger": {"kind": "stat_threshold", "gauges": {"context_tokens": threshold}},
        "strategy": {"kind": "sliding_window", "window": 2},
        "context_limit": 1_000_000,
        "max_output": 1_000,
    }
    assert replay(session, config | {"calibration": "recorded"}).compactions[0].call_index == 5
    assert all(e.call_index > 5 for e in replay(session, config).compactions)


def test_calibration_matches_the_naive_engine():
    session = billed_session(tools=TOOLS)
    config = {
        "trigger": {"kind": "stat_threshold", "counters": {"iterations": 7}},
        "strategy": {"kind": "sliding_window", "window": 3},
        "context_limit": 1_000_000,
        "max_output": 1_000,
        "calibration": "recorded",
    }
    fast, slow = replay(session, config), naive_replay(session, config)
    assert fast.calls == slow.calls and fast.metrics == slow.metrics


def test_tool_schemas_count_once_per_call():
    session = billed_session()
    with_tools = wb.Session.from_messages(session.messages, tools=TOOLS)
    schema_tokens = get_tokenizer("heuristic").count(schema_text(TOOLS))
    plain, tooled = replay(session, no_compaction()), replay(with_tools, no_compaction())
    assert schema_tokens > 10
    assert [t.context_tokens - p.context_tokens for p, t in zip(plain.calls, tooled.calls, strict=True)] == [
        schema_tokens
    ] * len(plain.calls)
    assert tooled.calls[1].cached_prefix_tokens == tooled.calls[0].context_tokens


def test_scaled_counts_are_primed_from_the_base_counts():
    messages = billed_session().messages
    scaled = ScaledTokenizer(get_tokenizer("heuristic"), 1.37)
    prime_scaled(messages, scaled)
    fresh = [m.replace() for m in messages]
    assert [m._token_cache[scaled.name] for m in messages] == [message_tokens(m, scaled) for m in fresh]


def test_recorded_input_is_in_the_frame():
    session = billed_session()
    frame = replay(session, no_compaction()).to_frame()
    assert frame["recorded_input_tokens"].tolist() == [
        recorded_input_tokens(m) for m in session.messages if m.role == "assistant"
    ]


def test_an_unknown_calibration_is_a_clear_error():
    with pytest.raises(wb.ConfigError, match="calibration must be one of .*none.*recorded.*provider"):
        replay(billed_session(), no_compaction(calibration="provider"))


# -- the shared Claude Code recordings ---------------------------------------------------------


def calibration_rows(sessions, tokenizer="heuristic"):
    """(session, calls used, raw ratio, error before, error after) from no-compaction replays."""
    rows = []
    for session in sessions:
        first = min((r.call_index for r in session.recorded_compactions), default=session.calls)
        raw = replay(session, no_compaction(tokenizer=tokenizer))
        calibrated = replay(session, no_compaction(tokenizer=tokenizer, calibration="recorded"))
        before, after = relative_errors(raw, first), relative_errors(calibrated, first)
        if before:
            rows.append(
                (
                    session.id,
                    len(after),
                    calibrated.calibration.raw_ratio,
                    statistics.median(before),
                    statistics.median(after),
                )
            )
    return rows


def test_calibration_error_is_within_five_percent_on_the_shared_claude_code_sessions(shared_sessions):
    sessions = [
        s for s in wb.load(shared_sessions / "claude-code") if any(recorded_input_tokens(m) for m in s.messages)
    ]
    if not sessions:
        pytest.skip("no shared Claude Code session carries usage")
    for session_id, used, _ratio, before, after in calibration_rows(sessions):
        assert after <= 0.05, f"{session_id}: {used} calls, error {before:.3f} -> {after:.3f}"
