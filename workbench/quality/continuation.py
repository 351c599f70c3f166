"""Continuation: after a compaction, does the agent still choose the recorded next action?

At the call right after each applied compaction whose recorded reply is a tool call, the evaluator
model sees the compacted context (as a transcript) and the tools the session used, and proposes
the next tool call as JSON. The match is 0.5 for the same tool name plus 0.5 times the
similarity of the arguments (per recorded argument: 1 for an equal value, else the
`difflib` ratio of the normalised strings; the mean over the recorded arguments).
`continuation_match` is the mean over those compactions.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any, ClassVar

from workbench.quality.evaluator import ask, evaluator_model, reply_object, transcript
from workbench.quality.facts import normalize_text
from workbench.quality.trace import applied_events, context_at, memo, session_of
from workbench.registry import register_metric
from workbench.session import ToolCall

SYSTEM = """You are continuing the work of an AI coding agent whose session so far is given as a transcript. \
Decide the single next tool call the agent should make. Reply with one JSON object and nothing else: \
{"tool": "<tool name>", "arguments": {<the call's arguments>}}."""



def _arguments(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return {"": text}
    return data if isinstance(data, dict) else {"": data}


def parse_action(text: str) -> tuple[str, dict[str, Any]] | None:
    """(tool name, arguments) of a model's reply, or None when it is not the JSON asked for."""
    data = reply_object(text)
    if data is None or not isinstance(data.get("tool", data.get("name")), str):
        return None
    arguments = data.get("arguments", data.get("args", {}))
    if isinstance(arguments, str):
        arguments = _arguments(arguments)
    return str(data.get("tool", data.get("name"))), arguments if isinstance(arguments, dict) else {}


def _value(value: Any) -> str:
    return normalize_text(value if isinstance(value, str) else json.dumps(value, sort_keys=True)).strip()


def action_match(recorded: ToolCall, proposed: tuple[str, Mapping[str, Any]] | None) -> float:
    """0.5 for the tool name + 0.5 x argument similarity (see the module docstring)."""
    if proposed is None:
        return 0.0
    name, arguments = proposed
    score = 0.5 if name.strip().lower() == recorded.name.strip().lower() else 0.0
    expected = _arguments(recorded.arguments)
    if not expected:
        return score + (0.5 if not arguments else 0.25)
    similarities = []
    for key, value in expected.items():
        want, got = _value(value), _value(arguments.get(key, ""))
        similarities.append(1.0 if want == got else difflib.SequenceMatcher(None, want, got).ratio())
    return score + 0.5 * sum(similarities) / len(similarities)


def _tools(session: Any) -> list[str]:
    names = [str((t.get("function") or t).get("name")) for t in session.tools if isinstance(t, Mapping)]
    if not names:
        names = sorted({c.name for m in session.messages for c in m.tool_calls})
    return names


def continuations(result: Any) -> dict[int, float] | None:
    """Match by event index (compactions followed by a recorded tool call); None without an evaluator."""
    def compute() -> dict[int, float] | None:
        model = evaluator_model(result)
        if model is None:
            return None
        session = session_of(result)
        replayed = {c.index: c for c in result.calls}
        tools = ", ".join(_tools(session)) or "(none recorded)"
        asked: dict[int, tuple[ToolCall, list[dict[str, str]]]] = {}
        for index in applied_events(result):
            call = result.compactions[index].call_index
            record = replayed.get(call)
            if record is None:
                continue
            reply = session.messages[record.message_index]
            if not reply.tool_calls:
                continue
            messages = [{"role": "system", "content": SYSTEM},
                        {"role": "user", "content": f"Available tools: {tools}\n\n<transcript>\n"
                                                    f"{transcript(context_at(result, call))}\n</transcript>"}]
            asked[index] = (reply.tool_calls[0], messages)
        completions = ask(result, model, [m for _, m in asked.values()], "continuation")
        return {i: action_match(recorded, parse_action(c.text))
                for (i, (recorded, _)), c in zip(asked.items(), completions, strict=True)}

    return memo(result, "quality_continuation", compute)


@register_metric("continuation_match", direction="higher", unit="share", level="compaction")
class ContinuationMatch:
    """Agreement (0-1) of the next tool call the evaluator proposes from the compacted context with
    the recorded one (tool name and argument similarity)."""

    requires_model: ClassVar[bool] = True

    def compute(self, result: Any) -> float | None:
        matches = continuations(result)
        if not matches:
            return None
        return sum(matches.values()) / len(matches)

    def per_compaction(self, result: Any) -> list[dict[str, Any]]:
        matches = continuations(result) or {}
        return [{"continuation_match": matches.get(i)} for i in range(len(result.compactions))]
