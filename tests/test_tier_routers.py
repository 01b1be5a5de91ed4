"""Queue-aware tier routing (policies/queue_aware.py, seed 002; docs/routing.md) on
constructed cases: the blend of model and queue estimates, the utilization penalty,
the exploration rate, and the decision log of a run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gmm_volunteer.policies import queue_aware as qa
from gmm_volunteer.policies.queue_aware import QueueAwareOptions, pick_tier, tier_estimate
from gmm_volunteer.model.theory import allen_cunneen_wait
from test_monitor import make_R


@pytest.fixture(scope="module")
def sim(synthetic_model):
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.run.engine import Simulation

    cfg = config_from_dict({"steps": 20, "seed": 5, "model": str(synthetic_model),
                            "users": {"count": 3, "capacity": 1}, "server": {"capacity": 1},
                            "scheduler": "queue_aware"})
    return Simulation(cfg)


def test_beta_blends_model_and_queue_counting_work_in_service():
    """The router before issue 22 (queue_in_service: true): q counts work in service."""
    R = make_R(QueueAwareOptions(utilization_threshold=10.0, queue_in_service=True))  # no penalty here
    c, lam, mean_s, scv, d = 4, 2.0, 1.5, 2.0, 2.0
    w_model = allen_cunneen_wait(c, lam, 1 / mean_s, 1.0, scv)
    # empty tier: beta = 0, the model alone
    h, m, q = tier_estimate(R, c, lam, 0, mean_s, scv, d)
    assert h == pytest.approx(w_model + mean_s + d) and m == pytest.approx(h)
    assert q == pytest.approx(mean_s + d)  # no backlog beyond the servers
    # q = 2 of c = 4: beta = 0.5, W_queue = 0
    h, _, _ = tier_estimate(R, c, lam, 2, mean_s, scv, d)
    assert h == pytest.approx(0.5 * w_model + mean_s + d)
    # q = 10 >= c: beta = 1, W = (q - c) s / c
    h, m, q = tier_estimate(R, c, lam, 10, mean_s, scv, d)
    assert h == pytest.approx((10 - 4) * mean_s / 4 + mean_s + d) and q == pytest.approx(h)
    assert m == pytest.approx(w_model + mean_s + d)


def test_queue_term_counts_waiting_work_only():
    """Seed 002: beta and W_queue from the waiting tasks, those beyond the c servers."""
    R = make_R(QueueAwareOptions(utilization_threshold=10.0))
    c, lam, mean_s, scv, d = 4, 2.0, 1.5, 2.0, 2.0
    w_model = allen_cunneen_wait(c, lam, 1 / mean_s, 1.0, scv)
    # every server busy, nobody waiting: beta = 0, the model alone (before: beta = 1)
    h, m, q = tier_estimate(R, c, lam, 4, mean_s, scv, d)
    assert h == pytest.approx(w_model + mean_s + d) and q == pytest.approx(mean_s + d)
    # 2 waiting of c = 4: beta = 0.5, W_queue = 2 s / 4
    h, _, q = tier_estimate(R, c, lam, 6, mean_s, scv, d)
    assert q == pytest.approx(2 * mean_s / 4 + mean_s + d)
    assert h == pytest.approx(0.5 * w_model + 0.5 * 2 * mean_s / 4 + mean_s + d)
    # 8 waiting: beta = 1, the queue alone
    h, _, q = tier_estimate(R, c, lam, 12, mean_s, scv, d)
    assert h == pytest.approx(q) and q == pytest.approx(8 * mean_s / 4 + mean_s + d)


def test_scv_from_the_work_law(sim):
    """C_s^2 of a lognormal work factor with log-sd s is exp(s^2) - 1; 1 if exponential."""
    P = sim.params  # the fields from Python; the kernel takes the packed sim.P
    for j in range(P.n_sub):
        want = 1.0 if P.wk_dist[j] == qa.WORK_EXPONENTIAL else math.exp(P.wk_lsd[j] ** 2) - 1.0
        assert qa.law_scv(sim.P, j) == pytest.approx(want)
    R = make_R(QueueAwareOptions(min_samples=2), nf=qa.N_AF)
    # learned mean, law SCV by default; online SCV only when asked
    R.af[qa.AF_SVC:qa.AF_SVC + 3] = [3.0, 2.0, 12.0]  # n = 3, mean 2, M2 12 -> var 6, SCV 1.5
    assert qa.service_stats(R, 0, 5.0, 0.3) == pytest.approx((2.0, 0.3))
    R2 = make_R(QueueAwareOptions(min_samples=2, scv_online=True), nf=qa.N_AF)
    R2.af[qa.AF_SVC:qa.AF_SVC + 3] = [3.0, 2.0, 12.0]
    assert qa.service_stats(R2, 0, 5.0, 0.3) == pytest.approx((2.0, 1.5))
    assert qa.service_stats(R2, 1, 5.0, 0.3) == pytest.approx((5.0, 1.0))  # no samples: prior, 1


def test_processor_sharing_finish_time():
    rem = np.array([1.0, 5.0])
    assert qa.ps_finish(rem, 0, 1.0, 3.0) == pytest.approx(3.0)  # alone on one core
    # one core, one job of 1 left: both at 1/2 until t = 2, then the new one alone: 2 more
    assert qa.ps_finish(rem, 1, 1.0, 3.0) == pytest.approx(4.0)
    assert qa.ps_finish(rem, 1, 2.0, 3.0) == pytest.approx(3.0)  # two cores: a core each
    # three jobs on two cores: 2/3 each until the 1 finishes (t = 1.5), then a core each
    assert qa.ps_finish(rem, 2, 2.0, 3.0) == pytest.approx(1.5 + 2.0)


def test_penalty_above_utilization_threshold():
    R = make_R(QueueAwareOptions(utilization_threshold=0.9, penalty=3.0))
    c, mean_s = 2, 1.0
    lo = tier_estimate(R, c, 1.7, 0, mean_s, 1.0, 0.0)[0]  # rho = 0.85
    hi = tier_estimate(R, c, 1.9, 0, mean_s, 1.0, 0.0)[0]  # rho = 0.95
    assert lo == pytest.approx(allen_cunneen_wait(c, 1.7, 1.0, 1.0, 1.0) + 1.0)
    assert hi == pytest.approx(3.0 * allen_cunneen_wait(c, 1.9, 1.0, 1.0, 1.0) + 1.0)
    # unstable: capped, finite
    assert math.isfinite(tier_estimate(R, c, 5.0, 0, mean_s, 1.0, 0.0)[0])


def test_exploration_rate(sim):
    """With 3 tiers and a clear best one, a decision leaves it with probability
    eps * 2/3. n = 30,000 decisions: sd of the fraction = sqrt(p (1 - p) / n) ~ 0.0010 at
    p = 0.033; tolerance 5 sd."""
    nodes = np.array([1, 2, 0])
    est = np.array([[5.0, 0, 0], [1.0, 0, 0], [9.0, 0, 0]])
    n, eps = 30_000, 0.05
    picks = np.array([pick_tier(sim.S, nodes, est, 0, eps) for _ in range(n)])
    p = eps * 2 / 3
    frac = float(np.mean(picks != 1))
    assert abs(frac - p) < 5 * math.sqrt(p * (1 - p) / n)
    # the explored tiers are uniform: each of the other two about half of the rest
    assert abs(np.mean(picks == 0) - eps / 3) < 5 * math.sqrt(eps / 3 * (1 - eps / 3) / n)
    # eps = 0: always the best; unavailable tiers never chosen
    assert {pick_tier(sim.S, nodes, est, 0, 0.0) for _ in range(100)} == {1}
    nodes2 = np.array([-1, 2, 0])
    assert 0 not in {pick_tier(sim.S, nodes2, est, 0, 1.0) for _ in range(500)}


def test_decision_log_records_predictions_and_realized(synthetic_model):
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.run.engine import Simulation
    from gmm_volunteer.policies.routing import DECISION_FIELDS

    cfg = config_from_dict({"steps": 150, "seed": 4, "model": str(synthetic_model),
                            "users": {"count": 20, "capacity": 1}, "server": {"capacity": 1},
                            "availability": {"online": {"dist": "exponential", "mean": 400.0},
                                             "offline": {"dist": "exponential", "mean": 40.0}},
                            "requests": {"think_time": {"dist": "exponential", "mean": 8.0}},
                            "scheduler": "queue_aware"})
    rec = Simulation(cfg).run(progress=False)
    dims, log, attrs = rec.policy_series["decision"]
    assert dims == ("decision", "decision_field") and log.shape[1] == len(DECISION_FIELDS)
    assert log.shape[0] == attrs["decisions_total"] > 0
    realized = log[:, DECISION_FIELDS.index("realized")]
    done = ~np.isnan(realized)
    assert done.any() and np.all(realized[done] >= 1)
    assert np.all(log[:, DECISION_FIELDS.index("predicted")] > 0)
    starts = rec.subtask_events[:, :, 0].sum()
    assert attrs["decisions_total"] == starts  # one decision per placement
