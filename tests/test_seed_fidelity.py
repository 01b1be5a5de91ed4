"""Issue 22: the neighbouring systems' elements as the seeds state them (docs/routing.md
section 6): ASRB's per-(node, subtask) latency, volatility-driven monitoring, score
PATCH cost, pod admission, Alg. 2's trigger and cooldown, a lambda per request type; the
herding diagnostic; the whole-run estimator error; JSQ-S and the Oracle."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
import xarray as xr

from gmm_volunteer.policies import asrb
from gmm_volunteer.policies import monitor as mon
from gmm_volunteer.policies.asrb import AsrbOptions
from gmm_volunteer.policies.routing import ESTIMATOR_NAMES, HERDING_FIELDS, TIER_NAMES
from gmm_volunteer.experiments.routing_metrics import herding, routing_metrics, whole_run_mape
from test_monitor import make_R


def _run(synthetic_model, scheduler, options=None, steps=200, users=20, server=1, seed=4):
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.run.engine import Simulation

    cfg = config_from_dict({"steps": steps, "seed": seed, "model": str(synthetic_model),
                            "users": {"count": users, "capacity": 1}, "server": {"capacity": server},
                            "availability": {"online": {"dist": "exponential", "mean": 400.0},
                                             "offline": {"dist": "exponential", "mean": 40.0}},
                            "requests": {"think_time": {"dist": "exponential", "mean": 8.0}},
                            "scheduler": scheduler, "scheduler_options": options or {}})
    return Simulation(cfg).run(progress=False)


def test_latency_is_kept_per_node_and_subtask():
    R = make_R(AsrbOptions(ewma_alpha=0.5), n_sub=3)
    mon.feedback_sub(R, 1, 0, 4.0, 1)
    mon.feedback_sub(R, 1, 2, 10.0, 2)
    mon.feedback_sub(R, 1, 0, 6.0, 3)
    assert R.ml[1, 0] == pytest.approx(5.0) and R.ml[1, 2] == pytest.approx(10.0)
    assert np.isnan(R.ml[1, 1]) and R.mlt[1, 0] == 3 and R.mlt[1, 2] == 2


def test_volatility_sets_the_monitoring_period():
    o = AsrbOptions(volatile_change=0.5, stable_samples=3, min_score=0.0, label_period_s=1)
    R = make_R(o, n_sub=1)
    mon.feedback_sub(R, 1, 0, 4.0, 1)
    mon.feedback_sub(R, 1, 0, 9.0, 2)  # 5 s from an average of 4: > 50 %: volatile
    assert R.mi[1, mon.I_VOLATILE] == 1
    assert asrb.asrb_label(R, 1, 0.5, 10) == mon.FIT
    assert R.mi[1, mon.I_MULT] == o.period_overloaded  # volatile: most often
    for t in range(3):  # three samples within 50 % of the average: stable
        mon.feedback_sub(R, 1, 0, R.ml[1, 0], 20 + t)
    assert R.mi[1, mon.I_VOLATILE] == 0 and R.mi[1, mon.I_STABLE] == 3
    asrb.asrb_label(R, 1, 0.5, 30)
    assert R.mi[1, mon.I_MULT] == o.period_fit + 1  # stable fit node: one step less often
    R2 = make_R(AsrbOptions(volatility=False, min_score=0.0), n_sub=1)
    mon.feedback_sub(R2, 1, 0, 4.0, 1)
    mon.feedback_sub(R2, 1, 0, 9.0, 2)
    asrb.asrb_label(R2, 1, 0.5, 10)
    assert R2.mi[1, mon.I_MULT] == AsrbOptions().period_fit  # the label alone


def test_score_patch_is_charged_when_the_score_moves():
    R = make_R(AsrbOptions(score_patch_delta=0.1, label_bytes=700), n_sub=2)
    asrb.publish_score(R, 2, 0, 0.5, 3)  # first publication
    asrb.publish_score(R, 2, 0, 0.55, 4)  # within the delta: no call
    asrb.publish_score(R, 2, 0, 0.7, 5)
    calls = R.mser[:, mon.OP_SCORE_UPDATE, 0]
    assert calls[3] == 1 and calls[4] == 0 and calls[5] == 1
    assert R.mser[:, mon.OP_SCORE_UPDATE, 1].sum() == 1400


def test_score_patch_is_kept_per_pod_so_two_variants_do_not_flip_it():
    """Two variants on one node (scores 0.5 and 0.8, lambda < 1): each pod publishes
    once; one value per node would pay a call at every evaluation."""
    R = make_R(AsrbOptions(score_patch_delta=0.1), n_sub=2)
    for t in range(3, 9):
        asrb.publish_score(R, 2, 0, 0.5, t)
        asrb.publish_score(R, 2, 1, 0.8, t)
    assert R.mser[:, mon.OP_SCORE_UPDATE, 0].sum() == 2


def test_admission_waits_a_step_after_the_first_read(synthetic_model):
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.run.engine import Simulation

    sim = Simulation(config_from_dict({"steps": 5, "seed": 1, "model": str(synthetic_model),
                                       "users": {"count": 3, "capacity": 1}, "server": {"capacity": 1},
                                       "scheduler": "asrb"}))
    R = make_R(AsrbOptions())
    assert asrb.admitted(sim.S, R, 0, 0)  # the server always
    assert not asrb.admitted(sim.S, R, 2, 5)  # never read
    mon.read_metrics(sim.S, R, 2, 5)
    assert not asrb.admitted(sim.S, R, 2, 5) and asrb.admitted(sim.S, R, 2, 6)
    assert asrb.admitted(sim.S, make_R(AsrbOptions(admission_probe=False)), 2, 0)


def test_a_lambda_per_request_type_must_match_the_types(synthetic_model):
    from gmm_volunteer.run.config import ConfigError

    with pytest.raises(ConfigError, match="scheduler_options.latency_weight_per_type"):
        _run(synthetic_model, "asrb", {"latency_weight_per_type": [1.0] * 50}, steps=5)
    with pytest.raises(Exception, match="latency_weight_per_type"):
        _run(synthetic_model, "asrb", {"latency_weight_per_type": [1.5]}, steps=5)


def test_herding_diagnostic_recorded_per_step(synthetic_model):
    rec = _run(synthetic_model, "asrb")
    dims, h, _ = rec.policy_series["herding"]
    assert dims == ("time", "herding_field") and h.shape == (200, len(HERDING_FIELDS))
    placed = h[:, 0]
    starts = rec.subtask_events[:, :, 0].sum(axis=1) if rec.subtask_events.ndim == 3 else None
    assert placed.max() >= 1
    # a step's most placements on one node never exceeds its placements
    if starts is not None:
        assert np.all(placed <= starts + 1e-9)
    assert set(np.unique(h[:, 1])) <= {0.0, 1.0}


def test_herding_and_whole_run_mape_reductions():
    h = np.zeros((4, len(HERDING_FIELDS)))
    h[:, 0] = [0, 3, 1, 8]
    h[:, 1] = [0, 1, 0, 1]
    h[:, 2] = [0, 2.0, 0, 6.0]
    ea = np.zeros((3, len(ESTIMATOR_NAMES), 2))
    ea[2, 0] = [3.0, 10]  # cloud, hybrid: 10 decisions, sum 3
    ea[1, 0] = [5.0, 5]   # edge
    ea[2, 1] = [20.0, 10]
    ds = xr.Dataset({"herding": (("time", "herding_field"), h),
                     "estimator_error": (("tier", "estimator", "error_stat"), ea)},
                    coords={"herding_field": list(HERDING_FIELDS), "tier": list(TIER_NAMES),
                            "estimator": list(ESTIMATOR_NAMES),
                            "error_stat": ["sum_abs_rel_error", "decisions"]})
    d = herding(ds)
    assert d["mean"] == pytest.approx(4.0) and d["max"] == 8.0
    assert d["server_free_share"] == pytest.approx(2 / 3) and d["excess_max"] == 6.0
    assert whole_run_mape(ds, "hybrid") == (pytest.approx(8.0 / 15), 15)
    assert whole_run_mape(ds, "hybrid", "cloud") == (pytest.approx(0.3), 10)
    assert np.isnan(whole_run_mape(ds, "hybrid", "local")[0])
    m = routing_metrics(ds)
    assert m["estimator_mape_model_only_cloud"][1] == pytest.approx(2.0)
    # (issue 34) the per-volunteer columns, and the bound's share among steps with placements
    h[:, 4] = [0, 2, 1, 6]    # most placed on one volunteer
    h[:, 5] = [0, 1, 0, 5]    # ... beyond its cores
    h[:, 6] = [1, 1, 1, 1]    # the server had a free core
    d = herding(ds.assign(herding=(("time", "herding_field"), h)))
    assert d["volunteer_max"] == 6.0
    assert d["volunteer_ge5_share"] == pytest.approx(1 / 3)
    assert d["beyond_bound_server_free_share"] == pytest.approx(1 / 3)  # 1 beyond is within the bound


@pytest.mark.parametrize("scheduler", ["queue_aware", "jsq_s", "oracle", "la_imr"])
def test_whole_run_error_counts_every_completed_decision(synthetic_model, scheduler):
    rec = _run(synthetic_model, scheduler, {"decision_log": 5})
    _, log, attrs = rec.policy_series["decision"]
    _, ea, _ = rec.policy_series["estimator_error"]
    done_total = ea[:, 0, 1].sum()
    assert log.shape[0] == 5 and attrs["decisions_total"] > 5
    # the whole-run count covers more than the 5 logged decisions, and no more than all
    assert 5 < done_total <= attrs["decisions_total"]
    assert np.all(ea[:, :, 1] == ea[:, :1, 1])  # the three estimates on the same decisions


def test_jsq_s_uses_the_server_where_jsq_counts_raw_subtasks(synthetic_model):
    """A server of 8 base profiles against one-core volunteers: JSQ-S weighs queues by
    cores, so it places more on the server than JSQ on the same seed."""
    def server_share(name):
        rec = _run(synthetic_model, name, steps=300, users=30, server=8)
        _, h, _ = rec.policy_series["herding"]
        return h[:, 3].mean()
    assert server_share("jsq_s") > server_share("jsq")


def test_la_imr_router_latency_forms():
    from gmm_volunteer.model.theory import allen_cunneen_wait
    from gmm_volunteer.policies.queue_aware import LaImrRouterOptions, la_imr_latency

    P = ROUTER_P
    c, lam, s, d = 4, 2.0, 1.5, 2.0
    wq = allen_cunneen_wait(c, lam, 1 / s, 1.0, 1.0)
    R = make_R(LaImrRouterOptions(beta=3.0, gamma=2.0))  # affine, alpha = the service time
    assert la_imr_latency(P, R, c, lam, s, d, 2, 0) == pytest.approx(s + 3.0 * (lam / c) ** 2 + wq + d)
    R = make_R(LaImrRouterOptions(alpha=0.5, beta=3.0, gamma=2.0))
    assert la_imr_latency(P, R, c, lam, s, 0.0, 2, 0) == pytest.approx(0.5 + 0.75 + wq)
    R = make_R(LaImrRouterOptions(eq5=True, gamma=2.0))  # U = 2 x 1.5 / 4 = 0.75
    assert la_imr_latency(P, R, c, lam, s, d, 2, 0) == pytest.approx(s * (1 + 0.75 ** 2) + wq + d)
    R = make_R(LaImrRouterOptions(eq5=True, gamma=2.0, utilization_floor=0.9))
    assert la_imr_latency(P, R, c, lam, s, d, 2, 0) == pytest.approx(s * (1 + 0.9 ** 2) + wq + d)
    # a law calibrated for (subtask type 1, cloud) replaces the whole prediction of that
    # pair (D41) and no other
    from gmm_volunteer.policies.queue_aware import AF_MIX, N_TIERS
    R = make_R(LaImrRouterOptions(beta=3.0, gamma=2.0), nf=AF_MIX + N_TIERS * 2 + 3 * N_TIERS * 2)
    R.af[AF_MIX + N_TIERS * 2:] = np.nan
    R.af[AF_MIX + N_TIERS * 2 + 3 * (1 * N_TIERS + 2):][:3] = (0.25, 1.5, 0.5)
    assert la_imr_latency(P, R, c, lam, s, d, 2, 1) == pytest.approx(0.25 + 1.5 * (lam / c) ** 0.5)
    assert la_imr_latency(P, R, c, lam, s, d, 1, 1) == pytest.approx(s + 3.0 * (lam / c) ** 2 + wq + d)
    assert la_imr_latency(P, R, c, lam, s, d, 2, 0) == pytest.approx(s + 3.0 * (lam / c) ** 2 + wq + d)


ROUTER_P = namedtuple("RouterParams", "n_sub sub_type")(2, np.array([0, 1], np.int64))


def test_la_imr_autoscaler_eq5_and_floor():
    from gmm_volunteer.policies.autoscalers.la_imr import eq5_latency, erlang_c_wait, fewest_units

    # eq. 5 with U = (lam R + B) / (n R_max), plus the Erlang-C wait
    assert eq5_latency(4, 2.0, 1.0, 3.0, 1.5, 2.0, 1.0, 1.0) == pytest.approx(
        3.0 / 1.5 * (1 + 0.5 ** 2) + erlang_c_wait(4, 2.0, 1.0))
    assert eq5_latency(4, 2.0, 1.0, 3.0, 1.0, 2.0, 1.0, 1.0, floor=0.8) == pytest.approx(
        3.0 * (1 + 0.8 ** 2) + erlang_c_wait(4, 2.0, 1.0))
    # fewest units under eq. 5: latency falls with n; the first n within the budget
    lat = [eq5_latency(n, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0) for n in range(1, 9)]
    want = 1 + next(k for k, x in enumerate(lat) if x <= 1.6)
    got = fewest_units(2.0, 1.0, 1.6, 1, 8, 0, 0, 1, lambda n: eq5_latency(n, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0))
    assert got == want


def test_proximity_reads_no_node_metrics_unless_asked(synthetic_model):
    """Seed 000 6.2: proxy-mity ranks by network latency without node-state tracking."""
    from gmm_volunteer.policies.monitor import OP_METRIC_READ

    spread = _run(synthetic_model, "proximity", steps=100)
    cpu = _run(synthetic_model, "proximity", {"cpu_load": True}, steps=100)
    assert spread.policy_series["monitor_calls"][1][:, OP_METRIC_READ].sum() == 0
    assert cpu.policy_series["monitor_calls"][1][:, OP_METRIC_READ].sum() > 0
