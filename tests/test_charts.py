"""The cost-versus-quality chart: configs cut short are marked and kept off the front, labels stay inside."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.experiments import charts


def cells(config: str, billed: list[int], retention: list[float], ends: list[str]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "session_id": [f"s{i}" for i in range(len(billed))],
            "config": config,
            "repeat": 0,
            "termination": ends,
            "billed_input_tokens": billed,
            "needed_fact_retention": retention,
        }
    )


def window_sweep() -> pd.DataFrame:
    """The shape of the window-sweep run: the largest window overflows on 3 of its 4 sessions, so its
    replays stop early, cost little and look best."""
    return pd.concat(
        [
            cells("window-5", [900_000] * 4, [0.5] * 4, ["completed"] * 4),
            cells("window-20", [1_200_000] * 4, [0.7] * 4, ["completed"] * 4),
            cells("window-40", [100_000] * 4, [0.9] * 4, ["completed", *["context_overflow"] * 3]),
        ],
        ignore_index=True,
    )


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
    cut_short = window_sweep().query("config != 'window-5' and config != 'window-20'")
    # alone, no config completed more: its point is on its own front
    assert [t.name for t in charts.cost_quality(cut_short).data] == ["configs", "Pareto front"]
    every = window_sweep().drop(columns=["termination"])  # ad-hoc frames without termination: all count
    assert [t.name for t in charts.cost_quality(every).data] == ["configs", "Pareto front"]


def test_labels_stay_inside_the_plot():
    figure = charts.cost_quality(
        pd.concat(
            [
                cells("observation-masking", [100, 100], [0.4, 0.4], ["completed"] * 2),
                cells("middle", [500, 500], [0.6, 0.6], ["completed"] * 2),
                cells("gent-progressive-summary", [900, 900], [0.9, 0.9], ["completed"] * 2),
            ],
            ignore_index=True,
        )
    )
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


def test_a_firing_that_changed_nothing_is_not_drawn_as_a_compaction_point():
    from builders import conversation

    import workbench as wb

    spec = {
        "name": "mask",
        "trigger": {"kind": "pressure", "turns": 1},
        "strategy": {"kind": "observation_masking", "keep_recent": 3},
        "context_limit": 20000,
    }
    result = wb.replay(wb.Session.from_messages(conversation(10, result_chars=400)), spec)
    changed = [e.call_index for e in result.compactions if not e.noop]
    assert changed and len(changed) < len(result.compactions)
    _, calls, events = charts.frames_from_results([result])
    assert list(traces(charts.token_curves(calls, events))["mask compactions"].x) == changed
    # as stored: a nullable column, NULL on rows written before the flag (they are drawn: they did not tell)
    stored = events.assign(noop=pd.array([None, *events["noop"][1:]], dtype="boolean"))
    drawn = list(traces(charts.token_curves(calls, stored))["mask compactions"].x)
    assert drawn == sorted({result.compactions[0].call_index, *changed})
    only_noops = events[events["noop"]]
    assert "mask compactions" not in traces(charts.token_curves(calls, only_noops))


def uneven_sweep() -> pd.DataFrame:
    """Twelve sessions; the largest window overflows on nine, after few calls, so over every session it
    bills least and keeps most; over the three sessions every config completed it is the dearest."""
    sessions = 12
    return pd.concat(
        [
            cells("window-5", [900] * sessions, [0.5] * sessions, ["completed"] * sessions),
            cells("window-20", [1_000] * 7 + [400] * 5, [0.7] * sessions, ["completed"] * 7 + ["context_overflow"] * 5),
            cells(
                "window-40",
                [1_100] * 3 + [100] * 9,
                [0.6] * 3 + [0.95] * 9,
                ["completed"] * 3 + ["context_overflow"] * 7 + ["compaction_failed"] * 2,
            ),
        ],
        ignore_index=True,
    )


def test_the_chart_compares_on_the_sessions_every_config_completed_and_says_so():
    figure = charts.cost_quality(uneven_sweep())
    points = traces(figure)["configs"]
    assert list(points.x) == [900, 1_000, 1_100]  # the means over the 3 complete sessions
    assert list(points.y) == pytest.approx([0.5, 0.7, 0.6])
    assert "on 3 of 12 sessions where every config completed" in figure.layout.title.text
    assert list(points.marker.symbol) == ["circle", "circle-open", "circle-open"]
    assert list(traces(figure)["Pareto front"].x) == [900]  # window-20 keeps more, but completed fewer
    every = charts.cost_quality(uneven_sweep(), complete_only=False)
    assert list(traces(every)["configs"].x) == [900, pytest.approx(750), pytest.approx(1_100 * 3 / 12 + 100 * 9 / 12)]
    assert "on all 12 sessions, replays that stopped early included" in every.layout.title.text
    assert list(traces(every)["Pareto front"].x) == [900]  # the cheapest-looking window-40 is still never best
    whole = cells("a", [1, 2], [0.5, 0.5], ["completed"] * 2)
    assert "<sup>" not in charts.cost_quality(whole).layout.title.text  # nothing left out: nothing to say


def test_the_leaderboard_means_are_over_the_complete_sessions_and_count_every_cell():
    board = charts.leaderboard(uneven_sweep())
    assert list(board["billed_input_tokens"]) == [900, 1_000, 1_100]
    assert list(board["cells"]) == [12, 12, 12]
    assert list(board["completed"]) == [1, pytest.approx(7 / 12), pytest.approx(3 / 12)]
    every = charts.leaderboard(uneven_sweep(), complete_only=False)
    assert every.loc["window-40", "billed_input_tokens"] == pytest.approx(350)
