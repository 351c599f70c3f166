"""The evaluator model: the model that answers probes, judges summaries and proposes next actions.

It is named by the replay config's `evaluator` (any LiteLLM model string) with its
`evaluator_options`, and bound on the gateway the replay was given (`ReplayResult.gateway`; the
process's default gateway when none was), so its calls share the summarizer's cache, concurrency
limits and counters: a run's evaluator answers are cached in its database like its summaries.

Its spend is kept per replay result, by purpose (`probe`, `judge`, `continuation`), apart from the
summarizer's: every answer that came back is kept, also when another call of its batch failed, as
it was paid for. A call that failed for good is kept too (`failures`), and so is an answer the
metric cannot use (empty, refused, or not in the form asked for): the evaluator failed, not the
compaction, so the metric is not measured (None) and a run counts the cell as failed rather than
storing a score made of unreadable answers.

What the evaluator is sent is a transcript of the messages the agent had, whole: probes and
continuation ask about what the agent saw, so no message is shortened; only a transcript longer
than the evaluator can take (`transcript_budget`) is cut in the middle, and a metric then leaves
unscored what the cut may have hidden from it rather than score it wrong (`Transcript.hides`).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

from workbench.compaction import REFUSED_FINISH_REASONS
from workbench.errors import WorkbenchError
from workbench.quality.facts import normalize_text
from workbench.quality.trace import memo
from workbench.session import Message

T = TypeVar("T")

#: Transcript characters an evaluator prompt may hold when LiteLLM does not know the model's window.
MAX_TRANSCRIPT_CHARS = 240_000
#: Tokens of the window left for the instructions, the question and the answer.
RESERVED_TOKENS = 2_000
#: Characters per token assumed when a window in tokens becomes a budget in characters: code and
#: JSON run at 3-4 with the usual tokenizers, so 3 errs on the side of fitting.
CHARS_PER_TOKEN = 3
#: The smallest budget given, however small the model's window says it is.
MIN_TRANSCRIPT_CHARS = 4_000
REPLY_SHOWN = 160


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


def missing_evaluator(result: Any) -> str | None:
    """Why the model metrics cannot be measured for `result` (its config names no evaluator), or None.

    The model metrics answer it as their `unavailable`, so asking for them without an evaluator
    is one warning naming them (`registry.evaluate_metrics`), not a silent None."""
    if getattr(result.config, "evaluator", None):
        return None
    return (
        "the config names no evaluator model: set `evaluator` to a LiteLLM model string (e.g. "
        "'openai/gpt-4o-mini') and its `evaluator_options` (api_base, api_key_env, ...) in the config, "
        "or under [defaults] in an experiment"
    )


@functools.lru_cache(maxsize=64)
def _window_tokens(model: str) -> int | None:
    from workbench.llm import load_litellm

    try:
        info = load_litellm().get_model_info(model)
    except Exception:  # LiteLLM raises for models missing from its map
        return None
    tokens = info.get("max_input_tokens") or info.get("max_tokens")
    return int(tokens) if isinstance(tokens, (int, float)) and tokens > 0 else None


def transcript_budget(result: Any) -> int:
    """The characters of transcript one evaluator prompt may hold: the evaluator's input window
    (LiteLLM's model map) less `RESERVED_TOKENS`, at `CHARS_PER_TOKEN`; `MAX_TRANSCRIPT_CHARS`
    when the map does not know the model (a self-hosted or renamed one)."""
    name = getattr(result.config, "evaluator", None)
    window = _window_tokens(str(name)) if name else None
    if window is None:
        return MAX_TRANSCRIPT_CHARS
    return max(MIN_TRANSCRIPT_CHARS, (window - RESERVED_TOKENS) * CHARS_PER_TOKEN)


def spend(result: Any) -> dict[str, list[Any]]:
    """The evaluator completions made for a result, by purpose."""
    return memo(result, "quality_spend", dict[str, list[Any]])


def record_spend(result: Any, purpose: str, completions: Sequence[Any]) -> None:
    spend(result).setdefault(purpose, []).extend(completions)


class EvaluatorFailed(WorkbenchError):
    """The evaluator model failed for good while measuring a result, or gave answers its metric
    cannot read: its model metrics are None because they could not be measured, not because
    there was nothing to measure."""


def failures(result: Any) -> list[str]:
    """What went wrong with the evaluator calls made for a result (`purpose: error`), in order: a
    run counts a cell whose evaluator failed as a failed cell, so that resuming computes it again."""
    return memo(result, "quality_failures", list[str])


def check_evaluator(result: Any) -> None:
    """Raise `EvaluatorFailed`, naming the model and each distinct error, when an evaluator call
    made for `result` failed (`failures`)."""
    problems = list(dict.fromkeys(failures(result)))
    if problems:
        name = getattr(result.config, "evaluator", None)
        raise EvaluatorFailed(f"evaluator {name!r} failed, its metrics are not measured: {'; '.join(problems)}")


#: Why a metric cannot use an answer's text (None: it can).
Check = Callable[[str], "str | None"]


def ask(
    result: Any,
    model: Any,
    batch: Sequence[Sequence[Mapping[str, Any]]],
    purpose: str,
    *,
    check: Check | None = None,
    labels: Sequence[str] = (),
) -> list[Any]:
    """The evaluator's answers to `batch` (one call per message list, results in order).

    Every answer that came back is recorded in `spend(result)`, also when the batch then fails.
    The batch fails, recorded in `failures(result)` and raised, when a call fails for good (the
    gateway's error) or an answer is unusable: empty, refused, or rejected by `check` (the
    metric's parser: `EvaluatorFailed`, naming `purpose`, the item's label from `labels` and the
    start of the reply). After the first failure the calls not yet started are not made: the
    result is not measured anyway, and a resumed run asks again only what was not answered.
    """
    if not batch:
        return []
    answers: list[Any] = [None] * len(batch)
    errors: list[tuple[int, BaseException]] = []
    workers = max(1, min(len(batch), int(getattr(getattr(model, "limiter", None), "limit", 8) or 8)))
    waiting = iter(range(len(batch)))
    with ThreadPoolExecutor(workers, thread_name_prefix=f"evaluator-{purpose}") as pool:
        running: dict[Future[Any], int] = {}

        def start(count: int) -> None:
            for index in itertools.islice(waiting, count):
                running[pool.submit(model.complete, list(batch[index]), purpose=purpose, validate=check)] = index

        start(workers)
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                index = running.pop(future)
                error: BaseException | None = future.exception()
                if error is None:
                    answers[index] = future.result()
                    error = _unusable_answer(answers[index], check, purpose, _label(labels, index, len(batch)))
                if error is not None:
                    errors.append((index, error))
            if not errors:
                start(len(done))
    record_spend(result, purpose, [a for a in answers if a is not None])
    if errors:
        _, first = min(errors, key=lambda item: item[0])
        shown = str(first) if isinstance(first, EvaluatorFailed) else f"{purpose}: {type(first).__name__}: {first}"
        more = f" (and {len(errors) - 1} more calls of this batch failed)" if len(errors) > 1 else ""
        failures(result).append(shown + more)
        raise first
    return answers


def _label(labels: Sequence[str], index: int, size: int) -> str:
    return labels[index] if index < len(labels) else f"request {index + 1} of {size}"


def _unusable_answer(completion: Any, check: Check | None, purpose: str, label: str) -> EvaluatorFailed | None:
    if completion.finish_reason in REFUSED_FINISH_REASONS:
        problem: str | None = f"a refusal (finish_reason {completion.finish_reason!r})"
    elif not (completion.text or "").strip():
        problem = "an empty answer"
    else:
        problem = None if check is None else check(completion.text)
    if problem is None:
        return None
    return EvaluatorFailed(
        f"{purpose}: unusable answer for {label}: {problem}; the reply began {_start(completion.text)}"
    )


def _start(text: str | None) -> str:
    text = " ".join((text or "").split())
    return repr(text if len(text) <= REPLY_SHOWN else text[:REPLY_SHOWN] + "...")


# -- transcripts ----------------------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters omitted ...]\n{text[-half:]}"


def render(message: Message, limit: int | None = None) -> str:
    """One message as transcript text: `[role]` (or `[tool name]`), its text, its tool calls;
    with `limit`, its text and each call's arguments cut in the middle beyond `limit` characters."""
    head = f"[tool {message.name}]" if message.role == "tool" and message.name else f"[{message.role}]"
    parts = [head]
    if message.text:
        parts.append(message.text if limit is None else _clip(message.text, limit))
    parts += [f"-> {c.name}({c.arguments if limit is None else _clip(c.arguments, limit)})" for c in message.tool_calls]
    return "\n".join(parts)


@dataclass(frozen=True)
class Transcript:
    """Messages as one text for a model: `full` holds every message (whole, or each cut to the
    `per_message` it was made with), `text` is what is sent: `full`, cut in the middle when longer
    than the budget (`clipped`)."""

    full: str
    text: str
    clipped: bool

    @classmethod
    def of(cls, messages: Sequence[Message], limit: int, per_message: int | None = None) -> Transcript:
        full = "\n\n".join(render(m, per_message) for m in messages)
        return cls(full, _clip(full, limit), len(full) > limit)

    @cached_property
    def _normalized(self) -> tuple[str, str]:
        return normalize_text(self.full), normalize_text(self.text)

    def hides(self, wanted: str) -> bool:
        """Whether `wanted` (normalised like facts) is in `full` but not in what is sent: a question
        about it would then test the cut, not the compaction."""
        if not self.clipped:
            return False
        key = normalize_text(wanted)
        if not key:
            return False
        full, sent = self._normalized
        return key in full and key not in sent


# -- reading replies ------------------------------------------------------------------------------


def reply_objects(text: str | None) -> list[dict[str, Any]]:
    """Every JSON object in a model's reply, outermost first and in order: around or inside prose
    and code fences, and the objects of a top-level JSON array."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    text = text or ""
    at = 0
    while True:
        starts = [i for i in (text.find("{", at), text.find("[", at)) if i >= 0]
        if not starts:
            return found
        start = min(starts)
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            at = start + 1
            continue
        if isinstance(value, dict):
            found.append(value)
        elif isinstance(value, list):
            found += [item for item in value if isinstance(item, dict)]
        at = end if end > start else start + 1


def nested(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """`data` and the objects directly under its keys: where a model wraps what was asked for
    (`{"scores": {...}}`, `{"tool_call": {...}}`)."""
    return [data, *(value for value in data.values() if isinstance(value, Mapping))]


def first_reading(text: str | None, read: Callable[[Mapping[str, Any]], T | None]) -> T | None:
    """What `read` makes of the first object of a reply it can read: the reply's JSON objects
    (`reply_objects`) in order, each before the objects under its keys (`nested`)."""
    for data in reply_objects(text):
        for candidate in nested(data):
            found = read(candidate)
            if found is not None:
                return found
    return None
