"""Uniform scheduler (paper 2.3): volunteers used opportunistically, at random."""

from __future__ import annotations

import numpy as np
from numba import njit

from gmm_volunteer.actions import assign, cancel_obsolete, finish_ready_requests, pending_requests_fifo
from gmm_volunteer.policies.base import KernelPolicy
from gmm_volunteer.policies.common import pick_uniform_feasible, schedule_downloads
from gmm_volunteer.policies.registry import register_scheduler


@njit(cache=True)
def uniform_step(S, P, t, tries, max_downloads):
    schedule_downloads(S, P, t, max_downloads)
    cancel_obsolete(S, P, t)
    finish_ready_requests(S, P, t)
    # Free memory only shrinks while placing, so a subtask that fit nowhere stays
    # unplaceable for the rest of the step: skip its other pairs (saves a scan each).
    full = np.zeros(P.n_sub, np.bool_)
    for i in pending_requests_fifo(S):
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            j = P.task_sub[k, p]
            if S.ex_node[i, p] >= 0 or full[j]:
                continue
            v = pick_uniform_feasible(S, P, j, t, tries)
            if v >= 0:
                assign(S, P, i, p, v, t)
            else:
                full[j] = True


@register_scheduler("uniform")
class Uniform(KernelPolicy):
    """Each unplaced subtask goes to a node drawn uniformly among the feasible ones
    (online, data ready, memory estimate fits), the server included."""

    name = "uniform"

    def __init__(self, rejection_tries: int = 8, max_downloads_per_node: int = 1):
        if rejection_tries < 0:
            raise ValueError("scheduler_options.rejection_tries must be >= 0")
        if max_downloads_per_node < 1:
            raise ValueError("scheduler_options.max_downloads_per_node must be >= 1")
        self.tries = int(rejection_tries)
        self.max_downloads = int(max_downloads_per_node)

    def act(self, S, P, t: int) -> None:
        uniform_step(S, P, t, self.tries, self.max_downloads)
