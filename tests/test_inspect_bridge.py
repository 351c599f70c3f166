"""Inspect AI, both ways: its compaction as workbench kinds, and a workbench config live in an Inspect agent."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import workbench as wb
import workbench.inspect as wbi
from workbench.strategies.inspect_kinds import JoinedCount, inspect_tokens, inspect_tool_tokens, threshold_tokens

if importlib.util.find_spec("inspect_ai") is None:  # not imported here: it takes seconds, paid by the tests
    pytest.skip("inspect_ai is not installed (the `inspect` extra)", allow_module_level=True)


#: A real Inspect eval runs in the test (an agent on `mockllm`): seconds each, left out of `make test-fast`.
LIVE_EVAL = pytest.mark.slow


def inspect_model() -> Any:
    """`inspect_ai.model`, imported when a test first needs it (not while the suite is collected)."""
    import inspect_ai.model

    return inspect_ai.model


@pytest.fixture(autouse=True)
def offline_tiktoken(monkeypatch):
    """Inspect counts tokens with tiktoken's o200k_base: read it from LiteLLM's bundled copy, offline."""
    from workbench.offline import litellm_tokenizer_dir

    folder = litellm_tokenizer_dir()
    if folder is not None:
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(folder))


def test_the_core_does_not_import_inspect_ai():
    code = "import sys, workbench, workbench.replay, workbench.cli; assert 'inspect_ai' not in sys.modules, 'imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("threshold", "limit", "tokens"), [(0.5, 1000, 500), (0.9, 128_000, 115_200), (600, 1000, 600)]
)
def test_a_threshold_is_a_share_of_the_window_up_to_one_and_tokens_above(threshold, limit, tokens):
    assert threshold_tokens(threshold, limit) == tokens


def agent_history(turns: int, calls_per_turn: int = 1) -> list:
    """An Inspect agent's history: a system prompt, the task, then tool calls with their results."""
    from inspect_ai.tool import ToolCall

    m = inspect_model()
    messages: list = [m.ChatMessageSystem(content="You are a careful agent."), m.ChatMessageUser(content="Find keys.")]
    for turn in range(turns):
        calls = [
            ToolCall(id=f"c{turn}-{n}", function="exclude_me" if turn == 1 else "lookup", arguments={"key": turn})
            for n in range(calls_per_turn)
        ]
        messages.append(m.ChatMessageAssistant(content=f"step {turn}", tool_calls=calls))
        messages += [
            m.ChatMessageTool(content=f"value {turn}-{n} " * 20, tool_call_id=c.id, function=c.function)
            for n, c in enumerate(calls)
        ]
        if turn == 3:
            messages.append(m.ChatMessageUser(content="Also check the cache."))
    return messages


def shape(messages) -> list[tuple]:
    """What a compaction decided, comparable across both sides: role, text, tool calls, answered call."""
    out = []
    for m in messages:
        calls = tuple(c.id for c in getattr(m, "tool_calls", None) or ())
        out.append((m.role, m.text, calls, getattr(m, "tool_call_id", None)))
    return out


def workbench_shape(messages) -> list[tuple]:
    return [(m.role, m.text, tuple(c.id for c in m.tool_calls), m.tool_call_id) for m in messages]


INSPECT_CASES = [
    ("trim 0.8", ("CompactionTrim", {"preserve": 0.8}), {"kind": "inspect_trim", "preserve": 0.8}),
    ("trim 0.3", ("CompactionTrim", {"preserve": 0.3}), {"kind": "inspect_trim", "preserve": 0.3}),
    ("trim 0", ("CompactionTrim", {"preserve": 0.0}), {"kind": "inspect_trim", "preserve": 0.0}),
    ("edit", ("CompactionEdit", {"keep_tool_uses": 3}), {"kind": "inspect_edit", "keep_tool_uses": 3}),
    ("edit all", ("CompactionEdit", {"keep_tool_uses": 0}), {"kind": "inspect_edit", "keep_tool_uses": 0}),
    (
        "edit inputs",
        ("CompactionEdit", {"keep_tool_uses": 2, "keep_tool_inputs": False, "exclude_tools": ["exclude_me"]}),
        {"kind": "inspect_edit", "keep_tool_uses": 2, "keep_tool_inputs": False, "exclude_tools": ["exclude_me"]},
    ),
]


@pytest.mark.parametrize(("label", "theirs", "ours"), INSPECT_CASES, ids=[c[0] for c in INSPECT_CASES])
@pytest.mark.parametrize("calls_per_turn", [1, 2])
def test_the_kinds_keep_and_drop_what_inspects_own_strategies_do(label, theirs, ours, calls_per_turn):
    history = agent_history(7, calls_per_turn)
    kind, options = theirs
    strategy = getattr(inspect_model(), kind)(**options)
    expected, _ = asyncio.run(strategy.compact(inspect_model().get_model("mockllm/model"), history, []))
    got = wb.compact([wbi.from_inspect(m) for m in history], ours)
    assert workbench_shape(got) == shape(expected)
    assert len(got) < len(history) or label.startswith("edit")


def test_the_summary_kind_keeps_the_input_and_replaces_the_conversation_with_one_summary():
    history = [wbi.from_inspect(m) for m in agent_history(5)]
    got = wb.compact(history, {"kind": "inspect_summary"})
    assert [m.role for m in got] == ["system", "user", "user"]
    assert got[:2] == history[:2] and got[2].origin == "compacted_synthetic" and got[2].metadata["summary"]
    again = wb.compact([*got, *history[2:4]], {"kind": "inspect_summary"})
    assert len(again) == 3 and again[2] is not got[2]  # the next summary starts from the last one


def test_the_inspect_presets_are_inspects_defaults():
    for name, kind in [
        ("inspect-auto", "inspect_summary"),
        ("inspect-edit", "inspect_edit"),
        ("inspect-trim", "inspect_trim"),
    ]:
        config = wb.parse_config(name)
        assert config.trigger == {"kind": "inspect_threshold", "threshold": 0.9}
        assert config.strategy["kind"] == kind


@pytest.mark.parametrize(
    ("trigger", "expected"),
    [
        ({"kind": "inspect_threshold", "threshold": 0.5}, 0.5),
        ({"kind": "inspect_threshold", "threshold": 2000}, 2000),
        ({"kind": "token_threshold", "threshold": 5000}, 5000),
        ({"kind": "utilization", "ratio": 0.8}, 0.8 * (10_000 - 2_000) / 10_000),
        ({"kind": "guard", "warn_threshold": 0.5, "hard_limit": 8000}, 4000),
    ],
)
def test_a_trigger_becomes_inspects_threshold(trigger, expected):
    config = wb.parse_config(
        {"trigger": trigger, "strategy": {"kind": "inspect_trim"}, "context_limit": 10_000, "max_output": 2_000}
    )
    assert wbi.live_threshold(config) == pytest.approx(expected)


def test_a_trigger_that_does_not_count_tokens_cannot_run_live():
    with pytest.raises(wb.ConfigError, match="cannot decide when a live Inspect agent compacts"):
        wbi.compaction({"trigger": {"kind": "pressure", "turns": 3}, "strategy": {"kind": "inspect_trim"}})


def run_eval(tmp_path, compaction, turns: int = 10, filler: int = 12):
    """A react agent on mockllm calling a lookup tool `turns` times (each result `filler` times three
    words long), then submitting; its log."""
    from inspect_ai import Task, eval
    from inspect_ai.agent import react
    from inspect_ai.dataset import Sample
    from inspect_ai.tool import tool

    @tool
    def lookup():
        async def execute(key: str) -> str:
            """Look a key up.

            Args:
                key: the key.
            """
            return f"value of {key}: " + "lorem ipsum dolor " * filler

        return execute

    calls = iter(range(turns))  # counted here: a compacted input no longer shows every earlier call

    def outputs(input, tools, tool_choice, config):
        if "<summary> tags" in input[-1].text:
            return inspect_model().ModelOutput.from_content("mockllm/model", "<summary>looked up keys</summary>")
        done = next(calls, None)
        if done is None:
            return inspect_model().ModelOutput.for_tool_call("mockllm/model", "submit", {"answer": "done"})
        return inspect_model().ModelOutput.for_tool_call("mockllm/model", "lookup", {"key": f"k{done}"})

    task = Task(
        dataset=[Sample(input="Look up the keys, then submit.", target="done")],
        solver=react(tools=[lookup()], compaction=compaction),
    )
    model = inspect_model().get_model("mockllm/model", custom_outputs=outputs)
    [log] = eval(task, model=model, log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    return log


def compaction_events(log) -> list:
    return [e for sample in log.samples for e in sample.events if e.event == "compaction"]


LIVE = [
    ("trim", {"kind": "inspect_trim", "preserve": 0.5}, "trim"),
    ("edit", {"kind": "inspect_edit", "keep_tool_uses": 1}, "edit"),
    ("window", {"kind": "sliding_window", "window": 2}, "trim"),
]


@LIVE_EVAL
@pytest.mark.parametrize(("label", "strategy", "event_type"), LIVE, ids=[c[0] for c in LIVE])
def test_a_workbench_config_compacts_a_live_inspect_agent(tmp_path, label, strategy, event_type):
    config = {"name": f"live-{label}", "trigger": {"kind": "inspect_threshold", "threshold": 700}, "strategy": strategy}
    log = run_eval(tmp_path, wbi.compaction(config))
    events = compaction_events(log)
    assert events, "no compaction in the log"
    for event in events:
        assert event.type == event_type and event.source == "inspect"
        assert event.tokens_before > 700 >= event.tokens_after
        assert event.metadata["strategy"] == "WorkbenchCompaction"


@LIVE_EVAL
def test_a_live_summary_goes_through_the_configs_summarizer_or_inspects_model(tmp_path):
    config = {"trigger": {"kind": "inspect_threshold", "threshold": 700}, "strategy": {"kind": "inspect_summary"}}
    log = run_eval(tmp_path / "inspect", wbi.compaction(config))  # the agent's own (mock) model summarizes
    assert [e.type for e in compaction_events(log)][:1] == ["summary"]
    summaries = [m for m in log.samples[0].messages if (m.metadata or {}).get("summary")]
    assert summaries and "looked up keys" in summaries[0].text
    log = run_eval(tmp_path / "config", wbi.compaction(config | {"summarizer": "workbench/extractive"}))
    summaries = [m for m in log.samples[0].messages if (m.metadata or {}).get("summary")]
    assert summaries and "looked up keys" not in summaries[0].text


@LIVE_EVAL
def test_the_live_log_imports_back_with_its_compactions(tmp_path):
    config = {"trigger": {"kind": "inspect_threshold", "threshold": 700}, "strategy": {"kind": "inspect_trim"}}
    log = run_eval(tmp_path, wbi.compaction(config))
    events = compaction_events(log)
    assert events
    pytest.importorskip("workbench.importers.inspect_ai")  # the Inspect log importer (issue 40, item 1)
    [session] = wb.load(log.location)
    recorded = session.recorded_compactions
    assert [r.tokens_before for r in recorded] == [e.tokens_before for e in events]
    entries = session.metadata["recorded_compactions"]
    assert [(e["compaction_type"], e["tokens_after"]) for e in entries] == [(e.type, e.tokens_after) for e in events]


def test_without_inspect_ai_the_bridge_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "inspect_ai", None)
    with pytest.raises(ImportError, match=r"compaction-workbench\[inspect\]"):
        wbi.compaction("inspect-trim")


def _replayed_points(
    tmp_path, theirs, ours: dict, threshold: int, filler: int, **settings: Any
) -> tuple[list[int], list[int]]:
    """Inspect's own strategy in a live agent, its log imported: the calls its compactions preceded,
    and those the workbench kinds compact before when the session is replayed (`settings`: more of
    the replay's config)."""
    log = run_eval(tmp_path, theirs, turns=12, filler=filler)
    [session] = wb.load(log.location)
    recorded = [r.call_index for r in session.recorded_compactions]
    assert len(recorded) == len(compaction_events(log)) >= 2
    config = {
        "trigger": {"kind": "inspect_threshold", "threshold": threshold},
        "strategy": {**ours, "threshold": threshold},
        "context_limit": 200_000,
        "max_output": 100,
        **settings,
    }
    return recorded, [event.call_index for event in wb.replay(session, config).compactions]


@LIVE_EVAL
@pytest.mark.parametrize(("threshold", "filler"), [(900, 40), (1200, 60), (1500, 100), (2500, 150)])
def test_the_trim_kind_compacts_where_inspects_trim_did(tmp_path, threshold, filler):
    recorded, replayed = _replayed_points(
        tmp_path,
        inspect_model().CompactionTrim(threshold=threshold, preserve=0.5),
        {"kind": "inspect_trim", "preserve": 0.5},
        threshold,
        filler,
    )
    assert replayed == recorded


@LIVE_EVAL
def test_the_edit_kind_compacts_where_inspects_edit_did(tmp_path):
    recorded, replayed = _replayed_points(
        tmp_path,
        inspect_model().CompactionEdit(threshold=1500, keep_tool_uses=1),
        {"kind": "inspect_edit", "keep_tool_uses": 1},
        1500,
        100,
    )
    assert replayed == recorded


@LIVE_EVAL
def test_the_summary_kind_compacts_where_inspects_summary_did(tmp_path):
    """The replay's summarizer (over HTTP) answers as the agent's mock model summarized live."""
    from workbench.testing import FakeOpenAI

    with FakeOpenAI(responder=lambda request: "<summary>looked up keys</summary>") as server:
        recorded, replayed = _replayed_points(
            tmp_path,
            inspect_model().CompactionSummary(threshold=1500),
            {"kind": "inspect_summary"},
            1500,
            100,
            summarizer="openai/mock-summarizer",
            summarizer_options={"api_base": server.api_base, "api_key": "sk-test"},
        )
        assert server.request_count == len(replayed)
    assert replayed == recorded


# Inspect's count, restated: texts where tiktoken's pieces meet across the newline that joins them
AWKWARD = st.lists(
    st.sampled_from(
        [*"ab Z9./\n\r\t:{}\"é-'", "  ", "\n\n", "é漢", "🙂", "Hello", "'s", "\u00a0", "\x0b", "123456", "/\n"]
    ),
    max_size=20,
).map("".join)


_TOOL_NAME = st.sampled_from(("bash", "read_file"))


@st.composite
def inspect_messages(draw) -> list:
    from workbench.session import Message, ToolCall

    messages = [Message("system", draw(AWKWARD))]
    for n in range(draw(st.integers(0, 6))):
        calls = tuple(
            ToolCall(f"c{n}-{i}", draw(_TOOL_NAME), json.dumps({"cmd": draw(AWKWARD)}))
            for i in range(draw(st.integers(0, 2)))
        )
        messages.append(Message("assistant", draw(AWKWARD), tool_calls=calls))
        messages += [Message("tool", draw(AWKWARD), tool_call_id=call.id, name=call.name) for call in calls]
        if draw(st.booleans()):
            messages.append(Message("user", draw(AWKWARD)))
    return messages


@settings(max_examples=60, deadline=None)
@given(inspect_messages())
def test_messages_are_counted_as_inspects_own_count_tokens(messages):
    from workbench.inspect import to_inspect

    model = inspect_model().get_model("mockllm/model")
    theirs = asyncio.run(model.count_tokens([to_inspect(m, {}) for m in messages]))
    assert inspect_tokens(messages) == theirs


def test_tool_definitions_are_counted_as_inspects_own_count_tool_tokens():
    from inspect_ai.tool import ToolInfo, ToolParam, ToolParams

    infos = [
        ToolInfo(
            name="bash",
            description="Run a command.",
            parameters=ToolParams(
                properties={"cmd": ToolParam(type="string", description="the command")}, required=["cmd"]
            ),
        ),
        ToolInfo(name="submit", description="Submit an answer: done.", parameters=ToolParams()),
    ]
    model = inspect_model().get_model("mockllm/model")
    logged = [info.model_dump() for info in infos]  # as a log holds them (None fields included)
    ours = [{"type": "function", "function": info} for info in logged]
    assert inspect_tool_tokens(ours) == asyncio.run(model.count_tool_tokens(infos))
    assert inspect_tool_tokens([]) == asyncio.run(model.count_tool_tokens([])) == 1


@settings(max_examples=300, deadline=None)
@given(inspect_messages(), st.lists(st.integers(0, 12), min_size=1, max_size=6), st.integers(0, 20))
def test_the_growing_count_equals_the_count_of_the_whole_context(messages, cuts, restart):
    """Counted as the context grows call by call (and starts over when a compaction rewrites it)."""
    counter = JoinedCount()
    for cut in sorted(cuts):
        context = messages[: cut + 1]
        assert counter.count(context) == inspect_tokens(context)
    rewritten = messages[restart % len(messages) :]
    assert counter.count(rewritten) == inspect_tokens(rewritten)
