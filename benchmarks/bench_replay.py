"""Replay benchmark: a generated 2,000-call session with large tool outputs.

(a) speedup of the incremental engine over the naive engine that recounts the whole context at
    every call (their results are asserted equal) — goal >= 50x;
(b) replay time over the floor, one pass summing the cached per-message counts — goal <= 5x;
(c) replayed calls per second.
"""

from __future__ import annotations

import random
import time

from benchmarks.naive_replay import naive_replay
from workbench.replay import replay
from workbench.session import Message, Session, ToolCall
from workbench.tokens import message_tokens, prime

CALLS = 2000
TOKENIZER = "cl100k_base"
WORDS = ("def", "return", "self", "import", "config", "value", "error", "path", "user", "session", "token",
         "assert", "result", "None", "for", "in", "if", "else", "raise", "ValueError", "src/app/models.py",
         "0x1f", "42", "True", "response", "request", "json", "parse", "line", "count", "=", "(", ")", ":")
CONFIGS = {
    "window-50": {"trigger": {"kind": "utilization", "ratio": 0.8},
                  "strategy": {"kind": "sliding_window", "window": 50}},
    "masking-20": {"trigger": {"kind": "utilization", "ratio": 0.7},
                   "strategy": {"kind": "pipeline", "steps": [{"kind": "observation_masking", "keep_recent": 20},
                                                              {"kind": "sliding_window", "window": 300}]}},
    "truncate+window": {"trigger": {"kind": "guard", "warn_threshold": 0.8, "hard_limit": 120_000},
                        "strategy": {"kind": "pipeline", "steps": [
                            {"kind": "tool_result_truncation", "max_chars": 2000},
                            {"kind": "sliding_window", "window": 80}]}},
}


def _text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)[:chars]


def generate_session(calls: int = CALLS, seed: int = 7) -> Session:
    """System prompt, a user request every ~25 calls, one tool call per call with a 0.3-8 KB result."""
    rng = random.Random(seed)
    messages = [Message(role="system", content="You are a coding agent. " + _text(rng, 1500))]
    for i in range(calls):
        if i % 25 == 0:
            messages.append(Message(role="user", content=f"Task {i // 25}: " + _text(rng, 300)))
        call_id = f"call_{i}"
        tool_name = rng.choice(["read_file", "grep", "run_tests", "bash"])
        messages.append(Message(role="assistant", content=_text(rng, rng.randint(40, 400)),
                                tool_calls=(ToolCall(call_id, tool_name, f'{{"arg": "{i}"}}'),)))
        size = rng.choice([300, 800, 1500, 3000, 8000])
        messages.append(Message(role="tool", content=_text(rng, size), tool_call_id=call_id, name=tool_name))
    return Session.from_messages(messages, dataset="bench")


def _timed(fn):
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def _fresh(session: Session) -> Session:
    """A copy whose messages have empty token caches (so each engine pays its own counting)."""
    return Session.from_messages([m.replace() for m in session.messages], dataset=session.dataset)


def run() -> None:
    session = generate_session()
    size_mb = sum(len(m.text) for m in session.messages) / 1e6
    print(f"session: {session.calls} calls, {len(session.messages)} messages, {size_mb:.1f} MB of text, "
          f"tokenizer {TOKENIZER}")
    base = {"tokenizer": TOKENIZER, "context_limit": 128_000, "max_output": 8_000}
    for name, spec in CONFIGS.items():
        config = base | spec
        fast, fast_s = _timed(lambda: replay(_fresh(session), config))  # noqa: B023
        slow, slow_s = _timed(lambda: naive_replay(_fresh(session), config))  # noqa: B023
        assert fast.calls == slow.calls and fast.metrics == slow.metrics, f"{name}: engines disagree"

        primed = _fresh(session)
        prime(primed.messages, TOKENIZER)
        floor_runs, replay_runs = [], []
        for _ in range(5):
            floor_runs.append(_timed(lambda: sum(message_tokens(m, TOKENIZER) for m in primed.messages))[1])  # noqa: B023
            replay_runs.append(_timed(lambda: replay(primed, config))[1])  # noqa: B023
        floor_s, warm_s = min(floor_runs), min(replay_runs)
        print(f"[{name}] {fast.metrics['compactions']} compactions, peak {fast.metrics['peak_context_tokens']} tokens")
        print(f"  (a) speedup over naive recount: {slow_s / fast_s:.0f}x  (naive {slow_s:.2f} s, "
              f"incremental {fast_s:.2f} s incl. counting; goal >= 50x)")
        print(f"  (b) replay over floor: {warm_s / floor_s:.1f}x  (replay {warm_s * 1e3:.1f} ms, "
              f"floor {floor_s * 1e3:.1f} ms with cached counts; goal <= 5x)")
        print(f"  (c) replayed calls per second: {len(fast.calls) / warm_s:,.0f} (cached counts), "
              f"{len(fast.calls) / fast_s:,.0f} (cold, incl. tokenizing)")


if __name__ == "__main__":
    run()
