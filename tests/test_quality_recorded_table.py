"""The table that scores the agent's own compactions beside replayed configurations at the same points."""

from __future__ import annotations

import pytest
from builders import assistant, system, tool, user

import workbench as wb
from workbench.quality.recorded_table import CONFIGS, main, recorded_summary_tokens, score
from workbench.session import RecordedCompaction
from workbench.tokens import count_tokens

CAPPED = [name for name, spec in CONFIGS.items() if spec.get("cap")]
RECORDED = "as-recorded (the agent's own summary)"


def steps(first: int, last: int, *, mentions: int = 0) -> list:
    """Tool steps reading `src/module_<i>.py`, each result naming its file, function and error; the
    assistant of step i also names the module of step i - `mentions` (a fact used again later)."""
    out = []
    for i in range(first, last):
        later = f" Back to src/module_{i - mentions}.py and parse_{i - mentions}." if mentions else ""
        out.append(assistant(f"Reading module {i}.{later}", calls=((f"c{i}", "read_file"),)))
        out.append(
            tool(
                f"c{i}",
                f"src/module_{i}.py: def parse_{i}(rows): ... raises KeyError_{i} at line {i}0\n"
                + "plain text of the file " * 30,
            )
        )
    return out


def recorded_session() -> wb.Session:
    """A task, 30 tool steps, then a recorded auto-compaction whose summary holds about 400 tokens, and
    10 more steps that go back to modules the compaction removed."""
    summary = " ".join(f"Step {i}: read src/module_{i}.py, fixed KeyError in parse_{i}, ran pytest." for i in range(20))
    messages = [
        system(),
        user("Fix the failing tests in src/"),
        *steps(0, 30),
        user("Go on with the release notes"),
        *steps(30, 40, mentions=25),
        assistant("Done."),
    ]
    boundary = 2 + 60
    record = RecordedCompaction(
        call_index=sum(1 for m in messages[:boundary] if m.role == "assistant"),
        message_index=boundary,
        trigger="auto",
        tokens_before=50_000,
        summary=summary,
    )
    return wb.Session.from_messages(messages, metadata={"recorded_compactions": [record.to_dict()]})


@pytest.mark.parametrize("name", [RECORDED, *CAPPED])
def test_every_configuration_compacts_where_the_agent_did(name):
    scored = score(recorded_session(), CONFIGS[name])
    assert scored["compactions"] == 1 and scored["termination"] == "completed"
    assert 0 <= scored["fact_retention"] <= 1 and 0 <= scored["needed_fact_retention"] <= 1


@pytest.mark.parametrize("name", CAPPED)
def test_capped_summaries_enter_the_context_no_longer_than_the_recorded_one(name):
    """Counted as the table counts them: the summary as it enters the context (summarize_full appends
    the last user request to it), in the table's tokenizer rather than the summarizer's own measure."""
    session = recorded_session()
    cap = recorded_summary_tokens(session)
    assert cap == count_tokens(session.recorded_compactions[0].summary, "cl100k_base")
    scored = score(session, CONFIGS[name])
    assert 0.8 * cap <= scored["summary_tokens"] <= cap


def test_the_shared_recordings_table_has_the_agents_own_row_and_capped_rows_within_its_tokens(shared_sessions, capsys):
    recordings = [
        path
        for path in sorted((shared_sessions / "claude-code").rglob("*.jsonl"))
        if any(s.recorded_compactions for s in wb.load(path))
    ]
    if not recordings:
        pytest.skip("no shared recording carries a recorded compaction")
    smallest = min(recordings, key=lambda path: path.stat().st_size)
    assert main([str(smallest)]) == 0
    rows = {
        line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| ") and not line.startswith("| configuration")
    }
    assert set(rows) == set(CONFIGS)
    recorded_tokens = float(rows[RECORDED][3].replace(",", ""))
    for name in CAPPED:
        assert float(rows[name][3].replace(",", "")) <= recorded_tokens
        assert "offline baseline" in name
