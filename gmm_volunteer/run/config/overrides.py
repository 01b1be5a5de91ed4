"""`--set KEY=VALUE` overrides of a run config (docs/usage.md): parsed as YAML and set on
the raw mapping before validation, so that they are checked like keys written in the
file; every key path is checked against the schema first."""

from __future__ import annotations

import copy
import types
from typing import Annotated, Any, Mapping, Union, get_args, get_origin

from pydantic import BaseModel

from gmm_volunteer.model.errors import ConfigError
from gmm_volunteer.model.suggest import did_you_mean
from gmm_volunteer.run.config.messages import kind_of
from gmm_volunteer.run.config.schema import RunConfig


def parse_override(text: str, source: str = "<overrides>") -> tuple[str, Any]:
    """``"a.b.c=value"`` -> ``("a.b.c", value)`` with value parsed as YAML."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{source}: --set {text!r}: malformed override, expected KEY=VALUE")
    from gmm_volunteer.io.yamlio import YAMLInputError, load_yaml

    try:
        value = load_yaml(raw, "") if raw.strip() else None
    except YAMLInputError as exc:
        problem = str(exc).removeprefix(": ")
        raise ConfigError(f"{source}: {key}: cannot parse override value {raw!r}: {problem}") from None
    return key, value


def apply_overrides(
    d: Mapping[str, Any], overrides: Mapping[str, Any], source: str = "<overrides>"
) -> dict:
    """Return a deep copy of ``d`` with each dotted key of ``overrides`` set.

    Every key path must exist in the run-config schema (free-form option mappings such
    as ``scheduler_options`` accept any sub-key); otherwise `ConfigError` names it. A
    section missing from ``d`` starts from its default, so ``availability.online.scale``
    changes one parameter of the default law instead of replacing the law.
    """
    out = copy.deepcopy(dict(d))
    for key, value in overrides.items():
        parts = key.split(".")
        if any(not p for p in parts):
            raise ConfigError(f"{source}: {key}: malformed key (empty component)")
        defaults, types = _key_path_defaults(parts, source)
        node = out
        for i, part in enumerate(parts[:-1]):
            if isinstance(node, list):  # an entry of a list, by its number (servers.1.capacity)
                node = node[_entry_index(node, parts, i, source)]
                continue
            child = node.get(part)
            if child is None and _list_item(types[i]) is not None:
                raise ConfigError(f"{source}: {'.'.join(parts[: i + 1])}: cannot set {key}: the config "
                                  f"has no {part} list (write the list in the file)")
            if child is None:
                child = node[part] = copy.deepcopy(defaults[i])
            elif isinstance(child, str) and _shorthand_of(types[i]) is not None:
                # e.g. users.allocation: fitted, then --set users.allocation.mean.cpu=0.5
                child = node[part] = _shorthand_of(types[i])(child)
            elif not isinstance(child, (dict, list)) or isinstance(child, list) != (_list_item(types[i]) is not None):
                raise ConfigError(
                    f"{source}: {'.'.join(parts[: i + 1])}: cannot set {key}: "
                    f"{'.'.join(parts[: i + 1])} is {kind_of(child)}, not a mapping"
                )
            node = child
        last = _entry_index(node, parts, len(parts) - 1, source) if isinstance(node, list) else parts[-1]
        node[last] = copy.deepcopy(value)
    return out


def _entry_index(entries: list, parts: list[str], i: int, source: str) -> int:
    """The entry ``parts[i]`` names in the list `entries` (checked against the schema
    already: a number); `ConfigError` when the list has no such entry."""
    index = int(parts[i])
    if index >= len(entries):
        raise ConfigError(f"{source}: {'.'.join(parts[: i + 1])}: cannot set {'.'.join(parts)}: "
                          f"{'.'.join(parts[:i])} has {len(entries)} entries (0 to {len(entries) - 1})")
    return index


def _list_item(tp: Any) -> Any:
    """``X`` for a list section ``list[X]`` (or ``list[X] | None``), else None."""
    tp = _optional_of(tp)
    return get_args(tp)[0] if get_origin(tp) is list and get_args(tp) else None


def _key_path_defaults(parts: list[str], source: str) -> tuple[list[dict], list[Any]]:
    """Check a key path against the schema; return each section's default mapping and
    type (None below a free-form mapping)."""
    tp: Any = RunConfig
    defaults: list[dict] = []
    types: list[Any] = []
    for i, part in enumerate(parts):
        here = ".".join(parts[: i + 1])
        item = _list_item(tp)
        if item is not None and i > 0 and _fields_of(item) is not None:  # a list of sections
            if not part.isdigit():
                raise ConfigError(f"{source}: {here}: an entry of {'.'.join(parts[:i])} is named by its "
                                  f"number (0, 1, ...), got {part!r}")
            defaults.append({})
            tp = item
            types.append(tp)
            continue
        fields = _fields_of(tp)
        if fields is None:
            if _is_free_mapping(tp):  # e.g. scheduler_options.x.y
                pad = len(parts) - len(defaults)
                return defaults + [{}] * pad, types + [None] * pad
            parent = ".".join(parts[:i])
            raise ConfigError(f"{source}: {here}: unknown config key ({parent} is a value, not a section)")
        if part not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"{source}: {here}: unknown config key{did_you_mean(part, fields)} "
                              f"(expected one of: {known})")
        defaults.append(_section_default(tp, part))
        tp = fields[part]
        types.append(tp)
    return defaults, types


def _shorthand_of(tp: Any):
    """The expansion of a section written as a bare string (e.g. ``fitted`` for an
    allocation law), or None when the section has no such form."""
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return getattr(tp, "from_shorthand", None) if isinstance(tp, type) else None


def _section_default(tp: Any, key: str) -> dict:
    """The default of section ``key`` of model ``tp`` as plain data, {} when required."""
    if not (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return {}
    for name, f in tp.model_fields.items():
        if (f.alias or name) == key:
            value = f.get_default(call_default_factory=True)
            if isinstance(value, BaseModel):
                value = value.model_dump(mode="json")  # a bare string for a shorthand
            return value if isinstance(value, dict) else {}
    return {}


def _optional_of(tp: Any) -> Any:
    """``X`` for ``X | None`` (a section that may be left out, e.g. `server` beside
    `servers`), else `tp` itself."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return args[0]
    return tp


def _fields_of(tp: Any) -> dict[str, Any] | None:
    """Sub-keys of a section type (the union of all variants for a `Dist`)."""
    tp = _optional_of(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {(f.alias or name): f.annotation for name, f in tp.model_fields.items()}
    if get_origin(tp) is Annotated:
        return _fields_of(get_args(tp)[0])
    if get_origin(tp) in (Union, types.UnionType):
        merged: dict[str, Any] = {}
        for arg in get_args(tp):
            sub = _fields_of(arg)
            if sub is not None:
                merged.update(sub)
        return merged or None
    return None


def _is_free_mapping(tp: Any) -> bool:
    return tp is dict or get_origin(tp) is dict


def schema_keys() -> list[str]:
    """Every dotted key of the schema, down to sections; a `Dist` and an allocation law
    (`server.allocation`, `users.allocation`) count as one key each."""
    out: list[str] = []

    def walk(tp: Any, prefix: str) -> None:
        tp = _optional_of(tp)
        section = isinstance(tp, type) and issubclass(tp, BaseModel) and _shorthand_of(tp) is None
        fields = _fields_of(tp) if section else None
        if fields is None:
            out.append(prefix)
            return
        for name, sub in fields.items():
            walk(sub, f"{prefix}.{name}" if prefix else name)

    walk(RunConfig, "")
    return out
