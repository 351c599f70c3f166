"""Name registries for trigger and strategy kinds.

A kind is a (usually frozen dataclass) class registered under a name; a spec is a mapping
`{"kind": name, **params}` as written in TOML. The registry validates specs against the class's
init parameters, so a typo names the offender and lists what is valid, and `spec_of` turns any
built object back into the spec that rebuilds it (stored with every result).

    @wb.register_strategy("keep_last_user")
    @dataclass(frozen=True)
    class KeepLastUser:
        def compact(self, context, env): ...

A class that needs to convert nested specs (e.g. `any`, `pipeline`) defines
`from_params(cls, **params)`; otherwise the class is called with the params.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from workbench.errors import ConfigError

T = TypeVar("T")

_REGISTRIES: dict[str, dict[str, type]] = {"trigger": {}, "strategy": {}}
_BUILTINS_LOADED = False


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        import workbench.strategies
        import workbench.triggers  # noqa: F401


def _register(family: str, name: str) -> Callable[[type[T]], type[T]]:
    if not name or not isinstance(name, str):
        raise ConfigError(f"a {family} kind needs a non-empty name")

    def decorate(cls: type[T]) -> type[T]:
        cls.kind = name  # type: ignore[attr-defined]
        _REGISTRIES[family][name] = cls
        return cls

    return decorate


def register_trigger(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: make a trigger kind usable from configs as `trigger = { kind = name, ... }`."""
    return _register("trigger", name)


def register_strategy(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: make a strategy kind usable from configs as `strategy = { kind = name, ... }`."""
    return _register("strategy", name)


def kinds(family: str) -> dict[str, type]:
    """Registered kinds of a family (`trigger` or `strategy`), by name."""
    _load_builtins()
    return dict(_REGISTRIES[family])


def parameters(cls: type) -> dict[str, Any]:
    """A kind's parameters and their defaults (`inspect.Parameter.empty` when required)."""
    if dataclasses.is_dataclass(cls):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if not f.init or f.name.startswith("_"):
                continue
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
            else:
                out[f.name] = inspect.Parameter.empty
        return out
    signature = inspect.signature(cls)
    return {n: p.default for n, p in signature.parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def build(family: str, spec: Any) -> Any:
    """Build a kind from its spec; an already-built object is returned as it is."""
    _load_builtins()
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, Mapping):
        if hasattr(spec, "kind"):
            return spec
        raise ConfigError(f"a {family} must be a table with a 'kind', not {type(spec).__name__}")
    registry = _REGISTRIES[family]
    name = spec.get("kind")
    if name is None:
        raise ConfigError(f"{family} spec {dict(spec)!r} has no 'kind'; valid kinds: {', '.join(sorted(registry))}")
    cls = registry.get(name)
    if cls is None:
        raise ConfigError(f"unknown {family} kind {name!r}; valid kinds: {', '.join(sorted(registry))}")
    params = {k: v for k, v in spec.items() if k != "kind"}
    allowed = parameters(cls)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ConfigError(f"{family} {name!r}: unknown parameter{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(map(repr, unknown))}; valid: {', '.join(allowed) or '(none)'}")
    missing = [p for p, d in allowed.items() if d is inspect.Parameter.empty and p not in params]
    if missing:
        raise ConfigError(f"{family} {name!r}: missing required parameter{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(map(repr, missing))}")
    factory = getattr(cls, "from_params", cls)
    try:
        return factory(**params)
    except ConfigError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith(f"{family} {name!r}") else
                          f"{family} {name!r}: {message}") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{family} {name!r}: {exc}") from exc


def build_trigger(spec: Any) -> Any:
    return build("trigger", spec)


def build_strategy(spec: Any) -> Any:
    return build("strategy", spec)


def _plain(value: Any) -> Any:
    if hasattr(value, "kind") and not isinstance(value, type) and not isinstance(value, Mapping):
        return spec_of(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def spec_of(obj: Any) -> dict[str, Any]:
    """The spec (kind and every parameter, defaults included) that rebuilds `obj`."""
    kind = getattr(obj, "kind", None)
    if kind is None:
        raise ConfigError(f"{type(obj).__name__} is not a registered kind")
    out: dict[str, Any] = {"kind": kind}
    for name in parameters(type(obj)):
        out[name] = _plain(getattr(obj, name))
    return out
