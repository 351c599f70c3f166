"""Presets in the window in use: one default window everywhere; a threshold that cannot fire is scaled, noted;
`as-recorded` says when nothing was recorded."""

from __future__ import annotations

import threading
import warnings

import pytest
from builders import conversation
from click.testing import CliRunner

from workbench import compaction, config
from workbench.cli import main
from workbench.cli.data import init_database
from workbench.config import parse_config
from workbench.errors import NothingRecordedWarning
from workbench.experiments import load_experiment, run_experiment
from workbench.presets import FIRING_SHARE
from workbench.replay import compact, replay
from workbench.session import Session


def test_the_library_cli_and_app_share_one_default_window():
    import inspect

    from workbench.ui import compare

    assert config.DEFAULT_CONTEXT_LIMIT is compaction.DEFAULT_CONTEXT_LIMIT
    assert parse_config("no-compaction").context_limit == config.DEFAULT_CONTEXT_LIMIT
    assert compaction.CompactionEnv().context_limit == config.DEFAULT_CONTEXT_LIMIT
    assert inspect.signature(compact).parameters["context_limit"].default == config.DEFAULT_CONTEXT_LIMIT
    assert not hasattr(compare, "DEFAULT_CONTEXT_LIMIT")  # the page reads the library's


@pytest.mark.parametrize(
    ("window", "threshold"),
    [(32_000, int(FIRING_SHARE * 27_904)), (128_000, int(FIRING_SHARE * 123_904)), (300_000, 200_000)],
)
def test_agent001s_threshold_is_scaled_to_a_window_it_cannot_fire_in(window, threshold):
    resolved = parse_config({"preset": "agent001-full-summary", "context_limit": window})
    assert resolved.trigger["threshold"] == threshold
    if threshold == 200_000:
        assert resolved.notes == ()
    else:
        (note,) = resolved.notes
        assert "200,000" in note and f"{threshold:,}" in note and f"{window - 4096:,}" in note


def test_agent001_compacts_and_completes_in_a_32k_and_a_128k_window():
    session = conversation(120, result_chars=6000)  # about 190k tokens of history
    for window in (32_000, 128_000):
        result = replay(session, {"preset": "agent001-full-summary", "context_limit": window}, measure=False)
        assert result.termination == "completed", (window, result.error)
        assert result.compactions


def test_a_threshold_the_caller_sets_is_never_scaled():
    resolved = parse_config(
        {"preset": "agent001-full-summary", "context_limit": 32_000, "trigger": {"threshold": 100_000}}
    )
    assert resolved.trigger["threshold"] == 100_000 and resolved.notes == ()


def test_the_aisopod_guard_is_scaled_to_warn_inside_the_window():
    resolved = parse_config({"preset": "aisopod-guard", "context_limit": 32_000})
    warn_point = resolved.trigger["warn_threshold"] * resolved.trigger["hard_limit"]
    assert warn_point < 27_904 and "128,000" in resolved.notes[0]


def test_an_experiment_scales_a_preset_and_its_notes_say_so():
    spec = load_experiment(
        {
            "name": "x",
            "dataset": "samples",
            "defaults": {"context_limit": 32_000},
            "config": [
                {"preset": "agent001-full-summary"},
                {"preset": "agent001-full-summary", "name": "own", "trigger": {"threshold": 25_000}},
            ],
        }
    )
    assert spec.config("agent001-full-summary").config.trigger["threshold"] == int(FIRING_SHARE * 27_904)
    assert spec.config("own").config.trigger["threshold"] == 25_000
    assert len(spec.notes) == 1 and "agent001-full-summary" in spec.notes[0]


def test_the_recorded_strategy_keeps_each_threads_session_apart():
    """Replays of one config in several threads (an experiment's cells) each see their own recording."""

    def recorded(at_call: int) -> Session:
        base = Session.from_messages([m.to_openai() for m in conversation(30)])
        index = [i for i, m in enumerate(base.messages) if m.role == "assistant"][at_call]
        return Session.from_messages(
            [m.to_openai() for m in base.messages],
            metadata={
                "recorded_compactions": [
                    {"call_index": at_call, "message_index": index, "summary": f"summary before call {at_call}"}
                ]
            },
        )

    shared = parse_config("as-recorded")
    found: dict[int, list[int]] = {}

    def run(at_call: int) -> None:
        for _ in range(5):
            result = replay(recorded(at_call), shared, measure=False)
            found.setdefault(at_call, []).extend(e.call_index for e in result.compactions if not e.noop)

    threads = [threading.Thread(target=run, args=(k,)) for k in (5, 12, 20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == {k: [k] * 5 for k in (5, 12, 20)}


@pytest.fixture(scope="module")
def plain_db(tmp_path_factory) -> str:
    """A database with one dataset of sessions that recorded no compaction."""
    from workbench.store import Store

    path = str(tmp_path_factory.mktemp("unrecorded") / "plain.duckdb")
    init_database(path)
    with Store(path) as store:
        store.import_sessions(
            [Session.from_messages([m.to_openai() for m in conversation(n)]) for n in (8, 9, 10)], dataset="plain"
        )
    return path


def test_as_recorded_on_a_dataset_without_recordings_warns_naming_it(plain_db):
    spec = {"name": "unrecorded", "dataset": "plain", "presets": ["no-compaction", "as-recorded"]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_experiment(spec, db=plain_db)
    notes = [str(w.message) for w in caught if issubclass(w.category, NothingRecordedWarning)]
    assert len(notes) == 1 and "as-recorded" in notes[0] and "'plain'" in notes[0] and "3 sessions" in notes[0]


def test_replay_prints_the_window_and_warns_when_the_session_recorded_nothing(plain_db):
    from workbench.store import Store

    with Store(plain_db) as store:
        session_id = store.session_ids(dataset="plain")[0]
    out = CliRunner().invoke(main, ["--db", plain_db, "replay", session_id, "--config", "as-recorded", "--no-calls"])
    assert out.exit_code == 0, out.output
    assert f"window {config.DEFAULT_CONTEXT_LIMIT:,} tokens" in out.output and "tokenizer heuristic" in out.output
    assert f"as-recorded: session {session_id} has no recorded compactions" in out.output
    assert "the same rows as no-compaction" in out.output


def test_the_apps_paired_comparison_does_not_default_to_a_config_that_never_compacted():
    import pandas as pd

    from workbench.ui.experiments import default_partner

    configs = ["no-compaction", "as-recorded", "observation-masking"]
    idle = pd.DataFrame({"config": configs * 2, "compactions": [0, 0, 4, 0, 0, 7]})
    assert default_partner(idle, configs) == 2
    acting = pd.DataFrame({"config": configs, "compactions": [0, 3, 4]})
    assert default_partner(acting, configs) == 1
