"""Pieces the built-in schedulers share (paper 2.3)."""

from __future__ import annotations

import numpy as np
from numba import njit


from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.rng import STREAM_SCHEDULER, randint

from gmm_volunteer.model.actions import free_memory, free_storage, marginal_memory, start_download
from gmm_volunteer.model.params import EMPTY


@kernel
def schedule_downloads(S, P, t, max_downloads, n_j=-1):
    """An online user node with fewer than `max_downloads` downloads in progress starts
    one missing subtask-data download, chosen uniformly among those whose size fits its
    free storage and whose download-memory estimate m^x fits its free memory (the
    server holds all data a priori). docs/model.md explains the default of 1.

    Candidates are subtasks 0..n_j-1: by default (-1) the requested ones (P.n_req); a
    scheduler that serves slots with model variants passes P.n_sub (D24). The skip
    bound below holds for any subset: it bounds the lightest missing subtask of all."""
    n_j = P.n_req if n_j < 0 else n_j
    heaviest = P.sub_heaviest
    total = heaviest[P.n_sub]
    slack = 1e-6 * total  # rounding of the running reserved-storage sums
    for k in range(S.n_on[0]):
        v = S.on_list[k]
        if S.rd_nready[v] == P.n_sub or S.nd_ndl[v] >= max_downloads:
            continue
        fs = free_storage(S, v)
        if fs < P.min_data_mb:
            continue
        # Most nodes miss only data too large for their free storage. The m subtasks
        # v misses (neither ready nor downloading) weigh total - reserved MB, so the
        # lightest weighs at least that minus the m - 1 heaviest sizes: if even this
        # bound does not fit, skip the node without reading its readiness row.
        m = P.n_sub - S.rd_nready[v] - S.nd_ndl[v]
        if m >= 1 and fs < total - S.rd_reserved[v] - heaviest[m - 1] - slack:
            continue
        fm = free_memory(S, v)
        # Count the fitting subtasks without branching; find the drawn one only if any.
        n = 0
        for j in range(n_j):
            n += (S.rd_state[v, j] == EMPTY) & (P.sub_data_mb[j] <= fs) & (P.sub_dl_mem[j] <= fm)
        if n == 0:
            continue
        r = randint(S.rng, STREAM_SCHEDULER, n)
        for j in range(n_j):
            if S.rd_state[v, j] == EMPTY and P.sub_data_mb[j] <= fs and P.sub_dl_mem[j] <= fm:
                if r == 0:
                    start_download(S, P, v, j, t)
                    break
                r -= 1


@njit(cache=True, inline="always")
def candidate(S, j, idx):
    """idx-th eligible node for subtask j: online holders of ready data, then the server."""
    return 0 if idx == S.hd_n[j] else S.hd_list[j, idx]


@kernel
def pick_uniform_feasible(S, P, j, t, tries):
    """A node drawn uniformly among those that can run j now and have free memory for
    its marginal estimate; -1 if none. Rejection sampling first, then an exact scan; the
    result is uniform over the feasible set either way."""
    n = S.hd_n[j] + 1
    for _ in range(tries):
        v = candidate(S, j, randint(S.rng, STREAM_SCHEDULER, n))
        if free_memory(S, v) >= marginal_memory(S, P, v, j, t):
            return v
    feasible = np.empty(n, np.int64)
    m = 0
    for idx in range(n):
        v = candidate(S, j, idx)
        if free_memory(S, v) >= marginal_memory(S, P, v, j, t):
            feasible[m] = v
            m += 1
    if m == 0:
        return -1
    return feasible[randint(S.rng, STREAM_SCHEDULER, m)]
