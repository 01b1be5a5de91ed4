"""Proximity-aware routing (proxy-mity), a baseline of seed 000_957acf713eeb90e3
(sections 2, 6.1; docs/routing.md, "proximity"). By default (`cpu_load: false`, as seed
000 6.2 describes it: no node-state tracking) the eligible node (D12) of lowest monitored
latency with probability alpha, else one drawn uniformly among the feasible ones, and no
metric polling. With `cpu_load: true` (the router before issue 22) the node minimizing
alpha L / L_cap + (1 - alpha) u, with L its monitored latency and u its CPU use at the
last poll, every node polled at the fixed base period in one listing call, like
qedgeproxy. alpha = 1 is pure proximity, 0.8 trades latency for balance (seed 000 6.1)."""

from __future__ import annotations

import math


from pydantic import Field

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import pending_requests_fifo
from gmm_volunteer.policies.base import OPTIONS_CONFIG
from gmm_volunteer.policies.common import candidate, pick_uniform_feasible, schedule_downloads
from gmm_volunteer.model.rng import STREAM_SCHEDULER, uniform
from gmm_volunteer.policies.monitor import C_LAT_CAP, F_CPU, F_LAT, MonitorOptions, poll_all, refresh_latency
from gmm_volunteer.policies.routing import Router, count_queues, record_herding, fits, observe, option_index, route_assign


class ProximityOptions(MonitorOptions):
    model_config = OPTIONS_CONFIG
    # Weight of latency against load (seed 000 evaluates 1 and 0.8).
    alpha: float = Field(0.8, ge=0.0, le=1.0)
    max_downloads_per_node: int = Field(1, ge=1)
    # Load term from polled CPU use (true: the router before issue 22), or, as seed 000
    # describes proxy-mity (no node-state tracking, 6.2), alpha weighting the nearest node
    # against an even spread: the lowest-latency node with probability alpha, else a node
    # drawn uniformly among the feasible ones, and no metric polling (false).
    cpu_load: bool = False


K = option_index(ProximityOptions)
K_ALPHA, K_MAXDL, K_CPU = K["alpha"], K["max_downloads_per_node"], K["cpu_load"]


@kernel
def proximity_cost(latency, load, alpha, cap):
    lat = 1.0 if math.isnan(latency) else min(latency / cap, 1.0)
    return alpha * lat + (1.0 - alpha) * min(load, 1.0)


@kernel
def proximity_choose(S, P, R, j, t):
    if R.po[K_CPU] <= 0.0 and R.po[K_ALPHA] < 1.0 and uniform(S.rng, STREAM_SCHEDULER) >= R.po[K_ALPHA]:
        return pick_uniform_feasible(S, P, j, t, 4)  # the even-spread share (1 - alpha)
    best, best_c = -1, math.inf
    for idx in range(S.hd_n[j] + 1):
        v = candidate(S, j, idx)
        if not fits(S, P, v, j, t):
            continue
        refresh_latency(S, P, R, v, j, t)
        if R.po[K_CPU] > 0.0:
            c = proximity_cost(R.mf[v, F_LAT], R.mf[v, F_CPU], R.po[K_ALPHA], R.mc[C_LAT_CAP])
        else:
            c = proximity_cost(R.mf[v, F_LAT], 0.0, 1.0, R.mc[C_LAT_CAP])
        if c < best_c:
            best, best_c = v, c
    return best


@kernel
def proximity_downloads(S, P, t, args):
    R = args[0]
    observe(S, P, R, t)
    schedule_downloads(S, P, t, int(R.po[K_MAXDL]))


@kernel
def proximity_place(S, P, t, args):
    R = args[0]
    count_queues(S, R)
    if R.po[K_CPU] > 0.0:
        poll_all(S, R, t)
    for i in pending_requests_fifo(S):
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] >= 0:
                continue
            v = proximity_choose(S, P, R, P.task_sub[k, p], t)
            if v >= 0:
                route_assign(S, P, R, i, p, v, t, -1)
    record_herding(S, R, t)


class Proximity(Router):
    """Weighted latency and load (proxy-mity, seed 000 baseline; docs/routing.md)."""

    name = "proximity"
    Options = ProximityOptions
    downloads = proximity_downloads
    place = proximity_place
