"""The error of a run config the model cannot take (docs/usage.md, "Errors").

Defined on the ground floor because the model's own checks raise it too: the widths of
the state's stored ids (`limits`) and a policy's check of its options against the
bundle's request types. The run layer's config loader (`gmm_volunteer.run.config`)
raises it for every invalid key and exposes it under its documented name.
"""

from __future__ import annotations


class ConfigError(Exception):
    """A run config (or an override) is unreadable or invalid.

    The message has the form ``<file>: <dotted.key>: <problem>``, one line per problem.
    """
