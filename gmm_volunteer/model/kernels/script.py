"""Kernels of the scripted events (gmm_volunteer.model.events; docs/model.md D25).

State they use: ``av_hold[i]`` the step until which user i is held (-1: not held),
``av_sched[i]`` the state i's own availability process is in while held (1 online),
``ev_scale[v]`` the share of its CPU and memory allocation node v keeps (1: all), and
``ev_n[0]`` the number of nodes with a share below 1.
"""

from numba import njit

from gmm_volunteer.model.kernels.people import go_offline, go_online
from gmm_volunteer.model.params import CPU, MEMORY


@njit(cache=True)
def hold(S, P, nodes, online, until, t):
    """Hold the users `nodes` online (`online`) or offline until step `until`, switching
    those in the other state now (at the start of step t, before its dynamics)."""
    for i in nodes:
        if S.av_hold[i] < 0:
            S.av_sched[i] = S.online[i]
        S.av_hold[i] = until
        if online and not S.online[i]:
            S.av_since[i] = t
            go_online(S, P, i, t)
        elif not online and S.online[i]:
            S.av_since[i] = t
            go_offline(S, P, i, t)


@njit(cache=True)
def release(S, P, nodes, t):
    """End the holds of `nodes`: each user takes the state its availability process is
    in now."""
    for i in nodes:
        if S.av_hold[i] < 0:
            continue
        S.av_hold[i] = -1
        if S.av_sched[i] and not S.online[i]:
            S.av_since[i] = t
            go_online(S, P, i, t)
        elif not S.av_sched[i] and S.online[i]:
            S.av_since[i] = t
            go_offline(S, P, i, t)


@njit(cache=True)
def scale(S, nodes, factor):
    for v in nodes:
        S.ev_scale[v] = factor
    n = 0
    for v in range(S.ev_scale.size):
        n += S.ev_scale[v] != 1.0
    S.ev_n[0] = n


@njit(cache=True)
def overload_allocations(S):
    """Apply the overload shares to this step's allocations (after they are drawn)."""
    for v in range(S.ev_scale.size):
        f = S.ev_scale[v]
        if f != 1.0:
            S.alloc[v, CPU] *= f
            S.alloc[v, MEMORY] *= f
