"""Performance benchmarks. Each `bench_*.py` module has `run()`, which prints ratios against a
baseline measured in the same run (never absolute timings asserted as tests)."""
