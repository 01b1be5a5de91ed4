"""ASRB's herding bounds (issue 34; docs/routing.md sections 2 and 7): with seed 000's
rules (random among equally healthy candidates, labels from the node's best score, the
minimum score in the fallback, this round's placements in the node's load) a volunteer
is given at most its cores + 1 subtasks in a step while the server has a free core, and
at latency weight 0 the server never has a free core while a volunteer holds more
subtasks than its cores. With the four rules off (0.7.0's router) both fail on the same
run, so the checks can fail."""

from __future__ import annotations

import numpy as np
import pytest

from gmm_volunteer.policies.routing import H_IDLE_SERVER, H_MAX_PLACED, H_SERVER_FREE, H_VOL_PLACED_OVER

OFF = {"random_ties": False, "label_best_score": False, "fallback_min_score": False, "round_load": False}


def _herding(options):
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.run.engine import Simulation

    cfg = config_from_dict({"steps": 600, "seed": 0, "model": "default",
                            "users": {"count": 300, "capacity": 1, "allocation": "fitted"},
                            "server": {"capacity": 30, "allocation": "dedicated"},
                            "execution": {"batching": True, "variants": True},
                            "scheduler": "asrb", "scheduler_options": options})
    rec = Simulation(cfg).run(progress=False)
    h = rec.policy_series["herding"][1]
    return h[h[:, H_MAX_PLACED] > 0]  # the steps in which the router placed


@pytest.mark.parametrize("lam", [1.0, 0.5, 0.0])
def test_at_most_cores_plus_one_on_a_volunteer_while_the_server_has_a_free_core(lam):
    h = _herding({"latency_weight": lam})
    assert len(h) > 100
    free = h[:, H_SERVER_FREE] > 0
    assert free.any()
    assert np.all(h[free, H_VOL_PLACED_OVER] <= 1.0)


def test_at_latency_weight_0_the_server_is_never_idle_while_a_volunteer_is_over_its_cores():
    h = _herding({"latency_weight": 0.0})
    assert np.all(h[:, H_IDLE_SERVER] == 0)


def test_the_router_of_070_breaks_both_bounds():
    h = _herding({"latency_weight": 0.0, **OFF})
    free = h[:, H_SERVER_FREE] > 0
    assert np.any(h[free, H_VOL_PLACED_OVER] > 1.0)
    assert np.any(h[:, H_IDLE_SERVER] > 0)
