"""The registry: the one way kinds come into the workbench.

Four families of kinds: `trigger` (when to compact), `strategy` (how), `importer` (a recorded
session format) and `metric` (a number a replay reports). A kind is a class, usually a frozen
dataclass, registered under a name with a decorator; a spec is a mapping `{"kind": name, **params}`
as written in TOML.

    @wb.register_strategy("keep_last_user")
    @dataclass(frozen=True)
    class KeepLastUser:
        '''Keep the system prompt and the last user message.'''

        keep: int = wb.param(1, doc="user messages kept", min=1)

        def compact(self, context, env): ...

Built-in kinds register through the same decorators, in ordinary modules that this registry
imports by name (`BUILTIN_MODULES`), never statically, so no module of the library has to import
the registry's clients. Installed packages add kinds through the entry-point group
`workbench.plugins`: each entry point names a module whose import registers kinds. Both are
loaded lazily, the first time a kind is looked up or listed; a plugin that fails to import is a
`PluginWarning` naming it, never a crash.

A kind's parameters are its init fields: type from the annotation, default, and (through
`param`) a one-line doc, bounds and choices. Registration wraps the class's `__init__` so every
construction, from a spec or in Python, is validated here and only here: unknown and missing
parameters, types (int, float, bool, str, lists, tables, optional values, nested trigger or
strategy specs), bounds and choices, with errors naming the kind, the parameter, the value and
what is valid. Checks that relate several parameters stay in the kind's `__post_init__`.

The functions taking a family's name answer untyped classes and objects. The library's own callers
go through a `Family` instead, typed by the family's contract and declared next to it:
`compaction.TRIGGERS` and `compaction.STRATEGIES`, `importers.IMPORTERS`, and `METRICS` here.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import importlib.metadata
import inspect
import math
import sys
import threading
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import (
    Annotated,
    Any,
    ClassVar,
    Generic,
    Literal,
    Protocol,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
)

from workbench.errors import ConfigError, did_you_mean

T = TypeVar("T")
K = TypeVar("K")

FAMILIES: tuple[str, ...] = ("trigger", "strategy", "importer", "metric")
#: Modules holding the built-in kinds, imported by name on first use.
BUILTIN_MODULES: tuple[str, ...] = (
    "workbench.triggers",
    "workbench.strategies",
    "workbench.importers",
    "workbench.metrics",
    "workbench.quality",
)
#: The entry-point group through which installed packages contribute kinds.
PLUGIN_GROUP = "workbench.plugins"
DIRECTIONS: tuple[str, ...] = ("higher", "lower", "none")
LEVELS: tuple[str, ...] = ("call", "compaction", "run")

_META_KEY = "workbench"


class PluginWarning(UserWarning):
    """A plugin (or a built-in kinds module) could not be loaded; its kinds are missing."""


@dataclasses.dataclass(frozen=True)
class Nested:
    """Annotation marker: the parameter is a spec of another kind of `family`, built on validation."""

    family: str


#: Annotation of a parameter holding a trigger (given as a spec, a kind name or a built trigger).
TriggerSpec = Annotated[Any, Nested("trigger")]
#: Annotation of a parameter holding a strategy (given as a spec, a kind name or a built strategy).
StrategySpec = Annotated[Any, Nested("strategy")]


# --------------------------------------------------------------------------------------------
# declaring parameters


def param(
    default: Any = dataclasses.MISSING,
    *,
    doc: str = "",
    min: float | None = None,
    max: float | None = None,
    choices: Iterable[Any] | None = None,
    min_exclusive: bool = False,
) -> Any:
    """A dataclass field declaring a kind's parameter: default (none: required), one-line doc,
    inclusive bounds (`min_exclusive` makes the lower one strict) and the allowed values.

    A list or table default is copied for every instance.
    """
    meta = {
        _META_KEY: {
            "doc": doc,
            "min": min,
            "max": max,
            "min_exclusive": min_exclusive,
            "choices": tuple(choices) if choices is not None else None,
        }
    }
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=functools.partial(copy.deepcopy, default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter of a kind, as the registry validates and lists it."""

    name: str
    type: Any
    default: Any = dataclasses.MISSING
    doc: str = ""
    min: float | None = None
    max: float | None = None
    min_exclusive: bool = False
    choices: tuple[Any, ...] | None = None

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    def expected(self) -> str:
        """What a valid value is, in words (`an integer >= 1`, `one of 'topic', 'count'`)."""
        optional = _optional(self.type)
        if self.choices is not None:
            text = "one of " + ", ".join(map(repr, self.choices))
        else:
            base = self.type
            if optional:
                rest = tuple(a for a in get_args(self.type) if a is not _NONE)
                base = rest[0] if len(rest) == 1 else Union[rest]  # noqa: UP007 - built from a tuple
            text = _type_words(base)
            low = "(" if self.min_exclusive else "["
            if self.min is not None and self.max is not None:
                text += f" within {low}{_num(self.min)}, {_num(self.max)}]"
            elif self.min is not None:
                text += f" {'>' if self.min_exclusive else '>='} {_num(self.min)}"
            elif self.max is not None:
                text += f" <= {_num(self.max)}"
        return text + (", or none" if optional else "")

    def validate(self, value: Any) -> Any:
        """The value converted to its declared type (TOML's 3.0 for an int is 3), or ConfigError."""
        if value is None and _optional(self.type):
            return None
        try:
            value = _convert(self.type, value, self.name)
        except _Mismatch as problem:
            if problem.path == self.name:
                raise ConfigError(f"{self.name} must be {self.expected()}, not {_show(problem.value)}") from None
            raise ConfigError(f"{problem.path} must be {problem.expected}, not {_show(problem.value)}") from None
        if value is None:
            return None
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{self.name} must be {self.expected()}, not {_show(value)}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            too_low = self.min is not None and (value <= self.min if self.min_exclusive else value < self.min)
            too_high = self.max is not None and value > self.max
            if too_low or too_high:
                raise ConfigError(f"{self.name} must be {self.expected()}, not {_show(value)}")
        return value

    def describe(self) -> dict[str, Any]:
        """The JSON-able listing of this parameter (`workbench kinds --json`)."""
        out = {
            "name": self.name,
            "type": type_name(self.type),
            "default": None if self.required else _plain(self.default),
            "required": self.required,
            "doc": self.doc,
            "min": self.min,
            "max": self.max,
            "choices": list(self.choices) if self.choices is not None else None,
        }
        if self.min_exclusive:
            out["min_exclusive"] = True
        return out


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --------------------------------------------------------------------------------------------
# types: conversion and names


class _Mismatch(Exception):
    def __init__(self, path: str, expected: str, value: Any):
        super().__init__(path)
        self.path, self.expected, self.value = path, expected, value


_SEQUENCES = (list, tuple, Sequence)
_MAPPINGS = (dict, Mapping)
_NONE = type(None)


def _optional(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType) and _NONE in get_args(tp)


def _nested_family(tp: Any) -> str | None:
    if get_origin(tp) is Annotated:
        return next((m.family for m in tp.__metadata__ if isinstance(m, Nested)), None)
    return None


def _type_words(tp: Any) -> str:
    family = _nested_family(tp)
    if family is not None:
        return f"a {family} spec (a table with a 'kind')"
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _type_words(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join("none" if a is _NONE else _type_words(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if origin in _SEQUENCES or tp in (list, tuple):
        item = args[0] if args else Any
        return "a list" + (f" of {type_name(item)}" if item is not Any else "")
    if origin in _MAPPINGS or tp is dict:
        return "a table" + (f" of {type_name(args[1])}" if len(args) == 2 and args[1] is not Any else "")
    return f"a {type_name(tp)}"


def type_name(tp: Any) -> str:
    """A short name for a parameter type, as listed by `describe` (`int`, `list[str]`, `strategy`)."""
    family = _nested_family(tp)
    if family is not None:
        return family
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return type_name(args[0])
    if tp is Any:
        return "any"
    if tp is _NONE:
        return "None"
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is Literal:
        return " | ".join(map(repr, args))
    if origin in _SEQUENCES:
        return f"list[{type_name(args[0]) if args else 'any'}]"
    if origin in _MAPPINGS:
        return f"dict[{', '.join(type_name(a) for a in args)}]" if args else "dict"
    if tp in (list, tuple):
        return "list"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any, path: str) -> Any:
    family = _nested_family(tp)
    if family is not None:
        return _nested(family, value, path)
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any or tp is object:
        return value
    if origin is Annotated:
        return _convert(args[0], value, path)
    if origin in (Union, types.UnionType):
        if value is None and _NONE in args:
            return None
        for option in (a for a in args if a is not _NONE):
            try:
                return _convert(option, value, path)
            except _Mismatch:
                continue
        raise _Mismatch(path, _type_words(tp), value)
    if origin is Literal:
        if value not in args:
            raise _Mismatch(path, _type_words(tp), value)
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise _Mismatch(path, "true or false", value)
        return value
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Mismatch(path, "an integer", value)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _Mismatch(path, "a finite number", value)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _Mismatch(path, "a string", value)
        return value
    if origin in _SEQUENCES or tp in (list, tuple):
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
            raise _Mismatch(path, _type_words(tp), value)
        item = args[0] if args and (origin is not tuple or (len(args) == 2 and args[1] is Ellipsis)) else Any
        items = [_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return items if origin is list or tp is list else tuple(items)
    if origin in _MAPPINGS or tp is dict:
        if not isinstance(value, Mapping):
            raise _Mismatch(path, _type_words(tp), value)
        key_type, value_type = args if len(args) == 2 else (Any, Any)
        out = {}
        for key, item in value.items():
            out[_convert(key_type, key, f"{path} key")] = _convert(value_type, item, f"{path}[{key!r}]")
        return out
    if isinstance(tp, type) and not isinstance(value, tp):
        raise _Mismatch(path, _type_words(tp), value)
    return value


def _nested(family: str, value: Any, path: str) -> Any:
    try:
        return build(family, value)
    except ConfigError as exc:
        if path == family:  # a config's `trigger` / `strategy`: the error names the kind already
            raise
        raise ConfigError(f"{path}: {exc}") from exc


# --------------------------------------------------------------------------------------------
# a kind's parameters

_PARAMS: dict[type, dict[str, Param]] = {}
_BUILTIN_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "Any": Any}


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception:  # e.g. a class defined in a function naming a local type: resolve field by field
        hints: dict[str, Any] = {}
        module = vars(sys.modules.get(cls.__module__, types.ModuleType("_")))
        for klass in reversed(cls.__mro__):
            for name, annotation in getattr(klass, "__annotations__", {}).items():
                if isinstance(annotation, str):
                    try:
                        annotation = eval(annotation, dict(module), dict(vars(klass)))
                    except Exception:
                        annotation = _BUILTIN_TYPES.get(annotation, Any)
                hints[name] = annotation
        return hints


def params_of(cls: type) -> dict[str, Param]:
    """A kind's parameters (its public init fields, or its `__init__` parameters), by name."""
    cached = _PARAMS.get(cls)
    if cached is not None:
        return cached
    out: dict[str, Param] = {}
    if dataclasses.is_dataclass(cls):
        hints = _hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init or f.name.startswith("_"):
                continue
            meta = dict(f.metadata.get(_META_KEY, {}))
            default = f.default
            if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            out[f.name] = Param(
                name=f.name,
                type=hints.get(f.name, Any),
                default=default,
                doc=meta.get("doc", ""),
                min=meta.get("min"),
                max=meta.get("max"),
                min_exclusive=meta.get("min_exclusive", False),
                choices=meta.get("choices"),
            )
    else:
        for name, p in inspect.signature(cls).parameters.items():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or name.startswith("_"):
                continue
            annotation = p.annotation if p.annotation is not p.empty else Any
            if isinstance(annotation, str):
                annotation = _BUILTIN_TYPES.get(annotation, Any)
            out[name] = Param(
                name=name, type=annotation, default=dataclasses.MISSING if p.default is p.empty else p.default
            )
    _PARAMS[cls] = out
    return out


def parameters(cls: type) -> dict[str, Any]:
    """A kind's parameters and their defaults (`inspect.Parameter.empty` when required)."""
    return {name: inspect.Parameter.empty if p.required else p.default for name, p in params_of(cls).items()}


def validate(cls: type, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The keyword arguments that construct `cls`, checked and converted (ConfigError otherwise)."""
    table = params_of(cls)
    if not table and not args and not kwargs:
        return {}  # a kind without parameters (most metrics), built for every replay
    names = list(table)
    if len(args) > len(names):
        raise ConfigError(f"takes at most {len(names)} positional parameters ({', '.join(names)})")
    given = dict(zip(names, args, strict=False))
    for name, value in (kwargs or {}).items():
        if name in given:
            raise ConfigError(f"parameter {name!r} given twice")
        given[name] = value
    private = {k: v for k, v in given.items() if k.startswith("_") and k not in table}
    unknown = sorted(k for k in given if k not in table and k not in private)
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        raise ConfigError(
            f"unknown parameter{plural} {', '.join(map(repr, unknown))}; "
            f"valid: {', '.join(names) or '(none)'}{did_you_mean(unknown, names)}"
        )
    missing = [p for p in table.values() if p.required and p.name not in given]
    if missing:
        plural = "s" if len(missing) > 1 else ""
        detail = "; ".join(f"{p.name!r}: {p.expected()}" + (f" ({p.doc})" if p.doc else "") for p in missing)
        raise ConfigError(f"missing required parameter{plural} {detail}")
    out = {name: table[name].validate(value) for name, value in given.items() if name in table}
    for p in table.values():
        if p.name not in out:
            try:  # defaults go through the same conversion: nested specs are built, tables copied
                out[p.name] = p.validate(p.default)
            except ConfigError:
                out[p.name] = p.default  # a default outside its declared type is the author's choice
    return out | private


# --------------------------------------------------------------------------------------------
# registration

_REGISTRIES: dict[str, dict[str, type]] = {family: {} for family in FAMILIES}
_ALIASES: dict[str, dict[str, str]] = {family: {} for family in FAMILIES}
_LOADED = False
_LOADING = False
_LOAD_LOCK = threading.RLock()  # re-entrant: the modules it imports register kinds


def _label(cls: type) -> str:
    family = getattr(cls, "family", "kind")
    return f"{family} {getattr(cls, 'kind', cls.__name__)!r}"


def _prefixed(label: str, exc: ConfigError) -> ConfigError:
    message = str(exc)
    return ConfigError(message if message.startswith(label) else f"{label}: {message}")


def _install_validation(cls: type) -> None:
    original: Callable[..., None] = getattr(cls, "__init__")  # noqa: B009 - mypy rejects cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        owner = type(self)
        try:
            values = validate(owner, args, kwargs)
            original(self, **values)
        except ConfigError as exc:
            raise _prefixed(_label(owner), exc) from exc

    __init__.__wrapped_init__ = getattr(original, "__wrapped_init__", original)  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]  # registration makes construction validate


#: The methods a kind of each family must define, as (name, arguments after self, how it reads);
#: optional ones are checked only when the class defines them.
_CONTRACTS: dict[str, tuple[tuple[str, int, str, bool], ...]] = {
    "trigger": (
        ("should_compact", 1, "should_compact(self, view) -> bool", True),
        ("notify_compacted", 1, "notify_compacted(self, view) -> None", True),
    ),
    "strategy": (
        ("compact", 2, "compact(self, context, env) -> list[Message]", True),
        ("fallback", 2, "fallback(self, context, env) -> list[Message]", False),
    ),
    "metric": (("unavailable", 1, "unavailable(self, result) -> str | None", False),),
}


def _method_problem(cls: type, method: str, arguments: int) -> str | None:
    """Why `cls` cannot answer `method` with `arguments` positional arguments (None when it can).

    `*args`, `**kwargs` and defaulted extra parameters are accepted; a signature that cannot be
    read (a builtin) is given the benefit of the doubt."""
    try:
        static = inspect.getattr_static(cls, method)
    except AttributeError:
        return f"{cls.__qualname__} has no {method} method"
    found = getattr(cls, method, None)
    if not callable(found):
        return f"{cls.__qualname__}.{method} is {type(found).__name__}, not a method"
    try:
        signature = inspect.signature(found)
    except (TypeError, ValueError):
        return None
    bound = isinstance(static, (staticmethod, classmethod)) or not inspect.isfunction(found)
    placeholders = [None] * (arguments + (0 if bound else 1))
    try:
        signature.bind(*placeholders)
    except TypeError:
        return f"{cls.__qualname__}.{method} takes {signature}"
    return None


def _check_contract(family: str, name: str, cls: type) -> None:
    """ConfigError unless `cls` defines the methods the replay calls on a kind of `family`."""
    for method, arguments, expected, required in _CONTRACTS.get(family, ()):
        if not required and inspect.getattr_static(cls, method, None) is None:
            continue
        problem = _method_problem(cls, method, arguments)
        if problem is not None:
            rule = f"a {family} must define" if required else f"a {family}'s {method}, if it has one, must be"
            raise ConfigError(f"{family} kind {name!r}: {problem}; {rule} {expected}")


def _register(
    family: str, name: str, *, defaults: Mapping[str, Any] | None = None, **attributes: Any
) -> Callable[[type[T]], type[T]]:
    """The decorator registering a class in `family`: it sets `kind`, `family` and `attributes` on the
    class, and each of `defaults` the class does not define itself, so a family's `Family` type holds."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"a {family} kind needs a non-empty name, not {name!r}")

    def decorate(cls: type[T]) -> type[T]:
        if not isinstance(cls, type):
            raise ConfigError(f"{family} kind {name!r}: register a class, not {type(cls).__name__}")
        _check_contract(family, name, cls)
        registry = _REGISTRIES[family]
        taken = registry.get(name)
        if (
            taken is not None
            and taken is not cls
            and (taken.__module__, taken.__qualname__) != (cls.__module__, cls.__qualname__)
        ):
            raise ConfigError(
                f"{family} kind {name!r} is already registered by {taken.__module__}.{taken.__qualname__}"
            )
        type.__setattr__(cls, "kind", name)
        type.__setattr__(cls, "family", family)
        for key, value in attributes.items():
            type.__setattr__(cls, key, value)
        for key, value in (defaults or {}).items():
            if not hasattr(cls, key):
                type.__setattr__(cls, key, value)
        if not hasattr(cls.__dict__.get("__init__", cls.__init__), "__wrapped_init__"):
            _install_validation(cls)
        _PARAMS.pop(cls, None)
        registry[name] = cls
        for alias in attributes.get("aliases", ()):
            _ALIASES[family][alias] = name
        return cls

    return decorate


def register_trigger(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: a trigger kind, usable from configs as `trigger = { kind = name, ... }`.

    The class answers `should_compact(view) -> bool` and `notify_compacted(view)`; a class without
    them, or whose methods take other arguments, is refused here (ConfigError naming the kind).
    """
    return _register("trigger", name)


def register_strategy(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: a strategy kind, usable from configs as `strategy = { kind = name, ... }`.

    The class answers `compact(context, env) -> list[Message]` and may define `fallback(context, env)`;
    a class without `compact`, or whose methods take other arguments, is refused here (ConfigError).
    """
    return _register("strategy", name)


def register_importer(name: str, *, aliases: Iterable[str] = (), priority: int = 0) -> Callable[[type[T]], type[T]]:
    """Class decorator: a recorded-session format, usable as `workbench import --format name`.

    The class (built without parameters) answers `detect(path, head: bytes) -> bool` (sniffing the
    file's first bytes) and `iter_sessions(path) -> Iterable[Session]`. Auto-detection asks the
    formats by descending `priority`, then registration order; the catch-all chat formats use
    negative priorities, so a plugin's format (priority 0) is asked before them.
    """
    names = tuple(a.strip().lower() for a in aliases)
    return _register("importer", name, aliases=names, priority=int(priority))


def register_metric(name: str, *, direction: str, unit: str = "", level: str = "run") -> Callable[[type[T]], type[T]]:
    """Class decorator: a metric every replay reports (DESIGN §7).

    `direction`: which way is better (`higher`, `lower`, `none`); `unit` (e.g. `tokens`, `usd`);
    `level`: what one value describes (`call`, `compaction`, `run`). The class (built without
    parameters) answers `compute(result) -> int | float | str | None` and optionally
    `per_compaction(result) -> list[Mapping]` (one row of columns per compaction event). A class
    attribute `requires_model = True` makes it run only when asked for by name; `reads_context =
    False` says its value does not depend on the compacted context (the metric audit leaves it out).
    `reusable = True` says its values are a function of the recording, the compaction contexts, the
    calls' positions and the tokenizer only (`MetricMemo`): for the workbench's own metrics, whose
    code the memo's version covers, an experiment reuses them for a replay that produced the same.
    An optional `unavailable(result) -> str | None` says why the metric cannot be measured for a
    result (e.g. its config names no model, so `compute` gives None): asked for by name, that is a
    warning. `METRICS` is the family typed by this contract (`Metric`).
    """
    if direction not in DIRECTIONS:
        raise ConfigError(f"metric {name!r}: direction must be one of {', '.join(DIRECTIONS)}, not {direction!r}")
    if level not in LEVELS:
        raise ConfigError(f"metric {name!r}: level must be one of {', '.join(LEVELS)}, not {level!r}")
    return _register(
        "metric",
        name,
        defaults={"requires_model": False, "reads_context": True, "reusable": False},
        direction=direction,
        unit=unit,
        level=level,
    )


def unregister(family: str, name: str) -> None:
    """Forget a kind (a test's or a notebook's that redefines it under another class); unknown names are ignored."""
    _family(family)
    _REGISTRIES[family].pop(name, None)
    for alias, target in list(_ALIASES[family].items()):
        if target == name:
            del _ALIASES[family][alias]


# --------------------------------------------------------------------------------------------
# loading built-ins and plugins


def _warn(message: str) -> None:
    warnings.warn(message, PluginWarning, stacklevel=4)


def _import_builtin(module: str) -> None:
    try:
        importlib.import_module(module)
    except Exception as exc:
        _warn(f"built-in kinds module {module} could not be imported: {type(exc).__name__}: {exc}")


def _plugin_entry_points() -> list[importlib.metadata.EntryPoint]:
    seen: set[tuple[str, str]] = set()
    out = []
    for entry in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        if (entry.name, entry.value) not in seen:
            seen.add((entry.name, entry.value))
            out.append(entry)
    return out


def load_kinds() -> None:
    """Import the built-in kinds modules and every `workbench.plugins` entry point (once).

    Other threads asking meanwhile wait until the kinds are loaded (before, they went on with an
    empty registry: "unknown trigger kind"); a call from the loading itself returns at once.
    """
    global _LOADED, _LOADING
    if _LOADED:
        return
    with _LOAD_LOCK:
        if _LOADED or _LOADING:
            return
        _LOADING = True
        try:
            _load_kinds()
        finally:
            _LOADED, _LOADING = True, False


def _load_kinds() -> None:
    for module in BUILTIN_MODULES:
        _import_builtin(module)
    try:
        entries = _plugin_entry_points()
    except Exception as exc:
        _warn(f"workbench plugins could not be listed: {type(exc).__name__}: {exc}")
        return
    for entry in entries:
        try:
            entry.load()
        except Exception as exc:
            _warn(
                f"workbench plugin {entry.name!r} ({entry.value}) failed to load and is ignored: "
                f"{type(exc).__name__}: {exc}"
            )


def kinds_only_here() -> list[str]:
    """The registered kinds a fresh process would not know, as "family:name": those defined neither in
    the workbench nor in the package of a `workbench.plugins` entry point (a script's or a notebook's
    own kinds). Worker processes load the built-in kinds and the plugins, nothing else."""
    load_kinds()
    try:
        packages = {entry.value.split(":")[0].split(".")[0] for entry in _plugin_entry_points()}
    except Exception:  # the plugins cannot be listed: none is known to a fresh process either
        packages = set()
    packages.add("workbench")
    return [
        f"{family}:{name}"
        for family, registered in _REGISTRIES.items()
        for name, cls in registered.items()
        if cls.__module__.split(".")[0] not in packages
    ]


def _builtin_rank(cls: type) -> int:
    """Where a kind's module comes in `BUILTIN_MODULES` (the others after them)."""
    module = cls.__module__
    for rank, name in enumerate(BUILTIN_MODULES):
        if module == name or module.startswith(name + "."):
            return rank
    return len(BUILTIN_MODULES) if module.startswith("workbench.") else len(BUILTIN_MODULES) + 1


def _family(family: str) -> dict[str, type]:
    """The kinds of a family: built-in ones first, in the order of `BUILTIN_MODULES` whatever order
    they were imported in, then the others; each group in registration order."""
    if family not in _REGISTRIES:
        raise ConfigError(f"unknown kind family {family!r}; valid: {', '.join(FAMILIES)}")
    load_kinds()
    registered = tuple(_REGISTRIES[family].items())
    ordered = _ORDERED.get(family)
    if ordered is None or ordered[0] != registered:  # sorted again only when a kind came or went
        ordered = _ORDERED[family] = (registered, dict(sorted(registered, key=lambda item: _builtin_rank(item[1]))))
    return ordered[1]


#: per family, the registry's items when last sorted and the sorted mapping (`_family`)
_ORDERED: dict[str, tuple[tuple[tuple[str, type], ...], dict[str, type]]] = {}


def kinds(family: str) -> dict[str, type]:
    """The registered kinds of a family (`trigger`, `strategy`, `importer`, `metric`), by name."""
    return dict(_family(family))


def lookup(family: str, name: str) -> type:
    """The class registered as `name` (or an alias of it) in `family`; ConfigError listing the valid ones."""
    registry = _family(family)
    if isinstance(name, str):
        cls = registry.get(name) or registry.get(_ALIASES[family].get(name.strip().lower(), ""))
        if cls is not None:
            return cls
    raise ConfigError(
        f"unknown {family} kind {name!r}; valid kinds: {', '.join(sorted(registry)) or '(none)'}"
        f"{did_you_mean([name] if isinstance(name, str) else [], registry)}"
    )


def _doc_line(cls: type) -> str:
    """The docstring's first paragraph on one line (its summary, which may wrap in the source)."""
    doc = cls.__dict__.get("__doc__") or ""
    if dataclasses.is_dataclass(cls) and doc.startswith(cls.__name__ + "("):
        return ""  # the signature dataclasses writes when the class has no docstring
    return " ".join(inspect.cleandoc(doc).split("\n\n", 1)[0].split()) if doc.strip() else ""


def describe(family: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every kind of every family (or of one) with its one-line doc and parameters, JSON-able.

    `{"strategy": [{"name", "doc", "params": [{"name", "type", "default", "doc", "min", "max",
    "choices", ...}]}], ...}`; metrics add `direction`, `unit`, `level` and `requires_model`,
    importers `aliases` and `priority`. The listing of `workbench kinds --json`, the app and README.
    """
    families = FAMILIES if family is None else (family,)
    out: dict[str, list[dict[str, Any]]] = {}
    for name in families:
        entries = []
        for kind, cls in _family(name).items():
            entry: dict[str, Any] = {
                "name": kind,
                "doc": _doc_line(cls),
                "params": [p.describe() for p in params_of(cls).values()],
            }
            declared: Any = cls  # an importer's class attributes, set by its decorator
            if name == "metric":
                metric = cast("type[Metric]", cls)
                entry.update(
                    direction=metric.direction,
                    unit=metric.unit,
                    level=metric.level,
                    requires_model=bool(metric.requires_model),
                )
            if name == "importer":
                entry.update(aliases=list(declared.aliases), priority=declared.priority)
            entries.append(entry)
        out[name] = entries
    return out


# --------------------------------------------------------------------------------------------
# building kinds and reading them back


def _is_kind(obj: Any, family: str) -> bool:
    return (
        not isinstance(obj, (type, Mapping, str))
        and getattr(obj, "kind", None) is not None
        and getattr(obj, "family", family) == family
    )


def build(family: str, spec: Any) -> Any:
    """A kind built from its spec (a table with a `kind`, or a kind name); a built one is returned as it is."""
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, Mapping):
        if _is_kind(spec, family):
            return spec
        raise ConfigError(f"a {family} must be a table with a 'kind', not {_show(spec)}")
    name = spec.get("kind")
    if name is None:
        valid = ", ".join(sorted(_family(family)))
        raise ConfigError(f"{family} spec {_show(dict(spec))} has no 'kind'; valid kinds: {valid}")
    cls = lookup(family, name)
    params = {k: v for k, v in spec.items() if k != "kind"}
    factory = getattr(cls, "from_params", cls)
    try:
        return factory(**params)
    except ConfigError as exc:
        raise _prefixed(_label(cls), exc) from exc


def build_trigger(spec: Any) -> Any:
    return build("trigger", spec)


def build_strategy(spec: Any) -> Any:
    return build("strategy", spec)


# --------------------------------------------------------------------------------------------
# typed families


@dataclasses.dataclass(frozen=True)
class Family(Generic[K]):
    """One family of kinds, typed by the contract its kinds meet: what `lookup` and `build` answer.

    The string functions (`lookup("strategy", name)`) answer a bare `type`: the registry sits below
    the contracts and cannot name them. Each contract's module declares its family instead
    (`compaction.TRIGGERS: Family[Trigger]`, `compaction.STRATEGIES`, `importers.IMPORTERS`, and
    `METRICS` here, whose contract the registry itself defines), and callers going through it read
    a kind's methods and declared attributes as typed. The cast is sound because a class enters a
    family only through its decorator, which checks the methods `_CONTRACTS` names and sets the
    class attributes its family declares.
    """

    name: str

    def __post_init__(self) -> None:
        if self.name not in FAMILIES:
            raise ConfigError(f"unknown kind family {self.name!r}; valid: {', '.join(FAMILIES)}")

    def kinds(self) -> dict[str, type[K]]:
        """The family's kinds by name, built-in ones first (`registry.kinds`)."""
        return cast("dict[str, type[K]]", kinds(self.name))

    def lookup(self, name: str) -> type[K]:
        """The class registered as `name` or an alias of it; ConfigError listing the valid ones."""
        return cast("type[K]", lookup(self.name, name))

    def build(self, spec: Any) -> K:
        """A kind built from a spec or a kind name; a built one is returned as it is (`registry.build`)."""
        return cast(K, build(self.name, spec))


class Metric(Protocol):
    """A metric kind as a replay computes it: `register_metric` sets the class attributes (the
    optional `requires_model` and `reads_context` to their defaults when the class leaves them out).

    `compute` may give None (not measurable for this result); `per_compaction(result)` and
    `unavailable(result)` are optional and read through `getattr`.
    """

    kind: ClassVar[str]
    direction: ClassVar[str]
    unit: ClassVar[str]
    level: ClassVar[str]
    requires_model: ClassVar[bool]
    reads_context: ClassVar[bool]
    reusable: ClassVar[bool]

    def compute(self, result: Any) -> Any: ...


#: The metric family, typed: `METRICS.lookup(name).direction` is a `str`.
METRICS: Family[Metric] = Family("metric")


def _plain(value: Any) -> Any:
    if not isinstance(value, (type, Mapping, str)) and getattr(value, "kind", None) is not None:
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
    for name in params_of(type(obj)):
        out[name] = _plain(getattr(obj, name))
    return out


def _fresh_value(value: Any) -> Any:
    if not isinstance(value, (type, Mapping, str)) and getattr(value, "kind", None) is not None:
        return fresh(value)
    if isinstance(value, tuple):
        return tuple(_fresh_value(v) for v in value)
    if isinstance(value, list):
        return [_fresh_value(v) for v in value]
    return value


def fresh(obj: T) -> T:
    """A new instance of a built kind with the same parameters and none of its state (nested kinds too).

    Triggers keep per-replay state; every replay starts from a fresh one.
    """
    cls = type(obj)
    values = {name: _fresh_value(getattr(obj, name)) for name in params_of(cls)}
    unchecked = getattr(cls.__init__, "__wrapped_init__", None)
    if unchecked is None:
        return cls(**values)
    new = cls.__new__(cls)  # the values come from a built kind: validated once already
    unchecked(new, **values)
    return new


# --------------------------------------------------------------------------------------------
# metrics


MetricValues = tuple[dict[str, Any], dict[str, list[Mapping[str, Any]]]]


class MetricMemo(Protocol):
    """Values of the reusable metrics measured before, for replays that came out the same
    (`workbench.quality.measure_memo.StoredMeasures` is the experiments' own).

    `get(result, names)` answers the values of the metrics `names` stored for a replay like `result`
    (None: none stored, or not of every name, or `result` cannot be told apart from others: it is then
    measured); `put(result, values)` stores those just measured."""

    def get(self, result: Any, names: frozenset[str]) -> MetricValues | None: ...

    def put(self, result: Any, values: MetricValues) -> None: ...


def reusable_metrics(kinds: Mapping[str, type[Any]] | None = None) -> frozenset[str]:
    """The metrics a `MetricMemo` may answer: `reusable`, needing no model, and the workbench's own
    (a memo's version is the workbench's code; a plugin's or a notebook's metric is measured every time)."""
    kinds = METRICS.kinds() if kinds is None else kinds
    return frozenset(
        name
        for name, cls in kinds.items()
        if getattr(cls, "reusable", False)
        and not getattr(cls, "requires_model", False)
        and cls.__module__.startswith("workbench.")
    )


def evaluate_metrics(result: Any, names: Iterable[str] | None = None, memo: MetricMemo | None = None) -> MetricValues:
    """Compute the metrics of a replay result: every registered metric without `requires_model`,
    plus those named in `names`.

    Returns (run-level values by metric name, per-compaction rows by metric name for the metrics
    that define `per_compaction`). A metric that fails is a warning naming it and a None value.
    The metrics asked for by name that are `unavailable` for this result are one warning per
    reason, naming them: asking for what cannot be measured is not silently an empty column.

    With `memo`, the reusable metrics (`reusable_metrics`) of a result whose fingerprint the memo
    holds are read from it instead of measured, and stored in it once measured (unless one failed).
    """
    registry = METRICS.kinds()
    wanted = list(dict.fromkeys(names or ()))
    for name in wanted:
        METRICS.lookup(name)
    reusable = reusable_metrics(registry) if memo is not None else frozenset()
    stored = memo.get(result, reusable) if memo is not None and reusable else None
    values: dict[str, Any] = {}
    columns: dict[str, list[Mapping[str, Any]]] = {}
    unavailable: dict[str, list[str]] = {}
    failed: set[str] = set()
    for name, cls in registry.items():
        if cls.requires_model and name not in wanted:
            continue
        try:
            metric = cls()
            why = getattr(metric, "unavailable", None)
            reason = why(result) if name in wanted and callable(why) else None
            if reason:
                unavailable.setdefault(str(reason), []).append(name)
            if stored is not None and name in reusable:
                values[name] = stored[0][name]
                if name in stored[1]:
                    columns[name] = [dict(row) for row in stored[1][name]]
                continue
            values[name] = metric.compute(result)
            per_compaction = getattr(metric, "per_compaction", None)
            if callable(per_compaction):
                columns[name] = [dict(row) for row in per_compaction(result)]
        except Exception as exc:
            warnings.warn(
                f"metric {name!r} failed and is reported as None: {type(exc).__name__}: {exc}",
                RuntimeWarning,
                stacklevel=2,
            )
            values[name] = None
            failed.add(name)
    for reason, named in unavailable.items():
        warnings.warn(
            f"{', '.join(named)} cannot be measured and {'is' if len(named) == 1 else 'are'} None: {reason}",
            UserWarning,
            stacklevel=2,
        )
    if memo is not None and reusable and stored is None and not failed & reusable:
        memo.put(result, ({n: values[n] for n in reusable}, {n: columns[n] for n in reusable if n in columns}))
    return values, columns


__all__ = [
    "BUILTIN_MODULES",
    "DIRECTIONS",
    "FAMILIES",
    "LEVELS",
    "METRICS",
    "PLUGIN_GROUP",
    "Family",
    "Metric",
    "MetricMemo",
    "Nested",
    "Param",
    "PluginWarning",
    "StrategySpec",
    "TriggerSpec",
    "build",
    "build_strategy",
    "build_trigger",
    "describe",
    "evaluate_metrics",
    "fresh",
    "kinds",
    "kinds_only_here",
    "load_kinds",
    "lookup",
    "param",
    "parameters",
    "params_of",
    "register_importer",
    "register_metric",
    "register_strategy",
    "register_trigger",
    "reusable_metrics",
    "spec_of",
    "type_name",
    "unregister",
    "validate",
]
