"""Model-backed quality metrics through LiteLLM against the local fake server (workbench.testing.FakeOpenAI):
probe accuracy, the judge and continuation, their separate spend, and the cache on re-run."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from builders import assistant, conversation, system, tool, user

import workbench as wb
from workbench.llm import Gateway, MemoryCache, set_default_gateway
from workbench.quality.continuation import action_match, parse_action
from workbench.quality.judge import DIMENSIONS, RUBRIC, parse_scores
from workbench.quality.probes import answerable, asked_probes
from workbench.registry import evaluate_metrics, kinds
from workbench.samples import bundled_samples
from workbench.session import Message, Session, ToolCall
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
    return {
        "trigger": {"kind": "utilization", "ratio": 0.8},
        "strategy": {"kind": "sliding_window", "window": 10},
        "context_limit": 48_000,
        "evaluator": "openai/fake-judge",
        "evaluator_options": {"api_base": server.api_base, "api_key": "sk-dummy", "temperature": 0},
    }


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
    recorded = [
        result.session.messages[result.calls[e.call_index].message_index].tool_calls[0]
        for e in result.compactions
        if result.session.messages[result.calls[e.call_index].message_index].tool_calls
    ]
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
    from workbench.store import DuckDBCache

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
    result = wb.replay(
        session,
        {
            "trigger": {"kind": "utilization", "ratio": 0.8},
            "strategy": {"kind": "sliding_window", "window": 10},
            "context_limit": 48_000,
        },
    )
    with pytest.warns(UserWarning, match="cannot be measured"):
        values, _ = evaluate_metrics(result, MODEL_METRICS)
    assert all(values[name] is None for name in MODEL_METRICS)
    assert values["evaluator_cost_usd"] is None and values["probe_answerable"] == pytest.approx(
        sum(answerable(result)) / len(answerable(result))
    )


@pytest.mark.parametrize(
    ("reply", "scores"),
    [
        (json.dumps(JUDGE_SCORES), {k: float(v) for k, v in JUDGE_SCORES.items()}),
        (
            "Here you go: " + json.dumps({**JUDGE_SCORES, "accuracy": 9}),
            {**{k: float(v) for k, v in JUDGE_SCORES.items()}, "accuracy": 5.0},
        ),
        ('{"accuracy": 3}', None),
        ("no json", None),
    ],
)
def test_judge_reply_parsing(reply, scores):
    assert parse_scores(reply) == scores


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ('{"tool": "read_file", "arguments": {"path": "src/a.py"}}', 1.0),
        ('{"tool": "read_file", "arguments": {"path": "src/b.py"}}', None),
        ('{"tool": "bash", "arguments": {"command": "ls"}}', 0.0),
    ],
)
def test_continuation_match(reply, score):
    recorded = ToolCall("c1", "read_file", '{"path": "src/a.py"}')
    value = action_match(recorded, parse_action(reply))
    if score is None:
        assert 0.5 < value < 1.0
    else:
        assert value == score
    assert re.fullmatch(r"[01]\.\d+|[01]", str(value)) or 0 <= value <= 1


# -- an evaluator's unusable answers: the evaluator failed, not the compaction ----------------------


def _unusable(body):
    system = body["messages"][0]["content"]
    if system.startswith("You grade"):
        return "The replacement is quite good, I'd say 4/5 overall."
    if system.startswith("You are continuing"):
        return "I would read the file next."
    return ""  # a probe's answer


def test_unusable_answers_fail_the_evaluator_and_are_not_scored(session, gateway):
    from workbench.quality.evaluator import EvaluatorFailed, check_evaluator

    with FakeOpenAI(responder=_unusable) as fake:
        with pytest.warns(RuntimeWarning) as caught:
            result = wb.replay(session, _config(fake), metrics=MODEL_METRICS)
        sent = fake.request_count
    assert [result.metrics[name] for name in MODEL_METRICS] == [None, None, None]
    said = "\n".join(str(w.message) for w in caught)
    assert re.search(
        r"judge: unusable answer for compaction \d+ \(call \d+\): no JSON object with the six 0-5 "
        r"scores; the reply began \"The replacement is quite good",
        said,
    )
    assert re.search(
        r"continuation: unusable answer for compaction \d+ \(call \d+\): no JSON object naming a "
        r"tool; the reply began 'I would read the file next.'",
        said,
    )
    assert re.search(r"probe: unusable answer for probe \d+ of \d+ \(call \d+\): an empty answer", said)
    with pytest.raises(EvaluatorFailed, match="judge: unusable answer"):
        check_evaluator(result)
    assert 0 < result.metrics["evaluator_calls"] == sent  # each answer was paid for, and is counted


@pytest.mark.filterwarnings("ignore:metric 'judge_score' failed:RuntimeWarning")  # the second run's, until then
def test_an_unusable_answer_is_asked_again_on_the_next_run(session, gateway):
    prose = {"on": True}

    def judge(body):
        if prose["on"] and body["messages"][0]["content"].startswith("You grade"):
            return "Looks fine to me."
        return _oracle(body)

    with FakeOpenAI(responder=judge) as fake:
        with pytest.warns(RuntimeWarning, match="judge: unusable answer"):
            wb.replay(session, _config(fake), metrics=["judge_score"])
        prose["on"] = False
        again = wb.replay(session, _config(fake), metrics=["judge_score"])
    assert again.metrics["judge_score"] == pytest.approx(sum(JUDGE_SCORES.values()) / 6)


def test_answers_paid_for_before_a_batch_failed_are_counted(session, gateway):
    from workbench.experiments.cells import CellSpend
    from workbench.quality.evaluator import failures
    from workbench.testing import Fault

    probed = []

    def one_then_errors(body):
        probed.append(body)
        return _oracle(body) if len(probed) == 1 else Fault.error(400, "prober overloaded")

    with FakeOpenAI(responder=one_then_errors) as fake:
        one_at_a_time = _config(fake)
        one_at_a_time["evaluator_options"] = {**one_at_a_time["evaluator_options"], "concurrency": 1}
        with pytest.warns(RuntimeWarning, match="prober overloaded"):
            result = wb.replay(session, one_at_a_time, metrics=["probe_accuracy"])
        assert len(probed) == 2 < len(asked_probes(result))  # no call is started once one failed
        assert result.metrics["probe_accuracy"] is None and failures(result)
        assert result.metrics["evaluator_calls"] == 1  # the one answer that came back
        spent = CellSpend.of(result)
        assert (spent.model_calls, spent.unpriced_calls, spent.cost_usd) == (1, 1, 0.0)  # its price is unknown

        priced = {**_config(fake), "evaluator": "openai/priced-judge"}
        priced["evaluator_options"] = {
            **priced["evaluator_options"],
            "input_cost_per_token": 1e-6,
            "output_cost_per_token": 2e-6,
        }
        fake.responder = _oracle
        paid = wb.replay(session, priced, metrics=["judge_score"])
    spent = CellSpend.of(paid)
    assert spent.unpriced_calls == 0 and spent.model_calls == paid.metrics["evaluator_calls"] > 0
    assert spent.cost_usd == pytest.approx(paid.metrics["evaluator_cost_usd"]) and spent.cost_usd > 0


# -- what the evaluator is sent -----------------------------------------------------------------------

BADGE = ".session_status_badge"
HIDDEN = "src/deep/hidden_target.py"
SMALL_WINDOW = "openai/gpt-4-0613"  # LiteLLM's map gives it 8,192 tokens: the transcripts below do not fit


def _badge_session():
    """A file read as long as Claude Code's often are, the answer at character 13,110 of 32,133."""
    body = "x" * 13_110 + f" {BADGE} " + "y" * (32_133 - 13_112 - len(BADGE))
    messages = [
        system(),
        user("The status badge is grey; this is ticket LEDG-4242."),
        assistant("Reading the stylesheet.", calls=(("c0", "read_file"),)),
        tool("c0", body),
        assistant("The badge class is wrong."),
    ]
    return Session.from_messages(
        messages,
        probes=[
            {"question": "Which CSS class styles the status badge?", "expected": BADGE},
            {"question": "Which ticket is this work for?", "expected": "LEDG-4242"},
        ],
    )


def _whole(server, evaluator="openai/fake-judge"):
    """No compaction: the probes are asked against the whole recording."""
    return {
        "trigger": {"kind": "utilization", "ratio": 0.9},
        "strategy": {"kind": "sliding_window", "window": 10},
        "context_limit": 200_000,
        "evaluator": evaluator,
        "evaluator_options": {"api_base": server.api_base, "api_key": "sk-dummy"},
    }


def _learn(session):
    EXPECTED.clear()
    EXPECTED.update({p.question: p.expected for p in session.probes})


def test_the_prober_sees_long_messages_whole(server, gateway):
    session = _badge_session()
    _learn(session)
    result = wb.replay(session, _whole(server), metrics=["probe_accuracy"])
    assert result.metrics["probe_accuracy"] == 1.0
    assert all(BADGE in body["messages"][-1]["content"] for body in server.requests)


def test_a_probe_whose_answer_was_cut_to_fit_the_evaluator_is_left_unscored(server, gateway):
    session = _badge_session()
    _learn(session)
    with pytest.warns(
        RuntimeWarning,
        match=r"probe_accuracy: 1 of 2 probes left unscored: .* cut to fit the "
        r"evaluator 'openai/gpt-4-0613'",
    ):
        result = wb.replay(session, _whole(server, SMALL_WINDOW), metrics=["probe_accuracy"])
    assert result.metrics["probe_accuracy"] == 1.0  # the probe it could be asked, answered
    asked = [body["messages"][-1]["content"] for body in server.requests]
    assert len(asked) == 1 and asked[0].endswith("Which ticket is this work for?")
    assert len(asked[0]) < 8_192 * 3


def _window_session():
    """Before call 2 a sliding window drops the first step; the call then opens a file that only a
    long log read (kept) names, in its middle."""
    log = "z" * 15_000 + f" error raised in {HIDDEN} " + "z" * 15_000
    opened = Message(
        role="assistant",
        content="Opening the file the log names.",
        tool_calls=(ToolCall("c2", "read_file", json.dumps({"path": HIDDEN})),),
    )
    return Session.from_messages(
        [
            system(),
            user("Fix the crash in the importer."),
            assistant("Listing files.", calls=(("c0", "bash"),)),
            tool("c0", "src/a.py src/b.py", name="bash"),
            assistant("Reading the log.", calls=(("c1", "read_file"),)),
            tool("c1", log),
            opened,
            tool("c2", "def load(): ..."),
            assistant("Fixed."),
        ]
    )


def _every_two_calls(server, strategy, evaluator="openai/fake-judge"):
    return {
        **_whole(server, evaluator),
        "strategy": strategy,
        "trigger": {"kind": "stat_threshold", "counters": {"iterations": 2}},
    }


def test_the_judge_sees_the_next_step_and_is_told_the_kept_messages_are_not_shown(server, gateway):
    result = wb.replay(
        _window_session(), _every_two_calls(server, {"kind": "sliding_window", "window": 1}), metrics=["judge_score"]
    )
    assert [e.call_index for e in result.compactions] == [2]
    (body,) = [b for b in server.requests if b["messages"][0]["content"].startswith("You grade")]
    prompt = body["messages"][-1]["content"]
    original = prompt.split("<ORIGINAL>")[1].split("</ORIGINAL>")[0]
    following = prompt.split("<NEXT>")[1].split("</NEXT>")[0]
    assert "Listing files." in original and "Reading the log." not in original
    assert "Opening the file the log names." in following and HIDDEN in following
    assert "4 other messages were kept unchanged; they are not shown" in prompt
    assert "not shown" in body["messages"][0]["content"]
    assert result.metrics["judge_score"] == pytest.approx(sum(JUDGE_SCORES.values()) / 6)


def test_a_continuation_whose_clue_was_cut_to_fit_the_evaluator_is_left_unscored(server, gateway):
    config = _every_two_calls(server, {"kind": "sliding_window", "window": 1}, SMALL_WINDOW)
    with pytest.warns(
        RuntimeWarning,
        match=r"continuation_match: 1 compaction\(s\) left unscored \(0\): the "
        r"recorded next call uses what is in the context but in the part",
    ):
        result = wb.replay(_window_session(), config, metrics=["continuation_match"])
    assert result.metrics["continuation_match"] is None and result.compaction_metrics[0]["continuation_match"] is None
    assert server.request_count == 0


def test_a_compaction_whose_replacement_the_evaluator_cannot_take_is_not_graded(server, gateway):
    config = _every_two_calls(server, {"kind": "tool_result_truncation", "max_chars": 12_000}, SMALL_WINDOW)
    with pytest.warns(RuntimeWarning, match=r"judge_score: 1 compaction\(s\) not graded \(0\): what they wrote"):
        result = wb.replay(_window_session(), config, metrics=["judge_score"])
    assert result.metrics["judge_score"] is None and server.request_count == 0


def test_asking_for_model_metrics_without_an_evaluator_says_so_once(session):
    offline = {
        "trigger": {"kind": "utilization", "ratio": 0.8},
        "strategy": {"kind": "sliding_window", "window": 10},
        "context_limit": 48_000,
    }
    with pytest.warns(UserWarning) as caught:
        result = wb.replay(session, offline, metrics=["judge_score", "probe_accuracy"])
    said = [str(w.message) for w in caught if "evaluator" in str(w.message)]
    assert len(said) == 1
    assert re.match(
        r"judge_score, probe_accuracy cannot be measured and are None: the config names no "
        r"evaluator model: set `evaluator`",
        said[0],
    )
    assert result.metrics["judge_score"] is None and result.metrics["probe_accuracy"] is None


# -- the judge's six dimensions -------------------------------------------------------------------


def _varied_judge(body):
    """Scores that differ by compaction (from a digest of the prompt), each dimension apart."""
    if not body["messages"][0]["content"].startswith("You grade"):
        return _oracle(body)
    digest = hashlib.sha256(body["messages"][-1]["content"].encode()).digest()
    return json.dumps({d: digest[i] % 6 for i, d in enumerate(DIMENSIONS)})


def test_each_of_the_six_dimensions_is_a_metric_of_its_own(gateway):
    dimensions = [f"judge_{d}" for d in DIMENSIONS]
    metrics = kinds("metric")
    assert all(
        metrics[m].direction == "higher"
        and metrics[m].level == "compaction"
        and metrics[m].requires_model
        and metrics[m].unit == "score 0-5"
        for m in dimensions
    )
    with FakeOpenAI(responder=_varied_judge) as fake:
        config = _every_two_calls(fake, {"kind": "sliding_window", "window": 2})
        result = wb.replay(Session.from_messages(conversation(12)), config, metrics=["judge_score", *dimensions])
        asked = [b for b in fake.requests if b["messages"][0]["content"].startswith("You grade")]
    rows = [r for r in result.compaction_metrics if r["judge_score"] is not None]
    assert len(asked) == len(rows) > 1, "one judgement per compaction serves all seven metrics"
    for name in dimensions:
        assert len({r[name] for r in rows}) > 1, name
        assert result.metrics[name] == pytest.approx(sum(r[name] for r in rows) / len(rows))
    for row in rows:
        assert row["judge_score"] == pytest.approx(sum(row[name] for name in dimensions) / 6)
    rubric = asked[0]["messages"][0]["content"]
    assert all(f"- {d}: {RUBRIC[d]};" in rubric for d in DIMENSIONS)
    assert all(f"{score} - " in rubric for score in range(6)), "every score of the scale is described"


def test_a_dimension_asked_for_alone_is_judged_and_listed_per_compaction(gateway):
    with FakeOpenAI(responder=_varied_judge) as fake:
        config = _every_two_calls(fake, {"kind": "sliding_window", "window": 2})
        result = wb.replay(Session.from_messages(conversation(12)), config, metrics=["judge_continuity"])
    assert "judge_score" not in result.metrics and result.metrics["judge_continuity"] is not None
    assert all("judge_continuity" in row for row in result.compaction_metrics)
