"""The Compare page: presets and TOML configs replayed on one session, charts, panels and the export."""

from __future__ import annotations

import json
import re

import pytest
from app_support import APP, build_database, page_script
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.slow  # the app's Compare page (AppTest)


PRESETS = ["observation-masking", "gent-sliding-window", "ptc-runner-trim"]


@pytest.fixture(scope="module")
def app_db(tmp_path_factory):
    return build_database(str(tmp_path_factory.mktemp("compare") / "wb.duckdb"))


@pytest.fixture
def compare_page(app_db, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DB", app_db)
    at = AppTest.from_string(page_script("compare"), default_timeout=120)
    at.run()
    assert not at.exception
    at.selectbox(key="compare_session").set_value("generated-12")
    at.number_input(key="compare_limit").set_value(1500)
    at.number_input(key="compare_max_output").set_value(200)
    at.multiselect(key="compare_presets").set_value(PRESETS)
    at.run()
    assert not at.exception
    return at


def figures(at: AppTest) -> dict[str, dict]:
    return {chart.proto.id: json.loads(chart.proto.spec) for chart in at.get("plotly_chart")}


def traces(figure: dict) -> list[str]:
    return [trace.get("name", "") for trace in figure["data"]]


def event_box(at: AppTest, config: str):
    """The compaction picker of a config's summaries (its key carries a fingerprint of its labels)."""
    boxes = [box for box in at.selectbox if (box.key or "").startswith(f"compare_event:{config}:")]
    assert len(boxes) == 1, [box.key for box in at.selectbox]
    return boxes[0]


def run(at: AppTest) -> AppTest:
    at.button(key="compare_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def test_nothing_runs_before_the_button(compare_page):
    assert not compare_page.get("plotly_chart")
    assert any("run the replays" in i.value for i in compare_page.info)
    assert any("offline extractive baseline" in c.value for c in compare_page.caption)


def test_three_presets_draw_a_trace_per_config_with_compaction_markers(compare_page):
    at = run(compare_page)
    charts = list(figures(at).values())
    assert len(charts) == 2
    tokens, billed = charts
    names = traces(tokens)
    assert all(preset in names for preset in PRESETS)
    # masking and trim compact under a 1,500-token window; the sliding window's one firing finds fewer steps
    # than its window (a no-op: no marker) and its replay stops at the window
    assert {name for name in names if name.endswith(" compactions")} == {
        "observation-masking compactions",
        "ptc-runner-trim compactions",
    }
    assert "gent-sliding-window stopped" in names
    assert traces(billed) == PRESETS
    assert any(shape.get("y0") == 1500 for shape in tokens["layout"].get("shapes", []))  # the window line


def test_calibration_is_a_choice_and_its_fit_is_reported(compare_page):
    compare_page.checkbox(key="compare_calibrate").check().run()
    at = run(compare_page)
    fits = [c.value for c in at.caption if c.value.startswith("calibration:")]
    assert len(fits) == 1 and fits[0].startswith("calibration: none applied (no recorded usage")  # samples carry none


def test_metrics_context_summaries_and_export(compare_page):
    at = run(compare_page)
    metrics = at.dataframe[0].value
    assert list(metrics.columns) == ["better", *PRESETS]
    assert {"billed_input_tokens", "compactions"} <= set(metrics.index)
    assert metrics.loc["billed_input_tokens", "better"] == "lower"
    for preset in PRESETS:  # shown in their units: whole tokens with separators, shares to 3 decimals
        assert re.fullmatch(r"\d{1,3}(,\d{3})*", metrics.loc["billed_input_tokens", preset])
        assert re.fullmatch(r"\d\.\d{3}|1|0|", metrics.loc["fact_retention", preset])

    at.selectbox(key="compare_context_config").set_value("ptc-runner-trim").run()
    at.number_input(key="compare_call:ptc-runner-trim").set_value(3).run()
    assert not at.exception
    assert any("messages ·" in c.value and "tokens" in c.value for c in at.caption)
    assert at.expander  # the context's messages

    assert event_box(at, "observation-masking").options
    export = at.get("download_button")
    assert len(export) == 1


def test_toml_config_errors_show_inline_and_block_the_run(compare_page):
    at = compare_page
    at.multiselect(key="compare_presets").set_value(["observation-masking"])
    at.number_input(key="compare_custom").set_value(1).run()
    assert not at.exception
    assert any("valid" in c.value for c in at.caption)
    kinds = at.dataframe[0].value  # the reference of every kind, for writing TOML
    assert {"trigger", "strategy"} == set(kinds["family"])
    assert "sliding_window" in set(kinds["kind"]) and "ratio" in set(kinds["parameter"])
    at.text_area(key="compare_toml_1").set_value(
        '[trigger]\nkind = "utilization"\nratio = 7\n[strategy]\nkind = "sliding_window"\n'
    ).run()
    assert not at.exception
    assert at.error and any("ratio" in e.value for e in at.error)
    assert at.button(key="compare_run").disabled
    at.text_area(key="compare_toml_1").set_value("not = [toml").run()
    assert any("invalid TOML" in e.value for e in at.error)
    at.text_area(key="compare_toml_1").set_value(
        'name = "mine"\n[trigger]\nkind = "utilization"\nratio = 0.5\n[strategy]\nkind = "sliding_window"\nwindow = 4\n'
    ).run()
    assert not at.error
    run(at)
    assert traces(list(figures(at).values())[1]) == ["observation-masking", "mine"]


def test_fewer_than_two_configs_cannot_run(compare_page):
    at = compare_page
    at.multiselect(key="compare_presets").set_value(["ptc-runner-trim"]).run()
    assert at.button(key="compare_run").disabled
    assert any("Pick 2 to 6 valid configurations (1 chosen)" in i.value for i in at.info)


def test_the_count_says_how_many_were_chosen_and_how_many_are_valid(compare_page):
    at = compare_page
    at.multiselect(key="compare_presets").set_value(["ptc-runner-trim"])
    at.number_input(key="compare_custom").set_value(1).run()
    at.text_area(key="compare_toml_1").set_value("").run()  # an emptied editor: empty TOML, not a path
    assert any("no [trigger] table" in e.value for e in at.error)
    assert not any("folder" in e.value for e in at.error)
    assert any("Pick 2 to 6 valid configurations (2 chosen, 1 valid)" in i.value for i in at.info)


def test_a_config_that_stops_says_why_in_its_own_window_and_is_never_shaded_best(compare_page):
    """A TOML config with its own small window overflows at once: the page says where and why, the
    chart draws no single window line, and its partial totals are left out of the shading."""
    at = compare_page
    at.multiselect(key="compare_presets").set_value(["observation-masking"])
    at.number_input(key="compare_custom").set_value(1).run()
    at.text_area(key="compare_toml_1").set_value(
        'name = "tiny"\ncontext_limit = 100\nmax_output = 90\n[trigger]\nkind = "pressure"\n[strategy]\nkind = "trim"\n'
    ).run()
    at.button(key="compare_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    stopped = [w.value for w in at.warning if w.value.startswith("tiny stopped after")]
    assert stopped == [
        "tiny stopped after 0 of 13 calls: context_overflow: call 0: context 23 + max_output 90 "
        "exceeds context_limit 100"
    ]
    assert any(
        c.value.startswith(
            "The configurations replay in different windows: observation-masking 1,500 tokens, tiny 100 tokens"
        )
        for c in at.caption
    )
    tokens = list(figures(at).values())[0]
    assert not [shape for shape in tokens["layout"].get("shapes", []) if shape.get("y0") in (100, 1500)]
    assert any("Replays that stopped early (termination) are left out" in c.value for c in at.caption)
    at.selectbox(key="compare_context_config").set_value("tiny").run()
    assert "This replay made no call: call 0: context 23 + max_output 90 exceeds context_limit 100" in [
        i.value for i in at.info
    ]


def test_a_compaction_label_follows_a_rerun_with_other_settings(compare_page):
    """The picker of a config's compactions is keyed by its labels: after a rerun in another window,
    the label shown is the new run's, not the one the widget remembered."""
    at = compare_page
    at.multiselect(key="compare_presets").set_value(["gent-progressive-summary", "ptc-runner-trim"])
    at = run(at)
    first = event_box(at, "gent-progressive-summary")
    at.number_input(key="compare_limit").set_value(2500).run()
    at = run(at)
    second = event_box(at, "gent-progressive-summary")
    assert second.key != first.key
    assert second.format_func(second.value) == second.options[0] != first.options[0]


def test_summaries_panel_shows_what_a_compaction_replaced(compare_page):
    at = run(compare_page)
    headings = [m.value for m in at.markdown]
    assert any(heading.startswith("**What it replaced (") for heading in headings)  # beside the summary or edit


@pytest.mark.parametrize(
    ("direction", "values", "expected"),
    [
        ("lower", ["3", "1", "2"], ["", "worst", "best", ""]),
        ("higher", ["3", "1", "2"], ["", "best", "worst", ""]),
        ("none", ["3", "1", "2"], ["", "", "", ""]),
        ("lower", ["2", "2", "2"], ["", "", "", ""]),
        ("higher", ["x", "1", None], ["", "", "", ""]),
        ("lower", [3000, 1000, 2500.5], ["", "worst", "best", ""]),  # shown as "3,000", "1,000", "2,500.5"
    ],
)
def test_metric_shading_follows_the_direction(direction, values, expected):
    """The shading reads the numbers, not the text the table shows (thousands separators and all)."""
    import pandas as pd

    from workbench.ui.compare import BEST_STYLE, WORST_STYLE, _shade_by_direction

    numeric = pd.DataFrame([values], index=["metric"], columns=["a", "b", "c"], dtype="object")
    shown = [f"{v:,}" if isinstance(v, (int, float)) else v for v in values]
    row = pd.Series([direction, *shown], index=["better", "a", "b", "c"], name="metric")
    styles = {"": "", "best": BEST_STYLE, "worst": WORST_STYLE}
    assert _shade_by_direction(row, numeric) == [styles[e] for e in expected]


def test_a_replay_that_stopped_early_is_never_shaded():
    import pandas as pd

    from workbench.ui.compare import BEST_STYLE, WORST_STYLE, _shade_by_direction

    numeric = pd.DataFrame([[3000, 1000, 2500]], index=["billed_input_tokens"], columns=["a", "b", "c"], dtype="object")
    row = pd.Series(["lower", "3,000", "1,000", "2,500"], index=["better", "a", "b", "c"], name="billed_input_tokens")
    assert _shade_by_direction(row, numeric, ranked=[True, False, True]) == ["", WORST_STYLE, "", BEST_STYLE]
    assert _shade_by_direction(row, numeric, ranked=[True, False, False]) == ["", "", "", ""]  # nothing to rank


def replayed(presets: list[str], limit: int = 1500) -> list:
    from builders import conversation

    from workbench.presets import presets as catalogue
    from workbench.replay import replay
    from workbench.session import Session

    session = Session.from_messages(conversation(12, result_chars=400), id="generated-12", dataset="generated")
    window = {"context_limit": limit, "max_output": 200, "summarizer": "workbench/extractive"}
    return [replay(session, {**catalogue()[name], **window}) for name in presets]


def test_chart_frames_carry_what_the_library_frames_carry():
    from workbench.experiments.charts import frames_from_results
    from workbench.ui.compare import chart_frames

    results = replayed(PRESETS)
    calls, compactions = chart_frames(results)
    _, full_calls, full_compactions = frames_from_results(results)
    drawn = full_compactions[~full_compactions["noop"]].reset_index(drop=True)  # no-op firings: no points
    assert len(compactions) == sum(1 for r in results for e in r.compactions if not e.noop) > 0
    for frame, full in ((calls, full_calls), (compactions, drawn)):
        assert frame.to_dict(orient="list") == full[list(frame.columns)].to_dict(orient="list")


def test_the_export_is_the_html_report_or_a_readable_error():
    from workbench.ui.compare import report_or_error

    results = replayed(PRESETS)
    report = report_or_error("generated-12", results)
    assert report.startswith("<!DOCTYPE html>") and "Comparison on session generated-12" in report
    assert all(name in report for name in PRESETS)
    assert "offline extractive baseline" not in report  # none of the three called a summarizer
    summarized = report_or_error("generated-12", replayed(["goat-split-summary", "gent-sliding-window"]))
    assert "Summaries by workbench/extractive: the offline extractive baseline" in summarized
    broken = report_or_error("generated-12", [*results, object()])
    assert "The report could not be built: AttributeError" in broken


# --- keeping the comparison: across pages, in the URL, from the Sessions page ---------------------------


def go_to(at: AppTest, url_path: str) -> AppTest:
    """Open the page at `url_path` the way the browser's navigation does (its query parameters dropped)."""
    from streamlit.runtime.pages_manager import PagesManager

    manager = PagesManager(APP)
    manager.set_script_intent("", url_path)
    found = manager.set_pages_and_resolve(at._registered_pages)
    assert found is not None, url_path
    at._page_hash = found["page_script_hash"]
    at.query_params = {}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def chart_titles(at: AppTest) -> list[str]:
    return [figure["layout"]["title"]["text"] for figure in figures(at).values()]


def form_values(at: AppTest) -> dict[str, object]:
    return {
        "session": at.selectbox(key="compare_session").value,
        "limit": at.number_input(key="compare_limit").value,
        "max_output": at.number_input(key="compare_max_output").value,
        "presets": at.multiselect(key="compare_presets").value,
        "calibrate": at.checkbox(key="compare_calibrate").value,
    }


@pytest.fixture
def whole_app(app_db, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DB", app_db)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception
    return at


def test_the_comparison_survives_a_visit_to_another_page(whole_app):
    at = go_to(whole_app, "compare")
    at.selectbox(key="compare_session").set_value("generated-12")
    at.number_input(key="compare_limit").set_value(1500)
    at.number_input(key="compare_max_output").set_value(200)
    at.multiselect(key="compare_presets").set_value(PRESETS)
    at = run(at)
    before, titles = form_values(at), chart_titles(at)
    assert len(titles) == 2
    go_to(at, "sessions")
    assert at.title[0].value == "Compaction Workbench"
    go_to(at, "experiments")
    at = go_to(at, "compare")
    assert form_values(at) == before
    assert chart_titles(at) == titles  # the replays shown again, not a form at its defaults
    assert not [w.value for w in at.warning if "settings changed" in w.value]
    assert at.query_params["session"] == "generated-12" and at.query_params["preset"] == PRESETS


def test_a_changed_form_says_whose_charts_are_shown(compare_page):
    at = run(compare_page)
    at.number_input(key="compare_limit").set_value(2500).run()
    changed = [w.value for w in at.warning if "settings changed" in w.value]
    assert changed == [
        "The settings changed since these replays of session generated-12 under "
        f"{', '.join(PRESETS)}: the charts below are theirs; run the replays again to update them."
    ]


def test_every_chart_names_its_session_and_configs(compare_page):
    at = run(compare_page)
    titles = chart_titles(at)
    assert [title.split(" · ")[0] for title in titles] == ["Context tokens per call", "Cumulative billed input tokens"]
    for title in titles:
        assert "session generated-12" in title and f"<sup>{', '.join(PRESETS)}</sup>" in title


def test_a_link_restores_the_form_and_runs_the_comparison(app_db, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DB", app_db)
    at = AppTest.from_string(page_script("compare"), default_timeout=120)
    at.query_params = {
        "session": "generated-12",
        "preset": PRESETS[:2],
        "window": "1500",
        "output": "200",
        "calibration": "none",
    }
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert form_values(at) == {
        "session": "generated-12",
        "limit": 1500,
        "max_output": 200,
        "presets": PRESETS[:2],
        "calibrate": False,
    }
    assert len(chart_titles(at)) == 2  # run on arrival: the inputs are whole
    assert traces(list(figures(at).values())[1]) == PRESETS[:2]
    assert at.query_params["window"] == "1500"  # the URL still names the view


def test_a_link_with_a_toml_config_restores_its_editor(app_db, monkeypatch):
    toml = (
        'name = "mine"\n[trigger]\nkind = "utilization"\nratio = 0.5\n[strategy]\nkind = "sliding_window"\nwindow = 4\n'
    )
    monkeypatch.setenv("WORKBENCH_DB", app_db)
    at = AppTest.from_string(page_script("compare"), default_timeout=120)
    at.query_params = {
        "session": "generated-12",
        "preset": "ptc-runner-trim",
        "toml": toml,
        "window": "1500",
        "output": "200",
    }
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key="compare_custom").value == 1 and at.text_area(key="compare_toml_1").value == toml
    assert traces(list(figures(at).values())[1]) == ["ptc-runner-trim", "mine"]


def test_a_link_naming_what_does_not_exist_says_so_and_waits(app_db, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DB", app_db)
    at = AppTest.from_string(page_script("compare"), default_timeout=120)
    at.query_params = {"session": "gone", "preset": ["no-such-preset", "ptc-runner-trim"], "window": "12"}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    (warning,) = [w.value for w in at.warning if w.value.startswith("The link names")]
    assert "session 'gone'" in warning and "preset 'no-such-preset'" in warning and "window=12" in warning
    assert at.multiselect(key="compare_presets").value == ["ptc-runner-trim"]
    assert not figures(at)  # nothing run on a link that did not name a whole comparison


def test_sessions_opens_compare_with_its_session(whole_app):
    at = whole_app
    at.text_input(key="search").set_value("generated-12").run()
    assert at.selectbox(key="session").value == "generated-12"
    at.button(key="session_compare").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Compare"
    assert at.selectbox(key="compare_session").value == "generated-12"
    assert not figures(at)  # one click runs the replays: the presets are the reader's choice


def test_the_form_starts_at_the_clis_replay_defaults(compare_page, app_db, monkeypatch):
    """The window, reply reserve, summarizer and calibration a fresh form shows are those `workbench
    replay --config PRESET` replays with; the presets are `DEFAULT_PRESETS`."""
    from workbench.compaction import DEFAULT_CONTEXT_LIMIT
    from workbench.config import parse_config
    from workbench.ui.compare import DEFAULT_PRESETS

    monkeypatch.setenv("WORKBENCH_DB", app_db)
    at = AppTest.from_string(page_script("compare"), default_timeout=120)
    at.run()
    cli = parse_config("observation-masking")
    assert at.number_input(key="compare_limit").value == cli.context_limit == DEFAULT_CONTEXT_LIMIT == 128_000
    assert at.number_input(key="compare_max_output").value == cli.max_output
    assert at.text_input(key="compare_summarizer").value == cli.summarizer
    assert at.checkbox(key="compare_calibrate").value == (cli.calibration == "recorded")
    assert at.multiselect(key="compare_presets").value == list(DEFAULT_PRESETS)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"window": ["64,000"]}, {"context_limit": 64000}),
        ({"window": ["lots"]}, {"problems": ("window=lots (a whole number of tokens, 1,000 to 2,000,000)",)}),
        ({"output": ["-1"]}, {"problems": ("output=-1 (a whole number of tokens, 0 to 200,000)",)}),
        ({"calibration": ["recorded"]}, {"calibrated": True}),
        ({"calibration": ["maybe"]}, {"problems": ("calibration=maybe (recorded or none)",)}),
        ({"preset": ["a", "b"], "session": ["s1", "s2"]}, {"presets": ("a", "b"), "session": "s2"}),
        ({"unrelated": ["x"]}, {}),
    ],
)
def test_query_parameters_read_into_the_form(query, expected):
    from workbench.ui.compare import CompareInputs

    assert CompareInputs.from_query(query) == CompareInputs(**expected)


def test_the_form_round_trips_through_its_query_parameters():
    from workbench.ui.compare import CompareInputs

    inputs = CompareInputs("s", ("a", "b"), ("x = 1",), 64000, 512, "workbench/extractive", True)
    query = inputs.to_query()
    as_url = {name: value if isinstance(value, list) else [value] for name, value in query.items()}
    assert CompareInputs.from_query(as_url) == inputs
    assert inputs.complete and not CompareInputs(session="s").complete


def test_a_rerun_carrying_an_older_url_keeps_the_form(app_db, monkeypatch):
    """Each rerun carries the URL the browser holds, which lags behind the one the last run wrote: a change
    made before the browser caught up must hold (the URL is read when the page is opened, not on reruns)."""
    monkeypatch.setenv("WORKBENCH_DB", app_db)
    at = AppTest.from_string(page_script("compare"), default_timeout=120)
    at.run()
    opened_with = dict(at.query_params)  # what the first run wrote
    at.multiselect(key="compare_presets").set_value(PRESETS[:2]).run()
    at.multiselect(key="compare_presets").set_value(PRESETS[1:])
    at.query_params = opened_with  # the browser has not caught up with the last run's URL yet
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.multiselect(key="compare_presets").value == PRESETS[1:]
    assert at.query_params["preset"] == PRESETS[1:]
