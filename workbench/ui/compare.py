"""The Compare page: one session replayed under 2-6 configurations, side by side.

Configurations come from the presets (`workbench.presets`) or from TOML typed in place; every one is
validated by `parse_config` and its error shown under it. The replays run on "Run replays" and are
kept in a bounded resource cache (a `ReplayResult` holds its snapshots, so `context_at` stays free).
The charts come first, straight after the replays, from frames holding only what they draw; each
panel below is a fragment, so picking a call or a compaction reruns that panel only; the HTML report
is built when its download button is clicked, not on every run.
"""

from __future__ import annotations

import html
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any

import streamlit as st

from workbench.access import result_compaction
from workbench.extractive import OFFLINE_BASELINE_LABEL, is_offline_baseline
from workbench.ui import common, data
from workbench.ui.compaction import show_compaction

#: Where the app serves the page (`workbench.ui.app`); other pages switch to it with query parameters.
URL_PATH = "compare"
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


#: The form's widget keys and what each holds. Streamlit forgets the state of a widget a run did not draw
#: (another page was shown): the values are mirrored under `INPUTS_KEY` and put back (`restore_inputs`).
SESSION_KEY, LIMIT_KEY, OUTPUT_KEY = "compare_session", "compare_limit", "compare_max_output"
SUMMARIZER_KEY, CALIBRATE_KEY = "compare_summarizer", "compare_calibrate"
PRESETS_KEY, CUSTOM_KEY = "compare_presets", "compare_custom"
TOML_KEYS = tuple(f"compare_toml_{n}" for n in range(1, MAX_CUSTOM + 1))
INPUT_KEYS = (SESSION_KEY, LIMIT_KEY, OUTPUT_KEY, SUMMARIZER_KEY, CALIBRATE_KEY, PRESETS_KEY, CUSTOM_KEY, *TOML_KEYS)
INPUTS_KEY = "compare_inputs"
#: The query parameters last applied to (or written from) the form: parameters that differ came from outside
#: (a shared URL, Sessions' "Compare this session") and are applied once.
APPLIED_QUERY_KEY = "compare_applied_query"
REQUEST_KEY = "compare_request"
LIMIT_RANGE, OUTPUT_RANGE = (1_000, 2_000_000), (0, 200_000)


@dataclass(frozen=True)
class CompareInputs:
    """The Compare form as a URL's query parameters carry it: `session`, `preset` and `toml` (repeated),
    `window` (the context window), `output` (tokens reserved for the reply), `summarizer` and `calibration`
    (`recorded` or `none`). A field left None keeps what the form holds; `problems` lists the parameters
    that could not be read (they are left out, and said)."""

    session: str | None = None
    presets: tuple[str, ...] | None = None
    tomls: tuple[str, ...] | None = None
    context_limit: int | None = None
    max_output: int | None = None
    summarizer: str | None = None
    calibrated: bool | None = None
    problems: tuple[str, ...] = ()

    @classmethod
    def from_query(cls, params: Mapping[str, Sequence[str]]) -> CompareInputs:
        """The inputs a URL's parameters (name -> every value given) carry; unknown names are ignored."""

        def last(name: str) -> str | None:
            values = params.get(name) or ()
            return str(values[-1]) if values else None

        problems: list[str] = []

        def tokens(name: str, bounds: tuple[int, int]) -> int | None:
            text = last(name)
            if text is None:
                return None
            try:
                number = int(text.replace(",", "").replace("_", ""))
            except ValueError:
                number = None
            if number is None or not bounds[0] <= number <= bounds[1]:
                problems.append(f"{name}={text} (a whole number of tokens, {bounds[0]:,} to {bounds[1]:,})")
                return None
            return number

        calibration = last("calibration")
        if calibration not in (None, "recorded", "none"):
            problems.append(f"calibration={calibration} (recorded or none)")
        presets = tuple(params.get("preset") or ()) or None
        tomls = tuple(params.get("toml") or ()) or None
        if tomls and len(tomls) > MAX_CUSTOM:
            problems.append(f"toml given {len(tomls)} times (at most {MAX_CUSTOM}: the first are used)")
        return cls(
            session=last("session"),
            presets=presets,
            tomls=tomls[:MAX_CUSTOM] if tomls else None,
            context_limit=tokens("window", LIMIT_RANGE),
            max_output=tokens("output", OUTPUT_RANGE),
            summarizer=last("summarizer"),
            calibrated=None if calibration not in ("recorded", "none") else calibration == "recorded",
            problems=tuple(problems),
        )

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> CompareInputs:
        """The inputs the form's widgets hold (`INPUT_KEYS` in `state`)."""
        custom = int(state.get(CUSTOM_KEY, 0) or 0)
        return cls(
            session=state.get(SESSION_KEY),
            presets=tuple(state.get(PRESETS_KEY) or ()),
            tomls=tuple(str(state.get(key, "")) for key in TOML_KEYS[:custom]),
            context_limit=state.get(LIMIT_KEY),
            max_output=state.get(OUTPUT_KEY),
            summarizer=state.get(SUMMARIZER_KEY),
            calibrated=bool(state.get(CALIBRATE_KEY, False)),
        )

    @property
    def complete(self) -> bool:
        """A session and configurations: enough to run the comparison on load."""
        return self.session is not None and bool(self.presets or self.tomls)

    def to_query(self) -> dict[str, str | list[str]]:
        """The query parameters of these inputs (the fields that are set)."""
        query: dict[str, str | list[str]] = {}
        if self.session is not None:
            query["session"] = self.session
        if self.presets:
            query["preset"] = list(self.presets)
        if self.tomls:
            query["toml"] = list(self.tomls)
        if self.context_limit is not None:
            query["window"] = str(self.context_limit)
        if self.max_output is not None:
            query["output"] = str(self.max_output)
        if self.summarizer is not None:
            query["summarizer"] = self.summarizer
        if self.calibrated is not None:
            query["calibration"] = "recorded" if self.calibrated else "none"
        return query

    def widget_state(self, sessions: Sequence[str], presets: Sequence[str]) -> dict[str, Any]:
        """The form's widget values these inputs set; a session or preset the database or the catalogue
        lacks is left out (see `unknown`)."""
        state: dict[str, Any] = {}
        if self.session is not None and self.session in sessions:
            state[SESSION_KEY] = self.session
        if self.presets is not None:
            state[PRESETS_KEY] = [p for p in dict.fromkeys(self.presets) if p in presets][:MAX_CONFIGS]
        if self.tomls is not None:
            state[CUSTOM_KEY] = len(self.tomls)
            state.update(zip(TOML_KEYS, self.tomls, strict=False))
        for key, value in (
            (LIMIT_KEY, self.context_limit),
            (OUTPUT_KEY, self.max_output),
            (SUMMARIZER_KEY, self.summarizer),
            (CALIBRATE_KEY, self.calibrated),
        ):
            if value is not None:
                state[key] = value
        return state

    def unknown(self, sessions: Sequence[str], presets: Sequence[str]) -> list[str]:
        """What the inputs name that does not exist here, said to the reader, with `problems`."""
        missing = list(self.problems)
        if self.session is not None and self.session not in sessions:
            missing.append(f"session {self.session!r} (not in this database)")
        missing += [f"preset {p!r} (no such preset)" for p in self.presets or () if p not in presets]
        return missing


def input_defaults() -> dict[str, Any]:
    """The form's values before anything is chosen: the window, reply reserve and summarizer of a replay
    config left unset (what `workbench replay` uses), calibration off, `DEFAULT_PRESETS`."""
    from workbench.config import DEFAULT_CONTEXT_LIMIT, DEFAULT_MAX_OUTPUT, DEFAULT_SUMMARIZER, ReplayConfig

    calibration = next(f.default for f in dataclass_fields(ReplayConfig) if f.name == "calibration")
    return {
        LIMIT_KEY: DEFAULT_CONTEXT_LIMIT,
        OUTPUT_KEY: DEFAULT_MAX_OUTPUT,
        SUMMARIZER_KEY: DEFAULT_SUMMARIZER,
        CALIBRATE_KEY: calibration == "recorded",
        PRESETS_KEY: list(DEFAULT_PRESETS),
        CUSTOM_KEY: 0,
        **{key: CUSTOM_TEMPLATE.format(n=n) for n, key in enumerate(TOML_KEYS, start=1)},
    }


def query_inputs() -> CompareInputs:
    """The inputs the page's URL carries."""
    return CompareInputs.from_query({name: st.query_params.get_all(name) for name in st.query_params})


def restore_inputs(sessions: Sequence[str], presets: Sequence[str]) -> bool:
    """Put the form back before its widgets are drawn: first what it held when last shown (or the
    defaults), then the URL's parameters when they came from outside (applied once). Returns whether
    those parameters are a whole comparison, to run at once.

    The URL is read only when the page is opened (its widgets were not drawn on the last run): each
    rerun carries the URL the browser holds, which lags behind the one the previous run wrote, so
    reading it on every rerun would undo a change made before the browser caught up."""
    opened = SESSION_KEY not in st.session_state
    remembered: dict[str, Any] = {**input_defaults(), **st.session_state.get(INPUTS_KEY, {})}
    if remembered.get(SESSION_KEY) not in sessions:
        remembered[SESSION_KEY] = sessions[0]
    remembered[PRESETS_KEY] = [p for p in remembered[PRESETS_KEY] if p in presets]
    for key, value in remembered.items():
        if key not in st.session_state:
            st.session_state[key] = value
    given = query_inputs()
    if not opened or not given.to_query() or given.to_query() == st.session_state.get(APPLIED_QUERY_KEY):
        return False
    st.session_state[APPLIED_QUERY_KEY] = given.to_query()
    st.session_state.update(given.widget_state(sessions, presets))
    unknown = given.unknown(sessions, presets)
    if unknown:
        st.warning("The link names what cannot be used here, left out: " + "; ".join(unknown) + ".")
    return given.complete and not unknown


def remember_inputs() -> CompareInputs:
    """Mirror the form's values (they outlive a visit to another page) and write them to the URL, so
    that the view can be shared or reloaded. Returns them."""
    st.session_state[INPUTS_KEY] = {key: st.session_state[key] for key in INPUT_KEYS if key in st.session_state}
    current = CompareInputs.from_state(st.session_state[INPUTS_KEY])
    query = current.to_query()
    st.session_state[APPLIED_QUERY_KEY] = query
    if {name: st.query_params.get_all(name) for name in st.query_params} != {
        name: value if isinstance(value, list) else [value] for name, value in query.items()
    }:
        st.query_params.from_dict(query)
    return current


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
    """The window, reply reserve, summarizer and calibration (values from `restore_inputs`)."""
    cols = st.columns(3)
    limit = cols[0].number_input(
        "Context window (tokens)", min_value=LIMIT_RANGE[0], max_value=LIMIT_RANGE[1], step=1_000, key=LIMIT_KEY
    )
    max_output = cols[1].number_input(
        "Reserved for output (tokens)", min_value=OUTPUT_RANGE[0], max_value=OUTPUT_RANGE[1], step=256, key=OUTPUT_KEY
    )
    summarizer = cols[2].text_input(
        "Summarizer model",
        key=SUMMARIZER_KEY,
        help="workbench/extractive is the offline extractive baseline (no model).",
    )
    calibrated = st.checkbox(
        "Calibrate token counts to the input the provider billed",
        key=CALIBRATE_KEY,
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
    chosen = st.multiselect("Presets", list(catalogue), max_selections=MAX_CONFIGS, key=PRESETS_KEY)
    custom = int(st.number_input("Configurations written as TOML", min_value=0, max_value=MAX_CUSTOM, key=CUSTOM_KEY))
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
                text = st.text_area(f"TOML config {n}", height=220, key=TOML_KEYS[n - 1])
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


def chart_title(what: str, results: Sequence[Any]) -> str:
    """A chart's title naming its session and configurations (they are user text: escaped)."""
    sessions = ", ".join(dict.fromkeys(str(r.session_id) for r in results))
    configs = ", ".join(r.config.name for r in results)
    return f"{html.escape(what)} · session {html.escape(sessions)}<br><sup>{html.escape(configs)}</sup>"


@st.fragment
def charts_panel(results: Sequence[Any]) -> None:
    from workbench.experiments import charts

    calls, compactions = chart_frames(results)
    stopped = {
        r.config.name: charts.stop_reason(r.termination, r.error) for r in results if r.termination != "completed"
    }
    limit = shared_limit(results)
    st.plotly_chart(
        charts.token_curves(
            calls,
            compactions,
            context_limit=limit,
            stopped=stopped,
            title=chart_title("Context tokens per call", results),
        ),
        key="compare_tokens",
        width="stretch",
    )
    if limit is None:
        st.caption(
            "The configurations replay in different windows: "
            + ", ".join(f"{r.config.name} {r.config.context_limit:,} tokens" for r in results)
            + "."
        )
    st.plotly_chart(
        charts.cumulative_billed(calls, title=chart_title("Cumulative billed input tokens", results)),
        key="compare_billed",
        width="stretch",
    )
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
    tabs = st.tabs([r.config.name for r in with_events])  # a tab each: the view needs the page's width
    for tab, result in zip(tabs, with_events, strict=True):
        with tab:
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
            show_compaction(result_compaction(result, index), key=f"compare_compaction:{result.config.name}:{index}")
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
    from workbench.presets import presets

    run_now = restore_inputs(list(labels), list(presets()))
    session_id = st.selectbox("Session", list(labels), format_func=lambda key: labels[key], key=SESSION_KEY)
    window = window_settings()
    if is_offline_baseline(window["summarizer"]):
        st.caption(f"Summaries by {window['summarizer']}: the {OFFLINE_BASELINE_LABEL}.")
    configs, valid = pick_configs(window)
    remember_inputs()
    request = {"session": session_id, "configs": configs, "stamp": stamp}
    clicked = st.button("Run replays", type="primary", disabled=not valid, key="compare_run")
    if clicked or (run_now and valid):  # a link naming a whole comparison runs it on arrival
        st.session_state[REQUEST_KEY] = request
    last = st.session_state.get(REQUEST_KEY)
    if last is None:
        st.info("Choose the configurations, then run the replays.")
        return
    if last != request:
        st.warning(
            f"The settings changed since these replays of session {last['session']} under "
            f"{', '.join(c['name'] for c in last['configs'])}: the charts below are theirs; run the replays "
            "again to update them."
        )
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
