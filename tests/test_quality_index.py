"""The fact index (workbench.quality.index): fact keys as bits, and the accounting built on it, checked
against a plain set-based computation of the same definitions."""

from __future__ import annotations

from builders import assistant, conversations, system, tool, user
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import workbench as wb
from workbench.quality.facts import message_facts, normalize_text
from workbench.quality.index import messages_index, positions, session_index
from workbench.quality.retention import _PrefixUnions, analyse, last_use, removed_from
from workbench.quality.trace import compaction_contexts
from workbench.session import Message, Session


def _session() -> Session:
    return Session.from_messages(
        [
            system(),
            user("Fix the ValueError in src/app/net.py; never touch src/app/legacy.py."),
            assistant("Reading.", calls=(("c1", "read_file"),)),
            tool("c1", "src/app/net.py: TIMEOUT_SECONDS = 30, class RetryPolicy"),
            assistant("RetryPolicy retries 3 times; TIMEOUT_SECONDS is 30."),
            user("Use httpx instead of requests."),
            assistant("Switching net.py to httpx; RetryPolicy stays."),
        ]
    )


@given(st.sets(st.integers(min_value=0, max_value=3000), max_size=60))
def test_positions_are_the_set_bits(bits):
    assert sorted(positions(sum(1 << b for b in bits))) == sorted(bits)


def test_masks_hold_exactly_each_message_facts():
    session = _session()
    index = session_index(session)
    assert session_index(session) is index  # built once per session
    for message in session.messages:
        masks = index.masks(message)
        facts = message_facts(message)
        assert set(index.keys_of(masks.every)) == set(facts)
        assert set(index.keys_of(masks.constraint)) == {k for k, f in facts.items() if f.kind == "constraint"}
        assert [f.key for f in masks.facts] == list(facts)


@given(st.data())
def test_chosen_facts_are_those_of_the_mask_in_order_of_mention(data):
    session = _session()
    index = session_index(session)
    message = data.draw(st.sampled_from([m for m in session.messages if message_facts(m)]))
    masks = index.masks(message)
    keys = data.draw(st.sets(st.sampled_from(index.keys)))
    limit = data.draw(st.none() | st.integers(min_value=0, max_value=5))
    expected = [f for f in masks.facts if f.key in keys][:limit]
    assert masks.chosen(index.mask_of(keys), limit) == expected
    assert index.masks_of([message, Message(role="user", content="Retry src/app/net.py")])[0] is masks


def test_used_from_is_the_backward_pass_of_last_use():
    session = _session()
    index = session_index(session)
    uses = last_use(session)
    for call in range(session.calls + 1):
        assert set(index.keys_of(index.used_from[call])) == {k for k, last in uses.items() if last >= call}
    for call in range(session.calls):
        assert set(index.keys_of(index.last_used_at[call])) == {k for k, last in uses.items() if last == call}


def test_a_recording_without_calls_has_an_empty_index():
    session = Session.from_messages([system(), user("Fix src/app.py please.")])
    index = session_index(session)
    assert index.replies == [] and index.spans == [] and index.used_from == [0]
    assert index.has(index.union(session.messages), "src/app.py")


def test_written_messages_get_bits_and_share_them_by_content():
    session = _session()
    index = session_index(session)
    first = Message(role="user", content="Summary: see src/app/summary_only.py", origin="compacted_synthetic")
    twin = first.replace()
    assert index.has(index.union([first]), "src/app/summary_only.py")
    assert index.masks(twin) is index.masks(first)
    assert not index.has(index.union(session.messages), "src/app/summary_only.py")


def _naive(result) -> list[tuple[set[str], set[str], set[str]]]:
    """(removed, retained, needed) keys per applied compaction, as plain sets (the definitions, slowly)."""
    from workbench.quality.facts import content_words
    from workbench.quality.retention import CONSTRAINT_OVERLAP, FUZZY_KINDS

    session = result.session
    uses = last_use(session)
    out = []
    for index, event in enumerate(result.compactions):
        if event.failed or event.noop:  # a firing that changed nothing is no compaction
            continue
        before, after = compaction_contexts(result, index)
        after_ids, before_ids = {id(m) for m in after}, {id(m) for m in before}
        removed: dict = {}
        for message in before:
            if id(message) not in after_ids:
                for key, fact in message_facts(message).items():
                    removed.setdefault(key, fact)
        present = {k for m in after for k in message_facts(m)}
        retained = {k for k in removed if k in present}
        written = [m for m in after if id(m) not in before_ids]
        parts = [m.text for m in written] + [c.arguments for m in written for c in m.tool_calls]
        blob = normalize_text("\n".join(parts))
        for key, fact in removed.items():
            if key in retained or fact.kind not in FUZZY_KINDS or not written:
                continue
            wanted = content_words(key)
            if key in blob or (
                fact.kind == "constraint"
                and wanted
                and len(wanted & content_words(blob)) >= CONSTRAINT_OVERLAP * len(wanted)
            ):
                retained.add(key)
        call = event.call_index
        needed = {
            k
            for k, f in removed.items()
            if (call < session.calls if f.kind == "constraint" else uses.get(k, -1) >= call)
        }
        out.append((set(removed), retained, needed))
    return out


FACT_POOL = (
    "src/app/net.py",
    "tests/test_net.py",
    "TIMEOUT_SECONDS = 30",
    "RetryPolicy",
    "fetch_page",
    "ValueError: bad port",
    "`pytest -q tests`",
    "commit 3f9a2c1b",
    "120 ms",
    "api.internal:8443",
    "v1.4.2",
    "https://example.com/docs/x",
)
CONSTRAINTS = ("Never touch src/app/legacy.py.", "Use httpx instead of requests.", "We decided to keep RetryPolicy.")


_WORDS = st.lists(st.sampled_from(FACT_POOL), min_size=0, max_size=4).map(" ".join)
_STEP_KIND = st.sampled_from(("user", "assistant", "tools", "tools"))
_FILLER = st.sampled_from((10, 300, 1500))
_CONSTRAINT = st.sampled_from(CONSTRAINTS)


@st.composite
def fact_conversations(draw) -> list[Message]:
    """Conversations whose messages mention facts from a small pool, so that facts recur, are removed and reused."""
    messages = [system()]
    for step in range(draw(st.integers(2, 24))):
        kind = draw(_STEP_KIND)
        filler = "x" * draw(_FILLER)
        if kind == "user":
            messages.append(user(f"{draw(_WORDS)} {draw(_CONSTRAINT)} {filler}"))
        elif kind == "assistant":
            messages.append(assistant(f"step {step}: {draw(_WORDS)}"))
        else:
            messages.append(assistant(f"checking {draw(_WORDS)}", calls=((f"t{step}", "bash"),)))
            messages.append(tool(f"t{step}", f"{draw(_WORDS)} {filler}"))
    return messages


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fact_conversations(),
    st.sampled_from(
        [
            {"kind": "sliding_window", "window": 3},
            {"kind": "hard_clear", "keep_recent": 2},
            {"kind": "observation_masking", "keep_recent": 1},
            {"kind": "summarize_full"},
        ]
    ),
)
def test_bit_accounting_equals_the_set_definitions(messages, strategy):
    if not any(m.role == "assistant" for m in messages):
        return
    result = wb.replay(
        Session.from_messages(messages),
        {
            "trigger": {"kind": "token_threshold", "threshold": 200},
            "strategy": strategy,
            "context_limit": 100_000,
            "max_output": 100,
        },
    )
    got = [(set(a.removed), set(a.retained), set(a.needed)) for a in analyse(result).compactions]
    assert got == _naive(result)


@settings(max_examples=60, deadline=None)
@given(
    conversations(max_steps=12),
    st.lists(st.tuples(st.integers(0, 60), st.lists(st.integers(0, 60), max_size=4), st.booleans()), max_size=6),
)
def test_unions_carried_over_from_the_previous_context_equal_a_fresh_union(messages, edits):
    """The fact accounting takes each compaction's union from where its result stops sharing the
    previous result's messages; whatever the contexts, that is the union of the whole context."""
    index = messages_index(messages[: len(messages) // 2])  # the rest are foreign to the index
    unions = _PrefixUnions(index, None)
    context: list[Message] = []
    for keep, added, copies in edits:
        picked = [messages[i % len(messages)] for i in added] if messages else []
        context = context[: keep % (len(context) + 1)] + [m.replace() if copies else m for m in picked]
        assert unions.union(context) == index.union(context)


@given(st.lists(st.integers(0, 9), max_size=30), st.lists(st.integers(0, 12), max_size=30))
def test_removed_messages_are_those_of_before_missing_from_after_even_when_repeated(before, after):
    """Whatever the two contexts share at their ends, and even when a message object appears twice
    (a user's strategy may repeat one), the removed messages are those of `before` not in `after`."""
    pool = [user(f"message {i}") for i in range(13)]
    first, second = [pool[i] for i in before], [pool[i] for i in after]
    expected = tuple(m for m in first if all(m is not n for n in second))
    assert removed_from(first, second) == expected
    assert all(a is b for a, b in zip(removed_from(first, second), expected, strict=True))


_TEXT_PIECES = (
    "Src/App.py",
    "src/app.py",
    "'src'/app.py",
    "run  the\ttests",
    "run the tests",
    "\u201cQuoted\u201d",
    "quoted",
    "  ",
    "\n",
    "x",
    "ÉTÉ",
    "été",
    "\0",
    "\u0130",
    "i\u0307",
    "i",
    "\u212a",
    "k",
    "K",
    "\u2192",
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(_TEXT_PIECES), max_size=6).map("".join), min_size=1, max_size=8),
    st.lists(st.sampled_from(_TEXT_PIECES), min_size=1, max_size=3).map("".join),
)
@example(["quoted", "x \u201cquoted\u201d", "run\nthe tests", "the tests"], "run the  tests")
@example(["a\0b", "a", "b"], "a\0b")
@example(["\u212aey", "KEY", "\u0130d", "id"], "k")
@example(["\u0130d", "x"], "i\u0307d")
def test_the_holders_of_a_string_are_the_messages_whose_normalised_text_has_it(texts, wanted):
    messages = [user(text) if i % 2 else assistant(text, calls=((f"c{i}", "bash"),)) for i, text in enumerate(texts)]
    index = messages_index(messages)
    wanted = normalize_text(wanted)
    if not wanted:
        return
    expected = {
        id(m) for m in messages if wanted in normalize_text("\n".join([m.text, *(c.arguments for c in m.tool_calls)]))
    }
    assert index.holders(wanted) == expected
    assert index.holders(wanted) is index.holders(wanted)
