"""Subtask data the users hold at t = 0 (docs/model.md D2; paper 2.2, readiness).

The paper does not say what a run starts from. Availability starts in its stationary
law (D2): a user's devices have been online before. With ``users.initial_data: filled``
(the default) their storage also holds what those earlier online periods left: the
download rule of the distributed schedulers (`policies.common.schedule_downloads`:
one missing subtask at a time, drawn uniformly among those whose data fits the free
storage and whose download memory m^x fits the free memory) applied until nothing more
fits, at the users' mean storage and memory allocation. Nothing is ever evicted while
data fits (D11), so this is where a user's readiness ends up after a long history; a
run that starts ``empty`` instead spends its first hours on downloads that taper off as
users come online for the first time (with the paper's laws, 15 % of the users have
not been online once after 100,000 steps: docs/model.md D2).

Users that a scripted ``join`` event brings in (D25) are new devices: they start empty.
The draws are keyed by user (``rng.KEY_DATA``), so a user's data do not depend on the
user count, the scheduler or the capacities (common random numbers, D5).
"""

from __future__ import annotations

import numpy as np

from gmm_volunteer.model.constants import MEMORY, READY, STORAGE
from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.kernels.ops import holder_add
from gmm_volunteer.model.rng import KEY_DATA, keyed_uniform


@kernel
def _fill(S, P, skip, storage_mb, memory_mb):
    """Fill every user not in `skip` (bool, per node) with requested subtask data, up to
    its class's storage and memory (per node class, D36)."""
    key = S.key[0]
    for v in range(P.n_srv, P.n_nodes):
        if skip[v]:
            continue
        free = storage_mb[S.node_class[v]]
        memory = memory_mb[S.node_class[v]]
        draw = 0
        while True:
            n = 0
            for j in range(P.n_req):
                n += (S.rd_state[v, j] != READY) & (P.sub_data_mb[j] <= free) & (P.sub_dl_mem[j] <= memory)
            if n == 0:
                break
            r = int(keyed_uniform(key, KEY_DATA, v - P.n_srv + 1, 0, draw) * n)  # by user number (D35)
            draw += 1
            for j in range(P.n_req):
                if S.rd_state[v, j] != READY and P.sub_data_mb[j] <= free and P.sub_dl_mem[j] <= memory:
                    if r == 0:
                        size = P.sub_data_mb[j]
                        S.rd_state[v, j] = READY
                        S.rd_mb[v, j] = size
                        S.rd_used[v] += size
                        S.rd_usertotal[0] += size
                        S.rd_reserved[v] += size
                        S.rd_nready[v] += 1
                        if S.online[v]:
                            holder_add(S, j, v)
                        free -= size
                        break
                    r -= 1


def fill_initial_data(S, P, params, cfg) -> None:
    """Apply ``users.initial_data`` to a state whose availability is initialised."""
    if cfg.users.initial_data == "empty":
        return
    skip = np.zeros(params.n_nodes, np.bool_)
    for ev in cfg.events:
        if ev.kind == "join":
            skip[ev.node_ids(params.n_users, params.n_srv)] = True
    # each class's mean allocation (D6, D36): what the download rule sees on average
    storage = params.al_mean[:, STORAGE] * params.amax[:, STORAGE]
    memory = params.al_mean[:, MEMORY] * params.amax[:, MEMORY]
    _fill(S, P, skip, storage, memory)
