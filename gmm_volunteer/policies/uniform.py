"""Uniform scheduler (paper 2.3): volunteers used opportunistically, at random."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import assign, unplaced_requests_fifo
from gmm_volunteer.policies.base import OPTIONS_CONFIG, Scheduler
from gmm_volunteer.policies.common import pick_uniform_feasible, schedule_downloads


class UniformOptions(BaseModel):
    model_config = OPTIONS_CONFIG
    # Random draws among the candidates before the exact scan (the result is uniform
    # over the feasible nodes either way; more tries trade draws for scans).
    rejection_tries: int = Field(8, ge=0, le=10_000)  # draws per placement before the exact scan
    # Concurrent subtask-data downloads per user node (docs/model.md explains 1).
    max_downloads_per_node: int = Field(1, ge=1)


@kernel
def uniform_downloads(S, P, t, args):
    schedule_downloads(S, P, t, args[1])


@kernel
def uniform_place(S, P, t, args):
    """Each pending subtask to a node drawn uniformly among the feasible ones."""
    tries = args[0]
    # Free memory only shrinks while placing, so a subtask that fit nowhere stays
    # unplaceable for the rest of the step: skip its other pairs (saves a scan each).
    full = np.zeros(P.n_sub, np.bool_)
    for i in unplaced_requests_fifo(S, P):
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


class Uniform(Scheduler):
    """Each unplaced subtask goes to a node drawn uniformly among the feasible ones
    (online, data ready, memory estimate fits), the server included (paper 2.3); with
    several servers each is one candidate among the others (docs/model.md D35)."""

    name = "uniform"
    several_servers = True
    Options = UniformOptions
    downloads = uniform_downloads
    place = uniform_place

