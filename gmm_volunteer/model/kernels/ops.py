"""Structural operations on the state that keep every index consistent.

Policies never write state arrays directly: they call the actions in
`gmm_volunteer.model.actions`, which are built from these operations. That keeps the
invariants (lists, holders, batch membership, memory reservations, event counts) in one
place, whatever policy is plugged in.
"""

import numpy as np
from numba import njit


from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.params import (
    BAND_IN,
    BAND_OUT,
    CPU,
    DOWNLOAD,
    DONE,
    EMPTY,
    EXECUTION,
    IDLE,
    LOADING,
    MAX_BATCH_TABLE,
    N_CRES,
    PAUSED,
    READY,
    UPLOAD,
    WORK_EXPONENTIAL,
)
from gmm_volunteer.model.rng import STREAM_WORK, normal, uniform

from gmm_volunteer.model.constants import (  # noqa: F401  (kernels import them from here too)
    EV_ABORT, EV_CANCEL, EV_COMPLETE, EV_RESET, EV_START, OUT_ABANDONED, OUT_COMPLETED, OUT_DROPPED,
)


@njit(cache=True, inline="always")
def phase_end_wanted(P):
    """Whether the kernels record when inside a step a phase's work ran out: for the next
    phase to use the rest of the step (`phase_changes: carry_over`, D26) or for sub-step
    end times (`latency: substep`, D34)."""
    return P.carry_over or P.substep


@njit(cache=True, inline="always")
def count_event(S, t, v, event, n):
    S.ser_ev[t, S.node_class[v], event] += n  # per node class (D36)


# ---- swap-remove lists ------------------------------------------------------------


@njit(cache=True, inline="always")
def list_add(lst, pos, n, x):
    pos[x] = n[0]
    lst[n[0]] = x
    n[0] += 1


@njit(cache=True, inline="always")
def list_remove(lst, pos, n, x):
    k = pos[x]
    last = lst[n[0] - 1]
    lst[k] = last
    pos[last] = k
    n[0] -= 1
    pos[x] = -1


@njit(cache=True, inline="always")
def holder_add(S, j, v):
    """v (an online user node) holds ready data for subtask j."""
    if S.hd_pos[v, j] < 0:
        n = S.hd_n[j]
        S.hd_pos[v, j] = n
        S.hd_list[j, n] = v
        S.hd_n[j] = n + 1


@njit(cache=True, inline="always")
def holder_remove(S, j, v):
    k = S.hd_pos[v, j]
    if k >= 0:
        n = S.hd_n[j] - 1
        last = S.hd_list[j, n]
        S.hd_list[j, k] = last
        S.hd_pos[last, j] = k
        S.hd_n[j] = n
        S.hd_pos[v, j] = -1


# ---- memory estimates -----------------------------------------------------------


@njit(cache=True, inline="always")
def mem_estimate(P, j, n):
    """m^y for a batch of n subtasks j (linear beyond the tabulated range)."""
    if n <= MAX_BATCH_TABLE:
        return P.mem_est[j, n]
    top = P.mem_est[j, MAX_BATCH_TABLE]
    slope = top - P.mem_est[j, MAX_BATCH_TABLE - 1]
    return top + slope * (n - MAX_BATCH_TABLE)


# ---- work of a phase (docs/model.md, "Progress from granted resources") -----------


@njit(cache=True, inline="always")
def work_mean(S, P, v, j, n):
    """Mean CPU-seconds of executing a batch of n subtasks j on node v (linear beyond the
    table; a volunteer's times its class's volunteer factor, D29, D36; a server's 1)."""
    if n <= MAX_BATCH_TABLE:
        w = P.wk_mean[j, n]
    else:
        top = P.wk_mean[j, MAX_BATCH_TABLE]
        w = top + (top - P.wk_mean[j, MAX_BATCH_TABLE - 1]) * (n - MAX_BATCH_TABLE)
    return w * P.wk_vol[S.node_class[v], j]


@njit(cache=True, inline="always")
def phase_work(S, P, b):
    """Work batch b's current phase needs, in the units its consumption is recorded in
    times seconds: execution in %-seconds of CPU (100 = one core for one second), input
    download and result upload in Mbit."""
    j, n, ph = S.b_sub[b], S.b_size[b], S.b_phase[b]
    if ph == EXECUTION:
        return 100.0 * work_mean(S, P, S.b_node[b], j, n) * S.b_eps[b]
    if ph == DOWNLOAD:
        return 8.0 * n * P.sub_in_mb[j]
    return 8.0 * n * P.sub_out_mb[j]


@njit(cache=True, inline="always")
def work_factor(st, dist, log_sd):
    """A factor of mean 1 scaling a batch's execution work (its fitted variability):
    exponential, or lognormal exp(s Z - s^2 / 2) (deterministic when s = 0)."""
    if dist == WORK_EXPONENTIAL:
        return -np.log(uniform(st, STREAM_WORK))
    if log_sd == 0.0:
        return 1.0
    return np.exp(log_sd * normal(st, STREAM_WORK) - 0.5 * log_sd * log_sd)


@njit(cache=True, inline="always")
def draw_work_factor(S, P, j):
    return work_factor(S.rng, P.wk_dist[j], P.wk_lsd[j])


# ---- merge table: the batch formed this step per (node, subtask, phase) -------------


@njit(cache=True, inline="always")
def _merge_slot(S, P, v, j, phase, t):
    """Slot of key (v, j, phase) in the merge table: where step t's entry for it sits, or
    the free slot where it goes (paper 2.2: same node, subtask, phase and age batch).

    An open-addressing table with linear probing, sized to the batch pool (at least 4
    slots per batch, `state.merge_table_size`): entries are valid only in the step they
    were written, so a slot stamped with another step is free and nothing is ever
    deleted. Its size follows the batches, not the users x subtasks x phases a dense
    index would take (1.4 GB at 10^6 users)."""
    key = (np.int64(v) * P.n_sub + j) * 4 + phase
    mask = S.mg_key.shape[0] - 1
    x = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)  # mix the key's bits (Fibonacci hashing)
    h = np.int64((x ^ (x >> np.uint64(32))) & np.uint64(mask))
    while S.mg_t[h] == t and S.mg_key[h] != key:
        h = (h + 1) & mask
    return h, key


@njit(cache=True, inline="always")
def merge_record(S, P, b, v, j, phase, t):
    """Batch b of (v, j, phase) formed in step t: later arrivals of this step join it."""
    h, key = _merge_slot(S, P, v, j, phase, t)
    S.mg_key[h] = key
    S.mg_id[h] = b
    S.mg_t[h] = t


@njit(cache=True, inline="always")
def merge_lookup(S, P, v, j, phase, t):
    """The batch last recorded for (v, j, phase) in step t, or -1."""
    h, _ = _merge_slot(S, P, v, j, phase, t)
    return S.mg_id[h] if S.mg_t[h] == t else -1


# ---- batches --------------------------------------------------------------------


@kernel
def batch_new(S, P, v, j, phase, t):
    k = S.n_bfree[0] - 1
    b = S.b_free[k]
    S.n_bfree[0] = k
    S.b_node[b] = v
    S.b_sub[b] = j
    S.b_phase[b] = phase
    S.b_age[b] = 0
    S.b_born[b] = t
    S.b_size[b] = 0
    S.b_head[b] = -1
    S.b_mem[b] = 0.0
    S.b_cons[b, :] = 0.0
    S.b_h[b, :] = 0.0
    S.b_done[b] = 0.0
    S.b_tau[b] = -1.0
    S.b_lead[b] = 0.0
    S.b_eps[b] = draw_work_factor(S, P, j) if phase == EXECUTION else 1.0
    h = S.nd_bhead[v]
    S.b_nnext[b] = h
    S.b_nprev[b] = -1
    if h >= 0:
        S.b_nprev[h] = b
    S.nd_bhead[v] = b
    list_add(S.b_list, S.b_pos, S.n_b, b)
    merge_record(S, P, b, v, j, phase, t)
    return b


@kernel
def batch_free(S, b):
    v = S.b_node[b]
    nx, pv = S.b_nnext[b], S.b_nprev[b]
    if pv >= 0:
        S.b_nnext[pv] = nx
    else:
        S.nd_bhead[v] = nx
    if nx >= 0:
        S.b_nprev[nx] = pv
    list_remove(S.b_list, S.b_pos, S.n_b, b)
    S.nd_committed[v] -= S.b_mem[b]
    S.b_mem[b] = 0.0
    S.b_node[b] = -1
    S.b_size[b] = 0
    S.b_free[S.n_bfree[0]] = b
    S.n_bfree[0] += 1


@kernel  # not inlined: schedulers call it once per candidate node (compiled once)
def batch_born_now(S, P, v, j, phase, t):
    """The batch of (v, j, phase) formed in step t (age 0), or -1."""
    b = merge_lookup(S, P, v, j, phase, t)
    if b < 0:
        return -1
    if S.b_node[b] == v and S.b_sub[b] == j and S.b_phase[b] == phase and S.b_born[b] == t and S.b_age[b] == 0:
        return b
    return -1


@kernel
def _set_batch_size(S, P, b, n):
    S.b_size[b] = n
    m = mem_estimate(P, S.b_sub[b], n)
    S.nd_committed[S.b_node[b]] += m - S.b_mem[b]
    S.b_mem[b] = m


@kernel
def slot_join(S, P, b, i, p):
    s = i * P.max_slots + p
    h = S.b_head[b]
    S.sl_next[s] = h
    S.sl_prev[s] = -1
    if h >= 0:
        S.sl_prev[h] = s
    S.b_head[b] = s
    S.ex_batch[i, p] = b
    _set_batch_size(S, P, b, S.b_size[b] + 1)


@kernel
def slot_leave(S, P, i, p):
    """Remove slot (i, p) from its batch; frees the batch when it empties."""
    b = S.ex_batch[i, p]
    s = i * P.max_slots + p
    nx, pv = S.sl_next[s], S.sl_prev[s]
    if pv >= 0:
        S.sl_next[pv] = nx
    else:
        S.b_head[b] = nx
    if nx >= 0:
        S.sl_prev[nx] = pv
    S.ex_batch[i, p] = -1
    if S.b_size[b] == 1:
        batch_free(S, b)
    else:
        _set_batch_size(S, P, b, S.b_size[b] - 1)


@kernel
def abort_batch(S, P, b, event, t):
    """Every member of batch b goes back to idle (unplaced); the batch is freed."""
    v, j, n = S.b_node[b], S.b_sub[b], S.b_size[b]
    s = S.b_head[b]
    while s >= 0:
        i, p = s // P.max_slots, s % P.max_slots
        S.ex_node[i, p] = -1
        S.ex_phase[i, p] = IDLE
        S.ex_batch[i, p] = -1
        s = S.sl_next[s]
    S.nd_jcount[v, j] -= n
    count_event(S, t, v, event, n)
    batch_free(S, b)


@kernel
def release_slot(S, P, i, p, event, t):
    """Take slot (i, p) off its node: leaves its batch (counting `event`) or, if done,
    just forgets the result."""
    v = S.ex_node[i, p]
    if v < 0:
        return
    if S.ex_phase[i, p] != DONE:
        j = S.b_sub[S.ex_batch[i, p]]
        S.nd_jcount[v, j] -= 1
        slot_leave(S, P, i, p)
        count_event(S, t, v, event, 1)
    S.ex_node[i, p] = -1
    S.ex_phase[i, p] = IDLE


@kernel
def batch_advance(S, P, b, t):
    """Batch b completed its phase in step t: next phase, or done (paper 2.2, y_t)."""
    v, j, ph, n = S.b_node[b], S.b_sub[b], S.b_phase[b], S.b_size[b]
    if ph == UPLOAD or (ph == EXECUTION and v < P.n_srv):
        # under latency: substep, when its members' results are in (D34): the moment
        # inside step t, which covers the second before t, at which the work ran out
        end = t - 1.0 + S.b_tau[b] if S.b_tau[b] >= 0.0 else float(t)
        s = S.b_head[b]
        # a server's result reaches its requester a round trip after it (D39): the
        # request finishes once the last is in (`actions.finish_ready_requests`)
        back = P.rtt_on > 0 and v < P.n_srv
        while s >= 0:
            i, p = s // P.max_slots, s % P.max_slots
            S.ex_phase[i, p] = DONE
            if P.substep:  # (ex_tend has one element otherwise)
                S.ex_tend[i, p] = end
            if back:  # under latency: substep the result's time is real (D34)
                due = end + P.sv_rtt[v, i] if P.substep else t + P.sv_rtt[v, i]
                if P.substep:
                    S.ex_tend[i, p] = due
                S.rq_due[i] = max(S.rq_due[i], due)
            S.ex_batch[i, p] = -1
            S.rq_ndone[i] += 1
            S.rq_acc[i] += P.sub_acc[j]
            # the slot's requested subtask (D24); a request that ended earlier in this
            # step (its batch is cancelled by the scheduler) no longer asks for one
            k = S.rq_type[i]
            if k >= 0:
                S.sv_count[P.task_sub[k, p], j] += 1
            s = S.sl_next[s]
        S.nd_jcount[v, j] -= n
        count_event(S, t, v, EV_COMPLETE, n)
        batch_free(S, b)
        return
    nph = ph + 1
    s = S.b_head[b]
    while s >= 0:
        S.ex_phase[s // P.max_slots, s % P.max_slots] = nph
        s = S.sl_next[s]
    # With carry_over (D26) batches that enter a phase in one step did so at different
    # times and have done different work in it: they stay separate.
    target = batch_born_now(S, P, v, j, nph, t) if P.batching and not P.carry_over else -1
    if target >= 0 and target != b:
        # Same node, subtask, phase and age: one batch from now on (paper 2.2).
        last = -1
        s = S.b_head[b]
        while s >= 0:
            last = s
            S.ex_batch[s // P.max_slots, s % P.max_slots] = target
            s = S.sl_next[s]
        h = S.b_head[target]
        S.sl_next[last] = h
        if h >= 0:
            S.sl_prev[h] = last
        S.b_head[target] = S.b_head[b]
        S.b_head[b] = -1
        _set_batch_size(S, P, target, S.b_size[target] + n)
        batch_free(S, b)
        return
    S.b_phase[b] = nph
    S.b_age[b] = 0
    S.b_born[b] = t
    S.b_h[b, :] = 0.0
    S.b_done[b] = 0.0
    S.b_tau[b] = -1.0
    S.b_lead[b] = 0.0
    S.b_eps[b] = draw_work_factor(S, P, j) if nph == EXECUTION else 1.0
    merge_record(S, P, b, v, j, nph, t)


@kernel
def reset_node(S, P, v, t):
    """Node v went offline: its unfinished subtasks return to idle (paper 2.2)."""
    b = S.nd_bhead[v]
    while b >= 0:
        nb = S.b_nnext[b]
        abort_batch(S, P, b, EV_RESET, t)
        b = nb


# ---- subtask-data downloads (readiness x) -----------------------------------------


@kernel
def download_start(S, P, v, j, t):
    k = S.n_dlfree[0] - 1
    d = S.dl_free[k]
    S.n_dlfree[0] = k
    S.dl_node[d] = v
    S.dl_sub[d] = j
    S.dl_age[d] = 0
    S.dl_cons[d, :] = 0.0
    S.dl_h[d, :] = 0.0
    list_add(S.dl_list, S.dl_pos, S.n_dl, d)
    S.rd_dl[v, j] = d
    S.rd_state[v, j] = LOADING
    S.nd_ndl[v] += 1
    S.rd_reserved[v] += P.sub_data_mb[j]
    S.nd_committed[v] += P.sub_dl_mem[j]
    return d


@kernel
def _download_end(S, P, d):
    v, j = S.dl_node[d], S.dl_sub[d]
    list_remove(S.dl_list, S.dl_pos, S.n_dl, d)
    S.rd_dl[v, j] = -1
    S.nd_ndl[v] -= 1
    S.nd_committed[v] -= P.sub_dl_mem[j]
    S.dl_node[d] = -1
    S.dl_free[S.n_dlfree[0]] = d
    S.n_dlfree[0] += 1


@kernel
def _add_storage(S, P, v, delta):
    S.rd_used[v] += delta
    if v >= P.n_srv:
        S.rd_usertotal[0] += delta


@kernel
def download_finish(S, P, d):
    v, j = S.dl_node[d], S.dl_sub[d]
    _download_end(S, P, d)
    _add_storage(S, P, v, P.sub_data_mb[j] - S.rd_mb[v, j])
    S.rd_mb[v, j] = P.sub_data_mb[j]
    S.rd_state[v, j] = READY
    S.rd_nready[v] += 1
    if S.online[v]:
        holder_add(S, j, v)


@kernel
def download_abort(S, P, d):
    """Drop a download and what it accumulated (executor, storage overflow)."""
    v, j = S.dl_node[d], S.dl_sub[d]
    if S.rd_state[v, j] == PAUSED:
        S.n_paused[0] -= 1
    _download_end(S, P, d)
    _add_storage(S, P, v, -S.rd_mb[v, j])
    S.rd_mb[v, j] = 0.0
    S.rd_reserved[v] -= P.sub_data_mb[j]
    S.rd_state[v, j] = EMPTY


@kernel
def evict_ready(S, P, v, j):
    """Remove ready subtask data from node v (executor, storage overflow)."""
    _add_storage(S, P, v, -S.rd_mb[v, j])
    S.rd_mb[v, j] = 0.0
    S.rd_reserved[v] -= P.sub_data_mb[j]
    S.rd_state[v, j] = EMPTY
    S.rd_nready[v] -= 1
    holder_remove(S, j, v)


@kernel
def accumulate_download(S, P, d, t):
    """One step of a running download: storage grows by band_in / 8 MB (docs/model.md)."""
    v, j = S.dl_node[d], S.dl_sub[d]
    delta = S.dl_cons[d, BAND_IN] / 8.0
    S.dl_age[d] += 1
    # The consumption factor granted at most the missing bytes; the slack absorbs rounding.
    if S.rd_mb[v, j] + delta >= P.sub_data_mb[j] * (1.0 - 1e-12):
        download_finish(S, P, d)
    else:
        S.rd_mb[v, j] += delta
        _add_storage(S, P, v, delta)


@njit(cache=True, inline="always")
def scale_to_shares(cons, a, v, nd_fac, g_in, g_out, n_srv, home):
    """Row a of `cons`, a consumer on node v, scaled to what it is granted (D9): its node's
    link and CPU factors and, on a user, its home server's link factors g_in[s] (the
    server's outbound link) and g_out[s] (its inbound one), s = home[v] (D35)."""
    cons[a, BAND_IN] *= nd_fac[v, 0]
    cons[a, BAND_OUT] *= nd_fac[v, 1]
    cons[a, CPU] *= nd_fac[v, 2]
    if v >= n_srv:
        h = home[v] if n_srv > 1 else 0  # (one server: no look-up)
        cons[a, BAND_IN] *= g_in[h]
        cons[a, BAND_OUT] *= g_out[h]


@njit(cache=True, inline="always")
def server_link_factors(alloc, u_in, u_out):
    """Each server's link factors (D9, D35): the users' downloads come from its outbound
    link, their uploads go to its inbound one; u_in[s], u_out[s] is what the users homed
    at server s ask of them."""
    ns = u_in.shape[0]
    g_in = np.ones(ns)
    g_out = np.ones(ns)
    for s in range(ns):
        if u_in[s] > alloc[s, BAND_OUT]:
            g_in[s] = alloc[s, BAND_OUT] / u_in[s]
        if u_out[s] > alloc[s, BAND_IN]:
            g_out[s] = alloc[s, BAND_IN] / u_out[s]
    return g_in, g_out


@njit(cache=True, inline="always")
def count_work(S, P, t, v, cpu_s):
    """CPU-seconds of executions node v finished (or, under progress: paper, was charged)
    in step t: the servers' or the users' (`ser_work`), and with several servers each
    one's (`ser_svwork`, D35)."""
    server = v < P.n_srv
    S.ser_work[t, 0 if server else 1] += cpu_s
    if server and S.ser_svwork.shape[0] > 0:
        S.ser_svwork[t, v] += cpu_s


@kernel
def settle_downloads(S, P, g_in, g_out):
    """What this step's running subtask-data downloads use, under either phase law (D9,
    D27): their samples scaled by their node's link and CPU factors (`S.nd_fac`) and, on
    users, by their home server's link factors g_in[s] (its outbound link) and g_out[s]
    (its inbound one); a download that completes uses only the missing bytes. Adds each to its node's
    total (`S.nd_cons`), in the order of `S.dl_run`."""
    dl_run, dl_node, dl_sub, dl_cons, nd_fac, nd_cons = S.dl_run, S.dl_node, S.dl_sub, S.dl_cons, S.nd_fac, S.nd_cons
    sub_data_mb, rd_mb, n_srv, home = P.sub_data_mb, S.rd_mb, P.n_srv, P.nd_home
    for k in range(S.n_dlrun[0]):
        d = dl_run[k]
        v = dl_node[d]
        scale_to_shares(dl_cons, d, v, nd_fac, g_in, g_out, n_srv, home)
        missing = 8.0 * (sub_data_mb[dl_sub[d]] - rd_mb[v, dl_sub[d]])
        if dl_cons[d, BAND_IN] > missing:
            dl_cons[d, BAND_IN] = missing
        for r in range(N_CRES):
            nd_cons[v, r] += dl_cons[d, r]

