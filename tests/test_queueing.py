"""The simulator against exact mean-value analysis (docs/validation.md, section 1).

The closed network: N users always online (`availability.online: never`), exponential
think time of mean Z, unbounded patience; one request type of one subtask with
exponential work of mean w CPU-seconds asking for d = one core; centralized on a
dedicated server of C = 2 cores shared by processor sharing (D10), batching off so that
jobs are independent. With n jobs present the server completes them at rate
mu(n) = min(n d, C) / w; `theory.mva_delay_ld` gives throughput X, response time R and
mean number at the server Q.

The 1 s step, accounted for in the prediction rather than made negligible:

- think time: the simulator draws D = max(1, ceil(T)) steps, mean Z_d =
  `theory.discrete_mean` (exact);
- a request that starts in step s is placed at the end of step s and is served from the
  start of step s + 1; a job whose service ends inside step s + k is finished at the end
  of step s + k (latency k) and its user thinks from step s + k + 1. So each cycle adds
  1 s before service and the rest of the step in which service ends after it: the delay
  station's mean is Z_d + 1 + e, the latency's mean R + e, where e = E[k - residence] is
  the mean unused part of the last step. With residence times spread over many steps
  (w = 10 s here) the end falls uniformly in its step, e = 1/2 (to about 1e-3 s for an
  exponential of mean >= 10 s: the fractional part of a smooth density of width >> 1);
- arrivals to the server happen at whole steps, which product-form theory does not
  model; its effect is part of what this test measures.

Tolerance: 4.5 standard errors by batch means (the run after a warm-up cut into 20
batches, SE = sd of the batch means / sqrt(20)), for throughput, mean latency and the
time-average number of active requests (Little: X (R + e + 1), since a request is
counted from its start step through its finish step).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gmm_volunteer.io.bundlefiles import write_bundle
from gmm_volunteer.run.config import Exponential
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.testing.synthetic import queueing_bundle, queueing_config
from gmm_volunteer.model.theory import discrete_mean, mva_delay_ld, ps_server_rate

MEAN_WORK = 10.0  # CPU-seconds per job
THINK = 100.0  # s, mean of the continuous think time
CAPACITY = 2.0  # cores (server CPU 200 %)
DEMAND = 1.0  # core per job
STEPS, WARMUP, BATCHES = 60_000, 2_000, 20
E_LAST = 0.5  # mean unused part of the step in which service ends


def _run(tmp_path, users, seed):
    path = tmp_path / "q"
    if not (path / "bundle.yaml").exists():
        write_bundle(queueing_bundle(mean_work_s=MEAN_WORK, demand_pct=100.0 * DEMAND), path)
    cfg = queueing_config(path, users=users, steps=STEPS, seed=seed, think_mean_s=THINK,
                          capacity_pct=100.0 * CAPACITY)
    return Simulation(cfg).run(progress=False)


def _batch_means(rec):
    """Per batch of steps: throughput, mean latency of the requests finished in it, mean
    number of active requests."""
    edges = np.linspace(WARMUP, STEPS, BATCHES + 1).astype(int)
    done = rec.request_outcome == 0
    end = rec.request_end[done]
    lat = rec.request_latency[done].astype(float)
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        sel = (end >= a) & (end < b)
        out.append((sel.sum() / (b - a), lat[sel].mean(), rec.active_requests[a:b].mean()))
    return np.array(out)


@pytest.mark.parametrize("users", [8, 20, 30, 45])
def test_closed_network_matches_mean_value_analysis(tmp_path, users):
    rec = _run(tmp_path, users, seed=users)
    assert np.all(rec.request_outcome == 0)  # nobody abandons, nobody goes offline
    assert rec.online_users.min() == users
    z_delay = discrete_mean(Exponential(dist="exponential", mean=THINK)) + 1.0 + E_LAST
    mva = mva_delay_ld(users, z_delay, ps_server_rate(CAPACITY, DEMAND, MEAN_WORK))
    x, r = mva.throughput[-1], mva.response[-1]
    predicted = np.array([x, r + E_LAST, x * (r + E_LAST + 1.0)])
    bm = _batch_means(rec)
    measured = bm.mean(axis=0)
    se = bm.std(axis=0, ddof=1) / math.sqrt(BATCHES)
    for name, m, p, s in zip(("throughput", "latency", "active"), measured, predicted, se):
        assert abs(m - p) < 4.5 * s, f"N={users} {name}: measured {m:.4f} +- {s:.4f}, MVA {p:.4f}"


def test_loads_span_light_to_saturated():
    """The populations above go from half the server's capacity to beyond saturation."""
    z = discrete_mean(Exponential(dist="exponential", mean=THINK)) + 1.0 + E_LAST
    util = [mva_delay_ld(n, z, ps_server_rate(CAPACITY, DEMAND, MEAN_WORK)).throughput[-1] * MEAN_WORK / CAPACITY
            for n in (8, 20, 30, 45)]
    assert util[0] < 0.5 and util[-1] > 0.97


if __name__ == "__main__":  # the table of docs/validation.md, section 1
    import tempfile
    from pathlib import Path

    z = discrete_mean(Exponential(dist="exponential", mean=THINK)) + 1.0 + E_LAST
    with tempfile.TemporaryDirectory() as tmp:
        for n in (8, 20, 30, 45):
            rec = _run(Path(tmp), n, seed=n)
            mva = mva_delay_ld(n, z, ps_server_rate(CAPACITY, DEMAND, MEAN_WORK))
            x, r = mva.throughput[-1], mva.response[-1]
            bm = _batch_means(rec)
            m, se = bm.mean(axis=0), bm.std(axis=0, ddof=1) / math.sqrt(BATCHES)
            util = rec.server_consumption[WARMUP:, 2].sum() / rec.server_allocation[WARMUP:, 2].sum()
            print(f"N={n}: throughput {m[0]:.4f} +- {se[0]:.4f} (MVA {x:.4f}) | latency {m[1]:.2f} +- {se[1]:.2f} "
                  f"(MVA {r + E_LAST:.2f}) | active {m[2]:.3f} +- {se[2]:.3f} (MVA {x * (r + E_LAST + 1):.3f}) | "
                  f"utilization {util:.3f} (MVA {x * MEAN_WORK / CAPACITY:.3f})")
