"""The Regression page over a real database and a spec written here: pass, then a broken baseline that fails
with its failing checks first and its summary diff shown as text."""

from __future__ import annotations

import json
import re

import pytest
from app_support import HOSTILE, build_database, page_script
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.slow  # the app's Regression page (AppTest)


SPEC = """
name = "tiny-gate"
dataset = "generated"

[defaults]
context_limit = 3000
max_output = 300

[[config]]
name = "masking"
trigger = { kind = "utilization", ratio = 0.5 }
strategy = { kind = "observation_masking", keep_recent = 2 }

[regress]
billed_input_tokens = "+2%"
compactions = 0
summaries = "exact"
"""


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    """A database, a spec folder with the spec, its own baseline and a broken one."""
    from workbench.experiments import regress

    folder = tmp_path_factory.mktemp("regression")
    path = build_database(str(folder / "wb.duckdb"))
    specs = folder / "specs"
    specs.mkdir()
    spec = specs / "tiny-gate.toml"
    spec.write_text(SPEC)
    regress(str(spec), db=path, update=True)
    own = specs / "baselines" / "tiny-gate.json"
    broken = json.loads(own.read_text())
    broken["metrics"]["masking"]["generated"]["billed_input_tokens"] /= 2
    broken["summaries"] = {"masking": {"generated-12": [f"an old summary {HOSTILE}"]}}
    (specs / "baselines" / "broken.json").write_text(json.dumps(broken))
    return path, specs


def open_page(path: str, specs, monkeypatch) -> AppTest:
    monkeypatch.setenv("WORKBENCH_DB", path)
    at = AppTest.from_string(page_script("regression"), default_timeout=120)
    at.run()
    at.text_input(key="reg_folder").input(str(specs)).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def check(at: AppTest) -> None:
    """Click the check, wait for its worker (bounded), rerun until the page shows the report."""
    at.button(key="reg_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    job = at.session_state["reg_job"]
    assert job.wait(timeout=120), "the regression check did not finish"
    for _ in range(3):
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        if job.announced:
            return
    raise AssertionError("the page never showed the finished check")


def test_the_own_baseline_passes(gate, monkeypatch):
    path, specs = gate
    at = open_page(path, specs, monkeypatch)
    assert at.selectbox(key="reg_spec").value.endswith("tiny-gate.toml")
    assert at.selectbox(key="reg_baseline").value.endswith("tiny-gate.json")
    check(at)
    assert not at.error, [e.value for e in at.error]
    assert len(at.success) == 1 and at.success[0].value.startswith("PASS: tiny-gate")
    checks = at.dataframe[0].value
    assert list(checks["ok"]) == [True, True]
    assert set(checks["metric"]) == {"billed_input_tokens", "compactions"}
    assert not at.code


def test_a_broken_baseline_fails_with_failures_first_and_the_summary_diff_as_text(gate, monkeypatch):
    path, specs = gate
    at = open_page(path, specs, monkeypatch)
    at.selectbox(key="reg_baseline").set_value(str(specs / "baselines" / "broken.json")).run()
    check(at)
    assert len(at.error) == 1 and at.error[0].value.startswith("REGRESSION: tiny-gate, 1 of 2 metric checks failed")
    checks = at.dataframe[0].value
    assert list(checks["ok"]) == [False, True]
    assert list(checks["metric"]) == ["billed_input_tokens", "compactions"]
    assert len(at.code) == 1
    diff = at.code[0]
    assert diff.language == "diff"
    assert f"-an old summary {HOSTILE}" in diff.value  # the planted HTML shown literally
    assert all(HOSTILE not in m.value for m in at.markdown)


def test_a_missing_baseline_says_how_to_write_it(gate, monkeypatch, tmp_path):
    path, _ = gate
    (tmp_path / "other.toml").write_text(SPEC.replace("tiny-gate", "other-gate"))
    at = open_page(path, tmp_path, monkeypatch)
    assert any("--update" in w.value for w in at.warning)
    assert not at.button


def test_an_invalid_spec_is_a_readable_error(gate, monkeypatch, tmp_path):
    path, _ = gate
    (tmp_path / "bad.toml").write_text('name = "bad"\n[[config]]\nname = 3\n')
    monkeypatch.setenv("WORKBENCH_DB", path)
    at = AppTest.from_string(page_script("regression"), default_timeout=120)
    at.run()
    at.text_input(key="reg_folder").input(str(tmp_path)).run()
    assert not at.exception
    assert len(at.error) == 1 and at.error[0].value.startswith("The spec is not valid:")


def test_another_spec_is_checked_against_its_own_baseline_and_shows_only_its_report(gate, monkeypatch, tmp_path):
    """Picking another spec resets the baseline to that spec's own, and hides the first spec's report."""
    from workbench.experiments import regress

    path, _ = gate
    for name, config in (("alpha-gate", "masking"), ("beta-gate", "masking-b")):
        spec = tmp_path / f"{name}.toml"
        spec.write_text(SPEC.replace("tiny-gate", name).replace('name = "masking"', f'name = "{config}"'))
        regress(str(spec), db=path, update=True)
    at = open_page(path, tmp_path, monkeypatch)
    assert at.selectbox(key="reg_baseline").value.endswith("alpha-gate.json")
    check(at)
    assert at.success[0].value.startswith("PASS: alpha-gate")
    at.selectbox(key="reg_spec").set_value(str(tmp_path / "beta-gate.toml")).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="reg_baseline").value.endswith("beta-gate.json")
    assert not at.success and not at.error and not at.dataframe  # alpha's report is not beta's
    assert not at.warning
    check(at)
    assert not at.error, [e.value for e in at.error]
    assert len(at.success) == 1 and at.success[0].value.startswith("PASS: beta-gate")
    assert any("beta-gate.json" in c.value for c in at.caption), [c.value for c in at.caption]
    at.selectbox(key="reg_baseline").set_value(str(tmp_path / "baselines" / "alpha-gate.json")).run()
    assert not at.success and not at.dataframe  # a report shows only with the baseline it was made against


def test_checked_values_are_formatted_in_their_unit(gate, monkeypatch):
    """2,859 tokens and +200.0%, not 2859.3333333333335."""
    path, specs = gate
    thirds = json.loads((specs / "baselines" / "tiny-gate.json").read_text())
    thirds["metrics"]["masking"]["generated"]["billed_input_tokens"] /= 3  # a fraction of a token
    (specs / "baselines" / "thirds.json").write_text(json.dumps(thirds))
    at = open_page(path, specs, monkeypatch)
    at.selectbox(key="reg_baseline").set_value(str(specs / "baselines" / "thirds.json")).run()
    check(at)
    checks = at.dataframe[0].value.set_index("metric")
    tokens = checks.loc["billed_input_tokens"]
    assert re.fullmatch(r"\d{1,3}(,\d{3})*", tokens["baseline"]), tokens["baseline"]
    assert re.fullmatch(r"\d{1,3}(,\d{3})*", tokens["current"]), tokens["current"]
    assert re.fullmatch(r"\+\d+\.\d%", tokens["change"]), tokens["change"]
    assert re.fullmatch(r"\d+", checks.loc["compactions", "current"])  # a count, no ".0"


def test_a_run_whose_cells_failed_fails_the_check_and_says_why(gate, monkeypatch, tmp_path):
    """Failed cells are never stored, so their metrics would silently be left out: the page fails the
    check and says why."""
    from dataclasses import dataclass

    import workbench as wb

    path, specs = gate

    @dataclass(frozen=True)
    class Breaks:
        def compact(self, context, env):
            raise RuntimeError("this strategy always breaks")

    folder = tmp_path / "failing"
    (folder / "baselines").mkdir(parents=True)
    (folder / "failing-gate.toml").write_text(
        SPEC.replace("tiny-gate", "failing-gate").replace(
            'strategy = { kind = "observation_masking", keep_recent = 2 }', 'strategy = { kind = "breaks_app_test" }'
        )
    )
    (folder / "baselines" / "failing-gate.json").write_text((specs / "baselines" / "tiny-gate.json").read_text())
    wb.register_strategy("breaks_app_test")(Breaks)
    try:
        at = open_page(path, folder, monkeypatch)
        with pytest.warns(RuntimeWarning, match="always breaks"):
            check(at)
    finally:
        wb.registry.unregister("strategy", "breaks_app_test")
    shown = [e.value for e in at.error]
    assert shown[0].startswith(("FAIL: failing-gate", "REGRESSION: failing-gate")) and not at.success, shown
    assert any(re.search(r"\d+ of \d+ cells of run failing-gate-\w+ failed", text) for text in shown), shown


def test_the_page_says_how_many_cells_a_check_runs_before_it_runs(gate, monkeypatch, tmp_path):
    path, specs = gate
    fresh = tmp_path / "specs"
    fresh.mkdir()
    (fresh / "fresh-gate.toml").write_text(
        SPEC.replace('name = "tiny-gate"', 'name = "fresh-gate"').replace("keep_recent = 2", "keep_recent = 1")
    )
    (fresh / "baselines").mkdir()
    (fresh / "baselines" / "fresh-gate.json").write_text((specs / "baselines" / "tiny-gate.json").read_text())
    at = open_page(path, fresh, monkeypatch)
    planned = [c.value for c in at.caption if "cells" in c.value]
    assert planned and re.search(
        r"a check runs the spec's \d+ cells \(\d+ sessions × 1 configs × 1 repeat\): "
        r"\d+ to replay",
        planned[0],
    ), planned
    at = open_page(path, specs, monkeypatch)  # tiny-gate ran when its baseline was written
    assert any(c.value.startswith("Every cell is stored already") for c in at.caption), [c.value for c in at.caption]
