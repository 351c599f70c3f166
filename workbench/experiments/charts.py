"""Plotly figures and tables of results, shared by the HTML report, the app and notebooks.

Every function takes plain DataFrames (the shapes of `wb.results`, the run's calls and compactions,
or `ReplayResult.to_frame()` stacked over configs), so an ad-hoc comparison draws the same charts
as a stored run. Text from sessions (summaries) is HTML-escaped before it reaches a hover label.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from workbench import formatting
from workbench.experiments.compare import CompletePairs, complete_pairs, declared_unit, metric_direction

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

#: The quality metric charts and leaderboards show by default, best first: task-state coverage, which the
#: metric audit finds ranks a real summary above a keyword list of equal tokens (the lexical fact metrics,
#: which count paths, identifiers, numbers and commands, do not).
QUALITY_PREFERENCE = (
    "task_state_coverage",
    "needed_fact_retention",
    "fact_retention",
    "probe_accuracy",
    "probe_answerable",
    "judge_score",
    "continuation_match",
)
COST_PREFERENCE = ("cost_usd", "billed_input_tokens", "cache_aware_input_tokens")
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
HOVER_SUMMARY_CHARS = 400
#: The name of the token chart's line of the input the provider billed for the recorded calls.
RECORDED_INPUT_TRACE = "recorded input"
#: The cost-versus-quality legend entry of the hollow markers (configs that completed fewer sessions than another).
INCOMPLETE_TRACE = "hollow: completed fewer sessions than another config (never on the front)"


def _escape(text: Any, limit: int = HOVER_SUMMARY_CHARS) -> str:
    value = "" if text is None else str(text)
    if len(value) > limit:
        value = value[:limit] + " …"
    return html.escape(value).replace("\n", "<br>")


def color_of(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def stop_reason(termination: Any, error: Any = None) -> str:
    """How a replay that stopped early reads in a chart: `context_overflow: call 16: context ...`."""
    return f"{termination}: {error}" if isinstance(error, str) and error else str(termination)


def token_curves(
    calls: pd.DataFrame,
    compactions: pd.DataFrame | None = None,
    *,
    context_limit: int | None = None,
    title: str = "Context tokens per call",
    config_column: str = "config",
    stopped: Mapping[str, str] | None = None,
) -> go.Figure:
    """Context tokens at every call, a line per config, each compaction a marker (hover: before/after, summary).

    `calls` needs `call_index` (or `index`), `context_tokens` and a config column; `compactions`
    needs `call_index`, `tokens_before`, `tokens_after`, `summary` (rows whose `noop` is true, firings
    that left the context unchanged, are not drawn). Recorded compaction points
    (`recorded_compaction` true) are drawn as dotted vertical lines, and the input the provider
    billed for each recorded call (`recorded_input_tokens`, when the recording has usage) as a
    dotted grey line (hidden until picked in the legend when it rises far above `context_limit`):
    the gap to it is what `calibration = "recorded"` closes. `stopped` maps the
    configs whose replay ended early to why (e.g. `context_overflow: ...`): their line ends in a
    labelled marker, so a short line does not read as a short session.
    """
    import plotly.graph_objects as go

    index_column = "call_index" if "call_index" in calls.columns else "index"
    figure = go.Figure()
    configs = list(dict.fromkeys(calls[config_column])) if len(calls) else []
    for position, config in enumerate(configs):
        rows = calls[calls[config_column] == config].sort_values(index_column)
        color = color_of(position)
        figure.add_trace(
            go.Scatter(
                x=rows[index_column],
                y=rows["context_tokens"],
                mode="lines",
                name=str(config),
                line={"color": color, "width": 2},
                legendgroup=str(config),
                hovertemplate="call %{x}<br>%{y:,} tokens<extra>" + html.escape(str(config)) + "</extra>",
            )
        )
        if compactions is not None and len(compactions):
            events = compactions[compactions[config_column] == config]
            if "noop" in events.columns:  # a firing that changed nothing is no compaction point
                events = events[~events["noop"].fillna(False).astype(bool)]
            if len(events):
                hover = [
                    f"compaction before call {int(e.call_index)}<br>{int(e.tokens_before):,} → "
                    f"{int(e.tokens_after):,} tokens"
                    + (f"<br><br>{_escape(e.summary)}" if isinstance(e.summary, str) and e.summary else "")
                    for e in events.itertuples()
                ]
                figure.add_trace(
                    go.Scatter(
                        x=events["call_index"],
                        y=events["tokens_after"],
                        mode="markers",
                        name=f"{config} compactions",
                        marker={"symbol": "x", "size": 10, "color": color, "line": {"width": 1}},
                        legendgroup=str(config),
                        showlegend=False,
                        hovertext=hover,
                        hoverinfo="text",
                    )
                )
        reason = (stopped or {}).get(str(config))
        if reason and len(rows):
            last = rows.iloc[-1]
            figure.add_trace(
                go.Scatter(
                    x=[last[index_column]],
                    y=[last["context_tokens"]],
                    mode="markers+text",
                    text=["stopped"],
                    textposition="top center",
                    textfont={"color": color},
                    name=f"{config} stopped",
                    marker={"symbol": "square-x-open", "size": 13, "color": color, "line": {"width": 2}},
                    legendgroup=str(config),
                    showlegend=False,
                    hoverinfo="text",
                    hovertext=[
                        f"{html.escape(str(config))} stopped after call {int(last[index_column])}<br>"
                        f"{_escape(reason, 300)}"
                    ],
                )
            )
    if "recorded_input_tokens" in calls.columns:
        billed = calls.dropna(subset=["recorded_input_tokens"]).drop_duplicates(index_column)
        if len(billed):
            billed = billed.sort_values(index_column)
            # far above the simulated window (the agent ran in a larger one) it would flatten every replay's
            # line: then it starts hidden, one click on its legend entry away
            above = bool(context_limit) and billed["recorded_input_tokens"].max() > 1.5 * (context_limit or 0)
            figure.add_trace(
                go.Scatter(
                    x=billed[index_column],
                    y=billed["recorded_input_tokens"],
                    mode="lines",
                    name=RECORDED_INPUT_TRACE,
                    line={"color": "#888", "dash": "dot", "width": 1.5},
                    visible="legendonly" if above else True,
                    hovertemplate="call %{x}<br>%{y:,} tokens billed by the provider<extra>recorded</extra>",
                )
            )
    if "recorded_compaction" in calls.columns:
        recorded = sorted(set(calls.loc[calls["recorded_compaction"].fillna(False).astype(bool), index_column]))
        for call in recorded:
            figure.add_vline(
                x=call,
                line={"dash": "dot", "color": "#555", "width": 1},
                annotation_text="recorded",
                annotation_position="top left",
            )
    if context_limit:
        figure.add_hline(
            y=context_limit,
            line={"dash": "dash", "color": "#999"},
            annotation_text="window",
            annotation_position="top right",
        )
    figure.update_layout(
        title=title,
        xaxis_title="LLM call",
        yaxis_title="context tokens",
        hovermode="closest",
        legend_title="config",
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
    )
    return figure


def cumulative_billed(
    calls: pd.DataFrame, *, config_column: str = "config", title: str = "Cumulative billed input tokens"
) -> go.Figure:
    """Billed input tokens summed over the calls, a line per config."""
    import plotly.graph_objects as go

    index_column = "call_index" if "call_index" in calls.columns else "index"
    figure = go.Figure()
    for position, config in enumerate(dict.fromkeys(calls[config_column])):
        rows = calls[calls[config_column] == config].sort_values(index_column)
        figure.add_trace(
            go.Scatter(
                x=rows[index_column],
                y=rows["context_tokens"].cumsum(),
                mode="lines",
                name=str(config),
                line={"color": color_of(position)},
            )
        )
    figure.update_layout(
        title=title,
        xaxis_title="LLM call",
        yaxis_title="tokens billed so far",
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
    )
    return figure


def pick_metric(columns: Sequence[str], preference: Sequence[str], frame: pd.DataFrame | None = None) -> str | None:
    """The first preferred metric present. Given a frame: the first that tells its rows apart (two
    values or more), else the first with any value, so that a run whose every call is free (the
    offline model: $0 everywhere) is drawn against billed tokens rather than on one vertical line."""
    present = [name for name in preference if name in columns]
    if frame is None:
        return present[0] if present else None
    with_values = [name for name in present if frame[name].notna().any()]
    varying = [name for name in with_values if frame[name].nunique(dropna=True) > 1]
    chosen = varying or with_values
    return chosen[0] if chosen else None


def leaderboard(
    results: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    *,
    complete_only: bool = True,
    pairs: CompletePairs | None = None,
) -> pd.DataFrame:
    """Mean of each numeric metric per config (configs in their run order) over the sessions where every
    config completed (`pairs`, by default `complete_pairs(results)`; every session with
    `complete_only=False`), after `cells` (every cell of the config) and `completed` (the share of them
    that completed). Show `pairs.note` with it: it says what was left out."""
    import pandas as pd

    skip = {"run_id", "session_id", "dataset", "config", "repeat", "termination", "error", "duration_s"}
    candidates = metrics or [c for c in results.columns if c not in skip]
    numeric = [
        c
        for c in candidates
        if c in results.columns
        and pd.api.types.is_numeric_dtype(results[c])
        and not pd.api.types.is_bool_dtype(results[c])
    ]
    order = list(dict.fromkeys(results["config"]))
    compared = (pairs or complete_pairs(results, complete_only=complete_only)).results
    table = compared.groupby("config", sort=False)[numeric].mean().reindex(order)
    table.insert(0, "cells", results.groupby("config", sort=False).size().reindex(order))
    if "termination" in results.columns:
        completed = results.assign(ok=results["termination"].eq("completed")).groupby("config", sort=False)["ok"]
        table.insert(1, "completed", completed.mean().reindex(order))
    return table


#: The table unit of each unit a metric declares to the registry (`register_metric(unit=...)`);
#: any other declared unit (share, ratio, score) is a `number`.
_DECLARED_UNITS: dict[str, formatting.Unit] = {
    "tokens": "tokens",
    "usd": "dollars",
    "calls": "count",
    "compactions": "count",
}


def metric_unit(name: str) -> formatting.Unit:
    """The unit a table shows a metric (or a leaderboard column) in: `cells` (a plain count of cells),
    `percent` (`completed`), `dollars`, `tokens` (whole, with thousands separators), `count` (a mean
    to one decimal) or `number` (a share, ratio or score, to 3 decimals). A registered metric's is
    the unit it declares; a column the registry does not know (e.g. `summarizer_cost_usd`) is read
    by its name's ending."""
    if name == "cells":
        return "cells"
    if name == "completed":
        return "percent"
    declared = declared_unit(name)
    if declared is not None:
        return _DECLARED_UNITS.get(declared, "number")
    if name.endswith("cost_usd"):
        return "dollars"
    return "tokens" if name.endswith("_tokens") else "number"


_STREAMLIT_FORMATS = {
    "cells": None,
    "percent": "%.0f%%",
    "dollars": "$%.4f",
    "tokens": "localized",
    "count": "%.1f",
    "number": "%.3f",
}


def display_format(name: str) -> str | None:
    """The format of a metric's column in a Streamlit table (`metric_unit`), for the values `displayed`
    gives (percents scaled to 0-100)."""
    return _STREAMLIT_FORMATS[metric_unit(name)]


def format_metric(name: str, value: Any) -> str:
    """One metric value as text in its unit (`metric_unit`) by the one rule of `workbench.formatting`:
    85,904 tokens, $0.0123, 57%, 18 or 1.4 (counts), 0.864; "" when missing."""
    return formatting.format_value(metric_unit(name), value)


def format_metric_signed(name: str, value: Any) -> str:
    """A difference of a metric in its unit with its sign (+1,234, −0.052); "" when missing."""
    return formatting.format_signed(metric_unit(name), value)


def shown_board(board: pd.DataFrame) -> pd.DataFrame:
    """`board` as text, every value by `format_metric`: what the CLI prints and the report writes."""
    shown = board.astype("object")
    for column in shown.columns:
        shown[column] = [format_metric(str(column), value) for value in board[column]]
    return shown.astype("string")


def displayed(board: pd.DataFrame) -> pd.DataFrame:
    """`board` as a Streamlit table shows it with `display_format`: token means rounded to whole
    tokens (a fraction of a token means nothing) and percent columns scaled to 0-100 (Streamlit's
    own percent format has two decimals: 83.33% where the terminal says 83%)."""
    shown = board.copy()
    for column in shown.columns:
        unit = metric_unit(str(column))
        if unit == "tokens":
            shown[column] = shown[column].round(0)
        elif unit == "percent":
            shown[column] = shown[column] * 100
    return shown


def pareto_front(points: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """The rows no other row beats on both axes (each read in its metric's direction)."""
    x_lower = metric_direction(x) != "higher"
    y_higher = metric_direction(y) != "lower"
    values = points[[x, y]].dropna()
    keep = []
    for label, row in values.iterrows():
        dominated = False
        for other_label, other in values.iterrows():
            if other_label == label:
                continue
            x_ok = other[x] <= row[x] if x_lower else other[x] >= row[x]
            y_ok = other[y] >= row[y] if y_higher else other[y] <= row[y]
            strictly = (other[x] != row[x]) or (other[y] != row[y])
            if x_ok and y_ok and strictly:
                dominated = True
                break
        if not dominated:
            keep.append(label)
    return points.loc[keep].sort_values(x)


def label_positions(
    xs: Sequence[float], ys: Sequence[float], *, near_x: float = 0.2, near_y: float = 0.06
) -> list[str]:
    """Where each point's label goes: above it, or below it when a label already placed above a
    point that close (within `near_x` and `near_y` of each axis's span) would cover it."""
    x_span = (max(xs) - min(xs) if xs else 0.0) or 1.0
    y_span = (max(ys) - min(ys) if ys else 0.0) or 1.0
    positions = ["top center"] * len(xs)
    above: list[int] = []
    for i in sorted(range(len(xs)), key=lambda k: xs[k]):
        if any(abs(xs[i] - xs[j]) < near_x * x_span and abs(ys[i] - ys[j]) < near_y * y_span for j in above):
            positions[i] = "bottom center"
        else:
            above.append(i)
    return positions


def inward_positions(xs: Sequence[float], positions: Sequence[str], *, edge: float = 0.3) -> list[str]:
    """`positions` with the labels of points in the outer `edge` of the x span turned towards the
    middle (`top right` left of it, `top left` right of it), so a long name does not run off the plot."""
    if len(xs) < 2 or max(xs) == min(xs):
        return list(positions)
    low, span = min(xs), max(xs) - min(xs)
    turned = []
    for value, position in zip(xs, positions, strict=True):
        share = (value - low) / span
        side = "right" if share < edge else "left" if share > 1 - edge else "center"
        turned.append(position.replace("center", side))
    return turned


def padded_range(values: Sequence[float], *, low: float, high: float) -> list[float]:
    """An axis range around `values` with `low` and `high` of their span (or of the value, when all
    are one) added below and above: room for the labels drawn next to the points."""
    least, most = min(values), max(values)
    span = (most - least) or (abs(most) or 1.0) * 0.2
    return [least - low * span, most + high * span]


def completion(results: pd.DataFrame) -> pd.DataFrame:
    """Per config (in run order): `cells`, `completed` (cells whose replay completed) and `stopped`
    (how the others ended, e.g. `context_overflow ×3`). Without a `termination` column every cell counts
    as completed."""
    import pandas as pd

    order = list(dict.fromkeys(results["config"]))
    if "termination" not in results.columns:
        sizes = results.groupby("config", sort=False).size().reindex(order)
        return pd.DataFrame({"cells": sizes, "completed": sizes, "stopped": ""}, index=sizes.index)
    rows = {}
    for config, cells in results.groupby("config", sort=False)["termination"]:
        ends = cells.fillna("unknown").astype(str)
        others = ends[ends != "completed"].value_counts()
        rows[config] = {
            "cells": len(ends),
            "completed": int((ends == "completed").sum()),
            "stopped": ", ".join(f"{name} ×{count}" for name, count in others.items()),
        }
    return pd.DataFrame.from_dict(rows, orient="index").reindex(order)


def cost_quality(
    results: pd.DataFrame,
    *,
    x: str | None = None,
    y: str | None = None,
    title: str = "Cost versus quality",
    complete_only: bool = True,
    pairs: CompletePairs | None = None,
) -> go.Figure | None:
    """A point per config (means over the sessions where every config completed: `pairs`, by default
    `complete_pairs(results)`) with the Pareto front; None without a quality metric.

    A config that completed fewer sessions than another (`pairs.rankable`) is drawn hollow and left out
    of the Pareto front: it is never marked best. A config whose cells did not all complete has
    `k of n completed` under its name. The subtitle says which sessions the means are over.
    """
    import plotly.graph_objects as go

    x = x or pick_metric(list(results.columns), COST_PREFERENCE, results)
    y = y or pick_metric(list(results.columns), QUALITY_PREFERENCE, results)
    if x is None or y is None:
        return None
    pairs = pairs or complete_pairs(results, complete_only=complete_only)
    means = pairs.results.groupby("config", sort=False)[[x, y]].mean().dropna()
    if means.empty:
        return None
    done = completion(results).reindex(means.index)
    whole = done["completed"] == done["cells"]
    ranked = means.index.map(lambda name: str(name) in pairs.rankable).to_numpy(dtype=bool)
    names = [str(i) for i in means.index]
    labels = [
        html.escape(name) if full else f"{html.escape(name)}<br>({k} of {n} completed)"
        for name, full, k, n in zip(names, whole, done["completed"], done["cells"], strict=True)
    ]
    hover = [
        f"<b>{html.escape(name)}</b><br>{html.escape(x)}: {format_metric(x, vx)}<br>"
        f"{html.escape(y)}: {format_metric(y, vy)}<br>{k} of {n} cells completed"
        + ("" if full else f" (stopped: {html.escape(str(stopped))})")
        + ("" if rank else "<br>not on the Pareto front: completed fewer sessions than another config")
        for name, vx, vy, k, n, full, stopped, rank in zip(
            names, means[x], means[y], done["completed"], done["cells"], whole, done["stopped"], ranked, strict=True
        )
    ]
    xs, ys = [float(v) for v in means[x]], [float(v) for v in means[y]]
    colors = [color_of(i) for i in range(len(means))]
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(
            x=means[x],
            y=means[y],
            mode="markers+text",
            text=labels,
            name="configs",
            textposition=inward_positions(xs, label_positions(xs, ys, near_y=0.06 if whole.all() else 0.12)),
            cliponaxis=False,  # a label may reach into the margin rather than be cut at the axis
            showlegend=False,  # each point carries its name; one legend colour would be wrong
            hovertext=hover,
            hoverinfo="text",
            marker={
                "size": 11,
                "color": colors,
                "symbol": ["circle" if rank else "circle-open" for rank in ranked],
                "line": {"width": 2, "color": colors},
            },
        )
    )
    front = pareto_front(means[ranked], x, y)
    if len(front):
        figure.add_trace(
            go.Scatter(
                x=front[x],
                y=front[y],
                mode="lines+markers",
                name="Pareto front",
                line={"dash": "dash", "color": "#444"},
                hoverinfo="skip",
                marker={"symbol": "circle-open", "size": 19, "color": "#444"},
            )
        )
    if not ranked.all():
        figure.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=INCOMPLETE_TRACE,
                hoverinfo="skip",
                marker={"symbol": "circle-open", "size": 11, "color": "#444", "line": {"width": 2}},
            )
        )
    if pairs.stopped:
        title = f"{title}<br><sup>{html.escape(pairs.scope)}</sup>"
    figure.update_layout(
        title=title,
        xaxis_title=f"{x} ({metric_direction(x)} is better)",
        yaxis_title=f"{y} ({metric_direction(y)} is better)",
        # the legend above the plot, not beside it: the plot keeps the width its labels need
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "right", "x": 1},
        margin={"l": 60, "r": 30, "t": 70, "b": 40},
    )
    figure.update_xaxes(range=padded_range(xs, low=0.12, high=0.12))
    figure.update_yaxes(range=padded_range(ys, low=0.2, high=0.25))
    return figure


def frames_from_results(results: Sequence[Any], *, repeat: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(results, calls, compactions) frames of ad-hoc `ReplayResult`s, in the shapes of a stored run.

    One results row per replay (`session_id`, `config`, `repeat`, `termination`, every metric); the
    calls of every replay with `call_index`; the compaction events with `session_id` and `config`.
    Config names must differ between the results (they label the traces).
    """
    import pandas as pd

    rows, calls, events = [], [], []
    for result in results:
        rows.append(
            {
                "session_id": result.session_id,
                "config": result.config.name,
                "repeat": repeat,
                "termination": result.termination,
                **dict(result.metrics),
            }
        )
        frame = result.to_frame().rename(columns={"index": "call_index"})
        frame["repeat"] = repeat
        calls.append(frame)
        compactions = result.compactions_frame()
        if len(compactions):
            compactions.insert(0, "session_id", result.session_id)
            compactions.insert(1, "config", result.config.name)
            compactions["repeat"] = repeat
            events.append(compactions)
    call_frame = (
        pd.concat(calls, ignore_index=True)
        if calls
        else pd.DataFrame(columns=["session_id", "config", "call_index", "context_tokens", "repeat"])
    )
    event_frame = (
        pd.concat(events, ignore_index=True)
        if events
        else pd.DataFrame(
            columns=["session_id", "config", "call_index", "tokens_before", "tokens_after", "summary", "repeat"]
        )
    )
    return pd.DataFrame(rows), call_frame, event_frame
