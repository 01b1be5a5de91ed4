"""Executing batches in arrival order on a node (docs/model.md D28, `execution.discipline:
fifo`; paper 2.2, execution states y; 2.3, the executor on each node).

Under processor sharing (`consumption.cpu_share_time`, the default) every executing
batch on a node runs at once and the node's CPU is divided among them. An inference
runtime runs its batches from a queue instead: `P.fifo` (= `execution.concurrency`, k)
batches at a time, in the order they entered execution; the others wait, make no
progress, are granted no CPU and keep the memory they hold. A batch that finishes inside
the step hands the rest of the step to the next one in the queue (work-conserving, as
`cpu_share_time` is). The node's other CPU consumers (transfers, subtask-data downloads)
share the CPU proportionally with the batches that run, as under processor sharing.
"""

import numpy as np

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.kernels.ops import phase_end_wanted, phase_work
from gmm_volunteer.model.params import CPU, EXECUTION


@kernel
def fifo_share_time(S, P, v, capacity, demand):
    """Node v's CPU in this step under `discipline: fifo`. Sets `S.b_share[b]` for each
    batch executing on v: the fraction of its demand it used (0 while it waits; its
    remaining work / its demand, exactly, when it finishes in the step, so that the
    caller's test `need / demand <= share` holds), and with carry_over or latency:
    substep `S.b_tau[b]`, when in the step a finishing batch ended (D26, D34). Returns the virtual time of the node's
    other CPU consumers: the integral over the step of phi = min(1, capacity / demand of
    the consumers running), each of them using that times its demand.

    Queue order: the step the batch entered execution (`b_born`), then its pool id (the
    batches that entered in one step are simultaneous at the step's resolution; the pool
    id orders them deterministically)."""
    n = 0
    b = S.nd_bhead[v]
    while b >= 0:
        if S.b_phase[b] == EXECUTION:
            n += 1
        b = S.b_nnext[b]
    ids = np.empty(n, np.int64)
    key = np.empty(n, np.int64)
    cap_ids = np.int64(S.b_node.shape[0])
    background = demand  # the demand of the consumers that are not executing batches
    n = 0
    b = S.nd_bhead[v]
    while b >= 0:
        if S.b_phase[b] == EXECUTION:
            ids[n] = b
            key[n] = S.b_born[b] * cap_ids + b
            background -= S.b_cons[b, CPU]
            n += 1
        b = S.b_nnext[b]
    background = max(background, 0.0)
    order = np.argsort(key, kind="mergesort")
    b_share, b_cons, b_tau = S.b_share, S.b_cons, S.b_tau
    work = np.empty(n)  # remaining work of each queued batch (CPU %-s)
    got = np.zeros(n)  # CPU granted to it in the step so far (%-s)
    for i in range(n):
        b = ids[i]
        work[i] = (1.0 - S.b_done[b]) * phase_work(S, P, b)
        b_share[b] = 0.0
    k = min(P.fifo, n)
    run = np.empty(max(k, 1), np.int64)  # positions in `ids` of the batches running
    for i in range(k):
        run[i] = order[i]
    n_run = k
    nxt = k  # the next in the queue
    elapsed = 0.0  # real time of the step used so far
    vt = 0.0  # virtual time of the other consumers
    for _ in range(n + 1):  # each pass ends the step or settles one finishing batch
        rest = background
        for a in range(n_run):
            rest += b_cons[ids[run[a]], CPU]
        phi = min(1.0, capacity / rest) if rest > 0.0 else 1.0
        first = -1  # the running batch that finishes first, and after how long
        dt = 0.0
        for a in range(n_run):
            i = run[a]
            rate = phi * b_cons[ids[i], CPU]
            if rate > 0.0 and (first < 0 or (work[i] - got[i]) / rate < dt):
                dt = (work[i] - got[i]) / rate
                first = a
        if first < 0 or elapsed + dt >= 1.0:  # nobody else finishes in the step
            span = 1.0 - elapsed
            for a in range(n_run):
                i = run[a]
                got[i] += phi * b_cons[ids[i], CPU] * span
            vt += phi * span
            break
        for a in range(n_run):
            i = run[a]
            got[i] += phi * b_cons[ids[i], CPU] * dt
        vt += phi * dt
        elapsed += dt
        i = run[first]
        b = ids[i]
        b_share[b] = work[i] / b_cons[b, CPU]  # finished: its remaining work, exactly
        got[i] = -1.0  # settled
        if phase_end_wanted(P):
            b_tau[b] = elapsed
        if nxt < n:  # the next in the queue takes its place for the rest of the step
            run[first] = order[nxt]
            nxt += 1
        else:
            n_run -= 1
            run[first] = run[n_run]
    for i in range(n):
        b = ids[i]
        if got[i] > 0.0 and b_cons[b, CPU] > 0.0:
            b_share[b] = min(got[i] / b_cons[b, CPU], work[i] / b_cons[b, CPU])
    return min(1.0, vt)


@kernel
def fifo_turn(S, P, v, b):
    """Whether batch b, entering execution on node v inside the step (carry_over, D26),
    runs at once under `discipline: fifo`: fewer than k other batches on v are executing
    and not yet done (those are ahead of it in the queue)."""
    busy = 0
    x = S.nd_bhead[v]
    while x >= 0:
        if x != b and S.b_phase[x] == EXECUTION and S.b_done[x] < 1.0:
            busy += 1
        x = S.b_nnext[x]
    return busy < P.fifo
