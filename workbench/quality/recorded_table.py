"""Score the recorded agent's own compactions beside replayed configurations at the same points.

    python -m workbench.quality.recorded_table [PATH ...]   # default: ../shared/sessions/claude-code

For every imported session that records compactions, each configuration replays it with the
`recorded` trigger (so all compact exactly where the agent did) and is scored with the same
offline quality metrics: fact retention, needed-fact retention, dangling references, and the
tokens of what the compactions wrote (summary tokens) and left (tokens after). `as-recorded` is
the production agent's own summary; `workbench/extractive` rows are the offline extractive
baseline summarizer (no model), labelled as such; the capped ones write summaries of at most the
recorded summary's tokens, as they enter the context. Prints a Markdown table (means over sessions,
and per session with `--per-session`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workbench.registry import evaluate_metrics
from workbench.session import Session
from workbench.tokens import count_tokens

DEFAULT_FOLDER = Path(__file__).resolve().parents[3] / "shared" / "sessions" / "claude-code"
TOKENIZER = "cl100k_base"
CONFIGS: dict[str, dict[str, Any]] = {
    "as-recorded (the agent's own summary)": {"strategy": {"kind": "recorded"}},
    "summarize_full, extractive (offline baseline)": {"strategy": {"kind": "summarize_full"}},
    "summarize_split 0.4, extractive (offline baseline)": {"strategy": {"kind": "summarize_split", "preserve": 0.4}},
    "summarize_progressive, extractive (offline baseline)": {"strategy": {"kind": "summarize_progressive"}},
    "summarize_full, extractive capped at the recorded summary's tokens (offline baseline)": {
        "strategy": {"kind": "summarize_full"},
        "cap": True,
    },
    "summarize_split 0.4, extractive capped at the recorded summary's tokens (offline baseline)": {
        "strategy": {"kind": "summarize_split", "preserve": 0.4},
        "cap": True,
    },
    "observation_masking 10": {"strategy": {"kind": "observation_masking", "keep_recent": 10}},
    "sliding_window 20": {"strategy": {"kind": "sliding_window", "window": 20}},
    "hard_clear 10": {"strategy": {"kind": "hard_clear", "keep_recent": 10}},
}
COLUMNS = (
    "task_state_coverage",
    "fact_retention",
    "needed_fact_retention",
    "dangling_references",
    "summary_tokens",
    "tokens_after",
)


def recorded_sessions(paths: Sequence[str | Path]) -> list[Session]:
    from workbench.importers import load

    sessions = []
    for path in paths:
        for session in load(path):
            if session.recorded_compactions:
                sessions.append(session)
    return sessions


class CappedSummarizer:
    """The configured summarizer, whose summaries hold at most `cap` tokens of the table's tokenizer
    (a budget-matched baseline). A summarizer measures its `max_tokens` its own way (the extractive
    one in characters / 4, which code-heavy text exceeds in cl100k tokens), so a summary over the cap
    is asked for again with the budget shrunk by the overshoot, at most `TRIES` times."""

    TRIES = 6

    def __init__(self, model: str, cap: int):
        from workbench.llm import default_gateway

        self.model = model
        self.cap = cap
        self._bound = default_gateway().model(model, {})

    def complete(self, messages: Any, *, purpose: str = "summary", max_tokens: int | None = None) -> Any:
        budget = self.cap if max_tokens is None else min(max_tokens, self.cap)
        for _ in range(self.TRIES):
            completion = self._bound.complete(messages, purpose=purpose, max_tokens=budget)
            used = count_tokens(completion.text, TOKENIZER)
            if used <= self.cap or budget <= 1:
                break
            budget = max(1, min(budget - 1, budget * self.cap // used))
        return completion


def recorded_summary_tokens(session: Any) -> int:
    """Mean tokens (the table's tokenizer) of the session's recorded summaries."""
    summaries = [r.summary for r in session.recorded_compactions if r.summary]
    return max(1, sum(count_tokens(s, TOKENIZER) for s in summaries) // max(1, len(summaries)))


def score(session: Any, spec: dict[str, Any]) -> dict[str, Any]:
    from workbench.replay import changed_compactions, replay

    spec = dict(spec)
    capped = spec.pop("cap", False)
    config = {
        "name": "recorded-points",
        "tokenizer": TOKENIZER,
        "context_limit": 200_000,
        "max_output": 8192,
        "trigger": {"kind": "recorded"},
        **spec,
    }
    cap = budget = recorded_summary_tokens(session)
    for _ in range(CappedSummarizer.TRIES):
        # a strategy may add to the summary (summarize_full appends the last user request): the summary as
        # it enters the context must fit the cap, so the summarizer's budget shrinks by what the longest overshot
        summarizer = CappedSummarizer("workbench/extractive", budget) if capped else None
        result = replay(session, config, summarizer=summarizer, measure=False)  # measured once, below
        longest = max((count_tokens(e.summary, TOKENIZER) for e in result.compactions if e.summary), default=0)
        if not capped or longest <= cap or budget <= 1:
            break
        budget = max(1, budget - (longest - cap))
    values, _ = evaluate_metrics(result)
    summaries = [e.summary for e in result.compactions if e.summary]
    done = changed_compactions(result.compactions)
    return {
        "compactions": len(done),
        "task_state_coverage": values.get("task_state_coverage"),
        "fact_retention": values.get("fact_retention"),
        "needed_fact_retention": values.get("needed_fact_retention"),
        "dangling_references": values.get("dangling_references"),
        "summary_tokens": sum(count_tokens(s, TOKENIZER) for s in summaries) / max(1, len(done)),
        "tokens_after": sum(e.tokens_after for e in done) / max(1, len(done)),
        "termination": result.termination,
    }


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:,.0f}"
    return str(value)


def table(rows: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "| configuration (at the recorded points) | " + " | ".join(COLUMNS) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    for name, scored in rows.items():
        cells = []
        for column in COLUMNS:
            values = [r[column] for r in scored if r[column] is not None]
            cells.append(_cell(sum(values) / len(values)) if values else "—")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workbench.quality.recorded_table", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("paths", nargs="*", default=[str(DEFAULT_FOLDER)])
    parser.add_argument("--per-session", action="store_true")
    args = parser.parse_args(argv)
    sessions = recorded_sessions(args.paths)
    if not sessions:
        print("no session with recorded compactions found", file=sys.stderr)
        return 1
    print(
        f"{len(sessions)} sessions with {sum(len(s.recorded_compactions) for s in sessions)} recorded compactions "
        f"({', '.join(f'{s.id}: {s.calls} calls' for s in sessions)}); tokenizer {TOKENIZER}\n"
    )
    rows: dict[str, list[dict[str, Any]]] = {name: [score(s, spec) for s in sessions] for name, spec in CONFIGS.items()}
    print(table(rows))
    if args.per_session:
        for index, session in enumerate(sessions):
            print(f"\n{session.id}")
            print(table({name: [scored[index]] for name, scored in rows.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
