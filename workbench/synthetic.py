"""Synthetic datasets at scale: many sessions shaped like real agent recordings, streamed.

The bundled samples (`workbench.samples`) are a dozen rich sessions with planted facts; this module
makes the other kind of data a team meets: thousands of sessions and millions of messages, for
sizing the store, the listing and the experiment runner on one machine.

    from workbench import synthetic
    report = synthetic.generate_dataset("big.duckdb", sessions=10_000, messages=5_000_000)
    for session in synthetic.iter_sessions(sessions=50, messages=5_000): ...

    workbench generate --sessions 10000 --messages 5000000 --db big.duckdb

Shape, measured on the Claude Code and OpenHands recordings in the shared corpus: a system prompt
(most sessions), user turns, assistant turns that mostly make one tool call (sometimes 2-4 in
parallel, sometimes none) each answered by one `tool` message with the call's id; message sizes are
log-normal, tool outputs the heaviest-tailed (median ~240 characters, a 1 % tail beyond 20 kB);
every assistant message carries provider usage in `metadata["usage"]` whose cache-read part grows
with the conversation, as prompt caching makes it.

Everything is drawn from `random.Random` seeded with `(seed, session index)`, so session i is the
same whatever else is generated (given its message count). Session ids
(`<index, 7 digits>-<dataset>-<seed>`, e.g. `0000003-synthetic-7`; a negative seed is written `n3`)
name the dataset and the seed, so generating under another dataset name or another seed makes
other sessions, never ones already stored; within a dataset they sort in generation order and
differ within their first 8 bytes, the part of a string DuckDB keeps in its zone maps, so loading
one session reads only the row groups that hold it, not the whole table.

A dataset holds one generation: `generate_dataset` skips the sessions already stored (so an
interrupted generation is completed by running it again) and refuses, with `DatasetConflict`, a
dataset holding synthetic sessions that this generation would not make (other sizes or another
seed): generate those under another dataset name. Sessions are produced one at a time: nothing
holds more than the session being built, and the store writes them in bounded batches.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.errors import WorkbenchError
from workbench.session import Message, Session, ToolCall

if TYPE_CHECKING:
    from workbench.store import ImportReport, Store

DEFAULT_SEED = 7
DEFAULT_SESSIONS = 10_000
DEFAULT_MESSAGES = 5_000_000
DEFAULT_DATASET = "synthetic"
MIN_MESSAGES = 4
MAX_TEXT = 80_000  # a tool output longer than this is cut (agents truncate their tool outputs too)
_POOL_CHARS = 1 << 20


class DatasetConflict(WorkbenchError, ValueError):
    """The dataset already holds synthetic sessions that another generation made."""


@dataclass(frozen=True)
class Agent:
    """One kind of recorded agent: its tools and how its sessions are shaped."""

    name: str
    model: str
    tools: tuple[str, ...]
    share: float  # of all sessions
    system_prompt: float  # probability that a session starts with a system prompt
    parallel: float  # probability that a call-making turn makes 2-4 calls
    user_turn: float  # probability that a new user turn follows a reply without calls
    cached: bool  # prompt caching (usage splits into cache read / creation)


AGENTS: tuple[Agent, ...] = (
    Agent(
        "claude-code",
        "claude-sonnet-4-5-20250929",
        ("Read", "Bash", "Edit", "Grep", "Glob", "Write", "TodoWrite"),
        0.6,
        0.3,
        0.12,
        0.6,
        True,
    ),
    Agent(
        "openhands",
        "gpt-5-2025-08-07",
        ("execute_bash", "str_replace_editor", "think", "finish"),
        0.25,
        1.0,
        0.03,
        0.3,
        False,
    ),
    Agent("codex", "gpt-5-codex", ("shell", "apply_patch", "update_plan"), 0.15, 1.0, 0.05, 0.5, True),
)


@dataclass(frozen=True)
class Sizes:
    """Log-normal character counts: `median` and `sigma` (of the log), capped at `MAX_TEXT`."""

    median: float
    sigma: float
    floor: int = 1

    def draw(self, rng: random.Random) -> int:
        value = int(self.median * math.exp(rng.gauss(0.0, self.sigma)))
        return max(self.floor, min(MAX_TEXT, value))


# Fitted by eye to the claude-code and openhands recordings (p50 / p90 / p99 of characters).
TOOL_OUTPUT = Sizes(240, 1.9, 8)  # real: p50 127-238, p90 4.5-6k, p99 20-30k
ASSISTANT_TEXT = Sizes(160, 1.3, 4)  # real: p50 74-278, p90 0.5-1.8k
ARGUMENTS = Sizes(90, 0.8, 12)
USER_TEXT = Sizes(450, 1.1, 20)  # real: p50 370-1000, p90 1.5-3.3k
SYSTEM_TEXT = Sizes(5000, 0.4, 500)


def message_counts(
    sessions: int = DEFAULT_SESSIONS, messages: int = DEFAULT_MESSAGES, seed: int = DEFAULT_SEED
) -> list[int]:
    """How many messages each session gets: log-normal around the mean, summing to `messages`
    exactly, each at least `MIN_MESSAGES` (one int per session; never the messages themselves)."""
    if sessions < 1:
        raise ValueError(f"sessions must be at least 1, not {sessions}")
    if messages < MIN_MESSAGES * sessions:
        raise ValueError(
            f"messages must be at least {MIN_MESSAGES} per session "
            f"({MIN_MESSAGES * sessions} for {sessions} sessions), not {messages}"
        )
    rng = random.Random(f"counts:{seed}:{sessions}:{messages}")
    weights = [math.exp(rng.gauss(0.0, 0.8)) for _ in range(sessions)]
    spare = messages - MIN_MESSAGES * sessions
    total = sum(weights)
    shares = [spare * w / total for w in weights]
    counts = [MIN_MESSAGES + int(s) for s in shares]
    short = messages - sum(counts)
    by_remainder = sorted(range(sessions), key=lambda i: (int(shares[i]) - shares[i], i))
    for i in by_remainder[:short]:
        counts[i] += 1
    return counts


class _Text:
    """A pool of code, log and prose lines; a message's text is a slice of it after a unique head.

    Slicing one pool keeps generation fast (millions of messages) while the text still looks like
    tool output to a tokenizer and compresses like it in DuckDB.
    """

    WORDS = (
        "def",
        "return",
        "self",
        "import",
        "class",
        "value",
        "error",
        "config",
        "None",
        "True",
        "request",
        "response",
        "session",
        "token",
        "assert",
        "result",
        "path",
        "index",
        "status",
        "INFO",
        "DEBUG",
        "WARNING",
        "test",
        "passed",
        "failed",
        "raise",
        "await",
        "async",
        "yield",
        "context",
        "message",
        "buffer",
        "offset",
        "cache",
        "user",
        "tool",
        "call",
        "summary",
        "build",
        "deploy",
        "commit",
    )

    def __init__(self, seed: int):
        rng = random.Random(f"pool:{seed}")
        lines: list[str] = []
        size = 0
        while size < _POOL_CHARS:
            kind = rng.random()
            words = " ".join(rng.choice(self.WORDS) for _ in range(rng.randint(3, 12)))
            if kind < 0.4:
                line = f"{'    ' * rng.randint(0, 3)}{words}({rng.randint(0, 999)})"
            elif kind < 0.7:
                line = f"2025-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} {rng.choice(('INFO', 'WARN', 'ERROR'))} {words}"
            else:
                line = words.capitalize() + "."
            lines.append(line)
            size += len(line) + 1
        self.pool = "\n".join(lines)

    def take(self, rng: random.Random, head: str, chars: int) -> str:
        body = max(0, chars - len(head) - 1)
        if body == 0:
            return head[: max(1, chars)]
        start = rng.randrange(0, len(self.pool) - min(body, len(self.pool) - 1))
        text = self.pool[start : start + body]
        while len(text) < body:  # longer than the pool: wrap around
            text += "\n" + self.pool[: body - len(text) - 1]
        return f"{head}\n{text}"


_POOLS: dict[int, _Text] = {}


def _pool(seed: int) -> _Text:
    pool = _POOLS.get(seed)
    if pool is None:
        _POOLS.clear()  # one pool at a time (about 1 MB)
        pool = _POOLS[seed] = _Text(seed)
    return pool


def _pick_agent(rng: random.Random) -> Agent:
    edges = []
    total = 0.0
    for agent in AGENTS:
        total += agent.share
        edges.append(total)
    return AGENTS[min(len(AGENTS) - 1, bisect.bisect(edges, rng.random() * total))]


def generate_session(index: int, messages: int, seed: int = DEFAULT_SEED, dataset: str = DEFAULT_DATASET) -> Session:
    """Session number `index` of the dataset of `seed`, with exactly `messages` messages
    (at least `MIN_MESSAGES`); every tool call is answered by one tool message right after its turn."""
    if messages < MIN_MESSAGES:
        raise ValueError(f"a synthetic session needs at least {MIN_MESSAGES} messages, not {messages}")
    rng = random.Random(f"session:{seed}:{index}")
    text = _pool(seed)
    agent = _pick_agent(rng)
    out: list[Message] = []
    context_tokens = 0  # what the conversation holds, in rough tokens (4 characters each)
    cached_tokens = 0  # the prefix a provider cache already holds
    call_number = 0

    def add(message: Message, chars: int) -> None:
        nonlocal context_tokens
        out.append(message)
        context_tokens += chars // 4 + 4

    def assistant(calls: int) -> None:
        nonlocal cached_tokens, call_number
        reply = ASSISTANT_TEXT.draw(rng)
        tool_calls = []
        for _ in range(calls):
            call_number += 1
            name = rng.choice(agent.tools)
            size = ARGUMENTS.draw(rng)
            args = json.dumps({"arg": text.take(rng, f"{name} #{call_number}", size)})
            tool_calls.append(ToolCall(id=f"call_{index}_{call_number}", name=name, arguments=args))
        content = (
            text.take(rng, f"Step {len(out)}: {'checking' if calls else 'done'}", reply)
            if (not calls or rng.random() < 0.55)
            else None
        )
        output_tokens = (reply if content else 0) // 4 + sum(len(c.arguments) for c in tool_calls) // 4 + 1
        if agent.cached:
            usage = {
                "input_tokens": rng.randint(1, 12),
                "cache_read_input_tokens": cached_tokens,
                "cache_creation_input_tokens": max(0, context_tokens - cached_tokens),
                "output_tokens": output_tokens,
            }
            cached_tokens = context_tokens
        else:
            usage = {
                "input_tokens": context_tokens,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
                "output_tokens": output_tokens,
            }
        metadata = {"usage": usage, "model": agent.model, "finish_reason": "tool_calls" if calls else "stop"}
        add(
            Message(role="assistant", content=content, tool_calls=tuple(tool_calls), metadata=metadata),
            (reply if content else 0) + sum(len(c.arguments) for c in tool_calls),
        )
        for call in tool_calls:
            size = TOOL_OUTPUT.draw(rng)
            add(
                Message(
                    role="tool",
                    content=text.take(rng, f"[{call.name} output]", size),
                    tool_call_id=call.id,
                    name=call.name,
                ),
                size,
            )

    def user() -> None:
        size = USER_TEXT.draw(rng)
        add(Message(role="user", content=text.take(rng, f"Request {len(out)}:", size)), size)

    if rng.random() < agent.system_prompt:
        size = SYSTEM_TEXT.draw(rng)
        add(Message(role="system", content=text.take(rng, f"You are {agent.name}, a coding agent.", size)), size)
    user()
    while len(out) < messages:
        left = messages - len(out)
        if left == 1:
            assistant(0)
        elif left <= 5:
            assistant(left - 1)  # the last turn fills the count exactly, its calls answered
        elif out[-1].role == "assistant" and not out[-1].tool_calls:
            if rng.random() < agent.user_turn:
                user()
            else:
                assistant(1)
        else:
            if rng.random() < 0.08:
                assistant(0)
            elif rng.random() < agent.parallel:
                assistant(min(left - 1, rng.randint(2, 4)))
            else:
                assistant(1)
    return Session(
        messages=tuple(out),
        id=session_id(index, seed, dataset),
        dataset=dataset,
        format="synthetic",
        tools=tuple(
            {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}} for name in agent.tools
        ),
        metadata={
            "generator": "workbench.synthetic",
            "seed": seed,
            "index": index,
            "agent": agent.name,
            "model": agent.model,
        },
    )


def session_id(index: int, seed: int = DEFAULT_SEED, dataset: str = DEFAULT_DATASET) -> str:
    """The id of session `index` generated with `seed` under the name `dataset`:
    `<index, 7 digits>-<dataset>-<seed>`, the seed written `n<-seed>` when negative (so the part after
    the last `-` is always the seed, whatever `-` the dataset name holds)."""
    return f"{index:07d}-{dataset}-{seed if seed >= 0 else f'n{-seed}'}"


def iter_sessions(
    sessions: int = DEFAULT_SESSIONS,
    messages: int = DEFAULT_MESSAGES,
    seed: int = DEFAULT_SEED,
    dataset: str = DEFAULT_DATASET,
) -> Iterator[Session]:
    """The dataset's sessions one at a time, in index order (`messages` in total)."""
    for index, count in enumerate(message_counts(sessions, messages, seed)):
        yield generate_session(index, count, seed, dataset)


def check_dataset(
    store: Store,
    sessions: int = DEFAULT_SESSIONS,
    messages: int = DEFAULT_MESSAGES,
    *,
    seed: int = DEFAULT_SEED,
    dataset: str = DEFAULT_DATASET,
) -> None:
    """Raise `DatasetConflict` when `dataset` holds a synthetic session that this generation would
    not make (another seed, other sizes, an id of an older version): a dataset holds one generation.
    Sessions it would make (same id, same message count, so the same content) are fine: they are
    what an interrupted run of the same generation left, and re-running skips them."""
    counts = message_counts(sessions, messages, seed)
    stored = stored_messages = foreign = 0
    seeds: set[int] = set()
    for sid, count, metadata in store.session_metadata(dataset, ("index", "seed"), format="synthetic"):
        index, their_seed = _whole_number(metadata["index"]), _whole_number(metadata["seed"])
        stored += 1
        stored_messages += count
        if their_seed is not None:
            seeds.add(their_seed)
        if (
            index is None
            or not 0 <= index < sessions
            or count != counts[index]
            or sid != session_id(index, seed, dataset)
        ):
            foreign += 1
    if foreign:
        seed_text = ", ".join(str(s) for s in sorted(seeds)) or "unknown"
        raise DatasetConflict(
            f"dataset {dataset!r} already holds {stored} synthetic session{'s' * (stored != 1)} ({stored_messages} "
            f"messages, seed {seed_text}) from another generation than this one ({sessions} sessions, {messages} "
            f"messages, seed {seed}); a dataset holds one generation: generate into another dataset name, "
            "or repeat the sizes and seed of the first generation to complete it"
        )


def _whole_number(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def generate_dataset(
    db: str | os.PathLike[str] | Store,
    sessions: int = DEFAULT_SESSIONS,
    messages: int = DEFAULT_MESSAGES,
    *,
    seed: int = DEFAULT_SEED,
    dataset: str = DEFAULT_DATASET,
    memory_limit: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Generate the dataset straight into the database (a path, or an open `Store`) and return
    the import report. Sessions stream through the store's batch writer, so memory holds one batch
    (about `Store.batch_messages` messages) plus the session being generated. `progress(sessions
    done, messages done)` is called after each session is handed to the writer. Sessions already
    stored are skipped, so an interrupted generation can simply be re-run; a dataset holding
    synthetic sessions of another generation (other sizes or seed) raises `DatasetConflict`
    (`check_dataset`) before anything is written."""
    from workbench.store import Store

    def stream() -> Iterator[Session]:
        done_messages = 0
        for number, session in enumerate(iter_sessions(sessions, messages, seed, dataset), start=1):
            yield session
            done_messages += len(session.messages)
            if progress is not None:
                progress(number, done_messages)

    description = (
        f"Synthetic agent sessions ({sessions} sessions, {messages} messages, seed {seed}; workbench generate)"
    )

    def generate(store: Store) -> ImportReport:
        check_dataset(store, sessions, messages, seed=seed, dataset=dataset)
        report = store.import_sessions(stream(), dataset=dataset)
        store.describe_dataset(dataset, description)
        return report

    if isinstance(db, Store):
        return generate(db)
    with Store(db, memory_limit=memory_limit) as store:
        return generate(store)


def write_jsonl(
    path: str | os.PathLike[str],
    sessions: int = DEFAULT_SESSIONS,
    messages: int = DEFAULT_MESSAGES,
    *,
    seed: int = DEFAULT_SEED,
    dataset: str = DEFAULT_DATASET,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write the dataset as workbench JSONL (gzip when the name ends in .gz), one session per line,
    for `workbench import`, which streams it back line by line. The file appears whole or not at
    all (it is written beside and renamed); `progress` as in `generate_dataset`."""
    from workbench.samples import session_record

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    opener: Any = gzip.open if target.suffix == ".gz" else open
    done_messages = 0
    try:
        with opener(partial, "wt", encoding="utf-8") as handle:
            for number, session in enumerate(iter_sessions(sessions, messages, seed, dataset), start=1):
                handle.write(json.dumps(session_record(session), ensure_ascii=False) + "\n")
                done_messages += len(session.messages)
                if progress is not None:
                    progress(number, done_messages)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)
    return target
