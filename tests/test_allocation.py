"""Allocations (kernels/allocation.py) against a scalar reference recursion (paper 2.2).

The kernel keeps the histories of all online nodes in shared-phase slot rows and runs
each resource's ARMA step as one loop over nodes. The reference here is the plain
per-node recursion z_t = eps_t + sum_i ar_i z_{t-1-i} + sum_j ma_j eps_{t-1-j} with its
own history per node, fed with the innovations the kernel drew (they stay in
`al_normals` after the step, row-major by node row and resource). Every value must agree
exactly: the two do the same arithmetic in the same order. Nodes are tracked across
other users leaving (their rows move) and, with `allocation.restart: freeze`, across
their own offline periods (their history is parked and restored).

Node classes (paper 2.2: node-specific mean and sd, "different server parameters"):
the server's path comes from its own stream and is the same for every user count, user
capacity and scheduler on one seed; a class with sd 0 everywhere (the dedicated server
by default) is constant at its maximum and draws nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_support import make_config
from gmm_volunteer.model import rng
from gmm_volunteer.io.bundlefiles import load_bundle
from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.run.engine import Simulation, simulate
from gmm_volunteer.model.kernels.arma import yeo_johnson_inverse
from gmm_volunteer.model.params import CPU, N_RES, build_params


def alloc_config(model, *, server_allocation=None, user_allocation=None, **kw):
    """`make_config` with the node classes' allocation laws set (None: the default)."""
    data = make_config(model, **kw).model_dump(mode="json")
    if server_allocation is not None:
        data["server"]["allocation"] = server_allocation
    if user_allocation is not None:
        data["users"]["allocation"] = user_allocation
    return config_from_dict(data)


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
        c = 0 if v == 0 else 1
        frac = P.al_mean[c, r] + P.al_sd[c, r] * yeo_johnson_inverse(P.al_zm[r] + P.al_zsd[r] * z, P.al_lam[r])
        out[r] = min(max(frac, 0.0), 1.0) * P.amax[c, r]
    return out


@pytest.mark.parametrize("restart", ["burn_in", "freeze"])
def test_allocations_equal_the_scalar_recursion(synthetic_model, restart):
    # The server draws too (fitted, not the constant default), so that row 0 is checked.
    cfg = alloc_config(synthetic_model, users=300, steps=1500, seed=4, server_allocation="fitted",
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


def test_allocation_parameters_per_node_class(synthetic_model):
    bundle = load_bundle(synthetic_model)
    fitted_mean = [bundle.allocation[r].mean for r in ("band_in", "band_out", "cpu", "memory", "storage")]
    fitted_sd = [bundle.allocation[r].sd for r in ("band_in", "band_out", "cpu", "memory", "storage")]
    P = build_params(make_config(synthetic_model), bundle)
    assert P.al_mean.shape == P.al_sd.shape == (2, N_RES)
    assert P.al_mean[0].tolist() == [1.0] * N_RES and P.al_sd[0].tolist() == [0.0] * N_RES
    assert P.al_mean[1].tolist() == fitted_mean and P.al_sd[1].tolist() == fitted_sd
    assert P.al_const.tolist() == [1, 0]
    cfg = alloc_config(synthetic_model, server_allocation={"base": "fitted", "mean": {"cpu": 0.5}},
                       user_allocation={"sd": {"memory": 0.0}})
    P = build_params(cfg, bundle)
    assert P.al_mean[0].tolist() == fitted_mean[:CPU] + [0.5] + fitted_mean[CPU + 1:]
    assert P.al_sd[0].tolist() == fitted_sd
    assert P.al_sd[1].tolist() == fitted_sd[:3] + [0.0] + fitted_sd[4:]
    assert P.al_const.tolist() == [0, 0]


def test_server_allocation_is_the_same_for_every_population_and_policy(synthetic_model):
    """On one seed the server's allocation series does not depend on the user count, the
    users' capacity and allocation law, the restart rule or the scheduler: its
    innovations come from a stream of its own (docs/model.md, D6)."""
    common = dict(steps=300, seed=7, server=10.0, server_allocation={"base": "fitted"})
    variants = [
        dict(users=30, scheduler="uniform"),
        dict(users=150, scheduler="centralized", user_capacity=2.0),
        dict(users=80, scheduler="affinity", allocation={"restart": "freeze"}),
        dict(users=80, scheduler="uniform", user_allocation="dedicated"),
    ]
    runs = [simulate(alloc_config(synthetic_model, **common, **v), progress=False) for v in variants]
    ref = runs[0].server_allocation
    # It varies (so that equality means something): the fitted CPU fraction takes many values.
    assert len(np.unique(ref[:, CPU])) > 50
    for v, rec in zip(variants[1:], runs[1:]):
        np.testing.assert_array_equal(rec.server_allocation, ref, err_msg=str(v))
    # The runs themselves differ: other populations are online.
    assert not np.array_equal(runs[0].online_users, runs[1].online_users)
    # Another seed gives another path.
    other = simulate(alloc_config(synthetic_model, **{**common, "seed": 8}, **variants[0]), progress=False)
    assert not np.array_equal(other.server_allocation, ref)


def _stream_start(seed, k):
    """State of kernel stream k before any draw, spawned as `engine.Simulation` does."""
    ss = rng.seed_sequence(seed)
    rng.streams(ss)
    return rng.stream_states(ss)[k]


def test_dedicated_server_offers_its_maximum_every_step(synthetic_model):
    cfg = make_config(synthetic_model, users=60, steps=250, seed=3, server=7.5)  # default: dedicated
    sim = Simulation(cfg)
    rec = sim.run(progress=False)
    expect = 7.5 * cfg.base_profile.as_array()
    np.testing.assert_array_equal(rec.server_allocation, np.broadcast_to(expect, rec.server_allocation.shape))
    # It drew nothing: its stream is where it started.
    assert sim.arrays.rng[rng.STREAM_SERVER] == _stream_start(3, rng.STREAM_SERVER)
    assert sim.arrays.rng[rng.STREAM_ALLOCATION] != _stream_start(3, rng.STREAM_ALLOCATION)


def test_dedicated_users_offer_their_maximum_while_online(synthetic_model):
    cfg = alloc_config(synthetic_model, users=60, steps=250, seed=3, user_capacity=2.0,
                       user_allocation="dedicated", server_allocation="fitted")
    sim = Simulation(cfg)
    expect = 2.0 * cfg.base_profile.as_array()
    seen = 0
    while sim.t < cfg.steps:
        sim.step()
        S = sim.arrays
        on = S.online[1:] == 1
        np.testing.assert_array_equal(S.alloc[1:][on], np.broadcast_to(expect, (on.sum(), N_RES)))
        assert not S.alloc[1:][~on].any()
        seen += on.sum()
    assert seen > 500
    assert sim.arrays.rng[rng.STREAM_ALLOCATION] == _stream_start(3, rng.STREAM_ALLOCATION)
    assert sim.arrays.rng[rng.STREAM_SERVER] != _stream_start(3, rng.STREAM_SERVER)


def test_per_resource_overrides_reach_the_kernel(synthetic_model):
    """A resource with sd 0 is constant at mean x maximum; the others keep varying."""
    cfg = alloc_config(synthetic_model, users=60, steps=250, seed=5, server=4.0,
                       server_allocation={"sd": {"cpu": 0.2}, "mean": {"cpu": 0.5}},
                       user_allocation={"mean": {"cpu": 0.25}, "sd": {"cpu": 0.0}})
    sim = Simulation(cfg)
    amax_user = cfg.base_profile.as_array()
    user_other = []
    while sim.t < cfg.steps:
        sim.step()
        S = sim.arrays
        on = np.flatnonzero(S.online[1:] == 1) + 1
        assert (S.alloc[on, CPU] == 0.25 * amax_user[CPU]).all()
        user_other.append(S.alloc[on][:, [0, 1, 3, 4]])
    rec = sim.record()
    server = rec.server_allocation
    # Dedicated base: every resource but CPU is the maximum; CPU draws around half of it.
    np.testing.assert_array_equal(np.delete(server, CPU, axis=1),
                                  np.broadcast_to(np.delete(4.0 * amax_user, CPU), (cfg.steps, N_RES - 1)))
    assert len(np.unique(server[:, CPU])) > 50
    assert len(np.unique(np.concatenate(user_other), axis=0)) > 50

