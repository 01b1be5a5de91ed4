"""ASRB: adaptive score-based routing (seed 000_957acf713eeb90e3, sections 4-5;
docs/routing.md, "asrb").

Each pending subtask goes to the eligible node (D12) with the best score
S = lambda (1 - min(L / L_cap, 1)) + (1 - lambda) A (seed 000 eq. 1), where L is the
node's monitored latency (policies.monitor: moving average of feedback, probed when
stale) and A the accuracy of the model variant that would serve the subtask (docs/model.md
D24: with ``execution.variants`` every variant of the slot's type is a candidate). Candidates are taken from fit
nodes scoring at least ``min_score``, else from overloaded nodes, else one is drawn at
random among the feasible ones (seed 000 Algorithm 1, step 5). Nodes are labelled fit
/ unfit by their score and overloaded by CPU or memory use above the threshold, held for
a cooldown; labels set the node's monitoring period (1x, 2x, 3x the base period for
overloaded, fit and unfit nodes, seed 000 section 6.4).
"""

from __future__ import annotations

import math


from pydantic import Field

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import pending_requests_fifo
from gmm_volunteer.policies.base import OPTIONS_CONFIG
from gmm_volunteer.policies.common import candidate, schedule_downloads
from gmm_volunteer.policies.monitor import (
    C_LAT_CAP,
    F_LAT,
    F_SCORE,
    FIT,
    I_MULT,
    OVERLOADED,
    UNFIT,
    MonitorOptions,
    overloaded,
    probe_estimate,
    publish_label,
    refresh_latency,
    refresh_metrics,
)
from gmm_volunteer.policies.routing import Router, count_queues, fits, observe, option_index, route_assign
from gmm_volunteer.model.rng import STREAM_SCHEDULER, randint


class AsrbOptions(MonitorOptions):
    model_config = OPTIONS_CONFIG
    # lambda of seed 000 eq. 1: weight of latency against accuracy (1, 0.5, 0 in its tests).
    latency_weight: float = Field(1.0, ge=0.0, le=1.0)
    # Fit nodes scoring below this are not candidates (seed 000 section 4.2).
    min_score: float = Field(0.2, ge=0.0, le=1.0)
    # Period multipliers by label (seed 000 section 6.4: 1x, 2x, 3x).
    period_overloaded: int = Field(1, ge=1)
    period_fit: int = Field(2, ge=1)
    period_unfit: int = Field(3, ge=1)
    max_downloads_per_node: int = Field(1, ge=1)


K = option_index(AsrbOptions)
K_LAMBDA, K_MIN_SCORE = K["latency_weight"], K["min_score"]
K_P_OVER, K_P_FIT, K_P_UNFIT = K["period_overloaded"], K["period_fit"], K["period_unfit"]
K_MAXDL = K["max_downloads_per_node"]


@kernel
def asrb_score(latency, accuracy, lam, cap):
    """Seed 000 eq. 1; a node without any latency sample scores as if at the cap."""
    if math.isnan(latency):
        norm = 1.0
    else:
        norm = min(latency / cap, 1.0)
    return lam * (1.0 - norm) + (1.0 - lam) * accuracy


@kernel
def asrb_label(R, v, score, t):
    """Judge v (overloaded beats fit/unfit), publish the label if it changed and set
    v's monitoring period from the label in effect; returns that label."""
    if overloaded(R, v, t):
        want = OVERLOADED
    elif score >= R.po[K_MIN_SCORE]:
        want = FIT
    else:
        want = UNFIT
    label = publish_label(R, v, want, t)
    if label == OVERLOADED:
        R.mi[v, I_MULT] = int(R.po[K_P_OVER])
    elif label == FIT:
        R.mi[v, I_MULT] = int(R.po[K_P_FIT])
    else:
        R.mi[v, I_MULT] = int(R.po[K_P_UNFIT])
    return label


@kernel
def variant_accuracy(P, j):
    """A of seed 000 eq. 1 for subtask j: its type's accuracy, 1 if the catalog gives
    none (then every candidate has the same A and only latency ranks them)."""
    return P.sub_acc[j] if P.sub_acc[j] > 0.0 else 1.0


@kernel
def variant_latency(S, P, R, v, j, j0):
    """v's monitored latency for variant j of requested subtask j0: the node's average
    plus the difference in execution time of the two models there, as a probe would
    tell it (policies.monitor.probe_estimate; docs/routing.md, "Model variants")."""
    lat = R.mf[v, F_LAT]
    if j == j0 or math.isnan(lat):
        return lat
    return lat + probe_estimate(S, P, R, v, j, 0) - probe_estimate(S, P, R, v, j0, 0)


@kernel
def asrb_choose(S, P, R, j0, t):
    """(node, subtask) for a slot requesting j0: over its variants (j0 itself only
    without ``execution.variants``) and their eligible nodes, seed 000 Algorithm 1."""
    lam, cap, smin = R.po[K_LAMBDA], R.mc[C_LAT_CAP], R.po[K_MIN_SCORE]
    best_fit, s_fit, j_fit = -1, -1.0, -1
    best_over, s_over, j_over = -1, -1.0, -1
    n_ok = 0
    for q in range(P.var_n[j0]):
        j = P.var_list[j0, q]
        acc = variant_accuracy(P, j)
        for idx in range(S.hd_n[j] + 1):
            v = candidate(S, j, idx)
            if not fits(S, P, v, j, t):
                continue
            n_ok += 1
            refresh_metrics(S, R, v, t)
            refresh_latency(S, P, R, v, j, t)
            s = asrb_score(variant_latency(S, P, R, v, j, j0), acc, lam, cap)
            R.mf[v, F_SCORE] = s
            label = asrb_label(R, v, s, t)
            if label == FIT and s >= smin and s > s_fit:
                best_fit, s_fit, j_fit = v, s, j
            elif label == OVERLOADED and s > s_over:
                best_over, s_over, j_over = v, s, j
    if best_fit >= 0:
        return best_fit, j_fit
    if best_over >= 0:
        return best_over, j_over
    if n_ok == 0:
        return -1, -1
    r = randint(S.rng, STREAM_SCHEDULER, n_ok)  # random among the healthy (feasible) ones
    for q in range(P.var_n[j0]):
        j = P.var_list[j0, q]
        for idx in range(S.hd_n[j] + 1):
            v = candidate(S, j, idx)
            if fits(S, P, v, j, t):
                if r == 0:
                    return v, j
                r -= 1
    return -1, -1


@kernel
def asrb_downloads(S, P, t, args):
    R = args[0]
    observe(S, P, R, t)
    schedule_downloads(S, P, t, int(R.po[K_MAXDL]), P.n_sub)  # variants' data too (D24)


@kernel
def asrb_place(S, P, t, args):
    R = args[0]
    count_queues(S, R)
    for i in pending_requests_fifo(S):
        k = S.rq_type[i]
        for p in range(P.task_nsub[k]):
            if S.ex_node[i, p] >= 0:
                continue
            v, j = asrb_choose(S, P, R, P.task_sub[k, p], t)
            if v >= 0:
                route_assign(S, P, R, i, p, v, t, -1, -1, j)


class Asrb(Router):
    """ASRB score routing with adaptive monitoring (seed 000; docs/routing.md)."""

    name = "asrb"
    Options = AsrbOptions
    downloads = asrb_downloads
    place = asrb_place
