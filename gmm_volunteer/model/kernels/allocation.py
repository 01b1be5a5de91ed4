"""Allocations a_t: one ARMA per resource and online node (paper 2.2).

The histories of the online nodes are stored densely, resource by resource: resource r
owns rows ``P.al_yoff[r] ...`` (p_r + 1 of them) of ``al_y[slot row, node row]`` and
``P.al_eoff[r] ...`` (q_r + 1) of ``al_e``; node rows 0..S-1 are the dedicated
servers (S = ``P.n_srv``, D35) and S + k the user at position k of the online list.
All node rows share the ring phase: the value of step t sits in slot
``t mod (p_r + 1)``, one slot more than the lags read, so that the slot written is
never one being read. A step of resource r is then a loop over contiguous
node rows per lag, which the compiler vectorizes and which streams through memory. When
a user goes offline the last row moves into its place, as the online list does; under
``allocation.restart: freeze`` its history is parked per node and restored, rotated to
the new phase, when it returns.

A server's maximum allocation is state, ``S.srv_cap`` (server s's value of resource r
at s * N_RES + r), which the control plane changes when an autoscaler scales that server
(docs/model.md D17, D35); a user's is the parameter ``P.amax[c]`` of its class c
(``S.node_class``, D36).

Node class c (0 server, 1..C the user classes) has its own fraction mean and sd,
``P.al_mean[c]``, ``P.al_sd[c]`` (paper 2.2 allows different server parameters; config
``server.allocation``, ``users.allocation``, a class's ``allocation``); each server
has its own, ``P.sv_mean[s]``, ``P.sv_sd[s]`` (row 0 equal to the class row 0). The
servers' innovations come from ``STREAM_SERVER`` (server by server) and the users' from
``STREAM_ALLOCATION``, so the servers' paths are the same whatever the number of users
online, their capacity or the policies. A class or server whose sd is 0 for every
resource (``P.al_const[c]``, ``P.sv_const[s]``, e.g. a dedicated server by default)
draws nothing: its allocation is mean x maximum every step and its history rows are
left alone (unless another server draws: then the servers' rows all run, and the
constant ones ignore their draws).

Draw order and arithmetic are those of one scalar recursion per node and resource
(innovations: per stream, nodes in row order, resources inner), so the layout changes
speed, not values.
"""

import numpy as np
from numba import njit
from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.kernels.arma import yeo_johnson_inverse
from gmm_volunteer.model.params import N_RES
from gmm_volunteer.model.rng import STREAM_ALLOCATION, STREAM_SERVER, fill_normals, normal


@njit(cache=True, inline="always")
def node_row(S, P, v):
    """Row of node v's allocation history (v online, or a server)."""
    return v if v < P.n_srv else S.on_pos[v] + P.n_srv


@njit(cache=True, inline="always")
def _server_fraction(P, s, r, z):
    """`_fraction` with server s's own mean and sd (D35)."""
    frac = P.sv_mean[s, r] + P.sv_sd[s, r] * yeo_johnson_inverse(P.al_zm[r] + P.al_zsd[r] * z, P.al_lam[r])
    return min(max(frac, 0.0), 1.0)


@njit(cache=True, inline="always")
def _servers_constant(P):
    """Whether no server draws its allocation (each has sd 0)."""
    for s in range(P.n_srv):
        if not P.sv_const[s]:
            return False
    return True


@njit(cache=True, inline="always")
def _fraction(P, c, r, z):
    """Inverse Yeo-Johnson of an ARMA value, as a fraction of the maximum allocation of
    node class c (paper 2.2: rescaled by the node-specific mean and sd, clipped)."""
    frac = P.al_mean[c, r] + P.al_sd[c, r] * yeo_johnson_inverse(P.al_zm[r] + P.al_zsd[r] * z, P.al_lam[r])
    return min(max(frac, 0.0), 1.0)


@njit(cache=True, inline="always")
def _constant(P, c, r):
    """The fraction of a class that draws nothing (sd 0): its mean, clipped like a draw."""
    return min(max(P.al_mean[c, r], 0.0), 1.0)


@njit(cache=True, inline="always")
def _server_constant(P, s, r):
    """`_constant` of server s (D35)."""
    return min(max(P.sv_mean[s, r], 0.0), 1.0)


@njit(cache=True, inline="always")
def _users_constant(P):
    """Whether no user class draws its allocation (every one has sd 0)."""
    for c in range(1, P.n_classes + 1):
        if not P.al_const[c]:
            return False
    return True


@njit(cache=True, inline="always")
def _y_slot(P, r, t):
    return P.al_yoff[r] + t % (P.al_p[r] + 1)


@njit(cache=True, inline="always")
def _e_slot(P, r, t):
    return P.al_eoff[r] + t % (P.al_q[r] + 1)


@kernel
def _draw_row(S, P, row, v, t):
    """One ARMA step of every resource of one row at phase t, written to a_t of v."""
    al_y, al_e, st = S.al_y, S.al_e, S.rng
    cls = S.node_class[v]
    server = v < P.n_srv
    amax = S.srv_cap[v * N_RES:(v + 1) * N_RES] if server else P.amax[cls]
    if (P.sv_const[v] if server else P.al_const[cls]):
        for r in range(N_RES):
            S.alloc[v, r] = (_server_constant(P, v, r) if server else _constant(P, cls, r)) * amax[r]
        return
    stream = STREAM_SERVER if server else STREAM_ALLOCATION
    for r in range(N_RES):
        eps = P.al_sigma[r] * normal(st, stream)
        z = eps
        for i in range(P.al_p[r]):
            z += P.al_ar[r, i] * al_y[_y_slot(P, r, t - 1 - i), row]
        for j in range(P.al_q[r]):
            z += P.al_ma[r, j] * al_e[_e_slot(P, r, t - 1 - j), row]
        al_y[_y_slot(P, r, t), row] = z
        al_e[_e_slot(P, r, t), row] = eps
        S.alloc[v, r] = (_server_fraction(P, v, r, z) if server else _fraction(P, cls, r, z)) * amax[r]


@kernel
def allocation_restart(S, P, v, t):
    """Node v's allocation history starts afresh before step t, after a burn-in of
    `allocation.burn_in_steps` draws (docs/model.md).

    The draws of `_draw_row` at phases t - burn_in .. t - 1, written out with the arrays
    bound once (numba counts references on each `S.x` / `P.x` read in a loop, more than
    the arithmetic here costs) and the innovations drawn as one block (the same values,
    in the same order, as one `normal` per draw). Only the last draw's allocation
    remains, so only it is mapped to a fraction."""
    row = node_row(S, P, v)
    al_y, al_e = S.al_y, S.al_e
    al_y[:, row] = 0.0
    al_e[:, row] = 0.0
    nb = P.burn_in
    if nb <= 0:
        return
    cls = S.node_class[v]
    server = v < P.n_srv
    amax = S.srv_cap[v * N_RES:(v + 1) * N_RES] if server else P.amax[cls]
    alloc = S.alloc
    if (P.sv_const[v] if server else P.al_const[cls]):
        for r in range(N_RES):
            alloc[v, r] = (_server_constant(P, v, r) if server else _constant(P, cls, r)) * amax[r]
        return
    stream = STREAM_SERVER if server else STREAM_ALLOCATION
    raw = np.empty(nb * N_RES)
    fill_normals(S.rng, stream, raw, nb * N_RES)
    al_p, al_q, al_ar, al_ma, al_sigma = P.al_p, P.al_q, P.al_ar, P.al_ma, P.al_sigma
    al_yoff, al_eoff = P.al_yoff, P.al_eoff
    for b in range(nb):
        tb = t - nb + b
        for r in range(N_RES):
            py, qe = al_p[r] + 1, al_q[r] + 1
            eps = al_sigma[r] * raw[b * N_RES + r]
            z = eps
            for i in range(al_p[r]):
                z += al_ar[r, i] * al_y[al_yoff[r] + (tb - 1 - i) % py, row]
            for j in range(al_q[r]):
                z += al_ma[r, j] * al_e[al_eoff[r] + (tb - 1 - j) % qe, row]
            al_y[al_yoff[r] + tb % py, row] = z
            al_e[al_eoff[r] + tb % qe, row] = eps
    tl = t - 1
    for r in range(N_RES):
        z = al_y[al_yoff[r] + tl % (al_p[r] + 1), row]
        alloc[v, r] = (_server_fraction(P, v, r, z) if server else _fraction(P, cls, r, z)) * amax[r]


@kernel
def allocation_leave(S, P, v, t):
    """User v goes offline in step t (before it leaves the online list): park its history
    when histories freeze, then move the last row into its place."""
    row = node_row(S, P, v)
    last = S.n_on[0] - 1 + P.n_srv  # row of the user at the end of the online list
    al_y, al_e = S.al_y, S.al_e
    if P.restart == 1:  # parked by lag: lag 0 is step t - 1
        for r in range(N_RES):
            for lag in range(P.al_p[r] + 1):
                S.al_park_y[v, P.al_yoff[r] + lag] = al_y[_y_slot(P, r, t - 1 - lag), row]
            for lag in range(P.al_q[r] + 1):
                S.al_park_e[v, P.al_eoff[r] + lag] = al_e[_e_slot(P, r, t - 1 - lag), row]
    if row != last:
        al_y[:, row] = al_y[:, last]
        al_e[:, row] = al_e[:, last]


@kernel
def allocation_enter(S, P, v, t):
    """User v came online in step t (it is already on the online list)."""
    if P.restart == 0:
        allocation_restart(S, P, v, t)
        return
    row = node_row(S, P, v)
    for r in range(N_RES):
        for lag in range(P.al_p[r] + 1):
            S.al_y[_y_slot(P, r, t - 1 - lag), row] = S.al_park_y[v, P.al_yoff[r] + lag]
        for lag in range(P.al_q[r] + 1):
            S.al_e[_e_slot(P, r, t - 1 - lag), row] = S.al_park_e[v, P.al_eoff[r] + lag]


@kernel
def step_allocations(S, P, t):
    """Factor a_t for the servers and every online user (paper 2.2)."""
    ns = P.n_srv
    n = S.n_on[0] + ns
    al_y, al_e, raw = S.al_y, S.al_e, S.al_normals
    # Rows lo..hi-1 run the ARMA: the servers' rows 0..S-1 unless every server is
    # constant, the users' rows S..n-1 unless every user class is (a constant class or
    # server among drawing ones draws too, and ignores its draws).
    lo = ns if _servers_constant(P) else 0
    hi = ns if _users_constant(P) else n
    # Innovations in the order of one scalar recursion per node (row-major: node, then
    # resource), servers and users each from their own stream, drawn as blocks;
    # resource r's innovation of row k is sigma_r * raw[k * N_RES + r].
    if lo == 0:
        fill_normals(S.rng, STREAM_SERVER, raw, ns * N_RES)
    if hi > ns:
        fill_normals(S.rng, STREAM_ALLOCATION, raw[ns * N_RES:], (n - ns) * N_RES)
    for r in range(N_RES):
        sigma = P.al_sigma[r]
        yw, ew = al_y[_y_slot(P, r, t)], al_e[_e_slot(P, r, t)]
        for row in range(lo, hi):
            ew[row] = sigma * raw[row * N_RES + r]
            yw[row] = ew[row]
        for i in range(P.al_p[r]):
            c, yl = P.al_ar[r, i], al_y[_y_slot(P, r, t - 1 - i)]
            for row in range(lo, hi):
                yw[row] += c * yl[row]
        for j in range(P.al_q[r]):
            c, el = P.al_ma[r, j], al_e[_e_slot(P, r, t - 1 - j)]
            for row in range(lo, hi):
                yw[row] += c * el[row]
    # a_t: node by node, so that each node's allocation row is written once.
    # A server's maximum is state (`S.srv_cap`, set by the control plane: D17); the
    # users' stays the parameter P.amax[c] of their class c.
    alloc, on_list, amax, cap = S.alloc, S.on_list, P.amax, S.srv_cap
    slot = np.empty(N_RES, np.int64)
    for r in range(N_RES):
        slot[r] = _y_slot(P, r, t)
        for s in range(ns):
            if P.sv_const[s]:
                alloc[s, r] = _server_constant(P, s, r) * cap[s * N_RES + r]
            else:
                alloc[s, r] = _server_fraction(P, s, r, al_y[slot[r], s]) * cap[s * N_RES + r]
    # The users: a constant class's allocation is mean x maximum (all of them when no
    # class draws, hi == ns); `_fraction` written out with the parameter arrays bound
    # once (see allocation_restart)
    al_mean, al_sd, al_zm, al_zsd, al_lam = P.al_mean, P.al_sd, P.al_zm, P.al_zsd, P.al_lam
    al_const, node_class = P.al_const, S.node_class
    for row in range(ns, n):
        v = on_list[row - ns]
        c = node_class[v]
        if al_const[c]:
            for r in range(N_RES):
                alloc[v, r] = _constant(P, c, r) * amax[c, r]
            continue
        for r in range(N_RES):
            frac = al_mean[c, r] + al_sd[c, r] * yeo_johnson_inverse(
                al_zm[r] + al_zsd[r] * al_y[slot[r], row], al_lam[r])
            alloc[v, r] = min(max(frac, 0.0), 1.0) * amax[c, r]
