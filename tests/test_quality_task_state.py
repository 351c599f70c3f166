"""Task state at a compaction point, and how much of it a compacted context states (quality/task_state.py)."""

from __future__ import annotations

import json

import pytest
from builders import lookahead_misses, pattern_words, text_around, without_lookahead
from hypothesis import given
from hypothesis import strategies as st

import workbench as wb
from workbench.quality import task_state
from workbench.quality.audit import keyword_list
from workbench.quality.retention import removed_from
from workbench.quality.task_state import DIMENSIONS, coverage_of, shell_touches, task_state_at, tool_touches
from workbench.registry import kinds
from workbench.session import Message, RecordedCompaction, Session, ToolCall
from workbench.tokens import count_tokens

PROSE = (
    "The user asked to add retry support to the HTTP client in src/client.py.\n"
    "The user said never change the public API of fetch_json.\n"
    "I edited src/client.py to wrap fetch_json in a RetryPolicy instead of patching every caller.\n"
    "I created README.md documenting the retry settings.\n"
    "The backoff counter was fixed and all 12 tests pass now.\n"
    "Last request: add a max_delay option to RetryPolicy; next I'll add max_delay to RetryPolicy."
)


def _call(call_id: str, name: str, **arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


def planted(summary: str = PROSE, system: str = "You are a coding agent.") -> Session:
    """A coding session whose agent compacted before its last call, with `summary` as its recorded summary."""
    messages = [
        Message(role="system", content=system),
        Message(
            role="user",
            content="Add retry support to the HTTP client in src/client.py. Never change the public API of fetch_json.",
        ),
        Message(
            role="assistant",
            content="I'll wrap fetch_json in a RetryPolicy instead of patching every caller.",
            tool_calls=(_call("c1", "Edit", file_path="/workspace/app/src/client.py", old_string="a", new_string="b"),),
        ),
        Message(role="tool", tool_call_id="c1", content="The file src/client.py has been updated successfully."),
        Message(
            role="assistant",
            content="Running the tests.",
            tool_calls=(_call("c2", "Bash", command="pytest tests/test_client.py"),),
        ),
        Message(
            role="tool",
            tool_call_id="c2",
            content="FAILED tests/test_client.py::test_retry_backoff - AssertionError: expected 3 attempts\n"
            "1 failed, 11 passed",
        ),
        Message(
            role="assistant",
            content="The backoff test fails because attempts start at zero.",
            tool_calls=(_call("c3", "Edit", file_path="src/client.py", old_string="0", new_string="1"),),
        ),
        Message(role="tool", tool_call_id="c3", content="The file src/client.py has been updated successfully."),
        Message(role="assistant", content="", tool_calls=(_call("c4", "Bash", command="pytest tests/test_client.py"),)),
        Message(role="tool", tool_call_id="c4", content="12 passed in 0.41s"),
        Message(
            role="assistant",
            content="All 12 tests pass now. Next I'll document the retry settings.",
            tool_calls=(_call("c5", "Write", file_path="README.md", content="# Retry settings"),),
        ),
        Message(role="tool", tool_call_id="c5", content="File created successfully at: README.md"),
        Message(role="user", content="Also add a max_delay option to RetryPolicy."),
        Message(
            role="assistant",
            content="I'll add max_delay to RetryPolicy.",
            tool_calls=(_call("c6", "Read", file_path="src/client.py"),),
        ),
        Message(role="tool", tool_call_id="c6", content="class RetryPolicy: ..."),
        Message(role="assistant", content="Done."),
    ]
    record = RecordedCompaction(call_index=5, message_index=12, trigger="auto", summary=summary)
    return Session.from_messages(messages, metadata={"recorded_compactions": [record.to_dict()]})


def _contexts(session: Session) -> tuple[list[Message], list[Message]]:
    """(the history before the compaction's call, the recorded compaction's context: summary + kept)."""
    before = list(session.messages[:13])
    summary = Message(role="user", content=session.recorded_compactions[0].summary, origin="compacted_synthetic")
    return before, [before[0], summary, *before[12:]]


def test_the_task_state_of_a_planted_session():
    session = planted()
    state = task_state_at(session, 5)
    texts = {d: [i.text for i in state.of(d)] for d in DIMENSIONS}
    assert texts["task"][0].startswith("Add retry support") and "max_delay" in texts["task"][-1]
    assert texts["constraints"] == ["Never change the public API of fetch_json."]
    assert sorted(texts["artifacts"]) == ["created README.md", "edited /workspace/app/src/client.py"]
    assert any("RetryPolicy instead" in t for t in texts["decisions"])
    assert any("12 tests pass" in t for t in texts["progress"])
    assert texts["next_step"] == ["Also add a max_delay option to RetryPolicy."]
    assert texts["open_errors"] == []  # the failing test passed on the same command afterwards
    earlier = task_state_at(session, 3)  # before the second test run the failure is still open
    assert [i.text for i in earlier.of("open_errors")] == [
        "pytest FAILED tests/test_client.py::test_retry_backoff - AssertionError: expected 3 attempts"
    ]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("sed -i 's/a/b/' src/app.py", [("src/app.py", "edited")]),
        ("cat > notes.md <<EOF", [("notes.md", "created")]),
        ("echo x >> log.txt 2>&1", [("log.txt", "edited")]),
        ("git add -A && git commit -m 'fix retry'", [("git commit", "committed")]),
        ("mv old.py new.py", [("new.py", "moved")]),
        ("rm -f build.log", [("build.log", "deleted")]),
        ("pytest -q > /dev/null", []),
        ("ls src", []),
    ],
)
def test_shell_commands_name_the_files_they_write(command, expected):
    assert [(t.path, t.action) for t in shell_touches(command)] == expected


def test_patches_and_editor_tools_name_their_files():
    patch = "*** Begin Patch\n*** Add File: a.py\n+x\n*** Update File: b.py\n*** Move to: c.py\n*** End Patch"
    assert [(t.path, t.action) for t in tool_touches("apply_patch", json.dumps({"input": patch}))] == [
        ("a.py", "created"),
        ("b.py", "edited"),
        ("c.py", "moved"),
    ]
    assert [
        (t.path, t.action)
        for t in tool_touches("str_replace_editor", json.dumps({"command": "create", "path": "x.py", "file_text": ""}))
    ] == [("x.py", "created")]
    assert tool_touches("str_replace_editor", json.dumps({"command": "view", "path": "x.py"})) == []


def test_a_keyword_list_of_equal_tokens_scores_clearly_below_a_prose_summary():
    session = planted()
    before, prose = _contexts(session)
    removed = removed_from(before, prose)
    budget = count_tokens(PROSE, "cl100k_base")
    words = keyword_list(removed, budget, "cl100k_base")
    assert abs(count_tokens(words, "cl100k_base") - budget) <= 0.1 * budget
    keywords = [m if m.origin != "compacted_synthetic" else m.replace(content=words) for m in prose]
    nothing = [m for m in prose if m.origin != "compacted_synthetic"]
    score = {
        name: coverage_of(session, 5, context).share()
        for name, context in (("prose", prose), ("keywords", keywords), ("nothing", nothing))
    }
    assert score["prose"] >= 0.9
    assert score["keywords"] <= score["prose"] - 0.4
    assert score["keywords"] > score["nothing"]  # its words do state a little: a file beside how it was touched
    assert score["nothing"] < 0.5  # the last request is still there, kept


def test_a_bare_token_is_not_a_statement():
    session = planted()
    state = task_state_at(session, 5)
    (constraint,) = state.of("constraints")
    filler = " ".join(["word"] * 20)
    spread = f"Never mind.\npublic {filler} fetch_json {filler} API {filler} change, never"
    assert task_state.covered_items([constraint], [Message(role="user", content=spread)]) == [False]
    stated = "Do not change the public API of fetch_json."
    assert task_state.covered_items([constraint], [Message(role="user", content=stated)]) == [True]


def test_the_metrics_are_registered_per_dimension_and_measured_per_compaction():
    metric = kinds("metric")
    names = ["task_state_coverage", *(f"task_state_{d}" for d in DIMENSIONS)]
    for name in names:
        assert (metric[name].direction, metric[name].level, metric[name].unit) == ("higher", "compaction", "share")
    session = planted()
    result = wb.replay(
        session, {"tokenizer": "cl100k_base", "trigger": {"kind": "recorded"}, "strategy": {"kind": "recorded"}}
    )
    (row,) = result.compaction_metrics
    assert row["task_state_coverage"] == result.metrics["task_state_coverage"] >= 0.9
    assert row["task_state_open_errors"] is None and result.metrics["task_state_open_errors"] is None
    assert row["task_state_items"] == len(task_state_at(session, 5).items)
    empty = wb.replay(planted(summary=""), {"trigger": {"kind": "recorded"}, "strategy": {"kind": "recorded"}})
    assert empty.metrics["task_state_coverage"] < 0.5
    assert empty.compaction_metrics[0]["task_state_missing"]


@pytest.mark.shared
def test_the_production_summary_beats_a_keyword_list_and_nothing_on_the_shared_recordings(shared_sessions):
    from workbench.quality.recorded_table import recorded_sessions
    from workbench.quality.trace import applied_events, compaction_contexts

    sessions = recorded_sessions([shared_sessions / "claude-code"])
    if not sessions:
        pytest.skip("no recorded Claude Code compaction in ../shared/sessions")
    wins = {"keywords": 0, "nothing": 0}
    compactions = 0
    for session in sessions:
        result = wb.replay(
            session,
            {
                "tokenizer": "cl100k_base",
                "context_limit": 200_000,
                "max_output": 8192,
                "trigger": {"kind": "recorded"},
                "strategy": {"kind": "recorded"},
            },
            measure=False,
        )
        for event in applied_events(result):
            before, after = compaction_contexts(result, event)
            call = result.compactions[event].call_index
            written = [m for m in after if m.origin == "compacted_synthetic"]
            budget = sum(count_tokens(m.text, "cl100k_base") for m in written)
            words = keyword_list(removed_from(before, after), budget, "cl100k_base")
            keywords = [m.replace(content=words) if m in written else m for m in after]
            nothing = [m for m in after if m not in written]
            intact = coverage_of(session, call, after).share()
            wins["keywords"] += intact > coverage_of(session, call, keywords).share()
            wins["nothing"] += intact > coverage_of(session, call, nothing).share()
            compactions += 1
    assert compactions
    assert wins["keywords"] >= 0.8 * compactions
    assert wins["nothing"] == compactions


def test_what_a_session_keeps_of_earlier_contexts_gives_the_answers_of_each_context_alone():
    """Per session, `covered_items` keeps which messages state an item: contexts checked one after the
    other, sharing messages (or copies of one text) or not, get what checking each one alone gives."""
    session = planted()
    items = task_state_at(session, 5).items
    before, prose = _contexts(session)
    copy = prose[1].replace(content=PROSE)
    contexts = [prose, [before[0], *before[12:]], [copy], before[:3], prose, [before[0]], [copy, *before[5:9]]]
    answers = []
    for context in contexts:
        kept = {id(m) for m in context}
        alone = [
            id(session.messages[item.source]) in kept or task_state.covered_items([item], context)[0] for item in items
        ]
        answers.append(task_state.covered_items(items, context, session))
        assert answers[-1] == alone
    assert answers[0] == answers[4] and answers[0] != answers[5] and any(answers[2])


def test_the_states_of_one_pass_equal_the_walk_up_to_each_call():
    """`task_state_at` builds every call's state from one pass (`_Checkpoints`); `_state` walks the
    recording up to the call. Equal at every call of the samples, which exercise every dimension."""
    from workbench.quality.trace import assistant_positions
    from workbench.samples import bundled_samples

    dimensions: set[str] = set()
    for session in [*bundled_samples(), planted()]:
        positions = assistant_positions(session)
        for call in range(len(positions) + 1):
            end = positions[call] if call < len(positions) else len(session.messages)
            state = task_state_at(session, call)
            assert state == task_state._state(session, end, call), (session.id, call)
            dimensions.update(item.dimension for item in state.items)
    assert dimensions == set(DIMENSIONS)


CUES = {"decisions": task_state._DECISION, "progress": task_state._PROGRESS, "next_step": task_state._NEXT}
CUE_TEXTS = text_around([word for cue in CUES.values() for word in pattern_words(cue)])
PLAIN_CUES = {name: without_lookahead(cue) for name, cue in CUES.items()}


@given(CUE_TEXTS)
def test_each_cue_finds_what_it_finds_without_its_lookahead(text):
    """The cues' first-letter lookaheads only skip places none of their words starts at."""
    for name, cue in CUES.items():
        assert bool(cue.search(text)) == bool(PLAIN_CUES[name].search(text)), name


@pytest.mark.parametrize("name", CUES)
def test_each_cue_finds_each_of_its_words(name):
    assert lookahead_misses(CUES[name]) == []


#: An observation for each alternative of the error signal.
ERROR_SIGNALS = [
    "Traceback (most recent call last):",
    "ValueError: bad",
    "raise KeyException",
    "error: no such thing",
    "fatal[E1]: stop",
    "ERROR: setup",
    "FATAL: gone",
    "error[E0308]: mismatched types",
    "** (Mix) stopped",
    "1 FAILED",
    "3 failed, 2 passed",
    "1 failure",
    "2 errors",
    "exit code: 2",
    "exit status 1",
    "sh: foo: command not found",
    "No such file or directory",
    "<tool_use_error>nope</tool_use_error>",
]
SIGNAL_TEXTS = text_around(pattern_words(task_state._ERROR_SIGNAL) + ERROR_SIGNALS + ["1", "2 ", "\n", ": "])


@pytest.mark.parametrize("text", ERROR_SIGNALS)
def test_every_kind_of_error_signal_is_searched(text):
    assert task_state._ERROR_SIGNAL.search(text)
    assert any(word in text for word in task_state._ERROR_SIGNAL_WORDS)


@given(SIGNAL_TEXTS)
def test_an_observation_is_searched_for_an_error_whenever_it_could_signal_one(text):
    if task_state._ERROR_SIGNAL.search(text):
        assert any(word in text for word in task_state._ERROR_SIGNAL_WORDS)


UNIT_WORDS = (
    "created", "creates", "create", "modified", "modify", "copies", "copy", "api", "Don't", "`config`",
    "src/app.py", "v1.2-", "Tests.", "passed", "the", "file", "x+", "I", "os", "pass", "a_b",
)  # fmt: skip
UNIT_TEXTS = st.lists(
    st.tuples(st.sampled_from(UNIT_WORDS), st.sampled_from((" ", ". ", "\n", "! ", "? The ", ", "))), max_size=40
).map(lambda pairs: "".join(word + gap for word, gap in pairs))


@given(UNIT_TEXTS, st.data())
def test_ruling_items_out_by_the_texts_stems_changes_no_answer(text, data):
    """`_Units.states` first asks whether the text holds enough of the item's terms at all; the answer is
    the positional check's alone."""
    stems = sorted({task_state.stem(w) for w in task_state._words(text)} | {"absent", "i", "ap"})
    terms = data.draw(st.lists(st.frozensets(st.sampled_from(stems), min_size=1, max_size=2), min_size=1, max_size=6))
    item = task_state.StateItem("progress", "an item", tuple(terms), 0)
    hits: dict[int, list[tuple[int, int]]] = {}
    for index, accepted in enumerate(item.terms):
        for unit, words in enumerate(task_state.stating_units(text)):
            for position, word in enumerate(words):
                if word in accepted:
                    hits.setdefault(unit, []).append((position, index))
    assert task_state._Units(text).states(item) == task_state._states(item, hits)
