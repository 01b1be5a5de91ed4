"""Allocations a_t: one ARMA per resource and online node (paper 2.2).

The histories of the online nodes are stored densely, resource by resource:
``al_y[r, lag slot, row]`` with row 0 the server and row 1 + k the user at position k of
the online list. A step then runs each resource's recursion as a loop over contiguous
rows (which the compiler vectorizes, and which streams through memory instead of
visiting one scattered record per node). Every row shares the ring phase ``t``: the
value drawn in step t sits in slot ``t & (H - 1)``. When a user goes offline the last
row moves into its place, as the online list does; under ``allocation.restart: freeze``
its history is parked per node and restored, rotated to the new phase, when it returns.

Draw order and arithmetic are those of one scalar recursion per node and resource
(innovations: server first, then online users in list order, resources inner), so the
layout changes speed, not values.
"""

import numpy as np
from numba import njit

from gmm_volunteer.kernels.arma import yeo_johnson_inverse
from gmm_volunteer.params import N_RES
from gmm_volunteer.rng import STREAM_ALLOCATION, fill_normals, normal


@njit(cache=True, inline="always")
def node_row(S, v):
    """Row of node v's allocation history (v online, or the server)."""
    return 0 if v == 0 else S.on_pos[v] + 1


@njit(cache=True, inline="always")
def _fraction(P, r, z):
    """Inverse Yeo-Johnson of an ARMA value, as a fraction of the maximum allocation."""
    frac = P.al_mean[r] + P.al_sd[r] * yeo_johnson_inverse(P.al_zm[r] + P.al_zsd[r] * z, P.al_lam[r])
    return min(max(frac, 0.0), 1.0)


@njit(cache=True)
def _draw_row(S, P, row, v, t):
    """One ARMA step of every resource of one row at phase t, written to a_t of v."""
    al_y, al_e, st = S.al_y, S.al_e, S.rng
    mask = al_y.shape[1] - 1
    cls = 0 if v == 0 else 1
    for r in range(N_RES):
        eps = P.al_sigma[r] * normal(st, STREAM_ALLOCATION)
        z = eps
        for i in range(P.al_p[r]):
            z += P.al_ar[r, i] * al_y[r, (t - 1 - i) & mask, row]
        for j in range(P.al_q[r]):
            z += P.al_ma[r, j] * al_e[r, (t - 1 - j) & mask, row]
        al_y[r, t & mask, row] = z
        al_e[r, t & mask, row] = eps
        S.alloc[v, r] = _fraction(P, r, z) * P.amax[cls, r]


@njit(cache=True)
def allocation_restart(S, P, v, t):
    """Node v's allocation history starts afresh before step t, after a burn-in of
    `allocation.burn_in_steps` draws (docs/model.md)."""
    row = node_row(S, v)
    S.al_y[:, :, row] = 0.0
    S.al_e[:, :, row] = 0.0
    for b in range(P.burn_in):
        _draw_row(S, P, row, v, t - P.burn_in + b)


@njit(cache=True)
def allocation_leave(S, P, v, t):
    """User v goes offline in step t (before it leaves the online list): park its history
    when histories freeze, then move the last row into its place."""
    row = node_row(S, v)
    last = S.n_on[0]  # row of the user at the end of the online list
    al_y, al_e = S.al_y, S.al_e
    H = al_y.shape[1]
    if P.restart == 1:
        for r in range(N_RES):
            for lag in range(H):
                slot = (t - 1 - lag) & (H - 1)
                S.al_park_y[v, r, lag] = al_y[r, slot, row]
                S.al_park_e[v, r, lag] = al_e[r, slot, row]
    if row != last:
        for r in range(N_RES):
            for slot in range(H):
                al_y[r, slot, row] = al_y[r, slot, last]
                al_e[r, slot, row] = al_e[r, slot, last]


@njit(cache=True)
def allocation_enter(S, P, v, t):
    """User v came online in step t (it is already on the online list)."""
    if P.restart == 0:
        allocation_restart(S, P, v, t)
        return
    row = node_row(S, v)
    H = S.al_y.shape[1]
    for r in range(N_RES):
        for lag in range(H):
            slot = (t - 1 - lag) & (H - 1)
            S.al_y[r, slot, row] = S.al_park_y[v, r, lag]
            S.al_e[r, slot, row] = S.al_park_e[v, r, lag]


@njit(cache=True)
def step_allocations(S, P, t):
    """Factor a_t for the server and every online user (paper 2.2)."""
    n = S.n_on[0] + 1
    al_y, al_e, eps, raw = S.al_y, S.al_e, S.al_eps, S.al_normals
    mask = al_y.shape[1] - 1
    w = t & mask
    # Innovations in the order of one scalar recursion per node (row-major: node, then
    # resource), drawn as one block.
    fill_normals(S.rng, STREAM_ALLOCATION, raw, n * N_RES)
    for r in range(N_RES):
        sigma, er = P.al_sigma[r], eps[r]
        for row in range(n):
            er[row] = sigma * raw[row * N_RES + r]
    for r in range(N_RES):
        y, e, er = al_y[r], al_e[r], eps[r]
        yw, ew = y[w], e[w]
        for row in range(n):
            yw[row] = er[row]
        for i in range(P.al_p[r]):
            c, yl = P.al_ar[r, i], y[(w - 1 - i) & mask]
            for row in range(n):
                yw[row] += c * yl[row]
        for j in range(P.al_q[r]):
            c, el = P.al_ma[r, j], e[(w - 1 - j) & mask]
            for row in range(n):
                yw[row] += c * el[row]
        for row in range(n):
            ew[row] = er[row]
    alloc, on_list, amax = S.alloc, S.on_list, P.amax
    for r in range(N_RES):
        yw = al_y[r, w]
        alloc[0, r] = _fraction(P, r, yw[0]) * amax[0, r]
        top = amax[1, r]
        for row in range(1, n):
            alloc[on_list[row - 1], r] = _fraction(P, r, yw[row]) * top
