"""The fused runner (policies/runner.py) against stepping from Python.

The fused runner advances many steps per kernel call; it must give the trajectory that
`Simulation.step` gives, bit for bit, including across the steps where the state's
pools grow (the runner stops there and the engine grows them).
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_support import make_config
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.policies.runner import fused_runner
from gmm_volunteer.policies.base import KernelPolicy
from gmm_volunteer.policies.uniform import Uniform

FIELDS = ("request_user", "request_type", "request_start", "request_end", "request_outcome",
          "online_users", "active_requests", "server_allocation", "server_consumption",
          "user_consumption", "subtask_events")


@pytest.mark.parametrize("scheduler", ["centralized", "uniform", "affinity"])
def test_fused_equals_stepped(synthetic_model, scheduler):
    cfg = make_config(synthetic_model, users=300, steps=4000, scheduler=scheduler, seed=3)
    fused = Simulation(cfg)
    assert fused_runner(fused.scheduler, fused.executor) is not None
    log_capacity = fused.arrays.lg_user.shape[0]
    rec_f = fused.run(progress=False)
    # The request log outgrew its first capacity: the run crossed a growth step.
    assert fused.arrays.lg_user.shape[0] > log_capacity, rec_f.request_user.size
    rec_s = Simulation(cfg).run(progress=False, fused=False)
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(rec_f, f), getattr(rec_s, f), err_msg=f)


def test_subclass_takes_the_fast_path(synthetic_model):
    """A subclass of a built-in policy (before: stepped from Python, as its class had no
    fused runner of its own) now runs fused, with the stepped trajectory."""

    class MyUniform(Uniform):
        name = "my-uniform"

    cfg = make_config(synthetic_model, users=50, steps=300)
    runs = []
    for fused in (True, False):
        sim = Simulation(cfg)
        sim.scheduler = MyUniform(rejection_tries=2)
        sim.scheduler.reset(sim.P, np.random.default_rng(0))
        assert fused_runner(sim.scheduler, sim.executor) is not None
        runs.append(sim.run(progress=False, fused=fused))
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(runs[0], f), getattr(runs[1], f), err_msg=f)


def test_legacy_policies_are_stepped(synthetic_model):
    """A policy on the old KernelPolicy base (an `act` of its own) has no hooks to fuse:
    the engine steps it from Python."""

    class Legacy(KernelPolicy):
        def __init__(self):
            self.inner = Uniform()

        def reset(self, P, rng):
            self.inner.reset(P, rng)

        def act(self, S, P, t):
            self.inner.act(S, P, t)

    cfg = make_config(synthetic_model, users=50, steps=200)
    sim = Simulation(cfg)
    sim.scheduler = Legacy()
    sim.scheduler.reset(sim.P, np.random.default_rng(0))
    assert fused_runner(sim.scheduler, sim.executor) is None
    rec = sim.run(progress=False)
    assert rec.online_users.shape == (200,)
    np.testing.assert_array_equal(rec.request_end, Simulation(cfg).run(progress=False).request_end)
