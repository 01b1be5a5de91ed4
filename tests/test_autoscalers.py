"""Control plane, monitor and the scaling autoscalers on constructed cases (issue 11
items 2-3; docs/model.md D17; seed 001 for la_imr and the capacity rule)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from gmm_volunteer.run.config import BaseProfile
from gmm_volunteer.policies.autoscalers.base import Autoscaler, AutoscalerOptions
from gmm_volunteer.policies.autoscalers.capacity_rule import CapacityRule, Ewma, capacity_rule_units
from gmm_volunteer.policies.autoscalers.control import ControlPlane
from gmm_volunteer.policies.autoscalers.la_imr import (
    LaImr, erlang_c, erlang_c_wait, fewest_units, fit_latency_model, predicted_latency)
from gmm_volunteer.policies.autoscalers.monitor import Monitor, Observation
from gmm_volunteer.policies.autoscalers.reactive import Reactive, hpa_desired

BASE = BaseProfile().as_array()


class Scripted(Autoscaler):
    """Wants script(t) units: a constructed demand for the control plane."""

    name = "scripted"
    Options = AutoscalerOptions
    script = staticmethod(lambda t: 1)

    def desired(self, obs, units, t):
        return self.script(t)


def fake_arrays(steps=2000, users=10):
    return SimpleNamespace(
        srv_cap=np.zeros(5), rq_count=np.zeros(users + 1, np.int64), n_lg=np.zeros(1, np.int64),
        lg_end=np.zeros(10000, np.int64), lg_time=np.zeros(10000), lg_start=np.zeros(10000, np.int64),
        lg_out=np.zeros(10000, np.int8), ser_scons=np.zeros((steps, 5), np.float32),
        ser_salloc=np.ones((steps, 5), np.float32), ser_work=np.zeros((steps, 2), np.float32),
        ser_ev=np.zeros((steps, 2, 5), np.int32))


def plane(policy, capacity=2.0, **opts):
    pol = policy(**opts)
    pol.reset(None, None)
    cfg = SimpleNamespace(base_profile=BaseProfile(), server=SimpleNamespace(capacity=capacity))
    cp = ControlPlane(pol, cfg, SimpleNamespace(amax=np.stack([BASE * capacity, BASE])))
    return cp


def drive(cp, arrays, steps, each_step=None):
    """Call the control plane whenever it is due, as the engine does; return the units in
    effect per step."""
    cp.start(arrays)
    units = np.zeros(steps, np.int64)
    for t in range(steps):
        if each_step is not None:
            each_step(arrays, t)
        if t >= cp.next_event:
            cp.act(arrays, t)
        units[t] = cp.units
        np.testing.assert_array_equal(arrays.srv_cap, BASE * cp.units * cp.o.unit)
    return units


def test_scale_out_waits_for_the_provisioning_delay():
    Scripted.script = staticmethod(lambda t: 5 if t >= 100 else 2)
    cp = plane(Scripted, period=10, provisioning_delay=37, cooldown=0)
    units = drive(cp, fake_arrays(), 300)
    assert units[0] == 2  # initial_units = server.capacity / unit
    # wish first seen at the decision of step 100; capacity from 100 + 37
    assert (units[:137] == 2).all() and (units[137:] == 5).all()
    assert cp.action_table().tolist() == [[100, 137, 2, 5]]
    # units ordered but still provisioning count: no repeated orders while waiting
    assert len(cp.actions) == 1


def test_scale_in_only_after_the_cooldown_and_cancels_pending_orders_first():
    # High wish at 50 only; low afterwards.
    Scripted.script = staticmethod(lambda t: 6 if t == 50 else 1)
    cp = plane(Scripted, period=10, provisioning_delay=30, cooldown=100)
    units = drive(cp, fake_arrays(), 400)
    acts = cp.action_table()
    assert acts[0].tolist() == [50, 80, 2, 6]
    # The wish of 50 stays in the 100 s window until step 150 (exclusive): the first
    # decision whose window no longer holds it is at 150; it removes the units then.
    ins = acts[(acts[:, 3] < acts[:, 2]) & (acts[:, 1] >= 0)]
    assert ins[0, 1] == 150 and ins[0, 3] == 1
    assert (units[80:150] == 6).all() and (units[150:] == 1).all()
    # Before 50 the wish was 1 < 2 for less than the cooldown: the 2 initial units stay.
    assert (units[:80] == 2).all()

    # A cooldown longer than the delay... and a wish that drops while an order is
    # still provisioning: the order is cancelled before it serves.
    Scripted.script = staticmethod(lambda t: 8 if t == 20 else 1)
    cp = plane(Scripted, period=10, provisioning_delay=500, cooldown=30)
    units = drive(cp, fake_arrays(), 200)
    acts = cp.action_table()
    assert acts[0].tolist() == [20, 520, 2, 8]
    assert [20, -1, 2, 8] in acts.tolist()  # cancelled at 50 (20 + cooldown 30)
    assert units.max() == 2 and units[-1] == 1


def test_units_are_clipped_to_the_limits():
    Scripted.script = staticmethod(lambda t: 1000 if t < 100 else 0)
    cp = plane(Scripted, period=5, provisioning_delay=0, cooldown=0, min_units=2, max_units=9)
    units = drive(cp, fake_arrays(), 200)
    assert units.max() == 9 and units[-1] == 2


def test_monitor_period_lag_and_window():
    a = fake_arrays()
    mon = Monitor(period=10, lag=7, window=30)
    mon.start(a)
    # 4 arrivals in [0, 10); two requests completed at 5 (latency 3) and 8 (latency 11);
    # one abandoned at 9.
    a.rq_count[1:5] = 1
    a.lg_start[:3], a.lg_end[:3], a.lg_out[:3] = [2, -3, 0], [5, 8, 9], [0, 0, 1]
    a.lg_time[:3] = a.lg_end[:3]  # whole steps (execution.latency: whole_step)
    a.n_lg[0] = 3
    a.ser_scons[0:10, 2] = 50.0
    a.ser_salloc[0:10, 2] = 200.0
    a.ser_work[0:10, 0] = 0.5
    obs = mon.scrape(a, 10, units=2)
    assert obs.arrivals == 4 and obs.arrival_rate == pytest.approx(0.4)
    assert obs.n_completed == 2 and obs.abandoned == 1
    assert obs.latency[0.5] == pytest.approx(7.0)  # numpy linear quantile of [3, 11]
    assert obs.utilization[2] == pytest.approx(0.25)
    assert obs.server_work == pytest.approx(5.0)
    assert obs.server_starts == 0 and obs.starts == 0 and obs.routed_share == 1.0
    assert mon.visible(16) is None and mon.visible(17) is obs
    # 40 s later the two completions have left the 30 s window
    a.rq_count[1:5] = 2
    obs2 = mon.scrape(a, 50, units=2)
    assert obs2.n_completed == 0 and math.isnan(obs2.latency[0.99]) and obs2.arrivals == 4
    # under latency: substep (docs/model.md D34) latencies come from the end times, inside
    # the end step: completed at 4.25 and 7.5, latencies 2.25 and 10.5
    b = fake_arrays()
    sub = Monitor(period=10, lag=0, window=30)
    sub.start(b)
    b.lg_start[:2], b.lg_end[:2], b.lg_time[:2], b.n_lg[0] = [2, -3], [5, 8], [4.25, 7.5], 2
    assert sub.scrape(b, 10, units=2).latency[0.5] == pytest.approx(6.375)


def _obs(t, rate, util_cpu=0.5, p95=10.0, work=None, units=2, period=5):
    util = np.full(5, 0.1)
    util[2] = util_cpu
    arrivals = int(round(rate * period))
    return Observation(time=t, visible_at=t, period=period, arrivals=arrivals, arrival_rate=rate,
                       latency={0.5: p95 / 2, 0.9: p95, 0.95: p95, 0.99: p95 * 2}, n_completed=10,
                       abandoned=0, utilization=util,
                       server_work=(work if work is not None else 0.0) * arrivals, units=units)


def test_reactive_is_the_hpa_rule():
    assert hpa_desired(3, 0.7 * 2, 0.7, 0.1) == 6  # ratio 2
    assert hpa_desired(3, 0.7, 0.7, 0.1) == 3
    assert hpa_desired(4, 0.75, 0.7, 0.1) == 4  # within tolerance
    assert hpa_desired(4, 0.35, 0.7, 0.1) == 2
    r = Reactive(metric="utilization", target=0.5)
    r.reset(None, None)
    assert r.desired(_obs(10, 1.0, util_cpu=1.0, units=3), 3, 10) == 6
    r = Reactive(metric="latency", percentile=0.95, target=20.0)
    r.reset(None, None)
    assert r.desired(_obs(10, 1.0, p95=50.0, units=2), 2, 10) == 5
    assert r.desired(None, 2, 10) == 2  # nothing visible yet: no change


def test_capacity_rule_arithmetic():
    # lambda 3 /s, R 2 CPU-s, rho 0.75, one unit of 2 cores: 6 / 1.5 = 4 exactly (not 5)
    assert capacity_rule_units(3.0, 2.0, 0.75, 2.0) == 4
    assert capacity_rule_units(3.1, 2.0, 0.75, 2.0) == 5
    cr = CapacityRule(rho_target=0.5, ewma=0.5, unit=1.0)
    cr.reset(None, None)
    cr.unit_cores = 2.0  # base_profile cpu 200 % x unit 1
    # R measured: 4 CPU-s per arrival; lambda EWMA 1 -> (0.5 x 3 + 0.5 x 1) = 2
    assert cr.desired(_obs(5, 1.0, work=4.0), 1, 5) == math.ceil(1.0 * 4.0 / (0.5 * 2.0))
    assert cr.desired(_obs(10, 3.0, work=4.0), 4, 10) == math.ceil(2.0 * 4.0 / (0.5 * 2.0))
    # the same scrape seen twice does not move the EWMA twice
    o = _obs(15, 3.0, work=4.0)
    first = cr.desired(o, 8, 15)
    assert cr.desired(o, 8, 20) == first
    e = Ewma(0.25)
    assert [e.update(x) for x in (4.0, 8.0)] == [4.0, 5.0]


def test_routed_load_counts_the_server_share_of_placements():
    """The monitor counts subtask placements on the server (node class 0) and on every
    node; `load: routed` scales lambda by the server's share of them, and R by its
    inverse (D41); `load: all` counts every request (the behaviour before 0.11.0)."""
    a = fake_arrays()
    mon = Monitor(period=10, lag=0, window=30)
    mon.start(a)
    a.rq_count[1:9] = 1  # 8 requests in [0, 10)
    a.ser_ev[3, 0, 0] = 2  # 2 placements on the server, 6 on users' devices
    a.ser_ev[4, 1, 0] = 6
    a.ser_ev[12, 0, 0] = 50  # after the scrape: not counted
    a.ser_work[0:10, 0] = 0.8  # 8 CPU-s on the server
    obs = mon.scrape(a, 10, units=2)
    assert (obs.server_starts, obs.starts, obs.routed_share) == (2, 8, 0.25)
    lam, work = 0.8 * 0.25, 8.0 / (8 * 0.25)  # 2 requests' worth at 4 CPU-s each
    beta, gamma = 2.0, 0.5
    for load, want_lam in (("routed", lam), ("all", 0.8)):
        pol = LaImr(alpha=0.0, beta=beta, gamma=gamma, budget=1.0, ewma=1.0, load=load, min_units=1,
                    max_units=100)
        pol.reset(None, None)
        pol.unit_cores = 2.0
        got = pol.desired(obs, 1, 10)
        assert pol.lam.value == pytest.approx(want_lam)
        assert pol.work.work / pol.work.arrivals == pytest.approx(work if load == "routed" else 1.0)
        # the fewest units whose law is within the budget, at this load's rate
        w = work if load == "routed" else 1.0
        assert got == fewest_units(want_lam, 2.0 / w, 1.0, 1, 100, 0.0, beta, gamma)
    # routed and all differ here: 0.2 and 0.8 requests/s need 1 and 4 units
    assert fewest_units(lam, 0.5, 1.0, 1, 100, 0.0, beta, gamma) < fewest_units(0.8, 2.0, 1.0, 1, 100, 0.0,
                                                                                  beta, gamma)
    # with every placement on the server the two counts agree bit for bit
    obs_c = Observation(**{**obs.__dict__, "server_starts": 8})
    picks = []
    for load in ("routed", "all"):
        pol = LaImr(alpha=0.0, beta=beta, gamma=gamma, budget=1.0, ewma=1.0, load=load)
        pol.reset(None, None)
        pol.unit_cores = 2.0
        picks.append((pol.desired(obs_c, 1, 10), pol.lam.value, pol.work.work / pol.work.arrivals))
    assert picks[0] == picks[1]


def test_erlang_c_against_its_formula():
    def textbook(c, a):
        top = a**c / math.factorial(c) * c / (c - a)
        return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)

    for c, a in [(1, 0.5), (2, 1.0), (3, 2.4), (10, 7.3), (25, 24.0)]:
        assert erlang_c(c, a) == pytest.approx(textbook(c, a), rel=1e-12)
    assert erlang_c(2, 1.0) == pytest.approx(1.0 / 3.0)
    # M/M/1: W_q = rho / (mu - lambda)
    assert erlang_c_wait(1, 0.5, 1.0) == pytest.approx(0.5 / 0.5)
    assert erlang_c_wait(2, 2.0, 1.0) == math.inf and erlang_c(2, 2.0) == 1.0
    assert erlang_c_wait(3, 0.0, 1.0) == 0.0


def test_la_imr_picks_the_fewest_units_within_budget():
    alpha, beta, gamma, mu, lam = 5.0, 2.0, 1.5, 0.2, 3.0
    n = fewest_units(lam, mu, 12.0, 1, 100, alpha, beta, gamma)
    assert predicted_latency(n, lam, mu, alpha, beta, gamma) <= 12.0
    assert predicted_latency(n - 1, lam, mu, alpha, beta, gamma) > 12.0
    assert n >= lam / mu  # stability: more units than the offered load
    assert fewest_units(lam, mu, 1.0, 1, 40, alpha, beta, gamma) == 40  # budget below alpha
    pol = LaImr(alpha=alpha, beta=beta, gamma=gamma, budget=12.0, ewma=1.0, work_per_request=10.0)
    pol.reset(None, None)
    pol.unit_cores = 2.0  # mu = 2 / 10 = 0.2
    assert pol.desired(_obs(5, lam), 1, 5) == n
    # a step in demand moves the wish up at once (ewma 1: no smoothing)
    assert pol.desired(_obs(10, 2 * lam), n, 10) > n


def test_fit_latency_model_recovers_known_parameters():
    x = np.linspace(0.05, 2.0, 12)
    y = 4.0 + 3.0 * x**1.7
    a, b, g = fit_latency_model(x, y)
    assert (a, b, g) == pytest.approx((4.0, 3.0, 1.7), rel=1e-4)
    with pytest.raises(ValueError):
        fit_latency_model([1.0, 2.0], [1.0, 2.0])
