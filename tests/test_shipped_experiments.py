"""The shipped experiments run offline on the bundled samples and pass against their shipped baselines."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.cli.data import init_database
from workbench.experiments import load_experiment, regress, run_experiment

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
SHIPPED = sorted(EXPERIMENTS.glob("*.toml"))


@pytest.fixture(scope="module")
def samples_db(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("shipped") / "samples.duckdb")
    init_database(path)
    return path


def test_there_are_the_three_shipped_experiments_with_baselines():
    assert {p.stem for p in SHIPPED} >= {"reference-designs", "window-sweep", "threshold-sweep"}
    for spec in SHIPPED:
        assert (EXPERIMENTS / "baselines" / f"{load_experiment(spec).name}.json").is_file()


def test_reference_designs_has_one_config_per_design_plus_recorded_and_masking():
    names = load_experiment(EXPERIMENTS / "reference-designs.toml").config_names
    assert names == ["no-compaction", "as-recorded", "observation-masking", "gent-sliding-window",
                     "gent-progressive-summary", "agent001-full-summary", "goat-split-summary", "aisopod-guard",
                     "ptc-runner-trim"]


@pytest.mark.parametrize("spec", SHIPPED, ids=lambda p: p.stem)
def test_shipped_experiment_passes_its_baseline(spec, samples_db):
    report = regress(spec, db=samples_db)
    assert report.ok, report.text()
    assert report.diffs


def test_a_second_run_of_reference_designs_reuses_every_cell(samples_db):
    spec = EXPERIMENTS / "reference-designs.toml"
    run = run_experiment(spec, db=samples_db)
    assert run.progress.cells_reused == run.progress.cells_total == 108
    assert run.progress.model_calls == 0
