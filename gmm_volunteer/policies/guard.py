"""Failures of plugin policies as errors that name the plugin, the hook and the
exception (exit 2; the traceback with ``-v``), and a way to refuse plugins altogether.

A plugin is a policy the package does not ship: a ``package.module:Class`` name, an
entry point, or a name registered at run time. Its code is as trusted as a Python script
(a config that names one runs it), so configs from elsewhere can be run with plugins
refused: ``GMMV_NO_PLUGINS=1`` in the environment, or ``gmmv --no-plugins``, which sets it
for the command and every worker process it starts on this machine.

Failures of the built-in policies stay what they are (a bug: a traceback, exit 1).
"""

from __future__ import annotations

import contextlib

from gmm_volunteer.policies.registry import NO_PLUGINS_ENV, plugins_refused  # noqa: F401 (one definition)


class PolicyError(ValueError):
    """A plugin policy failed (import, contract, a raise in a hook, a bad return)."""


def is_plugin(kind: str, name: str) -> bool:
    from gmm_volunteer.policies.registry import _BUILTIN

    return name not in _BUILTIN[kind]


@contextlib.contextmanager
def guard(policies, hook: str):
    """Turn an exception raised inside the block into `PolicyError` when one of
    `policies` ((kind, name) pairs) is a plugin; with none, let it through unchanged.
    KeyboardInterrupt always passes; SystemExit from a plugin is caught like the rest."""
    plugins = [(k, n) for k, n in policies if is_plugin(k, n)]
    try:
        yield
    except KeyboardInterrupt:
        raise
    except PolicyError:
        raise
    except BaseException as exc:  # noqa: BLE001 (SystemExit from a plugin included)
        if not plugins or isinstance(exc, (GeneratorExit, MemoryError)):
            raise
        who = " or ".join(f"{k} {n!r}" for k, n in plugins)
        raise PolicyError(f"{who}: {hook} raised {type(exc).__name__}: {exc}") from exc
