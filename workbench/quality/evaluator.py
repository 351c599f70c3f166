"""The evaluator model: the model that answers probes, judges summaries and proposes next actions.

It is named by the replay config's `evaluator` (any LiteLLM model string) with its
`evaluator_options`, and bound on the gateway the replay was given (`ReplayResult.gateway`; the
process's default gateway when none was), so its calls share the summarizer's cache, concurrency
limits and counters: a run's evaluator answers are cached in its database like its summaries.
Its spend is kept per replay result, by purpose (`probe`, `judge`, `continuation`), apart from the
summarizer's; a call that failed for good is kept too (`failures`), as the metric that made it
is only reported as None.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from workbench.errors import WorkbenchError
from workbench.quality.trace import memo
from workbench.session import Message

MAX_TRANSCRIPT_CHARS = 240_000
MAX_MESSAGE_CHARS = 12_000


def evaluator_model(result: Any) -> Any:
    """The bound evaluator model of a result's config, or None when the config names none."""
    config = result.config
    name = getattr(config, "evaluator", None)
    if not name:
        return None
    options: Mapping[str, Any] = getattr(config, "evaluator_options", None) or {}

    def bind() -> Any:
        gateway = getattr(result, "gateway", None)
        if gateway is None:
            from workbench.llm import default_gateway

            gateway = default_gateway()
        return gateway.model(name, dict(options))

    return memo(result, "quality_evaluator", bind)


def spend(result: Any) -> dict[str, list[Any]]:
    """The evaluator completions made for a result, by purpose."""
    return memo(result, "quality_spend", dict)


def record_spend(result: Any, purpose: str, completions: Sequence[Any]) -> None:
    spend(result).setdefault(purpose, []).extend(completions)


class EvaluatorFailed(WorkbenchError):
    """The evaluator model failed for good while measuring a result: its model metrics are None
    because they could not be measured, not because there was nothing to measure."""


def failures(result: Any) -> list[str]:
    """What went wrong with the evaluator calls made for a result (`purpose: error`), in order: a
    run counts a cell whose evaluator failed as a failed cell, so that resuming computes it again."""
    return memo(result, "quality_failures", list)


def check_evaluator(result: Any) -> None:
    """Raise `EvaluatorFailed`, naming the model and each distinct error, when an evaluator call
    made for `result` failed (`failures`)."""
    problems = list(dict.fromkeys(failures(result)))
    if problems:
        name = getattr(result.config, "evaluator", None)
        raise EvaluatorFailed(f"evaluator {name!r} failed, its metrics are not measured: {'; '.join(problems)}")


def ask(result: Any, model: Any, batch: Sequence[Sequence[Mapping[str, Any]]], purpose: str) -> list[Any]:
    """The evaluator's answers to `batch` (one call per message list, results in order), their
    spend recorded for `result`; a failure is recorded in `failures(result)` and raised."""
    if not batch:
        return []
    try:
        completions = list(model.complete_many(batch, purpose=purpose))
    except Exception as exc:
        failures(result).append(f"{purpose}: {type(exc).__name__}: {exc}")
        raise
    record_spend(result, purpose, completions)
    return completions


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters omitted ...]\n{text[-half:]}"


def render(message: Message) -> str:
    """One message as transcript text: `[role]` (or `[tool name]`), its text, its tool calls."""
    head = f"[tool {message.name}]" if message.role == "tool" and message.name else f"[{message.role}]"
    parts = [head]
    if message.text:
        parts.append(_clip(message.text, MAX_MESSAGE_CHARS))
    parts += [f"-> {c.name}({_clip(c.arguments, 2000)})" for c in message.tool_calls]
    return "\n".join(parts)


def transcript(messages: Sequence[Message], limit: int = MAX_TRANSCRIPT_CHARS) -> str:
    """The messages as one text for a model (long messages and long transcripts clipped in the middle)."""
    return _clip("\n\n".join(render(m) for m in messages), limit)


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def reply_object(text: str | None) -> dict[str, Any] | None:
    """The JSON object in a model's reply (the outermost braces), or None when there is none."""
    match = _OBJECT.search(text or "")
    if not match:
        return None
    try:
        data = json.loads(match.group())
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
