"""Words of the run config's errors (docs/usage.md, "Errors"): each problem pydantic finds,
one line ``<file>: <dotted.key>: <problem>``, with a close name for an unknown key, the
accepted values, and a hint for a number written with a unit or in quotes."""

from __future__ import annotations

import math
import re
from typing import Any, Iterable

from pydantic import BaseModel, ValidationError

from gmm_volunteer.model.constants import RESOURCE_UNITS
from gmm_volunteer.model.laws import NAMES as DIST_NAMES
from gmm_volunteer.model.suggest import did_you_mean, known_keys, quoted_choices


class OptionsError(ValueError):
    """A policy's options failed its Options model; `format_errors` reports each
    problem under its own dotted key (e.g. ``scheduler_options.bogus``)."""

    def __init__(self, exc: ValidationError, data: Any, model: Any = None):
        super().__init__(str(exc))
        self.errors = exc.errors(include_url=False)
        self.data = data
        self.model = model  # the policy's Options model, for close-name suggestions


def format_errors(exc: ValidationError, data: Any, source: str, root: type[BaseModel]) -> str:
    """One line ``<source>: <dotted.key>: <problem>`` per problem of `exc`; `root` is
    the model `data` was validated against (the run config), where unknown keys'
    close names and the keys' units are looked up."""
    lines = []
    for err in exc.errors(include_url=False):
        key = _dotted(err["loc"], data)
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, OptionsError):
            for sub in inner.errors:
                known = known_keys(inner.model, sub["loc"]) if inner.model is not None else []
                lines.append(f"{source}: {key}.{_dotted(sub['loc'], inner.data)}: {_describe(sub, known, root)}")
            continue
        known = known_keys(root, err["loc"]) if err["type"] == "extra_forbidden" else []
        lines.append(f"{source}: {key or '<top level>'}: {_describe(err, known, root)}")
    return "\n".join(lines)


def _dotted(loc: tuple, data: Any) -> str:
    """Dotted key of an error location, without the union tags pydantic inserts."""
    parts: list[str] = []
    node = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, dict) and part in node:
            parts.append(str(part))
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            parts.append(str(part))
            node = node[part]
        elif last:
            parts.append(str(part))
        # otherwise it is a tagged-union branch name (e.g. "weibull"): not a key
    return ".".join(parts)


def kind_of(x: Any) -> str:
    names = {list: "a list", dict: "a mapping", str: "a string", int: "a number",
             float: "a number", bool: "a boolean", type(None): "null"}
    return names.get(type(x), type(x).__name__)


def value_words(x: Any) -> str:
    return "null" if x is None else f"{kind_of(x)} {x!r}"


def number(x: Any) -> Any:
    return int(x) if isinstance(x, float) and x.is_integer() else x


# Units a value may be written with by mistake (a config's numbers carry none), as
# (the key's unit, factor): "2.5 GB" for a key in MB is 2500.
_UNIT_FACTORS = {
    "MB": {"kB": 1e-3, "KB": 1e-3, "MB": 1.0, "GB": 1e3, "TB": 1e6},
    "Mbit/s": {"kbit/s": 1e-3, "Kbit/s": 1e-3, "Mbit/s": 1.0, "Gbit/s": 1e3, "kbps": 1e-3,
               "Mbps": 1.0, "Gbps": 1e3},
    "%": {"%": 1.0},
    "s": {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0},
}


def _unit_of_key(loc: tuple, root: type[BaseModel]) -> str | None:
    """The unit a config key's number is in, where the key says it (docs/usage.md,
    "Keys"): a base profile resource, or a duration law's scale (seconds)."""
    keys = [str(p) for p in loc]
    if keys and keys[0] == "base_profile" and keys[-1] in RESOURCE_UNITS:
        return RESOURCE_UNITS[keys[-1]]
    if keys and keys[-1] == "scale" and _is_duration_law(loc[:-2], root):
        return "s"
    return None


def _unit_hint(text: str, loc: tuple, root: type[BaseModel]) -> str:
    """The hint for a number written with a unit (``2.5 GB``): numbers carry no unit, and
    the value in the key's unit when the written unit converts."""
    m = re.fullmatch(r"\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z%/]+)\s*", text)
    if not m:
        return ""
    unit = _unit_of_key(loc, root)
    if unit is None:
        return f"; numbers in a config carry no unit: write the number alone, in the key's unit (docs/usage.md, \"Keys\")"
    factor = _UNIT_FACTORS.get(unit, {}).get(m.group(2))
    if factor is None:
        return f"; numbers in a config carry no unit: write the number alone, in {unit}"
    return f"; numbers in a config carry no unit: this key is in {unit}, so write {float(m.group(1)) * factor:g}"


def _is_duration_law(loc: tuple, root: type[BaseModel]) -> bool:
    """Whether the config key at `loc` holds a duration law (`Dist`, a mapping with a
    ``dist`` key), found from the fields of model `root`."""
    node: Any = root
    field = None
    for part in loc:
        fields = getattr(node, "model_fields", None)
        if not isinstance(fields, dict) or part not in fields:
            return False
        field = fields[part]
        node = field.annotation
    return field is not None and field.discriminator == "dist"


def _describe(err: dict, known: Iterable[str], root: type[BaseModel]) -> str:
    """One problem in words; `known` lists the keys accepted where an unknown key was
    found, for a close-name suggestion."""
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = err.get("input")
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        loc = err.get("loc") or ("",)
        return "unknown key" + did_you_mean(loc[-1], known)
    if kind == "greater_than_equal":
        return f"must be >= {number(ctx['ge'])} (got {got!r})"
    if kind == "greater_than":
        return f"must be > {number(ctx['gt'])} (got {got!r})"
    if kind == "less_than_equal":
        return f"must be <= {number(ctx['le']):,} (got {got!r})" if isinstance(number(ctx['le']), int) \
            else f"must be <= {number(ctx['le']):g} (got {got!r})"
    if kind == "less_than":
        return f"must be < {number(ctx['lt'])} (got {got!r})"
    if kind in ("int_type", "int_from_float"):
        hint = ""
        if isinstance(got, float) and math.isfinite(got) and got.is_integer():
            # 1e3 and 1.0 read as real numbers; an integer key wants 1000.
            hint = f"; write {int(got)}: a number with a decimal point or an exponent is a real number"
        elif isinstance(got, str) and re.fullmatch(r"\s*[-+]?[0-9]+\s*", got):
            hint = "; remove the quotes to make it a number"
        return f"must be an integer (got {value_words(got)}{hint})"
    if kind == "float_type":
        hint = ""
        if isinstance(got, str):
            try:
                float(got)
                hint = "; remove the quotes to make it a number"
            except ValueError:
                hint = _unit_hint(got, err.get("loc") or (), root)
        return f"must be a number (got {value_words(got)}{hint})"
    if kind == "finite_number":
        return f"must be a finite number (got {got!r})"
    if kind == "string_type":
        return f"must be a string (got {value_words(got)})"
    if kind == "list_type":
        return f"must be a list (got {value_words(got)})"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        if _is_duration_law(err.get("loc") or (), root):
            return (f"must be a mapping (got {value_words(got)}): a duration law, in seconds, e.g. "
                    f"{{dist: pareto, scale: 30.0, shape: 1.5}} or {{dist: exponential, mean: 30.0}} "
                    f"(docs/usage.md, \"Durations\")")
        return f"must be a mapping (got {value_words(got)})"
    if kind == "literal_error":
        expected = ctx.get("expected")
        return f"must be one of {expected} (got {got!r}){did_you_mean(got, quoted_choices(expected))}"
    if kind == "union_tag_invalid":
        # The tag key is `dist` for a duration law, `kind` for demand.daily.
        tag_key = "".join(quoted_choices(ctx.get("discriminator", "'dist'"))) or "dist"
        tags = quoted_choices(ctx.get("expected_tags", "")) or list(DIST_NAMES)
        return (f"unknown {tag_key} {ctx.get('tag')!r}{did_you_mean(ctx.get('tag'), tags)} "
                f"(expected one of: {', '.join(tags)})")
    if kind == "union_tag_not_found":
        return f"needs a 'dist' key (one of: {', '.join(DIST_NAMES)})"
    if kind == "value_error":
        msg = err["msg"]
        return msg.removeprefix("Value error, ")
    return f"{err['msg']} (got {got!r})"
