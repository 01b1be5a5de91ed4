"""The error of a run config the model cannot take (docs/usage.md, "Errors").

Defined on the ground floor because the model's own checks raise it too: the widths of
the state's stored ids (`limits`) and a policy's check of its options against the
bundle's request types. The run layer's config loader (`gmm_volunteer.run.config`)
raises it for every invalid key and exposes it under its documented name.

`not_below` is the one check of a key against another key of its section (a law's
``high`` against its ``low``, an autoscaler's ``max_units`` against its ``min_units``),
shared by the sections of every floor.
"""

from __future__ import annotations

from pydantic import ValidationInfo, field_validator


class ConfigError(Exception):
    """A run config (or an override) is unreadable or invalid.

    The message has the form ``<file>: <dotted.key>: <problem>``, one line per problem.
    """


def not_below(key: str, other: str, *, strictly: bool = False):
    """A pydantic field validator for a section: `key` must be >= (`strictly`: >) the
    section's `other` key, when both are given. A field validator, not a model validator,
    so that the error names the key (``<section>.<key>: must be >= <other> (1.0), got
    0.5``); `other` must be declared before `key`, as pydantic validates in that order.
    Assign it in the class body: ``_high_above_low = not_below("high", "low")``."""
    sign = ">" if strictly else ">="

    def check(cls, v, info: ValidationInfo):
        lo = info.data.get(other)
        if v is not None and lo is not None and (v <= lo if strictly else v < lo):
            raise ValueError(f"must be {sign} {other} ({lo}), got {v}")
        return v

    return field_validator(key)(check)
