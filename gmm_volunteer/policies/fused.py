"""Fused runners: many steps of dynamics + executor + scheduler in one kernel call.

Stepping from Python costs a few microseconds per step in dispatch alone (three kernel
calls and the pool check), which is a tenth of a step at 1,000 users. A fused runner
loops over steps inside numba instead. It returns early, at the first step whose pools
need to grow, so that the engine can grow them and call it again.

A runner is looked up by the (scheduler, executor) classes of a run. Policies without
one are stepped from Python, with the same result: a runner must do exactly what
`Simulation.step` does, in the same order (tests/test_engine_fused.py checks the
built-in ones). Register a runner for a new policy pair with `register_fused`.
"""

from __future__ import annotations

from typing import Callable

from numba import njit

from gmm_volunteer.kernels.step import dynamics_step, needs_growth
from gmm_volunteer.policies.affinity import Affinity, affinity_step
from gmm_volunteer.policies.centralized import Centralized, centralized_step
from gmm_volunteer.policies.executor import DefaultExecutor, executor_step
from gmm_volunteer.policies.uniform import Uniform, uniform_step

_RUNNERS: dict[tuple[type, type], Callable] = {}


def register_fused(scheduler_cls: type, executor_cls: type):
    """Decorator: `factory(scheduler, executor) -> run(S, P, t0, t1) -> t` for runs whose
    policies are instances of exactly these classes."""

    def deco(factory):
        _RUNNERS[(scheduler_cls, executor_cls)] = factory
        return factory

    return deco


def fused_runner(scheduler, executor) -> Callable | None:
    """The fused runner of this policy pair, or None (then the engine steps in Python)."""
    factory = _RUNNERS.get((type(scheduler), type(executor)))
    return None if factory is None else factory(scheduler, executor)


@njit(cache=True)
def run_centralized(S, P, t0, t1):
    for t in range(t0, t1):
        if needs_growth(S, P):
            return t
        dynamics_step(S, P, t)
        executor_step(S, P, t)
        centralized_step(S, P, t)
    return t1


@njit(cache=True)
def run_uniform(S, P, t0, t1, tries, max_downloads):
    for t in range(t0, t1):
        if needs_growth(S, P):
            return t
        dynamics_step(S, P, t)
        executor_step(S, P, t)
        uniform_step(S, P, t, tries, max_downloads)
    return t1


@njit(cache=True)
def run_affinity(S, P, t0, t1, max_downloads):
    for t in range(t0, t1):
        if needs_growth(S, P):
            return t
        dynamics_step(S, P, t)
        executor_step(S, P, t)
        affinity_step(S, P, t, max_downloads)
    return t1


@register_fused(Centralized, DefaultExecutor)
def _centralized(sched, ex):
    return run_centralized


@register_fused(Uniform, DefaultExecutor)
def _uniform(sched, ex):
    tries, max_downloads = sched.tries, sched.max_downloads
    return lambda S, P, t0, t1: run_uniform(S, P, t0, t1, tries, max_downloads)


@register_fused(Affinity, DefaultExecutor)
def _affinity(sched, ex):
    max_downloads = sched.max_downloads
    return lambda S, P, t0, t1: run_affinity(S, P, t0, t1, max_downloads)
