"""An LLM judge of each compaction: how well what it wrote stands in for what it removed.

For every applied compaction that removed something, the evaluator model is sent three parts:
ORIGINAL, the messages the compaction removed or rewrote (each long message cut in the middle,
marked, to `MAX_MESSAGE_CHARS`; the whole part cut to what the prompt has room for);
REPLACEMENT, what the compaction put in their place, whole (a summary, truncated results, or
nothing); and NEXT, what the agent did next in the recording (its reply at the compaction's call,
cut to `NEXT_CHARS`). The messages the compaction kept unchanged are not shown, only counted:
they are the same before and after, so they are not what is graded, and the judge is told they
are still there. It rates six dimensions from 0 to 5 (accuracy, context awareness, artifact trail,
completeness, continuity, instruction following) by what was lost, continuity against NEXT.

It answers with a JSON object; `judge_score` is the mean of the six (0-5), per compaction and,
per run, the mean over the compactions graded. Each dimension is also a metric of its own
(`judge_accuracy`, `judge_context_awareness`, `judge_artifact_trail`, `judge_completeness`,
`judge_continuity`, `judge_instruction_following`: per compaction, and per run the mean over the
compactions graded); asked for together with `judge_score`, the judge is asked once. A reply
from which the six scores cannot be read (see `parse_scores`) is the evaluator's failure
(`evaluator.ask`), not a score. A compaction whose REPLACEMENT and NEXT take more than half of
what the evaluator can be sent is not graded (None, with a warning): a judge shown a cut
replacement, or a sliver of the original, would grade the cut.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

from workbench.quality.evaluator import (
    Transcript,
    ask,
    evaluator_model,
    first_reading,
    missing_evaluator,
    render,
    transcript_budget,
)
from workbench.quality.trace import applied_events, compaction_contexts, memo, session_of
from workbench.registry import register_metric

MAX_MESSAGE_CHARS = 12_000
NEXT_CHARS = 4_000

#: What each dimension (Factory's six) asks of a compaction; the judge's prompt states them as written here.
RUBRIC = {
    "accuracy": "every statement in REPLACEMENT is true to ORIGINAL: no file, value, result or outcome invented or "
    "altered (when REPLACEMENT states nothing, nothing in it is wrong)",
    "context_awareness": "the agent still knows where it stands: the task and the subtask in hand, what it tried "
    "and with what result, what is still pending",
    "artifact_trail": "the agent still knows which files it read, created, changed or deleted, how it changed each, "
    "and which commands it ran with what outcome",
    "completeness": "the specific facts of ORIGINAL the agent will need again (paths, names, values, error messages, "
    "test names) are still there",
    "continuity": "the agent can take the step shown in NEXT, and go on after it, without reading again or running "
    "again what ORIGINAL already covered",
    "instruction_following": "the user's instructions, constraints and preferences, and the decisions taken with the "
    "user, survive so that the agent keeps to them",
}
DIMENSIONS = tuple(RUBRIC)

SYSTEM = (
    """You grade a compaction of an AI coding agent's working memory: how much of what the agent needs \
it kept. To free space, part of the agent's history (ORIGINAL) was removed or rewritten; REPLACEMENT is what the \
compaction put in its place, and may be nothing. The messages it kept unchanged are still in the agent's memory \
but are not shown to you. NEXT is the step the agent took right after the compaction. An ORIGINAL message marked \
"[... N characters omitted ...]" was shortened for you only: a REPLACEMENT statement that could come from the \
omitted part is not invented.

Score each of the six dimensions below on its own, as an integer from 0 to 5:
5 - nothing that matters to this dimension was lost (also when ORIGINAL held nothing for it, even with an empty \
REPLACEMENT);
4 - only details lost that the agent would not miss;
3 - useful information lost that the agent could get back cheaply;
2 - important information lost: the agent would have to redo work to get it back;
1 - most of what mattered lost;
0 - all of it lost, or REPLACEMENT contradicts ORIGINAL.
One dimension does not decide another: a short REPLACEMENT can be wholly accurate and yet incomplete.

Dimensions:
"""
    + "\n".join(f"- {name}: {question};" for name, question in RUBRIC.items())
    + """

Reply with one JSON object holding the six integer scores and nothing else, e.g. {"accuracy": 4, \
"context_awareness": 3, "artifact_trail": 5, "completeness": 2, "continuity": 3, "instruction_following": 5}."""
)

_KEY = re.compile(r"[\s\-]+")
_SCORE = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*(?:/\s*5(?:\.0+)?)?\s*")


def _score(value: Any) -> float | None:
    """A 0-5 score given as a number, a numeric string ("4", "4/5") or an object holding one."""
    if isinstance(value, Mapping):
        value = next((value[k] for k in ("score", "rating", "value") if k in value), None)
    if isinstance(value, str):
        match = _SCORE.fullmatch(value)
        value = float(match.group(1)) if match else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return float(min(5.0, max(0.0, value)))


def _scores_in(data: Mapping[str, Any]) -> dict[str, float] | None:
    by_key = {_KEY.sub("_", str(k).strip().lower()): v for k, v in data.items()}
    scores = {name: _score(by_key.get(name)) for name in DIMENSIONS}
    if any(v is None for v in scores.values()):
        return None
    return {name: float(v) for name, v in scores.items() if v is not None}


def parse_scores(text: str) -> dict[str, float] | None:
    """The six 0-5 scores of a judge's reply (clamped), or None when no JSON object in it has all six.

    Read as models write them: the object alone, in a code fence or among prose; the scores at
    its top level or one level down (`{"scores": {...}}`); keys in any case, with spaces or
    hyphens for underscores; values as numbers, numeric strings ("4", "4/5") or `{"score": 4}`."""
    return first_reading(text, _scores_in)


def _unreadable(text: str) -> str | None:
    return None if parse_scores(text) is not None else "no JSON object with the six 0-5 scores"


def _prompt(result: Any, index: int, budget: int, replies: Mapping[int, Any]) -> list[dict[str, str]] | None:
    """The judge's messages for compaction `index`; None when it removed nothing.

    Raises `_TooLong` when REPLACEMENT and NEXT leave ORIGINAL less than half of `budget`."""
    before, after = compaction_contexts(result, index)
    kept = {id(m) for m in after}
    known = {id(m) for m in before}
    removed = [m for m in before if id(m) not in kept]
    if not removed:
        return None
    written = [m for m in after if id(m) not in known]
    replacement = "\n\n".join(map(render, written)) if written else "(nothing: the content was dropped)"
    record = replies.get(result.compactions[index].call_index)
    following = (
        "(not recorded: the replay ended here)"
        if record is None
        else Transcript.of([session_of(result).messages[record.message_index]], NEXT_CHARS, NEXT_CHARS).text
    )
    room = budget - len(replacement) - len(following)
    if room < budget // 2:
        raise _TooLong
    original = Transcript.of(removed, room, MAX_MESSAGE_CHARS).text
    return [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": f"<ORIGINAL>\n{original}\n</ORIGINAL>\n\n"
            f"<REPLACEMENT>\n{replacement}\n</REPLACEMENT>\n\n"
            f"({len(after) - len(written)} other messages were kept unchanged; "
            f"they are not shown.)\n\n"
            f"<NEXT>\n{following}\n</NEXT>",
        },
    ]


class _TooLong(Exception):
    pass


def judgements(result: Any) -> dict[int, dict[str, float] | None] | None:
    """Scores by event index for the compactions the judge saw (None for one too long to grade);
    None without an evaluator."""

    def compute() -> dict[int, dict[str, float] | None] | None:
        model = evaluator_model(result)
        if model is None:
            return None
        budget = transcript_budget(result)
        replies = {c.index: c for c in result.calls}
        prompts: dict[int, list[dict[str, str]]] = {}
        too_long: list[int] = []
        for i in applied_events(result):
            try:
                prompt = _prompt(result, i, budget, replies)
            except _TooLong:
                too_long.append(i)
                continue
            if prompt is not None:
                prompts[i] = prompt
        labels = [f"compaction {i} (call {result.compactions[i].call_index})" for i in prompts]
        completions = ask(result, model, list(prompts.values()), "judge", check=_unreadable, labels=labels)
        judged: dict[int, dict[str, float] | None] = {
            i: parse_scores(c.text) for i, c in zip(prompts, completions, strict=True)
        }
        judged.update(dict.fromkeys(too_long))
        if too_long:
            warnings.warn(
                f"judge_score: {len(too_long)} compaction(s) not graded ({', '.join(map(str, too_long))}): "
                f"what they wrote and the next step take more than half of what the evaluator "
                f"{getattr(result.config, 'evaluator', None)!r} can be sent ({budget:,} characters)",
                RuntimeWarning,
                stacklevel=2,
            )
        return judged

    return memo(result, "quality_judge", compute)


def _mean(scores: dict[str, float] | None) -> float | None:
    return sum(scores.values()) / len(scores) if scores else None


@register_metric("judge_score", direction="higher", unit="score 0-5", level="compaction")
class JudgeScore:
    """An LLM judge's mean 0-5 rating of what each compaction lost, seen against the next recorded step,
    over six dimensions (accuracy, context awareness, artifact trail, completeness, continuity,
    instruction following)."""

    requires_model: ClassVar[bool] = True

    def unavailable(self, result: Any) -> str | None:
        return missing_evaluator(result)

    def compute(self, result: Any) -> float | None:
        judged = judgements(result)
        if not judged:
            return None
        means = [m for m in (_mean(s) for s in judged.values()) if m is not None]
        return sum(means) / len(means) if means else None

    def per_compaction(self, result: Any) -> list[dict[str, Any]]:
        judged = judgements(result) or {}
        rows = []
        for index in range(len(result.compactions)):
            scores = judged.get(index)
            row: dict[str, Any] = {"judge_score": _mean(scores)}
            row.update({f"judge_{d}": (scores or {}).get(d) for d in DIMENSIONS})
            rows.append(row)
        return rows


class JudgeDimension:
    """One of the judge's six dimensions as a metric: its 0-5 score per compaction, per run the mean
    over the compactions graded (the same judgement `judge_score` averages)."""

    requires_model: ClassVar[bool] = True
    dimension: ClassVar[str]

    def unavailable(self, result: Any) -> str | None:
        return missing_evaluator(result)

    def compute(self, result: Any) -> float | None:
        scores = [s[self.dimension] for s in (judgements(result) or {}).values() if s]
        return sum(scores) / len(scores) if scores else None

    def per_compaction(self, result: Any) -> list[dict[str, Any]]:
        judged = judgements(result) or {}
        return [
            {f"judge_{self.dimension}": (judged.get(index) or {}).get(self.dimension)}
            for index in range(len(result.compactions))
        ]


def _dimension_metric(dimension: str) -> type[JudgeDimension]:
    name = f"judge_{dimension}"
    metric = type(
        "Judge" + dimension.title().replace("_", ""),
        (JudgeDimension,),
        {
            "dimension": dimension,
            "__doc__": f"The LLM judge's 0-5 score of what each compaction lost on {dimension.replace('_', ' ')}: "
            f"{RUBRIC[dimension]} (per run: the mean over the compactions graded).",
        },
    )
    return register_metric(name, direction="higher", unit="score 0-5", level="compaction")(metric)


DIMENSION_METRICS = {f"judge_{d}": _dimension_metric(d) for d in DIMENSIONS}
