"""Centralized scheduler (paper 2.3): every subtask runs on the server v0."""

from __future__ import annotations


from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import (
    assign,
    free_memory,
    marginal_memory,
    pending_requests_fifo,
)
from gmm_volunteer.policies.base import Scheduler


@kernel
def centralized_place(S, P, t, args):
    # Oldest requests first; a subtask waits while the server's memory estimate is full.
    for i in pending_requests_fifo(S):
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] >= 0:
                continue
            j = P.task_sub[k, p]
            if free_memory(S, 0) >= marginal_memory(S, P, 0, j, t):
                assign(S, P, i, p, 0, t)


class Centralized(Scheduler):
    """Fully centralized inference baseline: no user-node downloads or executions."""

    name = "centralized"
    place = centralized_place
