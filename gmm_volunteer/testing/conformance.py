"""Conformance checker for policies, in the manner of Gymnasium's env checker.

`check_policy(kind, name)` runs a policy on a few small, randomised configs of the
synthetic model (gmm_volunteer.testing.synthetic) and checks what every policy of its kind owes
the simulator (paper 2.3; DESIGN.md sections 6-7):

* structure: a `Scheduler`/`Executor` subclass with jitted hooks and a strict options
  model; its defaults validate, an unknown option key is refused, and the options
  round-trip through their dump (what a result store's config records);
* determinism: the same seed and config give identical records twice, and the fused
  runner gives the trajectory of stepping from Python (so the fast path is exact);
* invariants after every step (gmm_volunteer.testing.invariants): the state's indices
  agree, hard memory/storage limits hold once the executor has acted, placements sit
  on online nodes holding the data;
* buffers drained: the obsolete-request list is empty and no finished request is left
  active after the scheduler;
* autoscalers (docs/model.md D17): the capacity in effect is units x unit x base
  profile within [min_units, max_units] at every step and changes only when an action
  takes effect; every scale-out takes effect exactly ``provisioning_delay`` steps after
  its order (or is cancelled); no scale-in takes effect within ``cooldown`` steps of a
  scale-out order.

It raises `ConformanceError` listing every failed check, or returns the list of checks
run. The test suite runs it over every registered policy and the example plugin.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from gmm_volunteer.policies.autoscalers.base import Autoscaler
from gmm_volunteer.policies.base import Executor, Scheduler
from gmm_volunteer.policies.registry import resolve

_RECORD_FIELDS = ("request_user", "request_type", "request_start", "request_end", "request_outcome",
                  "online_users", "active_requests", "server_allocation", "server_consumption",
                  "user_consumption", "subtask_events", "completed_work", "dedicated_capacity",
                  "scaling_actions")


class ConformanceError(AssertionError):
    pass


def _configs(model: Path, kind: str, name: str, options: dict, steps: int):
    """Small configs that exercise the duties: churn, impatient users, tight memory;
    users that start empty (downloads) and users that start with data (docs/model.md D2)."""
    from gmm_volunteer.run.config import config_from_dict

    policy = {kind: name, f"{kind}_options": options}
    for seed, users, user_cap, server, data in ((1, 25, 1.0, 2.0, "empty"), (2, 12, 0.3, 0.5, "filled")):
        yield config_from_dict({
            "steps": steps, "seed": seed, "model": str(model),
            "users": {"count": users, "capacity": user_cap, "initial_data": data},
            "server": {"capacity": server},
            "availability": {"online": {"dist": "exponential", "mean": 80.0},
                             "offline": {"dist": "exponential", "mean": 40.0}},
            "requests": {"think_time": {"dist": "exponential", "mean": 8.0},
                         "patience": {"dist": "pareto", "scale": 20.0, "shape": 1.5}},
            **policy,
        })


def _check_structure(kind: str, cls: Any, options: dict) -> list[str]:
    base = {"scheduler": Scheduler, "executor": Executor, "autoscaler": Autoscaler}[kind]
    if not (isinstance(cls, type) and issubclass(cls, base)):
        return [f"{cls!r} is not a subclass of {base.__module__}.{base.__qualname__}"]
    problems = []
    try:
        hooks = cls(**options).hooks()
    except Exception as exc:  # a raise in __init__ or a missing hook
        return [f"constructing it failed: {type(exc).__name__}: {exc}"]
    for hook, kernel in hooks.items():
        if not hasattr(kernel, "py_func"):
            problems.append(f"hook {hook} is not an @njit function")
    opts = cls.validate_options(options)
    again = cls.validate_options(opts.model_dump(mode="json"))
    if again != opts:
        problems.append(f"options do not round-trip: {opts!r} -> {again!r}")
    try:
        cls.validate_options({**options, "__not_an_option__": 1})
        problems.append("an unknown option key was accepted (Options needs extra='forbid')")
    except ValidationError:
        pass
    return problems


def _check_control(cls, options: dict, cfg, record) -> list[str]:
    """The control plane's promises, read back from a run's record."""
    if not getattr(cls, "scales", False):
        from gmm_volunteer.model.params import build_params
        from gmm_volunteer.io.bundlefiles import load_bundle

        fixed = build_params(cfg, load_bundle(cfg.model)).amax[0].astype(np.float32)
        ok = np.array_equal(record.dedicated_capacity, np.broadcast_to(fixed, record.dedicated_capacity.shape))
        return [] if ok and len(record.scaling_actions) == 0 else ["a non-scaling autoscaler changed the capacity"]
    o = cls.validate_options(options)
    base = cfg.base_profile.as_array()
    cap = np.asarray(record.dedicated_capacity, np.float64)
    units = cap[:, 2] / (o.unit * base[2])
    problems = []
    if not np.allclose(cap, units[:, None] * o.unit * base[None, :], rtol=1e-6):
        problems.append("capacity is not units x unit x base_profile")
    if np.any(np.abs(units - np.round(units)) > 1e-4) or units.min() < o.min_units - 1e-6 or units.max() > o.max_units + 1e-6:
        problems.append(f"units outside whole numbers in [{o.min_units}, {o.max_units}]")
    acts = np.asarray(record.scaling_actions).reshape(-1, 4)
    changes = set(np.flatnonzero(np.diff(units) != 0) + 1)
    effective = set(int(e) for e in acts[:, 1] if e >= 0)
    if not changes <= effective:
        problems.append(f"capacity changed at steps {sorted(changes - effective)[:5]} without an action")
    outs = acts[acts[:, 3] > acts[:, 2]]
    for ordered, eff, _, _ in outs:
        if eff >= 0 and eff != ordered + o.provisioning_delay:
            problems.append(f"scale-out ordered at {ordered} took effect at {eff}, not after {o.provisioning_delay} s")
    ins = acts[(acts[:, 3] < acts[:, 2]) & (acts[:, 1] >= 0)]
    for ordered, eff, _, _ in ins:
        recent = outs[(outs[:, 0] > eff - o.cooldown) & (outs[:, 0] <= eff)]
        if recent.size:
            problems.append(f"scale-in at {eff} within the cooldown of the scale-out ordered at {recent[0, 0]}")
    return problems


def _records_equal(a, b) -> list[str]:
    diff = [f for f in _RECORD_FIELDS if not np.array_equal(getattr(a, f), getattr(b, f))]
    if a.policy_series.keys() != b.policy_series.keys():
        diff.append("policy_series")
    diff += [k for k in a.policy_series
             if k in b.policy_series
             and not np.array_equal(a.policy_series[k][1], b.policy_series[k][1], equal_nan=True)]
    return diff


def _run_checked(cfg) -> None:
    from gmm_volunteer.run.engine import Simulation
    from gmm_volunteer.testing import invariants as inv

    sim = Simulation(cfg)
    inv.check_structure(sim)
    for _ in range(cfg.steps):
        sim.act_control()
        sim.advance()
        sim.act_executor()
        inv.check_after_executor(sim, sim.t)
        sim.act_scheduler()
        inv.check_scheduler_duties(sim)
        sim.t += 1
        inv.check_structure(sim)
        inv.check_placements(sim)


def check_policy(kind: str, name: str, options: dict | None = None, *, steps: int = 200,
                 model: str | Path | None = None) -> list[str]:
    """Check the policy a config would name `name` (built-in name, ``module:Class`` or
    entry point); returns the checks passed, raises `ConformanceError` otherwise."""
    from gmm_volunteer.run.engine import Simulation

    if kind not in ("scheduler", "executor", "autoscaler"):
        raise ValueError(f"kind must be 'scheduler', 'executor' or 'autoscaler', not {kind!r}")
    options = dict(options or {})
    try:
        cls = resolve(kind, name)
    except ValueError as exc:  # not importable, not a policy, its import raised
        raise ConformanceError(f"{kind} {name!r}: {exc}") from None
    problems = _check_structure(kind, cls, options)
    if problems:
        raise ConformanceError(f"{kind} {name!r}: " + "; ".join(problems))
    done = ["structure", "options round-trip", "unknown option refused"]
    with tempfile.TemporaryDirectory() as tmp:
        if model is None:
            from gmm_volunteer.io.bundlefiles import write_bundle
            from gmm_volunteer.testing.synthetic import synthetic_bundle

            model = Path(tmp) / "bundle"
            write_bundle(synthetic_bundle(), model)
        for cfg in _configs(Path(model), kind, name, options, steps):
            try:
                first = Simulation(cfg).run(progress=False)
                second = Simulation(cfg).run(progress=False)
                stepped = Simulation(cfg).run(progress=False, fused=False)
            except Exception as exc:  # a policy that raises, or an action it misused, is a finding
                problems.append(f"seed {cfg.seed}: the run failed: {type(exc).__name__}: {exc}")
                continue
            if diff := _records_equal(first, second):
                problems.append(f"seed {cfg.seed}: same seed, different records ({', '.join(diff)})")
            if diff := _records_equal(first, stepped):
                problems.append(f"seed {cfg.seed}: fused run differs from stepped run ({', '.join(diff)})")
            if kind == "autoscaler":
                problems += [f"seed {cfg.seed}: {p}" for p in _check_control(cls, options, cfg, first)]
            try:
                _run_checked(cfg)
            except AssertionError as exc:
                problems.append(f"seed {cfg.seed}: invariant broken: {exc}")
            except Exception as exc:
                problems.append(f"seed {cfg.seed}: the stepped run failed: {type(exc).__name__}: {exc}")
    if problems:
        raise ConformanceError(f"{kind} {name!r}: " + "; ".join(problems))
    done += ["determinism", "fused equals stepped", "invariants every step", "buffers drained"]
    return done + (["control plane"] if kind == "autoscaler" else [])
