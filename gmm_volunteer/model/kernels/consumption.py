"""Consumption c_t and phase completions d^x, d^y (paper 2.2), with progress from the
resources granted (docs/model.md, "Progress from granted resources").

Each active batch and each running subtask-data download carries its own ARMA history
per consumed resource; its value, rescaled with scaling statistics interpolated (IDW) at
its level (batch size, or the node's current bandwidth allocation), is what it asks for
in the step. The node then grants shares: transfers divide the node's bandwidth and the
server's proportionally; CPU is shared proportionally to the demands and is
work-conserving inside the step (a batch that finishes early hands its share to the
others for the rest of the step). A phase needs work (`ops.phase_work`: CPU-seconds to
execute, megabits to transfer) and advances by what it was granted; it completes when
its work is done, so work completed never exceeds the resources granted. Consumption is
recorded as used (a finishing batch uses only what it needed); memory is never scaled:
it is a hard limit the executor enforces, and c_t is recorded before it acts.
"""

import numpy as np
from numba import njit

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.kernels.arma import arma_value, idw_weights
from gmm_volunteer.model.kernels.fifo import fifo_share_time, fifo_turn
from gmm_volunteer.model.kernels.hazard import settle_by_hazard
from gmm_volunteer.model.kernels.ops import (
    accumulate_download, batch_advance, count_work, phase_end_wanted, phase_work, server_link_factors,
    settle_downloads,
)
from gmm_volunteer.model.rng import STREAM_CONSUMPTION, fill_normals
from gmm_volunteer.model.params import (
    BAND_IN,
    BAND_OUT,
    CPU,
    DOWNLOAD,
    EXECUTION,
    LEVEL_BAND_IN,
    LEVEL_BAND_OUT,
    LEVEL_BATCH,
    LOADING,
    MAX_BATCH_TABLE,
    MEMORY,
    N_CRES,
    STORAGE,
    UPLOAD,
)

STAGE_DATA = 0
# `cpu_share_time` walks the consumers in order of u = remaining work / demand (seconds at
# full demand) and stops at the first that does not finish in the step. One with u > FAR
# never does: while the walk goes on the virtual time vt <= the real time elapsed < 1 (phi
# <= 1), so it would need (u - vt) / phi > 2 - 1 = 1 more second. FAR = 2, not 1, leaves a
# margin far above rounding; any FAR >= 1 gives the same results as sorting them all.
FAR = 2.0


@njit(cache=True, inline="always")
def _touch(S, v, t):
    if S.nd_tstamp[v] != t:
        S.nd_tstamp[v] = t
        S.nd_touched[S.n_touched[0]] = v
        S.n_touched[0] += 1
        for r in range(N_CRES):
            S.nd_cons[v, r] = 0.0


@njit(cache=True, inline="always")
def _level(S, P, stage, v, size):
    kind = P.level_kind[stage]
    if kind == LEVEL_BATCH:
        return float(size)
    if kind == LEVEL_BAND_IN:
        return S.alloc[v, BAND_IN]
    return S.alloc[v, BAND_OUT]


@njit(cache=True, inline="always")
def _remaining(S, P, b):
    """Work batch b still needs in its phase (CPU %-s or Mbit)."""
    return (1.0 - S.b_done[b]) * phase_work(S, P, b)


@njit(cache=True, inline="always")
def _share_time_one(u, d, capacity, demand):
    """`cpu_share_time`'s loop for a single executing consumer (same arithmetic)."""
    elapsed = 0.0
    vt = 0.0
    rest = demand
    phi = min(1.0, capacity / rest) if rest > 0.0 else 1.0
    dt = (u - vt) / phi
    if elapsed + dt >= 1.0:
        return vt + (1.0 - elapsed) * phi
    elapsed += dt
    vt = u
    rest -= d
    if rest <= 1e-12 * demand:
        return 1.0
    return min(1.0, vt + (1.0 - elapsed) * min(1.0, capacity / rest))


@kernel
def batch_cpu(S, P, v):
    """The CPU node v's batches may use in a step: its allocation, a user's less what
    its own process takes outside executions (`execution.volunteer_overhead_cpu`, D31;
    0 subtracts nothing)."""
    if v < P.n_srv:
        return S.alloc[v, CPU]
    return max(S.alloc[v, CPU] - P.vol_overhead, 0.0)


@kernel
def cpu_share_time(S, P, v, capacity, demand):
    """Virtual time of node v's CPU in this step under proportional, work-conserving
    sharing: every CPU consumer on v progresses at phi * its demand, phi = min(1,
    capacity / demand still present), and an executing batch leaves when its remaining
    work is done, returning its share to the others. Returns V in [0, 1]: a consumer
    that asks d and has not finished used V * d; an executing batch finished iff its
    remaining work / its demand <= V. (With demand <= capacity, V = 1.)"""
    if demand <= capacity:
        return 1.0
    if capacity <= 0.0:  # no share, no progress
        return 0.0
    # One walk counts the executing consumers and keeps the first; a node usually has one
    # (volunteers), and then no arrays are needed.
    n = 0
    first = -1
    b = S.nd_bhead[v]
    while b >= 0:
        if S.b_phase[b] == EXECUTION and S.b_cons[b, CPU] > 0.0:
            if n == 0:
                first = b
            n += 1
        b = S.b_nnext[b]
    if n == 1:
        u1 = _remaining(S, P, first) / S.b_cons[first, CPU]
        if phase_end_wanted(P):  # when in the step it finishes, if it does (D26, D34)
            f1 = u1 / min(1.0, capacity / demand)
            if f1 < 1.0:
                S.b_tau[first] = f1
        return _share_time_one(u1, S.b_cons[first, CPU], capacity, demand)
    # Only the consumers that could finish inside the step are sorted: with u > FAR the
    # walk below always stops before reaching them (see FAR), so leaving them out of the
    # sort changes no result; where many batches share a node (a long queue under
    # processor sharing) most are far from done and the sort stays short.
    u = np.empty(n)
    d = np.empty(n)
    timed = phase_end_wanted(P)
    ids = np.empty(n if timed else 0, np.int64)  # finishing batches' ids, for b_tau
    n = 0
    n_far = 0
    b = S.nd_bhead[v]
    while b >= 0:
        if S.b_phase[b] == EXECUTION and S.b_cons[b, CPU] > 0.0:
            ub = _remaining(S, P, b) / S.b_cons[b, CPU]
            if ub > FAR:
                n_far += 1
            else:
                u[n] = ub
                d[n] = S.b_cons[b, CPU]
                if timed:
                    ids[n] = b
                n += 1
        b = S.b_nnext[b]
    u = u[:n]
    order = np.argsort(u, kind="mergesort")
    elapsed = 0.0  # real time of the step used so far
    vt = 0.0  # virtual time: seconds of progress at full demand
    rest = demand  # demand of the consumers still present
    for k in range(n):
        i = order[k]
        phi = min(1.0, capacity / rest) if rest > 0.0 else 1.0
        dt = (u[i] - vt) / phi
        if elapsed + dt >= 1.0:
            return vt + (1.0 - elapsed) * phi
        elapsed += dt
        if timed:  # consumer i finishes at real time `elapsed` (D26, D34)
            S.b_tau[ids[i]] = elapsed
        vt = u[i]
        rest -= d[i]
    if n_far > 0:  # the next consumer in u order is far: the walk stops there (FAR)
        phi = min(1.0, capacity / rest) if rest > 0.0 else 1.0
        return vt + (1.0 - elapsed) * phi
    if rest <= 1e-12 * demand:  # every consumer finished inside the step
        return 1.0
    return min(1.0, vt + (1.0 - elapsed) * min(1.0, capacity / rest))


@kernel
def step_consumption(S, P, t):
    """Factor c_t: sample demands, grant shares, advance work; record server and user
    totals of what was used."""
    S.n_touched[0] = 0
    w = np.empty(P.levels.shape[1])
    # Running downloads (node online, readiness LOADING), in download-list order, go to
    # dl_run: the sampling, the later passes and the completions visit only them.
    dl_list, dl_node, dl_sub, dl_cons, rd_state, online = S.dl_list, S.dl_node, S.dl_sub, S.dl_cons, S.rd_state, S.online
    dl_run = S.dl_run
    n_run = 0
    # (Paused and frozen downloads had their consumption set to zero when they stopped.)
    for k in range(S.n_dl[0]):
        d = dl_list[k]
        if online[dl_node[d]] and rd_state[dl_node[d], dl_sub[d]] == LOADING:
            dl_run[n_run] = d
            n_run += 1
    # The innovations of every sample of this step, drawn as one block in the order the
    # samples use them (batches, then downloads; modelled resources in order).
    n_has = P.cs_nhas
    b_list, b_node, b_phase, b_sub, b_size, b_born = S.b_list, S.b_node, S.b_phase, S.b_sub, S.b_size, S.b_born
    n_eps = n_run * n_has[STAGE_DATA]
    for k in range(S.n_b[0]):
        n_eps += n_has[b_phase[b_list[k]]]
    nrm = S.cs_normals
    fill_normals(S.rng, STREAM_CONSUMPTION, nrm, n_eps)
    # The samples, each batch's and then each running download's: statistics
    # IDW-interpolated (`arma.idw_weights`) at the level clamped to the measured range (IDW
    # does not extrapolate); batch-size levels up to MAX_BATCH_TABLE looked up in
    # `P.bt_mean`/`P.bt_sd`, which hold the same interpolation; the bandwidth a transfer
    # uses interpolated as a fraction of its level and rescaled to the node's actual level,
    # so a node with twice the bandwidth transfers twice as fast (docs/model.md); then the
    # recursion of `arma.arma_next` and `arma.arma_value`. Written out here with every
    # array bound once before the loops. numba counts references to
    # the arrays of the state and the parameters: each `S.x` or `P.x` read, or array
    # passed to a call, in a loop costs a pair of atomic operations per iteration, which
    # took more time than the arithmetic (docs/model.md, "Speed"). Same arithmetic, same
    # order. Each sample is added to its node's total as it is drawn (a node's total is
    # zeroed when the step first meets it): the sums and order of a pass over the batches
    # and then the downloads after the sampling.
    n_levels, knots, level_kind, st_mean, st_sd, has = P.n_levels, P.levels, P.level_kind, P.st_mean, P.st_sd, P.cs_has
    cs_ar, cs_ma, bt_mean, bt_sd, cs_sigma, cs_p, cs_q = P.cs_ar, P.cs_ma, P.bt_mean, P.bt_sd, P.cs_sigma, P.cs_p, P.cs_q
    cs_yoff, cs_ymask, cs_eoff, cs_emask = P.cs_yoff, P.cs_ymask, P.cs_eoff, P.cs_emask
    cs_zm, cs_zsd, cs_lam, idw_power, sub_type = P.cs_zm, P.cs_zsd, P.cs_lam, P.idw_power, P.sub_type
    b_h, b_cons, nd_cons, alloc, dl_h, dl_age = S.b_h, S.b_cons, S.nd_cons, S.alloc, S.dl_h, S.dl_age
    nd_tstamp, nd_touched, n_touched = S.nd_tstamp, S.nd_touched, S.n_touched
    rtt_on, nd_rtt, b_age, b_lead, ns = P.rtt_on, P.nd_rtt, S.b_age, S.b_lead, P.n_srv
    n_b = S.n_b[0]
    at = 0
    for src in range(2):  # 0: the active batches, 1: the running downloads
        hist, out, n_src = (b_h, b_cons, n_b) if src == 0 else (dl_h, dl_cons, n_run)
        for k in range(n_src):
            if src == 0:
                a = b_list[k]
                v = b_node[a]
                stage = b_phase[a]  # phases 1..3 use consumption stages 1..3
                size = b_size[a]
                m = sub_type[b_sub[a]]
                pos = t - b_born[a]
            else:
                a = dl_run[k]
                v = dl_node[a]
                stage = STAGE_DATA
                size = 1
                m = sub_type[dl_sub[a]]
                pos = dl_age[a]
            if nd_tstamp[v] != t:  # `_touch`
                nd_tstamp[v] = t
                nd_touched[n_touched[0]] = v
                n_touched[0] += 1
                for r in range(N_CRES):
                    nd_cons[v, r] = 0.0
            kind = level_kind[stage]  # `_level`
            if kind == LEVEL_BATCH:
                level = float(size)
            elif kind == LEVEL_BAND_IN:
                level = alloc[v, BAND_IN]
            else:
                level = alloc[v, BAND_OUT]
            nl = n_levels[stage]
            tabulated = kind == LEVEL_BATCH and size <= MAX_BATCH_TABLE
            if not tabulated:  # `idw_weights` at the level clamped to the knots
                q = min(max(level, knots[stage, 0]), knots[stage, nl - 1])
                exact = -1
                for i in range(nl):
                    dq = abs(q - knots[stage, i])
                    if dq < 1e-12:
                        exact = i
                        break
                    w[i] = 1.0 / (dq * dq) if idw_power == 2.0 else 1.0 / dq**idw_power
                if exact >= 0:
                    for i in range(nl):
                        w[i] = 0.0
                    w[exact] = 1.0
                else:
                    sw = 0.0
                    for i in range(nl):
                        sw += w[i]
                    for i in range(nl):
                        w[i] /= sw
            band = BAND_IN if kind == LEVEL_BAND_IN else (BAND_OUT if kind == LEVEL_BAND_OUT else -1)
            for r in range(N_CRES):
                if not has[stage, r]:
                    out[a, r] = 0.0
                    continue
                mean = 0.0
                sd = 0.0
                if tabulated:
                    mean = bt_mean[stage, m, size, r]
                    sd = bt_sd[stage, m, size, r]
                elif r == band:
                    for l in range(nl):
                        mean += w[l] * st_mean[stage, m, r, l] / knots[stage, l]
                        sd += w[l] * st_sd[stage, m, r, l] / knots[stage, l]
                    mean *= level
                    sd *= level
                else:
                    for l in range(nl):
                        mean += w[l] * st_mean[stage, m, r, l]
                        sd += w[l] * st_sd[stage, m, r, l]
                eps = cs_sigma[stage, r] * nrm[at]
                at += 1
                # `arma_next`
                p, qq = cs_p[stage, r], cs_q[stage, r]
                yo, ym, eo, em = cs_yoff[stage, r], cs_ymask[stage, r], cs_eoff[stage, r], cs_emask[stage, r]
                z = eps
                for i in range(p):
                    z += cs_ar[stage, r, i] * hist[a, yo + ((pos - 1 - i) & ym)]
                for j in range(qq):
                    z += cs_ma[stage, r, j] * hist[a, eo + ((pos - 1 - j) & em)]
                if p > 0:
                    hist[a, yo + (pos & ym)] = z
                if qq > 0:
                    hist[a, eo + (pos & em)] = eps
                val = arma_value(z, cs_zm[stage, r], cs_zsd[stage, r], cs_lam[stage, r], mean, sd)
                out[a, r] = val if val > 0.0 else 0.0
            if rtt_on and v >= ns and stage != EXECUTION:
                # A user's transfer moves no data for the first rtt seconds of its phase (or
                # of its download), the round trip to its home server (D35): of this step,
                # the part after it. Before the node's shares, so the link goes to those moving.
                # (a batch's phase carried into its first step had a lead of it, D26)
                wait = nd_rtt[v] - (b_age[a] + b_lead[a] if src == 0 else dl_age[a])
                if wait > 0.0:
                    r = BAND_OUT if src == 0 and stage == UPLOAD else BAND_IN
                    out[a, r] *= 0.0 if wait >= 1.0 else 1.0 - wait
            for r in range(N_CRES):
                nd_cons[v, r] += out[a, r]
    S.n_dlrun[0] = n_run
    if P.paper_progress:  # phase ends by hazard draws, whole steps charged (D27)
        settle_by_hazard(S, P, t)
        record_consumption(S, P, t)
        return
    # Node-level shares: concurrent transfers divide the node's bandwidth; the CPU factor
    # is the node's virtual time (cpu_share_time), the share of a consumer that does not
    # finish inside the step (1 when the node's CPU demand fits: no call needed). Under
    # discipline: fifo (D28) the executing batches run in arrival order and each has its
    # own factor (`b_share`); the node's is that of its other consumers.
    nd_fac, home = S.nd_fac, P.nd_home
    fifo = P.fifo > 0
    u_in = np.zeros(ns)  # what the users homed at each server ask of its links (D35)
    u_out = np.zeros(ns)
    for k in range(n_touched[0]):
        v = nd_touched[k]
        for f, r in ((0, BAND_IN), (1, BAND_OUT)):
            c = nd_cons[v, r]
            nd_fac[v, f] = alloc[v, r] / c if c > alloc[v, r] else 1.0
        cap, dem = batch_cpu(S, P, v), nd_cons[v, CPU]
        if fifo:
            nd_fac[v, 2] = fifo_share_time(S, P, v, cap, dem)
        else:
            nd_fac[v, 2] = 1.0 if dem <= cap else cpu_share_time(S, P, v, cap, dem)
        if v >= ns:
            h = home[v] if ns > 1 else 0  # (one server: no look-up, a cache miss at scale)
            u_in[h] += nd_cons[v, BAND_IN] * nd_fac[v, 0]
            u_out[h] += nd_cons[v, BAND_OUT] * nd_fac[v, 1]
    g_in, g_out = server_link_factors(alloc, u_in, u_out)
    # The node totals of what is used, added as each consumer's use is settled
    # (batches, then downloads, as the samples were).
    for k in range(n_touched[0]):
        v = nd_touched[k]
        for r in range(N_CRES):
            nd_cons[v, r] = 0.0
    b_done, b_eps, nd_work, wk_mean, wk_vol = S.b_done, S.b_eps, S.nd_work, P.wk_mean, P.wk_vol
    b_tau, carry, b_share, node_class = S.b_tau, P.carry_over, S.b_share, S.node_class
    timed = phase_end_wanted(P)
    sub_in_mb, sub_out_mb = P.sub_in_mb, P.sub_out_mb
    for k in range(n_b):
        b = b_list[k]
        v = b_node[b]
        # The CPU demand before the share: an executing batch finishes iff its remaining
        # work takes at most the node's virtual time at full demand.
        demand = b_cons[b, CPU]
        ph = b_phase[b]
        fc = b_share[b] if fifo and ph == EXECUTION else nd_fac[v, 2]  # its CPU factor
        # `ops.scale_to_shares`: the node's factors, and for a user's transfers its home
        # server's
        b_cons[b, BAND_IN] *= nd_fac[v, 0]
        b_cons[b, BAND_OUT] *= nd_fac[v, 1]
        b_cons[b, CPU] *= fc
        if v >= ns:
            h = home[v] if ns > 1 else 0
            b_cons[b, BAND_IN] *= g_in[h]
            b_cons[b, BAND_OUT] *= g_out[h]
        r = CPU if ph == EXECUTION else (BAND_IN if ph == DOWNLOAD else BAND_OUT)
        # `_remaining`: (1 - done) x the phase's work (`ops.phase_work`)
        j, n = b_sub[b], b_size[b]
        if ph == EXECUTION:
            if n <= MAX_BATCH_TABLE:  # `ops.work_mean`
                wm = wk_mean[j, n]
            else:
                top = wk_mean[j, MAX_BATCH_TABLE]
                wm = top + (top - wk_mean[j, MAX_BATCH_TABLE - 1]) * (n - MAX_BATCH_TABLE)
            if v >= ns:  # a server's row is 1: skipped, as before classes (D36)
                wm *= wk_vol[node_class[v], j]
            work = 100.0 * wm * b_eps[b]
        elif ph == DOWNLOAD:
            work = 8.0 * n * sub_in_mb[j]
        else:
            work = 8.0 * n * sub_out_mb[j]
        need = (1.0 - b_done[b]) * work
        if ph == EXECUTION:
            done = demand > 0.0 and need / demand <= fc
        else:
            done = need <= b_cons[b, r]
        if timed:  # when in the step the phase ends: for the next phase to use the rest
            # (carry_over, D26) and for the subtask's and the request's end times (D34)
            if not done:
                tau = -1.0
            elif ph != EXECUTION:
                tau = need / b_cons[b, r] if need > 0.0 else 0.0
                if rtt_on and v >= ns:  # the data moved after the round trip's wait (D35)
                    w = nd_rtt[v] - b_age[b] - b_lead[b]
                    if w > 0.0:
                        tau = w + (1.0 - w) * tau
            elif b_tau[b] >= 0.0:  # set by cpu_share_time on a node short of CPU, or fifo
                tau = b_tau[b]
            else:
                tau = min(1.0, need / demand / fc)
            b_tau[b] = tau
            if carry and done:  # the phase lasted tau: so did its use of the other resources
                for r2 in (BAND_IN, BAND_OUT, CPU):
                    if r2 != r:
                        b_cons[b, r2] *= tau
        if done:
            b_cons[b, r] = need  # used only what it needed (over the 1 s step)
            b_done[b] = 1.0
        elif need > 0.0:
            b_done[b] += (1.0 - b_done[b]) * b_cons[b, r] / need
        if ph == EXECUTION:
            nd_work[v] += b_cons[b, CPU] / 100.0
        for r in range(N_CRES):
            nd_cons[v, r] += b_cons[b, r]
    settle_downloads(S, P, g_in, g_out)
    record_consumption(S, P, t)


@kernel
def record_consumption(S, P, t):
    """Record c_t, what the nodes used (`S.nd_cons`), before the executor acts (paper
    3.2, Fig. 4): the servers' and the users' totals, with several user classes the
    band_in, band_out and CPU of each (D36), and with several servers each one's (D35:
    a server's links carry its home users' transfers)."""
    ns = P.n_srv
    ucons = np.zeros(N_CRES)
    per_class = S.ser_ccons.shape[0] > 0  # several user classes (D36)
    per_server = S.ser_svcons.shape[0] > 0  # several servers (D35)
    for k in range(S.n_touched[0]):
        v = S.nd_touched[k]
        if v >= ns:
            for r in range(N_CRES):
                ucons[r] += S.nd_cons[v, r]
            if per_class:
                for r in range(CPU + 1):
                    S.ser_ccons[t, S.node_class[v] - 1, r] += S.nd_cons[v, r]
            if per_server:
                S.ser_svcons[t, P.nd_home[v], BAND_IN] += S.nd_cons[v, BAND_OUT]
                S.ser_svcons[t, P.nd_home[v], BAND_OUT] += S.nd_cons[v, BAND_IN]
    S.ser_scons[t, BAND_IN] = ucons[BAND_OUT]
    S.ser_scons[t, BAND_OUT] = ucons[BAND_IN]
    for r in (CPU, MEMORY):  # the servers' own, summed from the first
        S.ser_scons[t, r] = S.nd_cons[0, r] if S.nd_tstamp[0] == t else 0.0
        for s in range(1, ns):
            S.ser_scons[t, r] += S.nd_cons[s, r] if S.nd_tstamp[s] == t else 0.0
    S.ser_scons[t, STORAGE] = S.rd_used[0]
    for s in range(1, ns):
        S.ser_scons[t, STORAGE] += S.rd_used[s]
    if per_server:
        for s in range(ns):
            for r in (CPU, MEMORY):
                S.ser_svcons[t, s, r] = S.nd_cons[s, r] if S.nd_tstamp[s] == t else 0.0
            S.ser_svcons[t, s, STORAGE] = S.rd_used[s]
    for r in range(N_CRES):
        S.ser_ucons[t, r] = ucons[r]
    S.ser_ucons[t, STORAGE] = S.rd_usertotal[0]


@kernel
def step_completions(S, P, t):
    """Factors d^x, x and d^y, y: downloads accumulate, batches whose phase work is done
    advance (the work of a finished execution is counted in `ser_work`)."""
    # The downloads that ran in this step's consumption, latest in the list first.
    dl_run = S.dl_run
    for k in range(S.n_dlrun[0] - 1, -1, -1):
        accumulate_download(S, P, dl_run[k], t)
    S.n_dlrun[0] = 0
    # Iterate backwards: a phase change never creates a batch (it transitions in place or
    # merges into one already visited), so a swap-remove only moves visited entries.
    # (Arrays bound once: no pool is replaced inside a step; see step_consumption.)
    b_list, b_done, b_phase, b_node, b_age, n_b = S.b_list, S.b_done, S.b_phase, S.b_node, S.b_age, S.n_b
    paper = P.paper_progress
    n0 = n_b[0]
    for k in range(n0 - 1, -1, -1):
        if k >= n_b[0]:
            continue
        b = b_list[k]
        if b_done[b] >= 1.0:
            if b_phase[b] == EXECUTION and not paper:  # paper: charged per step (D27)
                count_work(S, P, t, b_node[b], phase_work(S, P, b) / 100.0)
            if P.carry_over:
                carry_phases(S, P, b, t)
            else:
                batch_advance(S, P, b, t)
        else:
            b_age[b] += 1


@kernel
def _mean_ask(S, P, b, r):
    """The mean of what batch b asks of resource r in its phase (the statistics that
    rescale its ARMA samples, D9, without the sample): per second, in r's units."""
    stage, n = S.b_phase[b], S.b_size[b]
    m = P.sub_type[S.b_sub[b]]
    kind = P.level_kind[stage]
    if kind == LEVEL_BATCH:  # tabulated; IDW clamps sizes beyond the knots anyway
        return P.bt_mean[stage, m, min(n, MAX_BATCH_TABLE), r]
    level = _level(S, P, stage, S.b_node[b], n)
    nl = P.n_levels[stage]
    w = np.empty(nl)
    idw_weights(min(max(level, P.levels[stage, 0]), P.levels[stage, nl - 1]), P.levels[stage], nl,
                P.idw_power, w)
    own = r == (BAND_IN if kind == LEVEL_BAND_IN else BAND_OUT)  # the bandwidth the transfer uses
    mean = 0.0
    for l in range(nl):
        mean += w[l] * (P.st_mean[stage, m, r, l] / P.levels[stage, l] if own else P.st_mean[stage, m, r, l])
    return mean * level if own else mean


@kernel
def carry_phases(S, P, b, t):
    """Batch b finished its phase at time b_tau in step t (D26, `phase_changes:
    carry_over`): it enters the next phase at once and, for the rest of the step, asks
    the mean of that phase's own resource (CPU for execution, band_in for an input
    download, band_out for an upload), granted up to what its node, and for a user's
    transfers the server's link, left unused in the step. A phase finished so goes on to
    the next, until the batch is done or the step is used up. What it uses is added to
    the step's consumption and work."""
    rest = 1.0 - S.b_tau[b]
    while True:
        batch_advance(S, P, b, t)  # with carry_over it never merges: b is b, or freed
        if S.b_node[b] < 0 or rest <= 0.0:
            return
        v, ph = S.b_node[b], S.b_phase[b]
        r = CPU if ph == EXECUTION else (BAND_IN if ph == DOWNLOAD else BAND_OUT)
        wait = 0.0
        if P.rtt_on and v >= P.n_srv and ph != EXECUTION:
            # a user's transfer waits its round trip from here, inside the rest of the
            # step, which it keeps as its lead for the steps after (D35)
            S.b_lead[b] = rest
            wait = min(P.nd_rtt[v], rest)
        rate = min(_mean_ask(S, P, b, r), (batch_cpu(S, P, v) if r == CPU else S.alloc[v, r]) - S.nd_cons[v, r])
        # users' downloads come from their home server's outbound link, their uploads go
        # to its inbound one (D35): what it has not carried yet in the step
        h = P.nd_home[v]
        per_server = S.ser_svcons.shape[0] > 0
        if v >= P.n_srv and r == BAND_IN:
            rate = min(rate, S.alloc[h, BAND_OUT] - (S.ser_svcons[t, h, BAND_OUT] if per_server
                                                     else S.ser_scons[t, BAND_OUT]))
        elif v >= P.n_srv and r == BAND_OUT:
            rate = min(rate, S.alloc[h, BAND_IN] - (S.ser_svcons[t, h, BAND_IN] if per_server
                                                    else S.ser_scons[t, BAND_IN]))
        if rate <= 0.0:
            return
        if r == CPU and P.fifo and not fifo_turn(S, P, v, b):  # it waits its turn (D28)
            return
        need = phase_work(S, P, b)
        if wait > 0.0:  # the data moves after the wait
            finished = need <= rate * (rest - wait)
            used = need if finished else rate * (rest - wait)
            rest = rest - wait - need / rate if finished else 0.0
        else:
            finished = need <= rate * rest
            used = need if finished else rate * rest
            rest = rest - need / rate if finished else 0.0
        S.b_done[b] = 1.0 if finished else used / need
        if finished:  # when it ended, for the next phase or the subtask's end time (D34)
            S.b_tau[b] = 1.0 - rest
        # the step's records (as step_consumption keeps them)
        S.nd_cons[v, r] += used
        if v >= P.n_srv:
            S.ser_ucons[t, r] += used
            if S.ser_ccons.shape[0] > 0:  # several user classes (D36)
                S.ser_ccons[t, S.node_class[v] - 1, r] += used
            if r == BAND_IN:
                S.ser_scons[t, BAND_OUT] += used
            elif r == BAND_OUT:
                S.ser_scons[t, BAND_IN] += used
            if per_server and r != CPU:
                S.ser_svcons[t, h, BAND_OUT if r == BAND_IN else BAND_IN] += used
        elif r == CPU:
            S.ser_scons[t, CPU] += used
            if per_server:
                S.ser_svcons[t, v, CPU] += used
        if r == CPU:
            S.nd_work[v] += used / 100.0
        if not finished:
            return
        if ph == EXECUTION:
            count_work(S, P, t, v, need / 100.0)
