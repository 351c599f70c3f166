"""The `workbench_regress` pytest fixture: keep summary regressions in your own test suite.

Installed with the workbench (entry point group `pytest11`), so in any project:

    def test_summaries_do_not_regress(workbench_regress):
        workbench_regress("experiments/my-policy.toml", db="data/workbench.duckdb")

The call runs the experiment (resuming its stored run; model calls come from the cache) and fails
the test with the readable report when a tolerance is broken or a summary snapshot changed.
Set `WORKBENCH_REGRESS_UPDATE=1` to rewrite the baselines instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def workbench_regress() -> Callable[..., Any]:
    """A function `(spec, baseline=None, db=None) -> RegressionReport` that fails the test on regression."""

    def check(spec: Any, baseline: Any = None, db: Any = None, **options: Any) -> Any:
        from workbench.experiments.regress import regress

        update = os.environ.get("WORKBENCH_REGRESS_UPDATE", "") not in ("", "0", "false")
        report = regress(spec, baseline=baseline, db=None if db is None else str(db), update=update, **options)
        if not report.ok:
            pytest.fail(report.text(), pytrace=False)
        return report

    return check
