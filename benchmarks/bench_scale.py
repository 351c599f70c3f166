"""Scale benchmark: a synthetic dataset generated, imported, listed, opened and replayed on one machine.

Generates `workbench.synthetic`'s dataset (500 messages per session on average) into a fresh DuckDB
file with DuckDB's memory capped (`$WORKBENCH_MEMORY_LIMIT`, default 1GB here), then prints peak RSS
after each phase and the throughput: messages/s generated and imported, the time to list and to
filter every session, to open one, and cells/s of a one-config experiment (gent's sliding window,
no model) over every session. The dataset's text size over peak RSS shows that memory does not grow
with the dataset.

The default is the issue's dataset, 10,000 sessions / 5,000,000 messages (about 30 minutes on 2
cores, most of it the experiment); a quicker pass takes a slice:

    make bench BENCH_ARGS=scale                                  # 10,000 sessions
    BENCH_SCALE_SESSIONS=1000 make bench BENCH_ARGS=scale        # 1,000 sessions, a few minutes
    python -m benchmarks.bench_scale --sessions 1000             # the same, standalone
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):  # standalone: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MESSAGES_PER_SESSION = 500
DEFAULT_SESSIONS = 10_000
MEMORY_LIMIT = "1GB"
CONCURRENCY = 2


def peak_rss_mb() -> float:
    """The process's peak resident set so far (ru_maxrss is in kB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _sessions_wanted(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="bench_scale")
    parser.add_argument(
        "--sessions",
        type=int,
        default=None,
        help=f"sessions to generate [default: $BENCH_SCALE_SESSIONS, else {DEFAULT_SESSIONS}]",
    )
    args = parser.parse_args(argv or [])
    if args.sessions:
        return args.sessions
    return int(os.environ.get("BENCH_SCALE_SESSIONS") or DEFAULT_SESSIONS)


def run(argv: list[str] | None = None) -> None:
    os.environ.setdefault("WORKBENCH_MEMORY_LIMIT", MEMORY_LIMIT)
    from workbench import access, synthetic
    from workbench.experiments import run_experiment
    from workbench.store import Store

    sessions = _sessions_wanted(argv)
    messages = sessions * MESSAGES_PER_SESSION
    print(
        f"{sessions} sessions, {messages} messages; DuckDB memory_limit={os.environ['WORKBENCH_MEMORY_LIMIT']}; "
        f"peak RSS at start {peak_rss_mb():.0f} MB",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
        db_path = str(Path(folder) / "scale.duckdb")
        started = time.perf_counter()
        with Store(db_path) as store:
            report = synthetic.generate_dataset(store, sessions, messages)
        imported_s = time.perf_counter() - started
        import_rss = peak_rss_mb()
        with Store(db_path, read_only=True) as store:  # after the import: the scan fills DuckDB's cache
            text_bytes = store.connection.execute(
                "SELECT sum(coalesce(strlen(content), 0) + coalesce(strlen(parts::VARCHAR), 0) "
                "+ coalesce(strlen(tool_calls::VARCHAR), 0)) FROM messages"
            ).fetchall()[0][0]
        size_mb = os.path.getsize(db_path) / 1e6
        print(
            f"generate + import: {report.messages} messages in {imported_s:.1f} s = "
            f"{report.messages / imported_s:,.0f} messages/s ({report.sessions / imported_s:,.1f} sessions/s); "
            f"text {text_bytes / 1e6:,.0f} MB, file {size_mb:,.0f} MB; peak RSS {import_rss:.0f} MB",
            flush=True,
        )

        with Store(db_path, read_only=True) as store:
            started = time.perf_counter()
            rows = store.session_rows()
            list_s = time.perf_counter() - started
            started = time.perf_counter()
            filtered = store.session_rows(where="calls >= 250 AND metadata->>'agent' = 'claude-code'")
            filter_s = time.perf_counter() - started
            middle = rows[len(rows) // 2]["id"]
            started = time.perf_counter()
            loaded = store.load_session(middle)
            load_s = time.perf_counter() - started
        started = time.perf_counter()
        one = access.session(middle, db=db_path)
        open_s = time.perf_counter() - started
        assert one.messages == loaded.messages
        print(
            f"list {len(rows)} sessions: {list_s * 1000:.0f} ms; filter ({len(filtered)} match): "
            f"{filter_s * 1000:.0f} ms; load one ({len(one.messages)} messages): {load_s * 1000:.0f} ms, "
            f"wb.session (opening the database too): {open_s * 1000:.0f} ms; peak RSS {peak_rss_mb():.0f} MB",
            flush=True,
        )
        del one, loaded, rows, filtered

        spec = {
            "name": "scale",
            "dataset": synthetic.DEFAULT_DATASET,
            "concurrency": CONCURRENCY,
            "config": [
                {"name": "window", "preset": "gent-sliding-window", "tokenizer": "heuristic", "context_limit": 32_000}
            ],
        }
        started = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            result = run_experiment(spec, db=db_path)
        run_s = time.perf_counter() - started
        failures = Counter(str(w.message).split(": ", 1)[-1][:160] for w in caught if "failed" in str(w.message))
        for message, count in failures.most_common(5):
            print(f"  {count} × {message}")
        cells = result.progress.cells_done
        print(
            f"one-config experiment: {cells} cells in {run_s:.1f} s = {cells / run_s:.1f} cells/s "
            f"({report.messages / run_s:,.0f} messages/s replayed), status {result.status} "
            f"({result.progress.failed_cells} failed cells); "
            f"peak RSS {peak_rss_mb():.0f} MB",
            flush=True,
        )
    peak = peak_rss_mb()
    print(
        f"peak RSS {peak:.0f} MB for {text_bytes / 1e6:,.0f} MB of message text: "
        f"RSS / text = {peak * 1e6 / max(1, text_bytes):.2f}"
    )


if __name__ == "__main__":
    run(sys.argv[1:])
