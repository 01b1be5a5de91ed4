"""Centralized scheduler (paper 2.3): every subtask runs on a dedicated server (the
server v0; with several servers, the one expected to finish it first, docs/model.md D35)."""

from __future__ import annotations

import numpy as np

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import (
    assign,
    free_memory,
    marginal_memory,
    unplaced_requests_fifo,
)
from gmm_volunteer.model.kernels.ops import phase_work, work_mean
from gmm_volunteer.model.params import CPU
from gmm_volunteer.policies.base import Scheduler


@kernel
def server_backlog(S, P):
    """CPU-seconds each server still has to execute: the remaining work of the batches on
    it (a server's batches only execute, D35)."""
    out = np.zeros(P.n_srv)
    for s in range(P.n_srv):
        b = S.nd_bhead[s]
        while b >= 0:
            out[s] += (1.0 - S.b_done[b]) * phase_work(S, P, b) / 100.0
            b = S.b_nnext[b]
    return out


@kernel
def first_finish(S, P, i, j, t, backlog):
    """The server that fits subtask j of user i's request and is expected to finish it
    first: the least round-trip time to the user plus (its backlog + j's mean work) /
    its cores, ties to the first in config order; -1 if j fits on none (D35)."""
    best, best_at = -1, np.inf
    for s in range(P.n_srv):
        if free_memory(S, s) < marginal_memory(S, P, s, j, t):
            continue
        cores = S.alloc[s, CPU] / 100.0
        at = P.sv_rtt[s, i] + ((backlog[s] + work_mean(S, P, s, j, 1)) / cores if cores > 0.0 else np.inf)
        if best < 0 or at < best_at:
            best, best_at = s, at
    return best


@kernel
def centralized_place(S, P, t, args):
    # Oldest requests first; a subtask waits while no server's memory estimate has room.
    # Free memory only shrinks while placing and the marginal estimate of j changes only
    # when j is placed, so a subtask that did not fit does not fit for the rest of the
    # step: its other slots are skipped, and once no subtask fits the scan stops (the
    # same placements; at 100,000 users the server is full and thousands of requests
    # wait, each step).
    rq_type, ex_node, task_nsub, task_sub = S.rq_type, S.ex_node, P.task_nsub, P.task_sub
    several = P.n_srv > 1
    backlog = server_backlog(S, P) if several else np.zeros(1)
    full = np.zeros(P.n_sub, np.bool_)
    n_full = 0
    for i in unplaced_requests_fifo(S, P):
        k = rq_type[i]
        for p in range(task_nsub[k]):
            if ex_node[i, p] >= 0:
                continue
            j = task_sub[k, p]
            if full[j]:
                continue
            if several:
                s = first_finish(S, P, i, j, t, backlog)
                if s >= 0:
                    backlog[s] += work_mean(S, P, s, j, 1)
            else:
                s = 0 if free_memory(S, 0) >= marginal_memory(S, P, 0, j, t) else -1
            if s >= 0:
                assign(S, P, i, p, s, t)
            else:
                full[j] = True
                n_full += 1
        if n_full == full.size:
            break


class Centralized(Scheduler):
    """Fully centralized inference baseline: no user-node downloads or executions. With
    several dedicated servers (docs/model.md D35) a subtask goes to the server, among
    those whose memory estimate has room, expected to finish it first: the least
    round-trip time from the requesting user plus (the CPU-seconds the server still has
    to execute, those placed this step included, + the subtask's mean work) / the
    server's allocated cores; ties to the first in config order."""

    name = "centralized"
    several_servers = True
    place = centralized_place
