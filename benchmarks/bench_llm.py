"""LLM gateway benchmark: 400 summarization calls to a local OpenAI-compatible server (200 ms latency).

(a) uncached, concurrency 32: wall time against the ideal calls x latency / concurrency — goal
    ideal/achieved >= 0.8, the median of `RUNS` runs. Measured from 32 worker threads (`complete`,
    the path replays use) and from asyncio (`acomplete`), alternately; each run uses its own
    requests, so every one reaches the server;
(b) the cached re-run, through a freshly reopened DuckDB cache (as a new process would): new
    server requests — goal 0 — and its wall time over the uncached run's — goal <= 0.05; as
    batches (one cache query) and as single `complete` calls from 32 threads (as replays make them).

The server runs in a child process (`FakeOpenAIProcess`), as a real provider would: in a thread
of this process it would compete with the client for the GIL.
Run: `python -m benchmarks llm` or `python benchmarks/bench_llm.py`.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if __package__ in (None, ""):  # standalone: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.llm import Gateway, load_litellm
from workbench.store import DuckDBCache
from workbench.testing import FakeOpenAIProcess

CALLS = 400
LATENCY = 0.2
CONCURRENCY = 32
RUNS = 5
GOAL = 0.8
MODEL = "openai/gpt-4o-mini"  # priced in LiteLLM's local price map
SYSTEM = "You summarize coding-agent transcripts: keep file paths, decisions, errors and open tasks."


def _batch(tag: str) -> list[list[dict[str, str]]]:
    batch = []
    for i in range(CALLS):
        transcript = " ".join(f"step {j}: edited src/module_{i}_{j}.py, ran tests ({j} failed)." for j in range(12))
        batch.append(
            [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"<transcript>[{tag} #{i}] {transcript}</transcript>"},
            ]
        )
    return batch


def _options(server: FakeOpenAIProcess) -> dict:
    return {
        "api_base": server.api_base,
        "api_key": "sk-bench-dummy",
        "concurrency": CONCURRENCY,
        "temperature": 0,
        "max_tokens": 256,
        "timeout": 30,
    }


def _timed(fn):
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def run() -> None:
    _, load_s = _timed(load_litellm)
    ideal = CALLS * LATENCY / CONCURRENCY
    with tempfile.TemporaryDirectory() as folder, FakeOpenAIProcess(latency=LATENCY) as server:
        db_path = Path(folder) / "bench.duckdb"

        gateway = Gateway(DuckDBCache(db_path))
        model = gateway.model(MODEL, _options(server))
        model.complete([{"role": "user", "content": "warm-up (sync)"}])
        asyncio.run(model.acomplete([{"role": "user", "content": "warm-up (async)"}]))
        before = server.request_count

        threads_runs, async_runs = [], []
        for attempt in range(RUNS):
            threads_batch, async_batch = _batch(f"threads-{attempt}"), _batch(f"async-{attempt}")
            results, seconds = _timed(lambda batch=threads_batch: model.complete_many(batch, max_workers=CONCURRENCY))
            assert all(not r.cache_hit for r in results)
            threads_runs.append(seconds)
            async_results, seconds = _timed(lambda batch=async_batch: asyncio.run(model.acomplete_many(batch)))
            assert all(not r.cache_hit for r in async_results)
            async_runs.append(seconds)
        threads_s, async_s = statistics.median(threads_runs), statistics.median(async_runs)
        uncached_requests = server.request_count - before
        peak = server.max_in_flight
        spent = gateway.stats.cost_usd
        gateway.close()

        # the re-run: a new gateway on the reopened database file
        gateway = Gateway(DuckDBCache(db_path))
        model = gateway.model(MODEL, _options(server))
        before = server.request_count
        rerun, rerun_threads_s = _timed(lambda: model.complete_many(threads_batch, max_workers=CONCURRENCY))
        gateway.close()  # again from a reopened file, one `complete` per call as replays make them
        gateway = Gateway(DuckDBCache(db_path))
        model = gateway.model(MODEL, _options(server))
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            single, rerun_single_s = _timed(lambda: list(pool.map(model.complete, threads_batch)))
        assert all(r.cache_hit for r in single)
        rerun_async, rerun_async_s = _timed(lambda: asyncio.run(model.acomplete_many(async_batch)))
        new_requests = server.request_count - before
        assert all(r.cache_hit for r in rerun + rerun_async)
        assert [r.text for r in rerun] == [r.text for r in results]
        rerun_spent = gateway.stats.cost_usd
        gateway.close()

    print(f"litellm import: {load_s:.2f} s (once per process, lazily)")
    print(
        f"calls per run: {CALLS} at {LATENCY * 1000:.0f} ms latency, concurrency {CONCURRENCY}; "
        f"ideal wall: {ideal:.2f} s; server peak in-flight: {peak} (bound {CONCURRENCY})"
    )
    for label, median, runs in (
        ("32 threads (complete)", threads_s, threads_runs),
        ("asyncio (acomplete)", async_s, async_runs),
    ):
        verdict = "OK" if ideal / median >= GOAL else "BELOW GOAL"
        print(
            f"uncached, {label}: median {median:.2f} s of {', '.join(f'{r:.2f}' for r in runs)}; "
            f"ideal/achieved {ideal / median:.2f} (goal >= {GOAL}) {verdict}"
        )
    print(
        f"uncached requests reaching the server: {uncached_requests} (expected {2 * CALLS * RUNS}); "
        f"cost ${spent:.4f} (gpt-4o-mini prices)"
    )
    print(f"cached re-run new server requests: {new_requests} (goal 0); cost ${rerun_spent:.4f} (goal 0)")
    print(
        f"cached re-run, threads: {rerun_threads_s:.3f} s, ratio to uncached {rerun_threads_s / threads_s:.3f} "
        f"(goal <= 0.05)"
    )
    print(
        f"cached re-run, single complete() calls from {CONCURRENCY} threads: {rerun_single_s:.3f} s, "
        f"ratio to uncached {rerun_single_s / threads_s:.3f} (goal <= 0.05)"
    )
    print(
        f"cached re-run, asyncio: {rerun_async_s:.3f} s, ratio to uncached {rerun_async_s / async_s:.3f} (goal <= 0.05)"
    )


OFFLINE_CALLS = 200


def run_offline() -> None:
    """The offline summarizer's calls (`workbench/extractive`, uncached): in process, as the gateway
    makes them, against the same requests through LiteLLM's custom provider, with the summarizer's
    memo warm in both, so that the difference is the per-call overhead."""
    from workbench.extractive import MODEL_STRING, clear_caches
    from workbench.llm.cache import MemoryCache

    load_litellm()
    batch = _batch("offline")[:OFFLINE_CALLS]
    clear_caches()
    for messages in batch:  # fills the summarizer's memo
        Gateway(MemoryCache()).model(MODEL_STRING).complete(messages)
    timings = {}
    for in_process in (False, True):
        model = Gateway(MemoryCache()).model(MODEL_STRING)
        model.in_process = in_process
        _, timings[in_process] = _timed(lambda m=model: [m.complete(messages) for messages in batch])
    per_call = {k: v / len(batch) * 1000 for k, v in timings.items()}
    print(
        f"offline summarizer, {len(batch)} uncached calls: through LiteLLM {per_call[False]:.2f} ms/call, "
        f"in process {per_call[True]:.2f} ms/call ({per_call[False] - per_call[True]:.2f} ms/call saved)"
    )


if __name__ == "__main__":
    run()
    run_offline()
