"""Ingest benchmark: a ~100 MB OpenAI-format JSONL (one `{"messages": [...]}` session per line,
tool-heavy coding-agent sessions from `workbench.samples`) imported

(a) by the workbench (`Store.import_paths`: the file read in parts by worker processes, one per core
    (`workbench.store.import_workers`), merged into batched inserts) into an on-disk database, and
(b) by DuckDB's own `read_json_auto` into an on-disk table,

printing both rates in MB/s, their ratio (goal >= 0.5: the median of `RUNS` pairs of runs, each pair
run back to back so both sides meet the same load), the workbench database's size over the file's
(goal <= 1.0) and the peak RSS growth during (a) (goal: bounded, i.e. well under the file size,
because the import streams in batches), with the workers' own peak RSS. The first run also starts the
worker processes (the median is of runs that find them ready, as a process's later imports do); its
time is printed, and so is one import read in the importing process alone (`import_workers=1`).

    python -m benchmarks ingest        # or: python benchmarks/bench_ingest.py [--mb 100]
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `workbench` importable from the repo
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench import samples
from workbench.store import Store
from workbench.store.import_workers import worker_pids

TARGET_MB = 100
RUNS = 5
GOAL_RATIO = 0.5
GOAL_SIZE_RATIO = 1.0  # each message's content stored once, compressed
CAPPED = "128MB"
POOL_CALLS = (20, 35, 60, 90, 130, 180, 240, 320, 400, 50, 110, 260)
MARKER = "\u2063BENCH-MARKER\u2063"


def write_jsonl(path: Path, target_bytes: int, seed: int = 4242) -> tuple[int, int]:
    """Write OpenAI JSONL sessions until `target_bytes`; returns (sessions, messages).

    A pool of generated sessions is serialised once; each line gets a unique request number in
    its first user message, so every line is a distinct session (distinct content id).
    """
    templates: list[tuple[str, int]] = []
    for i, calls in enumerate(POOL_CALLS):
        session = samples.generate_session(seed + i, calls, dataset="bench")
        messages = [m.to_openai() for m in session.messages]
        first_user = next(m for m in messages if m["role"] == "user")
        first_user["content"] = f"[request {MARKER}] " + first_user["content"]
        templates.append((json.dumps({"messages": messages}, ensure_ascii=False), len(messages)))
    written = sessions = message_count = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target_bytes:
            template, count = templates[sessions % len(templates)]
            line = template.replace(MARKER, f"#{sessions:06d}", 1) + "\n"
            out.write(line)
            written += len(line.encode("utf-8"))
            sessions += 1
            message_count += count
    return sessions, message_count


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):  # not Linux: ru_maxrss only
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakRss:
    """Samples the process RSS every few milliseconds while active; `growth` is peak - start."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.start = self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_bytes())
            time.sleep(self.interval)

    def __enter__(self) -> PeakRss:
        gc.collect()
        self.start = self.peak = _rss_bytes()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())

    @property
    def growth(self) -> int:
        return self.peak - self.start


def _size(db_path: Path) -> int:
    return sum(p.stat().st_size for p in (db_path, db_path.with_name(db_path.name + ".wal")) if p.exists())


def _remove(db_path: Path) -> None:
    for path in (db_path, db_path.with_name(db_path.name + ".wal")):
        path.unlink(missing_ok=True)


def workbench_import(
    source: Path, db_path: Path, memory_limit: str | None = None, workers: int | None = None
) -> tuple[float, int, int, int, int]:
    """(seconds, sessions, messages, peak RSS growth, DuckDB's own memory at the end; bytes) of
    the workbench import into a fresh database."""
    _remove(db_path)
    with PeakRss() as rss:
        started = time.perf_counter()
        with Store(db_path, memory_limit=memory_limit, import_workers=workers) as store:
            report = store.import_paths([source], format="auto", dataset="bench")
            seconds = time.perf_counter() - started
            duck = store.connection.execute(
                "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory()"
            ).fetchall()[0][0]
    if report.errors:
        raise RuntimeError(f"the workbench import failed: {report.errors[0].error}")
    return seconds, report.sessions, report.messages, rss.growth, int(duck)


def duckdb_import(source: Path, db_path: Path) -> tuple[float, int]:
    """(seconds, rows) of DuckDB's `read_json_auto` into an on-disk table."""
    import duckdb

    _remove(db_path)
    started = time.perf_counter()
    con = duckdb.connect(str(db_path))
    con.execute("CREATE TABLE sessions AS SELECT * FROM read_json_auto(?, format = 'newline_delimited')", [str(source)])
    rows = con.execute("SELECT count(*) FROM sessions").fetchall()[0][0]
    con.close()
    return time.perf_counter() - started, rows


def run(target_mb: float | None = None, repeat: int = RUNS) -> None:
    """Generate the file, then time each import `repeat` times (alternating) and print the median
    ratio: on a shared 2-core machine single timings vary by tens of percent. The size defaults to
    $BENCH_INGEST_MB, else TARGET_MB."""
    if target_mb is None:
        target_mb = float(os.environ.get("BENCH_INGEST_MB") or TARGET_MB)
    with tempfile.TemporaryDirectory(prefix="wb-bench-ingest-") as tmp:
        folder = Path(tmp)
        source = folder / "sessions.jsonl"
        started = time.perf_counter()
        n_sessions, n_messages = write_jsonl(source, int(target_mb * 1e6))
        size_mb = source.stat().st_size / 1e6
        print(
            f"input: {size_mb:.1f} MB OpenAI JSONL, {n_sessions} sessions, {n_messages} messages "
            f"(generated in {time.perf_counter() - started:.1f} s)"
        )

        # Warm the page cache and the lazily imported modules so both sides start equal.
        with open(source, "rb") as handle:
            while handle.read(1 << 24):
                pass
        import pyarrow  # noqa: F401

        import workbench.importers  # noqa: F401

        alone_s, *_ = workbench_import(source, folder / "wb.duckdb", workers=1)
        first_s, *_ = workbench_import(source, folder / "wb.duckdb")  # starts the worker processes
        wb_times, db_times = [], []
        for attempt in range(max(1, repeat)):
            seconds, sessions, messages, rss_growth, duck_memory = workbench_import(source, folder / "wb.duckdb")
            if sessions != n_sessions:
                raise RuntimeError(f"the workbench imported {sessions} sessions, expected {n_sessions}")
            if attempt == 0:
                growth, duck = rss_growth, duck_memory
            wb_times.append(seconds)
            seconds, rows = duckdb_import(source, folder / "duckdb.duckdb")
            db_times.append(seconds)
        ratios = [db / wb for wb, db in zip(wb_times, db_times, strict=True)]  # workbench MB/s over DuckDB's
        ratio = statistics.median(ratios)
        wb_s, db_s = statistics.median(wb_times), statistics.median(db_times)
        wb_size, db_size = (_size(folder / name) / 1e6 for name in ("wb.duckdb", "duckdb.duckdb"))
        # Memory: DuckDB keeps written blocks in its buffer cache (up to 80 % of RAM by default), so
        # the default run's RSS grows with the data; with its cache capped, what remains is the
        # streamed import itself (batches of ~10k messages, one being built, one queued).
        capped_s, _, _, capped_growth, _ = workbench_import(source, folder / "wb.duckdb", memory_limit=CAPPED)
        wb_rate, db_rate = size_mb / wb_s, size_mb / db_s
        runs = lambda times: ", ".join(f"{t:.2f}" for t in times)
        print(
            f"workbench import:      {wb_s:6.2f} s (median)  {wb_rate:6.1f} MB/s  ({sessions} sessions, "
            f"{messages} messages; runs {runs(wb_times)} s; database {wb_size:.0f} MB)"
        )
        print(
            f"duckdb read_json_auto: {db_s:6.2f} s (median)  {db_rate:6.1f} MB/s  ({rows} rows; "
            f"runs {runs(db_times)} s; database {db_size:.0f} MB)"
        )
        verdict = "OK" if ratio >= GOAL_RATIO else "BELOW GOAL"
        print(
            f"ratio workbench/duckdb: median {ratio:.2f} of {len(ratios)} pairs "
            f"({', '.join(f'{r:.2f}' for r in ratios)}) (goal >= {GOAL_RATIO}) {verdict}"
        )
        size_ratio = wb_size / size_mb
        verdict = "OK" if size_ratio <= GOAL_SIZE_RATIO else "ABOVE GOAL"
        print(f"database size / raw files: {size_ratio:.2f} (goal <= {GOAL_SIZE_RATIO}) {verdict}")
        print(
            f"peak RSS growth during the workbench import: {growth / 1e6:.0f} MB "
            f"({growth / 1e6 / size_mb:.2f}x the file size; DuckDB's buffer cache at the end: {duck / 1e6:.0f} MB)"
        )
        print(f"  with DuckDB's cache capped (memory_limit={CAPPED}): {capped_growth / 1e6:.0f} MB ({capped_s:.2f} s)")
        peaks = [_peak_rss(pid) for pid in worker_pids()]
        print(
            f"worker processes: {len(peaks)}, peak RSS {', '.join(f'{p / 1e6:.0f}' for p in peaks)} MB; "
            "the first import "
            f"(starting them) {first_s:.2f} s; read in the importing process alone: {alone_s:.2f} s"
        )


def _peak_rss(pid: int) -> int:
    """A process's peak resident memory (bytes; 0 where /proc does not tell)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mb", type=float, default=None, help="size of the generated JSONL (MB) [default: $BENCH_INGEST_MB, else 100]"
    )
    parser.add_argument("--repeat", type=int, default=RUNS, help="timed runs of each import (the median ratio printed)")
    args = parser.parse_args()
    run(args.mb, args.repeat)
