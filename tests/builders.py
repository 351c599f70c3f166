"""Test data built in code: conversations, a scripted summarizer, and hypothesis strategies.

Importable from any test module (`from builders import ...`); fixtures wrapping these live in conftest.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from workbench.compaction import Completion
from workbench.errors import SummarizerError
from workbench.session import Message, ToolCall


def system(text: str = "You are a careful coding agent.") -> Message:
    return Message(role="system", content=text)


def user(text: str, **kw: Any) -> Message:
    return Message(role="user", content=text, **kw)


def assistant(text: str = "", calls: tuple[tuple[str, str], ...] = (), **kw: Any) -> Message:
    """An assistant message; `calls` are (call_id, tool_name) pairs."""
    tool_calls = tuple(
        ToolCall(id=cid, name=name, arguments=json.dumps({"path": f"src/{cid}.py"})) for cid, name in calls
    )
    return Message(role="assistant", content=text or None, tool_calls=tool_calls, **kw)


def tool(call_id: str, text: str, name: str = "read_file", **kw: Any) -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id, name=name, **kw)


def agent_turns(n_steps: int, *, result_chars: int = 200, start: int = 0) -> list[Message]:
    """`n_steps` assistant steps, each one tool call with its result (2 messages per step)."""
    out: list[Message] = []
    for i in range(start, start + n_steps):
        cid = f"c{i}"
        out.append(assistant(f"step {i}", calls=((cid, "read_file"),)))
        out.append(tool(cid, (f"result {i} " * result_chars)[:result_chars]))
    return out


def conversation(n_steps: int = 10, *, result_chars: int = 200) -> list[Message]:
    """system, user request, then `n_steps` tool-using assistant steps and a final answer."""
    return [
        system(),
        user("Fix the failing test in src/app.py"),
        *agent_turns(n_steps, result_chars=result_chars),
        assistant("Done: the test passes now."),
    ]


@dataclass
class ScriptedSummarizer:
    """A `Summarizer` double: returns scripted texts in order (or a default), records prompts.

    A scripted item that is an Exception instance is raised instead (as `SummarizerError`).
    """

    responses: list[Any] = field(default_factory=list)
    default: str = "SUMMARY: earlier work condensed."
    model: str = "scripted/test"
    prompts: list[list[dict[str, Any]]] = field(default_factory=list)

    def complete(self, messages, *, purpose="summary", max_tokens=None) -> Completion:
        self.prompts.append(messages)
        item = self.responses.pop(0) if self.responses else self.default
        if isinstance(item, Exception):
            raise SummarizerError(str(item))
        prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
        return Completion(
            text=item,
            model=self.model,
            input_tokens=prompt_chars // 4,
            output_tokens=max(1, len(item) // 4),
            cost_usd=0.0,
        )


#: Strategies that compact the small random conversations of `conversations` at a low threshold, one of each
#: family (windows, clearing, masking, summaries).
SMALL_STRATEGIES = st.sampled_from(
    [
        {"kind": "sliding_window", "window": 2},
        {"kind": "hard_clear", "keep_recent": 2},
        {"kind": "observation_masking", "keep_recent": 1},
        {"kind": "summarize_full"},
        {"kind": "summarize_progressive"},
    ]
)

#: The draws of `conversations`, built once: hypothesis validates a strategy object on its first draw, and
#: a list argument (unhashable) gave a new object, validated again, at every draw of every example.
_SYSTEM_PROMPTS = st.integers(0, 2)
_IMPORTANCE = st.sampled_from((0.0, 0.0, 0.0, 5.0, -3.0, 10.0))
_STEP_KIND = st.sampled_from(("user", "assistant", "tools", "tools", "text_action"))
_SIZE = st.sampled_from((5, 40, 400, 3000))
_CALLS_PER_STEP = st.integers(1, 3)
_TOOL_NAME = st.sampled_from(("read_file", "bash", "grep"))
_COIN = st.booleans()


@st.composite
def conversations(draw, max_steps: int = 25, interrupted: bool = False) -> list[Message]:
    """Random well-formed conversations: leading system, user turns, tool-using assistant steps,
    text actions answered by user observations (as mini-swe-agent's), some pinned messages, some
    multi-call steps, large and small results. `interrupted`: a system
    message sometimes sits between a call and its result (a reminder an agent injects), which makes
    the result a step of its own."""
    messages: list[Message] = []
    for i in range(draw(_SYSTEM_PROMPTS)):
        messages.append(system(f"system prompt {i}"))
    counter = 0
    for _ in range(draw(st.integers(0, max_steps))):
        importance = draw(_IMPORTANCE)
        kind = draw(_STEP_KIND)
        size = draw(_SIZE)
        if kind == "user":
            messages.append(user(f"request {counter} " + "u" * size, importance=importance))
        elif kind == "assistant":
            messages.append(assistant(f"thinking {counter} " + "a" * size, importance=importance))
        elif kind == "text_action":
            messages.append(assistant(f"```bash\nrun {counter}\n```", importance=importance))
            messages.append(user(f"<output>{counter} " + "o" * size + "</output>", observation=True))
        else:
            n_calls = draw(_CALLS_PER_STEP)
            ids = tuple((f"t{counter}_{j}", draw(_TOOL_NAME)) for j in range(n_calls))
            messages.append(assistant(f"calling {counter}", calls=ids, importance=importance))
            for cid, name in ids:
                if interrupted and draw(_COIN):
                    messages.append(system(f"reminder before {cid}"))
                messages.append(tool(cid, f"output of {cid} " + "r" * size, name=name))
        counter += 1
    return messages


#: Characters that change how a word reads to a pattern: case-folding letters (long s, the Kelvin sign,
#: dotted capital I), digits, separators of names and paths, white space.
_TRICKY = ("ſ", "K", "İ", "ß", "0", "7", "/", "-", "_", ".", ":", "::", "(", "[", "'", " ", "\n", "\t", "é")


def text_around(fragments: list[str]) -> st.SearchStrategy[str]:
    """Texts of `fragments` (each as written, upper-cased or title-cased) and tricky characters, in any order:
    what a pattern's guard (the text it needs, or a lookahead) is tested on."""
    pieces = st.sampled_from(sorted(set(fragments)))
    cased = st.tuples(pieces, st.sampled_from((str, str.upper, str.title))).map(lambda p: p[1](p[0]))
    return st.lists(st.one_of(cased, st.sampled_from(_TRICKY), st.text(max_size=3)), max_size=12).map("".join)


def without_lookahead(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """`pattern` with its first-letter lookahead `(?=[...])` taken out: the plain pattern a guarded one must equal."""
    plain = re.sub(r"\(\?=\[[a-z]+\]\)", "", pattern.pattern, count=1)
    assert plain != pattern.pattern, f"no first-letter lookahead in {pattern.pattern!r}"
    return re.compile(plain, pattern.flags)


def without_possessive(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """`pattern` with its possessive quantifiers (`*+`, `++`) made greedy: the plain pattern a possessive one
    must equal."""
    plain = re.sub(r"(?<=[*+?}])\+", "", pattern.pattern)
    return re.compile(plain, pattern.flags)


def pattern_words(pattern: re.Pattern[str]) -> list[str]:
    """The words a pattern's alternatives are made of (its letters, apostrophes and spaces, in runs)."""
    return [w.strip() for w in re.findall(r"[A-Za-z][A-Za-z' ]*", pattern.pattern.replace("?:", "")) if w.strip()]


def lookahead_misses(pattern: re.Pattern[str]) -> list[str]:
    """The spellings of `pattern`'s own words (as written, upper-cased, title-cased inside a sentence) on
    which it and its plain form (`without_lookahead`) disagree: a first letter its lookahead lacks."""
    plain = without_lookahead(pattern)
    return [
        text
        for word in pattern_words(pattern)
        for text in (word, word.upper(), f"so {word.title()} now")
        if bool(pattern.search(text)) != bool(plain.search(text))
    ]
