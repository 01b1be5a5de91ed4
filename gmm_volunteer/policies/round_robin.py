"""Round-robin routing, a baseline of seed 000_957acf713eeb90e3 (section 6.1; docs/routing.md):
each subtask's eligible nodes (D12) are taken in turn, skipping those whose free memory
does not cover it. It monitors nothing, so it costs no monitoring traffic."""

from __future__ import annotations


from pydantic import BaseModel, Field

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import pending_requests_fifo
from gmm_volunteer.policies.base import OPTIONS_CONFIG
from gmm_volunteer.policies.common import candidate, schedule_downloads
from gmm_volunteer.policies.routing import Router, count_queues, record_herding, fits, observe, option_index, route_assign


class RoundRobinOptions(BaseModel):
    model_config = OPTIONS_CONFIG
    max_downloads_per_node: int = Field(1, ge=1)


K_MAXDL = option_index(RoundRobinOptions)["max_downloads_per_node"]


@kernel
def round_robin_downloads(S, P, t, args):
    R = args[0]
    observe(S, P, R, t)  # free: only for the per-node counts in the result
    schedule_downloads(S, P, t, int(R.po[K_MAXDL]))


@kernel
def round_robin_place(S, P, t, args):
    R = args[0]
    count_queues(S, R)
    for i in pending_requests_fifo(S):
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] >= 0:
                continue
            j = P.task_sub[k, p]
            n = S.hd_n[j] + 1
            start = R.ai[j]  # the next position in j's candidate list
            for o in range(n):
                idx = (start + o) % n
                v = candidate(S, j, idx)
                if fits(S, P, v, j, t):
                    route_assign(S, P, R, i, p, v, t, -1)
                    R.ai[j] = idx + 1
                    break
    record_herding(S, R, t)


class RoundRobin(Router):
    """Eligible nodes in turn per subtask (seed 000 baseline; docs/routing.md)."""

    name = "round_robin"
    Options = RoundRobinOptions
    downloads = round_robin_downloads
    place = round_robin_place

    def scratch_sizes(self, params):
        return 0, params.n_sub
