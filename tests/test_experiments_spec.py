"""Experiment specs: validation naming the offending key, defaults, matrix expansion, tolerances."""

from __future__ import annotations

import pytest

from workbench.errors import ConfigError
from workbench.experiments import Tolerance, grid, load_experiment, parse_tolerance
from workbench.experiments.spec import SHIPPED_EXPERIMENTS

DESIGN_EXAMPLE = """
name = "window-sweep"
dataset = "samples"
metrics = ["fact_retention", "probe_accuracy"]
concurrency = 8

[defaults]
tokenizer = "cl100k_base"
context_limit = 32000
summarizer = "workbench/extractive"

[[config]]
name = "window"
trigger = { kind = "stat_threshold", counters = { iterations = 10 } }
strategy = { kind = "sliding_window", window = 10 }
matrix = { "strategy.window" = [5, 10, 20] }

[regress]
fact_retention = -0.02
billed_input_tokens = "+5%"
summaries = "exact"
"""


def test_the_design_example_expands_its_matrix_into_named_configs():
    spec = load_experiment(DESIGN_EXAMPLE)
    assert spec.name == "window-sweep"
    assert spec.datasets == ("samples",)
    assert spec.concurrency == 8
    assert spec.metrics == ("fact_retention", "probe_accuracy")
    assert spec.config_names == ["window-5", "window-10", "window-20"]
    windows = [cell.config.to_dict()["strategy"]["window"] for cell in spec.configs]
    assert windows == [5, 10, 20]
    for cell in spec.configs:
        assert cell.config.tokenizer == "cl100k_base"
        assert cell.config.context_limit == 32000
        assert cell.config.name == cell.name
    assert spec.config("window-10").matrix_values == {"strategy.window": 10}


def test_a_two_axis_matrix_is_the_cartesian_product():
    spec = load_experiment(
        {
            "name": "grid",
            "dataset": "samples",
            "config": [
                {
                    "name": "u",
                    "trigger": {"kind": "utilization"},
                    "strategy": {"kind": "hard_clear", "keep_recent": 4},
                    "matrix": {"trigger.ratio": [0.5, 0.8], "strategy.keep_recent": [4, 8]},
                }
            ],
        }
    )
    assert spec.config_names == ["u-0.5-4", "u-0.5-8", "u-0.8-4", "u-0.8-8"]


def test_defaults_merge_into_tables_but_a_different_kind_replaces_the_default_table():
    spec = load_experiment(
        {
            "name": "merge",
            "dataset": "d",
            "defaults": {
                "trigger": {"kind": "utilization", "ratio": 0.5},
                "strategy": {"kind": "hard_clear", "keep_recent": 3},
            },
            "config": [
                {"name": "same-kind", "trigger": {"kind": "utilization", "reactive": False}},
                {"name": "other-kind", "trigger": {"kind": "token_threshold", "threshold": 1000}},
            ],
        }
    )
    same = spec.config("same-kind").config.to_dict()["trigger"]
    assert same["ratio"] == 0.5 and same["reactive"] is False
    other = spec.config("other-kind").config.to_dict()["trigger"]
    assert other["kind"] == "token_threshold" and "ratio" not in other


_CONFIG = {"name": "a", "trigger": {"kind": "utilization"}, "strategy": {"kind": "trim"}}


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({"name": "x", "dataset": "d", "confg": []}, "'confg'"),
        (
            {"name": "x", "config": [{"name": "a", "trigger": {"kind": "utilization"}, "strategy": {"kind": "trim"}}]},
            "needs a dataset",
        ),
        ({"name": "x", "dataset": "d"}, "at least one [[config]]"),
        ({"name": "x", "dataset": "d", "datasets": ["e"], "config": []}, "not both"),
        (
            {
                "name": "x",
                "dataset": "d",
                "concurrency": 0,
                "config": [{"name": "a", "trigger": {"kind": "utilization"}, "strategy": {"kind": "trim"}}],
            },
            "'concurrency'",
        ),
        (
            {
                "name": "x",
                "dataset": "d",
                "config": [{"trigger": {"kind": "utilization"}, "strategy": {"kind": "trim"}}],
            },
            "config #1",
        ),
        (
            {
                "name": "x",
                "dataset": "d",
                "config": [{"name": "a", "trigger": {"kind": "utilization"}, "strategy": {"kind": "slidng_window"}}],
            },
            "config 'a'",
        ),
        (
            {
                "name": "x",
                "dataset": "d",
                "config": [
                    {"name": "a", "trigger": {"kind": "utilization"}, "strategy": {"kind": "trim"}},
                    {"name": "a", "trigger": {"kind": "utilization"}, "strategy": {"kind": "trim"}},
                ],
            },
            "unique",
        ),
        (
            {
                "name": "x",
                "dataset": "d",
                "config": [
                    {
                        "name": "a",
                        "trigger": {"kind": "utilization"},
                        "strategy": {"kind": "trim"},
                        "matrix": {"strategy.keep_recent_turns": []},
                    }
                ],
            },
            "at least one value",
        ),
        (
            {
                "name": "x",
                "dataset": "d",
                "config": [
                    {
                        "name": "a",
                        "trigger": {"kind": "utilization"},
                        "strategy": {"kind": "trim"},
                        "matrix": {"strategy.keep_recent_turns": 2},
                    }
                ],
            },
            "must be a list of values, as in [2], not 2",
        ),
        (
            {
                "name": "x",
                "dataset": "d",
                "config": [{"name": "a", "trigger": {"kind": "utilization"}, "strategy": {"kind": "trim"}}],
                "regress": {"fact_retention": "a lot"},
            },
            "[regress] fact_retention",
        ),
        (
            {
                "name": "x",
                "dataset": "d",
                "config": [{"name": "a", "trigger": {"kind": "utilization"}, "strategy": {"kind": "trim"}}],
                "regress": {"billed_input_tokens": "exact"},
            },
            "summaries only",
        ),
        (
            {"name": "x", "dataset": "d", "config": [_CONFIG], "regress": {"fact_retention": float("nan")}},
            "[regress] fact_retention: a tolerance must be a finite number",
        ),
        ({"name": "x", "dataset": "d", "config": [_CONFIG, 3]}, "config #2: each [[config]] must be a table, not 3"),
        (
            {"name": "x", "dataset": "d", "config": [{"preset": ["as-recorded"]}]},
            "config #1: 'preset' must be a preset name, not ['as-recorded']",
        ),
    ],
)
def test_errors_name_the_offending_key(raw, fragment):
    with pytest.raises(ConfigError) as info:
        load_experiment(raw)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "raw, message",
    [
        (
            {"name": "x", "dataset": "d", "concurency": 2, "config": [_CONFIG]},
            "unknown key 'concurency'; valid: .*; did you mean 'concurrency'\\?$",
        ),
        (
            {
                "name": "x",
                "dataset": "d",
                "preset": "as-recorded",
                "config": [_CONFIG],
            },  # a [[config]] key, not a spec's
            "unknown key 'preset'; valid: .*; did you mean 'presets'\\?$",
        ),
        (
            {"name": "x", "dataset": "d", "config": [{**_CONFIG, "context_limt": 9000}]},
            "^config 'a': unknown config key 'context_limt'; .*; did you mean 'context_limit'\\?$",
        ),
        (
            {"name": "x", "dataset": "d", "config": [{**_CONFIG, "trigger": {"kind": "utilisation"}}]},
            "^config 'a': unknown trigger kind 'utilisation'; .*; did you mean 'utilization'\\?$",
        ),
        (
            {"name": "x", "dataset": "d", "config": [{**_CONFIG, "strategy": {"kind": "trim", "keep_recent_turn": 2}}]},
            "unknown parameter 'keep_recent_turn'; .*; did you mean 'keep_recent_turns'\\?$",
        ),
        (
            {"name": "x", "dataset": "d", "config": [{"preset": "observation-maskin"}]},
            "^config #1: unknown preset 'observation-maskin'; .*; did you mean 'observation-masking'\\?$",
        ),
        (
            {"name": "x", "dataset": "d", "metrics": ["fact_retention", "probe_acuracy"], "config": [_CONFIG]},
            "^key 'metrics': unknown metric 'probe_acuracy'; valid: .*; did you mean 'probe_accuracy'\\?$",
        ),
        (
            {
                "name": "x",
                "dataset": "d",
                "config": [_CONFIG],
                "regress": {"needed_fact_retenton": -0.02, "summaries": "exact"},
            },
            "^\\[regress\\]: unknown metric 'needed_fact_retenton'; .*; did you mean 'needed_fact_retention'\\?$",
        ),
        (
            {"name": "x", "dataset": "d", "metrics": ["quality"], "config": [_CONFIG]},
            "^key 'metrics': unknown metric 'quality'; valid: [a-z_, ]+$",
        ),  # nothing close: no guess
    ],
)
def test_a_misspelt_name_is_refused_when_the_spec_loads_with_a_guess(raw, message):
    """A typo in a metric or tolerance is caught before anything runs (not by every cell failing), and
    every unknown name comes with the valid ones and, when one is close, a guess."""
    with pytest.raises(ConfigError, match=message):
        load_experiment(raw)


@pytest.mark.parametrize(
    "metric, written, message",
    [
        (
            "fact_retention",
            0.02,
            "^\\[regress\\] fact_retention: 0.02 limits only increases, and higher is better for "
            'fact_retention: any drop would pass; write -0.02 to limit a drop, or "0.02" ',
        ),
        ("billed_input_tokens", "-5%", 'limits only decreases, and lower is better .* write "\\+5%" to limit a rise'),
        ("probe_answerable", "+3%", 'any drop would pass; write "-3%" to limit a drop'),
    ],
)
def test_a_tolerance_that_limits_only_improvements_is_refused(metric, written, message):
    """TOML reads 0.02 as +0.02 ("may grow by at most"): on a metric where higher is better that gate
    would pass any regression, so the spec is refused with what to write instead."""
    with pytest.raises(ConfigError, match=message):
        load_experiment({"name": "x", "dataset": "d", "config": [_CONFIG], "regress": {metric: written}})
    for fine in ("-0.02" if metric != "billed_input_tokens" else "+5%", "0.02", "5%"):
        load_experiment({"name": "x", "dataset": "d", "config": [_CONFIG], "regress": {metric: fine}})


def test_a_config_error_names_the_config_once():
    with pytest.raises(ConfigError) as info:
        load_experiment({"name": "x", "dataset": "d", "config": [{"name": "w", "strategy": {"kind": "trim"}}]})
    assert str(info.value).startswith("config 'w' has no [trigger] table")


def test_a_bad_kind_in_an_expanded_matrix_names_the_expanded_config():
    with pytest.raises(ConfigError, match="config 'w-0'.*window"):
        load_experiment(
            {
                "name": "x",
                "dataset": "d",
                "config": [
                    {
                        "name": "w",
                        "trigger": {"kind": "utilization"},
                        "strategy": {"kind": "sliding_window", "window": 5},
                        "matrix": {"strategy.window": [0, 5]},
                    }
                ],
            }
        )


def test_a_file_error_names_the_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text(
        'name = "broken"\ndataset = "d"\n[[config]]\nname = "a"\ntrigger = { kind = "nope" }\n'
        'strategy = { kind = "trim" }\n'
    )
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert str(path) in str(info.value) and "'nope'" in str(info.value)
    with pytest.raises(ConfigError, match="does not exist"):
        load_experiment(tmp_path / "missing.toml")


def test_a_missing_spec_says_where_to_look(tmp_path, monkeypatch):
    (tmp_path / "window-sweep.toml").write_text("")
    with pytest.raises(
        ConfigError,
        match=r"window-swep.toml does not exist; did you mean 'window-sweep.toml'\? "
        r"\(.* has window-sweep.toml\)",
    ):
        load_experiment(tmp_path / "window-swep.toml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_experiment("experiments/reference-designs.toml")
    assert f"there is no folder experiments in {tmp_path}" in str(info.value)
    assert f"the workbench ships {SHIPPED_EXPERIMENTS / 'reference-designs.toml'}" in str(info.value)
    assert (SHIPPED_EXPERIMENTS / "reference-designs.toml").is_file()
    with pytest.raises(
        ConfigError,
        match=r"^experiment \. is a folder, not a TOML file; name one of its files: "
        r"window-sweep.toml$",
    ):
        load_experiment(".")


def test_the_name_defaults_to_the_file_stem(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(
        'dataset = "d"\n[[config]]\nname = "a"\ntrigger = { kind = "utilization" }\nstrategy = { kind = "trim" }\n'
    )
    assert load_experiment(path).name == "sweep"


@pytest.mark.parametrize(
    "value, baseline, current, allowed",
    [
        (-0.02, 0.80, 0.79, True),
        (-0.02, 0.80, 0.77, False),
        (-0.02, 0.80, 0.95, True),  # improvements never regress
        ("+5%", 1000, 1049, True),
        ("+5%", 1000, 1051, False),
        ("+5%", 1000, 10, True),
        ("5%", 1000, 940, False),  # unsigned: both directions are limited
        ("5%", 1000, 960, True),
        (0, 3, 3, True),
        (0, 3, 4, False),
        ("-0.5", 10, 9.5, True),
    ],
)
def test_tolerances(value, baseline, current, allowed):
    assert parse_tolerance("m", value).allows(baseline, current) is allowed


def test_tolerance_descriptions_read_as_sentences():
    assert parse_tolerance("m", -0.02).describe() == "may drop by at most 0.02"
    assert parse_tolerance("m", "+5%").describe() == "may grow by at most 5 %"
    assert parse_tolerance("summaries", "exact") == Tolerance("summaries", "exact")


def test_grid_is_sessions_by_configs_by_repeats_in_a_stable_order():
    spec = load_experiment(
        {
            "name": "g",
            "dataset": "d",
            "repeats": 2,
            "config": [
                {"name": n, "trigger": {"kind": "utilization"}, "strategy": {"kind": "trim"}} for n in ("a", "b")
            ],
        }
    )
    assert grid(spec, ["s1", "s2"]) == [
        ("s1", "a", 0),
        ("s1", "a", 1),
        ("s1", "b", 0),
        ("s1", "b", 1),
        ("s2", "a", 0),
        ("s2", "a", 1),
        ("s2", "b", 0),
        ("s2", "b", 1),
    ]


def test_spec_problems_lists_every_problem_where_loading_stops_at_the_first():
    from workbench.experiments.spec import spec_problems

    text = """
name = "bad name!"
repeats = 0
bogus = 1

[[config]]
name = 3

[[config]]
name = "w"
trigger = { kind = "utilization" }
strategy = { kind = "sliding_window", window = 0 }

[regress]
nothing_such = 1
"""
    problems = spec_problems(text)
    expected = [
        "unknown key 'bogus'",
        "key 'name'",
        "key 'dataset'",
        "config #1",
        "config 'w'",
        "[regress]",
        "'repeats'",
    ]
    assert len(problems) == len(expected)
    assert all(word in problem for word, problem in zip(expected, problems, strict=True)), problems
    with pytest.raises(ConfigError) as raised:
        load_experiment(text)
    assert str(raised.value) == problems[0]  # loading (the CLI's path) still raises the first, unchanged


@pytest.mark.parametrize(
    ("source", "count"),
    [
        (
            'name = "ok"\ndataset = "samples"\n[[config]]\nname = "a"\n'
            'strategy = { kind = "sliding_window", window = 3 }\ntrigger = { kind = "utilization" }\n',
            0,
        ),
        ("name = [unclosed\n", 1),
        ({"name": "x", "dataset": "d", "config": [{"name": "a", "strategy": {"kind": "nope"}}], "repeats": -1}, 2),
    ],
)
def test_spec_problems_of_a_valid_spec_bad_toml_and_a_mapping(source, count):
    from workbench.experiments.spec import spec_problems

    assert len(spec_problems(source)) == count
