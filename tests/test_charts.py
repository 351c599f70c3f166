"""The cost-versus-quality chart: configs cut short are marked and kept off the front, labels stay inside."""

from __future__ import annotations

import pandas as pd

from workbench.experiments import charts


def cells(config: str, billed: list[int], retention: list[float], ends: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"session_id": [f"s{i}" for i in range(len(billed))], "config": config, "repeat": 0,
                         "termination": ends, "billed_input_tokens": billed, "needed_fact_retention": retention})


def window_sweep() -> pd.DataFrame:
    """The shape of the window-sweep run: the largest window overflows on 3 of its 4 sessions, so its
    replays stop early, cost little and look best."""
    return pd.concat([
        cells("window-5", [900_000] * 4, [0.5] * 4, ["completed"] * 4),
        cells("window-20", [1_200_000] * 4, [0.7] * 4, ["completed"] * 4),
        cells("window-40", [100_000] * 4, [0.9] * 4, ["completed", *["context_overflow"] * 3]),
    ], ignore_index=True)


def traces(figure) -> dict:
    return {trace.name: trace for trace in figure.data}


def test_a_config_whose_cells_did_not_all_complete_is_hollow_labelled_and_off_the_front():
    figure = charts.cost_quality(window_sweep())
    shown = traces(figure)
    points = shown["configs"]
    assert list(points.marker.symbol) == ["circle", "circle", "circle-open"]
    assert list(points.text[:2]) == ["window-5", "window-20"]
    assert "1 of 4 completed" in points.text[2]
    assert "1 of 4 cells completed" in points.hovertext[2] and "context_overflow ×3" in points.hovertext[2]
    front = shown["Pareto front"]
    assert list(front.x) == [900_000, 1_200_000]  # window-40 would dominate both, were it counted
    assert charts.INCOMPLETE_TRACE in shown  # the legend says what a hollow marker means


def test_a_front_of_one_point_is_drawn_and_no_front_is_not_listed():
    one = window_sweep().query("config != 'window-20'")
    front = traces(charts.cost_quality(one))["Pareto front"]
    assert list(front.x) == [900_000] and "markers" in front.mode  # a lone point, not an invisible line
    cut_short = window_sweep().query("config == 'window-40'")
    assert [t.name for t in charts.cost_quality(cut_short).data] == ["configs", charts.INCOMPLETE_TRACE]
    every = window_sweep().drop(columns=["termination"])  # ad-hoc frames without termination: all count
    assert [t.name for t in charts.cost_quality(every).data] == ["configs", "Pareto front"]


def test_labels_stay_inside_the_plot():
    figure = charts.cost_quality(pd.concat([
        cells("observation-masking", [100, 100], [0.4, 0.4], ["completed"] * 2),
        cells("middle", [500, 500], [0.6, 0.6], ["completed"] * 2),
        cells("gent-progressive-summary", [900, 900], [0.9, 0.9], ["completed"] * 2)], ignore_index=True))
    points = traces(figure)["configs"]
    # the leftmost label runs right, the rightmost left, the middle one centred on its point
    assert list(points.textposition) == ["top right", "top center", "top left"]
    assert points.cliponaxis is False
    low, high = figure.layout.xaxis.range
    assert low < 100 and high > 900
    bottom, top = figure.layout.yaxis.range
    assert bottom < 0.4 and top > 0.9 + 0.1  # room above the highest point for its label


def test_a_single_point_gets_a_range_around_it():
    figure = charts.cost_quality(cells("only", [1000, 1000], [0.5, 0.5], ["completed"] * 2))
    low, high = figure.layout.xaxis.range
    assert low < 1000 < high
    assert list(traces(figure)["configs"].textposition) == ["top center"]
