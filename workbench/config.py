"""Replay configurations: one trigger × strategy × model setting, from a dict, TOML text or a TOML file.

    name = "split-summary-80"
    tokenizer = "cl100k_base"
    context_limit = 32000
    max_output = 4096
    summarizer = "workbench/extractive"
    summarizer_options = { temperature = 0 }
    on_failure = "fatal"            # or "fallback"
    trigger = { kind = "utilization", ratio = 0.8 }
    strategy = { kind = "summarize_split", preserve = 0.4 }

Validation happens here, once: unknown keys, unknown kinds and bad parameters raise
`ConfigError` naming the offender and what is valid.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import ConfigError
from workbench.registry import build_strategy, build_trigger, spec_of
from workbench.tokens import get_tokenizer

ON_FAILURE = ("fatal", "fallback")
DEFAULT_SUMMARIZER = "workbench/extractive"
SECRET_OPTION_KEYS = ("api_key", "aws_secret_access_key", "azure_ad_token", "vertex_credentials")


@dataclass(frozen=True)
class ReplayConfig:
    """A validated replay configuration; `trigger` and `strategy` are specs (dicts with `kind`)."""

    trigger: Mapping[str, Any]
    strategy: Mapping[str, Any]
    name: str = ""
    tokenizer: str = "heuristic"
    context_limit: int = 128_000
    max_output: int = 4096
    summarizer: str = DEFAULT_SUMMARIZER
    summarizer_options: Mapping[str, Any] = field(default_factory=dict)
    on_failure: str = "fatal"
    max_consecutive_failures: int = 3
    cache_read_ratio: float = 0.1

    def __post_init__(self) -> None:
        if self.on_failure not in ON_FAILURE:
            raise ConfigError(f"on_failure must be one of {', '.join(ON_FAILURE)}, not {self.on_failure!r}")
        for key in ("context_limit", "max_output", "max_consecutive_failures"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "max_output" else 1):
                raise ConfigError(f"{key} must be a positive integer, not {value!r}")
        if not isinstance(self.cache_read_ratio, (int, float)) or not 0 <= self.cache_read_ratio <= 1:
            raise ConfigError(f"cache_read_ratio must be within [0, 1], not {self.cache_read_ratio!r}")
        if self.max_output >= self.context_limit:
            raise ConfigError(f"max_output ({self.max_output}) must be below context_limit ({self.context_limit})")
        if not isinstance(self.summarizer, str) or not self.summarizer:
            raise ConfigError("summarizer must be a model string such as 'workbench/extractive'")
        if not isinstance(self.summarizer_options, Mapping):
            raise ConfigError("summarizer_options must be a table")
        get_tokenizer(self.tokenizer)
        # Normalise both specs through the registry: validates them and fills defaults.
        object.__setattr__(self, "trigger", spec_of(build_trigger(self.trigger)))
        object.__setattr__(self, "strategy", spec_of(build_strategy(self.strategy)))
        if not self.name:
            object.__setattr__(self, "name", f"{self.trigger['kind']}+{self.strategy['kind']}")

    def build_trigger(self) -> Any:
        """A fresh trigger instance (triggers keep per-replay state)."""
        return build_trigger(self.trigger)

    def build_strategy(self) -> Any:
        return build_strategy(self.strategy)

    def to_dict(self, *, redact: bool = True) -> dict[str, Any]:
        """The full spec; secrets in `summarizer_options` are left out unless `redact=False`."""
        options = {k: v for k, v in self.summarizer_options.items() if not (redact and k in SECRET_OPTION_KEYS)}
        return {
            "name": self.name, "tokenizer": self.tokenizer, "context_limit": self.context_limit,
            "max_output": self.max_output, "summarizer": self.summarizer, "summarizer_options": options,
            "on_failure": self.on_failure, "max_consecutive_failures": self.max_consecutive_failures,
            "cache_read_ratio": self.cache_read_ratio, "trigger": dict(self.trigger), "strategy": dict(self.strategy),
        }


_FIELDS = ("name", "tokenizer", "context_limit", "max_output", "summarizer", "summarizer_options",
           "on_failure", "max_consecutive_failures", "cache_read_ratio", "trigger", "strategy")


def parse_config(spec: ReplayConfig | Mapping[str, Any] | str | Path) -> ReplayConfig:
    """A `ReplayConfig` from a config object, a dict, a TOML file path or inline TOML text."""
    if isinstance(spec, ReplayConfig):
        return spec
    if isinstance(spec, (str, Path)):
        spec = load_toml(spec)
    if not isinstance(spec, Mapping):
        raise ConfigError(f"a config must be a table, not {type(spec).__name__}")
    unknown = sorted(set(spec) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"unknown config key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                          f"valid: {', '.join(_FIELDS)}")
    for required in ("trigger", "strategy"):
        if required not in spec:
            raise ConfigError(f"config {spec.get('name', '')!r} has no {required!r} table")
    return ReplayConfig(**dict(spec))


def load_toml(source: str | Path) -> dict[str, Any]:
    """Parse a TOML file (when `source` names an existing file) or inline TOML text."""
    text: str
    origin = "inline TOML"
    path = Path(source)
    try:
        is_file = path.suffix == ".toml" or path.is_file()
    except OSError:
        is_file = False
    if is_file:
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        text, origin = path.read_text(encoding="utf-8"), str(path)
    else:
        text = str(source)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin}: invalid TOML: {exc}") from exc
