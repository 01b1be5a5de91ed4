"""Phase ends drawn from the fitted hazards: `execution.progress: paper` (paper 2.2 as
written; docs/model.md D27).

The sampling of consumption is shared with the work law (`consumption.step_consumption`);
what differs is how a step is settled. Under this law every active batch is charged its
sampled consumption for the whole step; a node whose CPU demand exceeds its allocation
scales every CPU consumer down by allocation / demand (no work conservation: there is no
work to finish early), transfers are scaled to the node's and the server's links as under
the work law; then each batch draws once whether its phase ends, from the bundle's
discrete-time logistic hazard of its phase (fitting/hazard.py) with the scaled
consumption of the phase's resource, its size and its age as covariates (or, in the
work-fraction form, the fraction of its work done, D32). A batch is the
subtasks of one node, subtask and phase that entered it in the same step (D8), so one
draw per batch and step is the paper's shared completion draw.
"""

import numpy as np
from numba import njit

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.kernels.ops import count_work, scale_to_shares, server_link_factors, settle_downloads
from gmm_volunteer.model.params import BAND_IN, BAND_OUT, CPU, DOWNLOAD, EXECUTION, MAX_BATCH_TABLE, N_CRES
from gmm_volunteer.model.rng import STREAM_HAZARD, uniform


@njit(cache=True, inline="always")
def _times(term, z, e):
    """term * z**e, multiplied one factor at a time (degrees up to 3 unrolled)."""
    if e > 0:
        term *= z
        if e > 1:
            term *= z
            if e > 2:
                term *= z
                for _ in range(e - 3):
                    term *= z
    return term


@kernel
def _hazard_work(P, m, size):
    """W_m(n) of the work-fraction form (D32): the table, linear beyond it."""
    if size <= MAX_BATCH_TABLE:
        return P.hz_work[m, size]
    top = P.hz_work[m, MAX_BATCH_TABLE]
    return top + (top - P.hz_work[m, MAX_BATCH_TABLE - 1]) * (size - MAX_BATCH_TABLE)


@kernel
def hazard(P, h, m, cons, size, age):
    """Probability that a batch of subtask type m (the bundle's), size `size` and age
    `age` (steps in its phase before this one) ends phase h (0 input download, 1
    execution, 2 result upload) in this step, consuming `cons` of the phase's resource:
    link(h) = intercept + type effect + sum_f (coef_f + type deviation_mf) z0^a z1^b z2^c,
    with z the covariates standardized by the fit's means and sds (paper 2.2;
    fitting/hazard.py; docs/model.md D32). Paper form: (cons, size or log size,
    log(age + 1)); work-fraction form: (log of the step's fraction of the work W_m(size),
    -, log of the fraction done after the step). The size is clamped to `P.hz_nmax`
    (infinite unless `hazard_batch_size: clamp`)."""
    n = min(float(size), P.hz_nmax)
    if P.hz_form[h] == 1:
        step = max(cons / 100.0 / _hazard_work(P, m, int(n)), 1e-6)
        x0 = np.log(step)
        x2 = np.log(max((age + 1.0) * step, 1e-6))
    else:
        x0 = cons
        x2 = P.hz_logage[age] if age < P.hz_logage.size else np.log(age + 1.0)
    x1 = np.log(n) if P.hz_logn[h] else n
    zc = (x0 - P.hz_cm[h, 0]) / P.hz_cs[h, 0]
    zn = (x1 - P.hz_cm[h, 1]) / P.hz_cs[h, 1]
    zl = (x2 - P.hz_cm[h, 2]) / P.hz_cs[h, 2]
    x = P.hz_icpt[h] + P.hz_type[h, m]
    for f in range(P.hz_nterms[h]):
        term = _times(P.hz_coef[h, f] + P.hz_tdev[h, m, f], zc, P.hz_terms[h, f, 0])
        term = _times(term, zn, P.hz_terms[h, f, 1])
        x += _times(term, zl, P.hz_terms[h, f, 2])
    if P.hz_link[h] == 1:  # complementary log-log: 1 - exp(-exp(x))
        return -np.expm1(-np.exp(min(x, 30.0)))
    if x >= 0.0:
        return 1.0 / (1.0 + np.exp(-x))
    ex = np.exp(x)
    return ex / (1.0 + ex)


@kernel
def settle_by_hazard(S, P, t):
    """The step's shares, charges and phase-end draws under `progress: paper`, after the
    samples of `step_consumption` (node totals of the demands in `S.nd_cons`). Leaves in
    `S.nd_cons` what each node used, as the work law does, and records the server's CPU
    demand before its share and its active batches (`S.ser_demand`)."""
    alloc, nd_cons, nd_fac = S.alloc, S.nd_cons, S.nd_fac
    S.ser_demand[t, 0] = nd_cons[0, CPU] if S.nd_tstamp[0] == t else 0.0
    for v in range(1, P.n_srv):  # the servers' total (D35)
        S.ser_demand[t, 0] += nd_cons[v, CPU] if S.nd_tstamp[v] == t else 0.0
    # Node factors: every consumer of an overcommitted resource gets allocation / demand
    # of what it asked, CPU included (paper 2.2: proportional downscaling).
    ns, home = P.n_srv, P.nd_home
    u_in = np.zeros(ns)  # what the users homed at each server ask of its links (D35)
    u_out = np.zeros(ns)
    for k in range(S.n_touched[0]):
        v = S.nd_touched[k]
        for f, r in ((0, BAND_IN), (1, BAND_OUT), (2, CPU)):
            c = nd_cons[v, r]
            nd_fac[v, f] = alloc[v, r] / c if c > alloc[v, r] else 1.0
        if v >= ns:
            h = home[v] if ns > 1 else 0
            u_in[h] += nd_cons[v, BAND_IN] * nd_fac[v, 0]
            u_out[h] += nd_cons[v, BAND_OUT] * nd_fac[v, 1]
    g_in, g_out = server_link_factors(alloc, u_in, u_out)
    for k in range(S.n_touched[0]):
        v = S.nd_touched[k]
        for r in range(N_CRES):
            nd_cons[v, r] = 0.0
    b_list, b_node, b_phase, b_cons = S.b_list, S.b_node, S.b_phase, S.b_cons
    server_batches = 0
    for k in range(S.n_b[0]):
        b = b_list[k]
        v = b_node[b]
        scale_to_shares(b_cons, b, v, nd_fac, g_in, g_out, ns, home)
        server_batches += v < ns
        h = b_phase[b] - DOWNLOAD
        # the scaled consumption is what the hazard sees: an overcommitted node's batches
        # consume less, and (where the fitted effect is positive) end their phase later
        p = hazard(P, h, P.sub_type[S.b_sub[b]], b_cons[b, P.hz_res[h]], S.b_size[b], S.b_age[b])
        if uniform(S.rng, STREAM_HAZARD) < p:
            S.b_done[b] = 1.0
        if b_phase[b] == EXECUTION:  # the CPU-seconds charged to executions in the step
            S.nd_work[v] += b_cons[b, CPU] / 100.0
            count_work(S, P, t, v, b_cons[b, CPU] / 100.0)
        for r in range(N_CRES):
            nd_cons[v, r] += b_cons[b, r]
    S.ser_demand[t, 1] = server_batches
    # Subtask-data downloads fill storage as under the work law (D7)
    settle_downloads(S, P, g_in, g_out)
