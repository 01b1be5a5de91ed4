"""Default executor policy (paper 2.3, "Executor policy").

Memory and storage are hard limits; CPU and bandwidth were already shared out in the
consumption factor (slow-down), so only memory and storage can overflow here. Per node:
on memory overflow pause the node's running data downloads (one shared channel); on
storage overflow abort the largest downloads, then evict the largest ready data and abort
executions that needed it; if memory still overflows abort batches in the order
download -> execution -> upload, heaviest normalized load first. Paused downloads resume
once the node runs no batch and its memory consumption plus the download's memory
estimate fits the allocation (docs/model.md).
"""

from __future__ import annotations

from numba import njit


from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import (
    EV_ABORT,
    abort_batch,
    download_abort,
    evict_ready,
    pause_download,
    resume_download,
)
from gmm_volunteer.model.params import DOWNLOAD, EXECUTION, LOADING, MEMORY, N_CRES, PAUSED, READY, STORAGE, UPLOAD
from gmm_volunteer.policies.base import Executor


@njit(cache=True, inline="always")
def node_consumption(S, v, r, t):
    return S.nd_cons[v, r] if S.nd_tstamp[v] == t else 0.0


@njit(cache=True, inline="always")
def _normalized_load(S, b, v):
    load = 0.0
    for r in range(N_CRES):
        a = S.alloc[v, r]
        if a > 0.0:
            load += S.b_cons[b, r] / a
    return load


@kernel
def _abort_heaviest(S, P, v, phase, t):
    """Abort the batch of `phase` on v with the largest normalized load; its memory."""
    best, best_load = -1, -1.0
    b = S.nd_bhead[v]
    while b >= 0:
        if S.b_phase[b] == phase:
            load = _normalized_load(S, b, v)
            if load > best_load:
                best, best_load = b, load
        b = S.b_nnext[b]
    if best < 0:
        return -1.0
    mem = S.b_cons[best, MEMORY]
    abort_batch(S, P, best, EV_ABORT, t)
    return mem


@kernel
def _free_storage(S, P, v, t):
    """Abort the largest downloads, then evict the largest ready data; returns memory freed."""
    freed = 0.0
    while S.rd_used[v] > S.alloc[v, STORAGE] + 1e-9:
        best, best_mb = -1, -1.0
        for j in range(P.n_sub):
            if S.rd_dl[v, j] >= 0 and S.rd_mb[v, j] > best_mb:
                best, best_mb = j, S.rd_mb[v, j]
        if best >= 0:
            d = S.rd_dl[v, best]
            if S.rd_state[v, best] == LOADING:
                freed += S.dl_cons[d, MEMORY]
            download_abort(S, P, d)
            continue
        for j in range(P.n_sub):
            if S.rd_state[v, j] == READY and S.rd_mb[v, j] > best_mb:
                best, best_mb = j, S.rd_mb[v, j]
        if best < 0:
            break
        evict_ready(S, P, v, best)
        # Executions whose subtask data is gone cannot go on.
        b = S.nd_bhead[v]
        while b >= 0:
            nb = S.b_nnext[b]
            if S.b_sub[b] == best:
                freed += S.b_cons[b, MEMORY]
                abort_batch(S, P, b, EV_ABORT, t)
            b = nb
    return freed


@kernel
def enforce_node(S, P, v, t):
    mem = node_consumption(S, v, MEMORY, t)
    cap = S.alloc[v, MEMORY]
    if mem > cap:
        for j in range(P.n_sub):
            d = S.rd_dl[v, j]
            if d >= 0 and S.rd_state[v, j] == LOADING:
                mem -= S.dl_cons[d, MEMORY]  # before pausing, which zeroes it
                pause_download(S, v, j)
    if v >= P.n_srv and S.rd_used[v] > S.alloc[v, STORAGE] + 1e-9:
        mem -= _free_storage(S, P, v, t)
    for phase in (DOWNLOAD, EXECUTION, UPLOAD):
        while mem > cap:
            freed = _abort_heaviest(S, P, v, phase, t)
            if freed < 0.0:
                break
            mem -= freed
    S.nd_cons[v, MEMORY] = mem if S.nd_tstamp[v] == t else 0.0
    return mem


@kernel
def resume_paused(S, P, t):
    """Resume paused downloads on nodes that run no batch, if their memory estimate fits."""
    if S.n_paused[0] == 0:  # the common case: no download is paused anywhere
        return
    for k in range(S.n_dl[0]):
        d = S.dl_list[k]
        v, j = S.dl_node[d], S.dl_sub[d]
        if S.rd_state[v, j] != PAUSED or not S.online[v] or S.nd_bhead[v] >= 0:
            continue
        if S.nd_tstamp[v] != t:  # nothing ran on v this step: start its tally at zero
            S.nd_tstamp[v] = t
            S.nd_cons[v, :] = 0.0
        mem = S.nd_cons[v, MEMORY]
        if mem + P.sub_dl_mem[j] <= S.alloc[v, MEMORY]:
            resume_download(S, v, j)
            # Count the estimate so that the node's other paused downloads see it.
            S.nd_cons[v, MEMORY] = mem + P.sub_dl_mem[j]


@kernel
def executor_step(S, P, t, args):
    for s in range(P.n_srv):  # the dedicated servers (D35), then the online users
        enforce_node(S, P, s, t)
    on_list, nd_cons, tstamp, alloc, rd_used = S.on_list, S.nd_cons, S.nd_tstamp, S.alloc, S.rd_used
    for k in range(S.n_on[0]):
        v = on_list[k]
        # Most nodes are within limits: test cheaply before the full treatment.
        mem = nd_cons[v, MEMORY] if tstamp[v] == t else 0.0
        if mem > alloc[v, MEMORY] or rd_used[v] > alloc[v, STORAGE] + 1e-9:
            enforce_node(S, P, v, t)
    resume_paused(S, P, t)


class DefaultExecutor(Executor):
    """Hard memory/storage limits, soft CPU/bandwidth (paper 2.3), on every server and
    online user alike (several servers: each enforces its own, D35)."""

    name = "default"
    several_servers = True
    act_kernel = executor_step
