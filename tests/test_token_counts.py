"""Token counts are counted once per message per tokenizer and stored beside the message: at import
for the default tokenizer, on a run's first use for another; a later run (one config more) counts
no message of the sessions again, and its results are those of counting afresh."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from builders import conversation

from workbench.config import ReplayConfig, parse_config
from workbench.experiments import run_experiment
from workbench.replay import replay
from workbench.session import Message, Session
from workbench.store import Store
from workbench.tokens import DEFAULT_TOKENIZER, HeuristicTokenizer, TiktokenTokenizer, counted_text, message_tokens

CONFIGS = [
    {
        "name": "clear-cl100k",
        "tokenizer": "cl100k_base",
        "trigger": {"kind": "utilization", "ratio": 0.5},
        "strategy": {"kind": "hard_clear", "keep_recent": 4},
    },
    {
        "name": "mask-heuristic",
        "trigger": {"kind": "utilization", "ratio": 0.5},
        "strategy": {"kind": "observation_masking", "keep_recent": 2},
    },
]
#: The config a second run adds: a tokenizer the first run met, calibrated against the recorded usage.
ADDED = {
    "name": "clear-cl100k-calibrated",
    "tokenizer": "cl100k_base",
    "calibration": "recorded",
    "trigger": {"kind": "utilization", "ratio": 0.6},
    "strategy": {"kind": "hard_clear", "keep_recent": 8},
}
#: Columns of a results frame that differ from run to run whatever the counts.
UNSTABLE = {"run_id", "duration_s", "created_at", "finished_at"}


def spec(*configs: dict) -> dict:
    return {
        "name": "token-counts",
        "dataset": "tc",
        "defaults": {"context_limit": 6000, "max_output": 500},
        "config": list(configs),
    }


def billed_sessions() -> list[Session]:
    """Three sessions whose calls carry the provider's usage (so `calibration = "recorded"` fits)."""

    def billed(messages: list[Message]) -> list[Message]:
        return [
            m.replace(metadata={**m.metadata, "usage": {"input_tokens": 900 + 41 * i, "output_tokens": 40}})
            if m.role == "assistant"
            else m
            for i, m in enumerate(messages)
        ]

    return [Session.from_messages(billed(conversation(18 + 3 * i, result_chars=700)), dataset="tc") for i in range(3)]


def fresh(message: Message) -> Message:
    """The message with an empty token cache (counted afresh)."""
    return message.replace()


def imported(path: str) -> list[Session]:
    sessions = billed_sessions()
    with Store(path) as store:
        store.import_sessions(sessions, dataset="tc")
    return sessions


@pytest.fixture
def counted(monkeypatch) -> list[str]:
    """Every text the heuristic and tiktoken tokenizers count from now on, in this process."""
    texts: list[str] = []
    for cls in (HeuristicTokenizer, TiktokenTokenizer):
        count, count_batch = cls.count, cls.count_batch

        def counting(self, text, _count=count):
            texts.append(text)
            return _count(self, text)

        def counting_batch(self, batch, _count_batch=count_batch):
            texts.extend(batch)
            return _count_batch(self, batch)

        monkeypatch.setattr(cls, "count", counting)
        monkeypatch.setattr(cls, "count_batch", counting_batch)
    return texts


def session_texts(sessions: list[Session]) -> set[str]:
    return {counted_text(m) for s in sessions for m in s.messages} - {""}


def assert_same_cells(a, b) -> None:
    """The two results frames hold the same cells with the same metrics (NaN equal to NaN)."""

    def ordered(frame):
        kept = frame.drop(columns=[c for c in frame.columns if c in UNSTABLE])
        return kept.sort_values(["config", "session_id"]).reset_index(drop=True)

    pd.testing.assert_frame_equal(ordered(a), ordered(b))


def test_the_default_tokenizer_is_the_configs_default():
    default = next(f.default for f in dataclasses.fields(ReplayConfig) if f.name == "tokenizer")
    assert DEFAULT_TOKENIZER == default


def test_an_import_stores_every_messages_count_under_the_default_tokenizer(tmp_path, counted):
    sessions = imported(str(tmp_path / "wb.duckdb"))
    assert session_texts(sessions) <= set(counted)  # counted at import...
    counted.clear()
    with Store(str(tmp_path / "wb.duckdb")) as store:
        for session in sessions:
            stored = store.token_counts(session.id)
            assert stored == {
                DEFAULT_TOKENIZER: [message_tokens(fresh(m), DEFAULT_TOKENIZER) for m in session.messages]
            }
        loaded = store.load_session(sessions[0].id)
    counted.clear()
    replay(loaded, parse_config(CONFIGS[1]))
    assert not session_texts([loaded]) & set(counted)  # ...and read back by a replay, not counted again


def test_a_second_run_with_a_config_added_counts_no_message_again_and_equals_a_fresh_run(tmp_path, counted):
    path = str(tmp_path / "wb.duckdb")
    sessions = imported(path)
    texts = session_texts(sessions)
    counted.clear()
    first = run_experiment(spec(*CONFIGS), db=path)
    assert first.progress.failed_cells == 0
    assert texts <= set(counted)  # cl100k met for the first time: every message counted once
    counted.clear()
    second = run_experiment(spec(*CONFIGS, ADDED), db=path)
    assert second.id != first.id and len(second.results) == 3 * len(sessions)
    assert not texts & set(counted)

    other = str(tmp_path / "fresh.duckdb")
    imported(other)
    afresh = run_experiment(spec(*CONFIGS, ADDED), db=other)
    assert_same_cells(second.results, afresh.results)


@pytest.mark.parametrize(
    ("tokenizer", "executor"),
    [
        ("heuristic", "local"),
        ("o200k_base", "local"),
        # workers count what they need but cannot store it: the run's process stores it first
        pytest.param("o200k_base", "processes", marks=pytest.mark.slow),
    ],
)
def test_a_run_stores_the_counts_a_database_lacks(tmp_path, counted, tokenizer, executor):
    path = str(tmp_path / "wb.duckdb")
    sessions = imported(path)
    with Store(path) as store:  # a database imported before imports stored counts
        store.connection.execute("DELETE FROM token_counts")
    config = {**CONFIGS[1], "name": "mask", "tokenizer": tokenizer}
    run_experiment(spec(config), db=path, executor=executor)
    with Store(path) as store:
        for session in sessions:
            assert store.token_counts(session.id) == {
                tokenizer: [message_tokens(fresh(m), tokenizer) for m in session.messages]
            }
    counted.clear()
    run_experiment(spec(config, {**config, "name": "mask-8", "strategy": {"kind": "observation_masking"}}), db=path)
    assert not session_texts(sessions) & set(counted)


@pytest.mark.parametrize("config", [CONFIGS[0], ADDED], ids=lambda c: c["name"])
def test_stored_counts_replay_as_counting_afresh_does(tmp_path, config):
    path = str(tmp_path / "wb.duckdb")
    sessions = imported(path)
    run_experiment(spec(config), db=path)  # stores the counts of the config's tokenizer
    parsed = parse_config(config)
    with Store(path) as store:
        for session in sessions:
            loaded = store.load_session(session.id)
            assert all(parsed.tokenizer in m._token_cache for m in loaded.messages)
            recounted = dataclasses.replace(session, messages=tuple(fresh(m) for m in session.messages))
            stored, direct = replay(loaded, parsed), replay(recounted, parsed)
            assert stored.metrics == direct.metrics
            assert [c.context_tokens for c in stored.calls] == [c.context_tokens for c in direct.calls]
