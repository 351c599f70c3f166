"""App benchmark, through Streamlit's AppTest (the page scripts as the server runs them).

(a) The Compare page's time to first chart for a generated 1,000-call session with 4 preset
    configurations, as a ratio over the same 4 replays run directly — goal <= 1.5. The page runs
    first (cold), so anything process-wide it warms up only helps the direct replays: the ratio is
    conservative.
(b) The Sessions page's first-run time on a database of 1,000 small generated sessions — goal <= 2 s.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from benchmarks.bench_replay import generate_session
from workbench.offline import apply_defaults
from workbench.session import Session
from workbench.store import Store

LONG_CALLS = 1000
SMALL_SESSIONS = 1000
PRESETS = ["no-compaction", "observation-masking", "gent-sliding-window", "ptc-runner-trim"]
RATIO_GOAL = 1.5
SESSIONS_GOAL_S = 2.0
TIMEOUT_S = 900


def page_script(module: str) -> str:
    return (f"from workbench.offline import apply_defaults\napply_defaults()\n"
            f"from workbench.ui.{module} import page\npage()\n")


def compare_ratio(db: str) -> tuple[float, float]:
    """(seconds to the first chart on the page, seconds of the 4 replays alone)."""
    from streamlit.testing.v1 import AppTest

    from workbench.config import DEFAULT_SUMMARIZER
    from workbench.presets import presets
    from workbench.replay import replay
    from workbench.ui.compare import DEFAULT_CONTEXT_LIMIT

    session = generate_session(LONG_CALLS)
    session = Session.from_messages(list(session.messages), id="bench-1000-calls", dataset="bench")
    with Store(db) as store:
        store.import_sessions([session])
    os.environ["WORKBENCH_DB"] = db
    at = AppTest.from_string(page_script("compare"), default_timeout=TIMEOUT_S)
    at.run()
    at.selectbox(key="compare_session").set_value(session.id)
    at.multiselect(key="compare_presets").set_value(PRESETS)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    started = time.perf_counter()
    at.button(key="compare_run").click().run()
    page_s = time.perf_counter() - started
    assert at.get("plotly_chart"), f"the Compare page drew no chart: {[e.message for e in at.exception]}"
    if at.exception:  # drawn after the charts; reported, not fatal to the timing
        print(f"compare: the page raised after its charts: {[e.message for e in at.exception]}", flush=True)

    with Store(db) as store:
        fresh = store.load_session(session.id)  # as the page loads it: no token counts cached
    catalogue = presets()
    window = {"context_limit": DEFAULT_CONTEXT_LIMIT, "max_output": 4096, "summarizer": DEFAULT_SUMMARIZER}
    started = time.perf_counter()
    for name in PRESETS:
        replay(fresh, {**catalogue[name], **window})
    replays_s = time.perf_counter() - started
    return page_s, replays_s


def sessions_load(db: str) -> float:
    from streamlit.testing.v1 import AppTest

    small = [generate_session(2, seed=i) for i in range(SMALL_SESSIONS)]
    small = [Session.from_messages(list(s.messages), id=f"small-{i:04d}", dataset="bench-small")
             for i, s in enumerate(small)]
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
    previous = os.environ.get("WORKBENCH_DB")
    try:
        with tempfile.TemporaryDirectory() as folder:
            page_s, replays_s = compare_ratio(str(Path(folder) / "long.duckdb"))
            print(f"compare: time to first chart, {LONG_CALLS:,}-call session x {len(PRESETS)} configs: "
                  f"{page_s:.2f} s vs {replays_s:.2f} s of replays alone -> ratio {page_s / replays_s:.2f} "
                  f"(goal <= {RATIO_GOAL})", flush=True)
            load_s = sessions_load(str(Path(folder) / "many.duckdb"))
            print(f"sessions: first load with {SMALL_SESSIONS:,} sessions: {load_s:.2f} s "
                  f"(goal <= {SESSIONS_GOAL_S:.0f} s)", flush=True)
    finally:
        if previous is None:
            os.environ.pop("WORKBENCH_DB", None)
        else:
            os.environ["WORKBENCH_DB"] = previous
