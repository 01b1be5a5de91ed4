"""`threads`: a step's consumption samples drawn on several threads give the very same
run as on one (kernels/consumption.sample_all; issue 15)."""

from __future__ import annotations

import numpy as np
import pytest

from gmm_volunteer.model.config import ConfigError, load_config
from gmm_volunteer.model.engine import Simulation
from gmm_volunteer.model.kernels.consumption import PARALLEL_MIN_SAMPLES
from gmm_volunteer.model.params import LOADING

BASE = "configs/paper/base.yaml"


def _run(threads: int, users: int = 8000, steps: int = 300):
    cfg = load_config(BASE, overrides=[f"users.count={users}", "scheduler=uniform", f"steps={steps}",
                                       "seed=11", f"threads={threads}"])
    sim = Simulation(cfg)
    rec = sim.run(progress=False)
    return sim, rec


def _samples_in_flight(A) -> int:
    """Active batches plus running downloads (node online, readiness LOADING): the
    samples the next step draws, counted here from the arrays, apart from the kernel."""
    d = A.dl_list[: int(A.n_dl[0])]
    node, sub = A.dl_node[d], A.dl_sub[d]
    running = A.online[node].astype(bool) & (A.rd_state[node, sub] == LOADING)
    return int(A.n_b[0]) + int(running.sum())


def test_threads_give_the_same_run():
    one, rec1 = _run(1)
    # The population is chosen so that steps draw enough samples to take the parallel
    # path (below PARALLEL_MIN_SAMPLES the kernel draws them in the calling thread).
    assert _samples_in_flight(one.arrays) >= PARALLEL_MIN_SAMPLES
    for threads in (2, 3):  # 3: chunks of unequal length
        other, rec = _run(threads)
        for name in one.arrays._fields:
            a, b = getattr(one.arrays, name), getattr(other.arrays, name)
            if isinstance(a, np.ndarray):
                assert np.array_equal(a, b, equal_nan=True), (threads, name)
        for name in ("request_user", "request_type", "request_start", "request_end", "request_outcome",
                     "online_users", "active_requests", "server_allocation", "server_consumption",
                     "user_consumption", "subtask_events", "completed_work"):
            assert np.array_equal(getattr(rec1, name), getattr(rec, name), equal_nan=True), (threads, name)


@pytest.mark.parametrize("value, message", [
    (0, r"threads: must be >= 1 \(got 0\)"),
    (1.5, r"threads: must be an integer"),
    (1000, r"threads: must be <= 256 \(got 1000\)"),
])
def test_threads_out_of_range(value, message):
    with pytest.raises(ConfigError, match=message):
        load_config(BASE, overrides=[f"threads={value}"])
