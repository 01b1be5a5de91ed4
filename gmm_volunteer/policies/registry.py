"""Name registry for schedulers and executors (paper section 2.3).

Configs name policies by string; `make_scheduler(name, options)` builds one. New policies
register themselves with `@register_scheduler("name")` and the engine never changes.
"""

from __future__ import annotations

from typing import Callable

_SCHEDULERS: dict[str, Callable] = {}
_EXECUTORS: dict[str, Callable] = {}


class UnknownPolicyError(KeyError):
    pass


def register_scheduler(name: str):
    def deco(factory):
        _SCHEDULERS[name] = factory
        return factory

    return deco


def register_executor(name: str):
    def deco(factory):
        _EXECUTORS[name] = factory
        return factory

    return deco


def _load_builtin() -> None:
    # Importing the modules runs their @register_* decorators.
    from gmm_volunteer.policies import builtin  # noqa: F401


def scheduler_names() -> list[str]:
    _load_builtin()
    return sorted(_SCHEDULERS)


def executor_names() -> list[str]:
    _load_builtin()
    return sorted(_EXECUTORS)


def make_scheduler(name: str, options: dict | None = None):
    _load_builtin()
    try:
        factory = _SCHEDULERS[name]
    except KeyError:
        raise UnknownPolicyError(
            f"unknown scheduler {name!r}; known: {', '.join(sorted(_SCHEDULERS))}"
        ) from None
    return factory(**(options or {}))


def make_executor(name: str, options: dict | None = None):
    _load_builtin()
    try:
        factory = _EXECUTORS[name]
    except KeyError:
        raise UnknownPolicyError(
            f"unknown executor {name!r}; known: {', '.join(sorted(_EXECUTORS))}"
        ) from None
    return factory(**(options or {}))
