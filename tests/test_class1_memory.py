"""Class 1 of issue "Hardening II": memory safety of the kernels.

A request type with many subtask slots outgrew the batch pool (its growth bound counted
the slots of requests starting in a step as 64 at most), policies could hand actions ids
outside the state's arrays, and nothing checked either since numba does not check bounds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import njit

from gmm_volunteer.model.actions import assign, pending_requests_fifo
from gmm_volunteer.run.config import ConfigError, config_from_dict
from gmm_volunteer.model.kernels.heap import heap_count_due, heap_push
from gmm_volunteer.policies.base import Scheduler
from gmm_volunteer.testing.conformance import ConformanceError, check_policy

from boundscheck_cases import bundle_with_slots

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def test_class1_heap_count_due_counts_what_a_scan_counts():
    g = np.random.default_rng(5)
    for n in (0, 1, 2, 7, 100, 1000):
        ht, hv, hn = np.zeros(n + 1, np.int64), np.zeros(n + 1, np.int64), np.zeros(1, np.int64)
        times = g.integers(0, 50, n)
        for k, x in enumerate(times):
            heap_push(ht, hv, ht, hn, x, k, x)
        for t in (-1, 0, 10, 25, 49, 60):
            assert heap_count_due(ht, hn, t) == int(np.sum(times <= t))


def _quick(model, users, steps=120, **extra):
    return config_from_dict({
        "steps": steps, "seed": 4, "model": str(model), "users": {"count": users}, "server": {"capacity": 10},
        "availability": {"online": {"dist": "exponential", "mean": 80.0},
                         "offline": {"dist": "exponential", "mean": 40.0}},
        "requests": {"think_time": {"dist": "exponential", "mean": 8.0}}, **extra})


@pytest.mark.parametrize("slots", [160, 1000])
def test_class1_many_subtask_slots_run_with_invariants(tmp_path, slots):
    """160 slots hung and 1,000 crashed in 0.6.0; now the pool has room for every slot of
    every request that can start in a step, checked by the invariants after each step."""
    from gmm_volunteer.testing.conformance import _run_checked

    cfg = _quick(bundle_with_slots(tmp_path, slots), users=30)
    _run_checked(cfg)
    from gmm_volunteer.run.engine import Simulation

    record = Simulation(cfg).run(progress=False)
    # the heavy request type (index 3) was requested, and its slots were placed
    assert np.any(np.asarray(record.request_type) == 3)


@njit(cache=True)
def past_last_node_place(S, P, t, args):
    for i in pending_requests_fifo(S):
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] < 0:
                assign(S, P, i, p, P.n_nodes, t)  # one past the last node


class PastLastNode(Scheduler):
    place = past_last_node_place


def test_class1_action_refuses_node_past_the_last(synthetic_model):
    from gmm_volunteer.run.engine import Simulation

    cfg = _quick(synthetic_model, users=10, steps=50, scheduler=f"{__name__}:PastLastNode")
    with pytest.raises(ValueError, match="assign: node id out of range"):
        Simulation(cfg).run(progress=False)


def test_class1_conformance_reports_a_bad_node_id(synthetic_model):
    with pytest.raises(ConformanceError, match="node id out of range"):
        check_policy("scheduler", f"{__name__}:PastLastNode", model=synthetic_model, steps=50)


def test_class1_slot_ids_beyond_int32_refused(tmp_path):
    from gmm_volunteer.run.preflight import check_run

    cfg = _quick(bundle_with_slots(tmp_path, 30), users=100_000_000)
    with pytest.raises(ConfigError, match=r"users.count: .* 30 subtask slots .*int32"):
        check_run(cfg, "cfg.yaml", memory=False)


def test_class1_bounds_checked_end_to_end_cases(tmp_path):
    """Small runs with numba's bounds checking on: any index outside an array in any
    kernel they reach raises instead of corrupting memory. A cache folder of their own
    (kept between test runs, so only the first compiles) keeps bounds-checked machine
    code out of the normal cache."""
    cache = REPO / ".pytest_cache" / "numba-boundscheck"
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(cache / "numba"),
               GMMV_RUNNER_DIR=str(cache / "runners"))
    proc = subprocess.run([sys.executable, str(HERE / "boundscheck_cases.py"), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ok: ") == 4, proc.stdout
