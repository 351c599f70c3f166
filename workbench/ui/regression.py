"""The Regression page: a spec's current run against its baseline, failing metrics first, summary diffs.

`regress` runs (or resumes) the spec's run in a worker thread (`workbench.ui.jobs`), so the page keeps
answering and shows its progress; a second check of the same spec reuses the stored cells and is fast.
Picking a spec picks its own baseline, and a report shows only under the spec and baseline it checked.
Summary texts are shown as code blocks (text only, never HTML).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

from workbench.ui import common
from workbench.ui.experiments import SHIPPED_SPECS, progress_fraction, spec_files
from workbench.ui.jobs import Job

if TYPE_CHECKING:
    import pandas as pd
    from pandas.io.formats.style import Styler

#: `st.session_state` key of this session's regression job.
JOB_KEY = "reg_job"
#: `st.session_state` key of what that job checks: (spec file, baseline file).
JOB_TARGET_KEY = "reg_job_target"
#: `st.session_state` key of the spec the "Baseline" choice was made for.
BASELINE_SPEC_KEY = "reg_baseline_spec"
FAIL_COLOUR = "background-color: rgba(214, 39, 40, 0.22)"
PASS_COLOUR = "background-color: rgba(44, 160, 44, 0.15)"


def change_text(diff: Any) -> str:
    """A `MetricDiff`'s change from the baseline: relative when the baseline is not zero (+2.5%), else
    absolute; "" when a side is missing."""
    if diff.relative_change is not None:
        return f"{diff.relative_change:+.1%}"
    return "" if diff.change is None else f"{diff.change:+.4g}"


def checks_frame(report: Any) -> pd.DataFrame:
    """One row per metric check of a RegressionReport, failing checks first; values as text in their
    metric's unit (`charts.format_metric`), a value missing on one side said so."""
    import pandas as pd

    from workbench.experiments.charts import format_metric

    rows = [
        {
            "ok": d.ok,
            "config": d.config,
            "dataset": d.dataset,
            "metric": d.metric,
            "baseline": "not in the baseline" if d.baseline is None else format_metric(d.metric, d.baseline),
            "current": "missing from the run" if d.current is None else format_metric(d.metric, d.current),
            "change": change_text(d),
            "tolerance": d.tolerance.describe(),
        }
        for d in report.diffs
    ]
    frame = pd.DataFrame(
        rows, columns=["ok", "config", "dataset", "metric", "baseline", "current", "change", "tolerance"]
    )
    return frame.sort_values("ok", kind="stable").reset_index(drop=True)


def coloured(frame: pd.DataFrame) -> Styler:
    return frame.style.apply(lambda row: [PASS_COLOUR if row["ok"] else FAIL_COLOUR] * len(row), axis=1)


def baseline_choices(folder: Path, spec_file: Path) -> tuple[list[str], int]:
    """The baselines beside the specs (`baselines/*.json`), and the index of the spec's own (by name)."""
    from workbench.experiments import load_experiment
    from workbench.experiments.regress import baseline_path

    own = baseline_path(load_experiment(spec_file))
    found = sorted((folder / "baselines").glob("*.json")) if (folder / "baselines").is_dir() else []
    choices = [str(p) for p in found]
    if str(own) not in choices:
        choices.insert(0, str(own))
    return choices, choices.index(str(own))


def show_report(report: Any) -> None:
    failures = report.failures
    if report.ok:
        st.success(
            f"PASS: {report.experiment}, all {len(report.diffs)} metric checks within tolerance (run {report.run_id})"
        )
    elif failures or report.summary_diffs:
        st.error(
            f"REGRESSION: {report.experiment}, {len(failures)} of {len(report.diffs)} metric checks failed"
            f", {len(report.summary_diffs)} summary snapshot(s) changed (run {report.run_id})"
        )
    else:
        st.error(f"FAIL: {report.experiment} (run {report.run_id})")
    for problem in report.problems:
        st.error(problem)
    st.caption(f"Baseline: {report.baseline_path}")
    if report.diffs:
        st.subheader("Metric checks")
        st.dataframe(coloured(checks_frame(report)), hide_index=True, width="stretch", key="reg_checks")
    if report.notes:
        st.subheader("Notes")
        for note in report.notes:
            st.text(note)
    if report.summary_diffs:
        st.subheader("Summary diffs")
        for item in report.summary_diffs:
            st.text(f"{item.config} / session {item.session_id}")
            st.code(item.diff, language="diff")


def show_job(job: Job) -> None:
    state = job.state()
    if state.error is not None:
        st.error(f"The regression check of {state.label} failed: {state.error}")
    elif state.done:
        show_report(state.result)
    elif state.progress is None:
        st.progress(0.0, text=f"{state.label}: starting…")
    else:
        st.progress(progress_fraction(state.progress), text=f"{state.label}: {state.progress.line()}")


@st.fragment(run_every=1)
def progress_panel(job: Job) -> None:
    show_job(job)
    if job.done:
        job.announced = True
        st.rerun()


@st.fragment(run_every=1)
def elsewhere_panel(job: Job, target: tuple[str, str]) -> None:
    """The running check of another spec or baseline: a note, and a rerun when it ends (to enable the button)."""
    if job.done:
        st.rerun()
    st.info(
        f"Checking {Path(target[0]).name} against {Path(target[1]).name}: pick them again to follow the "
        "check; another can start when it has finished."
    )


def page() -> None:
    from workbench.experiments import regress

    path = common.database_path()
    st.title("Regression")
    if not os.path.exists(path):
        st.info(f"No database at `{path}` yet: `workbench init --db {path}` creates it with the samples.")
        return
    folder = Path(st.text_input("Spec folder", value=str(SHIPPED_SPECS), key="reg_folder"))
    files = spec_files(folder)
    if not files:
        st.info(f"No experiment spec (`*.toml`) in `{folder}`.")
        return
    spec_file = Path(st.selectbox("Spec", [str(f) for f in files], format_func=lambda f: Path(f).name, key="reg_spec"))
    try:
        choices, own = baseline_choices(folder, spec_file)
    except Exception as exc:  # the spec's own validation message
        st.error(f"The spec is not valid: {common.readable_error(exc)}")
        return
    baseline = baseline_picker(str(spec_file), choices, own)
    job: Job | None = st.session_state.get(JOB_KEY)
    busy = job is not None and not job.done
    if not Path(baseline).is_file():
        st.warning(f"No baseline at `{baseline}` yet: `workbench regress {spec_file} --update` writes it.")
    else:
        st.caption(planned_work(str(spec_file), path))
    if Path(baseline).is_file() and st.button(
        "Check against the baseline", key="reg_run", type="primary", disabled=busy
    ):
        job = Job(spec_file.stem, lambda report: regress(str(spec_file), baseline, db=path, progress=report))
        st.session_state[JOB_KEY] = job
        st.session_state[JOB_TARGET_KEY] = (str(spec_file), baseline)
    if job is None:
        return
    target = st.session_state.get(JOB_TARGET_KEY)
    if target != (str(spec_file), baseline):  # the report belongs to another spec or baseline
        if not job.done and target is not None:
            elsewhere_panel(job, target)
        return
    if not job.announced:
        progress_panel(job)
    else:
        show_job(job)


def planned_work(spec_file: str, path: str) -> str:
    """What a check will run before it runs: the cells of the spec's grid, and how many a stored run
    of the same code and data already holds (reused, not replayed)."""
    from workbench.experiments import dry_run

    try:
        plan = dry_run(spec_file, db=path)
    except Exception as exc:  # a spec naming a dataset the database lacks, say
        return f"The check cannot run here: {common.readable_error(exc)}"
    to_run = plan["cells_to_run"]
    what = (
        f"a check runs the spec's {plan['cells']:,} cells ({plan['sessions']:,} sessions × "
        f"{len(plan['configs'])} configs × {plan['repeats']} repeat{'s' * (plan['repeats'] != 1)})"
    )
    if to_run == 0:
        return f"Every cell is stored already: {what}, all reused."
    reused = f", {plan['cells_done']:,} reused from a stored run" if plan["cells_done"] else ""
    return f"Before comparing, {what}: {to_run:,} to replay{reused}."


def baseline_picker(spec_file: str, choices: list[str], own: int) -> str:
    """The "Baseline" choice: the spec's own baseline whenever another spec is picked (a choice kept
    from the previous spec would check this spec against that spec's baseline), else the user's."""
    if st.session_state.get(BASELINE_SPEC_KEY) != spec_file or st.session_state.get("reg_baseline") not in choices:
        st.session_state["reg_baseline"] = choices[own]
    st.session_state[BASELINE_SPEC_KEY] = spec_file
    return str(st.selectbox("Baseline", choices, format_func=lambda f: Path(f).name, key="reg_baseline"))
