"""ASRB: adaptive score-based routing (seed 000_957acf713eeb90e3, sections 4-5;
docs/routing.md, "asrb").

Each pending subtask goes to the eligible node (D12) with the best score
S = lambda (1 - min(L / L_cap, 1)) + (1 - lambda) A (seed 000 eq. 1), where L is the
node's monitored latency (policies.monitor: moving average of feedback, probed when
stale) and A the accuracy of the model variant that would serve the subtask (docs/model.md
D24: with ``execution.variants`` every variant of the slot's type is a candidate). Candidates are taken from fit
nodes scoring at least ``min_score``, else from overloaded nodes scoring at least it, else
one is drawn at random among the feasible ones (seed 000 Algorithm 1, step 5, and 4.2);
equal scores are drawn among uniformly, a node with a free core first. Nodes are labelled
fit / unfit by their best pod score and overloaded by CPU or memory use above the
threshold, held for a cooldown, or, within a step's decisions, by placements that took
their last free core; labels set the node's monitoring period (1x, 2x, 3x the base
period for overloaded, fit and unfit nodes, seed 000 section 6.4). docs/routing.md
section 2 gives each rule and the option that turns it off.
"""

from __future__ import annotations

import math


from pydantic import Field, field_validator

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import pending_requests_fifo
from gmm_volunteer.policies.base import OPTIONS_CONFIG
from gmm_volunteer.policies.common import candidate, schedule_downloads
from gmm_volunteer.policies.monitor import (
    C_LABEL_BYTES,
    C_LAT_CAP,
    F_LAT,
    F_SCORE,
    FIT,
    I_MULT,
    I_SEEN,
    I_STABLE,
    I_VOLATILE,
    OP_SCORE_UPDATE,
    OVERLOADED,
    UNFIT,
    MonitorOptions,
    charge,
    latency_stale,
    latency_stale_sub,
    overloaded,
    probe_estimate,
    probe_latency,
    probe_latency_sub,
    publish_label,
    refresh_metrics,
)
from gmm_volunteer.policies.routing import (
    Router, count_queues, fits, observe, option_index, record_herding, route_assign, whole_cores)
from gmm_volunteer.model.rng import STREAM_SCHEDULER, randint, uniform


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
    # --- issue 22 (docs/routing.md section 6.1); each false / 0 gives the earlier router
    # Latency per (node, subtask), as seed 000 keeps one per pod; false: one per node.
    latency_per_type: bool = True
    # One lambda per request type, in the bundle's order (seed 000 4.1: lambda comes with
    # each request); None: latency_weight for every request.
    latency_weight_per_type: list[float] | None = None
    # Alg. 2 runs when fewer than this fraction of a subtask's candidates have a valid
    # (fresh) latency; 1 probes every stale candidate at every scan (the earlier router).
    refresh_trigger: float = Field(0.5, ge=0.0, le=1.0)
    # After an Alg. 2 round for a subtask, none for it for this long, s (seed 000 5.2).
    approx_cooldown_s: int = Field(15, ge=0)
    # A volunteer is a candidate from the step after its first metric read (pod admission).
    admission_probe: bool = True
    # PATCH calls publishing a node's score when it moved by more than score_patch_delta.
    score_patch: bool = True
    score_patch_delta: float = Field(0.05, ge=0.0)
    # Volatile nodes at the overloaded period; nodes stable for stable_samples samples one
    # multiplier step slower (at most period_unfit) (seed 000 5.1).
    volatility: bool = True
    stable_samples: int = Field(5, ge=1)
    # --- issue 34 (docs/routing.md section 6.1); each false gives the router of 0.7.0
    # Equal scores: a uniform draw among the equally scored candidates (seed 000 4.2); false:
    # the first in holder order keeps the tie.
    random_ties: bool = True
    # Fit / unfit from the node's best pod score (seed 000 4.2: "recomputes the best pod
    # score per node"); false: from the score of the pod being judged.
    label_best_score: bool = True
    # The overloaded fallback also discards pods scoring below min_score (seed 000 4.2).
    fallback_min_score: bool = True
    # Within a step's decisions, a node whose placements in this step took its last free
    # core counts as overloaded, and a node placed on in this step is scored with the
    # latency a probe would measure now if that is above its cached one (docs/routing.md
    # section 2, "Decision rounds").
    round_load: bool = True

    @field_validator("latency_weight_per_type")
    @classmethod
    def _lambdas_in_unit_interval(cls, v):
        if v is not None:
            if len(v) == 0:
                raise ValueError("give at least one lambda (one per request type)")
            bad = [x for x in v if not 0.0 <= x <= 1.0]
            if bad:
                raise ValueError(f"each lambda must be in [0, 1], got {bad[0]}")
        return v


K = option_index(AsrbOptions)
K_LAMBDA, K_MIN_SCORE = K["latency_weight"], K["min_score"]
K_P_OVER, K_P_FIT, K_P_UNFIT = K["period_overloaded"], K["period_fit"], K["period_unfit"]
K_MAXDL = K["max_downloads_per_node"]
K_PER_TYPE = K["latency_per_type"]
K_TRIGGER, K_ACOOL = K["refresh_trigger"], K["approx_cooldown_s"]
K_ADMIT, K_PATCH, K_PATCH_D = K["admission_probe"], K["score_patch"], K["score_patch_delta"]
K_VOLAT, K_STABLE = K["volatility"], K["stable_samples"]
K_TIES, K_BEST, K_FB_MIN, K_ROUND = K["random_ties"], K["label_best_score"], K["fallback_min_score"], K["round_load"]


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
    if R.po[K_VOLAT] > 0.0:
        if R.mi[v, I_VOLATILE] == 1:
            R.mi[v, I_MULT] = int(R.po[K_P_OVER])
        elif R.mi[v, I_STABLE] >= R.po[K_STABLE]:
            R.mi[v, I_MULT] = min(R.mi[v, I_MULT] + 1, int(R.po[K_P_UNFIT]))
    return label


@kernel
def publish_score(R, v, j, score, t):
    """Seed 000 6.4: a PATCH call publishes the score of the pod of variant j on v when it
    moved by more than ``score_patch_delta`` since the last published one (charged as a
    score update). Kept per (node, variant): one value per node would flip between the
    variants' scores, which differ by the accuracy term when lambda < 1, and pay a call at
    every evaluation."""
    old = R.ms[v, j]
    if math.isnan(old) or abs(score - old) > R.po[K_PATCH_D]:
        R.ms[v, j] = score
        charge(R, t, OP_SCORE_UPDATE, 1.0, R.mc[C_LABEL_BYTES])


@kernel
def variant_accuracy(P, j):
    """A of seed 000 eq. 1 for subtask j: its type's accuracy, 1 if the catalog gives
    none (then every candidate has the same A and only latency ranks them)."""
    return P.sub_acc[j] if P.sub_acc[j] > 0.0 else 1.0


@kernel
def variant_latency(S, P, R, v, j, j0, t):
    """v's monitored latency for variant j of requested subtask j0: the pod's (or, without
    ``latency_per_type``, the node's average plus the difference in execution time of the
    two models there, as a probe would tell it: policies.monitor.probe_estimate;
    docs/routing.md, "Model variants"); with ``round_load``, at least what a probe would
    measure now on a node given subtasks in this step's decisions."""
    if R.po[K_PER_TYPE] > 0.0:
        lat = R.ml[v, j]  # every variant is a pod of its own (seed 000 4.1)
    else:
        lat = R.mf[v, F_LAT]
        if j != j0 and not math.isnan(lat):
            lat += probe_estimate(S, P, R, v, j, 0) - probe_estimate(S, P, R, v, j0, 0)
    if placed_this_round(R, v, t):
        now = probe_estimate(S, P, R, v, j, t)  # R.nq counts this round's placements
        if math.isnan(lat) or now > lat:
            return now
    return lat


@kernel
def placed_this_round(R, v, t):
    """v was given a subtask in step t's decisions (with ``round_load``)."""
    return R.po[K_ROUND] > 0.0 and R.pst[v] == t


@kernel
def full_this_round(S, R, v, t):
    """This round's placements took v's last free core: the resource monitor would read
    its CPU fully used, above any overload threshold below 1 (seed 000 3.2, 6.1)."""
    return placed_this_round(R, v, t) and R.nq[v] >= whole_cores(S, v)


@kernel
def node_best_score(S, P, R, v, lam, cap, t):
    """The best score of the pods on v (seed 000 4.2: after a response the proxy
    "recomputes the best pod score per node" and labels the node from it): over the
    subtasks whose data v holds (every one on the server), as `variant_latency` sees
    them."""
    best = -1.0
    for j in range(P.n_sub):
        if v != 0 and S.hd_pos[v, j] < 0:
            continue
        s = asrb_score(variant_latency(S, P, R, v, j, j, t), variant_accuracy(P, j), lam, cap)
        if s > best:
            best = s
    return best


@kernel
def admitted(S, R, v, t):
    """Pod admission (seed 000 6.2): the server always; a volunteer from the step after
    its first metric read."""
    if R.po[K_ADMIT] <= 0.0 or v == 0:
        return True
    return R.mi[v, I_SEEN] >= 0 and R.mi[v, I_SEEN] < t


@kernel
def stale(R, v, j, t):
    if R.po[K_PER_TYPE] > 0.0:
        return latency_stale_sub(R, v, j, t)
    return latency_stale(R, v, t)


@kernel
def latency_refresh(S, P, R, j0, t):
    """Seed 000 Alg. 1 step 3 and Alg. 2: when fewer than ``refresh_trigger`` of the
    candidates of j0 (over its variants) have a fresh latency and j0's approximation
    cooldown has passed, probe every stale candidate. With ``refresh_trigger`` 1 and no
    cooldown this probes every stale candidate at every scan (the earlier router)."""
    n, fresh = 0, 0
    for q in range(P.var_n[j0]):
        j = P.var_list[j0, q]
        for idx in range(S.hd_n[j] + 1):
            v = candidate(S, j, idx)
            if not fits(S, P, v, j, t):
                continue
            n += 1
            if not stale(R, v, j, t):
                fresh += 1
    if n == 0 or fresh == n or fresh >= R.po[K_TRIGGER] * n:
        return  # enough candidates with valid latency data
    if t - R.ac[j0] < R.po[K_ACOOL]:
        return  # within the subtask's approximation cooldown: cached values are used
    R.ac[j0] = t
    for q in range(P.var_n[j0]):
        j = P.var_list[j0, q]
        for idx in range(S.hd_n[j] + 1):
            v = candidate(S, j, idx)
            if fits(S, P, v, j, t) and stale(R, v, j, t):
                if R.po[K_PER_TYPE] > 0.0:
                    probe_latency_sub(S, P, R, v, j, t)
                else:
                    probe_latency(S, P, R, v, j, t)


@kernel
def _better(S, R, s, free, best_s, best_free, n_tied):
    """Does a candidate of score s (free: it has a free core now) replace the best so far
    (best_s, best_free, held by n_tied equally healthy candidates)? Returns (replace,
    tied count). A higher score always; with ``random_ties``, at an equal score a node
    with a free core beats one without, and among equally scored, equally free nodes the
    kept one is uniform (reservoir sampling: replaced with probability 1 / ties so far;
    seed 000 4.2, "random among equally healthy"); without it, never."""
    if s > best_s:
        return True, 1
    if s == best_s and R.po[K_TIES] > 0.0:
        if free and not best_free:
            return True, 1
        if free == best_free:
            n_tied += 1
            return uniform(S.rng, STREAM_SCHEDULER) * n_tied < 1.0, n_tied
    return False, n_tied


@kernel
def asrb_choose(S, P, R, j0, t, lam):
    """(node, subtask) for a slot requesting j0 with latency weight lam: over its
    variants (j0 itself only without ``execution.variants``) and their eligible nodes,
    seed 000 Algorithm 1."""
    cap, smin = R.mc[C_LAT_CAP], R.po[K_MIN_SCORE]
    fb_min = smin if R.po[K_FB_MIN] > 0.0 else -1.0
    best_fit, s_fit, j_fit, n_fit, free_fit = -1, -1.0, -1, 0, False
    best_over, s_over, j_over, n_over, free_over = -1, -1.0, -1, 0, False
    n_ok = 0
    latency_refresh(S, P, R, j0, t)
    for q in range(P.var_n[j0]):
        j = P.var_list[j0, q]
        acc = variant_accuracy(P, j)
        for idx in range(S.hd_n[j] + 1):
            v = candidate(S, j, idx)
            if not fits(S, P, v, j, t):
                continue
            refresh_metrics(S, R, v, t)
            if not admitted(S, R, v, t):
                continue
            n_ok += 1
            s = asrb_score(variant_latency(S, P, R, v, j, j0, t), acc, lam, cap)
            if R.po[K_PATCH] > 0.0:
                publish_score(R, v, j, s, t)
            node_s = node_best_score(S, P, R, v, lam, cap, t) if R.po[K_BEST] > 0.0 else s
            R.mf[v, F_SCORE] = node_s
            label = asrb_label(R, v, node_s, t)
            if label != OVERLOADED and full_this_round(S, R, v, t):
                label = OVERLOADED  # for this round's choice only; not published
            free = R.nq[v] < whole_cores(S, v)
            if label == FIT and s >= smin:
                take, n_fit = _better(S, R, s, free, s_fit, free_fit, n_fit)
                if take:
                    best_fit, s_fit, j_fit, free_fit = v, s, j, free
            elif label == OVERLOADED and s >= fb_min:
                take, n_over = _better(S, R, s, free, s_over, free_over, n_over)
                if take:
                    best_over, s_over, j_over, free_over = v, s, j, free
    if best_fit >= 0:
        return best_fit, j_fit
    if best_over >= 0:
        return best_over, j_over
    if n_ok == 0:
        return -1, -1
    r = randint(S.rng, STREAM_SCHEDULER, n_ok)  # random among the healthy (admitted, feasible) ones
    for q in range(P.var_n[j0]):
        j = P.var_list[j0, q]
        for idx in range(S.hd_n[j] + 1):
            v = candidate(S, j, idx)
            if fits(S, P, v, j, t) and admitted(S, R, v, t):
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
            lam = R.af[k] if R.af[R.af.shape[0] - 1] > 0.0 and R.af.shape[0] == P.n_task + 1 else R.po[K_LAMBDA]
            v, j = asrb_choose(S, P, R, P.task_sub[k, p], t, lam)
            if v >= 0:
                route_assign(S, P, R, i, p, v, t, -1, -1, j)
    record_herding(S, R, t)


class Asrb(Router):
    """ASRB score routing with adaptive monitoring (seed 000; docs/routing.md)."""

    name = "asrb"
    Options = AsrbOptions
    downloads = asrb_downloads
    place = asrb_place

    def scratch_sizes(self, params):
        lams = self.options.latency_weight_per_type
        return (0 if lams is None else int(params.n_task) + 1), 0  # lambdas, then a flag

    def prepare(self, params, steps: int) -> None:
        lams = self.options.latency_weight_per_type
        if lams is not None and len(lams) != int(params.n_task):
            from gmm_volunteer.model.errors import ConfigError

            raise ConfigError(
                f"scheduler_options.latency_weight_per_type: {len(lams)} values given, but the "
                f"bundle has {int(params.n_task)} request types (one lambda per type, in its order)")
        super().prepare(params, steps)
        if lams is not None:
            self._R.af[: len(lams)] = lams
            self._R.af[len(lams)] = 1.0
