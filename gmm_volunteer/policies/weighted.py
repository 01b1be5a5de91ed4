"""Weighted scheduler (paper 2.3, 2.4): a parametric family for optimising the scheduler.

Each unplaced (user, subtask j) pair goes to a node drawn among the feasible ones
(online, data of j ready, memory estimate m^y fits: the uniform scheduler's feasible
set) with probability proportional to exp(w . f(v)), where the features of node v are

* f_server = 1 if v is the dedicated server v0, else 0;
* f_batch = log(1 + executions of j already on v) (co-location, as the affinity
  scheduler seeks it);
* f_memory = the fraction of v's allocated memory still free after the placement;

and, besides the nodes, the pair may wait for a later step with log-odds ``wait_weight``
(a virtual candidate with features 0). The draw is a Gumbel-max: argmax of w . f(v) + G_v
over the candidates, G_v = -log(-log U_v) with U_v from the scheduler's stream, which
samples exactly that softmax. Weights 0 with the default wait weight (-20: waiting is
e^-20 times as likely as a featureless node, never in practice) give a uniform draw among
the feasible nodes (the uniform scheduler's law); a large batch weight makes it
affinity-like; a server weight well above the wait weight, itself well above 0, makes it
centralized (volunteers are used only when the draw lets a pair stop waiting).

The weights are plain float options, so they reach the hooks as values of the ``args``
tuple: changing them between steps (`Scheduler.set_options`, the Gymnasium environment
of `gmm_volunteer.optimisation.env`) keeps the argument types and so never recompiles.
Eq. 2's scheduler optimisation searches over them (`gmm_volunteer.optimisation.search`).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, Field

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import assign, free_memory, marginal_memory, pending_requests_fifo
from gmm_volunteer.model.params import MEMORY
from gmm_volunteer.policies.base import OPTIONS_CONFIG, Scheduler
from gmm_volunteer.policies.common import candidate, schedule_downloads
from gmm_volunteer.model.rng import STREAM_SCHEDULER, uniform

WEIGHTS = ("server_weight", "batch_weight", "memory_weight", "wait_weight")
"""The tunable parameters, in the order of the environment's action and the search."""


class WeightedOptions(BaseModel):
    model_config = OPTIONS_CONFIG
    # Concurrent subtask-data downloads per user node (docs/model.md explains 1).
    max_downloads_per_node: int = Field(1, ge=1)
    # Log-odds weights of the node features (module docstring); finite.
    server_weight: float = Field(0.0, allow_inf_nan=False)
    batch_weight: float = Field(0.0, allow_inf_nan=False)
    memory_weight: float = Field(0.0, allow_inf_nan=False)
    wait_weight: float = Field(-20.0, allow_inf_nan=False)


@kernel
def weighted_downloads(S, P, t, args):
    schedule_downloads(S, P, t, args[0])


@kernel
def _gumbel(S):
    return -math.log(-math.log(uniform(S.rng, STREAM_SCHEDULER)))


@kernel
def _pick(S, P, j, t, w_server, w_batch, w_memory, w_wait):
    """The Gumbel-max draw among the feasible nodes for j and waiting: a node, -2 to
    wait, -1 if no node is feasible (then no draw for waiting is taken)."""
    best, best_score = -1, -math.inf
    for idx in range(S.hd_n[j] + 1):
        v = candidate(S, j, idx)
        free = free_memory(S, v)
        need = marginal_memory(S, P, v, j, t)
        if free < need:
            continue
        alloc = S.alloc[v, MEMORY]
        left = (free - need) / alloc if alloc > 0.0 else 0.0
        score = (w_server * (v == 0) + w_batch * math.log1p(S.nd_jcount[v, j])
                 + w_memory * left + _gumbel(S))
        if score > best_score:
            best, best_score = v, score
    if best >= 0 and w_wait + _gumbel(S) > best_score:
        return -2
    return best


@kernel
def weighted_place(S, P, t, args):
    w_server, w_batch, w_memory, w_wait = args[1], args[2], args[3], args[4]
    # Free memory only shrinks while placing, so a subtask that fit nowhere stays
    # unplaceable for the rest of the step (as in the uniform scheduler).
    full = np.zeros(P.n_sub, np.bool_)
    for i in pending_requests_fifo(S):
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            j = P.task_sub[k, p]
            if S.ex_node[i, p] >= 0 or full[j]:
                continue
            v = _pick(S, P, j, t, w_server, w_batch, w_memory, w_wait)
            if v >= 0:
                assign(S, P, i, p, v, t)
            elif v == -1:
                full[j] = True


class Weighted(Scheduler):
    """Each unplaced subtask to a feasible node drawn with probability proportional to
    exp(server_weight f_server + batch_weight f_batch + memory_weight f_memory), or
    left waiting with probability proportional to exp(wait_weight)."""

    name = "weighted"
    Options = WeightedOptions
    downloads = weighted_downloads
    place = weighted_place
