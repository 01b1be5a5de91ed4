"""What the routers share (issue 12; docs/routing.md): a `Router` base class that keeps a
routing state beside the simulator's, and kernels that track placements, observe
completions (the monitor's passive feedback) and count each node's subtasks.

A router is a `Scheduler` (policies.base) whose hooks receive ``args = (R,)``: ``R`` is a
`RouteState` namedtuple of arrays the router allocates in `prepare` (the monitor's
cache and cost series, policies.monitor; the placements it made; per-policy scratch).
Options reach the kernels as ``R.po``, the option values in the order the ``Options``
model declares them (`option_index` gives the positions by name), so every router's
hooks have the same argument type whatever its options.

Duties of every router's hooks, in this order (the base class calls ``downloads``
before cancelling and finishing, so the completed slots are still visible there):

* ``downloads``: `observe` (passive latency feedback from subtasks that completed in
  this step), then `common.schedule_downloads` like uniform and affinity (volunteers
  need subtask data before they can be chosen);
* ``place``: `count_queues`, then each pending (user, slot) pair to the node the
  router chooses, through `route_assign`.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit


from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import assign, free_memory, marginal_memory
from gmm_volunteer.model.params import CPU, DONE
from gmm_volunteer.policies.base import Scheduler
from gmm_volunteer.policies.monitor import (
    I_NFAIL,
    I_NOBS,
    LABELS,
    feedback,
    feedback_sub,
    monitor_config,
    new_monitor_arrays,
)
from gmm_volunteer.model.constants import DECISION_FIELD_UNITS, DECISION_FIELDS, MONITOR_OPS

RouteState = namedtuple(
    "RouteState",
    "po mf mi mc mg ml mlt ms ac mser pl_node pl_t pl_dec pl_tag pl_sub pl_tier pp ea nq af ai dlog dn hs pc pst",
)
# herding diagnostic per step (R.hs[t, field]; issue 22): the most subtasks placed on one
# node in the step; 1 if after the step's placements the server had a free core while a
# volunteer held more subtasks than its cores (whole cores, `whole_cores`, since issue 34;
# the allocation in cores before); the most subtasks on one volunteer beyond
# its cores (0 if none exceeds them); the server's subtasks; (issue 34) the most subtasks
# placed on one volunteer in the step; the most placed on one volunteer beyond its cores
# (0 if none); 1 if the server had a free core after the step's placements
H_MAX_PLACED, H_IDLE_SERVER, H_EXCESS, H_SERVER_Q, H_VOL_PLACED, H_VOL_PLACED_OVER, H_SERVER_FREE = range(7)
HERDING_FIELDS = ("max_placed_one_node", "server_free_volunteer_over", "max_volunteer_excess",
                  "server_subtasks", "max_placed_one_volunteer", "max_placed_beyond_cores",
                  "server_free_core")
# R.af[0:9]: per tier (local, edge, cloud) Welford count, mean and M2 of the service
# times learned from completions whose placement carried a tag (queue-aware routers)
AF_SVC = 0
N_TIERS = 3
# a placement's tag counts its transfer time in these units per second (microseconds;
# `learn_service`), so that a transfer below the step (docs/model.md D34) is kept
TRANSFER_UNIT = 1e6
# R.af[AF_MIX + tier * n_sub + j]: subtasks j completed on each tier (tier routers, issue
# 34: the mix a tier serves, for its service SCV); after the queue-aware layout
AF_MIX = 12
# decision log columns (R.dlog): step, node, tier, predictions (hybrid, model-only,
# queue-only) of the chosen tier's delay, realized delay (NaN until the subtask is done),
# the router's own prediction; (issue 51) the subtask type (bundle order) and the chosen
# tier's arrival rate per server as the router saw it, what seed 001's law is fitted on
D_T, D_NODE, D_TIER, D_PRED, D_PRED_MODEL, D_PRED_QUEUE, D_REAL, D_PRED_ROUTER, D_SUBTYPE, D_RATE = range(10)
# whole-run estimator error (R.ea[tier, estimator, (sum of |pred - real| / real, count)])
# over every decision of a tier router that completed (issue 22: not only the logged ones)
TIER_NAMES = ("local", "edge", "cloud")
# "router": the delay the run's router decided by (D_PRED_ROUTER; issue 34)
ESTIMATOR_NAMES = ("hybrid", "model_only", "queue_only", "router")


def option_index(options_model) -> dict[str, int]:
    """Position of each option in ``R.po`` (declaration order)."""
    return {name: k for k, name in enumerate(options_model.model_fields)}


def option_vector(options) -> np.ndarray:
    """The options as floats in declaration order; an option that is not a number (a list,
    None) is NaN here and reaches the kernels another way (a router's scratch arrays)."""
    out = []
    for f in type(options).model_fields:
        x = getattr(options, f)
        out.append(float(x) if isinstance(x, (bool, int, float)) else np.nan)
    return np.array(out, np.float64)


def new_route_state(options, n_nodes: int, n_sub: int, steps: int, slots: int = 1, nf: int = 0,
                    ni: int = 0, log_size: int = 0, log_fields: int = len(DECISION_FIELDS)) -> RouteState:
    """A router's state for `n_nodes` nodes, `n_sub` subtask data keys, `steps` steps."""
    V = n_nodes
    mon = new_monitor_arrays(V, steps, monitor_config(options), n_sub)
    return RouteState(
        po=option_vector(options),
        **mon,
        pl_node=np.full((V, slots), -1, np.int64),
        pl_t=np.zeros((V, slots), np.int64),
        pl_dec=np.full((V, slots), -1, np.int64),
        pl_tag=np.full((V, slots), -1, np.int64),
        pl_sub=np.full((V, slots), -1, np.int64),
        pl_tier=np.full((V, slots), -1, np.int64),
        pp=np.full((V, slots, len(ESTIMATOR_NAMES)), np.nan),
        ea=np.zeros((N_TIERS, len(ESTIMATOR_NAMES), 2)),
        nq=np.zeros(V, np.int64),
        af=np.zeros(max(nf, 1)),
        ai=np.zeros(max(ni, 1), np.int64),
        dlog=np.full((max(log_size, 1), log_fields), np.nan),
        dn=np.zeros(2, np.int64),
        hs=np.zeros((max(steps, 1), len(HERDING_FIELDS))),
        pc=np.zeros(V, np.int64),
        pst=np.full(V, -1, np.int64),
    )


class Router(Scheduler):
    """Base of the routers: a scheduler with a routing state (module docstring).
    Subclasses set ``name``, ``Options``, the hooks and, if they need scratch arrays,
    `scratch_sizes`; `decision_log_size` > 0 keeps a log of decisions, of the fields
    ``decision_fields`` (with their units ``decision_field_units``)."""

    decision_fields = DECISION_FIELDS
    decision_field_units = DECISION_FIELD_UNITS

    def reset(self, P, rng: np.random.Generator) -> None:
        self.rng = rng  # the routing state needs the run's length: see prepare

    def scratch_sizes(self, params) -> tuple[int, int]:
        """Lengths of the float and int scratch arrays ``R.af`` / ``R.ai``."""
        return 0, 0

    def decision_log_size(self) -> int:
        return 0

    def prepare(self, params, steps: int) -> None:
        V, slots = params.n_nodes, params.max_slots
        nf, ni = self.scratch_sizes(params)
        self._R = new_route_state(self.options, V, int(params.n_sub), steps, slots, nf, ni,
                                  self.decision_log_size(), len(self.decision_fields))
        self._args = (self._R,)

    def kernel_args(self) -> tuple:
        return self._args

    def checkpoint_state(self) -> dict:
        """The routing state's arrays (placements, what the monitor learned, series)."""
        return {"route": dict(self._R._asdict())}

    def restore_checkpoint(self, state: dict) -> None:
        """Take back the arrays of `checkpoint_state`; each must have the field, dtype and
        shape `prepare` gave it for this run (its kernels index them by the run's sizes)."""
        route = state.get("route") if isinstance(state, dict) and set(state) == {"route"} else None
        if not isinstance(route, dict) or set(route) != set(RouteState._fields):
            raise ValueError("route: not the fields of a routing state")
        for name, made in self._R._asdict().items():
            got = route[name]
            if not isinstance(got, np.ndarray) or got.dtype != made.dtype or got.shape != made.shape:
                what = f"{got.dtype} {got.shape}" if isinstance(got, np.ndarray) else type(got).__name__
                raise ValueError(f"route.{name}: {what}, where this run has {made.dtype} {made.shape}")
        self._R = RouteState(**{name: route[name] for name in RouteState._fields})
        self._args = (self._R,)

    def record_series(self, steps: int) -> tuple[dict, dict]:
        R = self._R
        series = {
            "monitor_calls": (("time", "monitor_op"), R.mser[:steps, :, 0].astype(np.float64),
                              {"long_name": "monitoring calls per step", "units": "1"}),
            "monitor_bytes": (("time", "monitor_op"), R.mser[:steps, :, 1].astype(np.float64),
                              {"long_name": "monitoring traffic per step", "units": "byte"}),
            "node_label": (("node",), R.mi[:, 3].astype(np.int8), {
                "long_name": "label of each node at the end of the run",
                "flag_values": list(range(len(LABELS))), "flag_meanings": " ".join(LABELS)}),
            "node_completions_observed": (("node",), R.mi[:, I_NOBS].copy(),
                                          {"long_name": "completed subtasks fed back", "units": "1"}),
            "node_placements_lost": (("node",), R.mi[:, I_NFAIL].copy(),
                                     {"long_name": "placements reset or aborted", "units": "1"}),
            "herding": (("time", "herding_field"), R.hs[:steps].copy(), {
                "long_name": "herding diagnostic per step (docs/routing.md section 7)", "units": "1"}),
        }
        coords = {"monitor_op": MONITOR_OPS, "herding_field": HERDING_FIELDS}
        if self.decision_log_size() > 0:
            n = int(min(R.dn[0], R.dlog.shape[0]))
            series["decision"] = (("decision", "decision_field"), R.dlog[:n].copy(), {
                "long_name": "routing decisions: predicted and realized subtask delay",
                "units_coordinate": "decision_field_unit",  # fields differ in unit
                "decisions_total": int(R.dn[1])})
            coords["decision_field"] = self.decision_fields
            coords["decision_field_unit"] = ("decision_field", self.decision_field_units)
            series["estimator_error"] = (("tier", "estimator", "error_stat"), R.ea.copy(), {
                "long_name": "delay estimators' absolute relative error over every completed "
                             "decision, summed, and the decisions (per tier of the decision)",
                "units": "1"})
            coords["tier"] = TIER_NAMES
            coords["estimator"] = ESTIMATOR_NAMES
            coords["error_stat"] = ("sum_abs_rel_error", "decisions")
        return series, coords


@njit(cache=True, inline="always")
def fits(S, P, v, j, t):
    """v's free memory covers the marginal estimate of one more j (D12)."""
    return free_memory(S, v) >= marginal_memory(S, P, v, j, t)


@kernel
def route_assign(S, P, R, i, p, v, t, dec, tag=-1, j=-1):
    """Assign slot p of user i's request to v and remember it (for feedback); `dec` is
    its decision-log row (-1 none), `tag` = tier + 3 * transfer (microseconds) for service learning
    (-1 none, see `learn_service`), `j` the variant serving it (-1: the requested
    subtask; docs/model.md D24)."""
    assign(S, P, i, p, v, t, j)
    R.pl_sub[i, p] = P.task_sub[S.rq_type[i], p] if j < 0 else j
    R.pl_node[i, p] = v
    R.pl_t[i, p] = t
    R.pl_dec[i, p] = dec
    R.pl_tag[i, p] = tag
    R.nq[v] += 1
    if R.pst[v] != t:
        R.pst[v] = t
        R.pc[v] = 0
    R.pc[v] += 1
    if R.pc[v] > R.hs[t, H_MAX_PLACED]:
        R.hs[t, H_MAX_PLACED] = R.pc[v]


@kernel
def whole_cores(S, v):
    """The subtasks v runs at once without sharing a core: its CPU allocation in cores,
    rounded, at least 1 (0 without an allocation). A volunteer whose fitted allocation is
    0.95 of a core runs one subtask, not "more than its cores" (issue 34)."""
    c = S.alloc[v, CPU] / 100.0
    return 0 if c <= 0.0 else max(1, int(round(c)))


@kernel
def record_herding(S, R, t):
    """The rest of step t's herding diagnostic, after the router placed (R.nq current):
    does the server have a free core while a volunteer holds more subtasks than its
    cores, by how much does the fullest volunteer exceed its cores, and the most
    subtasks placed on one volunteer in this step, in all and beyond its cores. Cores are
    whole (`whole_cores`)."""
    excess = 0.0
    placed, beyond = 0.0, 0.0
    for k in range(S.n_on[0]):
        v = S.on_list[k]
        cores = whole_cores(S, v)
        e = R.nq[v] - cores
        if e > excess:
            excess = e
        if v != 0 and R.pst[v] == t:
            placed = max(placed, float(R.pc[v]))
            beyond = max(beyond, R.pc[v] - cores)
    free = R.nq[0] < whole_cores(S, 0)
    R.hs[t, H_EXCESS] = excess
    R.hs[t, H_SERVER_Q] = R.nq[0]
    R.hs[t, H_IDLE_SERVER] = 1.0 if (excess > 0.0 and free) else 0.0
    R.hs[t, H_VOL_PLACED] = placed
    R.hs[t, H_VOL_PLACED_OVER] = beyond
    R.hs[t, H_SERVER_FREE] = 1.0 if free else 0.0


@kernel
def learn_service(R, tag, latency):
    """A service-time sample for tier tag % 3 (Welford's update); tag // 3 is the
    transfer time to subtract from the latency, in microseconds (whole steps are exact:
    2,000,000 / 1e6 is 2.0)."""
    tier = tag % N_TIERS
    x = max(latency - (tag // N_TIERS) / TRANSFER_UNIT, 0.0)
    o = AF_SVC + 3 * tier
    R.af[o] += 1.0
    d = x - R.af[o + 1]
    R.af[o + 1] += d / R.af[o]
    R.af[o + 2] += d * (x - R.af[o + 1])


@kernel
def count_queues(S, R):
    """R.nq[v] = subtasks placed on v and not done (any active phase), from the live
    batches: O(batches), plus clearing the counts."""
    R.nq[:] = 0
    for k in range(S.n_b[0]):
        b = S.b_list[k]
        if S.b_phase[b] != DONE:
            R.nq[S.b_node[b]] += S.b_size[b]


@kernel
def observe(S, P, R, t):
    """Passive feedback (seed 000 section 5.2): every slot this router placed that is
    done now gives its node a latency sample, t - placement step (s; under latency:
    substep, its result's time - placement step, D34); a placement that
    was reset or aborted counts as lost. Runs in the downloads hook, before finished
    requests release their slots."""
    for k in range(S.n_rq[0]):
        i = S.rq_list[k]
        for p in range(P.task_nsub[S.rq_type[i]]):
            v = R.pl_node[i, p]
            if v < 0:
                continue
            if R.pl_t[i, p] < S.rq_start[i]:  # left over from the user's earlier request
                R.pl_node[i, p] = -1
                R.pl_tier[i, p] = -1
                continue
            if S.ex_node[i, p] != v:  # reset (node offline) or aborted by the executor
                R.mi[v, I_NFAIL] += 1
                R.pl_node[i, p] = -1
                R.pl_tier[i, p] = -1
                continue
            if S.ex_phase[i, p] == DONE:
                # from its placement to its result; under latency: substep the moment the
                # result came in, inside its step (D34)
                lat = S.ex_tend[i, p] - R.pl_t[i, p] if P.substep else float(t - R.pl_t[i, p])
                feedback(R, v, lat, t)
                if R.pl_sub[i, p] >= 0:
                    feedback_sub(R, v, R.pl_sub[i, p], lat, t)
                R.mi[v, I_NOBS] += 1
                d = R.pl_dec[i, p]
                if d >= 0 and d < R.dlog.shape[0]:
                    R.dlog[d, D_REAL] = lat
                if R.pl_tag[i, p] >= 0:
                    learn_service(R, R.pl_tag[i, p], lat)
                tr = R.pl_tier[i, p]
                if tr >= 0 and R.pl_sub[i, p] >= 0 and R.af.shape[0] >= AF_MIX + N_TIERS * P.n_sub:
                    R.af[AF_MIX + tr * P.n_sub + R.pl_sub[i, p]] += 1.0
                if tr >= 0:
                    for e in range(R.ea.shape[1]):
                        if not math.isnan(R.pp[i, p, e]):  # a router that predicts none
                            R.ea[tr, e, 0] += abs(R.pp[i, p, e] - lat) / lat
                            R.ea[tr, e, 1] += 1.0
                    R.pl_tier[i, p] = -1
                R.pl_node[i, p] = -1
