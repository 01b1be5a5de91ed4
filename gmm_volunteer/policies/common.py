"""Pieces the built-in schedulers share (paper 2.3)."""

from __future__ import annotations

import numpy as np
from numba import njit


from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.rng import STREAM_SCHEDULER, randint

from gmm_volunteer.model.actions import free_memory, free_storage, marginal_memory, start_download
from gmm_volunteer.model.params import DOWNLOAD, EMPTY, EXECUTION, MAX_BATCH_TABLE, MEMORY


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
    """idx-th eligible node for subtask j, idx < `n_candidates`: the online holders of
    its ready data, then the server (with several, D35, the servers 0..S-1, which hold
    every subtask's data)."""
    return idx - S.hd_n[j] if idx >= S.hd_n[j] else S.hd_list[j, idx]


@njit(cache=True, inline="always")
def n_candidates(S, P, j):
    """How many nodes are eligible for subtask j (`candidate`)."""
    return S.hd_n[j] + P.n_srv


@njit(cache=True, inline="always")
def candidate_index(S, P, j, v):
    """`candidate`'s index of node v, or -1 if v is not eligible for j now."""
    return S.hd_n[j] + v if v < P.n_srv else S.hd_pos[v, j]


@kernel
def pick_uniform_feasible(S, P, j, t, tries):
    """A node drawn uniformly among those that can run j now and have free memory for
    its marginal estimate; -1 if none. Rejection sampling first, then an exact scan; the
    result is uniform over the feasible set either way.

    The test, `free_memory(S, v) >= marginal_memory(S, P, v, j, t)` (model.actions), is
    written out on arrays bound once per call: numba counts references on each `S.x` /
    `P.x` read and on each array passed to a helper, and a placement tries up to `tries`
    nodes. Iterations 0..tries-1 are the random tries, the next n the exact scan. The
    candidates are the holders of j's data and every server (`candidate`)."""
    n = n_candidates(S, P, j)
    hd_list, rng = S.hd_list, S.rng
    alloc, committed, mem_est = S.alloc, S.nd_committed, P.mem_est
    mg_key, mg_id, mg_t = S.mg_key, S.mg_id, S.mg_t
    b_node, b_sub, b_phase, b_born, b_age, b_size = S.b_node, S.b_sub, S.b_phase, S.b_born, S.b_age, S.b_size
    n_sub, batching, holders, ns = P.n_sub, P.batching, S.hd_n[j], P.n_srv
    mask = mg_key.shape[0] - 1
    feasible = np.empty(0, np.int64)
    m = 0
    for it in range(tries + n):
        if it < tries:
            idx = randint(rng, STREAM_SCHEDULER, n)
        else:
            if it == tries:
                feasible = np.empty(n, np.int64)
            idx = it - tries
        v = idx - holders if idx >= holders else hd_list[j, idx]  # `candidate`
        # `new_batch_size`: the batch of (v, j, first phase) formed in step t, from the
        # merge table as `ops.batch_born_now` finds it
        phase = EXECUTION if v < ns else DOWNLOAD
        size = 0
        if batching:
            key = (np.int64(v) * n_sub + j) * 4 + phase
            x = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
            h = np.int64((x ^ (x >> np.uint64(32))) & np.uint64(mask))
            while mg_t[h] == t and mg_key[h] != key:
                h = (h + 1) & mask
            b = mg_id[h] if mg_t[h] == t else -1
            if (b >= 0 and b_node[b] == v and b_sub[b] == j and b_phase[b] == phase
                    and b_born[b] == t and b_age[b] == 0):
                size = b_size[b]
        # `ops.mem_estimate` of size + 1 and size
        if size + 1 <= MAX_BATCH_TABLE:
            m1 = mem_est[j, size + 1]
        else:
            top = mem_est[j, MAX_BATCH_TABLE]
            m1 = top + (top - mem_est[j, MAX_BATCH_TABLE - 1]) * (size + 1 - MAX_BATCH_TABLE)
        if size <= MAX_BATCH_TABLE:
            m0 = mem_est[j, size]
        else:
            top = mem_est[j, MAX_BATCH_TABLE]
            m0 = top + (top - mem_est[j, MAX_BATCH_TABLE - 1]) * (size - MAX_BATCH_TABLE)
        if alloc[v, MEMORY] - committed[v] >= m1 - m0:
            if it < tries:
                return v
            feasible[m] = v
            m += 1
    if m == 0:
        return -1
    return feasible[randint(rng, STREAM_SCHEDULER, m)]
