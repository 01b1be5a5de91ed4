"""One step of the dynamics, factors 1-6 (paper 2.2), and the pool-capacity check.

The policies (factor 7) act after `dynamics_step`; `engine.Simulation` calls them one by
one, or a fused runner (`policies.runner`) runs whole chunks of steps in one kernel call.
"""


from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.kernels.allocation import step_allocations
from gmm_volunteer.model.kernels.heap import heap_count_due
from gmm_volunteer.model.kernels.consumption import step_completions, step_consumption
from gmm_volunteer.model.kernels.people import step_availability, step_requests
from gmm_volunteer.model.kernels.script import overload_allocations


@kernel
def dynamics_step(S, P, t):
    """Factors 1-6 of step t: availability, requests, allocations, consumption,
    completions (offline resets happen with availability)."""
    step_availability(S, P, t)
    S.ser_online[t] = S.n_on[0]
    if S.ser_conline.shape[0] > 0:  # several user classes (D36)
        for c in range(P.n_classes):
            S.ser_conline[t, c] = S.cl_on[c + 1]
    step_requests(S, P, t)
    S.ser_active[t] = S.n_rq[0]
    step_allocations(S, P, t)
    if S.ev_n[0] > 0:  # scripted overload (D25)
        overload_allocations(S)
    for r in range(S.alloc.shape[1]):  # the servers' total, and each one's when several (D35)
        S.ser_salloc[t, r] = S.alloc[0, r]
        for v in range(1, P.n_srv):
            S.ser_salloc[t, r] += S.alloc[v, r]
        if S.ser_svalloc.shape[0] > 0:
            for v in range(P.n_srv):
                S.ser_svalloc[t, v, r] = S.alloc[v, r]
    step_consumption(S, P, t)
    step_completions(S, P, t)


@kernel
def batch_need(rh_t, rh_n, n_rq, n_b, max_slots, t):
    """Free batches step t may take: one per unplaced slot of a request active after its
    requests factor (those active now and those whose timer is due at t: a request starts
    only when a think-time timer fires, and timers pushed during a step are due later),
    plus the existing batches. The slack of 64 once stood for the new requests; it stays
    as the floor so that pools grow when they always did."""
    due = heap_count_due(rh_t, rh_n, t)
    return n_rq * max_slots + n_b + max(64, due * max_slots)


@kernel
def needs_growth(S, P, t):
    """Whether a pool could run out during step t (`state.grow_if_needed` has the
    bounds: new batches, new downloads, ended requests, timer pushes)."""
    return (
        S.n_bfree[0] < batch_need(S.rh_t, S.rh_n, S.n_rq[0], S.n_b[0], P.max_slots, t)
        or S.n_dlfree[0] < S.n_on[0] + 64
        or S.n_lg[0] + P.n_nodes + 8 > S.lg_user.shape[0]
        or S.rh_n[0] + 2 * P.n_nodes + 8 > S.rh_t.shape[0]
    )
