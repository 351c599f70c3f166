"""The Experiments page: launch a spec, stored runs, their leaderboard, cost versus quality, drill-down,
paired comparisons.

A launch runs `run_experiment` in a worker thread (`workbench.ui.jobs`); a fragment refreshed every
second shows its progress, and the page reruns once when it ends so the new run is listed. The worker
holds DuckDB's write connection meanwhile: reads of the page that fail on the lock show the worker's
progress instead. Runs can also be started with `workbench run SPEC`; this page reads what they stored.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

from workbench.ui import common, data
from workbench.ui.jobs import Job

#: Where the shipped experiment specs live (`experiments/*.toml` at the repository root).
SHIPPED_SPECS = Path(__file__).resolve().parents[2] / "experiments"
#: `st.session_state` key of this session's launched experiment jobs.
JOBS_KEY = "exp_jobs"
#: How many finished launches stay listed with their outcome.
KEPT_JOBS = 5
#: `st.session_state` key of the "Run" selectbox (the run shown).
RUN_KEY = "exp_run"
#: `st.session_state` key of the run a launch just finished: the "Run" box shows it on the next run of the page.
SHOW_RUN_KEY = "exp_show_run"
#: The comparison table's columns that hold a metric's values, shown in the metric's unit.
VALUE_COLUMNS = ("A", "B")
DELTA_COLUMNS = ("delta", "ci_low", "ci_high")

if TYPE_CHECKING:
    import pandas as pd


@st.cache_data(show_spinner=False, max_entries=8)
def load_runs(path: str, stamp: float) -> pd.DataFrame:
    from workbench.experiments import runs

    return runs(path)


@st.cache_data(show_spinner=False, max_entries=16)
def load_results(path: str, stamp: float, run_id: str) -> pd.DataFrame:
    from workbench.experiments import results

    return results(run_id, path)


@st.cache_data(show_spinner=False, max_entries=16)
def load_summaries_note(path: str, stamp: float, run_id: str) -> str | None:
    from workbench.experiments.run import summaries_note

    return summaries_note(run_id, db=path)


@st.cache_data(show_spinner=False, max_entries=32)
def load_comparison(
    path: str, stamp: float, run_a: str, run_b: str | None, a: str | None, b: str | None, complete_only: bool = True
) -> tuple[pd.DataFrame, str | None, int, str | None, str]:
    """The comparison's table, its note (set when a side's summaries are the offline baseline's), how
    many pairs of cells it found, its note on replays that stopped early, and what it paired (in words)."""
    from workbench.experiments import compare

    configs = (a, b) if a is not None and b is not None else None
    comparison = compare(run_a, run_b, configs=configs, db=path, complete_only=complete_only)
    return comparison.to_frame(), comparison.note, comparison.cells, comparison.stopped_note, comparison.pairing


def signed(metric: str, value: Any) -> str:
    """A difference in its metric's unit with its sign (+1,234, −0.052, −$0.0100); "" when missing."""
    from workbench.experiments.charts import format_metric_signed

    return format_metric_signed(metric, value)


def comparison_table(table: pd.DataFrame) -> pd.DataFrame:
    """The comparison's numbers as text in each row's metric unit (85,904 tokens, $0.0123, 0.864), the
    differences signed and the p-value to 3 decimals: one column holds every metric, so no one format fits."""
    from workbench.experiments.charts import format_metric

    shown = table.copy()
    metrics = [str(m) for m in table["metric"]]
    for column in (c for c in VALUE_COLUMNS if c in table.columns):
        shown[column] = [format_metric(m, v) for m, v in zip(metrics, table[column], strict=True)]
    for column in (c for c in DELTA_COLUMNS if c in table.columns):
        shown[column] = [signed(m, v) for m, v in zip(metrics, table[column], strict=True)]
    if "p_value" in table.columns:
        from workbench.formatting import format_p_value

        shown["p_value"] = [format_p_value(p) for p in table["p_value"]]
    return shown


def no_pairs_message(run_a: str, run_b: str | None, configs_a: list[str], configs_b: list[str]) -> str:
    """Why a comparison of two runs found no pair of cells: what each run has, and what a pair needs."""
    shared = [c for c in configs_a if c in configs_b]
    if run_b is None:
        return "These two configurations share no session and repeat: there is no pair of cells to compare."
    listed = f"This run has {', '.join(configs_a) or 'no cell'}; run {run_b} has {', '.join(configs_b) or 'no cell'}."
    if not shared:
        return (
            "These runs share no configuration, and cells pair on session + config + repeat (the same session "
            f"replayed under the same config name in both runs). {listed} The configurations of one run compare "
            'under "two configurations of this run".'
        )
    return (
        f"These runs share the configuration(s) {', '.join(shared)} but no session + repeat under them: "
        f"cells pair on session + config + repeat. {listed}"
    )


def _show_comparison(
    path: str,
    stamp: float,
    run_a: str,
    run_b: str | None,
    a: str | None,
    b: str | None,
    key: str,
    complete_only: bool = True,
) -> None:
    try:
        table, summaries, cells, stopped, pairing = load_comparison(path, stamp, run_a, run_b, a, b, complete_only)
        if not cells:
            configs_a = [str(c) for c in dict.fromkeys(load_results(path, stamp, run_a)["config"])]
            configs_b = [str(c) for c in dict.fromkeys(load_results(path, stamp, run_b)["config"])] if run_b else []
    except Exception as exc:  # the comparison's own validation message
        st.error(common.readable_error(exc))
        return
    if not cells:
        st.warning(no_pairs_message(run_a, run_b, configs_a, configs_b))
        return
    paired = "session, config and repeat" if run_b is not None else "session and repeat"
    st.caption(f"{pairing}, cells paired on {paired}; delta = B − A with its confidence interval.")
    if stopped:
        st.warning(stopped)
    st.dataframe(comparison_table(table), hide_index=True, width="stretch", key=key)
    if summaries:
        st.caption(summaries)


@st.fragment
def comparison_panel(
    path: str,
    stamp: float,
    run_id: str,
    configs: list[str],
    other_runs: dict[str, str],
    complete_only: bool = True,
    results: Any = None,
) -> None:
    st.subheader("Paired comparison")
    mode = st.radio(
        "Compare",
        ["two configurations of this run", "this run with another run"],
        horizontal=True,
        key=f"exp_mode:{run_id}",
    )
    if mode == "this run with another run":
        if not other_runs:
            st.info("There is no other run to compare with.")
            return
        other = st.selectbox(
            "Run B", list(other_runs), format_func=lambda key: other_runs[key], key=f"exp_other:{run_id}"
        )
        _show_comparison(
            path, stamp, run_id, other, None, None, key=f"exp_runs_comparison:{run_id}", complete_only=complete_only
        )
        return
    if len(configs) < 2:
        st.info("This run has a single configuration: nothing to pair.")
        return
    cols = st.columns(2)
    a = cols[0].selectbox("A", configs, index=0, key=f"exp_a:{run_id}")
    b = cols[1].selectbox("B", configs, index=default_partner(results, configs), key=f"exp_b:{run_id}")
    if a == b:
        st.info("Pick two different configurations.")
        return
    _show_comparison(path, stamp, run_id, None, a, b, key=f"exp_comparison:{run_id}", complete_only=complete_only)


def default_partner(results: Any, configs: list[str]) -> int:
    """The config paired with the first by default: the next one that compacted in some cell (one
    that never did, e.g. as-recorded on sessions with nothing recorded, repeats no-compaction)."""
    if "compactions" in getattr(results, "columns", ()):
        acted = set(results.loc[results["compactions"].fillna(0) > 0, "config"].astype(str))
        found = next((i for i, name in enumerate(configs) if i > 0 and name in acted), None)
        if found is not None:
            return found
    return 1


#: The downloads of a run: format -> (label, file ending, MIME type).
DOWNLOADS = {
    "csv": ("CSV", "csv", "text/csv"),
    "parquet": ("Parquet", "parquet", "application/vnd.apache.parquet"),
    "json": ("JSON", "json", "application/json"),
    "html": ("HTML report", "html", "text/html"),
}


@st.cache_data(show_spinner=False, max_entries=16)
def export_file(path: str, stamp: float, run_id: str, format: str) -> bytes:
    """The run exported by the library (`export_bytes`: what `workbench export` writes), as bytes."""
    from workbench.experiments.export import export_bytes

    return export_bytes(run_id, format, db=path)


@st.fragment
def report_panel(path: str, stamp: float, run_id: str) -> None:
    """Downloads of the run in every export format, built on the first click (each is a whole export)."""
    st.subheader("Downloads")
    if not st.button("Prepare the downloads (CSV, Parquet, JSON, HTML report)", key=f"exp_report:{run_id}"):
        return
    columns = st.columns(len(DOWNLOADS))
    for column, (format, (label, ending, mime)) in zip(columns, DOWNLOADS.items(), strict=True):
        try:
            exported = export_file(path, stamp, run_id, format)
        except Exception as exc:  # shown as a message
            column.error(f"The {label} export failed: {common.readable_error(exc)}")
            continue
        column.download_button(
            label, exported, file_name=f"run-{run_id}.{ending}", mime=mime, key=f"exp_download:{format}:{run_id}"
        )
    st.caption("The tables hold one row per cell, with `in_complete_pairs`; the JSON has the compactions too.")


@st.cache_data(show_spinner=False, max_entries=4)
def load_run_figures(path: str, stamp: float, run_id: str, complete_only: bool) -> list[tuple[str, Any]]:
    from workbench.experiments.export import run_figures

    return run_figures(run_id, path, complete_only=complete_only)


@st.fragment
def report_charts_panel(path: str, stamp: float, run_id: str, complete_only: bool) -> None:
    """The token curves of the HTML report (`report_figures`; its cost-versus-quality chart is above)."""
    from workbench.experiments.export import COST_QUALITY_SECTION

    if not st.toggle("Show the HTML report's token curves", key=f"exp_report_charts:{run_id}"):
        return
    try:
        figures = load_run_figures(path, stamp, run_id, complete_only)
    except Exception as exc:  # shown as a message
        common.show_read_error(exc)
        return
    curves = [(section, figure) for section, figure in figures if section != COST_QUALITY_SECTION]
    if not curves:
        st.info("This run stored no call.")
    for position, (_, figure) in enumerate(curves):
        st.plotly_chart(figure, key=f"exp_report_chart:{run_id}:{position}", width="stretch")


@st.cache_data(show_spinner=False, max_entries=16)
def load_cell(path: str, stamp: float, run_id: str, session_id: str, config: str, repeat: int) -> Any:
    from workbench.experiments.drill import CellKey, stored_cell

    return stored_cell(run_id, CellKey(session_id, config, repeat), db=path)


@st.cache_resource(show_spinner=False, max_entries=8)
def load_cell_replay(path: str, stamp: float, run_id: str, session_id: str, config: str, repeat: int) -> Any:
    """The cell replayed again from its stored config (cached: a `ReplayResult` keeps its contexts)."""
    from workbench.experiments.drill import replay_cell

    return replay_cell(load_cell(path, stamp, run_id, session_id, config, repeat), path)


def cell_metrics_table(cell: Any) -> Any:
    """The cell's metrics in their units (`charts.format_metric`), with the direction each declares."""
    from workbench.access import direction_label
    from workbench.experiments.charts import format_metric

    table = cell.metrics_table()
    table["value"] = [format_metric(str(m), v) for m, v in zip(table["metric"], table["value"], strict=True)]
    table["better"] = [direction_label(str(direction)) for direction in table["better"]]
    return table


@st.fragment
def drill_down_panel(path: str, stamp: float, results: Any, run_id: str, configs: list[str]) -> None:
    """A configuration's cells; one cell opened: its token curve, metrics and compactions."""
    from workbench.experiments.drill import cell_keys

    st.subheader("Cells of a configuration")
    config = st.selectbox("Configuration", configs, key=f"exp_drill:{run_id}")
    cells = results[results["config"] == config]
    st.dataframe(cells.drop(columns=["run_id"]), hide_index=True, width="stretch")
    keys = cell_keys(cells)
    if not keys:
        return
    ends = dict(zip(keys, cells["termination"].fillna("?").astype(str), strict=True))
    key = st.selectbox(
        "Open a cell",
        keys,
        format_func=lambda k: f"{k.label} · {ends[k]}",
        key=f"exp_cell:{run_id}:{config}",
    )
    try:
        cell = load_cell(path, stamp, run_id, key.session_id, key.config, key.repeat)
    except Exception as exc:  # shown as a message
        common.show_read_error(exc)
        return
    st.plotly_chart(cell.figure(), key=f"exp_cell_curve:{run_id}", width="stretch")
    if cell.termination not in (None, "completed"):
        st.warning(f"This replay stopped early: {cell.termination}" + (f": {cell.error}" if cell.error else ""))
    st.markdown("**Metrics of this cell**")
    st.dataframe(cell_metrics_table(cell), hide_index=True, width="stretch", key=f"exp_cell_metrics:{run_id}")
    compaction_picker(path, stamp, run_id, cell)


def compaction_picker(path: str, stamp: float, run_id: str, cell: Any) -> None:
    """The cell's compactions, one opened in the compaction view (the cell replayed again for its contexts)."""
    from workbench.experiments.drill import cell_compaction
    from workbench.ui.compaction import show_compaction

    changed = cell.changed_compactions()
    if not len(changed):
        st.info("This cell never compacted.")
        return
    labels = {
        int(row.event_index): f"#{int(row.event_index)} before call {int(row.call_index)}: "
        f"{int(row.tokens_before):,} → {int(row.tokens_after):,} tokens"
        for row in changed.itertuples()
    }
    st.markdown(f"**Compactions of this cell ({len(labels)})**")
    index = st.selectbox(
        "Compaction",
        list(labels),
        format_func=labels.__getitem__,
        key=f"exp_cell_compaction:{run_id}:{cell.key.label}",
    )
    st.caption(
        "What a compaction replaced is not stored: the cell is replayed again from the config its run stored, "
        "on the stored session, its model calls answered from the database's model cache (no model is asked "
        "again for what the run asked); the quality and lost facts are the ones the run stored."
    )
    try:
        result = load_cell_replay(path, stamp, run_id, cell.key.session_id, cell.key.config, cell.key.repeat)
        opened = cell_compaction(cell, result, int(index))
    except Exception as exc:  # the replay failing is said, the rest of the panel stays
        st.error(f"The cell could not be replayed again: {common.readable_error(exc)}")
        return
    if opened.note:
        st.warning(opened.note)
    show_compaction(opened.view, key=f"exp_compaction:{run_id}:{cell.key.label}:{index}")


def spec_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The experiment specs (`*.toml`) of a folder, by name; none when the folder is missing."""
    target = Path(folder)
    return sorted(target.glob("*.toml")) if target.is_dir() else []


def progress_fraction(progress: Any) -> float:
    total = getattr(progress, "cells_total", 0) or 0
    return min(1.0, max(0.0, progress.cells_done / total)) if total else 1.0


def launched_jobs() -> list[Job]:
    jobs: list[Job] = st.session_state.setdefault(JOBS_KEY, [])
    return jobs


def delete_panel(path: str, run_id: str) -> None:
    """Delete the chosen run (every level, the model cache kept), behind a second click."""
    from workbench.experiments import delete_runs

    busy = running()
    with st.popover(
        "Delete this run",
        disabled=busy,
        help="Not while a launched experiment is writing to the database." if busy else None,
    ):
        st.caption(
            f"Removes run `{run_id}`: its cells, calls, compactions and summaries. The model cache "
            "is kept, so running the spec again asks no model."
        )
        if st.button("Delete", type="primary", key=f"exp_delete:{run_id}"):
            try:
                deleted = delete_runs(run_id, path)
            except Exception as exc:  # shown as a message (e.g. the database in use elsewhere)
                st.error(common.readable_error(exc))
                return
            st.session_state.pop(RUN_KEY, None)  # the page chooses an existing run on the rerun
            st.session_state["exp_deleted"] = f"Deleted run {run_id} ({deleted.get(run_id, 0)} cells)."
            st.rerun()


def running() -> bool:
    return any(not job.done for job in launched_jobs())


#: Where a launched run computes its cells (`run_experiment`'s `executor`), as the launch form offers it.
EXECUTORS = {
    "auto": "chosen for the grid: worker processes for a big offline one, else threads",
    "local": "threads of the app's process",
    "processes": "a worker process per CPU (CPU-bound grids: offline summaries, quality metrics)",
}


def start_experiment(spec: Any, path: str, executor: str = "auto") -> Job:
    """Launch `run_experiment(spec)` into the database at `path` in a worker thread, its cells computed
    by `executor` (a name of `EXECUTORS`)."""
    from workbench.experiments import run_experiment

    job = Job(spec.name, lambda report: run_experiment(spec, db=path, progress=report, executor=executor))
    jobs = launched_jobs()
    jobs.append(job)
    finished = [j for j in jobs if j.done]
    for old in finished[: max(0, len(finished) - KEPT_JOBS)]:
        jobs.remove(old)
    return job


def launch_panel(path: str) -> None:
    """Choose a shipped spec or paste one; validation errors show here, the run starts in a worker."""
    from workbench.experiments import load_experiment

    with st.expander("Launch an experiment", expanded=not running()):
        source = st.radio("Spec", ["shipped spec", "paste TOML"], horizontal=True, key="exp_source")
        spec_source: str | None
        if source == "shipped spec":
            files = spec_files(SHIPPED_SPECS)
            if not files:
                st.info(f"No spec in `{SHIPPED_SPECS}`: paste one instead.")
                return
            spec_source = str(
                st.selectbox(
                    "Shipped spec", [str(f) for f in files], format_func=lambda f: Path(f).name, key="exp_spec_file"
                )
            )
        else:
            spec_source = st.text_area(
                "Experiment TOML",
                key="exp_spec_text",
                height=220,
                placeholder='name = "my-grid"\ndataset = "samples"\n\n[[config]]\n...',
            )
        executor = str(
            st.selectbox(
                "Cells run in",
                list(EXECUTORS),
                format_func=EXECUTORS.__getitem__,
                key="exp_executor",
                help="Worker processes use every core and leave the app responsive; they take about a second to start.",
            )
        )
        if not st.button("Run", key="exp_launch", type="primary"):
            return
        if not spec_source or not spec_source.strip():
            st.error("The spec is empty: paste an experiment in TOML (name, dataset, [[config]] tables).")
            return
        text = spec_source if source == "shipped spec" else spec_source.strip() + "\n"
        try:
            spec = load_experiment(text)
        except Exception as exc:  # every problem of the spec, not only the first
            st.error(spec_errors(text, exc))
            return
        start_experiment(spec, path, executor)


def spec_errors(source: str, exc: BaseException) -> str:
    """What is wrong with a spec that failed to load: every problem `spec_problems` finds, else the error."""
    from workbench.experiments.spec import spec_problems

    try:
        problems = spec_problems(source)
    except Exception:  # the error raised is still worth showing
        problems = []
    if len(problems) <= 1:
        return f"The spec is not valid: {problems[0] if problems else common.readable_error(exc)}"
    listed = "\n".join(f"- {problem}" for problem in problems)
    return f"The spec is not valid: {len(problems)} problems\n\n{listed}"


def show_job(job: Job) -> None:
    state = job.state()
    if state.error is not None:
        st.error(f"Run of {state.label} failed: {state.error}")
    elif state.done:
        run = state.result
        shown = st.session_state.get(SHOW_RUN_KEY) or st.session_state.get(RUN_KEY)
        if shown not in (None, getattr(run, "id", None)):
            return  # another run is shown: its banner would read as this one's
        st.success(f"Run of {state.label} {getattr(run, 'status', 'finished')}: {run.progress.line()} · {run.id}")
        if run.executor.reason:
            where = "in worker processes" if run.executor.name == "processes" else "in the app's process"
            st.caption(f"Cells computed {where} (auto: {run.executor.reason}).")
        for line in run.spec.notes:
            st.info(line)
    elif state.progress is None:
        st.progress(0.0, text=f"{state.label}: starting…")
    else:
        st.progress(progress_fraction(state.progress), text=f"{state.label}: {state.progress.line()}")


@st.fragment(run_every=1)
def progress_panel() -> None:
    """Live progress of the running launches; reruns the page once when one has ended."""
    for job in launched_jobs():
        show_job(job)
    if any(job.done and not job.announced for job in launched_jobs()):
        for job in launched_jobs():
            if job.done and not job.announced:
                result = job.state().result
                if getattr(result, "id", None):
                    st.session_state[SHOW_RUN_KEY] = result.id  # the page shows the run that just ended
            job.announced = job.announced or job.done
        st.rerun()


def jobs_panel() -> None:
    jobs = launched_jobs()
    if any(not job.done or not job.announced for job in jobs):
        progress_panel()
    else:
        for job in jobs:
            show_job(job)


def page() -> None:
    from workbench.experiments import charts
    from workbench.experiments.compare import complete_pairs

    path = common.database_path()
    st.title("Experiments")
    deleted = st.session_state.pop("exp_deleted", None)
    if deleted:
        st.success(deleted)
    if not os.path.exists(path):
        st.info(f"No database at `{path}` yet: `workbench init --db {path}` creates it with the samples.")
        return
    launch_panel(path)
    jobs_panel()
    stamp = data.stamp(path)
    try:
        runs = load_runs(path, stamp)
    except Exception as exc:  # shown as a message
        if running():
            st.info("A launched experiment is writing to the database: the runs show when it has finished.")
        else:
            st.error(common.readable_error(exc))
        return
    if not len(runs):
        st.info(
            "No experiment run yet: launch one above, or run `workbench run experiments/SPEC.toml` "
            "against this database."
        )
        return
    st.dataframe(runs, hide_index=True, width="stretch", key="exp_runs")
    labels = {
        str(r.id): f"{r.name} · {r.status} · {r.cells_done}/{r.cells_total} cells · {r.id}" for r in runs.itertuples()
    }
    ended = st.session_state.pop(SHOW_RUN_KEY, None)
    if ended in labels:
        st.session_state[RUN_KEY] = ended
    if st.session_state.get(RUN_KEY) not in labels:
        # none chosen yet, or the chosen run is gone (deleted here or elsewhere): set the newest through the
        # session state, so the value is sent to the browser's selectbox too (it would keep showing the old label)
        st.session_state[RUN_KEY] = next(iter(labels))
    run_id = st.selectbox("Run", list(labels), format_func=lambda key: labels[key], key=RUN_KEY)
    delete_panel(path, run_id)
    try:
        results = load_results(path, stamp, run_id)
    except Exception as exc:  # shown as a message
        if running():
            st.info("A launched experiment is writing to the database: this run shows when it has finished.")
        else:
            st.error(common.readable_error(exc))
        return
    if not len(results):
        st.info("This run has no finished cell yet.")
        return
    configs = [str(c) for c in dict.fromkeys(results["config"])]
    st.subheader("Leaderboard")
    every = st.checkbox(
        "Every session, replays that stopped early included",
        key=f"exp_all_sessions:{run_id}",
        help="By default configs are compared on the sessions where every config completed: a replay "
        "that stops early totals only the calls it made.",
    )
    pairs = complete_pairs(results, complete_only=not every)
    board = charts.shown_board(charts.leaderboard(results, pairs=pairs))  # the CLI's and the report's text
    st.dataframe(board, width="stretch", key=f"exp_leaderboard:{run_id}")
    if pairs.note:
        st.warning(pairs.note)
    summaries = load_summaries_note(path, stamp, run_id)
    if summaries:
        st.caption(summaries)
    scatter = charts.cost_quality(results, pairs=pairs)
    if scatter is None:
        st.info("No quality metric in this run: the cost-versus-quality chart needs one (e.g. fact_retention).")
    else:
        st.plotly_chart(scatter, key=f"exp_scatter:{run_id}", width="stretch")
    report_charts_panel(path, stamp, run_id, complete_only=not every)
    report_panel(path, stamp, run_id)
    drill_down_panel(path, stamp, results, run_id, configs)
    comparison_panel(
        path,
        stamp,
        run_id,
        configs,
        {k: v for k, v in labels.items() if k != run_id},
        complete_only=not every,
        results=results,
    )
