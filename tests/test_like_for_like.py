"""Seed 002's baselines like for like (issue 34; docs/routing.md section 4): JSQ-S
scales the queue by capacity with the new subtask counted and the transfer to a
volunteer, so it differs from JSQ on a small server; the Oracle's true delay counts the
server's batches, and its logged predictions are checked against the realized delays."""

from __future__ import annotations

import numpy as np
import pytest

from gmm_volunteer.policies.routing import DECISION_FIELDS

NODE, REAL, OWN, HYBRID = (DECISION_FIELDS.index(f) for f in ("node", "realized", "predicted_router",
                                                                "predicted"))


def _run(synthetic_model, scheduler, server_cores=2, users=20, steps=150):
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.run.engine import Simulation

    cfg = config_from_dict({"steps": steps, "seed": 4, "model": str(synthetic_model),
                            "users": {"count": users, "capacity": 1},
                            "server": {"capacity": server_cores},
                            "availability": {"online": {"dist": "exponential", "mean": 400.0},
                                             "offline": {"dist": "exponential", "mean": 40.0}},
                            "requests": {"think_time": {"dist": "exponential", "mean": 8.0}},
                            "scheduler": scheduler})
    rec = Simulation(cfg).run(progress=False)
    return rec.policy_series["decision"][1]


def test_jsq_and_jsq_s_decide_differently_with_a_two_core_server(synthetic_model):
    """0.7.0's JSQ-S divided the queue by the cores without the + 1: every idle node
    scored 0, ties went to the first volunteer, and it made JSQ's decisions."""
    jsq = _run(synthetic_model, "jsq")
    jsq_s = _run(synthetic_model, "jsq_s")
    n = min(len(jsq), len(jsq_s))
    assert n > 50
    assert not np.array_equal(jsq[:n, NODE], jsq_s[:n, NODE])
    # an idle 2-core server, (0 + 1) / 2 x work, beats an idle 1-core volunteer,
    # (0 + 1) / 1 x work + 2 s of transfers: JSQ-S keeps using the server up to 5
    # subtasks there, JSQ (unscaled) up to 2
    assert (jsq_s[:, NODE] == 0).mean() > (jsq[:, NODE] == 0).mean()
    # both log their measure as their own prediction
    assert np.isfinite(jsq_s[:, OWN]).all() and np.isfinite(jsq[:, OWN]).all()


def test_oracle_predictions_are_logged_and_checked_against_realized(synthetic_model):
    log = _run(synthetic_model, "oracle")
    assert np.isfinite(log[:, OWN]).all() and (log[:, OWN] >= 1).all()
    done = np.isfinite(log[:, REAL])
    assert done.sum() > 50
    real = log[done, REAL]
    err = np.abs(log[done, OWN] - real) / real
    hybrid = np.abs(log[done, HYBRID] - real) / real
    print(f"oracle: {done.sum()} completed decisions, mean |pred - real| / real {err.mean():.3f} "
          f"(median {np.median(err):.3f}); the hybrid estimate on the same decisions {hybrid.mean():.3f}")
    # The true delay misses only later arrivals and the new subtask's drawn work factor,
    # so it must predict these decisions better than the hybrid estimator, which sees
    # queue lengths and learned means only
    assert err.mean() < hybrid.mean()


def _sim(synthetic_model, **execution):
    from gmm_volunteer.model.params import BAND_IN, BAND_OUT
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.run.engine import Simulation

    cfg = config_from_dict({"steps": 30, "seed": 4, "model": str(synthetic_model),
                            "users": {"count": 6, "capacity": 1}, "server": {"capacity": 1},
                            "execution": execution, "scheduler": "queue_aware"})
    sim = Simulation(cfg)
    sim.arrays.alloc[1, BAND_IN], sim.arrays.alloc[1, BAND_OUT] = 100.0, 40.0  # user 1's links, Mbit/s
    return sim


def test_transfer_and_service_terms_follow_the_latency_rule(synthetic_model):
    """Issue 51: where a subtask ends inside a step (latency: substep; on a volunteer with
    carry_over too), the routers' transfer term is the input and result data over the
    node's links and the service time has no floor of one step; elsewhere both are whole
    steps, as before (2 s of transfers, at least 1 s of service)."""
    from gmm_volunteer.model.params import BAND_IN, BAND_OUT
    from gmm_volunteer.policies.queue_aware import TRANSFER_S, in_step, step_floor, transfer_time

    whole = _sim(synthetic_model)
    S, P, p = whole.S, whole.P, whole.params
    v = 1
    for j in range(p.n_sub):
        assert transfer_time(S, P, v, j) == TRANSFER_S and transfer_time(S, P, 0, j) == 0.0
    assert step_floor(P, 0, 0.01) == 1.0 and step_floor(P, v, 0.01) == 1.0

    sub = _sim(synthetic_model, latency="substep", phase_changes="carry_over")
    S, P, p = sub.S, sub.P, sub.params
    assert in_step(P, 0) and in_step(P, v)
    for j in range(p.n_sub):
        want = 8.0 * p.sub_in_mb[j] / 100.0 + 8.0 * p.sub_out_mb[j] / 40.0
        assert transfer_time(S, P, v, j) == pytest.approx(want, rel=1e-12) and want < TRANSFER_S
        assert transfer_time(S, P, 0, j) == 0.0
    assert step_floor(P, 0, 0.01) == 0.01 and step_floor(P, v, 0.01) == 0.01

    # phase_changes: step: a volunteer's phases still start at step boundaries
    sub_step = _sim(synthetic_model, latency="substep")
    S, P = sub_step.S, sub_step.P
    assert in_step(P, 0) and not in_step(P, v)
    assert step_floor(P, 0, 0.01) == 0.01 and step_floor(P, v, 0.01) == 1.0
    assert transfer_time(S, P, v, 0) == TRANSFER_S


def test_service_samples_subtract_a_transfer_below_the_step():
    """A placement's tag carries its transfer in microseconds: 2 s is exact (whole steps,
    as before), and a transfer of 0.0125 s is subtracted as such."""
    from gmm_volunteer.policies.queue_aware import QueueAwareOptions, N_AF
    from gmm_volunteer.policies.routing import AF_SVC, N_TIERS, TRANSFER_UNIT, learn_service
    from test_monitor import make_R

    R = make_R(QueueAwareOptions(), nf=N_AF)
    learn_service(R, 1 + N_TIERS * int(round(2.0 * TRANSFER_UNIT)), 3.0)  # edge tier
    assert R.af[AF_SVC + 3] == 1.0 and R.af[AF_SVC + 4] == 1.0  # 3 - 2 exactly
    learn_service(R, 0 + N_TIERS * int(round(0.0125 * TRANSFER_UNIT)), 0.05)  # local tier
    assert R.af[AF_SVC + 1] == pytest.approx(0.0375, abs=1e-12)
