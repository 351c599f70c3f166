"""Tokenizers and per-message token counts.

Three families, chosen by name:
- `heuristic`: len(text) // 4 with a floor of 1 for non-empty text (the reference designs' estimate);
- a tiktoken encoding (`cl100k_base`, `o200k_base`, `p50k_base`), loaded offline from the BPE
  files litellm ships (`workbench.offline.tiktoken_encoding`; a user's `TIKTOKEN_CACHE_DIR` wins);
- `litellm:<model>`: litellm's model-aware counter.

A message counts its text, its tool calls (name and arguments) and `MESSAGE_OVERHEAD` tokens of
framing. Counts are cached on the (immutable) message per tokenizer, so a replay counts each
message once however many calls it stays in the context; `prime` counts a whole session in one
batch, equal texts once, a tiktoken batch on every core.
"""

from __future__ import annotations

import functools
import heapq
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any, ClassVar, Protocol, runtime_checkable

from workbench.errors import ConfigError
from workbench.session import Message

#: The tokenizer a config counts with unless it names another (`ReplayConfig.tokenizer`'s default):
#: an import stores every message's count under it, other tokenizers' counts are stored on first use.
DEFAULT_TOKENIZER = "heuristic"
MESSAGE_OVERHEAD = 4
IMAGE_TOKENS = 85
TIKTOKEN_ENCODINGS = ("cl100k_base", "o200k_base", "p50k_base")
#: Below this many characters a batch is counted in the calling thread: handing a share to another
#: thread costs about 50 us, which two 2,000-character tool results already repay (0.29 ms against
#: 0.37 ms in one thread on this project's 2-core machine; 2.0 against 2.7 ms for fifteen of them,
#: what one truncation compaction of the largest shared recording counts).
PARALLEL_MIN_CHARS = 4_096


@runtime_checkable
class Tokenizer(Protocol):
    """Counts the tokens of texts. A tokenizer may also set `counts_in_constant_time = True` when a
    count costs less than finding equal texts (see `prime`)."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...

    def count_batch(self, texts: Sequence[str]) -> list[int]: ...


@dataclass(frozen=True)
class HeuristicTokenizer:
    """len/4, floor 1 for any non-empty text: "hello world" -> 2, "hi" -> 1, "" -> 0."""

    name: str = "heuristic"
    #: A count is a length: finding equal texts first (`prime`) would cost more than counting them all.
    counts_in_constant_time: ClassVar[bool] = True

    def count(self, text: str) -> int:
        if not text:
            return 0
        return max(1, len(text) // 4)

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]


class TiktokenTokenizer:
    """A tiktoken encoding. Large batches are counted on every available core (tiktoken releases the GIL)."""

    def __init__(self, encoding_name: str):
        from workbench.offline import tiktoken_encoding

        self.name = encoding_name
        try:
            self._encoding = tiktoken_encoding(encoding_name)
        except Exception as exc:  # tiktoken raises bare ValueErrors and network errors
            raise ConfigError(
                f"tokenizer {encoding_name!r} cannot be loaded offline ({exc}); "
                f"available: heuristic, {', '.join(TIKTOKEN_ENCODINGS)}, litellm:<model>"
            ) from exc

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._encoding.encode_ordinary(text))

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        """The counts of `texts`, in order: the texts are split into one share of about equal size per
        core, the calling thread counting one share itself; small batches are counted in this thread."""
        workers = min(_THREADS or usable_cpus(), len(texts))
        if workers < 2 or sum(map(len, texts)) < PARALLEL_MIN_CHARS:
            return [self.count(t) for t in texts]
        counts = [0] * len(texts)
        encode = self._encoding.encode_ordinary

        def count_share(indices: list[int]) -> None:
            for i in indices:
                counts[i] = len(encode(texts[i])) if texts[i] else 0

        shares = balanced_shares([len(t) for t in texts], workers)
        pending = [_executor().submit(count_share, share) for share in shares[1:]]
        count_share(shares[0])
        for future in pending:
            future.result()
        return counts


def balanced_shares(sizes: Sequence[int], n: int) -> list[list[int]]:
    """Indices of `sizes` split into `n` shares of about equal total size (largest first, each to the
    lightest share so far); no share is empty when there are at least `n` sizes."""
    shares: list[list[int]] = [[] for _ in range(n)]
    heap = [(0, k) for k in range(n)]
    for index in sorted(range(len(sizes)), key=sizes.__getitem__, reverse=True):
        load, k = heapq.heappop(heap)
        shares[k].append(index)
        heapq.heappush(heap, (load + sizes[index] + 1, k))
    return shares


_THREADS: int | None = None


def set_counting_threads(threads: int | None) -> None:
    """Cap the threads that count a large batch (None: one per core this process may run on).

    A process given a share of the machine sets its share, so that processes side by side do not
    oversubscribe the cores: a Ray worker running a cell that reserved one CPU counts on one thread.
    """
    global _THREADS
    _THREADS = None if threads is None else max(1, int(threads))


@functools.cache
def usable_cpus() -> int:
    """Cores this process may run on (its affinity where the platform tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@functools.cache
def _executor() -> ThreadPoolExecutor:
    """The worker threads of batched counting (created on first use, shared by every tokenizer)."""
    return ThreadPoolExecutor(max_workers=max(1, usable_cpus() - 1), thread_name_prefix="workbench-tokens")


if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads: it starts its own
    os.register_at_fork(after_in_child=_executor.cache_clear)


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
    raise ConfigError(f"unknown tokenizer {name!r}; valid: heuristic, {', '.join(TIKTOKEN_ENCODINGS)}, litellm:<model>")


def resolve(tokenizer: str | Tokenizer) -> Tokenizer:
    return get_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer


def counted_text(message: Message) -> str:
    """The text a tokenizer sees for a message: its text content plus each tool call's name and arguments."""
    text = message.text
    if message.tool_calls:
        text = (
            "\n".join([text, *(f"{c.name} {c.arguments}" for c in message.tool_calls)])
            if text
            else "\n".join(f"{c.name} {c.arguments}" for c in message.tool_calls)
        )
    return text


def image_parts(message: Message) -> int:
    """How many image parts the message's content holds (each counted as `IMAGE_TOKENS`)."""
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
        cached = tok.count(counted_text(message)) + IMAGE_TOKENS * image_parts(message) + MESSAGE_OVERHEAD
        cache[tok.name] = cached
    return cached


def prime(messages: Iterable[Message], tokenizer: str | Tokenizer = "heuristic") -> None:
    """Count every not-yet-counted message in one batch (parallel for tiktoken); equal texts are
    counted once, unless the tokenizer `counts_in_constant_time` (the heuristic, whose count is a
    length: hashing 100 MB of text to find equal ones took longer than counting them). The counts are
    those `message_tokens` gives."""
    tok = resolve(tokenizer)
    name = tok.name
    todo = uncounted(messages, tok)
    if not todo:
        return
    texts = [counted_text(m) for m in todo]
    if getattr(tok, "counts_in_constant_time", False):
        counts = tok.count_batch(texts)
    else:
        distinct = list(dict.fromkeys(texts))
        by_text = dict(zip(distinct, tok.count_batch(distinct), strict=True))
        counts = [by_text[text] for text in texts]
    for message, count in zip(todo, counts, strict=True):
        message._token_cache[name] = count + IMAGE_TOKENS * image_parts(message) + MESSAGE_OVERHEAD


def uncounted(messages: Iterable[Message], tokenizer: str | Tokenizer = DEFAULT_TOKENIZER) -> list[Message]:
    """The messages with no count cached under `tokenizer` (none read from the store, none counted yet)."""
    name = resolve(tokenizer).name
    return [m for m in messages if name not in m._token_cache]


def messages_tokens(messages: Iterable[Message], tokenizer: str | Tokenizer = "heuristic") -> int:
    """Tokens of a message list: the sum of the cached per-message counts."""
    tok = resolve(tokenizer)
    messages = messages if isinstance(messages, (list, tuple)) else list(messages)
    try:  # every count cached: one pass in C
        return sum(map(itemgetter(tok.name), map(_token_cache, messages)))
    except KeyError:
        return sum(message_tokens(m, tok) for m in messages)


_token_cache = attrgetter("_token_cache")


def count_tokens(
    text_or_message: str | Message | Mapping[str, Any] | Iterable[Any], tokenizer: str | Tokenizer = "heuristic"
) -> int:
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
