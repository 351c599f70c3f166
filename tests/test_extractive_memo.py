"""The offline summarizer's memo of what each block offers: summaries equal to the plain reference.

`extractive_summary` memoises the terms and candidate lines of every block it reads;
`reference_summary` reads every block afresh. On the requests a replay really makes (a
progressive summary's, over the recorded sessions beside the repo and a few corpus sessions) and
on native conversations, both give the same text, with the memo cold and warm.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from builders import conversation

from workbench import extractive, importers
from workbench.compaction import Completion
from workbench.extractive import clear_caches, extractive_summary, reference_summary
from workbench.replay import replay
from workbench.session import Session

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CORPUS = SHARED / "corpora" / "mini-swe-agent-gemini3" / "trajs"
CORPUS_SESSIONS = 3

#: The grid's summary config (experiments/complexity-trap.toml's llm-summary) and a tighter one that
#: compacts more often, so that the transcripts of consecutive summaries overlap.
SUMMARY_CONFIGS = (
    {
        "trigger": {"kind": "stat_threshold", "gauges": {"context_steps": 23}},
        "strategy": {"kind": "summarize_progressive", "keep_recent": 10},
    },
    {
        "trigger": {"kind": "stat_threshold", "gauges": {"context_steps": 12}},
        "strategy": {"kind": "summarize_split", "preserve": 0.4},
    },
)

Request = tuple[list[dict[str, Any]], int | None]


class RecordingSummarizer:
    """Answers as `workbench/extractive` does and keeps every request it was asked."""

    model = "workbench/extractive"

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def complete(
        self, messages: list[dict[str, Any]], *, purpose: str = "summary", max_tokens: int | None = None
    ) -> Completion:
        self.requests.append((messages, max_tokens))
        return Completion(text=extractive_summary(messages, budget_tokens=max_tokens), model=self.model)


def requests_of(sessions: Sequence[Session], configs: Sequence[dict[str, Any]] = SUMMARY_CONFIGS) -> list[Request]:
    """Per session: the whole as a native request (the default budget), and its replays' requests under `configs`."""
    requests: list[Request] = []
    for session in sessions:
        requests.append((session.to_openai(), None))
        for config in configs:
            recorder = RecordingSummarizer()
            replay(session, {**config, "tokenizer": "heuristic"}, summarizer=recorder, measure=False)
            requests += recorder.requests
    return requests


def outputs(summarize: Any, requests: Sequence[Request]) -> list[str]:
    return [summarize(messages, budget_tokens=budget) for messages, budget in requests]


def digest(texts: Sequence[str]) -> str:
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()


def assert_memo_matches_reference(requests: Sequence[Request]) -> None:
    expected = outputs(reference_summary, requests)
    clear_caches()
    cold = outputs(extractive_summary, requests)
    warm = outputs(extractive_summary, requests)
    for index, (want, got_cold, got_warm) in enumerate(zip(expected, cold, warm, strict=True)):
        assert got_cold == want, f"request {index}: the memoised summary (cold) differs from the reference"
        assert got_warm == want, f"request {index}: the memoised summary (warm) differs from the reference"
    assert digest(cold) == digest(warm) == digest(expected)


@pytest.mark.shared
@pytest.mark.slow
def test_memoised_summaries_equal_the_reference_on_the_shared_sessions(shared_sessions: Path) -> None:
    sessions = [s for result in importers.iter_load([shared_sessions]) for s in result.sessions]
    assert sessions
    requests = requests_of(sessions, SUMMARY_CONFIGS[:1])  # the grid's (the split config's many calls: below)
    assert sum(budget is not None for _, budget in requests) > len(sessions) / 4  # the replays' budgets too
    assert_memo_matches_reference(requests)


@pytest.mark.slow
def test_memoised_summaries_equal_the_reference_on_corpus_sessions() -> None:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpora/mini-swe-agent-gemini3 is not present")
    sessions = [
        s for name in sorted(p.name for p in CORPUS.iterdir())[:CORPUS_SESSIONS] for s in importers.load(CORPUS / name)
    ]
    requests = requests_of(sessions)
    assert len(requests) > 3 * len(sessions)  # the replays summarized
    assert_memo_matches_reference(requests)


def test_a_block_read_before_comes_from_the_memo() -> None:
    """A progressive summary's next transcript repeats blocks of the last: they are read once."""
    session = conversation(40, result_chars=800)
    recorder = RecordingSummarizer()
    replay(session, {**SUMMARY_CONFIGS[1], "context_limit": 8000, "max_output": 500}, summarizer=recorder)
    assert len(recorder.requests) >= 2
    clear_caches()
    first = outputs(extractive_summary, recorder.requests)
    read = extractive._block_items.cache_info()
    assert read.hits > 0  # later requests repeat blocks of earlier ones
    assert outputs(extractive_summary, recorder.requests) == first
    again = extractive._block_items.cache_info()
    assert again.misses == read.misses and again.hits == read.hits + read.misses + read.hits
    clear_caches()
    assert extractive._block_items.cache_info().currsize == 0


def test_the_memo_tells_a_tool_result_from_a_message_of_the_same_text() -> None:
    """A file listing's lines are events in an assistant's message, not in a tool result."""
    listing = "1\tdef handler():\n2\t    raise ValueError('bad input 42')\n3\t    # we must use 3 retries"
    clear_caches()
    answers = {}
    for role in ("tool", "assistant", "tool"):
        messages = [{"role": "user", "content": "Fix the handler in src/app.py"}, {"role": role, "content": listing}]
        answers[role] = extractive_summary(messages, budget_tokens=200)
        assert answers[role] == reference_summary(messages, budget_tokens=200)
    assert answers["tool"] != answers["assistant"]
