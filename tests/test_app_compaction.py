"""The compaction view as the app draws it (`workbench.ui.compaction`), on views built in code, and in Compare."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

#: A script drawing one compaction: "summary" (a summary replacing four messages, one of them a long tool
#: result, with its quality and lost facts) or "masking" (a tool result masked in place, no summary).
pytestmark = pytest.mark.slow  # the app's compaction view (AppTest)


SCRIPT = """
import dataclasses
from types import SimpleNamespace

from workbench.access import compaction_view
from workbench.session import Message, ToolCall
from workbench.ui.compaction import show_compaction

CASE = {case!r}
fact_line = "the build took 585s on the CI runner"
long_result = "\\n".join(f"line {{i}}: {{fact_line}}" if i == 30 else f"line {{i}}" for i in range(40))
before = [
    Message(role="system", content="You are careful."),
    Message(role="user", content="Fix the slow build"),
    Message(role="assistant", content="timing it", tool_calls=(ToolCall(id="c1", name="run", arguments="{{}}"),)),
    Message(role="tool", content=long_result, tool_call_id="c1", name="run"),
    Message(role="assistant", content="585s is too slow; caching the wheels"),
    Message(role="user", content="go on"),
]
if CASE == "summary":
    summary = "\\n".join(f"summary line {{i}}" for i in range(20))
    after = [before[0], Message(role="user", content=summary), before[5]]
    measured = {{"fact_retention": 0.6666666667, "compression_ratio": 2.123456, "lost_count": 1}}
    measured["lost_facts"] = ["585s"]
else:
    summary = None
    masked = dataclasses.replace(before[3], content="[output hidden]", origin="compacted_modified")
    after = [*before[:3], masked, *before[4:]]
    measured = {{"compression_ratio": 1.5}}
event = SimpleNamespace(call_index=4, tokens_before=1234, tokens_after=321, summary=summary, error=None)
show_compaction(compaction_view(before, after, event, measured, event_index=1), key="view")
"""


def drawn(case: str) -> AppTest:
    at = AppTest.from_string(SCRIPT.format(case=case), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_summary_sits_beside_what_it_replaced_long_texts_folded():
    at = drawn("summary")
    assert "1,234 → 321 tokens" in at.caption[0].value and "6 messages in → 3 out" in at.caption[0].value
    summary_column, replaced_column = at.columns[0], at.columns[1]
    assert summary_column.markdown[0].value == "**Summary**"
    assert replaced_column.markdown[0].value == "**What it replaced (4 messages)**"
    captions = [c.value for c in replaced_column.caption]
    assert captions == ["#1 user", "#2 assistant", "→ tool call run({})", "#3 tool · run", "#4 assistant"]
    shown = [t.value for t in summary_column.text]
    assert shown[0].splitlines() == [f"summary line {i}" for i in range(8)]  # the first lines, the rest folded
    folds = [e.label for e in at.expander]
    assert any(label.startswith("… the rest (") and "12 lines" in label for label in folds), folds
    assert any("32 lines" in label for label in folds), folds  # the 40-line tool result, folded after 8
    assert not at.code  # a summary: no diff


def test_quality_is_a_table_rounded_in_each_metric_s_direction():
    at = drawn("summary")
    quality = at.dataframe[0].value.set_index("metric")
    assert quality.loc["fact_retention", "value"] == "0.667"
    assert quality.loc["fact_retention", "better"] == "↑ better"
    assert quality.loc["compression_ratio", "value"] == "2.123"
    assert quality.loc["lost_count", "value"] == "1" and quality.loc["lost_count", "better"] == ""
    assert "lost_facts" not in quality.index


def test_a_lost_fact_names_the_message_it_came_from():
    at = drawn("summary")
    lost = at.dataframe[1].value
    assert list(lost["fact"]) == ["585s"]
    assert lost["from message"][0] == "#3 tool · run"  # the first replaced message holding it
    assert "585s on the CI runner" in lost["excerpt"][0]


def test_a_masking_compaction_shows_a_diff_and_no_summary():
    at = drawn("masking")
    assert at.columns[0].markdown[0].value == "**Written in their place (1 message)**"
    [diff] = at.code
    assert diff.language == "diff"
    lines = diff.value.splitlines()
    assert "-line 30: the build took 585s on the CI runner" in lines and "+[output hidden]" in lines


@pytest.fixture(scope="module")
def app_db(tmp_path_factory):
    from app_support import build_database

    return build_database(str(tmp_path_factory.mktemp("compaction") / "wb.duckdb"))


def test_compare_opens_each_compaction_in_the_view(app_db, monkeypatch):
    from app_support import page_script

    monkeypatch.setenv("WORKBENCH_DB", app_db)
    at = AppTest.from_string(page_script("compare"), default_timeout=120)
    at.run()
    at.selectbox(key="compare_session").set_value("generated-12")
    at.number_input(key="compare_limit").set_value(1500)
    at.number_input(key="compare_max_output").set_value(200)
    at.multiselect(key="compare_presets").set_value(["observation-masking", "goat-split-summary"])
    at.run()
    at.button(key="compare_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    headings = [m.value for m in at.markdown]
    assert any(h.startswith("**What it replaced (") for h in headings), headings
    assert "**Summary**" in headings  # the split summary, beside what it replaced
    assert any(code.language == "diff" for code in at.code)  # masking edits: a diff
    quality = [t.value for t in at.dataframe if list(t.value.columns) == ["metric", "value", "better"]]
    assert quality and all(set(q["better"]) <= {"↑ better", "↓ better", ""} for q in quality)
