"""The Compare page: one session replayed under 2-6 configurations, side by side.

Configurations come from the presets (`workbench.presets`) or from TOML typed in place; every one is
validated by `parse_config` and its error shown under it. The replays run on "Run replays" and are
kept in a bounded resource cache (a `ReplayResult` holds its snapshots, so `context_at` stays free).
The charts come first, straight after the replays, from frames holding only what they draw; each
panel below is a fragment, so picking a call or a compaction reruns that panel only; the HTML report
is built when its download button is clicked, not on every run.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

import streamlit as st

from workbench.extractive import OFFLINE_BASELINE_LABEL, is_offline_baseline
from workbench.ui import common, data

MIN_CONFIGS, MAX_CONFIGS = 2, 6
DEFAULT_PRESETS = ("observation-masking", "gent-sliding-window", "ptc-runner-trim")
MAX_CUSTOM = 3
CUSTOM_TEMPLATE = """name = "custom-{n}"

[trigger]
kind = "utilization"
ratio = 0.7

[strategy]
kind = "sliding_window"
window = 8
"""


@st.cache_resource(show_spinner=False)
def gateway() -> Any:
    """The process-wide LLM gateway (its cache and concurrency limits shared by every session)."""
    from workbench.llm import default_gateway

    return default_gateway()


@st.cache_resource(show_spinner=False, max_entries=48)
def cached_replay(path: str, stamp: float, session_id: str, config_json: str) -> Any:
    """One replay, kept while the database and the config are unchanged (bounded: 48 replays)."""
    from workbench.replay import replay

    session = common.load_session(path, stamp, session_id)
    return replay(session, json.loads(config_json), gateway=gateway())


def window_settings() -> dict[str, Any]:
    from workbench.config import DEFAULT_CONTEXT_LIMIT, DEFAULT_MAX_OUTPUT, DEFAULT_SUMMARIZER

    cols = st.columns(3)
    limit = cols[0].number_input(
        "Context window (tokens)",
        min_value=1_000,
        max_value=2_000_000,
        value=DEFAULT_CONTEXT_LIMIT,
        step=1_000,
        key="compare_limit",
    )
    max_output = cols[1].number_input(
        "Reserved for output (tokens)",
        min_value=0,
        max_value=200_000,
        value=DEFAULT_MAX_OUTPUT,
        step=256,
        key="compare_max_output",
    )
    summarizer = cols[2].text_input(
        "Summarizer model",
        value=DEFAULT_SUMMARIZER,
        key="compare_summarizer",
        help="workbench/extractive is the offline extractive baseline (no model).",
    )
    calibrated = st.checkbox(
        "Calibrate token counts to the input the provider billed",
        key="compare_calibrate",
        help='calibration = "recorded": per session, a constant overhead (the system prompt '
        "and tools the transcript lacks) and a tokenizer scale, fitted on the recorded "
        "calls before the agent's first compaction. Needs a recording with usage.",
    )
    return {
        "context_limit": int(limit),
        "max_output": int(max_output),
        "summarizer": summarizer.strip(),
        "calibration": "recorded" if calibrated else "none",
    }


@st.cache_data(show_spinner=False, max_entries=1)
def kinds_table() -> list[dict[str, Any]]:
    """Every trigger and strategy kind with its parameters (what `workbench kinds` lists)."""
    from workbench import registry

    described = registry.describe()
    rows = []
    for family in ("trigger", "strategy"):
        for kind in described.get(family, []):
            for param in kind.get("params", []) or [{}]:
                rows.append(
                    {
                        "family": family,
                        "kind": kind["name"],
                        "parameter": param.get("name", ""),
                        "type": param.get("type", ""),
                        "default": str(param.get("default", "")),
                        "range / choices": _bounds(param),
                        "doc": param.get("doc", ""),
                    }
                )
    return rows


def _bounds(param: dict[str, Any]) -> str:
    if param.get("choices"):
        return ", ".join(map(str, param["choices"]))
    low, high = param.get("min"), param.get("max")
    if low is None and high is None:
        return ""
    return f"{'' if low is None else low} … {'' if high is None else high}"


def kinds_reference() -> None:
    with st.expander("Trigger and strategy kinds, with their parameters"):
        try:
            st.dataframe(kinds_table(), hide_index=True, width="stretch")
        except Exception as exc:  # the registry failing to load leaves the editors usable
            st.error(common.readable_error(exc))


def pick_configs(window: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The chosen configs as validated dicts, and whether every one is valid."""
    from workbench.config import load_toml, parse_config, with_preset
    from workbench.presets import presets

    catalogue = presets()
    chosen = st.multiselect(
        "Presets",
        list(catalogue),
        default=[p for p in DEFAULT_PRESETS if p in catalogue],
        max_selections=MAX_CONFIGS,
        key="compare_presets",
    )
    custom = int(
        st.number_input(
            "Configurations written as TOML", min_value=0, max_value=MAX_CUSTOM, value=0, key="compare_custom"
        )
    )
    configs: list[dict[str, Any]] = []
    valid = True
    for name in chosen:
        try:
            spec = with_preset({"preset": name, **window})  # a threshold that cannot fire here is scaled, with a note
            parse_config(spec)
            configs.append(spec)
            for line in spec.get("notes", ()):
                st.caption(line)
        except Exception as exc:  # a preset the registry rejects is shown, not raised
            valid = False
            st.error(f"preset {name}: {common.readable_error(exc)}")
    if custom:
        kinds_reference()
        columns = st.columns(custom)
        for n, column in enumerate(columns, start=1):
            with column:
                text = st.text_area(
                    f"TOML config {n}", value=CUSTOM_TEMPLATE.format(n=n), height=220, key=f"compare_toml_{n}"
                )
                try:
                    spec = {**window, **load_toml(text)}
                    spec["name"] = str(spec.get("name") or f"custom-{n}")
                    parse_config(spec)
                    configs.append(spec)
                    st.caption("✓ valid")
                except Exception as exc:  # the validation message goes under the editor
                    valid = False
                    st.error(common.readable_error(exc))
    names = [c["name"] for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        valid = False
        st.error(f"Configuration names must differ: {', '.join(duplicates)} is used twice.")
    if not MIN_CONFIGS <= len(configs) <= MAX_CONFIGS:
        valid = False
        given = len(chosen) + custom
        counted = f"{given} chosen" + (f", {len(configs)} valid" if given != len(configs) else "")
        st.info(f"Pick {MIN_CONFIGS} to {MAX_CONFIGS} valid configurations ({counted}).")
    return configs, valid


def run_replays(path: str, stamp: float, session_id: str, configs: Sequence[dict[str, Any]]) -> list[Any]:
    results = []
    progress = st.progress(0.0, text="Replaying…")
    for done, spec in enumerate(configs, start=1):
        try:
            results.append(cached_replay(path, stamp, session_id, json.dumps(spec, sort_keys=True)))
        except Exception as exc:  # one failing config is reported, the others still shown
            st.error(f"{spec['name']}: {common.readable_error(exc)}")
        progress.progress(done / len(configs), text=f"Replayed {done} of {len(configs)}")
    progress.empty()
    return results


def chart_frames(results: Sequence[Any]) -> tuple[Any, Any]:
    """(calls, compactions) frames holding only what the two charts draw, read straight off the results.

    `charts.frames_from_results` copies every field of every call and event (`dataclasses.asdict`),
    which costs more than the charts themselves on a long session; the first chart must not wait on it.
    """
    import pandas as pd

    from workbench.replay import call_column

    calls: dict[str, list[Any]] = {
        "config": [],
        "call_index": [],
        "context_tokens": [],
        "recorded_compaction": [],
        "recorded_input_tokens": [],
    }
    events: dict[str, list[Any]] = {
        "config": [],
        "call_index": [],
        "tokens_before": [],
        "tokens_after": [],
        "summary": [],
    }
    for result in results:
        name = result.config.name
        recorded_input, recorded = result.recorded_columns()
        calls["config"] += [name] * len(result.calls)
        calls["call_index"] += call_column(result.calls, "index")
        calls["context_tokens"] += call_column(result.calls, "context_tokens")
        calls["recorded_compaction"] += recorded
        calls["recorded_input_tokens"] += recorded_input
        drawn = [e for e in result.compactions if not e.noop]  # a firing that changed nothing is no point
        events["config"] += [name] * len(drawn)
        events["call_index"] += [e.call_index for e in drawn]
        events["tokens_before"] += [e.tokens_before for e in drawn]
        events["tokens_after"] += [e.tokens_after for e in drawn]
        events["summary"] += [e.summary for e in drawn]
    return pd.DataFrame(calls), pd.DataFrame(events)


def window_caption(results: Sequence[Any]) -> str:
    """The window and tokenizer the replays used, said once when they share them."""
    described = {
        r.config.name: f"{r.config.context_limit:,}-token window ({r.config.max_output:,} kept for the "
        f"reply), tokenizer {r.config.tokenizer}"
        for r in results
    }
    if len(set(described.values())) == 1:
        return f"Replayed in a {next(iter(described.values()))}."
    return "Replayed in: " + "; ".join(f"{name}: a {text}" for name, text in described.items()) + "."


def shared_limit(results: Sequence[Any]) -> int | None:
    """The context window every config replayed in, or None when a TOML config set its own."""
    limits = {r.config.context_limit for r in results}
    return limits.pop() if len(limits) == 1 else None


@st.fragment
def charts_panel(results: Sequence[Any]) -> None:
    from workbench.experiments import charts

    calls, compactions = chart_frames(results)
    stopped = {
        r.config.name: charts.stop_reason(r.termination, r.error) for r in results if r.termination != "completed"
    }
    limit = shared_limit(results)
    st.plotly_chart(
        charts.token_curves(calls, compactions, context_limit=limit, stopped=stopped),
        key="compare_tokens",
        width="stretch",
    )
    if limit is None:
        st.caption(
            "The configurations replay in different windows: "
            + ", ".join(f"{r.config.name} {r.config.context_limit:,} tokens" for r in results)
            + "."
        )
    st.plotly_chart(charts.cumulative_billed(calls), key="compare_billed", width="stretch")
    for result in results:
        if result.termination != "completed":
            total = f" of {result.session.calls}" if result.session is not None else ""
            st.warning(
                f"{result.config.name} stopped after {len(result.calls)}{total} calls: {stopped[result.config.name]}"
            )


BEST_STYLE = "background-color: rgba(44, 160, 44, 0.25)"
WORST_STYLE = "background-color: rgba(214, 39, 40, 0.18)"


def _shade_by_direction(row: Any, numeric: Any, ranked: Sequence[bool] | None = None) -> list[str]:
    """Best value of a row green, worst red, read in the metric's declared direction (the values
    are read from `numeric`, the table before its numbers were formatted). Only the configs flagged
    in `ranked` compete (a replay that stopped early has totals over fewer calls: never the best)."""
    import pandas as pd

    direction = row["better"]
    values = pd.to_numeric(numeric.loc[row.name], errors="coerce").astype("float64")  # NA -> NaN: never equal
    if ranked is not None:
        values = values.where(list(ranked))
    styles = [""] * len(row)
    if direction not in ("higher", "lower") or values.notna().sum() < 2 or values.nunique() < 2:
        return styles
    best = values.max() if direction == "higher" else values.min()
    worst = values.min() if direction == "higher" else values.max()
    for position, value in enumerate(values, start=1):
        styles[position] = BEST_STYLE if value == best else WORST_STYLE if value == worst else ""
    return styles


@st.fragment
def metrics_panel(results: Sequence[Any]) -> None:
    import pandas as pd

    from workbench.experiments import charts
    from workbench.experiments.compare import metric_direction

    frame = pd.DataFrame([{"config": r.config.name, "termination": r.termination, **dict(r.metrics)} for r in results])
    numeric = frame.set_index("config").T.astype("object")
    shown = numeric.apply(lambda row: row.map(lambda value: charts.format_metric(str(row.name), value)), axis=1)
    shown.insert(0, "better", [metric_direction(str(name)) for name in shown.index])
    st.subheader("Metrics")
    completed = [r.termination == "completed" for r in results]
    st.caption(
        "Green: the best configuration on that metric, red: the worst, in the direction the metric "
        "declares (better column)."
        + (
            ""
            if all(completed)
            else " Replays that stopped early (termination) are left out: their totals cover only the calls they made."
        )
    )
    st.dataframe(
        shown.astype("string").style.apply(_shade_by_direction, numeric=numeric, ranked=completed, axis=1),
        width="stretch",
        key="compare_metrics",
    )


def _show_messages(messages: Sequence[Any], key: str) -> None:
    for position, message in enumerate(messages):
        label = (
            f"#{position} {message.role}"
            + (f" · {message.name}" if message.name else "")
            + f" · {len(message.text):,} characters"
        )
        with st.expander(label, expanded=False):
            st.text(message.text or "(no text)")
            for call in message.tool_calls:
                st.caption(f"→ tool call {call.name} ({call.id})")
                st.code(call.arguments, language="json", wrap_lines=True)


@st.fragment
def context_panel(results: Sequence[Any]) -> None:
    st.subheader("Context at a call")
    by_name = {r.config.name: r for r in results}
    cols = st.columns(2)
    name = cols[0].selectbox("Configuration", list(by_name), key="compare_context_config")
    result = by_name[name]
    if not result.calls:
        st.info(f"This replay made no call: {result.error or result.termination}")
        return
    call = int(
        cols[1].number_input(
            f"Call (0 to {len(result.calls) - 1})",
            min_value=0,
            max_value=len(result.calls) - 1,
            value=0,
            key=f"compare_call:{name}",
        )
    )
    messages = result.context_at(call)
    record = result.calls[call]
    st.caption(
        f"{len(messages)} message{'s' * (len(messages) != 1)} · {record.context_tokens:,} tokens"
        + (" · compacted just before" if record.compacted_before else "")
    )
    _show_messages(messages, key=f"context:{name}:{call}")


@st.fragment
def summaries_panel(results: Sequence[Any]) -> None:
    st.subheader("Summaries")
    with_events = [r for r in results if any(not e.noop for e in r.compactions)]
    if not with_events:
        st.info("No configuration compacted this session under this window.")
        return
    columns = st.columns(len(with_events))
    for column, result in zip(columns, with_events, strict=True):
        with column:
            st.markdown(f"**{result.config.name}**")
            note = result.baseline_note()
            if note:
                st.caption(note)
            listed = [i for i, e in enumerate(result.compactions) if not e.noop]
            noops = len(result.compactions) - len(listed)
            if noops:
                st.caption(f"{noops} firing{'s' * (noops != 1)} left the context unchanged (no-ops, not listed)")
            labels = {
                i: f"#{i} before call {e.call_index}: {e.tokens_before:,} → {e.tokens_after:,}"
                for i, e in enumerate(result.compactions)
                if not e.noop
            }
            # the key follows the labels: a rerun whose events differ (another window, calibration) must not
            # keep showing the previous run's label for the same position
            fingerprint = zlib.crc32("\n".join(labels.values()).encode())
            index = int(
                st.selectbox(
                    "Compaction",
                    listed,
                    format_func=labels.__getitem__,
                    key=f"compare_event:{result.config.name}:{fingerprint}",
                )
            )
            event = result.compactions[index]
            if event.error:
                st.error(f"failed: {event.error}" + (" (fell back)" if event.fell_back else ""))
            if event.summary:
                st.text(event.summary)
            else:
                st.caption("No summary text: this strategy drops or masks messages.")
            before, after = result.compaction_contexts(index)
            st.caption(f"{len(before)} messages in → {len(after)} out")
            kept = {id(m) for m in after}
            replaced = [m for m in before if id(m) not in kept]
            if replaced:
                with st.expander(f"What it replaced ({len(replaced)} messages)"):
                    for message in replaced:
                        st.caption(f"{message.role}" + (f" · {message.name}" if message.name else ""))
                        st.text(message.text[:2000] + (" …" if len(message.text) > 2000 else ""))
            measured = result.compaction_metrics[index] if index < len(result.compaction_metrics) else {}
            if measured:
                with st.expander("Quality of this compaction"):
                    st.json({k: v for k, v in measured.items()}, expanded=True)
            label_panel(result, index)


#: `st.session_state` key: database stamps a label written here produced -> the stamp before the write.
LABEL_STAMPS = "compare_label_stamps"


def label_panel(result: Any, index: int) -> None:
    """Rate compaction `index`'s summary good or bad, with a note, stored through `workbench.labels` under
    the session, the config's hash and the compaction's event index; the stored label is shown again
    whenever this compaction is. A write changes the database file, not its sessions: its new stamp is
    remembered as the old one, so the page does not take the replays for outdated."""
    from workbench.config import config_hash
    from workbench.labels import delete_summary_label, label_summary
    from workbench.store import SUMMARY_LABELS

    path = common.database_path()
    digest = config_hash(result.config)
    key = f"compare_label:{result.session_id}:{digest}:{index}"
    try:
        with data.reading(path) as store:
            current = store.summary_label(result.session_id, digest, index)
    except Exception as exc:  # a busy or older database: said, the rest of the panel stays
        common.show_read_error(exc, "The label of this summary cannot be read: ")
        return
    verdict = st.radio(
        "Rate this summary",
        SUMMARY_LABELS,
        horizontal=True,
        key=f"{key}:verdict",
        index=SUMMARY_LABELS.index(current.label) if current is not None else None,
    )
    note = st.text_input(
        "Note (optional)",
        value=(current.note or "") if current is not None else "",
        key=f"{key}:note",
        placeholder="what it kept or lost",
    )
    stamps: dict[float, float] = st.session_state.setdefault(LABEL_STAMPS, {})
    before = data.stamp(path)
    try:
        if st.button("Save the label", key=f"{key}:save", disabled=verdict is None):
            current = label_summary(result.session_id, result.config, index, str(verdict), note=note, db=path)
            stamps[data.stamp(path)] = stamps.get(before, before)
        if current is not None and st.button("Remove the label", key=f"{key}:remove"):
            delete_summary_label(result.session_id, result.config, index, db=path)
            stamps[data.stamp(path)] = stamps.get(before, before)
            current = None
    except Exception as exc:  # e.g. a run launched from the app holds the database
        common.show_read_error(exc, "The label could not be stored: ")
        return
    if current is not None:
        st.caption(
            f"Labelled {current.label} ({current.labelled_at:%Y-%m-%d %H:%M} UTC)"
            + (f": {current.note}" if current.note else "")
        )
    else:
        st.caption("Not labelled yet.")


def comparison_report(session_id: str, results: Sequence[Any]) -> str:
    """The comparison as the self-contained HTML report (the same one `workbench export` writes)."""
    from workbench.experiments import charts
    from workbench.experiments.export import report_html

    frame, calls, compactions = charts.frames_from_results(results)
    limit = shared_limit(results)
    window = (
        f"{limit:,} tokens"
        if limit is not None
        else ", ".join(f"{r.config.name} {r.config.context_limit:,}" for r in results)
    )
    return report_html(
        f"Comparison on session {session_id}",
        frame,
        calls,
        compactions,
        summarizers=[str(r.config.summarizer) for r in results if r.summarized],
        context_limit=limit,
        meta=[("session", session_id), ("window", window)],
    )


def report_or_error(session_id: str, results: Sequence[Any]) -> str:
    """The report, or a small HTML page saying why it could not be built (the download never fails silently)."""
    import html

    try:
        return comparison_report(session_id, results)
    except Exception as exc:  # the download carries the readable message instead of a broken file
        return (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Report failed</title>'
            f"</head><body><p>The report could not be built: {html.escape(common.readable_error(exc))}</p>"
            f"</body></html>"
        )


def export_button(session_id: str, results: Sequence[Any]) -> None:
    """One click downloads the report; it is built then, not on every run of the page."""
    st.download_button(
        "Export the comparison (HTML)",
        lambda: report_or_error(session_id, results).encode(),
        file_name=f"compare-{session_id}.html",
        mime="text/html",
        key="compare_export",
    )


def page() -> None:
    path = common.database_path()
    st.title("Compare")
    opened = common.open_overview(path)
    if opened is None:
        return
    overview, stamp = opened
    stamp = st.session_state.get(LABEL_STAMPS, {}).get(stamp, stamp)  # a label written here changed no session
    labels = {s["id"]: common.session_label(s) for s in overview["sessions"]}
    session_id = st.selectbox("Session", list(labels), format_func=lambda key: labels[key], key="compare_session")
    window = window_settings()
    if is_offline_baseline(window["summarizer"]):
        st.caption(f"Summaries by {window['summarizer']}: the {OFFLINE_BASELINE_LABEL}.")
    configs, valid = pick_configs(window)
    request = {"session": session_id, "configs": configs, "stamp": stamp}
    if st.button("Run replays", type="primary", disabled=not valid, key="compare_run"):
        st.session_state["compare_request"] = request
    last = st.session_state.get("compare_request")
    if last is None:
        st.info("Choose the configurations, then run the replays.")
        return
    if last != request:
        st.caption("The settings changed since these replays: run them again to update.")
    results = run_replays(path, last["stamp"], last["session"], last["configs"])
    if not results:
        return
    charts_panel(results)  # first: nothing below delays the charts
    st.caption(window_caption(results))
    from workbench.strategies.recorded import nothing_recorded_note, uses_recorded

    for result in results:  # the agent's own compactions asked for where the session recorded none
        if (
            result.session is not None
            and not result.session.recorded_compactions
            and uses_recorded(result.config.to_dict())
        ):
            st.warning(nothing_recorded_note(result.config.name, 1, f"session {result.session.id}"))
    fitted = next((r.calibration for r in results if r.calibration is not None), None)
    if fitted is not None:  # one fit per session, the same under every config
        st.caption(fitted.describe())
    metrics_panel(results)
    context_panel(results)
    summaries_panel(results)
    export_button(last["session"], results)
