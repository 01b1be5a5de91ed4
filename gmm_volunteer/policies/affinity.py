"""Affinity-based scheduler (paper 2.3): co-locate same-subtask executions to batch them."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import (
    assign,
    free_memory,
    marginal_memory,
    unplaced_requests_fifo,
)
from gmm_volunteer.policies.base import OPTIONS_CONFIG, Scheduler
from gmm_volunteer.policies.common import candidate, candidate_index, n_candidates, schedule_downloads
from gmm_volunteer.model.rng import STREAM_SCHEDULER, permutation, randint, uniform


class AffinityOptions(BaseModel):
    model_config = OPTIONS_CONFIG
    # Concurrent subtask-data downloads per user node (docs/model.md explains 1).
    max_downloads_per_node: int = Field(1, ge=1)


@kernel
def _fill(S, P, v, j, t, pair_user, pair_slot, start, end):
    """Assign pairs[start:end] to v while its free memory covers the marginal estimate."""
    while start < end and free_memory(S, v) >= marginal_memory(S, P, v, j, t):
        assign(S, P, pair_user[start], pair_slot[start], v, t)
        start += 1
    return start


@kernel
def _nodes_running(S, P):
    """Nodes running each subtask, from the live batches: those of j are
    node[offs[j]:offs[j + 1]], with a repeat per extra batch. A node runs j
    (nd_jcount > 0) exactly when a live batch of j sits on it, so this finds the
    busy nodes without scanning every holder of j."""
    n = S.n_b[0]
    offs = np.zeros(P.n_sub + 1, np.int64)
    for k in range(n):
        offs[S.b_sub[S.b_list[k]] + 1] += 1
    for j in range(P.n_sub):
        offs[j + 1] += offs[j]
    node = np.empty(n, np.int64)
    fill = offs[:-1].copy()
    for k in range(n):
        b = S.b_list[k]
        j = S.b_sub[b]
        node[fill[j]] = S.b_node[b]
        fill[j] += 1
    return offs, node


@kernel
def _busy_positions(S, P, j, nodes, out):
    """Candidate indices (see `candidate`) of the eligible nodes among `nodes`, sorted
    and without repeats, in out[:n]; returns n."""
    n = 0
    for v in nodes:
        idx = candidate_index(S, P, j, v)
        if idx >= 0:  # else not a candidate: its data is no longer ready
            out[n] = idx
            n += 1
    if n > 16:
        out[:n].sort()
    else:  # usually the server and a few users: insertion sort is cheaper
        for k in range(1, n):
            x = out[k]
            m = k
            while m > 0 and out[m - 1] > x:
                out[m] = out[m - 1]
                m -= 1
            out[m] = x
    m = 0
    for k in range(n):
        if m == 0 or out[k] != out[m - 1]:
            out[m] = out[k]
            m += 1
    return m


@kernel
def _shuffle_pairs(S, user, slot):
    """Shuffle the (user, slot) pairs in place, with the draws of rng.permutation."""
    for a in range(user.size - 1, 0, -1):
        b = randint(S.rng, STREAM_SCHEDULER, a + 1)
        user[a], user[b] = user[b], user[a]
        slot[a], slot[b] = slot[b], slot[a]


@kernel
def affinity_downloads(S, P, t, args):
    schedule_downloads(S, P, t, args[0])


@kernel
def affinity_place(S, P, t, args):
    # Unplaced (user, slot) pairs grouped by subtask j (counting sort).
    users = unplaced_requests_fifo(S, P)
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
    # Placing j only adds batches of j, so the running nodes of the other subtasks
    # stay as found here.
    run_offs, run_node = _nodes_running(S, P)
    busy_pos = np.empty(run_node.size, np.int64)
    busy = np.empty(run_node.size, np.int64)
    key = np.empty(run_node.size, np.float64)
    for j in permutation(S.rng, STREAM_SCHEDULER, P.n_req):  # requested subtasks (D24)
        start, end = offs[j], offs[j + 1]
        if start == end:
            continue
        # Users requiring j in random order.
        pu = pair_user[start:end]
        ps = pair_slot[start:end]
        _shuffle_pairs(S, pu, ps)
        n_pairs = end - start
        done = 0
        # Eligible nodes running j already, most executions of j first (random ties
        # drawn in candidate order).
        nb = _busy_positions(S, P, j, run_node[run_offs[j] : run_offs[j + 1]], busy_pos)
        for o in range(nb):
            v = candidate(S, j, busy_pos[o])
            busy[o] = v
            key[o] = -S.nd_jcount[v, j] - uniform(S.rng, STREAM_SCHEDULER) * 0.5
        for o in np.argsort(key[:nb]):
            done = _fill(S, P, busy[o], j, t, pu, ps, done, n_pairs)
            if done == n_pairs:
                break
        if done == n_pairs:
            continue
        # Then the other candidates, in candidate order, visited in random order
        # (partial Fisher-Yates).
        n_cand = n_candidates(S, P, j)
        ni = n_cand - nb
        idle = np.empty(ni, np.int64)
        r = 0
        o = 0
        for idx in range(n_cand):
            if o < nb and busy_pos[o] == idx:
                o += 1
            else:
                idle[r] = candidate(S, j, idx)
                r += 1
        r = 0
        while done < n_pairs and r < ni:
            s = r + randint(S.rng, STREAM_SCHEDULER, ni - r)
            idle[r], idle[s] = idle[s], idle[r]
            done = _fill(S, P, idle[r], j, t, pu, ps, done, n_pairs)
            r += 1


class Affinity(Scheduler):
    """Prefers nodes already running the same subtask and fills their free-memory slots
    with shuffled users (paper 2.3). With several servers (docs/model.md D35) every
    server is a candidate like a volunteer: one running the subtask is filled in the
    order of its executions, the others are visited in random order with the idle
    volunteers."""

    name = "affinity"
    several_servers = True
    Options = AffinityOptions
    downloads = affinity_downloads
    place = affinity_place
