"""The offline extractive summarizer (`workbench/extractive`): the pure function.

Its LiteLLM provider is tested with the gateway (tests/test_llm_provider.py). Transcripts are
generated here; the last test measures term retention against the summaries Claude Code recorded
in the shared sessions (skipped when they are absent).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from builders import lookahead_misses, pattern_words, text_around, without_lookahead, without_possessive
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import extractive
from workbench.extractive import (
    DEFAULT_BUDGET_TOKENS,
    OFFLINE_BASELINE_LABEL,
    extractive_summary,
    is_offline_baseline,
    read_input,
    request_tokens,
    stated_budget,
    summary_budget,
)
from workbench.session import Message
from workbench.strategies import prompts
from workbench.strategies.common import render_transcript

REPO = Path(__file__).resolve().parents[1]


def call(name: str, arguments: str, call_id: str = "c1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent. Always answer briefly. PROMPT-SECRET"},
    {
        "role": "user",
        "content": "The import in src/workbench/replay.py fails. We must keep Python 3.11 support "
        "and never edit vendor/legacy_io.py.",
    },
    {
        "role": "assistant",
        "content": "Running the tests first.",
        "tool_calls": [call("bash", '{"cmd": "pytest tests/test_replay.py -x"}')],
    },
    {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "FAILED tests/test_replay.py::test_resume - ImportError: cannot import name 'ReplayState'\n"
        'Traceback (most recent call last):\n  File "src/workbench/replay.py", line 12, in <module>\n'
        "ImportError: cannot import name 'ReplayState'\n1 failed, 41 passed in 3.20s\nexit code 1",
    },
    {
        "role": "assistant",
        "content": "Decided to move ReplayState into workbench.state and re-export it; "
        "the cache_size default stays at 512 entries.",
    },
    {"role": "user", "content": "OK. Then update CHANGELOG.md and set the timeout to 45 seconds."},
]
TASK = CONVERSATION[1]["content"]


def sections(summary: str) -> dict[str, str]:
    out: dict[str, str] = {}
    current = None
    for line in summary.splitlines():
        if line.startswith("## "):
            current = line[3:]
            out[current] = ""
        elif current is not None:
            out[current] += line + "\n"
    return out


def generated_session(steps: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """A long agent session: a task, many tool steps (paths, identifiers, numbers, errors), a last request."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent. SYSTEM-ONLY-TEXT"},
        {
            "role": "user",
            "content": f"TASK-{seed}: migrate the billing module in src/billing/core.py to the "
            "new ledger API; never touch migrations/0001_initial.py.",
        },
    ]
    for i in range(steps):
        messages.append(
            {
                "role": "assistant",
                "content": f"Step {i}: checking ledger_entry_{i % 7} in src/billing/part_{i % 11}.py",
                "tool_calls": [call("bash", f'{{"command": "pytest tests/test_part_{i % 11}.py -q"}}', f"c{i}")],
            }
        )
        outcome = (
            f"ValueError: amount_{i} must be positive (got -{i})"
            if i % 5 == 0
            else f"{i + 3} passed in {i % 9}.{i % 10}s"
        )
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"collected {i + 3} items\n{outcome}"})
        if i % 9 == 4:
            messages.append({"role": "user", "content": f"Also keep LedgerClient_{i} backwards compatible."})
    messages.append(
        {
            "role": "assistant",
            "content": "LATEST-PROGRESS: switched BillingService.charge to LedgerClient.post and all 87 tests pass.",
        }
    )
    messages.append({"role": "user", "content": f"LAST-REQUEST-{seed}: now update docs/billing.md."})
    return messages


# ------------------------------------------------------------------------------------------------
# what it keeps


@pytest.mark.parametrize(
    "section, needles",
    [
        ("Task", ["> The import in src/workbench/replay.py fails. We must keep Python 3.11 support"]),
        ("Latest progress", ["Decided to move ReplayState into workbench.state"]),
        ("Files", ["src/workbench/replay.py", "vendor/legacy_io.py", "tests/test_replay.py", "CHANGELOG.md"]),
        ("Identifiers", ["ReplayState", "workbench.state", "cache_size", "test_resume"]),
        ("Commands run", ["pytest tests/test_replay.py -x"]),
        (
            "Errors",
            [
                "ImportError: cannot import name 'ReplayState'",
                "exit code 1",
                "FAILED tests/test_replay.py::test_resume",
            ],
        ),
        ("Decisions & constraints", ["Decided to move ReplayState into workbench.state"]),
        ("Facts & numbers", ["1 failed, 41 passed in 3.20s", "line 12"]),
        ("Last request", ["> OK. Then update CHANGELOG.md and set the timeout to 45 seconds."]),
    ],
)
def test_keeps_what_matters(section: str, needles: list[str]) -> None:
    found = sections(extractive_summary(CONVERSATION, budget_tokens=600))
    assert section in found, f"no {section!r} section"
    for needle in needles:
        assert needle in found[section], f"{needle!r} missing from {section}"


def test_ignores_system_instructions_and_deduplicates() -> None:
    summary = extractive_summary(CONVERSATION, budget_tokens=600)
    assert "PROMPT-SECRET" not in summary and "Always answer briefly" not in summary
    assert summary.count("\n- ImportError: cannot import name 'ReplayState'") == 1  # twice in the input
    assert summary.count("- src/workbench/replay.py") == 1


@pytest.mark.parametrize("budget", [60, 100, 200, 400, 800, DEFAULT_BUDGET_TOKENS, 3000])
def test_task_latest_progress_and_last_request_survive_any_budget(budget: int) -> None:
    session = generated_session(200)
    summary = extractive_summary(session, budget_tokens=budget)
    assert len(summary) // 4 <= budget
    assert "TASK-0: migrate the billing module" in summary
    assert "LAST-REQUEST-0: now update" in summary  # cut with "..." only when the budget is tiny
    if budget >= 100:
        assert "LAST-REQUEST-0: now update docs/billing.md" in summary
    if budget >= 100:
        assert "LATEST-PROGRESS: switched BillingService.charge" in summary
    assert "SYSTEM-ONLY-TEXT" not in summary


@pytest.mark.parametrize("budget", [200, 500, 1000, 2500])
def test_honours_the_requested_length(budget: int) -> None:
    # with plenty of material the summary uses its budget: it neither overruns nor stops at a fixed size
    summary = extractive_summary(generated_session(400), budget_tokens=budget)
    assert 0.85 * budget <= len(summary) // 4 <= budget


@settings(max_examples=25, deadline=None)
@given(steps=st.integers(0, 60), budget=st.integers(1, 2000), seed=st.integers(0, 5))
def test_never_exceeds_the_budget_and_keeps_the_task(steps: int, budget: int, seed: int) -> None:
    summary = extractive_summary(generated_session(steps, seed=seed), budget_tokens=budget)
    assert len(summary) // 4 <= budget
    if budget >= 60:
        assert f"TASK-{seed}" in summary and f"LAST-REQUEST-{seed}" in summary


def test_salient_terms_win_over_one_offs() -> None:
    session = generated_session(120)
    summary = extractive_summary(session, budget_tokens=300)
    found = sections(summary)
    # ledger_entry_* recur in every seventh step; a name seen once early is dropped first
    assert "ledger_entry_" in found["Identifiers"]
    assert "src/billing/core.py" in summary  # the task's path, kept with the task


def test_deterministic_within_and_across_processes() -> None:
    session = generated_session(80)
    assert extractive_summary(session, budget_tokens=500) == extractive_summary(list(session), budget_tokens=500)
    script = (
        "import sys; sys.path.insert(0, 'tests'); from test_extractive import generated_session; "
        "from workbench.extractive import extractive_summary; "
        "print(extractive_summary(generated_session(80), budget_tokens=500))"
    )
    outputs = set()
    for seed in ("1", "2"):  # string hashing differs between these processes
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)},
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.add(done.stdout)
    assert outputs == {extractive_summary(session, budget_tokens=500) + "\n"}


def test_a_transcript_read_again_takes_its_terms_from_the_memo_and_summarizes_the_same() -> None:
    """Split summaries of one cell read overlapping transcripts, and an experiment's configs the same
    session: the terms of a text read before come from the memo, and the summary is the same."""
    from workbench.extractive import _terms_of, clear_caches

    session = generated_session(60)
    clear_caches()
    first = extractive_summary(session, budget_tokens=400)
    computed = _terms_of.cache_info().misses
    assert extractive_summary(session, budget_tokens=400) == first
    assert _terms_of.cache_info().misses == computed and _terms_of.cache_info().hits >= computed
    clear_caches()
    assert _terms_of.cache_info().currsize == 0
    assert extractive_summary(session, budget_tokens=400) == first  # and so does a cold memo


# ------------------------------------------------------------------------------------------------
# how long: max_tokens, else what the request states, else the default


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("Summarize in at most 300 tokens.", 300),
        ("Keep it under 2,000 tokens", 2000),
        ("Write no more than 150 words.", 200),
        ("within 800 characters please", 200),
        ("Write a 600-word summary of the work.", 800),
        ("Summarize the conversation.", None),
        ("There were 300 tokens in the log", None),
    ],
)
def test_stated_budget(text: str, tokens: int | None) -> None:
    assert stated_budget([text]) == tokens


def test_a_custom_prompt_stating_a_length_changes_the_length() -> None:
    session = generated_session(200)
    transcript = render_transcript([Message.from_openai(m) for m in session[1:]])
    short = prompts.build_request("Condense this in at most 90 words.", transcript)
    long = prompts.build_request(prompts.SPLIT_PROMPT, transcript)
    assert summary_budget(short) == 120
    assert len(extractive_summary(short)) // 4 <= 120
    assert len(extractive_summary(long)) // 4 > 120
    assert summary_budget(short, 400) == 400  # max_tokens wins over the prompt
    assert len(extractive_summary(short, budget_tokens=400)) // 4 > 300


def test_an_agent_system_prompt_is_not_the_summarizer_s_length() -> None:
    native = [{"role": "system", "content": "Answer in at most 20 words."}, *generated_session(100)[1:]]
    assert summary_budget(native) == DEFAULT_BUDGET_TOKENS
    appended = [*native, {"role": "user", "content": prompts.STRUCTURED_PROMPT + " Use at most 300 tokens."}]
    assert summary_budget(appended) == 300


def test_default_budget_is_never_more_than_half_the_material() -> None:
    assert summary_budget(generated_session(400)) == DEFAULT_BUDGET_TOKENS
    small = [{"role": "user", "content": "x" * 800}]
    assert summary_budget(small) == 100  # 200 tokens of material


# ------------------------------------------------------------------------------------------------
# reading requests


def test_reads_strategy_requests_and_carries_existing_summary_forward() -> None:
    earlier = extractive_summary(CONVERSATION, budget_tokens=600)
    new = [
        Message(role="assistant", content="Moved ReplayState; now editing docs/guide.md"),
        Message(role="user", content="Finally, bump the version to 0.9.1"),
    ]
    request = prompts.build_request(prompts.PROGRESSIVE_PROMPT, render_transcript(new), earlier)
    summary = extractive_summary(request, budget_tokens=600)
    assert "maintain a running summary" not in summary  # instructions are not material
    for needle in ("src/workbench/replay.py", "ImportError", "docs/guide.md", "0.9.1"):
        assert needle in summary
    found = sections(summary)
    assert found["Last request"].strip() == "> Finally, bump the version to 0.9.1"
    assert TASK[:60] in found["Task"]  # the task the earlier summary carried, not the newest message
    assert "Moved ReplayState; now editing docs/guide.md" in found["Latest progress"]


def test_a_model_written_existing_summary_is_carried_forward() -> None:
    earlier = (
        "1. Primary Request: port the parser to Rust.\n2. Files and code:\n"
        "   - `crates/parser/src/lexer.rs`: the tokenizer, `TokenKind::Ident` added\n"
        "3. Errors: error[E0382]: borrow of moved value in parse_expr\n"
    )
    new = [Message(role="assistant", content="Now fixing parse_expr."), Message(role="user", content="go on")]
    summary = extractive_summary(
        prompts.build_request(prompts.SPLIT_PROMPT, render_transcript(new), earlier), budget_tokens=400
    )
    for needle in (
        "crates/parser/src/lexer.rs",
        "TokenKind::Ident",
        "error[E0382]: borrow of moved value",
        "parse_expr",
    ):
        assert needle in summary
    assert sections(summary)["Task"].strip() == "> port the parser to Rust."


def test_last_request_falls_back_to_the_existing_summary() -> None:
    earlier = extractive_summary(CONVERSATION, budget_tokens=600)
    request = prompts.build_request(
        prompts.SPLIT_PROMPT, render_transcript([Message(role="assistant", content="Working on it.")]), earlier
    )
    assert "> OK. Then update CHANGELOG.md" in extractive_summary(request, budget_tokens=600)


def test_native_conversation_with_the_prompt_appended() -> None:
    # summarize_full (001) sends the conversation itself with the instructions as a last user message
    request = [*CONVERSATION, {"role": "user", "content": prompts.STRUCTURED_PROMPT}]
    summary = extractive_summary(request, budget_tokens=600)
    assert sections(summary)["Last request"].strip().startswith("> OK. Then update CHANGELOG.md")
    assert "condense the working history" not in summary
    # a short request to summarize something is the user's, not instructions
    asked = [*CONVERSATION, {"role": "user", "content": "Summarize what failed."}]
    assert sections(extractive_summary(asked, budget_tokens=600))["Last request"].strip() == "> Summarize what failed."


def test_placeholder_prompt_and_transcript_parsing() -> None:
    transcript = render_transcript(
        [
            Message(role="user", content="Use tabs in Makefile"),
            Message(
                role="assistant",
                content=None,
                tool_calls=[{"id": "a", "function": {"name": "write_file", "arguments": '{"path": "build/rules.mk"}'}}],
            ),
            Message(role="tool", content="ok", tool_call_id="a", name="write_file"),
        ]
    )
    request = prompts.build_request("Summarize:\n{transcript}\nDone.", transcript)
    existing, blocks = read_input(request)
    assert existing == [] and [role for role, _ in blocks] == ["user", "assistant", "tool"]
    summary = extractive_summary(request, budget_tokens=200)
    assert "build/rules.mk" in summary and "Makefile" in summary and "Summarize:" not in summary


#: What the tags of a prompt hold, as a pattern: the reference `extractive._tagged` finds the same as.
TAG_PATTERNS = {tag: re.compile(rf"<{tag}>\n?(.*?)\n?</{tag}>", re.S) for tag in extractive._TAGS}
TAG_FRAGMENTS = [f"<{t}>" for t in extractive._TAGS] + [f"</{t}>" for t in extractive._TAGS] + ["\n", "\n\n", "x", "<"]


def _tagged_by_pattern(text: str) -> tuple[list[str], list[str], str]:
    outside = TAG_PATTERNS["existing_summary"].sub(" ", TAG_PATTERNS["transcript"].sub(" ", text))
    return TAG_PATTERNS["transcript"].findall(text), TAG_PATTERNS["existing_summary"].findall(text), outside


@pytest.mark.parametrize(
    "text",
    [
        "<transcript></transcript>",
        "<transcript>\n</transcript>",
        "<transcript>\n\n</transcript>",
        "a <transcript>\nbody\n</transcript> b <transcript>two</transcript> c",
        "<transcript>never closed",
        "</transcript><transcript>x</transcript></transcript>",
        "<transcript>a <existing_summary>b</existing_summary> c</transcript>",
        "<existing_summary>\n(none)\n</existing_summary>\n<transcript>\n[user]\nhi\n</transcript>\nNow.",
        "<existing_summary>a <transcript>b</existing_summary> c</transcript>",
        "no tags at all",
    ],
)
def test_tagged_material_is_what_the_tag_pattern_finds(text: str) -> None:
    found = extractive._tagged(text)
    assert (list(found.transcripts), list(found.existing), found.outside) == _tagged_by_pattern(text)


@settings(max_examples=400)
@given(text_around(TAG_FRAGMENTS))
def test_tagged_material_is_what_the_tag_pattern_finds_in_any_text(text: str) -> None:
    found = extractive._tagged(text)
    assert (list(found.transcripts), list(found.existing), found.outside) == _tagged_by_pattern(text)


@pytest.mark.parametrize(
    "messages, expected",
    [
        ([], "No conversation content to summarize."),
        ([{"role": "user", "content": "hello there"}], "## Task\n> hello there"),
        ([{"role": "assistant", "content": "just chatting"}], "## Latest progress\n- just chatting"),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "see the chart"},
                        {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
                    ],
                }
            ],
            "## Task\n> see the chart",
        ),
    ],
)
def test_edge_inputs(messages: list[dict[str, Any]], expected: str) -> None:
    assert extractive_summary(messages) == expected


# -- the guards that spare a scan: each lets through every text its pattern can match -------------

ERROR_LINES = text_around(pattern_words(extractive._ERROR) + list(extractive._ERROR_WORDS))
TERM_TEXTS = text_around(
    ["Foo", "FooBar", "barBaz", "snake_case", "__dunder__", "a.b", "os.path", "Rust::path", "call(", "get("]
    + ["gpt-4o", "spotter-dov.1", "issue-12", "f/2", "valid?/3", "12", "3.5", "-7", "$4", "10%", "deadbeef1"]
    + ["http", "https", "://", "http://example.com/a", "s://x"]
)
PLAIN_DECISION = without_lookahead(extractive._DECISION)


#: A line for each alternative of the error pattern.
ERRORS = [
    "Traceback (most recent call last):",
    "raise ValueError",
    "a KeyException",
    "2 FAILED",
    "ERROR in setup",
    "error: no such thing",
    "error[E0308]: mismatched types",
    "fatal: not a git repository",
    "panic: index out of range",
    "exit code 2",
    "exit status: 1",
    "non-zero exit",
    "exited with code 3",
    "Segmentation fault (core dumped)",
    "sh: foo: command not found",
    "[Errno 2] gone",
    "No such file or directory",
    "Permission denied",
]


@pytest.mark.parametrize("line", ERRORS)
def test_every_kind_of_error_line_is_searched(line: str) -> None:
    assert extractive._ERROR.search(line)
    assert any(word in line for word in extractive._ERROR_WORDS)


@given(ERROR_LINES)
def test_a_line_is_searched_for_errors_whenever_it_could_hold_one(line: str) -> None:
    if extractive._ERROR.search(line):
        assert any(word in line for word in extractive._ERROR_WORDS)


@pytest.mark.parametrize(
    ("text", "term"),
    [
        ("the FooBar class", "FooBar"),
        ("call fooBar now", "fooBar"),
        ("set max_tokens", "max_tokens"),
        ("see os.path here", "os.path"),
        ("use std::io now", "std::io"),
        ("then run2() again", "run2"),
        ("the handle/2 clause", "handle/2"),
        ("model gpt-4o answered", "gpt-4o"),
        ("bead spotter-dov.1 open", "spotter-dov.1"),
        ("commit 3f2a9c1 landed", "3f2a9c1"),
        ("docs at https://example.com/a/b.html", "https://example.com/a/b.html"),
        ("edit src/app.py now", "src/app.py"),
    ],
)
def test_each_kind_of_term_is_found(text: str, term: str) -> None:
    files, names = extractive._find_terms(text)
    assert term in files + names


PATH_TEXTS = text_around(
    ["src/app.py", "a/b", "./x", "../y/z", "~/.bashrc", "/etc/hosts", "setup.py", "x.tar.gz", "and/or", "v1.2"]
    + ["1/2", "e.g.", "foo@bar/baz", "a+b/c", "x:/y", "http://h/p", "Makefile", "README", "MyMakefile"]
    + ["\x1c", "\u2028", "\u00a0", "(", ")", ",", "`", '"', "'"]
)


@given(PATH_TEXTS)
def test_paths_searched_word_by_word_are_those_of_the_whole_text(text: str) -> None:
    assert list(extractive._path_matches(text)) == [m.group(0) for m in extractive._PATH.finditer(text)]


@given(TERM_TEXTS)
def test_a_term_pattern_is_skipped_only_on_text_it_cannot_match(text: str) -> None:
    for pattern, held in extractive._IDENT_PATTERNS:
        if pattern.search(text):
            assert held in text, pattern.pattern
    if extractive._URL.search(text):
        assert "://" in text
    if extractive._ARITY.search(text):
        assert extractive._SLASH_DIGIT.search(text)
    if extractive._DIGIT_NAME.search(text):
        assert "-" in text and extractive._DIGIT_NAME_HOLDS.search(text)
    if any(extractive._NUMBER_TOKEN.match(word) for word in text.split()):
        assert extractive._DIGIT.search(text)


#: The term patterns as they were written before their runs became possessive: the reference.
PLAIN_TERM_PATTERNS = [
    r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b",
    r"\b[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+\b",
    r"\b_{0,2}[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+_{0,2}\b",
    r"\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\b",
    r"\b[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)+\b",
    r"\b([A-Za-z_][A-Za-z0-9_]*)\(",
]


PLAIN_DIGIT_NAME = r"\b[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)+(?:\.\d+)+\b|\b[A-Za-z]+(?:-[A-Za-z0-9]+)*-\d[\w.]*\b"


def test_the_term_patterns_are_the_plain_ones_with_possessive_runs() -> None:
    assert [without_possessive(p).pattern for p, _ in extractive._IDENT_PATTERNS] == PLAIN_TERM_PATTERNS
    assert without_possessive(extractive._DIGIT_NAME).pattern == PLAIN_DIGIT_NAME


#: Terms of several parts, each of which may end against a letter outside ASCII (`_TRICKY`): where giving
#: back a part could matter.
PARTED_TERMS = text_around(
    ["a.b.c", "os.path.join", "a::b::c", "foo_bar_baz_", "__x__", "FooBarBaz", "fooBar2Baz"]
    + ["spotter-dov.1.2", "gpt-4o", "issue-12-b", "a-b-1.2", "x-1.y", "-3", ".4"]
)


@settings(max_examples=500)
@given(PARTED_TERMS)
def test_the_term_patterns_find_what_the_plain_ones_find(text: str) -> None:
    pairs = [
        *zip([p for p, _ in extractive._IDENT_PATTERNS], PLAIN_TERM_PATTERNS, strict=True),
        (extractive._DIGIT_NAME, PLAIN_DIGIT_NAME),
    ]
    for pattern, plain in pairs:
        assert [m.span() for m in pattern.finditer(text)] == [m.span() for m in re.finditer(plain, text)], plain


@given(text_around(pattern_words(extractive._DECISION)))
def test_the_decision_cue_finds_what_it_finds_without_its_lookahead(text: str) -> None:
    assert bool(extractive._DECISION.search(text)) == bool(PLAIN_DECISION.search(text))


def test_the_decision_cue_finds_each_of_its_words() -> None:
    assert lookahead_misses(extractive._DECISION) == []


def test_request_tokens_heuristic() -> None:
    assert request_tokens([{"role": "user", "content": "hello world"}]) == 2 + 4
    assert request_tokens([{"role": "user", "content": ""}, {"role": "user", "content": "hi"}]) == 4 + 5


# ------------------------------------------------------------------------------------------------
# it says what it is


@pytest.mark.parametrize(
    "model, expected",
    [
        ("workbench/extractive", True),
        ("WORKBENCH/extractive", True),
        ("openai/gpt-4o-mini", False),
        ("extractive", False),
        (None, False),
        ("", False),
    ],
)
def test_is_offline_baseline(model: str | None, expected: bool) -> None:
    assert is_offline_baseline(model) is expected


def test_label_says_it_is_not_a_model() -> None:
    assert "offline" in OFFLINE_BASELINE_LABEL and "not a model" in OFFLINE_BASELINE_LABEL


# ------------------------------------------------------------------------------------------------
# term retention against the summaries Claude Code recorded (../shared/sessions/claude-code)

_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./:@#-]*[A-Za-z0-9_]")
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,5}$")


def salient_terms(text: str) -> set[str]:
    """Paths, identifiers and numbers of a text, by a definition independent of the summarizer's own:
    a word with '/' that ends in an extension or has two '/'; a word with '_', a lower-to-upper
    case change, a dotted name, a file name, or a hyphen and a digit; else a word of 2+ characters with a digit."""
    terms = set()
    for match in _TOKEN.finditer(text):
        word = match.group(0)
        if "/" in word:
            if _EXTENSION.search(word) or word.count("/") >= 2:
                terms.add(word)
        elif (
            "_" in word
            or re.search(r"[a-z][A-Z]", word)
            or re.search(r"[A-Za-z]\.[A-Za-z]", word)
            or ("-" in word and re.search(r"\d", word))
        ):
            terms.add(word)
        elif re.search(r"\d", word) and len(word) >= 2:
            terms.add(word)
    return terms


#: Mean retention of the summarizer this one replaced, measured with `salient_terms` on the same
#: recordings at the recorded summaries' lengths (0.656-0.779 each; at its fixed ~1,200 tokens,
#: which it wrote whatever the budget, 0.430). This one: 0.82-0.93, mean 0.858.
RETENTION_BEFORE = 0.630


def test_term_retention_of_recorded_claude_code_summaries(shared_sessions: Path) -> None:
    import workbench as wb

    shares = []
    for path in sorted((shared_sessions / "claude-code").rglob("*.jsonl")):
        if "subagents" in path.parts:
            continue
        for session in wb.load(str(path)):
            for compaction in session.recorded_compactions:
                if not compaction.summary:
                    continue
                before = [m.to_openai() for m in session.messages[: compaction.message_index]]
                wanted = salient_terms(compaction.summary)
                summary = extractive_summary(before, budget_tokens=len(compaction.summary) // 4)
                assert len(summary) // 4 <= len(compaction.summary) // 4
                shares.append(sum(term in summary for term in wanted) / len(wanted))
    if not shares:
        pytest.skip("no recorded Claude Code compaction in the shared sessions")
    mean = sum(shares) / len(shares)
    print(f"term retention per recorded compaction: {[round(s, 3) for s in shares]}, mean {mean:.3f}")
    assert mean >= RETENTION_BEFORE + 0.15, shares
    assert min(shares) >= 0.75, shares
