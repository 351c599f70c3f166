"""Input-token and cost reductions of each config against a baseline config (a spec's `[report]`).

Published context-management results are stated as reductions against the unmanaged agent
("masking halves cost"). A replay measures the counterfactual context cost of the recorded
actions under each policy, so the same figure can be read off a run:

    [report]
    baseline = "raw-agent"            # the config the others are measured against
    input_usd_per_mtok = 2.0          # prices of the agent's model, per million tokens
    output_usd_per_mtok = 12.0
    split = "outcome_resolved"        # optional: also per value of a sessions column

Reductions are paired: for each config, over the sessions where both it and the baseline
completed (a replay that stopped early would look cheaper), as `1 - total(config) / total(baseline)`.
Input tokens are the agent's billed input plus the summarizer's input; cost prices those and
the output tokens (the agent's recorded completions, the same under every policy, plus the
summarizer's) at the report's prices. The solve rate cannot change in a replay: the actions are
the recorded ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    import pandas as pd

REPORT_KEYS = ("baseline", "input_usd_per_mtok", "output_usd_per_mtok", "split")
#: The label of the row group holding every session (a split adds one group per value).
ALL = "all"


@dataclass(frozen=True)
class ReportOptions:
    """A spec's `[report]`: the baseline config, the agent model's prices, an optional split."""

    baseline: str
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None
    split: str | None = None

    @property
    def priced(self) -> bool:
        return self.input_usd_per_mtok is not None and self.output_usd_per_mtok is not None


@dataclass(frozen=True)
class Reduction:
    """One config's reduction against the baseline over `sessions` paired sessions of `group`.
    Tokens and cost are means per session; reductions are fractions (0.5: half), None without pairs
    or prices; `left_out` counts the sessions of the group dropped because one side did not complete."""

    group: str
    config: str
    sessions: int
    left_out: int
    input_tokens: float | None
    input_reduction: float | None
    cost_usd: float | None
    cost_reduction: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "config": self.config,
            "sessions": self.sessions,
            "left_out": self.left_out,
            "input_tokens": self.input_tokens,
            "input_reduction": self.input_reduction,
            "cost_usd": self.cost_usd,
            "cost_reduction": self.cost_reduction,
        }


def report_options(raw: Any, config_names: Sequence[str]) -> ReportOptions | None:
    """Validate a spec's `[report]` table (None when absent); ConfigError names the key at fault."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError("key 'report': must be a table such as [report] baseline = \"no-compaction\"")
    unknown = sorted(set(raw) - set(REPORT_KEYS))
    if unknown:
        raise ConfigError(
            f"[report]: unknown key{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}; "
            f"valid: {', '.join(REPORT_KEYS)}{did_you_mean(unknown, REPORT_KEYS)}"
        )
    baseline = raw.get("baseline")
    if not isinstance(baseline, str) or baseline not in config_names:
        raise ConfigError(
            f"[report] baseline: {baseline!r} is not a config of the experiment; configs: "
            f"{', '.join(config_names)}{did_you_mean([str(baseline)], config_names)}"
        )
    prices: dict[str, float | None] = {}
    for key in ("input_usd_per_mtok", "output_usd_per_mtok"):
        value = raw.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
        ):
            raise ConfigError(
                f"[report] {key}: must be a price in USD per million tokens (a number >= 0), not {value!r}"
            )
        prices[key] = None if value is None else float(value)
    if (prices["input_usd_per_mtok"] is None) != (prices["output_usd_per_mtok"] is None):
        raise ConfigError("[report]: give both input_usd_per_mtok and output_usd_per_mtok, or neither")
    split = raw.get("split")
    if split is not None and (not isinstance(split, str) or not split.strip()):
        raise ConfigError(
            f"[report] split: must name a column of the sessions, such as 'outcome_resolved', not {split!r}"
        )
    return ReportOptions(baseline, prices["input_usd_per_mtok"], prices["output_usd_per_mtok"], split)


def _number(row: Mapping[Any, Any], key: str) -> float:
    value = row.get(key)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def reductions(
    results: pd.DataFrame,
    options: ReportOptions,
    *,
    output_tokens: Mapping[str, float] | None = None,
    groups: Mapping[str, str] | None = None,
) -> list[Reduction]:
    """Per config (the baseline first) and per group (`all`, then each value of `groups`:
    session id -> label), the mean input tokens and cost per session and their reduction against
    the baseline, over the sessions where both completed. `output_tokens` (session id -> the
    agent's output tokens) enters the cost; without it the cost counts the output of summaries only.
    Repeats of a cell are averaged first."""
    if results.empty:
        return []
    configs = list(dict.fromkeys(str(c) for c in results["config"]))
    if options.baseline not in configs:
        raise ConfigError(
            f"[report] baseline {options.baseline!r} has no results in this run; configs: {', '.join(configs)}"
        )
    cells: dict[tuple[str, str], list[tuple[float, float, bool]]] = {}
    for row in results.to_dict(orient="records"):
        session, config = str(row["session_id"]), str(row["config"])
        summarizer_out = _number(row, "summarizer_output_tokens")
        tokens = _number(row, "billed_input_tokens") + _number(row, "summarizer_input_tokens")
        cost = math.nan
        if options.input_usd_per_mtok is not None and options.output_usd_per_mtok is not None:
            agent_out = float((output_tokens or {}).get(session, 0.0))
            cost = (
                tokens * options.input_usd_per_mtok + (agent_out + summarizer_out) * options.output_usd_per_mtok
            ) / 1e6
        cells.setdefault((session, config), []).append((tokens, cost, row.get("termination") == "completed"))
    measured = {
        key: (
            sum(v[0] for v in values) / len(values),
            sum(v[1] for v in values) / len(values),
            all(v[2] for v in values),
        )
        for key, values in cells.items()
    }
    sessions = list(dict.fromkeys(session for session, _ in cells))
    labels = [ALL, *sorted({str(v) for v in (groups or {}).values()})]
    order = [options.baseline, *(c for c in configs if c != options.baseline)]
    rows = []
    for label in labels:
        members = sessions if label == ALL else [s for s in sessions if str((groups or {}).get(s)) == label]
        for config in order:
            paired = [
                s
                for s in members
                if (s, config) in measured
                and (s, options.baseline) in measured
                and measured[(s, config)][2]
                and measured[(s, options.baseline)][2]
            ]
            rows.append(_row(label, config, paired, len(members) - len(paired), measured, options))
    return rows


def _row(
    label: str,
    config: str,
    paired: list[str],
    left_out: int,
    measured: Mapping[tuple[str, str], tuple[float, float, bool]],
    options: ReportOptions,
) -> Reduction:
    if not paired:
        return Reduction(label, config, 0, left_out, None, None, None, None)
    tokens = sum(measured[(s, config)][0] for s in paired)
    base_tokens = sum(measured[(s, options.baseline)][0] for s in paired)
    cost = sum(measured[(s, config)][1] for s in paired) if options.priced else None
    base_cost = sum(measured[(s, options.baseline)][1] for s in paired) if options.priced else None
    return Reduction(
        group=label,
        config=config,
        sessions=len(paired),
        left_out=left_out,
        input_tokens=tokens / len(paired),
        input_reduction=1 - tokens / base_tokens if base_tokens > 0 else None,
        cost_usd=cost / len(paired) if cost is not None else None,
        cost_reduction=1 - cost / base_cost if cost is not None and base_cost else None,
    )


def table_rows(rows: Sequence[Reduction]) -> list[dict[str, Any]]:
    """The rows as a text table shows them: tokens rounded, reductions in percent, cost in dollars."""

    def percent(value: float | None) -> str:
        return "" if value is None else f"{value * 100:.1f} %"

    return [
        {
            "group": r.group,
            "config": r.config,
            "sessions": r.sessions,
            "left out": r.left_out or "",
            "input tokens": "" if r.input_tokens is None else f"{r.input_tokens:,.0f}",
            "input reduction": percent(r.input_reduction),
            "cost (USD)": "" if r.cost_usd is None else f"{r.cost_usd:.4f}",
            "cost reduction": percent(r.cost_reduction),
        }
        for r in rows
    ]


TABLE_COLUMNS = [
    "group",
    "config",
    "sessions",
    "left out",
    "input tokens",
    "input reduction",
    "cost (USD)",
    "cost reduction",
]


def run_reductions(
    run_id: str, options: ReportOptions, *, db: str | None = None, results: pd.DataFrame | None = None
) -> list[Reduction]:
    """`reductions` of a stored run: its results, the agent's output tokens from the replayed calls
    of the baseline, and the split's groups read from the sessions (a value of None is `null`)."""
    from workbench.store import open_results

    with open_results(db) as stored:
        run = stored.resolve_run_id(run_id)
        frame = stored.results_frame(run) if results is None else results
        calls = stored.calls_frame(run)
    output: dict[str, float] = {}
    if not calls.empty:
        base = calls[calls["config"] == options.baseline]
        per_cell = base.groupby(["session_id", "repeat"])["completion_tokens"].sum()
        output = {str(k): float(v) for k, v in per_cell.groupby(level=0).mean().items()}
    groups = session_groups(frame["session_id"].unique().tolist(), options.split, db=db) if options.split else None
    return reductions(frame, options, output_tokens=output, groups=groups)


def session_groups(session_ids: Sequence[str], column: str, *, db: str | None = None) -> dict[str, str]:
    """Session id -> the value of a sessions column (e.g. `outcome_resolved`) as a label
    (`true`, `false`, `null`)."""
    from workbench.store import Store

    with Store(db, read_only=True) as store:
        wanted = set(session_ids)
        holds = set(store.session_ids(where=f"({column}) IS TRUE"))
        fails = set(store.session_ids(where=f"({column}) IS FALSE"))
    return {s: f"{column}={'true' if s in holds else 'false' if s in fails else 'null'}" for s in wanted}
