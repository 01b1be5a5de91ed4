"""The monitoring model (gmm_volunteer/policies/monitor.py) and the ASRB scores and
labels on constructed cases (docs/routing.md), and the monitoring cost in the result."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gmm_volunteer.model.constants import MONITOR_OPS
from gmm_volunteer.model.params import CPU, MEMORY
from gmm_volunteer.policies import monitor as mon
from gmm_volunteer.policies.asrb import AsrbOptions, asrb_label, asrb_score
from gmm_volunteer.policies.routing import new_route_state


def make_R(options=None, n_nodes=4, steps=100, n_sub=2, nf=0):
    options = options or AsrbOptions()
    return new_route_state(options, n_nodes, n_sub, steps, nf=nf)


@pytest.fixture(scope="module")
def sim(synthetic_model):
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.run.engine import Simulation

    cfg = config_from_dict({"steps": 50, "seed": 3, "model": str(synthetic_model),
                            "users": {"count": 3, "capacity": 1}, "server": {"capacity": 1},
                            "scheduler": "asrb"})
    return Simulation(cfg)


def test_feedback_is_an_ewma():
    R = make_R(AsrbOptions(ewma_alpha=0.3))
    mon.feedback(R, 1, 10.0, 5)  # first sample initializes
    assert R.mf[1, mon.F_LAT] == 10.0 and R.mi[1, mon.I_T_LAT] == 5
    mon.feedback(R, 1, 20.0, 6)
    assert R.mf[1, mon.F_LAT] == pytest.approx(0.7 * 10 + 0.3 * 20)
    assert math.isnan(R.mf[2, mon.F_LAT])  # other nodes untouched


def test_staleness_follows_the_node_period():
    R = make_R(AsrbOptions(monitor_period_s=10))
    assert mon.latency_stale(R, 1, 0)  # never sampled
    mon.feedback(R, 1, 3.0, 100)
    assert not mon.latency_stale(R, 1, 109) and mon.latency_stale(R, 1, 110)
    R.mi[1, mon.I_MULT] = 3
    assert not mon.latency_stale(R, 1, 129) and mon.latency_stale(R, 1, 130)


def test_label_updates_are_charged_only_on_change_and_rate_limited():
    R = make_R(AsrbOptions(label_period_s=5, label_bytes=700))
    assert mon.publish_label(R, 1, mon.FIT, 10) == mon.FIT  # unchanged: free
    assert R.mser[10, mon.OP_LABEL_UPDATE].tolist() == [0, 0]
    assert mon.publish_label(R, 1, mon.UNFIT, 10) == mon.UNFIT
    assert R.mser[10, mon.OP_LABEL_UPDATE].tolist() == [1, 700]
    assert mon.publish_label(R, 1, mon.FIT, 12) == mon.UNFIT  # within the label period
    assert R.mser[12, mon.OP_LABEL_UPDATE].tolist() == [0, 0]
    assert mon.publish_label(R, 1, mon.FIT, 15) == mon.FIT
    assert R.mser[15, mon.OP_LABEL_UPDATE].tolist() == [1, 700]


def test_score_ranking_seed_000_eq_1():
    cap = 10.0
    # lambda = 1: latency only; lower latency ranks higher, capped at L_cap
    assert asrb_score(2.0, 0.5, 1.0, cap) == pytest.approx(0.8)
    assert asrb_score(2.0, 0.5, 1.0, cap) > asrb_score(4.0, 0.9, 1.0, cap)
    assert asrb_score(30.0, 0.9, 1.0, cap) == 0.0
    # lambda = 0: accuracy only; lambda = 0.5 mixes
    assert asrb_score(2.0, 0.761, 0.0, cap) > asrb_score(0.5, 0.718, 0.0, cap)
    assert asrb_score(2.0, 0.761, 0.5, cap) == pytest.approx(0.5 * 0.8 + 0.5 * 0.761)
    # no sample yet: scores as at the cap
    assert asrb_score(math.nan, 0.7, 1.0, cap) == 0.0


def test_label_transitions_fit_unfit_overloaded_cooldown():
    R = make_R(AsrbOptions(min_score=0.5, cooldown_s=20, label_period_s=1,
                           period_overloaded=1, period_fit=2, period_unfit=3))
    assert asrb_label(R, 1, 0.8, 10) == mon.FIT and R.mi[1, mon.I_MULT] == 2
    assert asrb_label(R, 1, 0.3, 11) == mon.UNFIT and R.mi[1, mon.I_MULT] == 3
    R.mi[1, mon.I_T_OVER] = 12  # a reading above the threshold at step 12
    assert asrb_label(R, 1, 0.9, 12) == mon.OVERLOADED and R.mi[1, mon.I_MULT] == 1
    assert asrb_label(R, 1, 0.9, 32) == mon.OVERLOADED  # still within the cooldown
    assert asrb_label(R, 1, 0.9, 33) == mon.FIT  # cooldown over, score decides again
    assert R.mser[:, mon.OP_LABEL_UPDATE, 0].sum() == 3  # one call per change (starts fit)


def test_metric_reads_poll_and_overload(sim):
    S = sim.arrays
    R = make_R(AsrbOptions(monitor_period_s=10, call_bytes=100, node_bytes=50, overload_threshold=0.85),
               n_nodes=sim.params.n_nodes)
    t = 7
    S.alloc[0, CPU], S.alloc[0, MEMORY] = 200.0, 1000.0
    S.nd_cons[0, CPU], S.nd_cons[0, MEMORY] = 180.0, 100.0
    S.nd_tstamp[0] = t
    mon.read_metrics(sim.S, R, 0, t)
    assert R.mf[0, mon.F_CPU] == pytest.approx(0.9) and R.mf[0, mon.F_MEM] == pytest.approx(0.1)
    assert R.mi[0, mon.I_T_OVER] == t and mon.overloaded(R, 0, t)  # 90% CPU > 85%
    assert R.mser[t, mon.OP_METRIC_READ].tolist() == [1, 150]
    mon.refresh_metrics(sim.S, R, 0, t + 9)  # fresh: no call
    assert R.mser[t + 9, mon.OP_METRIC_READ, 0] == 0
    S.nd_tstamp[0] = t - 1  # not touched this step: consumption is zero
    mon.refresh_metrics(sim.S, R, 0, t + 10)
    assert R.mf[0, mon.F_CPU] == 0.0 and R.mser[t + 10, mon.OP_METRIC_READ, 0] == 1
    # polling lists every online node and the server in one call, once per period
    n = int(S.n_on[0]) + 1
    mon.poll_all(sim.S, R, 20)
    mon.poll_all(sim.S, R, 25)
    mon.poll_all(sim.S, R, 30)
    assert R.mser[20, mon.OP_METRIC_READ].tolist() == [1, 100 + 50 * n]
    assert R.mser[25, mon.OP_METRIC_READ, 0] == 0 and R.mser[30, mon.OP_METRIC_READ, 0] == 1


def test_router_records_monitoring_cost(synthetic_model, tmp_path):
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.run.engine import Simulation
    from gmm_volunteer.io.results import open_result, write_result
    from gmm_volunteer.experiments.summary import run_metrics

    cfg = config_from_dict({"steps": 120, "seed": 2, "model": str(synthetic_model),
                            "users": {"count": 20, "capacity": 1}, "server": {"capacity": 1},
                            "availability": {"online": {"dist": "exponential", "mean": 400.0},
                                             "offline": {"dist": "exponential", "mean": 40.0}},
                            "requests": {"think_time": {"dist": "exponential", "mean": 8.0}},
                            "scheduler": "asrb", "scheduler_options": {"monitor_period_s": 5}})
    rec = Simulation(cfg).run(progress=False)
    calls = rec.policy_series["monitor_calls"][1]
    assert calls.shape == (120, len(MONITOR_OPS)) and calls.sum() > 0
    ds = open_result(write_result(rec, tmp_path / "r.zarr"))
    m = run_metrics(ds)
    np.testing.assert_allclose(m["monitor_calls_total"].values, calls.sum(axis=0))
    assert float(m["monitor_bytes_total"].sum()) == pytest.approx(rec.policy_series["monitor_bytes"][1].sum())
    # a scheduler without a monitor reports zero cost
    plain = config_from_dict({**cfg.model_dump(mode="json"), "scheduler": "uniform", "scheduler_options": {}})
    m0 = run_metrics(open_result(write_result(Simulation(plain).run(progress=False), tmp_path / "u.zarr")))
    assert float(m0["monitor_calls_total"].sum()) == 0.0
