"""App benchmark, through Streamlit's AppTest (the page scripts as the server runs them).

(a) The Compare page's time to first chart for a generated 1,000-call session with 4 preset
    configurations, as a ratio over the same 4 replays run directly — goal <= 1.5.
    "Time to first chart" runs from the start of the page run that follows "Run replays" (with the
    session and replay caches cleared, so the page loads the session and replays all 4 configs)
    until the first `st.plotly_chart` call returns (its element is then in the page). "Replays
    alone" is `replay()` called 4 times on a freshly loaded session. The page and the direct replays
    alternate over several rounds; the figure is the median ratio of the rounds after the first.
    The first round runs in a cold process and also pays one-time module imports (pandas, plotly and
    jinja2 are compiled from source when bytecode caching is off, as it is here): printed apart.
(b) The Sessions page's first-run time on a database of 1,000 small generated sessions — goal <= 2 s.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.bench_replay import generate_session
from workbench.offline import apply_defaults
from workbench.session import Session
from workbench.store import Store

LONG_CALLS = 1000
SMALL_SESSIONS = 1000
PRESETS = ["no-compaction", "observation-masking", "gent-sliding-window", "ptc-runner-trim"]
ROUNDS = 6
RATIO_GOAL = 1.5
SESSIONS_GOAL_S = 2.0
TIMEOUT_S = 900


def page_script(module: str) -> str:
    return (
        f"from workbench.offline import apply_defaults\napply_defaults()\n"
        f"from workbench.ui.{module} import page\npage()\n"
    )


@contextlib.contextmanager
def first_chart_clock() -> Iterator[list[float]]:
    """Records `time.perf_counter()` each time a plotly chart call returns, from any page thread."""
    import streamlit
    from streamlit.delta_generator import DeltaGenerator

    stamps: list[float] = []

    def timed(draw: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return draw(*args, **kwargs)
            finally:
                stamps.append(time.perf_counter())

        return wrapper

    module_level = streamlit.plotly_chart
    streamlit.plotly_chart = timed(module_level)
    DeltaGenerator.plotly_chart = timed(DeltaGenerator.plotly_chart)  # type: ignore[method-assign]  # a timing wrapper, same call
    try:
        yield stamps
    finally:
        streamlit.plotly_chart = module_level
        del DeltaGenerator.plotly_chart  # the mixin's method shows through again


def clear_replay_caches() -> None:
    """Forget the loaded sessions and the replays: the next "Run replays" starts from the database.

    The overview of sessions stays cached, as it is in the app: the page drew it before the click.
    """
    from workbench.ui import common, compare

    common.load_session.clear()
    compare.cached_replay.clear()


def page_first_chart(session_id: str) -> tuple[float, float]:
    """(seconds to the first chart, seconds of the whole page run) of one run with cleared caches."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_string(page_script("compare"), default_timeout=TIMEOUT_S)
    at.run()
    at.selectbox(key="compare_session").set_value(session_id)
    at.multiselect(key="compare_presets").set_value(PRESETS)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    clear_replay_caches()
    with first_chart_clock() as stamps:
        started = time.perf_counter()
        at.button(key="compare_run").click().run()
        run_s = time.perf_counter() - started
    assert at.get("plotly_chart") and stamps, f"the Compare page drew no chart: {[e.message for e in at.exception]}"
    if at.exception:  # drawn after the charts; reported, not fatal to the timing
        print(f"compare: the page raised after its charts: {[e.message for e in at.exception]}", flush=True)
    return stamps[0] - started, run_s


def replays_alone(db: str, session_id: str) -> float:
    from workbench.config import DEFAULT_CONTEXT_LIMIT, DEFAULT_SUMMARIZER
    from workbench.presets import presets
    from workbench.replay import replay

    with Store(db, read_only=True) as store:
        fresh = store.load_session(session_id)  # as the page loads it: no token counts cached
    catalogue = presets()
    window = {"context_limit": DEFAULT_CONTEXT_LIMIT, "max_output": 4096, "summarizer": DEFAULT_SUMMARIZER}
    started = time.perf_counter()
    for name in PRESETS:
        replay(fresh, {**catalogue[name], **window})
    return time.perf_counter() - started


def compare_rounds(db: str) -> list[tuple[float, float, float]]:
    """Per round: (seconds to the first chart, seconds of the page run, seconds of the replays alone)."""
    session = generate_session(LONG_CALLS)
    session = Session.from_messages(list(session.messages), id="bench-1000-calls", dataset="bench")
    with Store(db) as store:
        store.import_sessions([session])
    os.environ["WORKBENCH_DB"] = db
    rounds = []
    for _ in range(ROUNDS):
        first_chart_s, run_s = page_first_chart(session.id)
        rounds.append((first_chart_s, run_s, replays_alone(db, session.id)))
    return rounds


def sessions_load(db: str) -> float:
    from streamlit.testing.v1 import AppTest

    small = [generate_session(2, seed=i) for i in range(SMALL_SESSIONS)]
    small = [
        Session.from_messages(list(s.messages), id=f"small-{i:04d}", dataset="bench-small") for i, s in enumerate(small)
    ]
    with Store(db) as store:
        store.import_sessions(small)
    os.environ["WORKBENCH_DB"] = db
    at = AppTest.from_string(page_script("sessions"), default_timeout=TIMEOUT_S)
    started = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - started
    assert not at.exception, [e.message for e in at.exception]
    return elapsed


def run() -> None:
    apply_defaults()
    import logging

    import streamlit  # noqa: F401  (its loggers exist once it is imported)

    # the timed page functions also run outside a script run, where Streamlit warns on every call (a
    # filter, not a level: AppTest sets Streamlit's log levels again)
    logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").addFilter(
        lambda record: "missing ScriptRunContext" not in record.getMessage()
    )
    previous = os.environ.get("WORKBENCH_DB")
    try:
        with tempfile.TemporaryDirectory() as folder:
            rounds = compare_rounds(str(Path(folder) / "long.duckdb"))
            (cold_chart, cold_run, cold_replays), warm = rounds[0], rounds[1:]
            ratio = statistics.median(chart / replays for chart, _, replays in warm)
            print(
                f"compare: time to first chart, {LONG_CALLS:,}-call session x {len(PRESETS)} configs: "
                f"median ratio {ratio:.2f} over the replays alone (goal <= {RATIO_GOAL}); rounds: "
                + ", ".join(
                    f"{chart:.2f} s / {replays:.2f} s (whole page run {run:.2f} s)" for chart, run, replays in warm
                ),
                flush=True,
            )
            print(
                f"compare: cold process (first round, module imports included): first chart {cold_chart:.2f} s, "
                f"whole page run {cold_run:.2f} s, replays alone {cold_replays:.2f} s -> ratio "
                f"{cold_chart / cold_replays:.2f}",
                flush=True,
            )
            load_s = sessions_load(str(Path(folder) / "many.duckdb"))
            print(
                f"sessions: first load with {SMALL_SESSIONS:,} sessions: {load_s:.2f} s "
                f"(goal <= {SESSIONS_GOAL_S:.0f} s)",
                flush=True,
            )
    finally:
        if previous is None:
            os.environ.pop("WORKBENCH_DB", None)
        else:
            os.environ["WORKBENCH_DB"] = previous
