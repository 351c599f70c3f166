"""Replay configurations: one trigger × strategy × model setting, from a dict, TOML text or a TOML file.

    name = "split-summary-80"
    tokenizer = "cl100k_base"
    context_limit = 32000
    max_output = 4096
    summarizer = "workbench/extractive"
    summarizer_options = { temperature = 0 }
    on_failure = "fatal"            # or "fallback"
    calibration = "none"            # or "recorded"
    evaluator = "openai/gpt-4o-mini"  # the model answering probes / judging (model metrics)
    trigger = { kind = "utilization", ratio = 0.8 }
    strategy = { kind = "summarize_split", preserve = 0.4 }

A config is parsed once, at the edge, into a frozen `ReplayConfig` that holds its built trigger and
strategy. Every field is declared like a kind's parameter and validated by the registry in one
pass: unknown keys, unknown kinds and bad values raise `ConfigError` naming the offender and what is
valid. The trigger and strategy specs kept on the config (`trigger`, `strategy`, and `to_dict()`)
are those of the built objects, defaults included, for storage.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from workbench.calibration import CALIBRATIONS
from workbench.compaction import DEFAULT_CONTEXT_LIMIT, DEFAULT_MAX_OUTPUT, Trigger
from workbench.errors import ConfigError, did_you_mean, folder_given, missing_file
from workbench.presets import fit_to_window, preset, presets
from workbench.registry import StrategySpec, TriggerSpec, fresh, param, spec_of, validate
from workbench.tokens import get_tokenizer

ON_FAILURE = ("fatal", "fallback")
DEFAULT_SUMMARIZER = "workbench/extractive"
SECRET_OPTION_KEYS = ("api_key", "aws_secret_access_key", "azure_ad_token", "vertex_credentials")


@dataclass(frozen=True)
class ReplayConfig:
    """A validated replay configuration.

    `trigger` and `strategy` may be given as specs (tables with a `kind`), kind names or built
    objects; the config keeps the built objects (`built_trigger`, `built_strategy`) and their full
    specs (`trigger`, `strategy`). Triggers keep per-replay state: `build_trigger()` returns a fresh
    one for every replay.
    """

    trigger: TriggerSpec = param(doc="when to compact: a trigger spec")
    strategy: StrategySpec = param(doc="how to compact: a strategy spec")
    name: str = param("", doc="label of the config (default: trigger+strategy)")
    tokenizer: str = param("heuristic", doc="heuristic, a tiktoken encoding, or litellm:<model>")
    context_limit: int = param(DEFAULT_CONTEXT_LIMIT, doc="the simulated context window, in tokens", min=1)
    max_output: int = param(DEFAULT_MAX_OUTPUT, doc="tokens kept free for the reply", min=0)
    summarizer: str = param(DEFAULT_SUMMARIZER, doc="the model strategies summarize with (a LiteLLM model)")
    summarizer_options: Mapping[str, Any] = param({}, doc="LiteLLM options for the summarizer")
    on_failure: str = param("fatal", doc="what a failed compaction does", choices=ON_FAILURE)
    max_consecutive_failures: int = param(3, doc="summarizer failures in a row that open the breaker", min=1)
    cache_read_ratio: float = param(0.1, doc="price of a cached input token relative to an uncached one", min=0, max=1)
    calibration: str = param(
        "none", doc="recorded: fit token counts to the recording's usage per session", choices=CALIBRATIONS
    )
    overflow_retry: bool | None = param(
        None, doc="compact and retry a call that overflows (none: the trigger's design decides)"
    )
    evaluator: str | None = param(None, doc="the model answering probes and judging (model metrics); none: off")
    evaluator_options: Mapping[str, Any] = param({}, doc="LiteLLM options for the evaluator")
    notes: tuple[str, ...] = param(
        (),
        doc="what resolving the config changed in it, and why (a preset threshold "
        "scaled to the window: workbench.presets.fit_to_window)",
    )
    built_trigger: Trigger = field(init=False, repr=False, compare=False)
    #: A `Strategy` that is also a registered kind (the replay reads its `kind`, which `Strategy` does not declare).
    built_strategy: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        given = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        try:
            values = validate(ReplayConfig, kwargs=given)
        except ConfigError as exc:
            label = f"config {given['name']!r}: " if isinstance(given.get("name"), str) and given["name"] else ""
            raise ConfigError(f"{label}{exc}") from exc
        if values["max_output"] >= values["context_limit"]:
            raise ConfigError(
                f"max_output ({values['max_output']}) must be below context_limit ({values['context_limit']})"
            )
        for key in ("summarizer", "evaluator"):
            if values[key] is not None and not values[key].strip():
                raise ConfigError(f"{key} must be a model string such as 'workbench/extractive'")
        get_tokenizer(values["tokenizer"])
        trigger, strategy = values.pop("trigger"), values.pop("strategy")
        values.update(
            trigger=spec_of(trigger), strategy=spec_of(strategy), built_trigger=trigger, built_strategy=strategy
        )
        if not values["name"]:
            values["name"] = f"{trigger.kind}+{strategy.kind}"
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def build_trigger(self) -> Trigger:
        """A fresh trigger (triggers keep per-replay state), made from the built one, not re-parsed."""
        return fresh(self.built_trigger)

    new_trigger = build_trigger

    def build_strategy(self) -> Any:
        """The strategy (stateless, shared by every replay of this config)."""
        return self.built_strategy

    def to_dict(self, *, redact: bool = True) -> dict[str, Any]:
        """The full spec; secrets in the model options are left out unless `redact=False`.

        `overflow_retry`, `evaluator` and `notes` appear only when set, so configs written before
        they existed keep the same stored spec.
        """

        def options(table: Mapping[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in table.items() if not (redact and k in SECRET_OPTION_KEYS)}

        out = {
            "name": self.name,
            "tokenizer": self.tokenizer,
            "context_limit": self.context_limit,
            "max_output": self.max_output,
            "summarizer": self.summarizer,
            "summarizer_options": options(self.summarizer_options),
            "on_failure": self.on_failure,
            "max_consecutive_failures": self.max_consecutive_failures,
            "cache_read_ratio": self.cache_read_ratio,
            "trigger": dict(self.trigger),
            "strategy": dict(self.strategy),
            "calibration": self.calibration,
        }
        if self.overflow_retry is not None:
            out["overflow_retry"] = self.overflow_retry
        if self.evaluator is not None:
            out["evaluator"] = self.evaluator
            out["evaluator_options"] = options(self.evaluator_options)
        if self.notes:
            out["notes"] = list(self.notes)
        return out


#: The `to_dict()` keys `config_hash` leaves out: they name or explain a config, they do not change its replay.
UNHASHED_KEYS = ("name", "notes")


def config_hash(config: ReplayConfig | Mapping[str, Any] | str | Path) -> str:
    """A short, stable hash of what a config replays with: its full spec (`to_dict()`, secrets left out,
    defaults filled in) without its name and notes (`UNHASHED_KEYS`).

    Anything `parse_config` takes is accepted, so a preset name, the dict it stands for and a stored
    `to_dict()` of the same config hash alike, and a renamed config keeps its hash (and the human labels
    of its summaries, stored under it). A stored spec that no longer parses (a kind since removed) is
    hashed as it is, the same way, so its labels stay readable.
    """
    try:
        spec = parse_config(config).to_dict()
    except ConfigError:
        if not isinstance(config, Mapping):
            raise
        spec = dict(config)
    canonical = {k: v for k, v in spec.items() if k not in UNHASHED_KEYS}
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_FIELDS = (
    *(f.name for f in fields(ReplayConfig) if f.init and f.name not in ("trigger", "strategy")),
    "trigger",
    "strategy",
)


def merge_config(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` on top of `base`; nested tables merge key by key, except kind specs.

    A table with a different `kind` replaces the base's whole (its parameters would not fit), so
    `strategy = { window = 5 }` tunes a preset's strategy and `strategy = { kind = "trim" }` swaps it.
    """
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        current = out.get(key)
        if (
            isinstance(value, Mapping)
            and isinstance(current, Mapping)
            and value.get("kind", current.get("kind")) == current.get("kind")
        ):
            out[key] = merge_config(current, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def with_preset(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A config table with its `preset = "NAME"` key (if any) replaced by that preset, the table's
    own keys on top (`merge_config`); its name defaults to the preset's. A preset threshold that
    cannot fire in the table's window is scaled to it, with a note (`presets.fit_to_window`)."""
    if "preset" not in spec:
        return dict(spec)
    name = spec["preset"]
    if not isinstance(name, str):
        raise ConfigError(f"'preset' must be a preset name, not {name!r}")
    own = {k: v for k, v in spec.items() if k != "preset"}
    return fit_to_window(name, merge_config(preset(name), own), chosen=trigger_keys(own))


def trigger_keys(*tables: Mapping[str, Any]) -> set[str]:
    """The trigger parameters `tables` set themselves (a preset's are theirs only when none is)."""
    return {key for table in tables if isinstance(table.get("trigger"), Mapping) for key in table["trigger"]}


def parse_config(spec: ReplayConfig | Mapping[str, Any] | str | Path) -> ReplayConfig:
    """A `ReplayConfig` from a config object (returned as it is), a dict, a TOML file path, inline
    TOML or a preset name (`"as-recorded"`). A table may start from a preset: `preset = "NAME"`
    with its own keys on top (`with_preset`)."""
    if isinstance(spec, ReplayConfig):
        return spec
    where = ""
    if isinstance(spec, (str, Path)):
        preset = _preset_named(spec)
        if preset is None and names_file(spec):
            where = f"{spec}: "
        spec = preset or load_toml(spec)
    if not isinstance(spec, Mapping):
        raise ConfigError(f"a config must be a table, not {type(spec).__name__}")
    spec = with_preset(spec)
    unknown = sorted(set(spec) - set(_FIELDS))
    if unknown:
        raise ConfigError(
            f"unknown config key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"valid: {', '.join(_FIELDS)}, preset{did_you_mean(unknown, (*_FIELDS, 'preset'))}"
        )
    for required, example in (("trigger", "utilization"), ("strategy", "sliding_window")):
        if required not in spec:
            named = f"config {spec['name']!r} " if spec.get("name") else "the config "
            raise ConfigError(
                f"{where}{named}has no [{required}] table; add one such as [{required}] "
                f'kind = "{example}" (`workbench kinds` lists every kind)'
            )
    try:
        return ReplayConfig(**dict(spec))
    except ConfigError as exc:
        misplaced = [
            (table, key)
            for table in ("trigger", "strategy")
            if isinstance(spec[table], Mapping)
            for key in spec[table]
            if key in _FIELDS and repr(key) in str(exc)
        ]  # the key it refused
        if not misplaced:
            raise
        table, key = misplaced[0]
        raise ConfigError(
            f"{exc} (in TOML a key written after [{table}] belongs to it: to set {key!r} for the "
            f"config, write it before the first [table] header)"
        ) from exc


def _preset_named(source: str | Path) -> dict[str, Any] | None:
    """The preset a bare name such as `as-recorded` names, else None (a file or TOML). A bare word
    that names no preset and no file is an error that lists the presets."""
    text = str(source).strip()
    if isinstance(source, Path) or not _BARE_WORD.fullmatch(text) or text.endswith(".toml") or Path(text).exists():
        return None
    known = presets()
    if text not in known:
        raise ConfigError(
            f"config {text!r} is neither a TOML file, inline TOML nor a preset; presets: "
            f"{', '.join(known)}{did_you_mean([text], known)}"
        )
    return with_preset({"preset": text})


_BARE_WORD = re.compile(r"[\w.-]+")


def names_file(source: str | Path) -> bool:
    """Whether `source` is read as a path rather than inline TOML: a `.toml` name, or an existing
    file or folder (a folder to be refused as such, not parsed as TOML)."""
    if not str(source).strip():
        return False  # empty text is empty TOML, not the current folder
    path = Path(source)
    try:
        return path.suffix == ".toml" or path.exists()
    except OSError:
        return False


def load_toml(source: str | Path) -> dict[str, Any]:
    """Parse a TOML file (when `source` names an existing file) or inline TOML text."""
    text: str
    origin = "inline TOML"
    path = Path(source)
    if names_file(source):
        if path.is_dir():
            raise ConfigError(folder_given("config", path))
        if not path.is_file():
            raise ConfigError(missing_file("config file", path))
        text, origin = path.read_text(encoding="utf-8"), str(path)
    else:
        text = str(source)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin}: invalid TOML: {exc}") from exc
