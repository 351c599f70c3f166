"""Tokenizers and per-message token counts.

Three families, chosen by name:
- `heuristic`: len(text) // 4 with a floor of 1 for non-empty text (the reference designs' estimate);
- a tiktoken encoding (`cl100k_base`, `o200k_base`, `p50k_base`), loaded offline from the BPE
  files litellm ships (`workbench.offline.tiktoken_encoding`; a user's `TIKTOKEN_CACHE_DIR` wins);
- `litellm:<model>`: litellm's model-aware counter.

A message counts its text, its tool calls (name and arguments) and `MESSAGE_OVERHEAD` tokens of
framing. Counts are cached on the (immutable) message per tokenizer, so a replay counts each
message once however many calls it stays in the context.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from workbench.errors import ConfigError
from workbench.session import Message

MESSAGE_OVERHEAD = 4
IMAGE_TOKENS = 85
TIKTOKEN_ENCODINGS = ("cl100k_base", "o200k_base", "p50k_base")


@runtime_checkable
class Tokenizer(Protocol):
    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...

    def count_batch(self, texts: Sequence[str]) -> list[int]: ...


@dataclass(frozen=True)
class HeuristicTokenizer:
    """len/4, floor 1 for any non-empty text: "hello world" -> 2, "hi" -> 1, "" -> 0."""

    name: str = "heuristic"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return max(1, len(text) // 4)

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]


class TiktokenTokenizer:
    """A tiktoken encoding; batches use two threads (more is slower on small machines)."""

    def __init__(self, encoding_name: str):
        from workbench.offline import tiktoken_encoding

        self.name = encoding_name
        try:
            self._encoding = tiktoken_encoding(encoding_name)
        except Exception as exc:  # tiktoken raises bare ValueErrors and network errors
            raise ConfigError(
                f"tokenizer {encoding_name!r} cannot be loaded offline ({exc}); "
                f"available: heuristic, {', '.join(TIKTOKEN_ENCODINGS)}, litellm:<model>") from exc

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._encoding.encode_ordinary(text))

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        if len(texts) < 64:
            return [self.count(t) for t in texts]
        return [len(tokens) for tokens in self._encoding.encode_ordinary_batch(list(texts), num_threads=2)]


class LiteLLMTokenizer:
    """litellm's model-aware counter (`litellm.token_counter(model=..., text=...)`)."""

    def __init__(self, model: str):
        if not model:
            raise ConfigError("tokenizer 'litellm:<model>' needs a model name after the colon")
        self.name = f"litellm:{model}"
        self.model = model

    def count(self, text: str) -> int:
        if not text:
            return 0
        from workbench.offline import import_litellm

        return int(import_litellm(hub_offline=True).token_counter(model=self.model, text=text))

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]


@functools.cache
def get_tokenizer(name: str = "heuristic") -> Tokenizer:
    """The tokenizer called `name` (cached: tiktoken encodings are loaded once per process)."""
    if name in ("heuristic", "len/4", ""):
        return HeuristicTokenizer()
    if name.startswith("litellm:"):
        return LiteLLMTokenizer(name.partition(":")[2])
    if name in TIKTOKEN_ENCODINGS or name in ("r50k_base", "gpt2"):
        return TiktokenTokenizer(name)
    raise ConfigError(f"unknown tokenizer {name!r}; valid: heuristic, "
                      f"{', '.join(TIKTOKEN_ENCODINGS)}, litellm:<model>")


def resolve(tokenizer: str | Tokenizer) -> Tokenizer:
    return get_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer


def counted_text(message: Message) -> str:
    """The text a tokenizer sees for a message: its text content plus each tool call's name and arguments."""
    text = message.text
    if message.tool_calls:
        text = "\n".join([text, *(f"{c.name} {c.arguments}" for c in message.tool_calls)]) if text else \
            "\n".join(f"{c.name} {c.arguments}" for c in message.tool_calls)
    return text


def _image_parts(message: Message) -> int:
    content = message.content
    if not isinstance(content, tuple):
        return 0
    return sum(1 for p in content if p.get("type") in ("image_url", "image", "input_image"))


def message_tokens(message: Message, tokenizer: str | Tokenizer = "heuristic") -> int:
    """Tokens of one message including `MESSAGE_OVERHEAD`; computed once per message and tokenizer."""
    tok = resolve(tokenizer)
    cache = message._token_cache
    cached = cache.get(tok.name)
    if cached is None:
        cached = tok.count(counted_text(message)) + IMAGE_TOKENS * _image_parts(message) + MESSAGE_OVERHEAD
        cache[tok.name] = cached
    return cached


def prime(messages: Iterable[Message], tokenizer: str | Tokenizer = "heuristic") -> None:
    """Count every not-yet-counted message in one batch (fast path for tiktoken)."""
    tok = resolve(tokenizer)
    todo = [m for m in messages if tok.name not in m._token_cache]
    if not todo:
        return
    counts = tok.count_batch([counted_text(m) for m in todo])
    for message, count in zip(todo, counts, strict=True):
        message._token_cache[tok.name] = count + IMAGE_TOKENS * _image_parts(message) + MESSAGE_OVERHEAD


def messages_tokens(messages: Iterable[Message], tokenizer: str | Tokenizer = "heuristic") -> int:
    """Tokens of a message list: the sum of the cached per-message counts."""
    tok = resolve(tokenizer)
    return sum(message_tokens(m, tok) for m in messages)


def count_tokens(text_or_message: str | Message | dict | Iterable, tokenizer: str | Tokenizer = "heuristic") -> int:
    """Tokens of a text, a message (with its overhead) or a list of messages (sum of the messages)."""
    tok = resolve(tokenizer)
    if isinstance(text_or_message, str):
        return tok.count(text_or_message)
    if isinstance(text_or_message, Message):
        return message_tokens(text_or_message, tok)
    if isinstance(text_or_message, dict):
        return message_tokens(Message.from_openai(text_or_message), tok)
    from workbench.session import as_messages

    return messages_tokens(as_messages(text_or_message), tok)  # type: ignore[arg-type]  # str handled above
