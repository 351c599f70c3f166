"""Quality benchmark: the cost of the offline quality metrics as a ratio to the replay alone.

On the largest shared Claude Code recording (by calls; a generated stand-in when absent), for a
few configurations: replay time and the time of the offline quality metrics (fact retention,
needed-fact retention, dangling references, probe answerability, run values and per-compaction
columns) on its result.
- cold: fresh copies of the messages and the process-wide caches cleared (the quality module's, and
  the offline summarizer's memo of terms), so the replay counts every token and summarizes from
  scratch, and the metrics extract every fact and build the session's fact index (both are then
  cached on the messages / the session, as token counts are);
- warm: a second replay of the same messages, as every configuration after the first of an
  experiment grid runs: token counts, facts and the session's fact index are reused, the
  compaction accounting, dangling walk and probes are computed afresh for the new result;
- grid: the configurations one after the other on fresh copies, as an experiment runs them on
  one session (the first cold, the others warm), replay and quality times each summed.
Each figure is the best of several runs (the machine is shared; more runs for the sub-millisecond
warm ones). The replay counts tokens on every core (tiktoken releases the interpreter lock); fact
extraction is pure-Python regular-expression work, which runs on one. So the cold and grid figures
are given twice: with the replay on every core (wall time, as a user waits), and with the replay
counting on one thread (`tokens.set_counting_threads(1)`), where wall time is the work each side
does; `(cpu)` is the ratio in CPU time with every core, which overstates the replay's work by what
its counting threads spend on coordination.
Goal: quality / replay <= 1.0 (quality at most doubles the work), read on one thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.bench_replay import SHARED, fresh_copy, generate_session
from workbench.extractive import clear_caches as clear_summarizer_caches
from workbench.quality.facts import clear_process_caches
from workbench.quality.probes import ProbeAnswerable
from workbench.quality.retention import DanglingReferences, FactRetention, NeededFactRetention
from workbench.replay import replay
from workbench.session import Session
from workbench.tokens import get_tokenizer, set_counting_threads, usable_cpus  # the cores the replay counts tokens on

TOKENIZER = "cl100k_base"
METRICS = (FactRetention, NeededFactRetention, DanglingReferences, ProbeAnswerable)
CONFIGS: dict[str, dict[str, Any]] = {
    "window-20": {
        "trigger": {"kind": "utilization", "ratio": 0.8},
        "strategy": {"kind": "sliding_window", "window": 20},
    },
    "split-0.4": {
        "trigger": {"kind": "utilization", "ratio": 0.8},
        "strategy": {"kind": "summarize_split", "preserve": 0.4},
    },
    "masking-10": {
        "trigger": {"kind": "utilization", "ratio": 0.6},
        "strategy": {"kind": "observation_masking", "keep_recent": 10},
    },
}


def largest_session() -> tuple[str, Session]:
    if SHARED.is_dir():
        from workbench.importers import load

        sessions = sorted(load(SHARED), key=lambda s: (s.calls, len(s.messages)), reverse=True)
        if sessions:
            return "claude-code", sessions[0]
    return "generated-300", generate_session(300)


def _quality(result: Any, metrics: list[Any]) -> tuple[float, float]:
    """(wall, CPU) seconds of the offline quality metrics on a result."""
    started, cpu = time.perf_counter(), time.process_time()
    for metric in metrics:
        metric.compute(result)
        per_compaction = getattr(metric, "per_compaction", None)
        if per_compaction is not None:
            per_compaction(result)
    return time.perf_counter() - started, time.process_time() - cpu


def _timed_replay(session: Session, config: dict[str, Any]) -> tuple[Any, tuple[float, float]]:
    """The result and the (wall, CPU) seconds of the replay (CPU counts every thread: tiktoken counts
    large batches on every core, fact extraction runs on one)."""
    started, cpu = time.perf_counter(), time.process_time()
    result = replay(session, config, measure=False)  # the replay alone: quality is timed on its own
    return result, (time.perf_counter() - started, time.process_time() - cpu)


def _cold() -> None:
    clear_process_caches()
    clear_summarizer_caches()


def _grid(session: Session, configs: list[dict[str, Any]], metrics: list[Any]) -> tuple[tuple[float, float], ...]:
    """(wall, CPU) seconds of the replays and of the quality metrics of every config in a row, from cold."""
    cold = fresh_copy(session)
    _cold()
    replays, quality = [0.0, 0.0], [0.0, 0.0]
    for config in configs:
        result, replay_times = _timed_replay(cold, config)
        quality_times = _quality(result, metrics)
        for total, times in ((replays, replay_times), (quality, quality_times)):
            total[0] += times[0]
            total[1] += times[1]
    return (replays[0], replays[1]), (quality[0], quality[1])


def _cold_runs(
    session: Session, config: dict[str, Any], metrics: list[Any], repeats: int, threads: int | None
) -> tuple[Session, Any, list[tuple[tuple[float, float], tuple[float, float]]]]:
    """The last run's copy of the session (its caches filled) and result, and the ((wall, CPU) of the
    replay, (wall, CPU) of the quality) of each cold run, the replay counting tokens on `threads`
    threads (None: every core)."""
    runs = []
    with _counting_on(threads):
        for _ in range(repeats):
            cold = fresh_copy(session)
            _cold()
            result, replay_times = _timed_replay(cold, config)
            runs.append((replay_times, _quality(result, metrics)))
    return cold, result, runs


@contextmanager
def _counting_on(threads: int | None) -> Iterator[None]:
    """The replay counts tokens on `threads` threads (None: every core) within the block."""
    set_counting_threads(threads)
    try:
        yield
    finally:
        set_counting_threads(None)


def run(repeats: int = 5, warm_repeats: int = 20) -> None:
    label, session = largest_session()
    get_tokenizer(TOKENIZER).count("warm up")
    metrics = [metric() for metric in METRICS]  # built (and validated by the registry) once, outside the timings
    window = {"tokenizer": TOKENIZER, "context_limit": 64_000, "max_output": 8_000}
    configs = {name: window | spec for name, spec in CONFIGS.items()}
    for config in configs.values():  # load the summarizer's provider (litellm) outside the timings
        _timed_replay(fresh_copy(session), config)
    size_mb = sum(len(m.text) for m in session.messages) / 1e6
    print(
        f"{label}: {session.calls} calls, {len(session.messages)} messages, {size_mb:.1f} MB of text; "
        f"tokenizer {TOKENIZER}; {usable_cpus()} cores; best of {repeats} ({warm_repeats} warm); "
        f"goal: quality / replay <= 1.0"
    )
    print(f"{'':<23} {'every core':^33}  {'one thread':^20}  {'warm':^33}")
    print(
        f"{'config':<11} {'compactions':>11} {'replay':>8} {'quality':>8} {'ratio':>6} {'(cpu)':>6}  "
        f"{'replay':>8} {'quality':>8} {'ratio':>6}  {'replay':>9} {'quality':>9} {'ratio':>6}"
    )
    for name, config in configs.items():
        _, _, cold_runs = _cold_runs(session, config, metrics, repeats, None)
        warmed, result, single_runs = _cold_runs(session, config, metrics, repeats, 1)
        cold_replay, cold_quality = min(r[0] for r, _ in cold_runs), min(q[0] for _, q in cold_runs)
        cpu_ratio = min(q[1] for _, q in cold_runs) / min(r[1] for r, _ in cold_runs)
        single_replay, single_quality = min(r[0] for r, _ in single_runs), min(q[0] for _, q in single_runs)
        warm_runs = []
        for _ in range(warm_repeats):
            again, replay_times = _timed_replay(warmed, config)
            warm_runs.append((replay_times, _quality(again, metrics)))
        warm_replay, warm_quality = min(r[0] for r, _ in warm_runs), min(q[0] for _, q in warm_runs)
        print(
            f"{name:<11} {len(result.compactions):>11} {cold_replay * 1e3:>6.1f}ms {cold_quality * 1e3:>6.1f}ms "
            f"{cold_quality / cold_replay:>6.2f} {cpu_ratio:>6.2f}  {single_replay * 1e3:>6.1f}ms "
            f"{single_quality * 1e3:>6.1f}ms {single_quality / single_replay:>6.2f}  {warm_replay * 1e3:>7.2f}ms "
            f"{warm_quality * 1e3:>7.2f}ms {warm_quality / warm_replay:>6.2f}",
            flush=True,
        )
    every = [_grid(session, list(configs.values()), metrics) for _ in range(repeats)]
    with _counting_on(1):
        single = [_grid(session, list(configs.values()), metrics) for _ in range(repeats)]
    replay_wall, replay_cpu = min(g[0][0] for g in every), min(g[0][1] for g in every)
    quality_wall, quality_cpu = min(g[1][0] for g in every), min(g[1][1] for g in every)
    single_replay, single_quality = min(g[0][0] for g in single), min(g[1][0] for g in single)
    print(
        f"{'grid':<11} {'':>11} {replay_wall * 1e3:>6.1f}ms {quality_wall * 1e3:>6.1f}ms "
        f"{quality_wall / replay_wall:>6.2f} {quality_cpu / replay_cpu:>6.2f}  {single_replay * 1e3:>6.1f}ms "
        f"{single_quality * 1e3:>6.1f}ms {single_quality / single_replay:>6.2f}  "
        f"({len(configs)} configs in a row on one session, from cold)"
    )


if __name__ == "__main__":
    run()
