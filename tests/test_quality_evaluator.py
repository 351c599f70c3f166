"""What the evaluator model is sent and how its replies are read, without a model: the judge's and the
continuation's parsers, probe questions and their scoring, transcripts and their budget."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from builders import tool, user
from hypothesis import example, given
from hypothesis import strategies as st

from workbench.quality.continuation import parse_action
from workbench.quality.evaluator import MAX_TRANSCRIPT_CHARS, Transcript, transcript_budget
from workbench.quality.facts import Fact, normalize_text
from workbench.quality.judge import DIMENSIONS, parse_scores
from workbench.quality.probes import _BLANK, _blanked, _cloze, _occurrences, score_answer
from workbench.session import Message, ToolCall

SCORES = dict(zip(DIMENSIONS, (4, 3, 5, 2, 3, 5), strict=True))
FLOATS = {k: float(v) for k, v in SCORES.items()}

# -- the judge's reply ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        json.dumps(SCORES),
        "Sure! ```json\n" + json.dumps(SCORES, indent=2) + "\n```",
        json.dumps(SCORES) + "\n\nThe replacement keeps the files but loses the failing test's name.",
        "I weighed {the edge cases} first. Scores: " + json.dumps(SCORES),
        json.dumps({"scores": SCORES, "comment": "mostly fine"}),
        json.dumps({k: str(v) for k, v in SCORES.items()}),
        json.dumps({k: f"{v}/5" for k, v in SCORES.items()}),
        json.dumps({k.replace("_", " ").title(): v for k, v in SCORES.items()}),
        json.dumps({k.replace("_", "-"): v for k, v in SCORES.items()}),
        json.dumps({k: {"score": v, "reason": "..."} for k, v in SCORES.items()}),
        json.dumps([SCORES]),
    ],
)
def test_the_judge_reads_scores_as_models_write_them(reply):
    assert parse_scores(reply) == FLOATS


@pytest.mark.parametrize(
    "reply",
    [
        "The replacement is quite good, I'd say 4/5 overall.",
        "",
        '{"accuracy": 3}',
        json.dumps({**SCORES, "accuracy": "good"}),
        json.dumps({**SCORES, "accuracy": True}),
        json.dumps({"outer": {"scores": SCORES}}),  # two levels down is not looked at
    ],
)
def test_a_judge_reply_without_the_six_scores_is_unreadable(reply):
    assert parse_scores(reply) is None


_PROSE = st.text(st.characters(codec="ascii", exclude_characters="{}[]"), max_size=60)


@given(
    st.fixed_dictionaries({d: st.integers(0, 5) for d in DIMENSIONS}),
    _PROSE,
    _PROSE,
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
@example(SCORES, "Here you go:", "", True, True, True)
def test_the_judges_scores_survive_any_wrapping(scores, before, after, as_text, fenced, wrapped):
    data: dict = {k: (str(v) if as_text else v) for k, v in scores.items()}
    body = json.dumps({"scores": data} if wrapped else data)
    if fenced:
        body = f"```json\n{body}\n```"
    assert parse_scores(f"{before}{body}{after}") == {k: float(v) for k, v in scores.items()}


# -- the continuation's reply ---------------------------------------------------------------------

READ = ("read_file", {"path": "src/a.py"})


@pytest.mark.parametrize(
    "reply",
    [
        '{"tool": "read_file", "arguments": {"path": "src/a.py"}}',
        'Next I would read it: ```json\n{"tool": "read_file", "arguments": {"path": "src/a.py"}}\n``` then edit.',
        '{"name": "read_file", "args": {"path": "src/a.py"}}',
        '{"tool": "read_file", "arguments": "{\\"path\\": \\"src/a.py\\"}"}',
        '{"tool_call": {"tool": "read_file", "input": {"path": "src/a.py"}}}',
        '{"type": "function", "function": {"name": "read_file", "arguments": "{\\"path\\": \\"src/a.py\\"}"}}',
        '[{"tool": "read_file", "arguments": {"path": "src/a.py"}}]',
    ],
)
def test_the_continuation_reads_actions_as_models_write_them(reply):
    assert parse_action(reply) == READ


@pytest.mark.parametrize(
    "reply", ["I would read the file next.", "", '{"arguments": {"path": "src/a.py"}}', '{"tool": 3}']
)
def test_a_reply_naming_no_tool_is_unreadable(reply):
    assert parse_action(reply) is None


@given(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True),
    st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=30) | st.integers(), max_size=4),
    _PROSE,
    _PROSE,
    st.booleans(),
    st.booleans(),
)
def test_a_proposed_call_survives_any_wrapping(name, arguments, before, after, fenced, as_string):
    body = json.dumps({"tool": name, "arguments": json.dumps(arguments) if as_string else arguments})
    if fenced:
        body = f"```json\n{body}\n```"
    assert parse_action(f"{before}{body}{after}") == (name, arguments)


# -- probe questions ------------------------------------------------------------------------------


def _passage(question: str) -> str:
    return question.split("blanked out", 1)[1].split(': "', 1)[1].rsplit('". What is', 1)[0]


def test_a_cloze_blanks_every_occurrence_of_its_answer():
    source = Message(
        role="tool",
        content="def test_build_headers():\n    assert build_headers({}) == {}\n# BUILD_HEADERS is exported",
        name="read_file",
        tool_call_id="c1",
    )
    question = _cloze(Fact("identifier", "build_headers", "build_headers"), source)
    assert "build_headers" not in question.lower()
    assert "wherever it appears" in question and "part of a longer name" in question
    assert _passage(question).count("_____") == 3


@given(
    st.text(st.sampled_from("abcXYZ019_./- \n"), min_size=1, max_size=12).filter(
        lambda t: any(c.isalnum() for c in t) and t == t.strip()
    ),
    st.lists(st.text(st.sampled_from("abcxyz019_./- \n"), max_size=40), min_size=2, max_size=5),
    st.lists(st.sampled_from([str.lower, str.upper, str.title]), min_size=1, max_size=4),
)
@example(".X", ["x", ""], [str.lower])  # the quote's leading dots and the text after them spell ".x"
def test_a_cloze_never_shows_its_answer(fact, fillers, cases):
    spellings = [case(fact) for case in cases]
    text = fillers[0] + "".join(f"{spelling}{filler}" for spelling, filler in zip(spellings, fillers[1:], strict=False))
    question = _cloze(Fact("identifier", fact.lower(), fact), Message(role="user", content=text))
    shown = _passage(question) if "blanked out" in question else ""  # else the question quotes nothing
    assert " ".join(fact.lower().split()) not in normalize_text(shown)


@given(
    st.text(st.sampled_from("ab \n\t"), min_size=1, max_size=6).filter(lambda t: bool(t.strip())),
    st.lists(st.sampled_from(["a", "b", "A", "B", "ab", " ", "\n", "x.", " " * 150, "\n\t" * 40]), max_size=60).map(
        "".join
    ),
    st.integers(0, 60),
    st.integers(1, 120),
)
@example("a b", "a" + " " * 150 + "b", 0, 1)  # an occurrence longer than the first window
@example("a b", "xa b" + "\n" * 80 + "a" + " " * 150 + "b.", 0, 3)
def test_the_passage_after_a_blank_is_the_text_blanked_throughout(fact, text, start, limit):
    """`_blanked` reads only as far into the text as it needs, and gives what blanking the whole rest gives."""
    pattern = _occurrences(fact)
    start = min(start, len(text))
    expected = pattern.sub(_BLANK, text[start:])[:limit]
    assert _blanked(pattern, text, start, limit, len("".join(fact.split()))) == expected


# -- probe scoring --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "answer", "score"),
    [
        ("GEO-7969", "The ticket is geo-7969.", 1.0),
        ("GEO-7969", "GEO-7968", 0.0),
        ("30", "It is 30.0 seconds", 1.0),
        ("30", "300", 0.0),
        ("KeyError: 'point_code'", "KeyError: point_code", 1.0),
        ("src/app.py", "UNKNOWN", 0.0),
        ("3", "I do not know; maybe src/app3.py", 0.0),
        ("3", "v3", 0.0),
        ("3", "3.py", 0.0),
        ("3", "app_3", 0.0),
        ("3", "3/4", 0.0),
        ("3", "3.5.1", 0.0),
        ("3", "It is 3.", 1.0),
        ("3", "(3)", 1.0),
        ("3", "3.0", 1.0),
        ("1200", "1,200 ms", 1.0),
        ("-2", "-2", 1.0),
    ],
)
def test_probe_answers_are_scored_numbers_standing_alone_text_contained(expected, answer, score):
    assert score_answer(expected, answer) == score


@given(
    st.integers(0, 10**6),
    st.from_regex(r"[a-z_./]*[a-z_]", fullmatch=True),
    st.from_regex(r"([a-z_/]|\.[a-z])[a-z_.]*", fullmatch=True),
)
def test_a_number_inside_a_word_or_path_is_not_an_answer(number, prefix, suffix):
    assert score_answer(str(number), f"maybe {prefix}{number} or {number}{suffix}") == 0.0
    assert score_answer(str(number), f"maybe {prefix}{number}, but I think {number}.") == 1.0


# -- transcripts ----------------------------------------------------------------------------------


def test_a_transcript_keeps_long_messages_whole_and_says_what_a_cut_hides():
    body = "x" * 13_000 + " .session_status_badge " + "y" * 19_000
    messages = [user("Why is the badge grey?"), tool("c1", body)]
    whole = Transcript.of(messages, MAX_TRANSCRIPT_CHARS)
    assert not whole.clipped and ".session_status_badge" in whole.text
    assert not whole.hides(".session_status_badge")
    cut = Transcript.of(messages, 20_000)
    assert cut.clipped and re.search(r"\[\.\.\. \d+ characters omitted \.\.\.\]", cut.text)
    assert cut.hides(".session_status_badge") and not cut.hides("the badge grey")
    assert not cut.hides("not in the messages at all")
    shortened = Transcript.of(messages, MAX_TRANSCRIPT_CHARS, per_message=12_000)
    assert ".session_status_badge" not in shortened.text


def test_the_budget_follows_the_evaluators_window_when_litellm_knows_it():
    def result(evaluator):
        return SimpleNamespace(config=SimpleNamespace(evaluator=evaluator))

    assert transcript_budget(result("openai/not-a-model-litellm-knows")) == MAX_TRANSCRIPT_CHARS
    small = transcript_budget(result("openai/gpt-4-0613"))  # an 8,192-token window
    assert 10_000 < small < 8_192 * 3
    assert transcript_budget(result("openai/gpt-4o-mini")) > small


def test_a_tool_call_is_rendered_with_its_arguments_whole():
    arguments = json.dumps({"content": "z" * 5_000 + "END"})
    call = Message(role="assistant", content=None, tool_calls=(ToolCall("c1", "write_file", arguments),))
    assert "END" in Transcript.of([call], MAX_TRANSCRIPT_CHARS).text
