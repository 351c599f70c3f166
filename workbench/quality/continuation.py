"""Continuation: after a compaction, does the agent still choose the recorded next action?

At the call right after each applied compaction whose recorded reply is a tool call, the evaluator
model sees the compacted context (as a transcript of whole messages, cut in the middle only beyond
what it can take) and the tools the session used, and proposes the next tool call as JSON. The
match is 0.5 for the same tool name plus 0.5 times the similarity of the arguments (per recorded
argument: 1 for an equal value, else the `difflib` ratio of the normalised strings; the mean over
the recorded arguments). `continuation_match` is the mean over those compactions.

A reply from which no tool call can be read (`parse_action`) is the evaluator's failure
(`evaluator.ask`), not a wrong action. A compaction whose recorded call has an argument value
that is in the compacted context but fell in the cut part of the transcript is left unscored
(None, with a warning): the evaluator could not have seen what the agent acted on.
"""

from __future__ import annotations

import difflib
import json
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

from workbench.quality.evaluator import (
    Transcript,
    ask,
    evaluator_model,
    first_reading,
    missing_evaluator,
    transcript_budget,
)
from workbench.quality.facts import normalize_text
from workbench.quality.trace import applied_events, context_at, memo, session_of
from workbench.registry import register_metric
from workbench.session import ToolCall

SYSTEM = """You are continuing the work of an AI coding agent whose session so far is given as a transcript. \
Decide the single next tool call the agent should make. Reply with one JSON object and nothing else: \
{"tool": "<tool name>", "arguments": {<the call's arguments>}}."""

_NAME_KEYS = ("tool", "name", "tool_name", "function")
_ARGUMENT_KEYS = ("arguments", "args", "input", "parameters", "params")


def _arguments(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return {"": text}
    return data if isinstance(data, dict) else {"": data}


def _action_in(data: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    name = next((data[k] for k in _NAME_KEYS if isinstance(data.get(k), str) and data[k].strip()), None)
    if name is None:
        return None
    arguments: Any = next((data[k] for k in _ARGUMENT_KEYS if k in data), {})
    if isinstance(arguments, str):
        arguments = _arguments(arguments)
    return name.strip(), arguments if isinstance(arguments, dict) else {}


def parse_action(text: str) -> tuple[str, dict[str, Any]] | None:
    """(tool name, arguments) of a model's reply, or None when no JSON object in it names a tool.

    Read as models write it: the object alone, in a code fence or among prose, or one level down
    (`{"tool_call": {...}}`, OpenAI's `{"function": {"name": ..., "arguments": "<JSON>"}}`); the
    name under `tool`, `name`, `tool_name` or `function`; the arguments under `arguments`, `args`,
    `input`, `parameters` or `params`, as an object or a JSON string."""
    return first_reading(text, _action_in)


def _unreadable(text: str) -> str | None:
    return None if parse_action(text) is not None else "no JSON object naming a tool"


def _value(value: Any) -> str:
    return normalize_text(value if isinstance(value, str) else json.dumps(value, sort_keys=True)).strip()


def action_match(recorded: ToolCall, proposed: tuple[str, Mapping[str, Any]]) -> float:
    """0.5 for the tool name + 0.5 x argument similarity (see the module docstring)."""
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


def _hidden(sent: Transcript, recorded: ToolCall) -> bool:
    """Whether an argument value of the recorded call is in the context but not in what is sent."""
    return any(
        sent.hides(value if isinstance(value, str) else json.dumps(value))
        for value in _arguments(recorded.arguments).values()
    )


def continuations(result: Any) -> dict[int, float | None] | None:
    """Match by event index (compactions followed by a recorded tool call; None for one left
    unscored); None without an evaluator."""

    def compute() -> dict[int, float | None] | None:
        model = evaluator_model(result)
        if model is None:
            return None
        session = session_of(result)
        replayed = {c.index: c for c in result.calls}
        tools = ", ".join(_tools(session)) or "(none recorded)"
        budget = max(1, transcript_budget(result) - len(tools))
        asked: dict[int, tuple[ToolCall, list[dict[str, str]]]] = {}
        hidden: list[int] = []
        for index in applied_events(result):
            call = result.compactions[index].call_index
            record = replayed.get(call)
            if record is None:
                continue
            reply = session.messages[record.message_index]
            if not reply.tool_calls:
                continue
            sent = Transcript.of(context_at(result, call), budget)
            if _hidden(sent, reply.tool_calls[0]):
                hidden.append(index)
                continue
            messages = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Available tools: {tools}\n\n<transcript>\n{sent.text}\n</transcript>"},
            ]
            asked[index] = (reply.tool_calls[0], messages)
        labels = [f"compaction {i} (call {result.compactions[i].call_index})" for i in asked]
        completions = ask(
            result, model, [m for _, m in asked.values()], "continuation", check=_unreadable, labels=labels
        )
        matches: dict[int, float | None] = {}
        for (index, (recorded, _)), completion in zip(asked.items(), completions, strict=True):
            proposed = parse_action(completion.text)
            matches[index] = None if proposed is None else action_match(recorded, proposed)
        matches.update(dict.fromkeys(hidden))
        if hidden:
            warnings.warn(
                f"continuation_match: {len(hidden)} compaction(s) left unscored "
                f"({', '.join(map(str, hidden))}): the recorded next call uses what is in the context "
                f"but in the part of the transcript cut to fit the evaluator "
                f"{getattr(result.config, 'evaluator', None)!r} ({budget:,} characters)",
                RuntimeWarning,
                stacklevel=2,
            )
        return matches

    return memo(result, "quality_continuation", compute)


@register_metric("continuation_match", direction="higher", unit="share", level="compaction")
class ContinuationMatch:
    """Agreement (0-1) of the next tool call the evaluator proposes from the compacted context with
    the recorded one (tool name and argument similarity)."""

    requires_model: ClassVar[bool] = True

    def unavailable(self, result: Any) -> str | None:
        return missing_evaluator(result)

    def compute(self, result: Any) -> float | None:
        matches = continuations(result)
        scored = [m for m in (matches or {}).values() if m is not None]
        return sum(scored) / len(scored) if scored else None

    def per_compaction(self, result: Any) -> list[dict[str, Any]]:
        matches = continuations(result) or {}
        return [{"continuation_match": matches.get(i)} for i in range(len(result.compactions))]
