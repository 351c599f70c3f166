"""The metrics a run reports, each with the direction that counts as better.

Replay computes the cost-side metrics; quality metrics (fact retention, probes, judges) are
declared here too so tables, regressions and charts know how to read every column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Better = Literal["higher", "lower", "none"]


@dataclass(frozen=True)
class Metric:
    name: str
    better: Better
    description: str


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("calls", "none", "recorded LLM calls replayed"),
    Metric("compactions", "none", "compaction events (strategy runs)"),
    Metric("peak_context_tokens", "lower", "largest context sent at any call"),
    Metric("billed_input_tokens", "lower", "sum of context tokens over all calls: what the agent pays for input"),
    Metric("cached_input_tokens", "higher", "input tokens a prompt cache could reuse (unchanged prefix of the previous call)"),
    Metric("cache_aware_input_tokens", "lower", "uncached input + cached input weighted by cache_read_ratio"),
    Metric("summarizer_input_tokens", "lower", "tokens sent to the summarizer"),
    Metric("summarizer_output_tokens", "lower", "tokens the summarizer wrote"),
    Metric("summarizer_calls", "lower", "summarizer calls made (cache hits included)"),
    Metric("cost_usd", "lower", "summarizer cost from LiteLLM prices (0 for offline models; empty when unknown)"),
    Metric("compression_ratio", "higher", "tokens before / after, mean over compactions"),
    Metric("fact_retention", "higher", "share of facts removed by compaction still present in context"),
    Metric("needed_fact_retention", "higher", "share of removed facts the recording uses later still present"),
    Metric("probe_answerable", "higher", "share of probes whose answer is in the final context (offline)"),
    Metric("probe_accuracy", "higher", "share of probes a model answers correctly from the final context"),
    Metric("judge_score", "higher", "LLM judge score of the summaries"),
    Metric("continuation_match", "higher", "agreement of the next action with the recording"),
    Metric("termination", "none", "completed, compaction_failed or context_overflow"),
)}


def better(name: str) -> Better:
    """Which direction is better for a metric (`none` for counts and unknown names)."""
    metric = METRICS.get(name)
    return metric.better if metric else "none"
