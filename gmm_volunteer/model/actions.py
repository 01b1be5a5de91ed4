"""Actions policies may take (paper 2.3), as numba functions on (S, P).

Scheduler actions: start a subtask-data download (u^{x,pi} = download), assign a subtask
to a node (u^{y,pi} = execute), finish a request (finish), cancel obsolete placements
(cancel). Executor actions: pause/resume/abort downloads, evict data, abort batches.
Policies call these from their own `@njit` kernels; the functions keep every index of
the state consistent, so a new policy cannot corrupt it.

Actions take effect immediately when called in step t's policy stage. The paper applies
u_t in step t+1 before anything else reads the state, which is the same thing; the only
visible convention is that a request finished in step t has latency t - start.
"""

import numpy as np
from numba import njit
from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.kernels.ops import (  # noqa: F401  (re-exported for policies)
    EV_ABORT,
    EV_CANCEL,
    EV_START,
    OUT_COMPLETED,
    abort_batch,
    batch_born_now,
    batch_new,
    count_event,
    download_abort,
    download_start,
    evict_ready,
    mem_estimate,
    slot_join,
)
from gmm_volunteer.model.kernels.people import clear_slots, end_request, start_think
from gmm_volunteer.model.params import DOWNLOAD, EXECUTION, LOADING, MEMORY, PAUSED, STORAGE


@njit(cache=True, inline="always")
def first_phase(P, v):
    """Assigned subtasks start with input download on users, execution on a server."""
    return EXECUTION if v < P.n_srv else DOWNLOAD


@njit(cache=True, inline="always")
def free_memory(S, v):
    """Allocated memory minus the scheduler's mean + 2 sd reservations on node v."""
    return S.alloc[v, MEMORY] - S.nd_committed[v]


@njit(cache=True, inline="always")
def free_storage(S, v):
    return S.alloc[v, STORAGE] - S.rd_reserved[v]


@njit(cache=True, inline="always")
def new_batch_size(S, P, v, j, t):
    """Size of the batch a placement of j on v in step t joins (0: a new batch)."""
    if not P.batching:
        return 0
    b = batch_born_now(S, P, v, j, first_phase(P, v), t)
    return S.b_size[b] if b >= 0 else 0


@njit(cache=True, inline="always")
def marginal_memory(S, P, v, j, t):
    """m^y increase of placing one more subtask j on v in step t (it joins the batch
    formed on v this step)."""
    n = new_batch_size(S, P, v, j, t)
    return mem_estimate(P, j, n + 1) - mem_estimate(P, j, n)


@kernel
def assign(S, P, i, p, v, t, j=-1):
    """Place slot p of user i's request on node v (u^{y,pi} = execute), served by
    subtask j: the requested one (-1) or one of its model variants (P.var_list,
    docs/model.md D24)."""
    # The ids come from a policy, possibly a plugin: a wrong one would write outside the
    # state's arrays (numba does not check bounds), so it is refused here.
    if i < 0 or i >= P.n_nodes or S.rq_type[i] < 0:
        raise ValueError("assign: user id out of range or without an active request")
    if p < 0 or p >= P.task_nsub[S.rq_type[i]]:
        raise ValueError("assign: slot id out of range for the request's type")
    if S.ex_node[i, p] >= 0:
        raise ValueError("assign: slot already placed")
    if v < 0 or v >= P.n_nodes:
        raise ValueError("assign: node id out of range")
    if j >= P.n_sub:
        raise ValueError("assign: subtask id out of range")
    if j < 0:
        j = P.task_sub[S.rq_type[i], p]
    phase = first_phase(P, v)
    b = batch_born_now(S, P, v, j, phase, t) if P.batching else -1
    if b < 0:
        if S.n_bfree[0] <= 0:  # cannot happen with the growth bound; never overrun
            raise ValueError("assign: batch pool exhausted")
        b = batch_new(S, P, v, j, phase, t)
    S.ex_node[i, p] = v
    S.ex_phase[i, p] = phase
    slot_join(S, P, b, i, p)
    S.nd_jcount[v, j] += 1
    count_event(S, t, v, EV_START, 1)


@kernel
def cancel_obsolete(S, P, t):
    """Cancel placements of requests that ended (u^{y,pi} = cancel)."""
    for k in range(S.n_obs[0]):
        i = S.obs_list[k]
        if S.rq_type[i] < 0:
            clear_slots(S, P, i, t)
    S.n_obs[0] = 0


@kernel
def finish_ready_requests(S, P, t):
    """Finish requests whose subtasks are all done and whose results are in (u^{y,pi} =
    finish; with a network distance, a server's result reaches its requester a round
    trip after it is done, docs/model.md D39); returns count."""
    n = 0
    k = 0
    # Arrays bound once (numba counts references on each S.x / P.x read in a loop).
    n_rq, rq_list, rq_ndone, rq_type, task_nsub = S.n_rq, S.rq_list, S.rq_ndone, S.rq_type, P.task_nsub
    rtt_on, rq_due = P.rtt_on, S.rq_due
    while k < n_rq[0]:
        i = rq_list[k]
        if rq_ndone[i] == task_nsub[rq_type[i]] and (not rtt_on or rq_due[i] <= t):
            clear_slots(S, P, i, t)  # results are done; nothing to cancel
            end_request(S, P, i, t, OUT_COMPLETED)
            start_think(S, P, i, t + 1)
            n += 1
            # swap-remove moved another request into position k: look at it next
        else:
            k += 1
    return n


@njit(cache=True, inline="always")
def _fifo_key(rq_start, i):
    """User `i`'s request as one int64, start * 2^31 + user: sorted, the keys order the
    requests by start step, ties by user (`limits.STEP_KEY_MAX` bounds the start)."""
    return rq_start[i] * (1 << 31) + i


@njit(cache=True, inline="always")
def _users_in_fifo_order(keys):
    """Sort `_fifo_key` keys in place and decode them to their users: one array, no index
    permutation."""
    keys.sort()
    for k in range(keys.size):
        keys[k] &= (1 << 31) - 1
    return keys


@kernel
def pending_requests_fifo(S):
    """Users with an active request, oldest request first (ties: lower user first)."""
    users = np.empty(S.n_rq[0], np.int64)
    rq_list, rq_start = S.rq_list, S.rq_start
    for k in range(users.size):
        users[k] = _fifo_key(rq_start, rq_list[k])
    return _users_in_fifo_order(users)


@kernel
def unplaced_requests_fifo(S, P):
    """`pending_requests_fifo` restricted to the requests with a slot still unplaced
    (`ex_node` < 0), in the same order: the only requests a scheduler that places
    unplaced slots acts on. Where queues are long most active requests have every
    subtask placed (running or queued on its node); they cost one look at their slots
    per step here instead of a place in the sort."""
    rq_list, rq_start, rq_type, ex_node, task_nsub = S.rq_list, S.rq_start, S.rq_type, S.ex_node, P.task_nsub
    n = 0
    users = np.empty(S.n_rq[0], np.int64)
    for k in range(users.size):
        i = rq_list[k]
        for p in range(task_nsub[rq_type[i]]):
            if ex_node[i, p] < 0:
                users[n] = _fifo_key(rq_start, i)
                n += 1
                break
    return _users_in_fifo_order(users[:n])


@njit(cache=True, inline="always")
def _check_node_sub(S, v, j):
    """Refuse a (node, subtask) pair outside the readiness table (ids from a policy)."""
    if v < 0 or v >= S.rd_state.shape[0]:
        raise ValueError("download action: node id out of range")
    if j < 0 or j >= S.rd_state.shape[1]:
        raise ValueError("download action: subtask id out of range")


@kernel
def start_download(S, P, v, j, t):
    """u^{x,pi} = download: v starts fetching subtask j's data."""
    _check_node_sub(S, v, j)
    if S.rd_dl[v, j] >= 0:
        raise ValueError("start_download: node already has a download of this subtask")
    if S.n_dlfree[0] <= 0:
        # The pool holds one new download per online node and step (+ 64): a policy that
        # starts more in one step is told so rather than overrunning it.
        raise ValueError("start_download: download pool exhausted (more downloads started in one step than online nodes + 64)")
    download_start(S, P, v, j, t)


@kernel
def pause_download(S, v, j):
    """Pause v's download of j; it keeps what it has. A paused download consumes nothing."""
    _check_node_sub(S, v, j)
    if S.rd_state[v, j] == LOADING:
        S.rd_state[v, j] = PAUSED
        S.n_paused[0] += 1
        S.dl_cons[S.rd_dl[v, j], :] = 0.0


@kernel
def resume_download(S, v, j):
    _check_node_sub(S, v, j)
    if S.rd_state[v, j] == PAUSED:
        S.rd_state[v, j] = LOADING
        S.n_paused[0] -= 1
