"""Availability (o, d^o) and requests (q, d^q) of users (paper 2.2).

Both are semi-Markov: the discrete-time hazard S(d)/S(d-1) is sampled as a whole
duration when a state is entered (`laws.discrete_duration`, same law) and the end is a
timed event in a heap. Draws are keyed by (user, counter) so that the n-th online period
and the n-th request of a user are the same whatever the policy did; the key is the
user's number, node v - S + 1 of S servers (`user_number`), so that they are also the
same whatever the number of servers (docs/model.md D35). A state that never
ends (`laws.MAX_DURATION` steps, e.g. the config law `never`) gets no timer at all: it
could not fire in a run, and never-ending patience would otherwise leave one stale timer
per request in the heap.
"""

import numpy as np
from numba import njit

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.kernels.allocation import allocation_enter, allocation_leave
from gmm_volunteer.model.kernels.demand import warp
from gmm_volunteer.model.kernels.heap import heap_pop, heap_push
from gmm_volunteer.model.kernels.ops import (
    OUT_ABANDONED,
    OUT_COMPLETED,
    OUT_DROPPED,
    EV_CANCEL,
    holder_add,
    holder_remove,
    list_add,
    list_remove,
    release_slot,
    reset_node,
)
from gmm_volunteer.model.params import READY
from gmm_volunteer.model.rng import (
    KEY_AVAILABILITY,
    KEY_PATIENCE,
    KEY_REQUEST_TYPE,
    KEY_THINK,
    keyed_uniform,
)
from gmm_volunteer.model.laws import MAX_DURATION, discrete_duration


@njit(cache=True, inline="always")
def user_number(P, v):
    """User i of node v = S - 1 + i (S = P.n_srv servers, D35): what user draws are keyed by."""
    return v - P.n_srv + 1


@kernel
def keyed_duration(key, component, law, entity, counter):
    u1 = keyed_uniform(key, component, entity, counter, 0)
    u2 = keyed_uniform(key, component, entity, counter, 1)
    return discrete_duration(np.int64(law[0]), law[1], law[2], u1, u2)


# ---- requests ---------------------------------------------------------------------


@kernel
def start_think(S, P, i, t):
    """User i is online without a request from step t on: draw its think time."""
    S.rq_since[i] = t
    n = S.rq_nthink[i]
    S.rq_nthink[i] = n + 1
    d = keyed_duration(S.key[0], KEY_THINK, P.think_law, user_number(P, i), n)
    if S.dm_on[0]:  # time-varying request rate: the same draw, time-changed (D18)
        d = warp(S.dm_cum, t, d)
    S.rq_tok[i] += 1
    if d < MAX_DURATION:
        heap_push(S.rh_t, S.rh_v, S.rh_tok, S.rh_n, t + d, i, S.rq_tok[i])


@kernel
def end_request(S, P, i, last_step, outcome):
    """Log user i's request as ended; unfinished placements become obsolete.

    `last_step` is the last step the request was active, so latency = last - start;
    `lg_time` is when it ended, in seconds: `last_step`, or under latency: substep, for a
    completed request, when its last result came in (its slots' `ex_tend`, D34).
    """
    k = S.n_lg[0]
    S.lg_user[k] = i
    S.lg_type[k] = S.rq_type[i]
    S.lg_start[k] = S.rq_start[i]
    S.lg_end[k] = last_step
    end = float(last_step)
    if P.substep and outcome == OUT_COMPLETED:
        end = S.ex_tend[i, 0]
        for p in range(1, P.task_nsub[S.rq_type[i]]):
            end = max(end, S.ex_tend[i, p])
    S.lg_time[k] = end
    S.lg_out[k] = outcome
    # mean accuracy of the variants that served the request's slots (D24): complete
    # only for a completed request
    na = P.task_nacc[S.rq_type[i]]
    S.lg_acc[k] = S.rq_acc[i] / na if na > 0 else 0.0
    S.n_lg[0] = k + 1
    list_remove(S.rq_list, S.rq_pos, S.n_rq, i)
    # Placements stay until the scheduler cancels them (paper 2.3: it "cancels obsolete
    # executions"); the obsolete list tells it whom to look at.
    for p in range(P.max_slots):
        if S.ex_node[i, p] >= 0:
            S.obs_list[S.n_obs[0]] = i
            S.n_obs[0] += 1
            break
    S.rq_type[i] = -1


@kernel
def clear_slots(S, P, i, t):
    for p in range(P.max_slots):
        release_slot(S, P, i, p, EV_CANCEL, t)


@kernel
def _start_request(S, P, i, t):
    n = S.rq_count[i]
    S.rq_count[i] = n + 1
    u = keyed_uniform(S.key[0], KEY_REQUEST_TYPE, user_number(P, i), n, 0)
    k = 0
    while k < P.n_task - 1 and u > P.type_cum[k]:
        k += 1
    clear_slots(S, P, i, t)  # placements of a previous request that no policy cancelled
    S.rq_type[i] = k
    S.rq_start[i] = t
    S.rq_since[i] = t
    S.rq_ndone[i] = 0
    S.rq_acc[i] = 0.0
    if P.rtt_on:  # no server result on its way yet (D39)
        S.rq_due[i] = 0.0
    list_add(S.rq_list, S.rq_pos, S.n_rq, i)
    d = keyed_duration(S.key[0], KEY_PATIENCE, P.patience_law, user_number(P, i), n)
    S.rq_tok[i] += 1
    if d < MAX_DURATION:  # unbounded patience: the request cannot be abandoned
        heap_push(S.rh_t, S.rh_v, S.rh_tok, S.rh_n, t + d, i, S.rq_tok[i])


@kernel
def step_requests(S, P, t):
    """Factor q_t: think times end in new requests, patience ends in abandonment."""
    while S.rh_n[0] > 0 and S.rh_t[0] <= t:
        _, i, tok = heap_pop(S.rh_t, S.rh_v, S.rh_tok, S.rh_n)
        if tok != S.rq_tok[i] or not S.online[i]:
            continue  # stale timer: the request completed or the user left
        if S.rq_type[i] < 0:
            _start_request(S, P, i, t)
        else:
            end_request(S, P, i, t - 1, OUT_ABANDONED)
            start_think(S, P, i, t)


# ---- availability -----------------------------------------------------------------


@kernel
def go_offline(S, P, i, t):
    S.online[i] = 0
    S.cl_on[S.node_class[i]] -= 1
    allocation_leave(S, P, i, t)
    list_remove(S.on_list, S.on_pos, S.n_on, i)
    if S.rq_type[i] >= 0:
        end_request(S, P, i, t - 1, OUT_DROPPED)
    S.rq_tok[i] += 1  # invalidates its think-time or patience timer
    reset_node(S, P, i, t)
    for j in range(P.n_sub):
        if S.rd_state[i, j] == READY:
            holder_remove(S, j, i)
        elif S.rd_dl[i, j] >= 0:  # a frozen download consumes nothing
            S.dl_cons[S.rd_dl[i, j], :] = 0.0
    S.alloc[i, :] = 0.0


@kernel
def go_online(S, P, i, t):
    S.online[i] = 1
    S.cl_on[S.node_class[i]] += 1
    list_add(S.on_list, S.on_pos, S.n_on, i)
    for j in range(P.n_sub):
        if S.rd_state[i, j] == READY:
            holder_add(S, j, i)
    allocation_enter(S, P, i, t)
    start_think(S, P, i, t)


@kernel
def step_availability(S, P, t):
    """Factor (d^o, o): users whose online/offline period ends at t switch state, each
    drawing its next period from its class's laws (D36)."""
    while S.ah_n[0] > 0 and S.ah_t[0] <= t:
        _, i, _ = heap_pop(S.ah_t, S.ah_v, S.ah_t, S.ah_n)
        n = S.av_count[i] + 1
        S.av_count[i] = n
        if S.av_hold[i] > t:  # held by a scripted event (D25): only its process switches
            going_off = S.av_sched[i] == 1
            S.av_sched[i] = 0 if going_off else 1
        else:
            S.av_since[i] = t
            going_off = S.online[i] == 1
            if going_off:
                go_offline(S, P, i, t)
            else:
                go_online(S, P, i, t)
        if going_off:
            d = keyed_duration(S.key[0], KEY_AVAILABILITY, P.off_law[S.node_class[i]], user_number(P, i), n)
            if S.dm_on[1]:  # time-varying rate of coming online (D18)
                d = warp(S.dm_cum, t, d)
        else:
            d = keyed_duration(S.key[0], KEY_AVAILABILITY, P.on_law[S.node_class[i]], user_number(P, i), n)
        if d < MAX_DURATION:
            heap_push(S.ah_t, S.ah_v, S.ah_t, S.ah_n, t + d, i, t + d)
