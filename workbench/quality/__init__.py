"""Summary quality: what each compaction kept of what the agent needed (DESIGN §7).

Importing this package registers the quality metrics with the registry's `metric` family, the
same way a user's metric registers: `fact_retention`, `needed_fact_retention`,
`dangling_references`, `probe_answerable` (offline) and, with a configured `evaluator` model,
`probe_accuracy`, `judge_score` and `continuation_match`, whose spend is reported apart from the
summarizer's (`evaluator_calls`, `evaluator_cache_hits`, `evaluator_input_tokens`,
`evaluator_output_tokens`, `evaluator_cost_usd`; registered last so they are computed after the
metrics that spend).
"""

from workbench.quality import continuation, judge, probes, recovery, retention, task_state
from workbench.quality import spend as _spend  # noqa: F401  (registers the spend metrics, after the others)
from workbench.quality.facts import Fact, extract_facts, message_facts, normalize
from workbench.quality.retention import CompactionFacts, RunFacts, analyse

__all__ = [
    "CompactionFacts",
    "Fact",
    "RunFacts",
    "analyse",
    "continuation",
    "extract_facts",
    "judge",
    "message_facts",
    "normalize",
    "probes",
    "recovery",
    "retention",
    "task_state",
]
