"""Allocations (kernels/allocation.py) against a scalar reference recursion (paper 2.2).

The kernel keeps the histories of all online nodes in shared-phase slot rows and runs
each resource's ARMA step as one loop over nodes. The reference here is the plain
per-node recursion z_t = eps_t + sum_i ar_i z_{t-1-i} + sum_j ma_j eps_{t-1-j} with its
own history per node, fed with the innovations the kernel drew (they stay in
`al_normals` after the step, row-major by node row and resource). Every value must agree
exactly: the two do the same arithmetic in the same order. Nodes are tracked across
other users leaving (their rows move) and, with `allocation.restart: freeze`, across
their own offline periods (their history is parked and restored).
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_support import make_config
from gmm_volunteer.engine import Simulation
from gmm_volunteer.kernels.arma import yeo_johnson_inverse
from gmm_volunteer.params import N_RES


def _row(sim, v):
    return 0 if v == 0 else int(sim.arrays.on_pos[v]) + 1


def _history(sim, v, t):
    """(z lags, eps lags) of node v before step t, most recent first, per resource."""
    S, P = sim.arrays, sim.params
    row = _row(sim, v)
    ys, es = [], []
    for r in range(N_RES):
        p, q = int(P.al_p[r]), int(P.al_q[r])
        ys.append([S.al_y[P.al_yoff[r] + (t - 1 - i) % (p + 1), row] for i in range(p)])
        es.append([S.al_e[P.al_eoff[r] + (t - 1 - j) % (q + 1), row] for j in range(q)])
    return ys, es


def _reference_step(sim, v, hist):
    """One step of node v's reference recursion; returns its allocation a_t."""
    S, P = sim.arrays, sim.params
    row = _row(sim, v)
    ys, es = hist
    out = np.empty(N_RES)
    for r in range(N_RES):
        eps = P.al_sigma[r] * S.al_normals[row * N_RES + r]
        z = eps
        for i, y in enumerate(ys[r]):
            z += P.al_ar[r, i] * y
        for j, e in enumerate(es[r]):
            z += P.al_ma[r, j] * e
        ys[r] = ([z] + ys[r])[: len(ys[r])]
        es[r] = ([eps] + es[r])[: len(es[r])]
        frac = P.al_mean[r] + P.al_sd[r] * yeo_johnson_inverse(P.al_zm[r] + P.al_zsd[r] * z, P.al_lam[r])
        out[r] = min(max(frac, 0.0), 1.0) * P.amax[0 if v == 0 else 1, r]
    return out


@pytest.mark.parametrize("restart", ["burn_in", "freeze"])
def test_allocations_equal_the_scalar_recursion(synthetic_model, restart):
    cfg = make_config(synthetic_model, users=300, steps=1500, seed=4,
                      allocation={"restart": restart})
    sim = Simulation(cfg)
    for _ in range(200):
        sim.step()
    t0 = sim.t
    tracked = [0] + sim.arrays.on_list[: sim.arrays.n_on[0]].tolist()
    hist = {v: _history(sim, v, t0) for v in tracked}
    moved = returned = 0
    rows_before = {v: _row(sim, v) for v in tracked}
    while sim.t < cfg.steps:
        was_online = {v: bool(sim.arrays.online[v]) for v in tracked}
        sim.step()
        for v in list(hist):
            if not sim.arrays.online[v]:
                if restart == "burn_in":
                    del hist[v]  # its history restarts with a burn-in: stop tracking it
                continue
            returned += not was_online[v]
            expect = _reference_step(sim, v, hist[v])
            np.testing.assert_array_equal(sim.arrays.alloc[v], expect, err_msg=f"node {v} step {sim.t - 1}")
            moved += _row(sim, v) != rows_before.get(v, -1)
            rows_before[v] = _row(sim, v)
    # The comparison covered rows that moved and, when histories freeze, returns.
    assert moved > 0 and 0 in hist
    if restart == "freeze":
        assert returned > 0
