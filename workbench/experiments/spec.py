"""Experiment specs: a grid of replay configurations over one or more datasets (DESIGN §9).

    name = "window-sweep"
    dataset = "samples"                  # or datasets = [...]; optional where = "<SQL over sessions>"
    metrics = ["fact_retention"]         # the always-computed cost metrics come on top
    concurrency = 8
    repeats = 1                          # epochs: each is its own cache key for model calls

    [defaults]                           # merged into every config (tables are merged key by key)
    tokenizer = "cl100k_base"

    [[config]]
    name = "window"
    trigger = { kind = "stat_threshold", counters = { iterations = 10 } }
    strategy = { kind = "sliding_window", window = 10 }
    matrix = { "strategy.window" = [5, 10, 20] }    # window-5, window-10, window-20

    [regress]
    fact_retention = -0.02               # may drop by at most 0.02
    billed_input_tokens = "+5%"          # may grow by at most 5 %
    summaries = "exact"

    [report]                             # optional: reductions against a baseline config (reductions.py)
    baseline = "window-5"

A spec is validated whole when it is loaded: every error names the offending key (and the config
it belongs to), and every expanded config is parsed, so a typo fails before any replay runs.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
import re
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from workbench.config import ReplayConfig, merge_config, names_file, parse_config, trigger_keys
from workbench.errors import ConfigError, did_you_mean, folder_given, missing_file
from workbench.experiments.reductions import ReportOptions, report_options
from workbench.presets import fit_to_window
from workbench.registry import kinds, lookup

SPEC_KEYS = (
    "name",
    "description",
    "dataset",
    "datasets",
    "where",
    "metrics",
    "concurrency",
    "repeats",
    "defaults",
    "config",
    "regress",
    "presets",
    "report",
)
CONFIG_ONLY_KEYS = ("matrix", "preset")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=-]*$")
_TOLERANCE = re.compile(r"^\s*(?P<sign>[+-]|±|\+-)?\s*(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*(?P<percent>%)?\s*$")


@dataclass(frozen=True)
class Tolerance:
    """How far a metric may move against its baseline before it counts as a regression.

    `direction` is the change that is limited: "decrease" (written `-0.02`), "increase" (`+5%`) or
    "both" (no sign). `relative` bounds are fractions of the baseline value. `exact` (only for
    `summaries`) asks that summary texts match the snapshot.
    """

    metric: str
    kind: Literal["absolute", "relative", "exact"]
    bound: float = 0.0
    direction: Literal["increase", "decrease", "both"] = "both"

    def allows(self, baseline: float, current: float) -> bool:
        """Whether `current` is within the tolerance of `baseline`."""
        change = current - baseline
        limit = self.bound * abs(baseline) if self.kind == "relative" else self.bound
        slack = 1e-9 * max(1.0, abs(baseline))
        if self.direction in ("increase", "both") and change > limit + slack:
            return False
        return not (self.direction in ("decrease", "both") and -change > limit + slack)

    def describe(self) -> str:
        if self.kind == "exact":
            return "must match exactly"
        amount = f"{self.bound * 100:g} %" if self.kind == "relative" else f"{self.bound:g}"
        verb = {"increase": "may grow by at most", "decrease": "may drop by at most", "both": "may change by at most"}[
            self.direction
        ]
        return f"{verb} {amount}"


@dataclass(frozen=True)
class ConfigCell:
    """One named configuration of the grid: its merged spec (as written) and the parsed config."""

    name: str
    spec: Mapping[str, Any]
    config: ReplayConfig
    matrix_values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExperimentSpec:
    """A validated experiment: datasets, the expanded configurations, metrics and tolerances."""

    name: str
    datasets: tuple[str, ...]
    configs: tuple[ConfigCell, ...]
    where: str | None = None
    metrics: tuple[str, ...] = ()
    concurrency: int = 4
    repeats: int = 1
    regress: Mapping[str, Tolerance] = field(default_factory=dict)
    description: str = ""
    source: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    #: `[report]`: reductions against a baseline config (`workbench.experiments.reductions`)
    report: ReportOptions | None = None

    def config(self, name: str) -> ConfigCell:
        for cell in self.configs:
            if cell.name == name:
                return cell
        raise ConfigError(
            f"experiment {self.name!r} has no config {name!r}; configs: {', '.join(c.name for c in self.configs)}"
        )

    @property
    def config_names(self) -> list[str]:
        return [c.name for c in self.configs]

    @property
    def notes(self) -> tuple[str, ...]:
        """What resolving the configs changed (a preset threshold scaled to the window: each config's
        `notes`), and what the spec asks for that a run will leave empty: a metric that needs a model
        (probe accuracy, the judge, continuation) on configs without an `evaluator`."""
        resolved = tuple(dict.fromkeys(line for cell in self.configs for line in cell.config.notes))
        needing = [m for m in self.metrics if getattr(lookup("metric", m), "requires_model", False)]
        without = [cell.name for cell in self.configs if cell.config.evaluator is None]
        if not needing or not without:
            return resolved
        shown = ", ".join(without[:4]) + (f" and {len(without) - 4} more" if len(without) > 4 else "")
        return (
            *resolved,
            f"{', '.join(needing)} need{'s' if len(needing) == 1 else ''} an evaluator model (config "
            f"key `evaluator`, e.g. in [defaults]); without one the column stays empty for {shown}",
        )

    def __repr__(self) -> str:
        return (
            f"ExperimentSpec({self.name!r}, datasets={list(self.datasets)}, "
            f"configs={len(self.configs)}, repeats={self.repeats})"
        )


def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


def _set_path(spec: dict[str, Any], path: str, value: Any, where: str) -> None:
    keys = path.split(".")
    if not all(keys):
        raise _fail(where, f"matrix key {path!r} is not a dotted path such as 'strategy.window'")
    target = spec
    for key in keys[:-1]:
        child = target.get(key)
        if child is None:
            child = target[key] = {}
        if not isinstance(child, dict):
            raise _fail(where, f"matrix key {path!r}: {key!r} is not a table")
        target = child
    target[keys[-1]] = copy.deepcopy(value)


def _label(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, Mapping):
        return str(value.get("kind", "table"))
    return str(value)


def _expand(
    entry: Mapping[str, Any], index: int, defaults: Mapping[str, Any], presets: Mapping[str, Mapping[str, Any]]
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    if not isinstance(entry, Mapping):
        raise _fail(f"config #{index + 1}", f"each [[config]] must be a table, not {entry!r}")
    where = f"config #{index + 1}" + (f" ({entry['name']!r})" if "name" in entry else "")
    body = {k: v for k, v in entry.items() if k not in CONFIG_ONLY_KEYS}
    preset_name = entry.get("preset")
    if preset_name is not None:
        if not isinstance(preset_name, str):
            raise _fail(where, f"'preset' must be a preset name, not {preset_name!r}")
        if preset_name not in presets:
            raise _fail(
                where,
                f"unknown preset {preset_name!r}; valid: {', '.join(sorted(presets)) or '(none)'}"
                f"{did_you_mean([str(preset_name)], presets)}",
            )
        body = merge_config(presets[preset_name], body)
        body.setdefault("name", preset_name)
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(where, "needs a 'name' (or a 'preset')")
    base = merge_config(defaults, body)
    matrix = entry.get("matrix") or {}
    if not isinstance(matrix, Mapping):
        raise _fail(where, "'matrix' must be a table of dotted keys to lists of values")
    if preset_name is not None:  # a preset threshold that cannot fire in the window is scaled to it, with a note
        own = trigger_keys(defaults, entry) | {
            str(path).split(".")[1] for path in matrix if str(path).startswith("trigger.") and str(path).count(".") == 1
        }
        return [
            (cell, fit_to_window(preset_name, spec, chosen=own), values)
            for cell, spec, values in _expand_matrix(name, base, matrix, where)
        ]
    return _expand_matrix(name, base, matrix, where)


def _expand_matrix(
    name: str, base: dict[str, Any], matrix: Mapping[str, Any], where: str
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    if not matrix:
        return [(name, base, {})]
    axes: list[tuple[str, list[Any]]] = []
    for path, values in matrix.items():
        if not isinstance(values, list):
            raise _fail(where, f"matrix key {path!r} must be a list of values, as in [{values!r}], not {values!r}")
        if not values:
            raise _fail(where, f"matrix key {path!r} must list at least one value")
        axes.append((path, values))
    expanded = []
    for combination in itertools.product(*(values for _, values in axes)):
        spec = copy.deepcopy(base)
        chosen: dict[str, Any] = {}
        for (path, _), value in zip(axes, combination, strict=True):
            _set_path(spec, path, value, where)
            chosen[path] = value
        cell_name = "-".join([name, *(_label(v) for v in combination)])
        spec["name"] = cell_name
        expanded.append((cell_name, spec, chosen))
    return expanded


def parse_tolerance(metric: str, value: Any) -> Tolerance:
    """A `[regress]` entry: a signed number (absolute), a signed percentage string, or "exact"."""
    where = f"[regress] {metric}"
    if isinstance(value, str) and value.strip().lower() == "exact":
        return Tolerance(metric, "exact")
    if isinstance(value, bool):
        raise _fail(where, f"expected a number such as -0.02, a percentage such as '+5%', or 'exact', not {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _fail(where, f"a tolerance must be a finite number, not {value!r}")
    if isinstance(value, (int, float)):
        direction: Literal["increase", "decrease", "both"] = "decrease" if value < 0 else "increase"
        if value == 0:
            direction = "both"
        return Tolerance(metric, "absolute", abs(float(value)), direction)
    if isinstance(value, str):
        match = _TOLERANCE.match(value)
        if match:
            sign = match["sign"]
            direction = "decrease" if sign == "-" else "increase" if sign == "+" else "both"
            number = float(match["number"])
            if match["percent"]:
                return Tolerance(metric, "relative", number / 100, direction)
            return Tolerance(metric, "absolute", number, direction)
    raise _fail(where, f"expected a number such as -0.02, a percentage such as '+5%', or 'exact', not {value!r}")


def _positive_int(raw: Mapping[str, Any], key: str, default: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(f"key {key!r}", f"must be a whole number >= 1, not {value!r}")
    return value


def _string_list(raw: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(f"key {key!r}", f"must be a list of names, not {value!r}")
    return tuple(value)


#: The experiment specs of the source tree (beside the `workbench` package).
SHIPPED_EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def load_toml_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        raise ConfigError(folder_given("experiment", path))
    if not path.is_file():
        message = missing_file("experiment file", path)
        shipped = SHIPPED_EXPERIMENTS / path.name
        if shipped.is_file() and not path.is_absolute():
            message += f"; the workbench ships {shipped}"
        raise ConfigError(message)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc


def load_experiment(
    source: ExperimentSpec | Mapping[str, Any] | str | Path, *, presets: Mapping[str, Mapping[str, Any]] | None = None
) -> ExperimentSpec:
    """Validate and expand an experiment spec from a file path, a TOML string or a mapping.

    `presets` are named configs a `[[config]]` entry may start from (`preset = "as-recorded"`);
    by default, the workbench's presets when that module is present.
    """
    if isinstance(source, ExperimentSpec):
        return source
    origin, raw = _raw_spec(source)
    try:
        return _validate(raw, origin, presets)
    except ConfigError as exc:
        if origin and not str(exc).startswith(origin):
            raise ConfigError(f"{origin}: {exc}") from exc
        raise


def _raw_spec(source: Mapping[str, Any] | str | Path) -> tuple[str | None, dict[str, Any]]:
    """(the file it came from, or None; the spec as read, a copy) of a file path, TOML text or mapping."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and names_file(source)):
        return str(source), load_toml_file(source)
    if isinstance(source, str):
        try:
            return None, tomllib.loads(source)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"inline experiment: invalid TOML: {exc}") from exc
    if isinstance(source, Mapping):
        return None, copy.deepcopy(dict(source))
    raise ConfigError(f"an experiment spec must be a TOML file, TOML text or a table, not {type(source).__name__}")


def _default_presets() -> Mapping[str, Mapping[str, Any]]:
    from workbench.presets import presets

    return presets()


class _Problems:
    """Where `_validate` puts what it finds wrong: at the first problem it raises (`gather=False`,
    what `load_experiment` does), or it keeps every problem and validation goes on with the parts it
    could read (`gather=True`, what `spec_problems` does)."""

    def __init__(self, gather: bool):
        self.gather = gather
        self.found: list[ConfigError] = []

    def add(self, problem: ConfigError) -> None:
        if not self.gather:
            raise problem
        self.found.append(problem)

    @contextlib.contextmanager
    def check(self) -> Iterator[None]:
        """The block's ConfigError is a problem (raised at once unless gathering); the code after it runs."""
        try:
            yield
        except ConfigError as exc:
            if not self.gather:
                raise
            self.found.append(exc)


def _validate(
    raw: dict[str, Any],
    origin: str | None,
    presets: Mapping[str, Mapping[str, Any]] | None,
    problems: _Problems | None = None,
) -> ExperimentSpec:
    problems = problems or _Problems(gather=False)
    unknown = sorted(set(raw) - set(SPEC_KEYS))
    if unknown:
        problems.add(
            ConfigError(
                f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                f"valid: {', '.join(SPEC_KEYS)}{did_you_mean(unknown, SPEC_KEYS)}"
            )
        )
    name = raw.get("name") or (Path(origin).stem if origin else "")
    if not isinstance(name, str) or not _NAME.match(name):
        problems.add(_fail("key 'name'", f"must be a name of letters, digits and -_.+=, not {name!r}"))
    datasets: tuple[str, ...] = ()
    if "dataset" in raw and "datasets" in raw:
        problems.add(_fail("key 'dataset'", "give either 'dataset' or 'datasets', not both"))
    else:
        with problems.check():
            datasets = _string_list(raw, "datasets" if "datasets" in raw else "dataset")
            if not datasets:
                raise _fail("key 'dataset'", 'an experiment needs a dataset (dataset = "samples") or datasets = [...]')
    where = raw.get("where")
    if where is not None and (not isinstance(where, str) or not where.strip()):
        problems.add(_fail("key 'where'", f"must be an SQL condition over the sessions table, not {where!r}"))
    defaults = raw.get("defaults", {})
    if not isinstance(defaults, Mapping):
        problems.add(_fail("key 'defaults'", "must be a table of config keys"))
        defaults = {}
    if presets is None:
        presets = _default_presets()
    entries = raw.get("config", [])
    preset_entries: tuple[str, ...] = ()
    with problems.check():
        preset_entries = _string_list(raw, "presets")
    if not isinstance(entries, list):
        problems.add(_fail("key 'config'", "must be an array of tables ([[config]])"))
        entries = []
    entries = [*({"preset": p} for p in preset_entries), *entries]
    if not entries:
        problems.add(_fail("key 'config'", "an experiment needs at least one [[config]] (or presets = [...])"))
    cells: list[ConfigCell] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        expanded: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        with problems.check():
            expanded = _expand(entry, index, defaults, presets)
        for cell_name, spec, chosen in expanded:
            with problems.check():
                cells.append(_config_cell(cell_name, spec, chosen, seen))
    regress_raw = raw.get("regress", {})
    if not isinstance(regress_raw, Mapping):
        problems.add(_fail("key 'regress'", "must be a table of metric = tolerance"))
        regress_raw = {}
    regress: dict[str, Tolerance] = {}
    for metric, value in regress_raw.items():
        with problems.check():
            regress[metric] = parse_tolerance(metric, value)
    metrics: tuple[str, ...] = ()
    with problems.check():
        metrics = _string_list(raw, "metrics")
        _check_metrics("key 'metrics'", metrics)
    with problems.check():
        _check_metrics("[regress]", [m for m in regress if m != "summaries"], also=("summaries",))
    for metric, tolerance in regress.items():
        with problems.check():
            if tolerance.kind == "exact" and metric != "summaries":
                raise _fail(f"[regress] {metric}", "'exact' applies to summaries only")
            if metric == "summaries" and tolerance.kind != "exact":
                raise _fail("[regress] summaries", 'summaries take "exact"')
            if metric != "summaries" and _is_metric(metric):
                _check_limits_regressions(metric, tolerance, regress_raw[metric])
    description = raw.get("description", "")
    if not isinstance(description, str):
        problems.add(_fail("key 'description'", "must be text"))
    concurrency = repeats = 1
    with problems.check():
        concurrency = _positive_int(raw, "concurrency", 4)
    with problems.check():
        repeats = _positive_int(raw, "repeats", 1)
    report: ReportOptions | None = None
    with problems.check():
        report = report_options(raw.get("report"), [cell.name for cell in cells])
    if problems.found:
        raise problems.found[0]
    assert isinstance(name, str) and isinstance(description, str)  # a problem above otherwise
    return ExperimentSpec(
        name=name,
        datasets=datasets,
        configs=tuple(cells),
        where=where,
        metrics=metrics,
        concurrency=concurrency,
        repeats=repeats,
        regress=regress,
        description=description,
        source=origin,
        raw=raw,
        report=report,
    )


def _config_cell(cell_name: str, spec: dict[str, Any], chosen: dict[str, Any], seen: set[str]) -> ConfigCell:
    """An expanded config, parsed; its name must be valid and not taken yet (`seen`, which it joins)."""
    if not _NAME.match(cell_name):
        raise _fail(f"config {cell_name!r}", "a config name may hold letters, digits and -_.+= only")
    if cell_name in seen:
        raise _fail(f"config {cell_name!r}", "two configs have this name; names must be unique")
    seen.add(cell_name)
    try:
        config = parse_config(spec)
    except ConfigError as exc:  # the config's own error may name it already
        named = f"config {cell_name!r}"
        text = str(exc)
        raise (ConfigError(text) if text.startswith(named) else _fail(named, text)) from exc
    return ConfigCell(cell_name, spec, config, chosen)


def spec_problems(
    source: Mapping[str, Any] | str | Path, *, presets: Mapping[str, Mapping[str, Any]] | None = None
) -> list[str]:
    """Every problem of an experiment spec (a file path, TOML text or a mapping), not only the first
    that `load_experiment` raises: each key, config and tolerance is checked on its own. [] when valid.
    A spec whose TOML does not parse has that one problem."""
    try:
        origin, raw = _raw_spec(source)
    except ConfigError as exc:
        return [str(exc)]
    problems = _Problems(gather=True)
    try:
        _validate(raw, origin, presets, problems)
    except ConfigError:
        pass
    return [str(p) if not origin or str(p).startswith(origin) else f"{origin}: {p}" for p in problems.found]


def _check_metrics(where: str, names: Sequence[str], also: Sequence[str] = ()) -> None:
    """Every name must be a registered metric (a typo would otherwise fail every cell, or every check, later)."""
    unknown = [name for name in names if not _is_metric(name)]
    if unknown:
        valid = [*sorted(kinds("metric")), *also]
        raise _fail(
            where,
            f"unknown metric{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"valid: {', '.join(valid)}{did_you_mean(unknown, valid)}",
        )


def _check_limits_regressions(metric: str, tolerance: Tolerance, written: Any) -> None:
    """A tolerance that limits only the change for the better would let any regression pass (TOML
    reads `0.02` as `+0.02`: "may grow by at most 0.02", which for a metric where higher is better
    limits only improvements): refused, with the ways to write what was probably meant."""
    better = getattr(lookup("metric", metric), "direction", "none")
    if (better, tolerance.direction) not in (("higher", "increase"), ("lower", "decrease")):
        return
    worse, sign = ("drop", "-") if better == "higher" else ("rise", "+")
    amount = f"{tolerance.bound * 100:g}%" if tolerance.kind == "relative" else f"{tolerance.bound:g}"
    signed = f'"{sign}{amount}"' if tolerance.kind == "relative" or sign == "+" else f"{sign}{amount}"
    raise _fail(
        f"[regress] {metric}",
        f"{written!r} limits only {'increases' if better == 'higher' else 'decreases'}, and {better} is "
        f"better for {metric}: any {worse} would pass; write {signed} to limit a {worse}, or "
        f'"{amount}" (a string with no sign) to limit the change both ways',
    )


def _is_metric(name: str) -> bool:
    """A registered metric's name or alias, as the registry resolves it."""
    try:
        lookup("metric", name)
    except ConfigError:
        return False
    return True


def grid(spec: ExperimentSpec, session_ids: Sequence[str]) -> list[tuple[str, str, int]]:
    """The cells of a run in a stable order: (session id, config name, repeat)."""
    return [
        (session_id, cell.name, repeat)
        for session_id in session_ids
        for cell in spec.configs
        for repeat in range(spec.repeats)
    ]
