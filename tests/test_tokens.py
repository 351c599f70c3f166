"""Tokenizers and the per-message token cache."""

from __future__ import annotations

import subprocess
import sys

import pytest
from builders import assistant

import workbench as wb
from workbench.tokens import MESSAGE_OVERHEAD, message_tokens, messages_tokens, prime


@pytest.mark.parametrize("text, expected", [("hello world", 2), ("hi", 1), ("", 0), ("a" * 400, 100)])
def test_heuristic_matches_the_reference_examples(text, expected):
    assert wb.count_tokens(text) == expected


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base", "p50k_base"])
def test_tiktoken_encodings_load_offline(encoding):
    assert wb.count_tokens("hello world", encoding) == 2


def test_tiktoken_loads_in_a_fresh_process_without_network():
    code = "import workbench as wb; print(wb.count_tokens('The quick brown fox', 'o200k_base'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "NO_PROXY": "*",
                              "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"})
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
