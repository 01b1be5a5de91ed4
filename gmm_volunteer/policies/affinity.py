"""Affinity-based scheduler (paper 2.3): co-locate same-subtask executions to batch them."""

from __future__ import annotations

import numpy as np
from numba import njit

from gmm_volunteer.rng import STREAM_SCHEDULER, permutation, randint, uniform

from gmm_volunteer.actions import (
    assign,
    cancel_obsolete,
    finish_ready_requests,
    free_memory,
    marginal_memory,
    pending_requests_fifo,
)
from gmm_volunteer.policies.base import KernelPolicy
from gmm_volunteer.policies.common import candidate, schedule_downloads
from gmm_volunteer.policies.registry import register_scheduler


@njit(cache=True)
def _fill(S, P, v, j, t, pair_user, pair_slot, start, end):
    """Assign pairs[start:end] to v while its free memory covers the marginal estimate."""
    while start < end and free_memory(S, v) >= marginal_memory(S, P, v, j, t):
        assign(S, P, pair_user[start], pair_slot[start], v, t)
        start += 1
    return start


@njit(cache=True)
def affinity_step(S, P, t, max_downloads):
    schedule_downloads(S, P, t, max_downloads)
    cancel_obsolete(S, P, t)
    finish_ready_requests(S, P, t)
    # Unplaced (user, slot) pairs grouped by subtask j (counting sort).
    users = pending_requests_fifo(S)
    count = np.zeros(P.n_sub + 1, np.int64)
    for i in users:
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] < 0:
                count[P.task_sub[k, p] + 1] += 1
    total = count.sum()
    if total == 0:
        return
    offs = np.cumsum(count)
    pair_user = np.empty(total, np.int64)
    pair_slot = np.empty(total, np.int64)
    fill = offs[:-1].copy()
    for i in users:
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] < 0:
                j = P.task_sub[k, p]
                pair_user[fill[j]] = i
                pair_slot[fill[j]] = p
                fill[j] += 1
    for j in permutation(S.rng, STREAM_SCHEDULER, P.n_sub):
        start, end = offs[j], offs[j + 1]
        if start == end:
            continue
        # Users requiring j in random order.
        perm = permutation(S.rng, STREAM_SCHEDULER, end - start)
        pu = pair_user[start:end][perm].copy()
        ps = pair_slot[start:end][perm].copy()
        n_pairs = end - start
        done = 0
        # Eligible nodes running j already, most executions of j first (random ties).
        n_cand = S.hd_n[j] + 1
        busy = np.empty(n_cand, np.int64)
        key = np.empty(n_cand, np.float64)
        idle = np.empty(n_cand, np.int64)
        nb = 0
        ni = 0
        for idx in range(n_cand):
            v = candidate(S, j, idx)
            c = S.nd_jcount[v, j]
            if c > 0:
                busy[nb] = v
                key[nb] = -c - uniform(S.rng, STREAM_SCHEDULER) * 0.5
                nb += 1
            else:
                idle[ni] = v
                ni += 1
        order = np.argsort(key[:nb])
        for o in order:
            done = _fill(S, P, busy[o], j, t, pu, ps, done, n_pairs)
            if done == n_pairs:
                break
        # Then the others, in random order (partial Fisher-Yates).
        r = 0
        while done < n_pairs and r < ni:
            s = r + randint(S.rng, STREAM_SCHEDULER, ni - r)
            idle[r], idle[s] = idle[s], idle[r]
            done = _fill(S, P, idle[r], j, t, pu, ps, done, n_pairs)
            r += 1


@register_scheduler("affinity")
class Affinity(KernelPolicy):
    """Prefers nodes already running the same subtask and fills their free-memory slots
    with shuffled users (paper 2.3)."""

    name = "affinity"

    def __init__(self, max_downloads_per_node: int = 1):
        if max_downloads_per_node < 1:
            raise ValueError("scheduler_options.max_downloads_per_node must be >= 1")
        self.max_downloads = int(max_downloads_per_node)

    def act(self, S, P, t: int) -> None:
        affinity_step(S, P, t, self.max_downloads)
