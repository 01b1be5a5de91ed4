"""Least-loaded scheduler: an example policy defined outside the package (docs/policies.md).

Each pending subtask goes to the eligible node (the server, or an online user holding
its data) with the most free memory, if its marginal memory estimate fits there; user
nodes fetch missing subtask data as under the uniform scheduler (paper 2.3). Ties go to
the node listed first (the user holders, then the server), so the placement draws no
random numbers; only the downloads do.

Name it in a run config as ``scheduler: least_loaded:LeastLoaded``: a config in this
directory finds it here (the config's folder is searched); elsewhere put this directory
on PYTHONPATH, or install a package that declares it in the ``gmm_volunteer.schedulers``
entry-point group.
"""

from __future__ import annotations

from numba import njit
from pydantic import BaseModel, Field

from gmm_volunteer.model.actions import assign, free_memory, marginal_memory, pending_requests_fifo
from gmm_volunteer.policies.base import OPTIONS_CONFIG, Scheduler
from gmm_volunteer.policies.common import candidate, schedule_downloads


class LeastLoadedOptions(BaseModel):
    model_config = OPTIONS_CONFIG
    # Concurrent subtask-data downloads per user node.
    max_downloads_per_node: int = Field(1, ge=1)


@njit(cache=True)
def least_loaded_downloads(S, P, t, args):
    schedule_downloads(S, P, t, args[0])


@njit(cache=True)
def least_loaded_place(S, P, t, args):
    for i in pending_requests_fifo(S):  # oldest request first
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] >= 0:
                continue
            j = P.task_sub[k, p]
            best, best_free = -1, -1.0
            for idx in range(S.hd_n[j] + 1):
                v = candidate(S, j, idx)
                free = free_memory(S, v)
                if free > best_free and free >= marginal_memory(S, P, v, j, t):
                    best, best_free = v, free
            if best >= 0:
                assign(S, P, i, p, best, t)


class LeastLoaded(Scheduler):
    """Each pending subtask to the eligible node with the most free memory."""

    name = "least-loaded"
    Options = LeastLoadedOptions
    downloads = least_loaded_downloads
    place = least_loaded_place
