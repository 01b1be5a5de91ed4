"""QEdgeProxy routing, a baseline of seed 000_957acf713eeb90e3 (sections 2, 6.1, 6.4;
docs/routing.md, "qedgeproxy"): a pool of the eligible nodes (D12) whose monitored
latency is within a threshold and that were not overloaded at the last poll, and a
uniform draw within it (else among all feasible nodes). Every node is polled at the
fixed base period in one listing call, whatever its relevance; overload is judged on the
instantaneous reading, with no label and no cooldown (seed 000 section 6.2)."""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import pending_requests_fifo
from gmm_volunteer.policies.base import OPTIONS_CONFIG
from gmm_volunteer.policies.common import candidate, schedule_downloads
from gmm_volunteer.policies.monitor import (
    C_THRESHOLD,
    F_CPU,
    F_LAT,
    F_MEM,
    MonitorOptions,
    poll_all,
    refresh_latency,
)
from gmm_volunteer.policies.routing import Router, count_queues, record_herding, fits, observe, option_index, route_assign
from gmm_volunteer.model.rng import STREAM_SCHEDULER, randint


class QEdgeProxyOptions(MonitorOptions):
    model_config = OPTIONS_CONFIG
    # Nodes whose latency is at most this are in the pool, s.
    latency_threshold_s: float = Field(5.0, gt=0.0)
    max_downloads_per_node: int = Field(1, ge=1)


K = option_index(QEdgeProxyOptions)
K_THRESH, K_MAXDL = K["latency_threshold_s"], K["max_downloads_per_node"]


@kernel
def qep_choose(S, P, R, j, t, buf):
    n = S.hd_n[j] + 1
    n_pool = 0
    n_ok = 0
    for idx in range(n):
        v = candidate(S, j, idx)
        if not fits(S, P, v, j, t):
            continue
        buf[n_ok] = v
        n_ok += 1
        refresh_latency(S, P, R, v, j, t)
        lat = R.mf[v, F_LAT]
        hot = R.mf[v, F_CPU] > R.mc[C_THRESHOLD] or R.mf[v, F_MEM] > R.mc[C_THRESHOLD]
        if not hot and not math.isnan(lat) and lat <= R.po[K_THRESH]:
            # keep the pool at the front of buf
            buf[n_ok - 1], buf[n_pool] = buf[n_pool], buf[n_ok - 1]
            n_pool += 1
    if n_ok == 0:
        return -1
    if n_pool > 0:
        return buf[randint(S.rng, STREAM_SCHEDULER, n_pool)]
    return buf[randint(S.rng, STREAM_SCHEDULER, n_ok)]


@kernel
def qedgeproxy_downloads(S, P, t, args):
    R = args[0]
    observe(S, P, R, t)
    schedule_downloads(S, P, t, int(R.po[K_MAXDL]))


@kernel
def qedgeproxy_place(S, P, t, args):
    R = args[0]
    count_queues(S, R)
    poll_all(S, R, t)
    buf = np.empty(S.n_on[0] + 1, np.int64)
    for i in pending_requests_fifo(S):
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] >= 0:
                continue
            v = qep_choose(S, P, R, P.task_sub[k, p], t, buf)
            if v >= 0:
                route_assign(S, P, R, i, p, v, t, -1)
    record_herding(S, R, t)


class QEdgeProxy(Router):
    """Latency-threshold pool, random within it, fixed-period polling (seed 000 baseline)."""

    name = "qedgeproxy"
    Options = QEdgeProxyOptions
    downloads = qedgeproxy_downloads
    place = qedgeproxy_place
