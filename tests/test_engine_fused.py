"""Fused runners (policies/fused.py) against stepping from Python.

A fused runner advances many steps per kernel call; it must give the trajectory that
`Simulation.step` gives, bit for bit, including across the steps where the state's
pools grow (the runner stops there and the engine grows them).
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_support import make_config
from gmm_volunteer.engine import Simulation
from gmm_volunteer.policies.fused import fused_runner
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


def test_policies_without_a_runner_are_stepped(synthetic_model):
    class MyUniform(Uniform):
        name = "my-uniform"

    cfg = make_config(synthetic_model, users=50, steps=200)
    sim = Simulation(cfg)
    sim.scheduler = MyUniform()
    sim.scheduler.reset(sim.P, np.random.default_rng(0))
    assert fused_runner(sim.scheduler, sim.executor) is None
    rec = sim.run(progress=False)
    assert rec.online_users.shape == (200,)
