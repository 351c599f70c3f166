"""`python -m benchmarks [NAME...]`: run every benchmark (or the named ones) and print its figures."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path


def available() -> list[str]:
    folder = Path(__file__).parent
    return sorted(
        m.name.removeprefix("bench_") for m in pkgutil.iter_modules([str(folder)]) if m.name.startswith("bench_")
    )


def main(argv: list[str]) -> int:
    names = argv or available()
    unknown = [n for n in names if n not in available()]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available())}", file=sys.stderr)
        return 2
    for name in names:
        print(f"== {name} ==", flush=True)
        started = time.perf_counter()
        importlib.import_module(f"benchmarks.bench_{name}").run()
        print(f"({name} took {time.perf_counter() - started:.1f} s)\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
