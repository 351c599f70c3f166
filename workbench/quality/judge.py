"""An LLM judge of each compaction: how well what it wrote stands in for what it removed.

For every applied compaction that removed something, the evaluator model sees the removed or
rewritten messages and what the compaction put in their place (a summary, truncated results, or
nothing), plus the recorded next request, and rates six dimensions from 0 to 5: accuracy,
context awareness, artifact trail, completeness, continuity and instruction following. It
answers with a JSON object; `judge_score` is the mean of the six (0-5), per compaction and, per
run, the mean over compactions. A reply that is not such an object scores None for that event.
"""

from __future__ import annotations

from typing import Any, ClassVar

from workbench.quality.evaluator import ask, evaluator_model, reply_object, transcript
from workbench.quality.trace import applied_events, compaction_contexts, memo
from workbench.registry import register_metric

DIMENSIONS = ("accuracy", "context_awareness", "artifact_trail", "completeness", "continuity",
              "instruction_following")
MAX_SECTION_CHARS = 120_000

SYSTEM = """You grade how an AI coding agent's memory was compressed. Part of its history (ORIGINAL) was \
removed or rewritten to save space; REPLACEMENT is everything the agent now has in its place. Grade the \
REPLACEMENT against the ORIGINAL on six dimensions, each an integer from 0 (useless) to 5 (nothing needed was lost):
- accuracy: what the replacement states is true to the original (no invented files, values or results);
- context_awareness: it conveys where the work stands: the current task, what was tried, what is pending;
- artifact_trail: it keeps the files read, created or changed and the commands run, with the key details;
- completeness: the facts the agent will need again (paths, names, values, errors) are still there;
- continuity: the agent could carry on from it without redoing work already done;
- instruction_following: the user's constraints, preferences and decisions are preserved.
Reply with one JSON object and nothing else, e.g. {"accuracy": 4, "context_awareness": 3, "artifact_trail": 5, \
"completeness": 2, "continuity": 3, "instruction_following": 5}."""



def parse_scores(text: str) -> dict[str, float] | None:
    """The six 0-5 scores of a judge's reply (clamped), or None when the reply lacks any of them."""
    data = reply_object(text)
    if data is None:
        return None
    scores: dict[str, float] = {}
    for name in DIMENSIONS:
        value = data.get(name, data.get(name.replace("_", " ")))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        scores[name] = float(min(5.0, max(0.0, value)))
    return scores


def _prompt(result: Any, index: int) -> list[dict[str, str]] | None:
    before, after = compaction_contexts(result, index)
    kept = {id(m) for m in after}
    known = {id(m) for m in before}
    removed = [m for m in before if id(m) not in kept]
    if not removed:
        return None
    written = [m for m in after if id(m) not in known]
    replacement = transcript(written, MAX_SECTION_CHARS) if written else "(nothing: the content was dropped)"
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"<ORIGINAL>\n{transcript(removed, MAX_SECTION_CHARS)}\n</ORIGINAL>\n\n"
                                        f"<REPLACEMENT>\n{replacement}\n</REPLACEMENT>"}]


def judgements(result: Any) -> dict[int, dict[str, float] | None] | None:
    """Scores by event index for the compactions the judge saw; None without an evaluator."""
    def compute() -> dict[int, dict[str, float] | None] | None:
        model = evaluator_model(result)
        if model is None:
            return None
        prompts = {i: p for i in applied_events(result) if (p := _prompt(result, i)) is not None}
        completions = ask(result, model, list(prompts.values()), "judge")
        return {i: parse_scores(c.text) for i, c in zip(prompts, completions, strict=True)}

    return memo(result, "quality_judge", compute)


def _mean(scores: dict[str, float] | None) -> float | None:
    return sum(scores.values()) / len(scores) if scores else None


@register_metric("judge_score", direction="higher", unit="score 0-5", level="compaction")
class JudgeScore:
    """An LLM judge's mean 0-5 rating of each compaction's replacement over six dimensions
    (accuracy, context awareness, artifact trail, completeness, continuity, instruction following)."""

    requires_model: ClassVar[bool] = True

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
