"""End to end: `streamlit run app.py` headless on 127.0.0.1, driven by Debian's Chromium through Playwright.

One research walk, as a user takes it: from Sessions to Compare ("Compare this session"), where the three
default presets are swapped for three others and replayed (the plotly charts are read back from the
browser: a line trace per config, compaction markers) and the comparison is exported as HTML; then a cell
of a stored run on the Experiments page and one of its compactions; back to Compare (through the sidebar,
then by reloading its URL), its inputs and charts as it left them; last, the SQL page runs a query. Every
request the browser makes is recorded: any to a host but the app's fails the test. Screenshots go to
tmp_path and are copied to /tmp/e2e-*.png. Skips where Chromium (or Playwright) is absent (the `chromium`
fixture). One walk, not several tests: the app's server and the browser start once.
"""

from __future__ import annotations

import re
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
OPTION_TIMEOUT_MS, OPEN_ATTEMPTS = 5_000, 12
expect = pytest.importorskip("playwright.sync_api").expect
PlaywrightTimeoutError = pytest.importorskip("playwright.sync_api").TimeoutError
expect.set_options(timeout=PAGE_TIMEOUT_MS)  # the machine is shared: a rerun may take a while
PRESETS = ["observation-masking", "gent-sliding-window", "ptc-runner-trim"]
SESSION_COUNT = 12  # the bundled samples
TOKENS_CHART = "Context tokens per call"
BILLED_CHART = "Cumulative billed input tokens"
#: The walk's session (not the first listed, which Compare shows by default) and its window: every preset
#: of `WALK_PRESETS` (PRESETS chosen in another order than the defaults, so a reset would show) compacts.
WALK_SESSION = "df1b374077c76951"
WALK_PRESETS = list(reversed(PRESETS))
WALK_LIMIT, WALK_OUTPUT = 12_000, 200
#: The run stored before the app starts, for the Experiments drill-down: a summarizing config (its
#: compactions have a summary to read beside what it replaced) and an editing one, on the walk's session.
DRILL_RUN = "e2e-drill"
DRILL_CONFIG = "goat-split-summary"
DRILL_SPEC = f"""
name = "{DRILL_RUN}"
dataset = "samples"
where = "id = '{WALK_SESSION}'"
metrics = ["fact_retention"]

[defaults]
context_limit = {WALK_LIMIT}
max_output = {WALK_OUTPUT}

[[config]]
preset = "observation-masking"

[[config]]
preset = "{DRILL_CONFIG}"
"""


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
    """The app served from the repo root on a free port over a fresh database of the bundled samples,
    with one stored run (`DRILL_SPEC`)."""
    from workbench.cli.data import init_database
    from workbench.experiments import load_experiment, run_experiment

    folder = tmp_path_factory.mktemp("e2e")
    db = folder / "wb.duckdb"
    init_database(str(db))
    run = run_experiment(load_experiment(DRILL_SPEC), db=str(db))
    assert run.status == "finished", run.status
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
                "--server.fileWatcherType",  # no source watching: it re-walks the tree (.venv too) when the
                "none",  # machine's other work overflows its inotify queue
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


def beyond_app(requested: list[str], server_url: str) -> list[str]:
    """The requested URLs (http, https, ws, wss) to a host other than the app's."""
    app_host = urllib.parse.urlsplit(server_url).netloc
    return sorted(
        {
            url
            for url in requested
            if urllib.parse.urlsplit(url).scheme in ("http", "https", "ws", "wss")
            and urllib.parse.urlsplit(url).netloc != app_host
        }
    )


@pytest.fixture
def requested() -> list[str]:
    """Every URL the test's browser requested, in order (filled by the `page` fixture)."""
    return []


@pytest.fixture
def page(chromium, server_url, requested):
    """A page of a fresh browser context; every request the browser makes is recorded in `requested`,
    and a request to any host but the app's fails the test (the app promises nothing beyond the machine)."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1800})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    context.on("request", lambda request: requested.append(request.url))
    try:
        yield context.new_page()
    finally:
        context.close()
    assert requested, "the browser made no request at all"
    elsewhere = beyond_app(requested, server_url)
    assert not elsewhere, f"requests beyond the app ({urllib.parse.urlsplit(server_url).netloc}): {elsewhere}"


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
    """Per chart title (a line break as " | ", other markup dropped), the traces plotly drew in the page
    ({name, mode} of each)."""
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('.js-plotly-plot')].map(el => [
        String((el.layout && el.layout.title && (el.layout.title.text || el.layout.title)) || '')
            .replace(/<br\\s*\\/?>/gi, ' | ').replace(/<[^>]*>/g, ''),
        (el.data || []).map(t => ({name: t.name, mode: t.mode}))]))""")


def chart(charts: dict[str, list[dict]], title: str) -> tuple[str, list[dict]]:
    """The one chart whose title starts with `title`: its whole title and its traces."""
    found = [(full, traces) for full, traces in charts.items() if full.startswith(title)]
    assert len(found) == 1, (title, list(charts))
    return found[0]


def wait_chart(page, title_part: str, timeout: int = REPLAY_TIMEOUT_MS) -> None:
    """Wait until a plotly chart whose title holds `title_part` has drawn its traces."""
    page.wait_for_function(
        "part => [...document.querySelectorAll('.js-plotly-plot')].some(el => el.data && el.data.length"
        " && el.layout && JSON.stringify(el.layout.title || '').includes(part))",
        arg=title_part,
        timeout=timeout,
    )


def lines_and_markers(traces: list[dict]) -> tuple[list[str], set[str]]:
    return [t["name"] for t in traces if t["mode"] == "lines"], {t["name"] for t in traces if t["mode"] == "markers"}


def selectbox(page, label: str):
    """The selectbox whose label reads exactly `label`."""
    named = page.locator('[data-testid="stWidgetLabel"]').filter(has_text=re.compile(rf"^\s*{re.escape(label)}\s*$"))
    return page.locator('[data-testid="stSelectbox"]').filter(has=named)


def wait_selectbox(page, label: str, holding: str = "") -> None:
    """Wait until one selectbox alone is labelled `label` and it shows an option holding `holding` (while a
    rerun redraws a panel, the box it replaces may still show beside the new one)."""
    page.wait_for_function(
        """([label, holding]) => {
            const boxes = [...document.querySelectorAll('[data-testid="stSelectbox"]')].filter(box => {
                const named = box.querySelector('[data-testid="stWidgetLabel"]');
                return named && named.textContent.trim() === label;
            });
            const field = boxes.length === 1 && boxes[0].querySelector('input');
            return Boolean(field) && field.value.includes(holding);
        }""",
        arg=[label, holding],
        timeout=REPLAY_TIMEOUT_MS,
    )


def choose(page, label: str, option: str) -> None:
    """Open the selectbox `label` and click its option holding `option`, as a user would. Opened again
    while the option does not show: a rerun still drawing the page may replace the box and close its list."""
    wait_selectbox(page, label)
    box = selectbox(page, label)
    wanted = page.get_by_role("option").filter(has_text=option).first
    for attempt in range(OPEN_ATTEMPTS):
        box.click()
        try:
            wanted.click(timeout=OPTION_TIMEOUT_MS)
            break
        except PlaywrightTimeoutError:
            if attempt == OPEN_ATTEMPTS - 1:
                page.screenshot(path=f"/tmp/e2e-failed-choose-{label.replace(' ', '-')}.png")
                raise
            page.keyboard.press("Escape")
    wait_selectbox(page, label, option)


def choose_presets(page, names: list[str]) -> None:
    """Empty the Presets box (backspace), then type each name and pick it, in order."""
    box = page.locator('[data-testid="stMultiSelect"]').filter(has_text="Presets")
    field = box.locator("input")
    field.click()
    for _ in selected_presets(page):
        field.press("Backspace")
    expect(box.locator("[data-tag]")).to_have_count(0)
    for count, name in enumerate(names, start=1):
        field.fill(name)
        page.get_by_role("option", name=name, exact=True).click()
        expect(box.locator("[data-tag]")).to_have_count(count)
    field.press("Escape")


def compare_charts(page, session_id: str) -> dict[str, list[dict]]:
    """The Compare page's two charts once drawn for `session_id` (their titles name it), traces by title."""
    wait_chart(page, f"{TOKENS_CHART} · session {session_id}")
    wait_chart(page, f"{BILLED_CHART} · session {session_id}")
    page.wait_for_timeout(500)  # let plotly finish painting before the screenshot
    charts = plot_traces(page)
    assert len(charts) == 2, list(charts)
    return charts


def expect_compare_inputs(page) -> None:
    """The Compare form holds the walk's session, presets (in their order), window and reply reserve."""
    wait_selectbox(page, "Session", WALK_SESSION)
    assert selected_presets(page) == WALK_PRESETS
    for label, value in (("Context window (tokens)", WALK_LIMIT), ("Reserved for output (tokens)", WALK_OUTPUT)):
        expect(page.get_by_label(label, exact=True)).to_have_value(re.compile(rf"^{value:,}$".replace(",", ",?")))


def test_sessions_to_compare_to_a_cell_and_back(server_url, page, requested, tmp_path):
    """The research walk: Sessions -> "Compare this session" -> three presets replayed -> Experiments -> a
    cell of the stored run and one of its compactions -> back to Compare, its inputs and charts intact,
    through the sidebar and after reloading its URL; nothing requested beyond the app."""
    page.goto(server_url)
    page.get_by_role("button", name="Compare this session").wait_for()
    choose(page, "Session", WALK_SESSION)
    page.get_by_role("heading", name=f"Session {WALK_SESSION}").wait_for()
    shoot(page, tmp_path, "walk-1-sessions")

    page.get_by_role("button", name="Compare this session").click()
    page.wait_for_url(re.compile(rf"/compare\?(.*&)?session={WALK_SESSION}"))
    page.get_by_role("button", name="Run replays").wait_for()
    wait_selectbox(page, "Session", WALK_SESSION)
    assert selected_presets(page) == PRESETS  # the page's defaults: exactly three
    choose_presets(page, WALK_PRESETS)
    set_number(page, "Reserved for output (tokens)", WALK_OUTPUT)
    set_number(page, "Context window (tokens)", WALK_LIMIT)
    expect_compare_inputs(page)
    shoot(page, tmp_path, "walk-2-compare-ready")

    page.get_by_role("button", name="Run replays").click()
    before = compare_charts(page, WALK_SESSION)
    page.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
    shoot(page, tmp_path, "walk-3-compare-charts")
    assert not page.locator('[data-testid="stException"]').count()
    for title in (TOKENS_CHART, BILLED_CHART):  # each names its session and its configs
        full, _ = chart(before, title)
        assert full == f"{title} · session {WALK_SESSION} | {', '.join(WALK_PRESETS)}", full
    lines, markers = lines_and_markers(chart(before, TOKENS_CHART)[1])
    assert lines == WALK_PRESETS
    assert {f"{p} compactions" for p in WALK_PRESETS} <= markers
    shared = urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)  # the view, as a link carries it
    assert shared["session"] == [WALK_SESSION] and shared["preset"] == WALK_PRESETS, shared
    assert shared["window"] == [str(WALK_LIMIT)] and shared["output"] == [str(WALK_OUTPUT)], shared
    with page.expect_download(timeout=REPLAY_TIMEOUT_MS) as download:  # the report is built on this click
        page.get_by_role("button", name="Export the comparison (HTML)").click()
    report = Path(download.value.path()).read_text(encoding="utf-8")
    assert report.startswith("<!DOCTYPE html>") and f"Comparison on session {WALK_SESSION}" in report
    assert all(preset in report for preset in WALK_PRESETS)

    navigation = page.get_by_test_id("stSidebarNav")
    navigation.get_by_role("link", name="Experiments").click()
    page.wait_for_url(re.compile(r"/experiments$"))
    choose(page, "Run", DRILL_RUN)
    choose(page, "Configuration", DRILL_CONFIG)
    wait_selectbox(page, "Open a cell", DRILL_CONFIG)  # the panel redrawn for the chosen configuration
    choose(page, "Open a cell", f"{WALK_SESSION} × {DRILL_CONFIG}")
    cell_title = f"session {WALK_SESSION} · {DRILL_CONFIG} · repeat 0"
    wait_chart(page, cell_title)
    _, curve = chart(plot_traces(page), cell_title)
    assert lines_and_markers(curve) == ([DRILL_CONFIG], {f"{DRILL_CONFIG} compactions"}), curve
    page.get_by_text("Metrics of this cell").wait_for()
    cell_curve = page.locator(".js-plotly-plot").filter(has_text=DRILL_CONFIG).last
    cell_curve.scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    shoot(page, tmp_path, "walk-4-experiments-cell")

    # the compaction view: its summary beside what it replaced, its quality as a rounded table
    replaced = page.get_by_text(re.compile(r"^What it replaced \([\d,]+ messages?\)$"))
    replaced.wait_for(timeout=REPLAY_TIMEOUT_MS)  # the cell is replayed again for its contexts
    summary = page.get_by_text("Summary", exact=True)
    summary.scroll_into_view_if_needed()
    left, right = summary.bounding_box(), replaced.bounding_box()
    assert left and right and abs(left["y"] - right["y"]) < 20 and left["x"] + 200 < right["x"], (left, right)
    shoot(page, tmp_path, "walk-5-compaction-summary")
    quality = page.get_by_text("Quality of this compaction").locator(
        'xpath=following::div[@data-testid="stDataFrame"][1]'
    )
    quality.scroll_into_view_if_needed()
    quality.locator("td").first.wait_for(state="attached")  # the grid's accessible table, drawn hidden
    page.wait_for_timeout(500)
    shoot(page, tmp_path, "walk-6-compaction-quality")
    cells = quality.locator("td").evaluate_all("cells => cells.map(c => c.textContent.trim())")
    rows = {cells[i]: cells[i + 1 : i + 3] for i in range(0, len(cells), 3)}  # metric -> [value, better]
    assert rows["fact_retention"][1] == "↑ better" and rows["compression_ratio"][1] == "↑ better", rows
    assert not [c for c in cells if re.fullmatch(r"-?[\d,]*\.\d{5,}", c)], cells  # rounded, not raw floats
    assert not page.locator('[data-testid="stException"]').count()

    navigation.get_by_role("link", name="Compare").click()  # back, as a user would
    page.wait_for_url(re.compile(rf"/compare\?(.*&)?session={WALK_SESSION}"))
    expect_compare_inputs(page)
    assert compare_charts(page, WALK_SESSION) == before
    assert not page.get_by_text("The settings changed since").count()
    shoot(page, tmp_path, "walk-7-compare-again")

    page.reload()  # a new browser session: the URL's parameters alone bring the view back, replayed on arrival
    page.get_by_role("button", name="Run replays").wait_for()
    expect_compare_inputs(page)
    assert compare_charts(page, WALK_SESSION) == before
    shoot(page, tmp_path, "walk-8-compare-reloaded")

    navigation.get_by_role("link", name="SQL").click()
    page.wait_for_url(re.compile(r"/sql$"))
    page.get_by_label("Query").fill("SELECT count(*) AS n FROM sessions")
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("1 rows").wait_for()
    table = page.locator('[data-testid="stDataFrame"]')
    expect(table).to_have_count(1)  # the result alone: Compare's tables, faded while the page changed, are gone
    expect(table.locator("td")).to_have_text([str(SESSION_COUNT)])
    page.wait_for_timeout(500)
    shoot(page, tmp_path, "walk-9-sql")

    assert requested, "the browser made no request at all"
    assert not beyond_app(requested, server_url)
