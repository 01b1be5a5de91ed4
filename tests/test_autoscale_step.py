"""End to end: a step in demand (a scripted surge, docs/model.md D18) and the reactive and
capacity_rule autoscalers through the whole simulator (issue 11 "Done when"; D17).

The surge starts at S (a multiple of the monitor period p) and ends at E. Arithmetic
of the control plane (monitor period = decision period = p, lag L a multiple of p):

* a scrape at step s covers [s - p, s) and is readable from s + L, so the first scrape
  that sees the surge is S + p, and no decision can react before S + p + L; its order
  serves from S + p + L + provisioning delay, not a step earlier;
* a decision at d reads the scrape of d - L; the last wish above one unit is made at
  h = s_last + L, s_last the last scrape whose reading asks for more than one unit, and
  the server returns to one unit at h + cooldown exactly (scale-in follows the largest
  wish of the last `cooldown` seconds), not a step earlier.

s_first and s_last are computed from the run's own record (arrivals per scrape for the
capacity rule, CPU consumption / allocation for the reactive rule) with the policies'
formulas, independently of the monitor's code; the a-priori bounds S + p + L and
E + L (nothing after the surge keeps a wish up for the capacity rule, whose input is the
arrival rate, which falls back at once when think times stop being accelerated) are
checked too.
"""

from __future__ import annotations

import numpy as np
import pytest

from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.run.engine import simulate
from gmm_volunteer.policies.autoscalers.capacity_rule import capacity_rule_units
from gmm_volunteer.policies.autoscalers.reactive import hpa_desired

S, E = 300, 600  # surge: steps [S, E), a multiple of the period
P, LAG, DELAY, COOLDOWN = 5, 10, 40, 120
CPU = 2  # resource index of cpu
UNIT = 40.0  # one unit = 40 x base_profile: 80 cores
UNIT_CPU = UNIT * 200.0  # % of one unit (base_profile.cpu = 200 %)
# Synthetic bundle: about 17 CPU-s of server work per request; 200 users thinking THINK s
# on average load one unit to about 0.4 (100 s: about 1.8 requests/s) or 0.2 (200 s), and
# the surge (x8) beyond it. The reactive rule reads a 5 s mean of a bursty utilization,
# so its base load is the lower one (5 s means up to about 0.65 before the surge), below
# its threshold target x (1 + tolerance) = 0.88; the surge saturates the server (1.0).
THINK = {"capacity_rule": 100.0, "reactive": 200.0}
R, RHO = 17.0, 1.0  # capacity rule: CPU-s per request (fixed), target utilization
TARGET, TOL = 0.8, 0.1  # reactive: CPU utilization target (scale out above 0.88), HPA tolerance

CONTROL = {"unit": UNIT, "period": P, "provisioning_delay": DELAY, "cooldown": COOLDOWN, "min_units": 1,
           "max_units": 16, "initial_units": 1, "monitor": {"period": P, "lag": LAG, "window": 60}}
POLICIES = {
    "capacity_rule": {**CONTROL, "rho_target": RHO, "ewma": 1.0, "work_per_request": R},
    "reactive": {**CONTROL, "metric": "utilization", "resource": "cpu", "target": TARGET, "tolerance": TOL},
}


def _run(model, name):
    cfg = config_from_dict({
        "steps": 1200, "seed": 2, "model": str(model), "users": {"count": 200},
        "server": {"capacity": UNIT}, "scheduler": "centralized",
        # the workload the arithmetic above describes: every slot its own batch key. The
        # synthetic task types reuse models and a batch of 10 needs only twice the work
        # of one, so per model (docs/model.md D7) merged batches need far less CPU and
        # the surge would not saturate the server (measured: 5 s means up to 0.52)
        "execution": {"subtask_data": "slot"},
        "availability": {"online": {"dist": "never"}, "offline": {"dist": "exponential", "mean": 60.0}},
        "requests": {"think_time": {"dist": "exponential", "mean": THINK[name]}},
        "demand": {"surges": [{"start": S, "duration": E - S, "factor": 8.0}]},
        "autoscaler": name, "autoscaler_options": POLICIES[name]})
    return simulate(cfg, progress=False)


def _wants_more(rec, name, s):
    """Whether the reading of the scrape at step s asks for more than one unit."""
    if name == "capacity_rule":
        lam = np.count_nonzero((rec.request_start >= s - P) & (rec.request_start < s)) / P
        return capacity_rule_units(lam, R, RHO, UNIT_CPU / 100.0) > 1
    cons = rec.server_consumption[s - P: s, CPU].astype(np.float64)
    alloc = rec.server_allocation[s - P: s, CPU].astype(np.float64)
    units_then = int(round(rec.dedicated_capacity[s - 1, CPU] / UNIT_CPU))
    return hpa_desired(units_then, float(np.mean(cons / alloc)), TARGET, TOL) > 1


@pytest.mark.parametrize("name", ["capacity_rule", "reactive"])
def test_a_demand_step_scales_out_after_lag_and_delay_and_in_after_cooldown(synthetic_model, name):
    rec = _run(synthetic_model, name)
    units = np.rint(rec.dedicated_capacity[:, CPU] / UNIT_CPU).astype(int)
    acts = rec.scaling_actions
    scrapes = np.arange(P, rec.dedicated_capacity.shape[0], P)
    high = [s for s in scrapes if _wants_more(rec, name, s)]
    assert high, "the surge must ask for more capacity"
    assert all(S < s for s in high), "no reading before the surge asks for more"
    s_first, s_last = high[0], high[-1]
    # scale-out: ordered when the first high scrape is readable, serving DELAY later
    order = s_first + LAG
    assert order >= S + P + LAG  # a-priori bound
    assert tuple(acts[0][:3]) == (order, order + DELAY, 1)
    assert np.all(units[: order + DELAY] == 1) and units[order + DELAY] > 1
    # scale-in: back to one unit exactly a cooldown after the last high wish
    back = s_last + LAG + COOLDOWN
    assert tuple(acts[-1]) == (back, back, units[back - 1], 1)
    assert units[back - 1] > 1 and np.all(units[back:] == 1)
    if name == "capacity_rule":
        # the arrival rate follows the demand multiplier at once (exponential think times)
        assert s_first == S + P and s_last == E
        assert back == E + LAG + COOLDOWN
