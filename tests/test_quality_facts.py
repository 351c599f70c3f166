"""Fact extraction (workbench.quality.facts): kinds, normalisation, the per-message cache."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from workbench.quality.facts import (
    content_words,
    extract_constraints,
    extract_facts,
    message_facts,
    normalize,
    normalize_path,
    text_facts,
)
from workbench.session import Message, ToolCall


@pytest.mark.parametrize(
    ("text", "kind", "key"),
    [
        ("see src/ledgerly/tax.py now", "path", "src/ledgerly/tax.py"),
        ("open ./src/app.py", "path", "src/app.py"),
        ("open /workspace/ledgerly/src/app.py", "path", "src/app.py"),
        ("edit `tests/test_tax.py`", "path", "tests/test_tax.py"),
        ("config in pyproject.toml.", "path", "pyproject.toml"),
        ("call compute_tax_rate(items)", "identifier", "compute_tax_rate"),
        ("the InvoiceLine class", "identifier", "invoiceline"),
        ("ticket GEO-7969 please", "identifier", "geo-7969"),
        ("MAX_RETRIES = 5 in config", "number", "max_retries = 5"),
        ("it took 3.5s to run", "number", "3.5s"),
        ("coverage is 99.5% now", "number", "99.5%"),
        ("12 passed in 1.2s", "number", "12passed"),
        ("upgrade to 1.2.3 first", "number", "1.2.3"),
        ("docs at https://example.com/a/b?x=1).", "url", "https://example.com/a/b?x=1"),
        ("connect to db-3.staging.internal:5432", "url", "db-3.staging.internal:5432"),
        ("src/shipyard/plan.py:50:def main", "path", "src/shipyard/plan.py"),
        ("see src/app.py:12 for it", "path", "src/app.py"),
        ("FAILED tests/test_x.py::test_login_fails", "path", "tests/test_x.py"),
        ("FAILED tests/test_x.py::test_login_fails", "identifier", "test_login_fails"),
        ("compare dbe5100..66e1a0a now", "commit", "66e1a0a"),
        ("raised KeyError: 'point_code'", "error", "keyerror"),
        ("raised KeyError: 'point_code'", "error", "keyerror: point_code"),
        ("error: could not resolve host", "error", "error: could not resolve host"),
        ("reverted 3f2a9bc1 yesterday", "commit", "3f2a9bc1"),
        ("run `pytest -x tests/test_tax.py` again", "command", "pytest -x tests/test_tax.py"),
        ("$ git log --oneline -3", "command", "git log --oneline -3"),
    ],
)
def test_extracts_each_kind_normalised(text, kind, key):
    found = {(f.kind, f.key) for f in extract_facts(text)}
    assert (kind, key) in found, found


@pytest.mark.parametrize("text", ["and/or the plain words here", "a b c", "12 apples", "deadbeef", ""])
def test_plain_text_gives_no_salient_facts(text):
    assert [f for f in extract_facts(text) if f.kind in ("path", "commit", "number", "error")] == []


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("Please use httpx instead of requests.", "please use httpx instead of requests"),
        ("We must keep Python 3.9 compatible!", "we must keep python 3.9 compatible"),
        ("Do not add new dependencies.", "do not add new dependencies"),
    ],
)
def test_user_constraints_are_sentences(text, key):
    assert [f.key for f in extract_constraints(f"Hello there. {text} Thanks a lot")] == [key]


_CUE_WORDS = [
    "must",
    "MUST",
    "Don't",
    "do not",
    "never",
    "Should",
    "avoid",
    "instead of",
    "Please use",
    "keep it",
    "compatible",
    "rather than",
    "decided to",
    "\u212aeep it",
    "mu\u017ft",
    "\u00e9must",
    "must\u00e9",
    "avo\u0131d",
    "\u0130nstead of",
    "\u0130",
]
_FILLER = [
    "we",
    "the",
    "API",
    "x.py",
    "3.9",
    ".",
    "!",
    "?",
    "..",
    "\n",
    " ",
    "  ",
    "\u2192",
    "caf\u00e9",
    "_",
    "-",
    "'",
]


@given(st.lists(st.sampled_from(_CUE_WORDS + _FILLER + ["keep the API", "e.g.", "no new"]), max_size=40).map(" ".join))
@example("We mu\u017ft keep it. Fine \u2192 ok")  # the long s matches "s" only when case is ignored
@example("Fine. We must x. Ok\nnever")
def test_constraints_match_every_sentence_searched_on_its_own_ignoring_case(text):
    """The cues found once in the whole text (lower-cased when it is ASCII) give what searching each
    sentence on its own, ignoring case, gives (non-ASCII letters that match ASCII ones ignoring case
    included)."""
    from workbench.quality.facts import _CONSTRAINT_CUES, _SENTENCES

    expected = [
        sentence
        for sentence in (m.group().strip() for m in _SENTENCES.finditer(text))
        if len(sentence) >= 8 and _CONSTRAINT_CUES.search(sentence)
    ]
    assert [fact.text for fact in extract_constraints(text)] == expected


_PIECES = [
    "src/a.py",
    "compute_rate",
    "KeyError",
    "3.5s",
    "v1.2.3",
    "\u00e9t\u00e9_x",
    "\u2192",
    "\u00a0",
    "caf\u00e9.py",
    "(",
    ")",
    ",",
    '"',
    "'",
    " ",
    "\n",
    "\t",
    "x\u2192y_z",
    "\ud800",
    "na\u00efve",
    "db-3.local:5432",
    "#42",
    "@user",
]


@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
@example("a a\u2192b src/a.py\u00a0src/a.py")
def test_single_tokens_are_classified_as_the_token_pattern_splits_them(text):
    """The byte-level token pass finds the facts `_TOKEN.findall` finds, keys in the same order of first mention."""
    from workbench.quality.facts import _TOKEN, _classify, _token_facts

    found: list = []
    _token_facts(text, found)
    expected = [fact for token in dict.fromkeys(_TOKEN.findall(text)) for fact in _classify(token)]
    assert list(dict.fromkeys(f.key for f in found)) == list(dict.fromkeys(f.key for f in expected))
    assert {f.key: f for f in reversed(found)} == {f.key: f for f in reversed(expected)}  # the first of each key


_ERROR_PIECES = [
    "error",
    "Error",
    "ERROR",
    "fatal",
    "FATAL",
    "panic",
    "rror",
    "atal",
    "KeyError",
    "os.Exit",
    "Exception",
    "Interrupt",
    "Failure",
    ":",
    "[E0308]",
    "[",
    "]",
    "-",
    "_",
    ".",
    " ",
    "\t",
    "\n",
    "x",
    "bad port",
    "\u00e9",
    "\u2192",
]


@given(st.lists(st.sampled_from(_ERROR_PIECES), max_size=40).map("".join))
@example("xerror: no\nerror[E0308]: mismatched\n-fatal: a\nKeyError: 'k'")
def test_error_patterns_tried_at_their_cues_find_what_a_scan_finds(text):
    """The error passes try their pattern only where a cue says a match could start; that finds
    exactly the matches a scan of the whole text finds."""
    from workbench.quality.facts import (
        _ERROR_CUES,
        _ERROR_WITH_MESSAGE,
        _GENERIC_ERROR,
        _GENERIC_ERROR_CUES,
        _cued_matches,
    )

    for pattern, cues in ((_ERROR_WITH_MESSAGE, _ERROR_CUES), (_GENERIC_ERROR, _GENERIC_ERROR_CUES)):
        assert [m.span() for m in _cued_matches(pattern, text, cues)] == [m.span() for m in pattern.finditer(text)]


@given(
    st.lists(
        st.sampled_from(["$", "$ ", "$\t", " ", "\t", "\n", "ls", "x", " $ git log", "a$ b", "\u2192"]), max_size=16
    ).map("".join)
)
@example("$ git status\n  $ pytest -q\n\t$\tls -la\nx $ no\n$ \n   $ ok")
def test_command_lines_found_from_their_cues_are_what_a_scan_finds(text):
    """`$ command` lines are looked for only at lines whose first non-blank character is a `$`
    followed by a blank; that finds exactly the matches a scan of the whole text finds."""
    from workbench.quality.facts import _COMMAND_LINE, _command_lines

    assert [m.span() for m in _command_lines(text)] == [m.span() for m in _COMMAND_LINE.finditer(text)]


def test_the_characters_case_ties_to_ascii_letters_are_the_ones_set_aside():
    """Constraint cues are searched lowered and probe answers in bytes with their ASCII letters
    lowered, except in texts holding a character of `CASE_ODD`; that is exact when it holds every
    character ignoring case matches with an ASCII letter and every one whose lower case holds one
    (the whole of Unicode checked, as this Python knows it)."""
    from workbench.quality.facts import CASE_ODD

    letter = re.compile("[a-z]", re.IGNORECASE)
    others = [chr(code) for code in range(0x80, 0x110000)]
    assert set(CASE_ODD) == {c for c in others if letter.fullmatch(c)}
    assert {c for c in others if any(x.isascii() for x in c.lower())} == {"\u0130", "\u212a"} <= set(CASE_ODD)


_PHRASE_PIECES = [
    "KeyError: bad key",
    "error: no such file",
    "error[E0308]: mismatch",
    "fatal: not a repo",
    "panic: boom",
    "https://example.com/a",
    "12 ms",
    "1,5.7 seconds",
    "MAX_RETRIES = 5",
    "X_Y:'v'",
    "`pytest -q`",
    "`two words`",
    "$ git status",
    "  $ make test",
    "src/a.py",
    "Error:",
    "rror:",
    "]:",
    "[",
    "$",
    "`",
    "3",
    "ms",
    ".",
    ",",
    ":",
    "=",
    "_",
    "A",
    " ",
    "\t",
    "\n",
    "\u2192",
    "\u00e9",
]
_phrase_texts = st.lists(st.sampled_from(_PHRASE_PIECES), max_size=12).map("".join)


@given(st.lists(_phrase_texts, max_size=6))
@example(["KeyError", ": x", "$", " git log", "1", " ms"])
def test_texts_extracted_together_give_what_each_gives_alone(texts):
    """The passes for facts spanning words run once over the texts joined: what each text gets back
    is what extracting it alone gives (no match spans two texts, none is lost at their seam)."""
    from workbench.quality.facts import _extract, _extract_many

    assert _extract_many(texts) == [_extract(text) for text in texts]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["user", "assistant", "tool", "system"]), _phrase_texts, st.lists(_phrase_texts, max_size=2)
        ),
        max_size=6,
    )
)
def test_messages_primed_together_get_the_facts_each_gets_alone(specs):
    from workbench.quality.facts import prime

    def build(role: str, text: str, arguments: list[str]) -> Message:
        calls = (
            tuple(
                ToolCall(f"c{i}", "bash", json.dumps({"command": a, "path": a, "note": a}))
                for i, a in enumerate(arguments)
            )
            if role == "assistant"
            else ()
        )
        return Message(role=role, content=text, tool_calls=calls, tool_call_id="c0" if role == "tool" else None)

    together = [build(*spec) for spec in specs]
    prime(together)
    alone = [message_facts(build(*spec)) for spec in specs]
    assert [list(message_facts(m).items()) for m in together] == [list(facts.items()) for facts in alone]


def test_constraints_come_from_user_messages_only():
    text = "You must not touch the API in src/api.py."
    assert any(f.kind == "constraint" for f in message_facts(Message(role="user", content=text)).values())
    for role in ("assistant", "system"):
        facts = message_facts(Message(role=role, content=text))
        assert "src/api.py" in facts and not any(f.kind == "constraint" for f in facts.values())


def test_tool_call_arguments_give_commands_and_paths():
    call = ToolCall("c1", "bash", json.dumps({"command": "pytest -q tests/test_x.py"}))
    read = ToolCall("c2", "read_file", json.dumps({"path": "./src/pkg/mod.py"}))
    facts = message_facts(Message(role="assistant", tool_calls=(call, read)))
    assert facts["pytest -q tests/test_x.py"].kind == "command"
    assert facts["src/pkg/mod.py"].kind == "path"
    assert "tests/test_x.py" in facts


def test_message_facts_are_cached_per_message_and_read_only():
    message = Message(role="tool", content="see src/a.py", tool_call_id="c1")
    first = message_facts(message)
    assert message_facts(message) is first
    with pytest.raises(TypeError):
        first["x"] = first["src/a.py"]  # type: ignore[index]  # the mapping is read-only
    twin = message.replace()
    assert message_facts(twin) is not first and dict(message_facts(twin)) == dict(first)


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("./src/a.py", "src/a.py"),
        ("/workspace/repo/src/a.py", "src/a.py"),
        ("/testbed/src/a.py", "src/a.py"),
        ("/home/me/proj/src/a.py", "src/a.py"),
        ("'SRC/A.py'", "src/a.py"),
        ("/usr/lib/x.py", "/usr/lib/x.py"),
    ],
)
def test_path_normalisation(path, key):
    assert normalize_path(path) == key


def test_normalize_drops_case_quotes_and_spacing():
    assert normalize("  `Foo`   Bar. ") == "foo bar"
    assert content_words("Please use the httpx library") == {"httpx", "library"}


@given(st.text(max_size=300))
def test_extraction_never_fails_and_keys_are_normalised(text):
    for fact in text_facts(text, constraints=True).values():
        assert fact.key == fact.key.lower()
        assert fact.kind in ("path", "identifier", "number", "url", "error", "commit", "command", "constraint")


def test_a_collection_under_the_cache_lock_does_not_deadlock():
    """A garbage collection can run the caches' weak-reference callbacks in a thread that holds the
    cache lock (any allocation under it may collect a message); they must not wait for it forever."""
    import gc
    import threading

    from workbench.quality import facts, trace

    def collect_under_locks() -> None:
        message = Message(role="tool", content="Traceback: KeyError in src/app.py")
        facts.message_facts(message)
        facts.message_text(message)
        trace.memo(message, "probe", lambda: 1)
        with facts._CACHE_LOCK, trace._MEMO_LOCK:
            del message
            gc.collect()

    worker = threading.Thread(target=collect_under_locks, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "a weak-reference callback waited for a lock its own thread holds"


def test_facts_come_in_order_of_first_mention_in_every_process():
    """Which spelling of a fact is kept, and which facts a probe asks about, follow the order facts
    are found in: it must not depend on the interpreter's string hashing (`PYTHONHASHSEED`)."""
    import os
    import subprocess
    import sys

    text = (
        "Edit ./src/app.py, then src/app.py again; helper_value and HelperClass in lib/util.py, "
        "bump v1.2.3 to v1.2.4, see docs.example.com and tests/test_app.py, run_tests_now, 42%, "
        "ConfigError in config_loader, parse_args_fast, src/other_module.py, TOKEN_LIMIT, cacheWarmup."
    )
    script = (
        "import sys; from workbench.quality.facts import message_facts; from workbench.session import Message; "
        "print([f.text for f in message_facts(Message(role='user', content=sys.argv[1])).values()])"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script, text],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in range(1, 6)
    }
    assert len(outputs) == 1
    assert message_facts(Message(role="user", content=text))["src/app.py"].text == "./src/app.py"  # first spelling
