"""Experiments: grids of replay configurations over datasets, stored runs, comparisons, exports, regression.

See DESIGN §9.
- `load_experiment(path)`: validate and expand a spec (`experiments/*.toml`);
- `run_experiment(spec, db=None)`: run or resume it (`Run.id`, `Run.results`);
- `results(run_id)`, `runs()`: stored results as DataFrames; `delete_runs(ids)` removes runs;
- `compare(run_a, run_b=None, configs=None)`: paired comparison with a confidence interval;
- `export(run_id, format, path)`: csv, parquet, json or a self-contained HTML report;
- `regress(path, baseline=None)`: a fresh run against the stored baseline.
"""

from workbench.experiments.compare import Comparison, MetricComparison, compare, compare_frames
from workbench.experiments.export import export
from workbench.experiments.process_executor import ProcessExecutor
from workbench.experiments.regress import RegressionReport, regress
from workbench.experiments.run import (
    CellTask,
    Executor,
    LocalExecutor,
    Run,
    RunProgress,
    delete_runs,
    dry_run,
    results,
    run_experiment,
    runs,
    save_replay,
)
from workbench.experiments.spec import ConfigCell, ExperimentSpec, Tolerance, grid, load_experiment, parse_tolerance

__all__ = [
    "CellTask",
    "Comparison",
    "ConfigCell",
    "Executor",
    "ExperimentSpec",
    "LocalExecutor",
    "MetricComparison",
    "ProcessExecutor",
    "RegressionReport",
    "Run",
    "RunProgress",
    "Tolerance",
    "compare",
    "compare_frames",
    "delete_runs",
    "dry_run",
    "export",
    "grid",
    "load_experiment",
    "parse_tolerance",
    "regress",
    "results",
    "run_experiment",
    "runs",
    "save_replay",
]
