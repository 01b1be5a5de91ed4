"""Centralized scheduler (paper 2.3): every subtask runs on the server v0."""

from __future__ import annotations

from numba import njit

from gmm_volunteer.actions import (
    assign,
    cancel_obsolete,
    finish_ready_requests,
    free_memory,
    marginal_memory,
    pending_requests_fifo,
)
from gmm_volunteer.policies.base import KernelPolicy
from gmm_volunteer.policies.registry import register_scheduler


@njit(cache=True)
def centralized_step(S, P, t):
    cancel_obsolete(S, P, t)
    finish_ready_requests(S, P, t)
    # Oldest requests first; a subtask waits while the server's memory estimate is full.
    for i in pending_requests_fifo(S):
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] >= 0:
                continue
            j = P.task_sub[k, p]
            if free_memory(S, 0) >= marginal_memory(S, P, 0, j, t):
                assign(S, P, i, p, 0, t)


@register_scheduler("centralized")
class Centralized(KernelPolicy):
    """Fully centralized inference baseline: no user-node downloads or executions."""

    name = "centralized"

    def act(self, S, P, t: int) -> None:
        centralized_step(S, P, t)
