"""Tokenizers and the per-message token cache."""

from __future__ import annotations

import subprocess
import sys

import pytest
from builders import assistant

import workbench as wb
from workbench.tokens import (
    MESSAGE_OVERHEAD,
    PARALLEL_MIN_CHARS,
    HeuristicTokenizer,
    balanced_shares,
    message_tokens,
    messages_tokens,
    prime,
)


@pytest.mark.parametrize("text, expected", [("hello world", 2), ("hi", 1), ("", 0), ("a" * 400, 100)])
def test_heuristic_matches_the_reference_examples(text, expected):
    assert wb.count_tokens(text) == expected


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base", "p50k_base"])
def test_tiktoken_encodings_load_offline(encoding):
    assert wb.count_tokens("hello world", encoding) == 2


def test_tiktoken_loads_in_a_fresh_process_without_network():
    code = "import workbench as wb; print(wb.count_tokens('The quick brown fox', 'o200k_base'))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": "/tmp",
            "NO_PROXY": "*",
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "HTTP_PROXY": "http://127.0.0.1:9",
        },
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "4"


def test_message_counts_include_tool_calls_and_overhead():
    message = assistant("", calls=(("c1", "read_file"),))
    text = f"read_file {message.tool_calls[0].arguments}"
    assert message_tokens(message) == wb.count_tokens(text) + MESSAGE_OVERHEAD
    assert wb.count_tokens(message.to_openai()) == message_tokens(message)


def test_counts_are_cached_per_tokenizer():
    message = wb.Message(role="user", content="x" * 4000)
    assert message_tokens(message) == 1000 + MESSAGE_OVERHEAD
    assert message._token_cache == {"heuristic": 1000 + MESSAGE_OVERHEAD}
    message_tokens(message, "cl100k_base")
    assert set(message._token_cache) == {"heuristic", "cl100k_base"}


def test_prime_batches_the_same_counts_as_one_by_one():
    texts = [f"line {i} " * (i % 17 + 1) for i in range(200)]
    batched = [wb.Message(role="user", content=t) for t in texts]
    single = [wb.Message(role="user", content=t) for t in texts]
    prime(batched, "cl100k_base")
    assert [m._token_cache["cl100k_base"] for m in batched] == [message_tokens(m, "cl100k_base") for m in single]
    assert messages_tokens(batched, "cl100k_base") == sum(message_tokens(m, "cl100k_base") for m in single)


def test_unknown_tokenizer_lists_the_valid_ones():
    with pytest.raises(wb.ConfigError, match="valid: heuristic"):
        wb.get_tokenizer("sentencepiece")


class CountingTokenizer:
    """len/4 that records every batch it is asked to count."""

    name = "counting"

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def count(self, text: str) -> int:
        return len(text) // 4

    def count_batch(self, texts):
        self.batches.append(list(texts))
        return [self.count(t) for t in texts]


def test_prime_counts_equal_texts_once_and_only_uncounted_messages():
    tok = CountingTokenizer()
    messages = [wb.Message(role="tool", content="same output " * 50, tool_call_id=f"c{i}") for i in range(5)]
    messages.append(wb.Message(role="user", content="another text"))
    prime(messages[:1], tok)
    prime(messages, tok)
    assert tok.batches == [["same output " * 50], ["same output " * 50, "another text"]]
    assert [m._token_cache["counting"] for m in messages] == [150 + MESSAGE_OVERHEAD] * 5 + [3 + MESSAGE_OVERHEAD]


class ConstantTimeCountingTokenizer(CountingTokenizer):
    """A tokenizer whose count is a length, so `prime` skips looking for equal texts."""

    counts_in_constant_time = True


def test_prime_counts_every_text_as_it_comes_when_a_count_costs_constant_time():
    tok = ConstantTimeCountingTokenizer()
    messages = [wb.Message(role="tool", content="same output " * 50, tool_call_id=f"c{i}") for i in range(3)]
    messages.append(wb.Message(role="user", content="another text"))
    prime(messages, tok)
    assert tok.batches == [["same output " * 50] * 3 + ["another text"]]
    assert [m._token_cache["counting"] for m in messages] == [150 + MESSAGE_OVERHEAD] * 3 + [3 + MESSAGE_OVERHEAD]
    assert HeuristicTokenizer.counts_in_constant_time


@pytest.mark.parametrize("sizes, n", [([5, 1, 1, 1, 1, 1], 2), ([3] * 7, 3), ([10], 2), ([], 2), ([0, 0, 9, 4], 4)])
def test_balanced_shares_split_every_index_once_into_even_loads(sizes, n):
    shares = balanced_shares(sizes, n)
    assert len(shares) == n
    assert sorted(i for share in shares for i in share) == list(range(len(sizes)))
    loads = [sum(sizes[i] for i in share) for share in shares]
    assert max(loads) - min(loads) <= max(sizes, default=0)


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_parallel_batches_count_exactly_as_one_by_one(encoding):
    texts = [f"def f_{i}(x):\n    return x * {i}  # ünïcode ✓\n" * (i % 40 + 1) for i in range(300)]
    texts += ["", "\ud800 lone surrogate"]
    assert sum(map(len, texts)) > PARALLEL_MIN_CHARS
    tok = wb.get_tokenizer(encoding)
    assert tok.count_batch(texts) == [tok.count(t) for t in texts]


def test_a_process_given_one_cpu_counts_a_large_batch_on_its_own_thread(monkeypatch):
    from workbench import tokens

    texts = [f"value_{i} = compute({i})\n" * 200 for i in range(40)]
    assert sum(map(len, texts)) > PARALLEL_MIN_CHARS
    tok = wb.get_tokenizer("cl100k_base")
    expected = [tok.count(t) for t in texts]

    def no_pool():
        raise AssertionError("a one-CPU share must not hand counting to other threads")

    monkeypatch.setattr(tokens, "_executor", no_pool)
    monkeypatch.setattr(tokens, "usable_cpus", lambda: 4)
    tokens.set_counting_threads(1)
    try:
        assert tok.count_batch(texts) == expected
    finally:
        tokens.set_counting_threads(None)
    with pytest.raises(AssertionError, match="one-CPU share"):
        tok.count_batch(texts)  # without the cap, four cores: the batch goes to the pool
