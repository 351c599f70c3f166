"""One way to write a number: the rule of `workbench.formatting`, and the CLI, the app and the HTML report
writing the same stored run's numbers alike."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from app_support import page_script
from builders import conversation
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from workbench import formatting


@pytest.mark.parametrize(
    ("value", "decimals", "expected"),
    [
        (5.25, 1, 5.3),  # Python's format writes 5.2, a browser 5.3: the rule says 5.3
        (5.35, 1, 5.4),
        (-5.25, 1, -5.3),  # half away from zero
        (2.675, 2, 2.68),  # stored as 2.67499999...: rounded on the digits it prints as
        (0.0005, 3, 0.001),
        (682699.5, 0, 682700.0),
        (-0.04, 1, 0.0),
        (float("inf"), 1, float("inf")),
    ],
)
def test_rounding_is_half_away_from_zero_on_the_printed_digits(value, decimals, expected):
    assert formatting.rounded(value, decimals) == expected


@pytest.mark.parametrize(
    ("unit", "value", "text"),
    [
        ("tokens", 85904, "85,904"),
        ("tokens", 37975.5, "37,976"),
        ("count", 5.25, "5.3"),
        ("count", 18, "18"),
        ("count", 1.0, "1"),
        ("number", 0.8635, "0.864"),
        ("number", 1234.5678, "1,234.568"),
        ("percent", 4 / 7, "57%"),
        ("percent", 0.125, "13%"),
        ("dollars", 0.01235, "$0.0124"),
        ("dollars", 1234.5, "$1,234.5000"),
        ("cells", 1200, "1,200"),
        ("number", None, ""),
        ("number", float("nan"), ""),
        ("number", "completed", "completed"),
        ("number", True, "True"),
        ("count", -0.04, "0.0"),
    ],
)
def test_a_value_is_written_in_its_unit(unit, value, text):
    assert formatting.format_value(unit, value) == text


@pytest.mark.parametrize(
    ("unit", "value", "text"),
    [
        ("tokens", 1234, "+1,234"),
        ("number", -0.0516, "−0.052"),
        ("dollars", -0.01, "−$0.0100"),
        ("number", 0.0, "0"),
        ("number", 0.0001, "0.000"),  # zero once rounded: no sign
        ("number", None, ""),
    ],
)
def test_a_difference_carries_its_sign(unit, value, text):
    assert formatting.format_signed(unit, value) == text


@pytest.mark.parametrize(("value", "text"), [(0.0001, "<0.001"), (0.0005, "0.001"), (0.25, "0.250"), (None, "")])
def test_p_values(value, text):
    assert formatting.format_p_value(value) == text


# four sessions compacting 8, 5, 4 and 4 times under the window config: 5.25 compactions on average
SESSION_STEPS = (20, 14, 12, 13)
SPEC = """
name = "formatting"
dataset = "fmt"

[defaults]
context_limit = 1500
max_output = 200

[[config]]
name = "window"
trigger = { kind = "utilization", ratio = 0.5 }
strategy = { kind = "sliding_window", window = 4 }

[[config]]
name = "masking"
trigger = { kind = "utilization", ratio = 0.5 }
strategy = { kind = "observation_masking", keep_recent = 2 }
"""


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory):
    from workbench.experiments import run_experiment
    from workbench.session import Session
    from workbench.store import Store

    folder = tmp_path_factory.mktemp("formatting")
    db = str(folder / "wb.duckdb")
    sessions = [
        Session.from_messages(conversation(steps, result_chars=400), id=f"fmt-{n}", dataset="fmt")
        for n, steps in enumerate(SESSION_STEPS)
    ]
    with Store(db) as store:
        store.import_sessions(sessions)
    spec = folder / "formatting.toml"
    spec.write_text(SPEC)
    run = run_experiment(str(spec), db=db, concurrency=1)
    return db, spec, run


def cli_leaderboard(db: str, spec: Path) -> dict[tuple[str, str], str]:
    """`workbench run` on the finished run (nothing left to run): the leaderboard it prints."""
    from workbench.cli import main

    result = CliRunner().invoke(main, ["run", str(spec), "--db", db], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("config "))
    printed = [line.ljust(max(map(len, lines))) for line in lines[start : start + 3]]
    # a column is a run of positions where some line has text (cells hold no spaces; a blank cell is spaces)
    filled = [any(line[i] != " " for line in printed) for i in range(len(printed[0]))]
    spans = [m.span() for m in re.finditer(r"1+", "".join("1" if f else "0" for f in filled))]
    header, *rows = [[line[a:b].strip() for a, b in spans] for line in printed]
    return {(row[0], column): value for row in rows for column, value in zip(header[1:], row[1:], strict=True)}


def app_leaderboard(db: str, monkeypatch) -> dict[tuple[str, str], str]:
    monkeypatch.setenv("WORKBENCH_DB", db)
    at = AppTest.from_string(page_script("experiments"), default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    board = at.dataframe[1].value
    return {(str(config), str(column)): str(board.loc[config, column]) for config in board.index for column in board}


def report_leaderboard(db: str, run_id: str, folder: Path) -> dict[tuple[str, str], str]:
    from workbench.experiments import export

    text = export(run_id, "html", folder / "report.html", db=db).read_text()
    table = text[text.index("<table>") : text.index("</table>")]
    header = [html.unescape(h) for h in re.findall(r"<th[^>]*>(.*?)</th>", table)]
    shown = {}
    for row in re.findall(r"<tr><td.*?</tr>", table):
        cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        shown.update({(cells[0], column): value for column, value in zip(header[1:], cells[1:], strict=True)})
    return shown


def test_the_cli_the_app_and_the_report_write_a_runs_numbers_alike(stored_run, monkeypatch, tmp_path):
    db, spec, run = stored_run
    cli = cli_leaderboard(db, spec)
    app = app_leaderboard(db, monkeypatch)
    report = report_leaderboard(db, run.id, tmp_path)
    shared = set(cli) & set(app) & set(report)
    columns = {column for _, column in shared}
    assert {"completed", "compactions", "billed_input_tokens", "peak_context_tokens"} <= columns
    for key in sorted(shared):
        assert cli[key] == app[key] == report[key], key
    assert cli["window", "compactions"] == "5.3"  # 21 compactions over 4 sessions: 5.25, half away from zero
    assert re.fullmatch(r"\d{1,3}(,\d{3})+", cli["window", "billed_input_tokens"])
    assert cli["window", "completed"] == "100%"
