"""Invariants of the state, checked after every factor on random small configs
(DESIGN.md section 6): one active request per user, no progress on offline nodes,
every request ends once, hard limits hold after the executor, readiness bounded."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_support import make_config
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.testing.invariants import (
    check_after_executor,
    check_placements,
    check_scheduler_duties,
    check_structure,
)


def run_checked(cfg, steps):
    sim = Simulation(cfg)
    check_structure(sim)
    for _ in range(steps):
        sim.advance()
        sim.act_executor()
        check_after_executor(sim, sim.t)
        sim.act_scheduler()
        check_scheduler_duties(sim)
        sim.t += 1
        check_structure(sim)
        check_placements(sim)
    return sim


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    users=st.integers(3, 40),
    scheduler=st.sampled_from(["centralized", "uniform", "affinity"]),
    user_capacity=st.sampled_from([0.3, 1.0, 2.0]),
    server=st.sampled_from([0.5, 2.0, 10.0]),
    seed=st.integers(0, 2**16),
    phase_changes=st.sampled_from(["step", "carry_over"]),
    latency=st.sampled_from(["whole_step", "substep"]),
)
def test_invariants_hold_every_step(synthetic_model, users, scheduler, user_capacity, server, seed, phase_changes,
                                    latency):
    cfg = make_config(synthetic_model, users=users, steps=150, scheduler=scheduler, seed=seed,
                      user_capacity=user_capacity, server=server,
                      execution={"phase_changes": phase_changes, "latency": latency},
                      availability={"online": {"dist": "exponential", "mean": 60.0},
                                    "offline": {"dist": "exponential", "mean": 60.0}},
                      requests={"think_time": {"dist": "exponential", "mean": 10.0},
                                "patience": {"dist": "pareto", "scale": 30.0, "shape": 1.5}})
    run_checked(cfg, 150)


@pytest.mark.parametrize("phase_changes", ["step", "carry_over"])
def test_tight_resources_keep_invariants(synthetic_model, phase_changes):
    # Weak users and a small server: placements are squeezed by memory and storage.
    cfg = make_config(synthetic_model, users=40, steps=400, scheduler="uniform", seed=3,
                      user_capacity=0.2, server=0.3, execution={"phase_changes": phase_changes},
                      availability={"online": {"dist": "exponential", "mean": 200.0},
                                    "offline": {"dist": "exponential", "mean": 50.0}},
                      requests={"think_time": {"dist": "exponential", "mean": 5.0}})
    sim = run_checked(cfg, 400)
    ev = sim.arrays.ser_ev[:400].sum(axis=0)
    assert ev[:, 0].sum() > 0


@pytest.mark.parametrize("phase_changes", ["step", "carry_over"])
@pytest.mark.parametrize("scheduler", ["centralized", "uniform", "affinity"])
def test_little_law_exact(synthetic_model, scheduler, phase_changes):
    """Sum over steps of active requests = sum over requests of steps active (Little's
    law in its sample-path form): every request is counted from its start step to its
    last active step, requests still active at the end up to the last step."""
    cfg = make_config(synthetic_model, users=80, steps=800, scheduler=scheduler, seed=2,
                      execution={"phase_changes": phase_changes},
                      availability={"online": {"dist": "exponential", "mean": 300.0},
                                    "offline": {"dist": "exponential", "mean": 300.0}},
                      requests={"think_time": {"dist": "exponential", "mean": 15.0}})
    sim = Simulation(cfg)
    rec = sim.run(progress=False)
    S = sim.arrays
    open_users = S.rq_list[: S.n_rq[0]]
    in_flight = int(np.sum(cfg.steps - S.rq_start[open_users]))
    ended = int(np.sum(rec.request_end - rec.request_start + 1))
    assert int(rec.active_requests.sum()) == ended + in_flight
    assert len(rec.request_start) > 200
