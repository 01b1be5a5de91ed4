"""Where policies come from (paper section 2.3): names, import strings, entry points.

A config names a policy in one of three ways, tried in this order:

1. a registered name: the built-in ones (``uniform``, ``affinity``, ``centralized``;
   executor ``default``; autoscalers ``fixed``, ``reactive``, ``capacity_rule``, ``la_imr``) or one added with `register_scheduler` / `register_executor`;
2. an entry point of the group ``gmm_volunteer.schedulers`` (``...executors``,
   ``...autoscalers``) declared by an installed package;
3. ``package.module:Class``, imported on demand.

The built-ins are registered as import strings, so nothing is imported until a policy
is asked for (and the registry imports no policy module: no import cycle). Import
strings and entry points resolve the same way in every process, so Dask workers and
the capacity search's worker processes find a policy the config names.
"""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points
from typing import Any, Callable

KINDS = ("scheduler", "executor", "autoscaler")

_BUILTIN: dict[str, dict[str, str]] = {
    "scheduler": {
        "centralized": "gmm_volunteer.policies.centralized:Centralized",
        "uniform": "gmm_volunteer.policies.uniform:Uniform",
        "affinity": "gmm_volunteer.policies.affinity:Affinity",
        # routers of issue 12 (docs/routing.md)
        "asrb": "gmm_volunteer.policies.asrb:Asrb",
        "qedgeproxy": "gmm_volunteer.policies.qedgeproxy:QEdgeProxy",
        "proximity": "gmm_volunteer.policies.proximity:Proximity",
        "round_robin": "gmm_volunteer.policies.round_robin:RoundRobin",
        "queue_aware": "gmm_volunteer.policies.queue_aware:QueueAware",
        "jsq": "gmm_volunteer.policies.jsq:Jsq",
        "jsq_s": "gmm_volunteer.policies.jsq_s:JsqS",
        "oracle": "gmm_volunteer.policies.oracle:Oracle",
        "la_imr": "gmm_volunteer.policies.la_imr_router:LaImrRouter",
        "random": "gmm_volunteer.policies.random_tier:RandomTier",
        "edge_first": "gmm_volunteer.policies.edge_first:EdgeFirst",
        "model_only": "gmm_volunteer.policies.model_only:ModelOnly",
        "queue_only": "gmm_volunteer.policies.queue_only:QueueOnly",
        # parametric family for the optimisation of eq. 2 (docs/optimisation.md)
        "weighted": "gmm_volunteer.policies.weighted:Weighted",
    },
    "executor": {"default": "gmm_volunteer.policies.executor:DefaultExecutor"},
    "autoscaler": {
        "fixed": "gmm_volunteer.policies.autoscalers.fixed:Fixed",
        "reactive": "gmm_volunteer.policies.autoscalers.reactive:Reactive",
        "capacity_rule": "gmm_volunteer.policies.autoscalers.capacity_rule:CapacityRule",
        "la_imr": "gmm_volunteer.policies.autoscalers.la_imr:LaImr",
    },
}
# name -> class, factory or import string; filled by the register_* decorators.
_REGISTERED: dict[str, dict[str, Any]] = {kind: dict(table) for kind, table in _BUILTIN.items()}


class UnknownPolicyError(KeyError, ValueError):
    """A name that is neither registered, an entry point, nor an importable module:Class.
    (A KeyError for callers of the old registry, a ValueError for config validation.)"""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def _register(kind: str, name: str):
    def deco(obj):
        _REGISTERED[kind][name] = obj
        return obj

    return deco


def register_scheduler(name: str):
    """Class decorator: make a scheduler known by `name` (within this process; for
    other processes, name it by ``module:Class`` or an entry point)."""
    return _register("scheduler", name)


def register_executor(name: str):
    return _register("executor", name)


def register_autoscaler(name: str):
    return _register("autoscaler", name)


def _entry_points(kind: str) -> dict:
    return {ep.name: ep for ep in entry_points(group=f"gmm_volunteer.{kind}s")}


def names(kind: str) -> list[str]:
    """Registered and entry-point names of this kind (import strings are not listed)."""
    return sorted(set(_REGISTERED[kind]) | set(_entry_points(kind)))


def scheduler_names() -> list[str]:
    return names("scheduler")


def executor_names() -> list[str]:
    return names("executor")


def autoscaler_names() -> list[str]:
    return names("autoscaler")


def import_string(spec: str) -> Any:
    """The object named ``package.module:Qualified.name``."""
    module_name, _, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


# Refusing plugins (policies.guard explains why): here, so that the registry imports
# nothing of guard, which reads the registry's table of built-in policies.
NO_PLUGINS_ENV = "GMMV_NO_PLUGINS"


def plugins_refused() -> bool:
    return os.environ.get(NO_PLUGINS_ENV, "").strip().lower() not in ("", "0", "false", "no")


def resolve(kind: str, name: str) -> Any:
    """The policy class (or legacy factory) a config's `name` refers to."""
    found = _REGISTERED[kind].get(name)
    if found is not None and name not in _BUILTIN[kind] and plugins_refused():
        raise UnknownPolicyError(f"{kind} {name!r}: plugins are refused ({NO_PLUGINS_ENV} is set)")
    outside = found is None  # an entry point or module:Class: checked to be a policy below
    if found is None:
        eps = _entry_points(kind)
        if (name in eps or ":" in name) and plugins_refused():
            raise UnknownPolicyError(f"{kind} {name!r}: plugins are refused ({NO_PLUGINS_ENV} is set "
                                     f"or --no-plugins given); a config naming module:Class runs its code")
        if name in eps:
            try:
                found = eps[name].load()
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 (SystemExit at import included)
                raise UnknownPolicyError(f"{kind} {name!r}: loading the entry point failed: "
                                         f"{type(exc).__name__}: {exc}") from None
        elif ":" in name:
            found = name
    if found is None:
        from gmm_volunteer.model.suggest import did_you_mean

        raise UnknownPolicyError(
            f"unknown {kind} {name!r}{did_you_mean(name, names(kind))} "
            f"(known: {', '.join(names(kind)) or 'none registered'};"
            " or name a class as package.module:Class)"
        )
    if isinstance(found, str):
        try:
            found = import_string(found)
        except (ImportError, AttributeError, ValueError) as exc:
            raise UnknownPolicyError(f"{kind} {name!r}: cannot import {found!r}: {exc}") from None
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 (a module's own error, SystemExit included)
            raise UnknownPolicyError(f"{kind} {name!r}: importing {found!r} failed: "
                                     f"{type(exc).__name__}: {exc}") from None
    if outside:
        _check_is_policy(kind, name, found)
    return found


def _check_is_policy(kind: str, name: str, obj: Any) -> None:
    """A name from outside the package must be a policy class of its kind with jitted
    hooks: anything else (``os:system``, ``builtins:object``) would be called with the
    config's options as arguments."""
    from gmm_volunteer.policies.autoscalers.base import Autoscaler
    from gmm_volunteer.policies.base import Executor, KernelPolicy, Scheduler

    if kind != "autoscaler" and isinstance(obj, type) and issubclass(obj, KernelPolicy):
        return  # the deprecated base (its own `act`, stepped from Python), kept for 0.6
    base = {"scheduler": Scheduler, "executor": Executor, "autoscaler": Autoscaler}[kind]
    if not (isinstance(obj, type) and issubclass(obj, base)) or obj is base:
        raise UnknownPolicyError(f"{kind} {name!r}: {obj!r} is not a {kind} (a subclass of "
                                 f"{base.__module__}.{base.__qualname__})")
    missing = [h for h in obj._HOOKS if not hasattr(getattr(obj, h, None), "py_func")]
    if missing:
        raise UnknownPolicyError(f"{kind} {name!r}: hook(s) {', '.join(missing)} missing or not @njit functions")
    from pydantic import BaseModel

    options = getattr(obj, "Options", BaseModel)
    if not (isinstance(options, type) and issubclass(options, BaseModel)):  # options are validated by it
        raise UnknownPolicyError(f"{kind} {name!r}: its Options ({options!r}) is not a pydantic model "
                                 "(a subclass of pydantic.BaseModel)")


def policy_class(kind: str, name: str) -> type | None:
    """The class of a policy with an options model, or None for a legacy factory."""
    from gmm_volunteer.policies.base import _KernelPolicy

    obj = resolve(kind, name)
    return obj if isinstance(obj, type) and issubclass(obj, _KernelPolicy) else None


def make(kind: str, name: str, options: dict | None = None):
    factory: Callable = resolve(kind, name)
    return factory(**(options or {}))


def make_scheduler(name: str, options: dict | None = None):
    return make("scheduler", name, options)


def make_executor(name: str, options: dict | None = None):
    return make("executor", name, options)


def make_autoscaler(name: str, options: dict | None = None):
    return make("autoscaler", name, options)
