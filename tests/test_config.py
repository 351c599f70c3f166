"""Replay configs and the kind registry: validation, TOML, user-registered kinds, spec round trips."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import workbench as wb
from workbench.config import parse_config
from workbench.registry import kinds, spec_of
from workbench.replay import replay

DESIGN_EXAMPLE = """
name = "split-summary-80"
tokenizer = "cl100k_base"
context_limit = 32000
max_output = 4096
summarizer = "workbench/extractive"
summarizer_options = { temperature = 0 }
on_failure = "fatal"
trigger = { kind = "utilization", ratio = 0.8 }
strategy = { kind = "summarize_split", preserve = 0.4 }
"""

DESIGN_TRIGGERS = {"token_threshold", "utilization", "stat_threshold", "pressure", "guard", "any", "all"}
DESIGN_STRATEGIES = {
    "sliding_window",
    "hard_clear",
    "trim",
    "tool_result_truncation",
    "observation_masking",
    "summarize_progressive",
    "summarize_full",
    "summarize_split",
    "adaptive_chunking",
    "guard_select",
    "pipeline",
    "clear_tool_uses",
    "handoff",
}


def test_every_design_kind_is_registered():
    assert DESIGN_TRIGGERS <= set(kinds("trigger"))
    assert DESIGN_STRATEGIES <= set(kinds("strategy"))


def test_the_design_example_parses_from_inline_toml_and_from_a_file(tmp_path):
    inline = parse_config(DESIGN_EXAMPLE)
    path = tmp_path / "split.toml"
    path.write_text(DESIGN_EXAMPLE)
    from_file = parse_config(path)
    assert inline == from_file
    assert inline.name == "split-summary-80" and inline.tokenizer == "cl100k_base"
    defaults = spec_of(wb.build_strategy({"kind": "summarize_split"}))
    assert inline.strategy == {**defaults, "kind": "summarize_split", "preserve": 0.4}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"on_failure": "ignore"}, "on_failure must be one of 'fatal', 'fallback', not 'ignore'"),
        ({"context_limit": 0}, "context_limit must be an integer >= 1, not 0"),
        ({"calibration": "fitted"}, "calibration must be one of 'none', 'recorded'"),
        ({"overflow_retry": "yes"}, "overflow_retry must be true or false, or none"),
        ({"evaluator": 3}, "evaluator must be a string, or none"),
        ({"evaluator_options": "fast"}, "evaluator_options must be a table"),
        ({"max_output": 200_000}, "must be below context_limit"),
        ({"tokenizer": "bert"}, "unknown tokenizer 'bert'"),
        ({"colour": "blue"}, "unknown config key 'colour'; valid: name, tokenizer"),
        ({"trigger": {"kind": "sometimes"}}, "unknown trigger kind 'sometimes'; valid kinds: all, any"),
        ({"strategy": {"kind": "sliding_window"}}, "missing required parameter 'window'"),
        ({"strategy": {"kind": "sliding_window", "window": 0}}, "sliding_window.*window must be an integer >= 1"),
    ],
)
def test_bad_configs_name_the_offender(change, message):
    spec = {"trigger": {"kind": "pressure"}, "strategy": {"kind": "sliding_window", "window": 3}} | change
    with pytest.raises(wb.ConfigError, match=message):
        parse_config(spec)


def test_invalid_toml_names_the_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("trigger = { kind = ")
    with pytest.raises(wb.ConfigError, match="broken.toml: invalid TOML"):
        parse_config(path)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '[strategy]\nkind = "trim"\n',
            r"missing.toml: the config has no \[trigger\] table; add one such as \[trigger\] "
            r'kind = "utilization"',
        ),
        ('name = "mine"\n[trigger]\nkind = "pressure"\n', r"missing.toml: config 'mine' has no \[strategy\] table"),
    ],
)
def test_a_missing_table_names_the_file_and_shows_one(tmp_path, text, message):
    path = tmp_path / "missing.toml"
    path.write_text(text)
    with pytest.raises(wb.ConfigError, match=message):
        parse_config(path)


def test_a_config_key_written_under_a_table_says_where_it_belongs():
    """In TOML every key after `[trigger]` belongs to the trigger: a config key there is a
    parameter the trigger does not know, and the error says how to set it for the config."""
    text = '[trigger]\nkind = "pressure"\ncontext_limit = 50000\n[strategy]\nkind = "trim"\n'
    with pytest.raises(
        wb.ConfigError,
        match=r"unknown parameter 'context_limit'.*a key written after \[trigger\] "
        r"belongs to it: to set 'context_limit' for the config, write it before",
    ):
        parse_config(text)
    assert (
        parse_config('context_limit = 50000\n[trigger]\nkind = "pressure"\n[strategy]\nkind = "trim"\n').context_limit
        == 50000
    )


def test_a_config_may_start_from_a_preset():
    """`preset = "NAME"` with the table's own keys on top: a parameter tunes the preset's kind, a table
    with another kind replaces it; a preset's name alone is a config too."""
    bare = parse_config("gent-sliding-window")
    assert bare == parse_config(wb.preset("gent-sliding-window"))
    assert bare.name == "gent-sliding-window" and bare.strategy["window"] == 10
    tuned = parse_config('preset = "gent-sliding-window"\ncontext_limit = 64000\nstrategy = { window = 4 }')
    assert (tuned.name, tuned.context_limit, tuned.strategy["kind"], tuned.strategy["window"]) == (
        "gent-sliding-window",
        64000,
        "sliding_window",
        4,
    )
    assert tuned.trigger == bare.trigger
    swapped = parse_config({"preset": "gent-sliding-window", "name": "mine", "strategy": {"kind": "trim"}})
    assert (swapped.name, swapped.strategy["kind"], swapped.trigger) == ("mine", "trim", bare.trigger)
    assert "window" not in swapped.strategy


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            {"preset": "gent-slidng-window"},
            "unknown preset 'gent-slidng-window'; valid presets: as-recorded, .*; "
            "did you mean 'gent-sliding-window'\\?",
        ),
        ({"preset": 3}, "'preset' must be a preset name, not 3"),
        (
            "as-recordd",
            "config 'as-recordd' is neither a TOML file, inline TOML nor a preset; presets: as-recorded, .*"
            "did you mean 'as-recorded'\\?",
        ),
        ("missing.toml", "config file missing.toml does not exist"),
        ("/", "^config / is a folder, not a TOML file$"),
        ("", "the config has no \\[trigger\\] table"),  # empty text is empty TOML, not the current folder
        ("nowhere/missing.toml", "config file nowhere/missing.toml does not exist \\(there is no folder nowhere in "),
        ({"presett": "as-recorded"}, "unknown config key 'presett'; .*did you mean 'preset'\\?"),
    ],
)
def test_a_preset_that_does_not_exist_is_named(spec, message):
    with pytest.raises(wb.ConfigError, match=message):
        parse_config(spec)


def test_secrets_are_left_out_of_the_stored_spec():
    cfg = parse_config(
        {
            "trigger": {"kind": "pressure"},
            "strategy": {"kind": "sliding_window", "window": 2},
            "summarizer_options": {"api_key": "sk-secret", "temperature": 0},
        }
    )
    assert "api_key" not in cfg.to_dict()["summarizer_options"]
    assert cfg.to_dict(redact=False)["summarizer_options"]["api_key"] == "sk-secret"


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "any", "triggers": [{"kind": "pressure", "turns": 3}, {"kind": "guard"}]},
        {"kind": "stat_threshold", "counters": {"iterations": 10}, "gauges": {"context_tokens": 5000}},
    ],
)
def test_trigger_specs_round_trip(spec):
    built = wb.build_trigger(spec)
    assert spec_of(wb.build_trigger(spec_of(built))) == spec_of(built)


@pytest.mark.parametrize(
    "spec",
    [
        {
            "kind": "pipeline",
            "steps": [{"kind": "tool_result_truncation", "max_chars": 500}, {"kind": "sliding_window", "window": 4}],
        },
        {"kind": "guard_select"},
        {"kind": "summarize_progressive", "keep_recent": 2},
    ],
)
def test_strategy_specs_round_trip(spec):
    built = wb.build_strategy(spec)
    assert spec_of(wb.build_strategy(spec_of(built))) == spec_of(built)


def test_a_user_kind_registered_by_decorator_is_usable_from_toml():
    @wb.register_strategy("keep_first_and_last_test")
    @dataclass(frozen=True)
    class KeepFirstAndLast:
        """Keep the system prompt, the first user request and the last step."""

        last: int = 1

        def compact(self, context, env):
            steps = context.steps
            return [*context.system, *steps[0].messages, *[m for s in steps[-self.last :] for m in s.messages]]

    from builders import conversation

    result = replay(
        conversation(10),
        """
        context_limit = 50000
        trigger = { kind = "pressure", turns = 5 }
        strategy = { kind = "keep_first_and_last_test", last = 2 }
    """,
    )
    assert result.compactions and result.config.strategy == {"kind": "keep_first_and_last_test", "last": 2}
    assert result.compactions[0].messages_after == 1 + 1 + 4
