"""Demand that changes over time (issue 11 item 1; docs/model.md D18): the daily
profile and surges, the time change of durations, and the stationary default."""

from __future__ import annotations

import numpy as np
import pytest

from gmm_volunteer.run.config import ConfigError, config_from_dict
from gmm_volunteer.model.demand import Demand, cumulative, demand_arrays
from gmm_volunteer.run.engine import Simulation, simulate
from gmm_volunteer.model.kernels.demand import warp
from gmm_volunteer.model.laws import MAX_DURATION


def test_warp_is_the_time_change():
    ones = cumulative(np.ones(100))
    assert [warp(ones, 10, d) for d in (1, 7, 50)] == [1, 7, 50]  # rate 1: unchanged
    twice = cumulative(np.full(100, 2.0))
    assert [warp(twice, 10, d) for d in (1, 2, 3, 8)] == [1, 1, 2, 4]  # ceil(d / 2)
    # no demand for steps 20..29: a think time running through them waits 10 steps more
    m = np.ones(100)
    m[20:30] = 0.0
    cum = cumulative(m)
    assert warp(cum, 15, 4) == 4 and warp(cum, 15, 6) == 16
    assert warp(cum, 95, 20) >= 20  # past the end of the run: rate 1 from there
    assert warp(cum, 3, MAX_DURATION) == MAX_DURATION  # never ends stays so


def test_multiplier_profiles_and_surges():
    d = Demand(daily={"kind": "sinusoid", "amplitude": 0.5, "peak_hour": 14.0}, start_hour=14.0)
    m = d.multiplier(86400)
    assert m[0] == pytest.approx(1.5) and m[12 * 3600] == pytest.approx(0.5)
    assert m.mean() == pytest.approx(1.0, abs=1e-9)  # the sinusoid keeps the daily mean
    t = Demand(daily={"kind": "table", "points": [[6.0, 1.0], [18.0, 3.0]]},
               surges=[{"start": 10, "duration": 5, "factor": 4.0}])
    m = t.multiplier(86400)
    assert m[6 * 3600] == pytest.approx(1.0) and m[12 * 3600] == pytest.approx(2.0)
    assert m[0] == pytest.approx(2.0)  # midnight: halfway between 18 h (3) and 6 h (1), periodic
    plain = Demand(daily={"kind": "table", "points": [[6.0, 1.0], [18.0, 3.0]]}).multiplier(100)
    np.testing.assert_allclose(m[:100] / plain, [1.0] * 10 + [4.0] * 5 + [1.0] * 85)
    cum, on = demand_arrays(Demand(), 100)
    assert cum.shape == (1,) and on.tolist() == [0, 0]  # stationary default: nothing warps


def test_bad_demand_config_names_the_key(synthetic_model):
    base = {"steps": 10, "users": {"count": 5}, "server": {"capacity": 1}, "model": str(synthetic_model)}
    for demand, needle in [({"daily": {"kind": "table", "points": [[5, 1], [2, 1]]}}, "demand.daily"),
                           ({"surges": [{"start": 0, "duration": 0, "factor": 2}]}, "demand.surges.0.duration"),
                           ({"daily": {"kind": "sinusoid"}, "think_time": False}, "think_time or online")]:
        with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
            config_from_dict({**base, "demand": demand})


def _cfg(model, demand=None, **kw):
    data = {"steps": 1800, "seed": 5, "model": str(model), "users": {"count": 200},
            "server": {"capacity": 50.0}, "scheduler": "centralized",
            "availability": {"online": {"dist": "never"}, "offline": {"dist": "exponential", "mean": 60.0}},
            "requests": {"think_time": {"dist": "exponential", "mean": 30.0}}}
    data.update(kw)
    if demand is not None:
        data["demand"] = demand
    return config_from_dict(data)


def _starts(rec, lo, hi):
    return int(np.count_nonzero((rec.request_start >= lo) & (rec.request_start < hi)))


def test_a_surge_multiplies_the_request_rate_and_leaves_the_past_alone(synthetic_model):
    surge = {"surges": [{"start": 900, "duration": 600, "factor": 3.0}]}
    # 400 cores: about 20 CPU-s per request of the synthetic model at up to ~11 requests/s
    # leaves the server below saturation, so latency stays near its idle value.
    big = {"capacity": 200.0}
    base = simulate(_cfg(synthetic_model, server=big), progress=False)
    hot = simulate(_cfg(synthetic_model, surge, server=big), progress=False)
    # Before the surge the two runs are the same (same keyed draws, same clock).
    early_b = base.request_end < 900
    early_h = hot.request_end < 900
    for f in ("request_user", "request_type", "request_start", "request_end", "request_outcome"):
        np.testing.assert_array_equal(getattr(base, f)[early_b], getattr(hot, f)[early_h])
    # In the surge a think time of mean 30 s passes in 10 s: per user, one request per
    # (think + latency). With latency s <= 20 s on this unsaturated server the rate ratio
    # is (30 + s) / (10 + s) >= 1.67; about 200 x 500 / 40 = 2,500 arrivals in the window
    # without the surge (Poisson sd ~ 50, 2 %), so 1.4 is more than ten sd below the
    # least expected ratio.
    ratio = _starts(hot, 1000, 1500) / _starts(base, 1000, 1500)
    assert ratio > 1.4, ratio


def test_the_online_rate_follows_the_profile(synthetic_model):
    # Offline periods of mean 60 s pass 4x as fast in the surge: the online fraction goes
    # from 60 / 120 = 0.5 to 60 / (60 + 15) = 0.8, i.e. 100 -> 160 of 200 users. The mean
    # over 600 s of ~ 10 independent renewal cycles has sd ~ 3 users; 30 users is > 9 sd.
    avail = {"online": {"dist": "exponential", "mean": 60.0}, "offline": {"dist": "exponential", "mean": 60.0}}
    surge = {"surges": [{"start": 600, "duration": 1200, "factor": 4.0}], "think_time": False, "online": True}
    base = simulate(_cfg(synthetic_model, availability=avail), progress=False)
    hot = simulate(_cfg(synthetic_model, surge, availability=avail), progress=False)
    assert hot.online_users[1200:].mean() > base.online_users[1200:].mean() + 30
    np.testing.assert_array_equal(hot.online_users[:600], base.online_users[:600])


def test_default_state_has_no_demand_profile(synthetic_model):
    sim = Simulation(_cfg(synthetic_model, steps=10))
    assert sim.arrays.dm_on.tolist() == [0, 0] and sim.arrays.dm_cum.shape == (1,)
