"""End to end: `streamlit run app.py` headless on 127.0.0.1, driven by Debian's Chromium through Playwright.

Compare runs three presets on a sample session and the plotly charts are read back from the browser
(a line trace per config, compaction markers); the SQL page runs a query. Screenshots go to tmp_path and
are copied to /tmp/e2e-*.png. Skips where Chromium (or Playwright) is absent (the `chromium` fixture).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the headless-Chromium walk of the app: `make test-fast` leaves it out

ROOT = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT_S = 60
PAGE_TIMEOUT_MS = 60_000
REPLAY_TIMEOUT_MS = 180_000
PRESETS = ["observation-masking", "gent-sliding-window", "ptc-runner-trim"]
SESSION_COUNT = 12  # the bundled samples
TOKENS_CHART = "Context tokens per call"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"streamlit exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"streamlit was not healthy within {STARTUP_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    """The app served from the repo root on a free port over a fresh database of the bundled samples."""
    from workbench.cli.data import init_database

    folder = tmp_path_factory.mktemp("e2e")
    db = folder / "wb.duckdb"
    init_database(str(db))
    port = free_port()
    log = folder / "streamlit.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "app.py",
                "--server.headless",
                "true",
                "--server.address",
                "127.0.0.1",
                "--server.port",
                str(port),
                "--browser.gatherUsageStats",
                "false",
                "--",
                "--db",
                str(db),
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, server, log)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


@pytest.fixture
def page(chromium, server_url):
    """A page of a fresh browser context; every request the browser makes is recorded, and a request
    to any host but the app's fails the test (the app promises nothing beyond the machine)."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1800})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    requested: list[str] = []
    context.on("request", lambda request: requested.append(request.url))
    try:
        yield context.new_page()
    finally:
        context.close()
    app_host = urllib.parse.urlsplit(server_url).netloc
    elsewhere = sorted(
        {
            url
            for url in requested
            if urllib.parse.urlsplit(url).scheme in ("http", "https", "ws", "wss")
            and urllib.parse.urlsplit(url).netloc != app_host
        }
    )
    assert requested, "the browser made no request at all"
    assert not elsewhere, f"requests beyond the app ({app_host}): {elsewhere}"


def shoot(page, tmp_path: Path, name: str) -> None:
    target = tmp_path / f"{name}.png"
    page.screenshot(path=str(target))
    shutil.copy(target, f"/tmp/e2e-{name}.png")


def set_number(page, label: str, value: int) -> None:
    field = page.get_by_label(label, exact=True)
    field.fill(str(value))
    field.press("Enter")
    page.wait_for_function(
        "([label, value]) => [...document.querySelectorAll('input')].some("
        "i => i.getAttribute('aria-label') === label && i.value.replace(/,/g, '') === value)",
        arg=[label, str(value)],
    )


def selected_presets(page) -> list[str]:
    box = page.locator('[data-testid="stMultiSelect"]').filter(has_text="Presets")
    return box.locator("[data-tag]").evaluate_all("tags => tags.map(t => t.getAttribute('aria-label'))")


def plot_traces(page) -> dict[str, list[dict]]:
    """Per chart title, the traces plotly drew in the page ({name, mode} of each)."""
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('.js-plotly-plot')].map(el => [
        String((el.layout && el.layout.title && (el.layout.title.text || el.layout.title)) || '')
            .replace(/<[^>]*>/g, ''),
        (el.data || []).map(t => ({name: t.name, mode: t.mode}))]))""")


def test_compare_three_presets_then_sql(server_url, page, tmp_path):
    page.goto(f"{server_url}/compare")
    page.get_by_role("button", name="Run replays").wait_for()
    assert selected_presets(page) == PRESETS  # the page's defaults: exactly three
    set_number(page, "Reserved for output (tokens)", 200)
    set_number(page, "Context window (tokens)", 12000)  # every preset compacts on the default sample
    shoot(page, tmp_path, "compare-ready")

    page.get_by_role("button", name="Run replays").click()
    page.wait_for_function(
        f"() => [...document.querySelectorAll('.js-plotly-plot')].some("
        f"el => el.data && el.layout && JSON.stringify(el.layout.title).includes('{TOKENS_CHART}'))",
        timeout=REPLAY_TIMEOUT_MS,
    )
    page.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
    page.wait_for_timeout(500)  # let plotly finish painting before the screenshot
    shoot(page, tmp_path, "compare-charts")

    charts = plot_traces(page)
    assert not page.locator('[data-testid="stException"]').count()
    assert TOKENS_CHART in charts, charts
    tokens = charts[TOKENS_CHART]
    lines = [t["name"] for t in tokens if t["mode"] == "lines"]
    markers = [t["name"] for t in tokens if t["mode"] == "markers"]
    assert lines == PRESETS, tokens
    assert {f"{p} compactions" for p in PRESETS} <= set(markers)

    with page.expect_download(timeout=REPLAY_TIMEOUT_MS) as download:  # the report is built on this click
        page.get_by_role("button", name="Export the comparison (HTML)").click()
    report = Path(download.value.path()).read_text(encoding="utf-8")
    assert report.startswith("<!DOCTYPE html>") and "Comparison on session" in report
    assert all(preset in report for preset in PRESETS)

    page.goto(f"{server_url}/sql")
    query = page.get_by_label("Query")
    query.fill("SELECT count(*) AS n FROM sessions")
    page.get_by_role("button", name="Run", exact=True).click()
    table = page.locator('[data-testid="stDataFrame"]')
    table.wait_for()
    page.get_by_text("1 rows").wait_for()
    page.wait_for_timeout(500)
    shoot(page, tmp_path, "sql")
    cells = table.locator("td").evaluate_all("cells => cells.map(c => c.textContent.trim())")
    assert cells == [str(SESSION_COUNT)], table.evaluate("e => e.innerHTML.slice(0, 3000)")
