"""Queue-aware hybrid offloading (seed 002_25f372673c2a4e8f, sections "Systeemmodel" to
"Beslissingsregel"; docs/routing.md, "queue_aware").

Each pending subtask of user i goes to one of three tiers: local (i's own device, if it
holds the subtask's data), edge (the other online volunteers holding it) or cloud (the
server). Per tier the expected delay is W + s + D:

* W = (1 - beta) W_model + beta W_queue, beta = min(1, q / c): q subtasks in the tier,
  c its servers (cores); W_model is the Allen-Cunneen G/G/c wait
  (`theory.allen_cunneen_wait`) with arrival rate lambda over a sliding window of
  ``window_s`` steps per tier, Poisson arrivals (C_a^2 = 1, as the seed assumes) and
  the service time's mean and SCV learned online; W_queue = max(0, q - c) s / c, the
  backlog beyond the free servers shared by the c servers;
* W is multiplied by ``penalty`` when the tier's utilization lambda s / c exceeds
  ``utilization_threshold`` (0.9 in the seed);
* s, the service time: the mean of completed subtasks of the tier that found a free
  server when placed, minus D; before ``min_samples`` of them, j's mean work on one
  core, at least one step;
* D, the transfer time: the input download and result upload steps on a user node (2 s),
  none on the server.

With probability ``epsilon`` (0.05) the tier is drawn uniformly among the available
ones instead (epsilon-greedy, so the estimates of rarely chosen tiers stay alive).
Inside the edge tier the subtask joins the volunteer with the fewest subtasks.

The module also holds the kernels of the baselines (jsq, random, edge_first,
model_only, queue_only): one decision kernel with a mode, each baseline a class in its
own file. Every decision logs the hybrid, model-only and queue-only predictions of the
chosen tier and, once done, the realized delay (`routing.DECISION_FIELDS`).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import pending_requests_fifo
from gmm_volunteer.model.params import BAND_IN, BAND_OUT, CPU, DOWNLOAD, EXECUTION, WORK_EXPONENTIAL
from gmm_volunteer.model.kernels.ops import batch_born_now, work_mean
from gmm_volunteer.policies.base import OPTIONS_CONFIG
from gmm_volunteer.policies.common import candidate, schedule_downloads
from gmm_volunteer.policies.monitor import C_CALL_BYTES, C_NODE_BYTES, OP_METRIC_READ, MonitorOptions, charge
from gmm_volunteer.policies.routing import (
    AF_MIX,
    AF_SVC,
    D_NODE,
    D_PRED,
    D_PRED_MODEL,
    D_PRED_QUEUE,
    D_PRED_ROUTER,
    D_RATE,
    D_SUBTYPE,
    D_T,
    D_TIER,
    N_TIERS,
    TRANSFER_UNIT,
    Router,
    count_queues,
    fits,
    record_herding,
    observe,
    option_index,
    route_assign,
)
from gmm_volunteer.model.rng import STREAM_SCHEDULER, randint, uniform
from gmm_volunteer.model.theory import allen_cunneen_wait

LOCAL, EDGE, CLOUD = range(3)
TIERS = ("local", "edge", "cloud")
# decision modes
HYBRID, MODEL_ONLY, QUEUE_ONLY, JSQ, RANDOM, EDGE_FIRST, JSQ_S, ORACLE, LA_IMR = range(9)
# R.af layout after the service statistics: mode, total user cores, user subtasks
AF_MODE = AF_SVC + 3 * N_TIERS
AF_USER_CORES = AF_MODE + 1
AF_USER_Q = AF_MODE + 2
N_AF = AF_MODE + 3
assert N_AF == AF_MIX  # then the mix each tier served (routing.AF_MIX)
# R.ai layout: arrivals per tier summed over the window, then the ring of per-step counts
AI_SUM = 0
AI_RING = N_TIERS
TRANSFER_S = 2.0  # input download + result upload, one step each (docs/model.md D10)
W_MAX = 1e4  # wait of an unstable tier (s): finite, so that ties still compare


class TierOptions(MonitorOptions):
    """Options of the tier routers that do not explore (jsq, random, edge_first)."""

    model_config = OPTIONS_CONFIG
    # Sliding window of the per-tier arrival rates, s.
    window_s: int = Field(60, ge=1, le=1_000_000)  # a ring of this many steps per tier
    # Utilization above which the wait estimate is multiplied by `penalty` (seed 002: 0.9).
    utilization_threshold: float = Field(0.9, gt=0.0)
    penalty: float = Field(2.0, ge=1.0)
    # Completions a tier needs before its learned service time replaces the prior.
    min_samples: int = Field(20, ge=1)
    # Decisions kept in the result's decision log (later ones are counted, not kept).
    decision_log: int = Field(100_000, ge=0, le=1_000_000)  # rows allocated up front (56 bytes each)
    max_downloads_per_node: int = Field(1, ge=1)
    # C_s^2 learned online from completions (true), or derived from the work law as seed
    # 002 derives it from its service distribution (false, default; issue 22).
    scv_online: bool = False
    # The queue term on every subtask in the tier, in service or waiting (true: the
    # router before issue 22), or on the waiting ones beyond the busy servers (false).
    queue_in_service: bool = False
    # C_s^2 of the mix of subtasks the tier has completed (each type's work law, weighted
    # by its completions there), as the mean service time mixes them (issue 34); false:
    # the requested subtask's law (0.7.0). Ignored with scv_online.
    scv_mix: bool = True


class QueueAwareOptions(TierOptions):
    model_config = OPTIONS_CONFIG
    # Probability of a uniformly random tier (epsilon-greedy; seed 002: 0.05). Last, so
    # that the other options sit at the same positions as in TierOptions.
    epsilon: float = Field(0.05, ge=0.0, le=1.0)


class LaImrRouterOptions(TierOptions):
    """The routing half of seed 001 (LA-IMR; docs/routing.md section 6.3)."""

    model_config = OPTIONS_CONFIG
    # Affine power law L = alpha + beta (lambda / c)^gamma (eqs. 7-8); alpha None: the
    # tier's mean service time (its idle latency).
    alpha: float | None = Field(None, ge=0)
    beta: float = Field(1.0, ge=0)
    gamma: float = Field(1.0, gt=0)
    # Eq. 5 instead: L = s (1 + U^gamma), U = max(utilization_floor, lambda s / c).
    eq5: bool = False
    utilization_floor: float = Field(0.0, ge=0.0, le=1.0)
    # The latency budget a tier must meet (s), tried edge-most first: own device, other
    # volunteers, server (offloading upstream); none within it: the least predicted.
    budget_s: float = Field(10.0, gt=0)


K = option_index(QueueAwareOptions)
KL = option_index(LaImrRouterOptions)
KL_ALPHA, KL_BETA, KL_GAMMA, KL_EQ5 = KL["alpha"], KL["beta"], KL["gamma"], KL["eq5"]
KL_FLOOR, KL_BUDGET = KL["utilization_floor"], KL["budget_s"]
K_WINDOW, K_UTIL, K_PENALTY = K["window_s"], K["utilization_threshold"], K["penalty"]
K_MIN_SAMPLES, K_MAXDL, K_EPS = K["min_samples"], K["max_downloads_per_node"], K["epsilon"]
K_SCV_ONLINE, K_Q_IN_SERVICE, K_SCV_MIX = K["scv_online"], K["queue_in_service"], K["scv_mix"]
assert list(option_index(TierOptions)) == list(K)[:-1]


@kernel
def law_scv(P, j):
    """C_s^2 of subtask j's work law (docs/model.md D10): exponential 1, lognormal with
    log-sd s exp(s^2) - 1 (seed 002 derives C_s^2 from its service distribution)."""
    if P.wk_dist[j] == WORK_EXPONENTIAL:
        return 1.0
    return math.exp(P.wk_lsd[j] * P.wk_lsd[j]) - 1.0


@kernel
def mix_scv(P, R, tier, j):
    """C_s^2 of the mixture of work laws the tier has served: E[X^2] / E[X]^2 - 1 with
    E[X] = sum_k p_k m_k, E[X^2] = sum_k p_k m_k^2 (1 + c_k^2), p_k the share of the
    tier's completions that were subtask k, m_k its mean work on one core, c_k^2 its law's
    SCV (`law_scv`). j's own law before the tier completed anything."""
    o = AF_MIX + tier * P.n_sub
    n, m1, m2 = 0.0, 0.0, 0.0
    for k in range(P.n_sub):
        c = R.af[o + k]
        if c > 0.0:
            m = P.wk_mean[k, 1]
            n += c
            m1 += c * m
            m2 += c * m * m * (1.0 + law_scv(P, k))
    if n <= 0.0 or m1 <= 0.0:
        return law_scv(P, j)
    m1 /= n
    return m2 / n / (m1 * m1) - 1.0


@kernel
def service_stats(R, tier, prior, prior_scv):
    """(mean, SCV) of the tier's service time: the mean learned once min_samples
    completions are in, else the prior; the SCV from the same samples with
    ``scv_online``, else (and before min_samples) prior_scv."""
    o = AF_SVC + 3 * tier
    n = R.af[o]
    if n >= R.po[K_MIN_SAMPLES] and R.af[o + 1] > 0.0:
        mean = R.af[o + 1]
        if R.po[K_SCV_ONLINE] > 0.0:
            return mean, (R.af[o + 2] / (n - 1.0)) / (mean * mean)
        return mean, prior_scv
    return prior, (1.0 if R.po[K_SCV_ONLINE] > 0.0 else prior_scv)


@kernel
def tier_estimate(R, c, lam, q, mean_s, scv, transfer):
    """(hybrid, model-only, queue-only) expected delay W + s + D of one tier (module
    docstring; seed 002 sections 2-4)."""
    mu = 1.0 / mean_s
    w_model = min(allen_cunneen_wait(c, lam, mu, 1.0, scv), W_MAX)
    if R.po[K_Q_IN_SERVICE] > 0.0:  # the router before issue 22: q counts work in service
        w_queue = max(0.0, q - c) * mean_s / c
        beta = min(1.0, q / c)
    else:  # seed 002: the waiting tasks, those beyond the c servers
        waiting = max(0.0, q - c)
        w_queue = waiting * mean_s / c
        beta = min(1.0, waiting / c)
    w = (1.0 - beta) * w_model + beta * w_queue
    if lam * mean_s / c > R.po[K_UTIL]:
        w *= R.po[K_PENALTY]
        w_model *= R.po[K_PENALTY]
        w_queue *= R.po[K_PENALTY]
    return w + mean_s + transfer, w_model + mean_s + transfer, w_queue + mean_s + transfer


@kernel
def _tick(R, t):
    """Start step t in the arrival window: forget the counts of step t - window."""
    w = int(R.po[K_WINDOW])
    slot = AI_RING + (t % w) * N_TIERS
    for k in range(N_TIERS):
        R.ai[AI_SUM + k] -= R.ai[slot + k]
        R.ai[slot + k] = 0


@kernel
def _arrive(R, t, tier):
    w = int(R.po[K_WINDOW])
    R.ai[AI_RING + (t % w) * N_TIERS + tier] += 1
    R.ai[AI_SUM + tier] += 1


@kernel
def _user_totals(S, R):
    cores = 0.0
    q = 0
    for k in range(S.n_on[0]):
        v = S.on_list[k]
        cores += S.alloc[v, CPU] / 100.0
        q += R.nq[v]
    R.af[AF_USER_CORES] = cores
    R.af[AF_USER_Q] = q


@kernel
def in_step(P, v):
    """Whether a subtask on v can end inside a step (docs/model.md D34): with
    `latency: substep`, on the server (its execution, its only phase, starts at the
    placement step and ends where its work runs out) and, with `phase_changes:
    carry_over`, on a volunteer (each phase starts where the last ended). Otherwise a
    subtask's delay counts whole steps."""
    return P.substep > 0 and (v == 0 or P.carry_over > 0)


@kernel
def step_floor(P, v, x):
    """A delay x on v, at least one step where delays count whole steps (`in_step`)."""
    return x if in_step(P, v) else max(1.0, x)


@kernel
def transfer_time(S, P, v, j):
    """D of subtask j on v (seed 002's communication delay): none on the server (its
    subtasks start executing, docs/model.md 4.5); on a volunteer the input download and
    result upload, a step each (D10), or, where a subtask ends inside a step
    (`in_step`), their data over v's whole links (8 Mbit per MB over its Mbit/s; a
    transfer's sampled use of the link can be less, so this is the least it takes)."""
    if v == 0:
        return 0.0
    if not in_step(P, v) or S.alloc[v, BAND_IN] <= 0.0 or S.alloc[v, BAND_OUT] <= 0.0:
        return TRANSFER_S
    return 8.0 * P.sub_in_mb[j] / S.alloc[v, BAND_IN] + 8.0 * P.sub_out_mb[j] / S.alloc[v, BAND_OUT]


@kernel
def _servers(cores):
    return max(1, int(round(cores)))


@kernel
def _edge_node(S, P, R, i, j, t):
    """The eligible volunteer other than i with the fewest subtasks that fits j; -1."""
    best, best_q = -1, 1 << 62
    for idx in range(S.hd_n[j]):
        v = S.hd_list[j, idx]
        if v != i and R.nq[v] < best_q and fits(S, P, v, j, t):
            best, best_q = v, R.nq[v]
    return best


@kernel
def tier_estimates(S, P, R, i, j, t, out, edge):
    """out[tier, (hybrid, model, queue)] for user i's subtask j; `edge` the volunteer the
    edge tier would use (-1 none: its transfers are taken as i's)."""
    window = min(R.po[K_WINDOW], t + 1.0)
    n_users = max(S.n_on[0], 1)
    for tier in range(N_TIERS):
        if tier == LOCAL:
            c = _servers(S.alloc[i, CPU] / 100.0)
            lam = R.ai[AI_SUM + LOCAL] / window / n_users  # per device
            q = R.nq[i]
            transfer = transfer_time(S, P, i, j)
        elif tier == EDGE:
            c = _servers(R.af[AF_USER_CORES] - S.alloc[i, CPU] / 100.0)
            lam = R.ai[AI_SUM + EDGE] / window
            q = R.af[AF_USER_Q] - R.nq[i]
            transfer = transfer_time(S, P, edge if edge >= 0 else i, j)
        else:
            c = _servers(S.alloc[0, CPU] / 100.0)
            lam = R.ai[AI_SUM + CLOUD] / window
            q = R.nq[0]
            transfer = 0.0
        prior = step_floor(P, 0 if tier == CLOUD else i, P.wk_mean[j, 1])
        scv = mix_scv(P, R, tier, j) if R.po[K_SCV_MIX] > 0.0 else law_scv(P, j)
        mean_s, scv = service_stats(R, tier, prior, scv)
        h, m, qq = tier_estimate(R, c, lam, q, mean_s, scv, transfer)
        out[tier, 0] = h
        out[tier, 1] = m
        out[tier, 2] = qq
        if out.shape[1] > 6:  # what seed 001's model needs: servers, rate, service time
            out[tier, 4] = c
            out[tier, 5] = lam
            out[tier, 6] = mean_s


@kernel
def tier_choose(S, P, R, i, j, t, mode, est, nodes):
    """The node for user i's subtask j under `mode`; -1 if no tier can take it. Fills
    est (tier estimates) and nodes (the node each tier would use, -1 if unavailable)."""
    nodes[LOCAL] = i if (S.hd_pos[i, j] >= 0 and fits(S, P, i, j, t)) else -1
    nodes[EDGE] = _edge_node(S, P, R, i, j, t)
    nodes[CLOUD] = 0 if fits(S, P, 0, j, t) else -1
    n_av = 0
    for k in range(N_TIERS):
        n_av += nodes[k] >= 0
    if n_av == 0:
        return -1
    tier_estimates(S, P, R, i, j, t, est, nodes[EDGE])
    for k in range(N_TIERS):
        est[k, 3] = math.nan  # the router's own prediction, if it makes one (below)
    if mode == JSQ or mode == JSQ_S:
        return jsq_choose(S, P, R, j, t, est, nodes, mode == JSQ_S)
    if mode == LA_IMR:
        best, best_l = -1, math.inf
        for k in (LOCAL, EDGE, CLOUD):
            if nodes[k] < 0:
                continue
            est[k, 3] = la_imr_latency(P, R, est[k, 4], est[k, 5], est[k, 6], transfer_time(S, P, nodes[k], j),
                                       k, j)
        for k in (LOCAL, EDGE, CLOUD):
            if nodes[k] >= 0 and est[k, 3] <= R.po[KL_BUDGET]:
                return nodes[k]
            if nodes[k] >= 0 and est[k, 3] < best_l:
                best, best_l = k, est[k, 3]
        return nodes[best]
    if mode == ORACLE:
        for k in range(N_TIERS):
            est[k, 3] = oracle_delay(S, P, nodes[k], j, t) if nodes[k] >= 0 else math.inf
        return nodes[pick_tier(S, nodes, est, 3, 0.0)]
    if mode == EDGE_FIRST:
        for k in (EDGE, LOCAL, CLOUD):
            if nodes[k] >= 0:
                return nodes[k]
    eps = 1.0 if mode == RANDOM else R.po[K_EPS]
    col = 1 if mode == MODEL_ONLY else (2 if mode == QUEUE_ONLY else 0)
    if mode != RANDOM:
        for k in range(N_TIERS):
            est[k, 3] = est[k, col]  # the estimate this router decides by
    return nodes[pick_tier(S, nodes, est, col, eps)]


@kernel
def jsq_delay(S, P, R, v, j, scaled):
    """JSQ's measure of v for subtask j, in seconds so that the transfers count (seed 002
    names JSQ and JSQ-S, the queue scaled by the servers, without their delay terms):
    (subtasks on v + 1) x j's mean work on one core of v (a volunteer's volunteer
    factor, D29; at least one step where delays count whole steps, `step_floor`), divided
    by v's cores when `scaled` (JSQ-S), plus the transfers on a user node
    (`transfer_time`). The + 1 is the new subtask: without it every idle node scores 0
    whatever its size."""
    cores = S.alloc[v, CPU] / 100.0
    if cores <= 0.0:
        return math.inf
    q = (R.nq[v] + 1.0) / cores if scaled else R.nq[v] + 1.0
    return q * step_floor(P, v, work_mean(S, P, v, j, 1)) + transfer_time(S, P, v, j)


@kernel
def jsq_choose(S, P, R, j, t, est, nodes, scaled):
    """The eligible node (any tier) with the least `jsq_delay`, ties drawn uniformly
    (reservoir sampling); est[k, 3] of the chosen node's tier is its measure."""
    best, best_d, n_tied = -1, math.inf, 0
    for idx in range(S.hd_n[j] + 1):
        v = candidate(S, j, idx)
        if not fits(S, P, v, j, t):
            continue
        d = jsq_delay(S, P, R, v, j, scaled)
        if d < best_d:
            best, best_d, n_tied = v, d, 1
        elif d == best_d and d < math.inf:
            n_tied += 1
            if uniform(S.rng, STREAM_SCHEDULER) * n_tied < 1.0:
                best = v
    if best >= 0:
        est[LOCAL if best != 0 and nodes[LOCAL] == best else (CLOUD if best == 0 else EDGE), 3] = best_d
    return best


@kernel
def la_imr_latency(P, R, c, lam, mean_s, transfer, tier, j):
    """Seed 001's end-to-end latency of a tier with c servers, arrival rate lam and mean
    service time mean_s: the processing term (the affine power law of the per-server
    rate, eqs. 7-8, or eq. 5 with U = max(floor, lam s / c) and S = 1), plus the
    Erlang-C M/M/c wait (eq. 12; Allen-Cunneen with both SCVs 1 is Erlang C), plus the
    network term (the transfer steps); docs/routing.md section 6.3. A law fitted for (j's
    type, tier) on its realized delays (``tier_laws``, after the tier mix in R.af, D41)
    replaces all three: alpha + beta (lam / c)^gamma."""
    o = AF_MIX + N_TIERS * P.n_sub + 3 * (P.sub_type[j] * N_TIERS + tier)
    if R.af.shape[0] >= o + 3 and not math.isnan(R.af[o]):
        return R.af[o] + R.af[o + 1] * (lam / c) ** R.af[o + 2]
    if R.po[KL_EQ5] > 0.0:
        u = max(R.po[KL_FLOOR], lam * mean_s / c)
        proc = mean_s * (1.0 + u ** R.po[KL_GAMMA])
    else:
        a = mean_s if math.isnan(R.po[KL_ALPHA]) else R.po[KL_ALPHA]
        proc = a + R.po[KL_BETA] * (lam / c) ** R.po[KL_GAMMA]
    w = min(allen_cunneen_wait(c, lam, 1.0 / mean_s, 1.0, 1.0), W_MAX)
    return proc + w + transfer


@kernel
def ps_finish(rem, n, cores, w):
    """Time until a new job of work w finishes on `cores` processor-shared cores where n
    jobs with remaining work rem[:n] run (each at most one core, shares equal, no later
    arrivals), s."""
    r = np.sort(rem[:n])
    done = 0.0  # work every unfinished job has received so far
    t = 0.0
    k = 0
    while True:
        m = n - k + 1  # unfinished jobs, the new one included
        rate = min(1.0, cores / m)
        nxt = r[k] if k < n else math.inf
        if w <= nxt:
            return t + (w - done) / rate
        t += (nxt - done) / rate
        done = nxt
        k += 1


@kernel
def oracle_delay(S, P, v, j, t):
    """The delay a subtask j placed on v in step t would see, from the true remaining
    work of every batch on v (its drawn work factor; the mean for batches not yet
    executing), processor sharing over v's cores without later arrivals (`ps_finish`),
    and the transfers. With batching (docs/model.md D8) the subtask joins the batch of j
    formed on v in this step if there is one (executing on the server, downloading on a
    user node): it is done when that batch, one subtask larger, is done, so the whole
    batch's work is what it waits for. What no router can know: the Oracle baseline
    (seed 002)."""
    cores = S.alloc[v, CPU] / 100.0
    if cores <= 0.0:
        return math.inf
    join = -1
    if P.batching > 0:
        join = batch_born_now(S, P, v, j, EXECUTION if v == 0 else DOWNLOAD, t)
    n = 0
    b = S.nd_bhead[v]
    while b >= 0:
        n += 1
        b = S.b_nnext[b]
    rem = np.empty(max(n, 1))
    n = 0
    b = S.nd_bhead[v]
    while b >= 0:
        if b == join:
            pass  # replaced by the grown batch below
        elif S.b_phase[b] == EXECUTION:
            rem[n] = (1.0 - S.b_done[b]) * work_mean(S, P, v, S.b_sub[b], S.b_size[b]) * S.b_eps[b]
            n += 1
        elif S.b_phase[b] == DOWNLOAD:
            rem[n] = work_mean(S, P, v, S.b_sub[b], S.b_size[b])
            n += 1
        b = S.b_nnext[b]
    if join >= 0:
        w = work_mean(S, P, v, j, S.b_size[join] + 1) * (S.b_eps[join] if S.b_phase[join] == EXECUTION else 1.0)
        w *= 1.0 - S.b_done[join]
    else:
        w = work_mean(S, P, v, j, 1)
    ex = ps_finish(rem, n, cores, w)
    if not in_step(P, v):  # the subtask is seen done at the end of a step
        ex = max(1.0, float(math.ceil(ex)))
    return ex + transfer_time(S, P, v, j)


@kernel
def pick_tier(S, nodes, est, col, eps):
    """Epsilon-greedy over the available tiers (nodes[k] >= 0): with probability eps a
    uniform one, else the one with the least est[k, col] (seed 002 "Beslissingsregel")."""
    n_av = 0
    for k in range(N_TIERS):
        n_av += nodes[k] >= 0
    if eps > 0.0 and uniform(S.rng, STREAM_SCHEDULER) < eps:
        r = randint(S.rng, STREAM_SCHEDULER, n_av)
        for k in range(N_TIERS):
            if nodes[k] >= 0:
                if r == 0:
                    return k
                r -= 1
    best, best_w = -1, math.inf
    for k in range(N_TIERS):
        if nodes[k] >= 0 and est[k, col] < best_w:
            best, best_w = k, est[k, col]
    return best


@kernel
def tier_downloads(S, P, t, args):
    R = args[0]
    observe(S, P, R, t)
    schedule_downloads(S, P, t, int(R.po[K_MAXDL]))


@kernel
def tier_place(S, P, t, args):
    R = args[0]
    mode = int(R.af[AF_MODE])
    count_queues(S, R)
    _tick(R, t)
    _user_totals(S, R)
    est = np.empty((N_TIERS, 7))
    nodes = np.empty(N_TIERS, np.int64)
    decided = False
    for i in pending_requests_fifo(S):
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] >= 0:
                continue
            j = P.task_sub[k, p]
            v = tier_choose(S, P, R, i, j, t, mode, est, nodes)
            if v < 0:
                continue
            decided = True
            tier = CLOUD if v == 0 else (LOCAL if v == i else EDGE)
            transfer = int(round(transfer_time(S, P, v, j) * TRANSFER_UNIT))
            # a placement that finds a free server measures the service time alone
            cores = S.alloc[v, CPU] / 100.0
            tag = tier + N_TIERS * transfer if R.nq[v] < _servers(cores) else -1
            d = R.dn[1]
            R.dn[1] += 1
            dec = -1
            if d < R.dlog.shape[0] and R.dlog.shape[0] > 1:
                dec = d
                R.dn[0] += 1
                R.dlog[d, D_T] = t
                R.dlog[d, D_NODE] = v
                R.dlog[d, D_TIER] = tier
                R.dlog[d, D_PRED] = est[tier, 0]
                R.dlog[d, D_PRED_MODEL] = est[tier, 1]
                R.dlog[d, D_PRED_QUEUE] = est[tier, 2]
                R.dlog[d, D_PRED_ROUTER] = est[tier, 3]
                if R.dlog.shape[1] > D_RATE:  # routers that log seed 001's law inputs (D41)
                    R.dlog[d, D_SUBTYPE] = P.sub_type[j]
                    R.dlog[d, D_RATE] = est[tier, 5] / est[tier, 4]
            route_assign(S, P, R, i, p, v, t, dec, tag)
            R.pl_tier[i, p] = tier
            R.pp[i, p, 0] = est[tier, 0]
            R.pp[i, p, 1] = est[tier, 1]
            R.pp[i, p, 2] = est[tier, 2]
            R.pp[i, p, 3] = est[tier, 3]
            _arrive(R, t, tier)
            if tier == LOCAL or tier == EDGE:
                R.af[AF_USER_Q] += 1
    if decided:  # one read of the three tiers' queue state per step that decides
        charge(R, t, OP_METRIC_READ, 1.0, R.mc[C_CALL_BYTES] + N_TIERS * R.mc[C_NODE_BYTES])
    record_herding(S, R, t)


class TierRouter(Router):
    """Base of the tier routers: the decision mode and the scratch layout."""

    mode: int = HYBRID

    def scratch_sizes(self, params):
        return N_AF + N_TIERS * int(params.n_sub), AI_RING + N_TIERS * int(self.options.window_s)

    def decision_log_size(self) -> int:
        return int(self.options.decision_log)

    def prepare(self, params, steps: int) -> None:
        super().prepare(params, steps)
        self._R.af[AF_MODE] = self.mode


class QueueAware(TierRouter):
    """Hybrid Allen-Cunneen / queue-state tier choice (seed 002; docs/routing.md)."""

    name = "queue_aware"
    Options = QueueAwareOptions
    mode = HYBRID
    downloads = tier_downloads
    place = tier_place
