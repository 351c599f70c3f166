"""The shipped experiments run offline on the bundled samples and pass against their shipped baselines."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from workbench.cli.data import init_database
from workbench.experiments import load_experiment, regress, run_experiment

pytestmark = pytest.mark.slow  # the shipped specs run in full on the samples


EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
SHIPPED = sorted(EXPERIMENTS.glob("*.toml"))
#: The specs over the bundled samples; the others name a corpus (their baselines are checked on it).
ON_SAMPLES = [p for p in SHIPPED if load_experiment(p).datasets == ("samples",)]
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "mini-swe-agent-gemini3"


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
    assert names == [
        "no-compaction",
        "as-recorded",
        "observation-masking",
        "gent-sliding-window",
        "gent-progressive-summary",
        "agent001-full-summary",
        "goat-split-summary",
        "aisopod-guard",
        "ptc-runner-trim",
    ]


@pytest.mark.parametrize("spec", ON_SAMPLES, ids=lambda p: p.stem)
def test_shipped_experiment_passes_its_baseline(spec, samples_db):
    report = regress(spec, db=samples_db)
    assert report.ok, report.text()
    assert report.diffs


def test_a_second_run_of_reference_designs_reuses_every_cell(samples_db):
    spec = EXPERIMENTS / "reference-designs.toml"
    first = run_experiment(spec, db=samples_db)  # computes the cells unless a test before it did
    run = run_experiment(spec, db=samples_db)
    assert run.id == first.id
    assert run.progress.cells_reused == run.progress.cells_total == 108
    assert run.progress.model_calls == 0


COMPLETED_SHARE = 0.9


@pytest.mark.parametrize("spec", SHIPPED, ids=lambda p: p.stem)
def test_every_config_of_a_shipped_spec_completes_on_the_samples(spec, samples_db):
    """At its stated window, on a fresh `workbench init`: a config that stops early on the samples
    would rank on fewer calls. A spec written for another dataset (a corpus) runs on the samples."""
    raw = tomllib.loads(spec.read_text(encoding="utf-8"))
    if spec not in ON_SAMPLES:
        raw.pop("datasets", None)
        raw["dataset"] = "samples"
    results = run_experiment(raw, db=samples_db).results  # a spec on the samples: its baseline test's run
    completed = results.groupby("config")["termination"].apply(lambda t: (t == "completed").mean())
    assert len(completed) == len(load_experiment(raw).configs)
    assert (completed >= COMPLETED_SHARE).all(), completed[completed < COMPLETED_SHARE].to_dict()


def test_the_samples_record_compactions_that_as_recorded_replays(samples_db):
    results = run_experiment(EXPERIMENTS / "reference-designs.toml", db=samples_db).results
    by_config = results.groupby("config")["compactions"].apply(lambda c: int((c > 0).sum()))
    assert by_config["as-recorded"] >= 6
    assert by_config["no-compaction"] == 0


@pytest.fixture(scope="module")
def corpus_db(tmp_path_factory) -> str:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpora is not present")
    from workbench.store import Store

    path = str(tmp_path_factory.mktemp("corpus") / "corpus.duckdb")
    with Store(path) as store:
        store.import_paths([str(CORPUS / "trajs")], dataset="swe-gemini3", outcomes=str(CORPUS / "results_summary.csv"))
    return path


def _readme_reductions() -> dict[str, tuple[str, str]]:
    """The README's measured Complexity Trap table: policy -> (input reduction, cost reduction)."""
    readme = (EXPERIMENTS.parent / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| policy | input tokens / session |") :].split("\n\n")[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    return {row[0].lower().replace(" ", "-"): (row[2], row[4]) for row in rows}


@pytest.mark.shared
@pytest.mark.slow
def test_the_complexity_trap_on_the_corpus_prints_the_readme_table_and_passes_its_baseline(corpus_db):
    """`workbench run experiments/complexity-trap.toml` on the corpus gives the reductions the README shows."""
    import json

    from click.testing import CliRunner

    from workbench.cli import main

    out = CliRunner().invoke(main, ["run", str(EXPERIMENTS / "complexity-trap.toml"), "--db", corpus_db, "--json"])
    assert out.exit_code == 0, out.output
    measured = {r["config"]: r for r in json.loads(out.stdout)["reductions"] if r["group"] == "all"}
    expected = _readme_reductions()
    assert set(expected) == {"raw-agent", "observation-masking", "llm-summary", "hybrid"} == set(measured)
    for config, (input_reduction, cost_reduction) in expected.items():
        if config == "raw-agent":
            continue
        assert f"{100 * measured[config]['input_reduction']:.1f} %" == input_reduction, config
        assert f"{100 * measured[config]['cost_reduction']:.1f} %" == cost_reduction, config
    report = regress(EXPERIMENTS / "complexity-trap.toml", db=corpus_db)
    assert report.ok, report.text()


@pytest.mark.shared
@pytest.mark.slow
def test_on_the_corpus_measures_read_back_are_those_measuring_again_gives_cell_by_cell(corpus_db):
    """A fresh run reads back the quality measures of every replay measured before; measured again
    (`remeasure=True`), every stored level of every cell is the same."""
    from run_support import stored_levels

    spec = EXPERIMENTS / "complexity-trap.toml"
    first = run_experiment(spec, db=corpus_db)  # resumes the run of the test above when it ran
    compacted = int((first.results["compactions"] > 0).sum())
    reread = run_experiment(spec, db=corpus_db, fresh=True)
    assert reread.progress.measures_reused == compacted > 100
    remeasured = run_experiment(spec, db=corpus_db, fresh=True, remeasure=True)
    assert remeasured.progress.measures_reused == 0
    assert stored_levels(Path(corpus_db), remeasured.id) == stored_levels(Path(corpus_db), reread.id)
