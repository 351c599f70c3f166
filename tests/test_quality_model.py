"""Model-backed quality metrics through LiteLLM against the local fake server (workbench.testing.FakeOpenAI):
probe accuracy, the judge and continuation, their separate spend, and the cache on re-run."""

from __future__ import annotations

import json
import re

import pytest

import workbench as wb
from workbench.llm import Gateway, MemoryCache, set_default_gateway
from workbench.quality.continuation import action_match, parse_action
from workbench.quality.judge import DIMENSIONS, parse_scores
from workbench.quality.probes import answerable, asked_probes
from workbench.registry import evaluate_metrics
from workbench.samples import bundled_samples
from workbench.session import ToolCall
from workbench.testing import FakeOpenAI

MODEL_METRICS = ["probe_accuracy", "judge_score", "continuation_match"]
JUDGE_SCORES = dict(zip(DIMENSIONS, (5, 4, 3, 4, 2, 0), strict=True))
NEXT_TOOL, NEXT_ARGUMENTS = "read_file", {"path": "src/nowhere.py"}
NEXT_ACTION = {"tool": NEXT_TOOL, "arguments": NEXT_ARGUMENTS}
EXPECTED: dict[str, str] = {}  # probe question -> expected answer, for the oracle


def _oracle(body):
    """Answers like a careful reader: a probe's expected answer if the transcript holds it."""
    system, prompt = body["messages"][0]["content"], body["messages"][-1]["content"]
    if system.startswith("You grade"):
        return json.dumps(JUDGE_SCORES)
    if system.startswith("You are continuing"):
        return "Next: " + json.dumps(NEXT_ACTION)
    transcript, _, question = prompt.rpartition("</transcript>")
    expected = EXPECTED.get(question.strip().removeprefix("Question: "))
    if expected is not None and expected.lower() in " ".join(transcript.lower().split()):
        return expected
    return "UNKNOWN"


@pytest.fixture
def server():
    with FakeOpenAI(responder=_oracle) as fake:
        yield fake


@pytest.fixture
def gateway():
    gateway = Gateway(MemoryCache(), num_retries=0, timeout=10)
    previous = set_default_gateway(gateway)
    yield gateway
    set_default_gateway(previous)
    gateway.close()


def _config(server):
    return {"trigger": {"kind": "utilization", "ratio": 0.8}, "strategy": {"kind": "sliding_window", "window": 10},
            "context_limit": 48_000, "evaluator": "openai/fake-judge",
            "evaluator_options": {"api_base": server.api_base, "api_key": "sk-dummy", "temperature": 0}}


@pytest.fixture
def session():
    return next(s for s in bundled_samples() if 100 < s.calls < 200)


def _run(session, server):
    """Replay with the model metrics asked for; the oracle learns the probes from an offline replay first."""
    offline = {k: v for k, v in _config(server).items() if not k.startswith("evaluator")}
    EXPECTED.clear()
    EXPECTED.update({p.question: " ".join(p.expected.split()) for p in asked_probes(wb.replay(session, offline))})
    result = wb.replay(session, _config(server), metrics=MODEL_METRICS)
    return result, result.metrics, result.compaction_metrics


def test_model_metrics_through_litellm_and_cached_on_rerun(session, server, gateway):
    result, values, columns = _run(session, server)
    probes = asked_probes(result)
    judged = [i for i, e in enumerate(result.compactions) if e.tokens_after < e.tokens_before]
    assert server.request_count >= len(probes) + len(judged) > 0
    assert values["probe_accuracy"] == pytest.approx(values["probe_answerable"])
    assert 0 < values["probe_accuracy"] < 1
    assert values["judge_score"] == pytest.approx(sum(JUDGE_SCORES.values()) / 6)
    row = columns[0]
    assert row["judge_accuracy"] == 5 and row["judge_instruction_following"] == 0
    recorded = [result.session.messages[result.calls[e.call_index].message_index].tool_calls[0]
                for e in result.compactions
                if result.session.messages[result.calls[e.call_index].message_index].tool_calls]
    expected = sum(action_match(c, (NEXT_TOOL, NEXT_ARGUMENTS)) for c in recorded) / len(recorded)
    assert values["continuation_match"] == pytest.approx(expected)
    assert values["evaluator_calls"] == server.request_count
    assert values["evaluator_input_tokens"] > 0 and values["evaluator_output_tokens"] > 0
    assert values["summarizer_input_tokens"] == 0  # the evaluator's spend is not the summarizer's
    first_requests = server.request_count

    again, again_values, _ = _run(session, server)
    assert server.request_count == first_requests  # every answer came from the gateway's cache
    assert again_values["evaluator_calls"] == 0
    assert again_values["evaluator_cache_hits"] == first_requests
    for name in MODEL_METRICS:
        assert again_values[name] == values[name]


def test_the_evaluator_goes_through_the_gateway_the_replay_was_given(session, server, gateway, tmp_path):
    """Its calls are cached where the replay's summaries are (a database), share that gateway's
    limiter per model and endpoint and show in its counters; the process default is not used."""
    from workbench.llm import DuckDBCache

    path = tmp_path / "evaluator.duckdb"
    with Gateway(DuckDBCache(path), num_retries=0) as given:
        result = wb.replay(session, _config(server), metrics=MODEL_METRICS, gateway=given)
        asked = server.request_count
        assert asked > 0 and given.stats.calls == asked == result.metrics["evaluator_calls"]
        assert given.limiter("openai/fake-judge", api_base=server.api_base).max_in_use > 0
    assert gateway.stats.calls == gateway.stats.cache_hits == 0  # the default gateway saw nothing
    with Gateway(DuckDBCache(path)) as reopened:
        again = wb.replay(session, _config(server), metrics=MODEL_METRICS, gateway=reopened)
    assert server.request_count == asked
    assert again.metrics["evaluator_cache_hits"] == reopened.stats.cache_hits == asked
    assert again.metrics["evaluator_calls"] == 0
    assert [again.metrics[name] for name in MODEL_METRICS] == [result.metrics[name] for name in MODEL_METRICS]


def test_a_failed_evaluator_call_is_recorded_on_the_result(session, gateway):
    from workbench.quality.evaluator import EvaluatorFailed, check_evaluator, failures
    from workbench.testing import Fault

    with FakeOpenAI(responder=lambda body: Fault.error(500, "evaluator down")) as down:
        with pytest.warns(RuntimeWarning, match="evaluator down"):
            result = wb.replay(session, _config(down), metrics=["judge_score"])
    assert result.metrics["judge_score"] is None
    assert failures(result) and all(f.startswith("judge: ProviderError") for f in failures(result))
    with pytest.raises(EvaluatorFailed, match="evaluator 'openai/fake-judge' failed.*evaluator down"):
        check_evaluator(result)
    check_evaluator(wb.replay(session, {k: v for k, v in _config(down).items() if not k.startswith("evaluator")}))


def test_without_an_evaluator_model_metrics_are_none(session):
    result = wb.replay(session, {"trigger": {"kind": "utilization", "ratio": 0.8},
                                 "strategy": {"kind": "sliding_window", "window": 10}, "context_limit": 48_000})
    values, _ = evaluate_metrics(result, MODEL_METRICS)
    assert all(values[name] is None for name in MODEL_METRICS)
    assert values["evaluator_cost_usd"] is None and values["probe_answerable"] == pytest.approx(
        sum(answerable(result)) / len(answerable(result)))


@pytest.mark.parametrize(("reply", "scores"), [
    (json.dumps(JUDGE_SCORES), {k: float(v) for k, v in JUDGE_SCORES.items()}),
    ("Here you go: " + json.dumps({**JUDGE_SCORES, "accuracy": 9}), {**{k: float(v) for k, v in JUDGE_SCORES.items()},
                                                                     "accuracy": 5.0}),
    ('{"accuracy": 3}', None),
    ("no json", None),
])
def test_judge_reply_parsing(reply, scores):
    assert parse_scores(reply) == scores


@pytest.mark.parametrize(("reply", "score"), [
    ('{"tool": "read_file", "arguments": {"path": "src/a.py"}}', 1.0),
    ('{"tool": "read_file", "arguments": {"path": "src/b.py"}}', None),
    ('{"tool": "bash", "arguments": {"command": "ls"}}', 0.0),
    ("I would read the file.", 0.0),
])
def test_continuation_match(reply, score):
    recorded = ToolCall("c1", "read_file", '{"path": "src/a.py"}')
    value = action_match(recorded, parse_action(reply))
    if score is None:
        assert 0.5 < value < 1.0
    else:
        assert value == score
    assert re.fullmatch(r"[01]\.\d+|[01]", str(value)) or 0 <= value <= 1
