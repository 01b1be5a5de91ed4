"""The event-driven reference of the closed network (benchmarks/reference_network.py, the
yardstick of `make bench`'s closed-network section) against exact mean-value analysis
and against the simulator (docs/validation.md section 1; tests/test_queueing.py).

- continuous time (`grid=False`): throughput and mean response agree with
  `theory.mva_delay_ld` at think time Z = 100 s;
- on the simulator's step grid (`grid=True`): throughput and mean latency agree with the
  simulator's own run of the same network, at N = 20 (below saturation), 45 and 200
  (long queues).

Tolerance: 4.5 standard errors by batch means (the run after a warm-up cut into 20
batches, SE = sd of the batch means / sqrt(20)); for a difference of two independent
runs, 4.5 x sqrt(SE_1^2 + SE_2^2).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from gmm_volunteer.io.bundlefiles import write_bundle
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.model.theory import mva_delay_ld, ps_server_rate
from gmm_volunteer.testing.synthetic import queueing_bundle, queueing_config

pytest.importorskip("simpy")  # in the test extra (pinned); the reference is written in it
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `pytest` (not `python -m pytest`) leaves the root out
    sys.path.insert(0, str(ROOT))
import simpy  # noqa: E402

from benchmarks.reference_network import PSServer, run_reference  # noqa: E402

MEAN_WORK, THINK, CAPACITY, DEMAND = 10.0, 100.0, 2.0, 1.0  # as tests/test_queueing.py
HORIZON, WARMUP, BATCHES = 60_000, 2_000, 20


def _batch_means(end, latency):
    """Per batch of time: throughput and mean latency of the jobs that ended in it."""
    edges = np.linspace(WARMUP, HORIZON, BATCHES + 1)
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        sel = (end >= a) & (end < b)
        out.append((sel.sum() / (b - a), latency[sel].mean()))
    bm = np.array(out)
    return bm.mean(axis=0), bm.std(axis=0, ddof=1) / math.sqrt(BATCHES)


def test_ps_server_shares_exactly():
    """Two jobs of 1 and 3 CPU-s arriving together: on 2 cores (each asks 1) they leave at
    1 and 3 s; on 1 core they share it, the first leaves at 2 s, the second, alone, at 4 s."""
    for capacity, expected in ((2.0, [1.0, 3.0]), (1.0, [2.0, 4.0])):
        env = simpy.Environment()
        server = PSServer(env, capacity, 1.0)
        left = []
        for work in (1.0, 3.0):
            server.serve(work).callbacks.append(lambda ev: left.append(env.now))
        env.run()
        assert left == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("users", [20, 200])
def test_reference_matches_mean_value_analysis(users):
    run = run_reference(users, HORIZON, grid=False, seed=users, think_mean=THINK,
                        mean_work=MEAN_WORK, capacity=CAPACITY, demand=DEMAND)
    mva = mva_delay_ld(users, THINK, ps_server_rate(CAPACITY, DEMAND, MEAN_WORK))
    m, se = _batch_means(run.end, run.latency)
    for name, got, want, s in zip(("throughput", "response"), m,
                                  (mva.throughput[-1], mva.response[-1]), se):
        assert abs(got - want) < 4.5 * s, f"N={users} {name}: {got:.4f} +- {s:.4f}, MVA {want:.4f}"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("q") / "bundle"
    write_bundle(queueing_bundle(mean_work_s=MEAN_WORK, demand_pct=100.0 * DEMAND), path)
    return path


@pytest.mark.parametrize("users", [20, 45, 200])
def test_reference_matches_simulator(bundle, users):
    cfg = queueing_config(bundle, users=users, steps=HORIZON, seed=users, think_mean_s=THINK,
                          capacity_pct=100.0 * CAPACITY)
    rec = Simulation(cfg).run(progress=False)
    done = rec.request_outcome == 0
    m_sim, se_sim = _batch_means(rec.request_end[done], rec.request_latency[done].astype(float))
    run = run_reference(users, HORIZON, grid=True, seed=users + 1, think_mean=THINK,
                        mean_work=MEAN_WORK, capacity=CAPACITY, demand=DEMAND)
    m_ref, se_ref = _batch_means(run.end, run.latency)
    for k, name in enumerate(("throughput", "latency")):
        tol = 4.5 * math.hypot(se_sim[k], se_ref[k])
        assert abs(m_sim[k] - m_ref[k]) < tol, (
            f"N={users} {name}: simulator {m_sim[k]:.4f} +- {se_sim[k]:.4f}, "
            f"reference {m_ref[k]:.4f} +- {se_ref[k]:.4f}")
