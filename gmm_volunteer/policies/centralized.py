"""Centralized scheduler (paper 2.3): every subtask runs on the server v0."""

from __future__ import annotations

import numpy as np

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import (
    assign,
    free_memory,
    marginal_memory,
    unplaced_requests_fifo,
)
from gmm_volunteer.policies.base import Scheduler


@kernel
def centralized_place(S, P, t, args):
    # Oldest requests first; a subtask waits while the server's memory estimate is full.
    # Free memory only shrinks while placing and the marginal estimate of j changes only
    # when j is placed, so a subtask that did not fit does not fit for the rest of the
    # step: its other slots are skipped, and once no subtask fits the scan stops (the
    # same placements; at 100,000 users the server is full and thousands of requests
    # wait, each step).
    rq_type, ex_node, task_nsub, task_sub = S.rq_type, S.ex_node, P.task_nsub, P.task_sub
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
            if free_memory(S, 0) >= marginal_memory(S, P, 0, j, t):
                assign(S, P, i, p, 0, t)
            else:
                full[j] = True
                n_full += 1
        if n_full == full.size:
            break


class Centralized(Scheduler):
    """Fully centralized inference baseline: no user-node downloads or executions."""

    name = "centralized"
    place = centralized_place
