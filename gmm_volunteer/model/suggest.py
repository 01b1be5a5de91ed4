""""Did you mean ...?" for mistyped names in input (docs/usage.md, "Errors").

One place decides what counts as a close name (`difflib.get_close_matches`, compared
without case, so ``Uniform`` finds ``uniform`` and ``users.cuont`` finds ``count``) and
how the suggestion reads, so that every message that refuses a name suggests alike:

    run.yaml: users.cuont: unknown key; did you mean 'count'?

`known_keys` finds the keys a pydantic model accepts at an error's location, so that a
validation error on an unknown key can name its close neighbour.
"""

from __future__ import annotations

import difflib
import re
import types
from typing import Annotated, Any, Iterable, Literal, Union, get_args, get_origin

__all__ = ["close_name", "did_you_mean", "known_keys", "quoted_choices"]

# difflib's default: a ratio of 0.6 finds one or two typed-wrong, missing or swapped
# letters in names of 4 or more letters, and not unrelated names.
CUTOFF = 0.6


def close_name(word: Any, choices: Iterable[Any]) -> str | None:
    """The choice closest to `word` (compared as lower-case text), or None when none is
    close enough or `word` is not a string."""
    if not isinstance(word, str) or not word:
        return None
    by_lower: dict[str, str] = {}
    for c in choices:
        by_lower.setdefault(str(c).lower(), str(c))
    if word in by_lower.values():
        return None  # nothing to suggest: the name exists as written
    hits = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=CUTOFF)
    return by_lower[hits[0]] if hits else None


def did_you_mean(word: Any, choices: Iterable[Any], prefix: str = "; ") -> str:
    """``"; did you mean 'count'?"`` for the choice closest to `word`, or ``""``."""
    hit = close_name(word, choices)
    return f"{prefix}did you mean {hit!r}?" if hit is not None else ""


def quoted_choices(text: str) -> list[str]:
    """The quoted names in a message such as pydantic's ``'burn_in' or 'freeze'``."""
    return re.findall(r"'([^']*)'", str(text))


# -- the keys a pydantic model accepts at a location --------------------------------------

def _unwrap(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _is_model(tp: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _fields(model: Any) -> dict[str, Any]:
    return {(f.alias or name): f.annotation for name, f in model.model_fields.items()}


def _tags(model: Any) -> set[str]:
    """The values of the model's single-valued Literal fields (a tagged union's tag)."""
    out = set()
    for f in model.model_fields.values():
        tp = _unwrap(f.annotation)
        if get_origin(tp) is Literal and len(get_args(tp)) == 1:
            out.add(str(get_args(tp)[0]))
    return out


def _variants(tp: Any) -> list[Any]:
    tp = _unwrap(tp)
    if get_origin(tp) in (Union, types.UnionType):
        return [_unwrap(a) for a in get_args(tp) if _unwrap(a) is not type(None)]
    return [tp]


def known_keys(model: Any, loc: Iterable[Any]) -> list[str]:
    """Keys accepted where the last element of `loc` (a pydantic error location) was
    refused as unknown: the fields of the model that holds it. Union branch names in
    `loc` (pydantic inserts a tagged union's tag) select that branch; [] when the place
    cannot be told."""
    parts = list(loc)[:-1]
    candidates = [_unwrap(model)]
    i = 0
    while i < len(parts):
        part = parts[i]
        nxt: list[Any] = []
        for tp in candidates:
            if _is_model(tp):
                sub = _fields(tp).get(str(part))
                if sub is not None:
                    nxt.extend(_variants(sub))
            elif get_origin(tp) in (list, tuple) and isinstance(part, int):
                nxt.extend(_variants(get_args(tp)[0]) if get_args(tp) else [])
            elif get_origin(tp) is dict and get_args(tp):
                nxt.extend(_variants(get_args(tp)[1]))
        if not nxt:
            # a union branch name that pydantic put into the location
            tagged = [tp for tp in candidates if _is_model(tp) and str(part) in _tags(tp)]
            if tagged:
                candidates = tagged
                i += 1
                continue
            return []
        candidates = nxt
        i += 1
    models = [tp for tp in candidates if _is_model(tp)]
    if len(models) > 1:  # an untagged union: the branch meant cannot be told, offer all
        return sorted({k for m in models for k in _fields(m)})
    return list(_fields(models[0])) if models else []
