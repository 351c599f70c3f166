"""Summarizing strategies: progressive (000), full (001), split (002), adaptive chunking (003), handoff.

Unit tests use `ScriptedSummarizer`; one test goes through a real `litellm.completion` call to the
offline `workbench/extractive` provider via a small Summarizer adapter defined here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from builders import ScriptedSummarizer, agent_turns, assistant, conversations, system, tool, user
from hypothesis import HealthCheck, given, settings

from workbench.compaction import CompactionEnv, Completion, Context
from workbench.errors import ConfigError, SummarizerError
from workbench.registry import build_strategy, spec_of
from workbench.session import Message, group_steps, tool_pairing_problems
from workbench.strategies import keep_last_fraction, prompts
from workbench.strategies.summaries import (
    AFTER_TOOLS_TEXT,
    TOOL_NO_RESPONSE,
    clean_history,
    is_acknowledgement,
    last_user_request,
    split_index,
)

# ------------------------------------------------------------------------------------------------
# helpers


def run(spec: Any, messages: list[Message], summarizer: Any = None, **env_kw: Any):
    strategy = build_strategy(spec)
    env = CompactionEnv(summarizer=summarizer if summarizer is not None else ScriptedSummarizer(), **env_kw)
    return strategy.compact(Context(tuple(messages)), env), env


def synthetic(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.origin == "compacted_synthetic"]


def prompt_text(request: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in request)


def transcript_of(request: list[dict[str, Any]]) -> str:
    text = prompt_text(request)
    start = text.index("<transcript>")
    return text[start : text.index("</transcript>", start)]


def check_invariants(before: list[Message], after: list[Message]) -> None:
    """System prefix kept, pinned kept, no orphaned tool traffic, kept messages are the same objects."""
    ids = {id(m) for m in before}
    system_prefix = Context(tuple(before)).system
    assert after[: len(system_prefix)] == system_prefix
    assert all(a is b for a, b in zip(after, system_prefix, strict=False))
    after_ids = {id(m) for m in after}
    for message in before:
        if message.pinned:
            assert id(message) in after_ids, f"pinned message dropped: {message.text[:40]}"
    for message in after:
        assert id(message) in ids or message.origin != "original", "a new message must not claim to be original"
    if not tool_pairing_problems(before):
        assert tool_pairing_problems(after) == []


def iteration(i: int, *, pinned: bool = False, text: str | None = None) -> list[Message]:
    """One agent iteration (an assistant tool call and its result)."""
    importance = 10.0 if pinned else 0.0
    cid = f"it{i}"
    return [
        assistant(text or f"iteration {i}: reading module_{i}", calls=((cid, "read_file"),), importance=importance),
        tool(cid, f"contents of src/module_{i}.py", importance=importance),
    ]


def prior_summary(text: str) -> Message:
    return Message(role="user", content=text, origin="compacted_synthetic", metadata={"compaction": "summary"})


IMAGE_USER = Message(
    role="user",
    content=[
        {"type": "text", "text": "look at this latency chart"},
        {"type": "image_url", "image_url": {"url": "https://img.example/chart.png"}},
    ],
)


# ------------------------------------------------------------------------------------------------
# summarize_progressive: gent's 11 cases (000, Phase 5.2)


@dataclass
class ProgressiveCase:
    name: str
    body: list[Message]
    keep_recent: int = 0
    prompt: str = ""
    response: Any = "Running summary: modules were read."
    error: str = ""
    unchanged: bool = False
    steps: int | None = None  # steps in the result body
    synthetic: int | None = None  # compacted_synthetic messages
    kept_originals: int | None = None  # unpinned original steps kept
    pinned: int | None = None  # pinned steps kept
    summary_contains: str = ""
    prompt_contains: list[str] = field(default_factory=list)
    prompt_excludes: list[str] = field(default_factory=list)
    completions: int | None = None


def _iterations(n: int, start: int = 0) -> list[Message]:
    return [m for i in range(start, start + n) for m in iteration(i)]


PROGRESSIVE_CASES = [
    ProgressiveCase("1 nothing to summarize (empty)", body=[], unchanged=True, completions=0),
    ProgressiveCase("2 all within keep_recent", body=_iterations(3), keep_recent=5, unchanged=True, completions=0),
    ProgressiveCase(
        "3 pure progressive",
        body=[*_iterations(2), *iteration(2, pinned=True), *_iterations(3, 3)],
        steps=2,
        synthetic=1,
        kept_originals=0,
        pinned=1,
        summary_contains="Running summary",
    ),
    ProgressiveCase(
        "4 hybrid keep_recent=3",
        keep_recent=3,
        body=[*_iterations(1), *iteration(1, pinned=True), *_iterations(5, 2)],
        steps=5,
        synthetic=1,
        kept_originals=3,
        pinned=1,
    ),
    ProgressiveCase(
        "5 existing summary fed back and replaced",
        body=[prior_summary("EARLIER: the port is 8443"), *_iterations(3)],
        steps=1,
        synthetic=1,
        kept_originals=0,
        pinned=0,
        response="merged summary",
        summary_contains="merged summary",
        prompt_contains=["<existing_summary>", "EARLIER: the port is 8443", "iteration 2"],
    ),
    ProgressiveCase(
        "6 pinned preserved, not summarized",
        body=[*_iterations(2), *iteration(9, pinned=True, text="PINNED-SECRET decision"), *_iterations(2, 2)],
        steps=2,
        synthetic=1,
        kept_originals=0,
        pinned=1,
        prompt_contains=["iteration 0", "iteration 3"],
        prompt_excludes=["PINNED-SECRET"],
    ),
    ProgressiveCase(
        "7 multi-modal parts dropped",
        body=[user("TASK: speed up the API"), IMAGE_USER, *_iterations(2)],
        steps=2,
        synthetic=1,
        prompt_contains=["look at this latency chart"],
        prompt_excludes=["img.example", "image_url"],
    ),
    ProgressiveCase(
        "8 text-only iterations fully extracted",
        body=_iterations(3),
        steps=1,
        synthetic=1,
        prompt_contains=[
            "iteration 0",
            "iteration 1",
            "iteration 2",
            "src/module_2.py",
            "(none: this is the first time",
        ],
    ),
    ProgressiveCase(
        "9 model error", body=_iterations(3), response=RuntimeError("model exploded"), error="model exploded"
    ),
    ProgressiveCase(
        "10 custom prompt",
        body=_iterations(2),
        prompt="CUSTOM: keep only file names.",
        steps=1,
        synthetic=1,
        prompt_contains=["CUSTOM: keep only file names."],
    ),
    ProgressiveCase("11 token tracking", body=_iterations(4), response="short summary", completions=1),
]


@pytest.mark.parametrize("case", PROGRESSIVE_CASES, ids=lambda c: c.name)
def test_summarize_progressive(case: ProgressiveCase) -> None:
    messages = [system(), *case.body]
    summarizer = ScriptedSummarizer(responses=[case.response])
    spec = {"kind": "summarize_progressive", "keep_recent": case.keep_recent, "prompt": case.prompt}
    if case.error:
        with pytest.raises(SummarizerError, match=case.error):
            run(spec, messages, summarizer)
        return
    result, env = run(spec, messages, summarizer)
    check_invariants(messages, result)
    if case.unchanged:
        assert result == messages and all(a is b for a, b in zip(result, messages, strict=False))
    body_steps = group_steps(result[1:])
    summary_at = 2 if any(m.role == "user" and m.origin == "original" for m in case.body) else 1
    if case.steps is not None:
        assert len(body_steps) == case.steps
    if case.synthetic is not None:
        assert len(synthetic(result)) == case.synthetic
        if case.synthetic:  # after the task when there is one (gent keeps it outside the scratchpad)
            assert result[summary_at].origin == "compacted_synthetic" and result[summary_at].role == "user"
    if case.kept_originals is not None:
        assert sum(1 for s in body_steps if not s.pinned and s.head.origin == "original") == case.kept_originals
    if case.pinned is not None:
        assert sum(1 for s in body_steps if s.pinned) == case.pinned
    if case.summary_contains:
        assert case.summary_contains in result[summary_at].text
        assert env.summaries == [result[summary_at].text]
    sent = prompt_text(summarizer.prompts[0]) if summarizer.prompts else ""
    for needle in case.prompt_contains:
        assert needle in sent
    for needle in case.prompt_excludes:
        assert needle not in sent
    if case.prompt:
        assert summarizer.prompts[0][0] == {"role": "system", "content": case.prompt}
    if case.completions is not None:
        assert len(env.completions) == case.completions
        for completion in env.completions:
            assert completion.input_tokens > 0 and completion.output_tokens > 0
            assert completion.model == "scripted/test"


def test_progressive_keeps_recent_steps_as_same_objects() -> None:
    messages = [system(), user("Refactor the parser"), *_iterations(6)]
    result, _ = run({"kind": "summarize_progressive", "keep_recent": 2}, messages)
    assert result[0] is messages[0] and result[1] is messages[1]  # the task stays, first
    assert result[2].origin == "compacted_synthetic"
    assert all(a is b for a, b in zip(result[3:], messages[-4:], strict=True))
    assert len(result) == 3 + 4


def test_progressive_never_summarizes_the_task() -> None:
    """gent keeps the task outside the scratchpad: the first user message stays, first, unsummarized."""
    task = user("TASK: make the importer stream large files")
    later = user("also keep memory under 200 MB")
    messages = [system(), *_iterations(1), task, *_iterations(2, 1), later, *_iterations(2, 3)]
    summarizer = ScriptedSummarizer(responses=["first", "second"])
    result, env = run({"kind": "summarize_progressive"}, messages, summarizer)
    assert result[1] is task and result[2].origin == "compacted_synthetic" and len(result) == 3
    sent = prompt_text(summarizer.prompts[0])
    assert "TASK: make the importer" not in sent and "also keep memory" in sent and "iteration 0" in sent
    again = build_strategy({"kind": "summarize_progressive"}).compact(
        Context(tuple([*result, *_iterations(2, 10)])), env
    )
    assert again[1] is task and again[2].text.endswith("second")
    assert "first" in prompt_text(summarizer.prompts[1])  # the running summary is fed back


def test_progressive_keeps_gents_order_summary_pinned_recent() -> None:
    """000 rebuilds the scratchpad as [summary, pinned..., recent...]: a pinned step in the recent
    window moves ahead of the recent steps."""
    old_pinned, new_pinned = iteration(1, pinned=True), iteration(5, pinned=True)
    messages = [system(), user("the task"), *iteration(0), *old_pinned, *_iterations(3, 2), *new_pinned, *iteration(6)]
    result, _ = run({"kind": "summarize_progressive", "keep_recent": 2}, messages)
    check_invariants(messages, result)
    recent = [*iteration(4), *iteration(6)]
    assert result[:2] == messages[:2] and result[2].origin == "compacted_synthetic"
    assert result[3:5] == old_pinned and result[5:7] == new_pinned
    assert [m.text for m in result[7:]] == [m.text for m in recent]


def test_progressive_custom_prompt_with_placeholders() -> None:
    messages = [system(), prior_summary("OLD FACT"), *_iterations(2)]
    summarizer = ScriptedSummarizer()
    template = "Merge.\nSO FAR:\n{existing_summary}\nNEW:\n{transcript}\nEnd."
    run({"kind": "summarize_progressive", "prompt": template}, messages, summarizer)
    (request,) = summarizer.prompts
    assert len(request) == 1 and request[0]["role"] == "user"
    text = request[0]["content"]
    assert text.startswith("Merge.") and text.endswith("End.")
    assert text.index("OLD FACT") < text.index("iteration 1")


# ------------------------------------------------------------------------------------------------
# summarize_full (001): cleaning, structured prompt, last user request


@pytest.mark.parametrize(
    "name, messages, expected_roles, fillers",
    [
        (
            "missing tool response filled",
            [user("go"), assistant("", calls=(("a", "grep"), ("b", "bash"))), tool("a", "found"), user("next")],
            ["user", "assistant", "tool", "tool", "user"],
            ["b"],
        ),
        (
            "trailing tool message gets an assistant after it",
            [user("go"), assistant("", calls=(("a", "grep"),)), tool("a", "found")],
            ["user", "assistant", "tool", "assistant"],
            [],
        ),
        (
            "unanswered call at the end: filled, then an assistant",
            [user("go"), assistant("", calls=(("a", "grep"),))],
            ["user", "assistant", "tool", "assistant"],
            ["a"],
        ),
        (
            "well-formed history unchanged",
            [user("go"), assistant("", calls=(("a", "grep"),)), tool("a", "found"), assistant("done")],
            ["user", "assistant", "tool", "assistant"],
            [],
        ),
    ],
)
def test_clean_history(name: str, messages: list[Message], expected_roles: list[str], fillers: list[str]) -> None:
    cleaned = clean_history(messages)
    assert [m.role for m in cleaned] == expected_roles
    assert tool_pairing_problems(cleaned) == []
    assert [m.tool_call_id for m in cleaned if m.text == TOOL_NO_RESPONSE] == fillers
    assert cleaned[-1].role != "tool"
    assert all(any(m is o for o in messages) or m.origin == "compacted_synthetic" for m in cleaned)


def test_summarize_full_replaces_history_and_quotes_last_request() -> None:
    messages = [
        system(),
        user("Add caching to src/cache.py"),
        assistant("", calls=(("c1", "read_file"),)),
        tool("c1", "def get(key): ..."),
        user("Also make the TTL 300 seconds\nand log misses"),
        assistant("", calls=(("c2", "edit"),)),
    ]  # c2 never answered
    summarizer = ScriptedSummarizer(responses=["1. Goals: caching ..."])
    result, env = run({"kind": "summarize_full"}, messages, summarizer)
    check_invariants(messages, result)
    assert len(result) == 2 and result[0] is messages[0]
    summary = result[1]
    assert (summary.role, summary.origin) == ("user", "compacted_synthetic")
    assert summary.text.startswith("1. Goals: caching ...")
    assert f"{prompts.LAST_REQUEST_LEAD}\n> Also make the TTL 300 seconds\n> and log misses" in summary.text
    # 001: the native conversation, cleaned, with the prompt appended as the last user message
    request = summarizer.prompts[0]
    assert request[-1] == {"role": "user", "content": prompts.STRUCTURED_PROMPT}
    native = request[:-1]
    assert native[:5] == [m.to_openai() for m in messages[:5]]
    assert [m["role"] for m in native] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert native[6] == {"role": "tool", "content": TOOL_NO_RESPONSE, "tool_call_id": "c2", "name": "edit"}
    assert native[7] == {"role": "assistant", "content": AFTER_TOOLS_TEXT}
    assert tool_pairing_problems([Message.from_openai(m) for m in native]) == []
    assert not any("<transcript>" in str(m["content"]) for m in request)  # nothing flattened
    assert env.summaries == [summary.text]
    assert len(env.completions) == 1


@pytest.mark.parametrize(
    "name, body, expected",
    [
        ("latest real user message", [user("first"), assistant("ok"), user("second"), assistant("ok")], "second"),
        ("summaries are not requests", [user("real one"), prior_summary("[COMPACT SUMMARY]\nstuff")], "real one"),
        (
            "request carried by an earlier summary",
            [
                Message(
                    role="user",
                    content="summary",
                    origin="compacted_synthetic",
                    metadata={"last_user_request": "ship it"},
                ),
                assistant("working"),
            ],
            "ship it",
        ),
        ("no user message at all", [assistant("hello")], ""),
        (
            "a recorded agent summary is not a request",
            [
                user("the real request"),
                assistant("ok"),
                user(
                    "This session is being continued from a previous conversation...",
                    metadata={"compact_summary": True},
                ),
                assistant("resuming"),
            ],
            "the real request",
        ),
        (
            "a truncation placeholder is not a request",
            [
                user("ship the fix"),
                Message(
                    role="user",
                    content="[Context truncated: 3 earlier messages were dropped]",
                    origin="compacted_synthetic",
                    metadata={"compaction": "truncation"},
                ),
            ],
            "ship the fix",
        ),
    ],
)
def test_last_user_request(name: str, body: list[Message], expected: str) -> None:
    assert last_user_request(body) == expected


def test_summarize_full_keeps_pinned_after_summary_and_carries_request() -> None:
    pinned = user("Never change the public API of workbench.replay", importance=10.0)
    messages = [system(), pinned, *agent_turns(3), user("Now write the docs"), *agent_turns(2, start=3)]
    summarizer = ScriptedSummarizer(responses=["first", "second"])
    first, env = run({"kind": "summarize_full"}, messages, summarizer)
    check_invariants(messages, first)
    assert [m.origin for m in first] == ["original", "compacted_synthetic", "original"]
    assert first[2] is pinned
    assert "Never change" not in prompt_text(summarizer.prompts[0])  # pinned: kept, not summarized
    assert "> Now write the docs" in first[1].text
    # compacting again: the earlier summary is part of the native conversation, and its request is
    # carried over
    second = build_strategy({"kind": "summarize_full"}).compact(Context(tuple(first + agent_turns(1, start=9))), env)
    assert "> Now write the docs" in second[1].text
    assert summarizer.prompts[1][1] == {"role": "user", "content": first[1].text}
    assert len(env.completions) == 2


def test_summarize_full_quotes_the_real_request_not_a_recorded_summary() -> None:
    """A summary the recorded agent wrote (Claude Code's isCompactSummary) is never the last request."""
    recorded = user(
        "This session is being continued from a previous conversation. Summary: ...", metadata={"compact_summary": True}
    )
    messages = [system(), user("Migrate the store to duckdb 2.0"), *agent_turns(2), recorded, *agent_turns(2, start=5)]
    result, _ = run({"kind": "summarize_full"}, messages)
    assert result[1].text.endswith("> Migrate the store to duckdb 2.0")
    assert result[1].metadata["last_user_request"] == "Migrate the store to duckdb 2.0"


def test_summarize_full_custom_prompt_is_the_appended_request() -> None:
    messages = [system(), user("go"), *agent_turns(2)]
    summarizer = ScriptedSummarizer()
    run({"kind": "summarize_full", "prompt": "Summarize in five bullet points."}, messages, summarizer)
    (request,) = summarizer.prompts
    assert request[-1] == {"role": "user", "content": "Summarize in five bullet points."}
    assert request[0] == messages[0].to_openai()


def test_fillers_are_never_sent_as_the_existing_summary() -> None:
    """001's cleaning fillers are synthetic but are not summaries."""
    cleaned = clean_history([user("go"), assistant("", calls=(("a", "grep"),))])
    assert [m.text for m in cleaned[2:]] == [TOOL_NO_RESPONSE, AFTER_TOOLS_TEXT]
    for spec in (
        {"kind": "summarize_progressive"},
        {"kind": "summarize_split", "preserve": 0.2},
        {"kind": "adaptive_chunking", "keep_recent": 0},
    ):
        summarizer = ScriptedSummarizer()
        run(spec, [system(), *cleaned, *agent_turns(3, start=5)], summarizer)
        for request in summarizer.prompts:
            sent = prompt_text(request)
            if "<existing_summary>" in sent:
                existing = sent[sent.index("<existing_summary>") : sent.index("</existing_summary>")]
                assert TOOL_NO_RESPONSE not in existing and AFTER_TOOLS_TEXT not in existing, spec
    # summarize_full sends them as tool results in the native conversation, never as a summary
    summarizer = ScriptedSummarizer()
    run({"kind": "summarize_full"}, [system(), user("go"), assistant("", calls=(("a", "grep"),))], summarizer)
    assert "<existing_summary>" not in prompt_text(summarizer.prompts[0])


def test_summarize_full_nothing_to_summarize() -> None:
    messages = [system(), user("keep me", importance=10.0)]
    result, env = run({"kind": "summarize_full"}, messages)
    assert result == messages and env.completions == []


# ------------------------------------------------------------------------------------------------
# summarize_split (002): split point with tool-pair safety, "[COMPACT SUMMARY]", truncation fallback


def goat_example() -> list[Message]:
    """The 14-message example of 002."""
    return [
        user("Help me refactor"),  # 0
        assistant("I'll look at the code", calls=(("r1", "Read"),)),  # 1
        tool("r1", "file contents...", name="Read"),  # 2
        user("Now fix the bug"),  # 3
        assistant("Let me check", calls=(("r2", "Read"),)),  # 4
        tool("r2", "...", name="Read"),  # 5
        user("Also add tests"),  # 6
        assistant("Sure", calls=(("w1", "Write"),)),  # 7
        tool("w1", "...", name="Write"),  # 8
        user("Run the tests"),  # 9
        assistant("", calls=(("b1", "Bash"),)),  # 10
        tool("b1", "PASS", name="Bash"),  # 11
        user("Now deploy"),  # 12
        assistant("I'll push to git"),  # 13
    ]


def test_goat_fourteen_message_example() -> None:
    messages = goat_example()
    # 40 % of 14 is 5.6 -> 6 preserved -> the cut lands on message 8 (a tool result) and moves to 9
    assert len(messages) - round(len(messages) * 0.4) == 8 and messages[8].role == "tool"
    assert split_index(group_steps(messages), 0.4) == 9
    summarizer = ScriptedSummarizer(responses=["Earlier, I refactored code, fixed a bug, and added tests."])
    result, env = run({"kind": "summarize_split"}, messages, summarizer)
    check_invariants(messages, result)
    assert len(result) == 7
    assert result[0].role == "user" and result[0].text == (
        "[COMPACT SUMMARY]\nEarlier, I refactored code, fixed a bug, and added tests."
    )
    assert result[1].role == "assistant" and is_acknowledgement(result[1])
    assert all(a is b for a, b in zip(result[2:], messages[9:], strict=False))
    transcript = transcript_of(summarizer.prompts[0])
    assert "Also add tests" in transcript and "Run the tests" not in transcript
    assert env.summaries == [result[0].text]


def _layout(codes: str) -> list[Message]:
    """Messages from a code string: u = user, a = assistant, A = assistant with one call, t = its result,
    T = assistant with two calls (its two results follow as t t)."""
    out: list[Message] = []
    pending: list[str] = []
    for i, code in enumerate(codes):
        if code == "u":
            out.append(user(f"request {i}"))
        elif code == "a":
            out.append(assistant(f"answer {i}"))
        elif code in "AT":
            pending = [f"c{i}"] if code == "A" else [f"c{i}a", f"c{i}b"]
            out.append(assistant(f"call {i}", calls=tuple((p, "bash") for p in pending)))
        elif code == "t":
            out.append(tool(pending.pop(0), f"out {i}"))
    return out


@pytest.mark.parametrize(
    "codes, preserve, expected",
    [
        ("uauauauaua", 0.4, 6),  # 10 messages, 4 preserved, the cut is already a boundary
        ("uAtuAtuAt", 0.4, 6),  # 9 -> keep 4 -> cut at 5 (a result) -> forward to 6
        ("uAtuTtt", 0.5, 3),  # 7 -> keep 4 -> cut at 3: boundary
        ("uAtuTtt", 0.3, 4),  # 7 -> keep 2 -> cut at 5 (inside T's results); forward is the end -> back to 4
        ("uAt", 0.4, 1),  # 3 -> keep 1 -> cut at 2 (a result); forward preserves nothing -> back to 1
        ("ua", 0.0, 2),  # preserve nothing: everything summarized
        ("ua", 1.0, 0),  # preserve everything: nothing to summarize
        ("", 0.4, 0),
    ],
)
def test_split_index(codes: str, preserve: float, expected: int) -> None:
    messages = _layout(codes)
    cut = split_index(group_steps(messages), preserve)
    assert cut == expected
    if 0 < cut < len(messages):
        assert messages[cut].role != "tool"


def test_split_keeps_system_and_pinned_from_the_older_part() -> None:
    pinned = user("Budget is 200 dollars, hard limit", importance=10.0)
    messages = [system(), user("start"), pinned, *agent_turns(4), user("continue"), *agent_turns(2, start=4)]
    summarizer = ScriptedSummarizer()
    result, _ = run({"kind": "summarize_split", "preserve": 0.3}, messages, summarizer)
    check_invariants(messages, result)
    assert result[0] is messages[0]
    assert result[1].text.startswith("[COMPACT SUMMARY]\n") and is_acknowledgement(result[2])
    assert result[3] is pinned
    assert "Budget is 200" not in transcript_of(summarizer.prompts[0])


def test_split_second_compaction_feeds_the_earlier_summary_back() -> None:
    summarizer = ScriptedSummarizer(responses=["FIRST SUMMARY", "SECOND SUMMARY"])
    messages = [system(), *goat_example()]
    first, env = run({"kind": "summarize_split"}, messages, summarizer)
    grown = [*first, *agent_turns(6, start=20)]
    second = build_strategy({"kind": "summarize_split"}).compact(Context(tuple(grown)), env)
    check_invariants(grown, second)
    request = prompt_text(summarizer.prompts[1])
    assert "<existing_summary>\n[COMPACT SUMMARY]\nFIRST SUMMARY" in request
    assert prompts.SPLIT_ACKNOWLEDGEMENT not in request
    assert second[1].text == "[COMPACT SUMMARY]\nSECOND SUMMARY"
    assert len(synthetic(second)) == 2  # one summary + one acknowledgement
    assert len(env.completions) == 2


def test_split_fallback_names_how_many_messages_were_dropped() -> None:
    messages = [system(), *goat_example()]
    strategy = build_strategy({"kind": "summarize_split"})
    env = CompactionEnv(summarizer=ScriptedSummarizer(responses=[RuntimeError("provider down")]))
    with pytest.raises(SummarizerError, match="provider down"):
        strategy.compact(Context(tuple(messages)), env)
    result = strategy.fallback(Context(tuple(messages)), env)
    check_invariants(messages, result)
    assert result[0] is messages[0]
    placeholder = result[1]
    assert (placeholder.role, placeholder.origin) == ("user", "compacted_synthetic")
    # goat: the same "[COMPACT SUMMARY]" header as a summary, then the truncation placeholder
    assert placeholder.text.startswith("[COMPACT SUMMARY]\n[Context truncated: 9 earlier messages were dropped")
    assert is_acknowledgement(result[2])
    assert env.summaries == []
    assert '"Help me refactor"' in placeholder.text and placeholder.metadata["dropped_messages"] == 9
    assert all(a is b for a, b in zip(result[3:], messages[10:], strict=False))
    assert len(env.completions) == 0  # the fallback never calls the summarizer


@settings(max_examples=60, deadline=None)
@given(messages=conversations(max_steps=20))
def test_split_tail_never_starts_inside_a_step(messages: list[Message]) -> None:
    """goat's adjustSplitForToolPairs: compact and fallback preserve the same whole trailing steps."""
    strategy = build_strategy({"kind": "summarize_split", "preserve": 0.4})
    context = Context(tuple(messages))
    compacted = strategy.compact(context, CompactionEnv(summarizer=ScriptedSummarizer()))
    truncated = strategy.fallback(context, CompactionEnv())
    if compacted == list(messages):
        return  # nothing to condense
    body = context.body
    step_starts = {sum(len(s.messages) for s in context.steps[:i]) for i in range(len(context.steps) + 1)}
    kept = len(context.system) + 2  # after the summary (or placeholder) and the acknowledgement
    assert compacted[kept:] == truncated[kept:] and all(
        a is b for a, b in zip(compacted[kept:], truncated[kept:], strict=True)
    )
    tail = 0  # the longest suffix of the result that is the body's own suffix (same objects)
    while tail < len(body) and len(compacted) - kept > tail and compacted[-1 - tail] is body[-1 - tail]:
        tail += 1
    assert tail > 0 and len(body) - tail in step_starts, "the preserved tail starts inside a step"
    assert tool_pairing_problems(compacted) == [] and tool_pairing_problems(truncated) == []


def test_split_unchanged_when_nothing_to_summarize() -> None:
    messages = [system(), user("hi")]
    result, env = run({"kind": "summarize_split"}, messages)
    assert result == messages and env.completions == []


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "summarize_split", "preserve": 1.5},
        {"kind": "summarize_split", "preserve": "half"},
        {"kind": "summarize_progressive", "keep_recent": -1},
        {"kind": "adaptive_chunking", "boundary": "paragraph"},
        {"kind": "adaptive_chunking", "chunk_messages": 0},
        {"kind": "handoff", "user_tokens": -5},
        {"kind": "summarize_full", "prompt": 3},
    ],
)
def test_invalid_params(spec: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=spec["kind"]):
        build_strategy(spec)


# ------------------------------------------------------------------------------------------------
# adaptive_chunking (003)


def topics(n_topics: int, steps_per_topic: int) -> list[Message]:
    out: list[Message] = []
    for t in range(n_topics):
        out.append(user(f"TOPIC-{t}: please handle part {t}"))
        out.extend(agent_turns(steps_per_topic, start=t * 10))
    return out


@pytest.mark.parametrize(
    "name, spec, body, chunks, kept_tail",
    [
        ("topic boundaries", {"boundary": "topic", "keep_recent": 2}, topics(3, 2), 3, 2),
        (
            "topic chunks capped by chunk_messages",
            {"boundary": "topic", "keep_recent": 0, "chunk_messages": 3},
            topics(2, 3),
            6,
            0,
        ),
        ("count: every 4 messages", {"boundary": "count", "chunk_messages": 4, "keep_recent": 0}, agent_turns(6), 3, 0),
        ("count ignores topics", {"boundary": "count", "chunk_messages": 20, "keep_recent": 1}, topics(3, 2), 1, 1),
    ],
)
def test_adaptive_chunking(name: str, spec: dict[str, Any], body: list[Message], chunks: int, kept_tail: int) -> None:
    messages = [system(), *body]
    summarizer = ScriptedSummarizer()
    result, env = run({"kind": "adaptive_chunking", **spec}, messages, summarizer)
    check_invariants(messages, result)
    summaries = synthetic(result)
    assert len(summaries) == chunks == len(summarizer.prompts) == len(env.completions) == len(env.summaries)
    assert all(m.role == "user" for m in summaries)
    if kept_tail:
        tail = [m for s in group_steps(messages[1:])[-kept_tail:] for m in s.messages]
        assert all(a is b for a, b in zip(result[-len(tail) :], tail, strict=True))
    else:
        assert result[-1].origin == "compacted_synthetic"


def test_adaptive_chunking_by_topic_sends_one_topic_per_call() -> None:
    messages = [system(), *topics(3, 2)]
    summarizer = ScriptedSummarizer()
    run({"kind": "adaptive_chunking", "keep_recent": 0}, messages, summarizer)
    assert len(summarizer.prompts) == 3
    for t, request in enumerate(summarizer.prompts):
        transcript = transcript_of(request)
        assert f"TOPIC-{t}" in transcript
        assert all(f"TOPIC-{other}" not in transcript for other in range(3) if other != t)
        assert request[0]["content"] == prompts.CHUNK_PROMPT


def test_adaptive_chunking_keeps_pinned_and_earlier_summaries_in_place() -> None:
    pinned = iteration(7, pinned=True)
    earlier = prior_summary("[SUMMARY] old stuff")
    messages = [
        system(),
        earlier,
        user("first topic"),
        *agent_turns(2),
        *pinned,
        user("second topic"),
        *agent_turns(2, start=20),
        *agent_turns(2, start=50),
    ]
    result, _ = run({"kind": "adaptive_chunking", "keep_recent": 2}, messages)
    check_invariants(messages, result)
    assert result[1] is earlier
    assert result[2].origin == "compacted_synthetic"
    assert result[3] is pinned[0] and result[4] is pinned[1]
    assert result[5].origin == "compacted_synthetic"
    assert result[6:] == messages[-4:]


def test_adaptive_chunking_unchanged_when_everything_is_recent() -> None:
    messages = [system(), *agent_turns(3)]
    result, env = run({"kind": "adaptive_chunking", "keep_recent": 4}, messages)
    assert result == messages and env.completions == []


# ------------------------------------------------------------------------------------------------
# handoff


def handoff_session() -> list[Message]:
    return [
        system(),
        user("U1 " + "a" * 77),  # 80 chars: 20 tokens + 4 overhead = 24
        *agent_turns(2),
        user("U2 " + "b" * 77),
        *agent_turns(2, start=2),
        user("U3 " + "c" * 77),
        assistant("thinking"),
        *agent_turns(1, start=4),
    ]


@pytest.mark.parametrize(
    "user_tokens, kept",
    [
        (20000, ["U1", "U2", "U3"]),
        (48, ["U2", "U3"]),
        (47, ["U3"]),
        (10, []),
    ],
)
def test_handoff_respects_user_tokens(user_tokens: int, kept: list[str]) -> None:
    messages = handoff_session()
    result, env = run({"kind": "handoff", "user_tokens": user_tokens}, messages)
    check_invariants(messages, result)
    assert result[0] is messages[0]
    assert [m.text[:2] for m in result[1:-1]] == kept
    assert all(any(m is o for o in messages) for m in result[1:-1])
    assert not any(m.role == "tool" or m.tool_calls for m in result)
    assert not any(m.role == "assistant" for m in result)
    note = result[-1]
    assert (note.role, note.origin) == ("user", "compacted_synthetic")
    assert note.text.startswith(prompts.HANDOFF_HEADER)
    assert env.summaries == [note.text]


def test_handoff_prompt_is_written_for_another_model() -> None:
    messages = handoff_session()
    summarizer = ScriptedSummarizer()
    run({"kind": "handoff"}, messages, summarizer)
    request = summarizer.prompts[0]
    assert request[0] == {"role": "system", "content": prompts.HANDOFF_PROMPT}
    assert "different model" in prompts.HANDOFF_PROMPT
    transcript = transcript_of(request)
    assert "U1" in transcript and "tool result" in transcript  # the note sees everything


def test_handoff_keeps_pinned_tool_step() -> None:
    pinned = iteration(3, pinned=True)
    messages = [system(), user("do it"), *agent_turns(2), *pinned, *agent_turns(1, start=5)]
    result, _ = run({"kind": "handoff"}, messages)
    check_invariants(messages, result)
    assert [m for m in result if m.role == "tool"] == [pinned[1]]


# ------------------------------------------------------------------------------------------------
# every summarizing kind: invariants on random conversations, spec round trip

SUMMARIZING = [
    {"kind": "summarize_progressive", "keep_recent": 2},
    {"kind": "summarize_full"},
    {"kind": "summarize_split", "preserve": 0.4},
    {"kind": "adaptive_chunking", "chunk_messages": 5, "keep_recent": 2},
    {"kind": "adaptive_chunking", "boundary": "count", "chunk_messages": 3, "keep_recent": 0},
    {"kind": "handoff", "user_tokens": 300},
]


@pytest.mark.parametrize("spec", SUMMARIZING, ids=lambda s: s["kind"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=conversations(max_steps=20))
def test_invariants_on_random_conversations(spec: dict[str, Any], messages: list[Message]) -> None:
    result, env = run(spec, messages)
    check_invariants(messages, result)
    assert len(env.summaries) == len(synthetic([m for m in result if not is_acknowledgement(m)]))
    again = build_strategy(spec).compact(Context(tuple(result)), env)  # compacting twice is fine too
    check_invariants(result, again)


@pytest.mark.parametrize("spec", SUMMARIZING, ids=lambda s: s["kind"])
def test_spec_round_trip(spec: dict[str, Any]) -> None:
    built = build_strategy(spec)
    full = spec_of(built)
    assert {k: full[k] for k in spec} == spec
    assert spec_of(build_strategy(full)) == full
    assert full.get("prompt") == ""


# ------------------------------------------------------------------------------------------------
# through a real litellm call to the offline extractive provider


@dataclass
class LiteLLMSummarizer:
    """A minimal Summarizer over `litellm.completion` (the project's gateway does much more)."""

    model: str = "workbench/extractive"

    def complete(self, messages, *, purpose="summary", max_tokens=None) -> Completion:
        import litellm

        from workbench.llm.provider import register

        register(litellm)
        try:
            response = litellm.completion(model=self.model, messages=messages, max_tokens=max_tokens)
        except Exception as exc:
            raise SummarizerError(str(exc)) from exc
        usage = response.usage
        return Completion(
            text=response.choices[0].message.content or "",
            model=self.model,
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
            cost_usd=None,
            finish_reason=response.choices[0].finish_reason,
        )


def test_split_through_litellm_extractive() -> None:
    messages = [
        system(),
        user("Fix the crash in src/parser/tokenize.py; we must keep Python 3.9 support."),
        assistant("", calls=(("c1", "bash"),)),
        tool("c1", "Traceback (most recent call last):\nKeyError: 'indent_width'\nexit code 1", name="bash"),
        assistant("Decided to default indent_width to 4 in TokenizerConfig."),
        user("Good. Now run the full suite."),
        *agent_turns(3, start=10),
    ]
    result, env = run({"kind": "summarize_split", "preserve": 0.4}, messages, LiteLLMSummarizer())
    check_invariants(messages, result)
    summary = result[1].text
    assert summary.startswith("[COMPACT SUMMARY]\n")
    for needle in (
        "src/parser/tokenize.py",
        "KeyError: 'indent_width'",
        "TokenizerConfig",
        "must keep Python 3.9 support",
        "> Good. Now run the full suite.",
    ):
        assert needle in summary
    assert "condense the older part" not in summary.lower()  # instructions are not summarized
    (completion,) = env.completions
    assert completion.model == "workbench/extractive" and completion.finish_reason == "stop"
    assert completion.input_tokens > 0 and completion.output_tokens > 0


# ------------------------------------------------------------------------------------------------
# adaptive_chunking: numbered headers, re-condensing to the budget, a long replay


@dataclass
class BudgetRecorder(ScriptedSummarizer):
    """A ScriptedSummarizer that records each call's `max_tokens` and may ignore it (`fixed_chars`)."""

    max_tokens_seen: list[int | None] = field(default_factory=list)
    fixed_chars: int = 0

    def complete(self, messages, *, purpose="summary", max_tokens=None) -> Completion:
        self.max_tokens_seen.append(max_tokens)
        if self.fixed_chars:
            self.responses.append(f"summary {len(self.prompts)} " + "x" * self.fixed_chars)
        return super().complete(messages, purpose=purpose, max_tokens=max_tokens)


def test_adaptive_chunking_headers_are_numbered() -> None:
    """The `{index}` / `{total}` placeholders of the chunk headers are filled in."""
    messages = [system(), *topics(3, 2)]
    result, env = run({"kind": "adaptive_chunking", "keep_recent": 0}, messages)
    headers = [m.text.splitlines()[0] for m in synthetic(result)]
    assert headers == [f"[SUMMARY OF EARLIER MESSAGES {i}/3]" for i in (1, 2, 3)]
    assert not any("{" in m.text for m in result)
    assert env.summaries == [m.text for m in synthetic(result)]


def test_adaptive_chunking_recondenses_when_the_summaries_exceed_the_budget() -> None:
    """003 keeps the result within budget: a model that ignores max_tokens (1,000 tokens a chunk)
    over 40 topics gets its chunk summaries merged again until they fit."""
    pinned = iteration(99, pinned=True)
    body = [*topics(20, 2), *pinned, *topics(20, 2)]
    messages = [system(), *body, *agent_turns(2, start=900)]
    summarizer = BudgetRecorder(fixed_chars=4000)
    env_kw = {"context_limit": 20_000, "max_output": 2000}
    result, env = run({"kind": "adaptive_chunking", "keep_recent": 2}, messages, summarizer, **env_kw)
    check_invariants(messages, result)
    summaries = synthetic(result)
    strategy = build_strategy({"kind": "adaptive_chunking"})
    budget = strategy.summaries_budget(env, env.tokens([messages[0], *pinned, *messages[-4:]]))
    assert budget == int(0.25 * 18_000)  # a quarter of the usable window
    assert sum(env.tokenizer.count(m.text) for m in summaries) <= budget + 20 * len(summaries)  # + headers
    assert len(summarizer.prompts) > 40  # 40 chunk calls, then merges
    merges = [p for p in summarizer.prompts if p[0]["content"] == prompts.MERGE_PROMPT]
    assert merges and all(prompt_text(p).count("<existing_summary>") >= 2 for p in merges)
    # the pinned step stays between the summaries of the topics before it and after it
    at = result.index(pinned[0])
    assert result[at + 1] is pinned[1]
    assert any(m.origin == "compacted_synthetic" for m in result[1:at])
    assert any(m.origin == "compacted_synthetic" for m in result[at + 2 :])
    total = len(summaries)
    assert [m.text.splitlines()[0] for m in summaries] == [
        f"[SUMMARY OF EARLIER MESSAGES {i}/{total}]" for i in range(1, total + 1)
    ]
    assert sum(m.metadata["chunk_messages"] for m in summaries) == len(body) - len(pinned)
    assert env.summaries == [m.text for m in summaries]


def test_adaptive_chunking_asks_each_chunk_for_its_share_of_the_budget() -> None:
    messages = [system(), *topics(4, 30)]
    summarizer = BudgetRecorder()
    result, env = run(
        {"kind": "adaptive_chunking", "keep_recent": 0, "chunk_messages": 100},
        messages,
        summarizer,
        context_limit=9000,
        max_output=1000,
    )
    budget = int(0.25 * 8000)
    assert summarizer.max_tokens_seen == [budget // 4] * 4


def long_session(n_topics: int) -> list[Message]:
    out = [system(), user("TASK: audit every module of the repository")]
    for t in range(n_topics):
        out.append(user(f"Now look at package_{t}"))
        for i in range(6):
            cid = f"t{t}_{i}"
            out.append(assistant(f"reading package_{t}/mod_{i}.py", calls=((cid, "read_file"),)))
            out.append(tool(cid, f"def f_{t}_{i}(x):\n" + "    return x  # body\n" * 60))
        out.append(assistant(f"package_{t} audited: nothing wrong."))
    return out


def test_adaptive_chunking_replay_keeps_each_compacted_context_within_the_target() -> None:
    """Chunk summaries do not pile up across compactions. A long generated session, a model that
    writes 250 tokens whatever it is asked: after every compaction the context holds at most half
    the usable window."""
    from workbench.replay import replay

    session = long_session(60)
    config = {
        "trigger": {"kind": "utilization", "ratio": 0.8},
        "strategy": {"kind": "adaptive_chunking", "keep_recent": 4},
        "context_limit": 24_000,
        "max_output": 2000,
    }
    result = replay(session, config, summarizer=BudgetRecorder(fixed_chars=1000))
    assert result.termination == "completed"
    assert len(result.compactions) >= 3
    target = 0.5 * (24_000 - 2000)
    for event in result.compactions:
        assert event.tokens_after <= target, event
        assert not event.fell_back
    assert max(c.context_tokens for c in result.calls) <= 24_000 - 2000


def test_fallback_after_a_partly_successful_summarization_reports_no_missing_summary() -> None:
    """Chunk 1 summarized, chunk 2 failed, fallback used: the event does not report chunk 1's summary,
    which the fallback's context does not hold."""
    from workbench.replay import replay

    session = long_session(12)
    summarizer = ScriptedSummarizer(responses=["CHUNK ONE SUMMARY", RuntimeError("provider down")])
    config = {
        "trigger": {"kind": "utilization", "ratio": 0.8},
        "strategy": {"kind": "adaptive_chunking", "keep_recent": 4},
        "context_limit": 24_000,
        "max_output": 2000,
        "on_failure": "fallback",
    }
    result = replay(session, config, summarizer=summarizer)
    first = result.compactions[0]
    assert first.fell_back and first.summary is None
    for event in result.compactions:
        if event.summary:
            assert not event.fell_back


# ------------------------------------------------------------------------------------------------
# summary length: every summarizing kind passes a max_tokens budget derived from its design


@pytest.mark.parametrize(
    "spec, share",
    [
        ({"kind": "summarize_progressive"}, 0.1),
        ({"kind": "summarize_full"}, 0.15),
        ({"kind": "summarize_split", "preserve": 0.2}, 0.1),
        ({"kind": "handoff"}, 0.1),
    ],
)
def test_summary_budget_is_a_share_of_the_replaced_tokens_capped_by_the_window(
    spec: dict[str, Any], share: float
) -> None:
    messages = [
        system(),
        user("the task"),
        *agent_turns(40, result_chars=2000),
        user("go on"),
        *agent_turns(2, start=50),
    ]
    for context_limit, capped in ((200_000, False), (12_000, True)):
        summarizer = BudgetRecorder()
        run(spec, messages, summarizer, context_limit=context_limit, max_output=2000)
        (max_tokens,) = summarizer.max_tokens_seen
        window_cap = int(share * (context_limit - 2000))
        if capped:
            assert max_tokens == window_cap
        else:
            assert 128 <= max_tokens < window_cap  # a quarter of what it replaces
            assert max_tokens == pytest.approx(0.25 * 40 * 2000 / 4, rel=0.15)


def test_summary_budget_never_below_the_floor() -> None:
    summarizer = BudgetRecorder()
    run(
        {"kind": "summarize_split", "preserve": 0.5},
        [system(), user("a"), assistant("b"), user("c"), assistant("d")],
        summarizer,
    )
    assert summarizer.max_tokens_seen == [128]


def test_progressive_fallback_keeps_the_task() -> None:
    """gent's task is outside the scratchpad: when the summarizer fails, the default fallback (the last
    40 %, pinned steps kept) keeps it as well, in front; other kinds' fallback drops it with the rest."""
    task = user("TASK: make the importer stream large files")
    messages = [system(), task, *_iterations(6)]
    context = Context(tuple(messages))
    fallen = build_strategy({"kind": "summarize_progressive"}).fallback(context, CompactionEnv())
    assert fallen[:2] == [messages[0], task]
    assert fallen[2:] == keep_last_fraction(context)[1:]
    check_invariants(messages, fallen)
    assert task not in keep_last_fraction(context)
