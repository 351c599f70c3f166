"""The HTML report renders its charts in headless Chromium and makes no network request."""

from __future__ import annotations

import pytest

from workbench.experiments import export, run_experiment

pytestmark = pytest.mark.slow  # the HTML report in headless Chromium: `make test-fast` leaves it out


def test_the_html_report_draws_its_charts_offline(grid_db, chromium, tmp_path):
    db, spec, _ = grid_db
    run = run_experiment(spec, db=str(db))
    report = export(run.id, "html", tmp_path / "report.html", db=str(db))
    page = chromium.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(report.as_uri())
    page.wait_for_selector(".js-plotly-plot .scatterlayer .trace", timeout=30_000)
    plots = page.locator(".js-plotly-plot").count()
    token_curves = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')]
        .filter(p => (p.layout.title.text || '').startsWith('session'))
        .map(p => p.data.filter(t => t.mode === 'lines').map(t => t.name))""")
    markers = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')]
        .flatMap(p => p.data.filter(t => t.mode === 'markers' && (t.name || '').endsWith('compactions')))
        .length""")
    page.screenshot(path=str(tmp_path / "report.png"))
    page.close()
    assert plots >= 2
    # a line per config, and the input the provider billed (the grid's recordings carry usage)
    assert token_curves and all(
        sorted(names) == ["clear-12", "clear-4", "recorded input", "split"] for names in token_curves
    )
    assert markers >= 3
    external = [url for url in requests if not url.startswith(("file://", "data:", "blob:", "about:"))]
    assert external == []
