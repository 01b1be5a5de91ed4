"""The monitoring model: what a router knows about nodes, and what knowing it costs
(issue 12 item 2; DESIGN.md section 7; seed 000_957acf713eeb90e3, sections 3.1, 5 and
6.4; docs/routing.md, "Monitoring").

A router never reads a node's load from the simulator's state directly. It sees each
node through a cache that this module keeps:

* **latency**: an exponentially weighted moving average (weight ``ewma_alpha`` on the
  newest sample) of the latencies of the node's completed subtasks (*passive* feedback,
  free: it rides on the results) and of *active probes*, which a router issues when
  the cached value is missing or older than the node's period (seed 000 section 5.2);
* **CPU and memory use** (fractions of the node's allocation), refreshed by a *metric
  read* when older than the node's period;
* a **per-node period**: a base period times a multiplier the router sets (ASRB: 1x for
  overloaded, 2x fit, 3x unfit nodes, seed 000 section 6.4);
* a **published label** per node (fit / unfit / overloaded), changed at most once per
  ``label_period_s`` and only when it would change (seed 000 section 6.4: a PATCH
  call only when the label changes).

Every metric read, probe and label update is charged as calls and bytes in a per-step
series (`MONITOR_OPS` x (calls, bytes)), written to the result store as
``monitor_calls`` / ``monitor_bytes`` and summed by `summary.run_metrics`. A call that
lists n nodes costs ``call_bytes + n * node_bytes`` (seed 000 Table 2: the baseline's
per-call payload grows with the nodes it lists; our defaults are rough calibrations
from that table, docs/routing.md).

The arrays live in a `RouteState` (policies.routing) that the router passes to its
hooks; the functions here are ``@njit`` and take it as ``R``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from pydantic import BaseModel, Field

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.kernels.ops import work_mean
from gmm_volunteer.model.params import CPU, MEMORY
from gmm_volunteer.model.constants import (  # noqa: F401
    MONITOR_OPS, OP_LABEL_UPDATE, OP_LATENCY_PROBE, OP_METRIC_READ, OP_SCORE_UPDATE)

# per-node floats R.mf
F_LAT, F_CPU, F_MEM, F_SCORE = range(4)
NF = 4
# per-node ints R.mi (I_STABLE: consecutive latency samples within the volatility band;
# I_VOLATILE: 1 if the last one was outside it; I_SEEN: step of the first metric read
# since the node came online, -1 none: seed 000 5.1 and 6.2, issue 22)
I_T_LAT, I_T_RES, I_MULT, I_LABEL, I_T_LABEL, I_T_OVER, I_NOBS, I_NFAIL, I_STABLE, I_VOLATILE, I_SEEN = range(11)
NI = 11
# configuration R.mc (from the router's options)
(C_ALPHA, C_PERIOD, C_CALL_BYTES, C_NODE_BYTES, C_PROBE_BYTES, C_LABEL_BYTES, C_LABEL_PERIOD,
 C_THRESHOLD, C_COOLDOWN, C_LAT_CAP, C_VOLATILE) = range(11)
NC = 11
# global ints R.mg
G_LAST_POLL = 0
NG = 2
# operations of the cost series R.mser[t, op, (calls, bytes)]
# node labels (seed 000 section 3.2)
FIT, UNFIT, OVERLOADED = range(3)
LABELS = ("fit", "unfit", "overloaded")


class MonitorOptions(BaseModel):
    """Options every router shares: the monitor's periods, smoothing and costs
    (docs/routing.md lists them with their sources)."""

    # Base period of metric reads and latency refreshes, s (seed 000 evaluates 15 and 60).
    monitor_period_s: int = Field(15, ge=1)
    # Weight of the newest latency sample in the moving average (seed 000 section 5.2).
    ewma_alpha: float = Field(0.3, gt=0.0, le=1.0)
    # Bytes of one monitoring API call without its node records, and per node listed.
    call_bytes: int = Field(2000, ge=0)
    node_bytes: int = Field(4000, ge=0)
    # Bytes of one active latency probe (a lightweight echo request).
    probe_bytes: int = Field(200, ge=0)
    # Bytes of one label update call, and the shortest time between two of one node, s.
    label_bytes: int = Field(2000, ge=0)
    label_period_s: int = Field(5, ge=1)
    # CPU or memory use above this fraction of the allocation marks a node overloaded.
    overload_threshold: float = Field(0.85, gt=0.0)
    # An overloaded label stays at least this long after the last overloaded reading, s.
    cooldown_s: int = Field(30, ge=0)
    # Latency that scores 0 (seed 000 eq. 1 caps at 1000 ms; our subtasks take seconds).
    latency_cap_s: float = Field(10.0, gt=0.0)
    # A latency sample further than this fraction from the node's average marks the node
    # volatile (seed 000 section 5.1: more monitoring for volatile nodes).
    volatile_change: float = Field(0.5, gt=0.0)


def monitor_config(options) -> np.ndarray:
    """R.mc from a router's options (defaults for a router without monitor options)."""
    d = MonitorOptions().model_dump()
    for k in d:
        if hasattr(options, k):
            d[k] = getattr(options, k)
    mc = np.zeros(NC)
    mc[C_ALPHA] = d["ewma_alpha"]
    mc[C_PERIOD] = d["monitor_period_s"]
    mc[C_CALL_BYTES] = d["call_bytes"]
    mc[C_NODE_BYTES] = d["node_bytes"]
    mc[C_PROBE_BYTES] = d["probe_bytes"]
    mc[C_LABEL_BYTES] = d["label_bytes"]
    mc[C_LABEL_PERIOD] = d["label_period_s"]
    mc[C_THRESHOLD] = d["overload_threshold"]
    mc[C_COOLDOWN] = d["cooldown_s"]
    mc[C_LAT_CAP] = d["latency_cap_s"]
    mc[C_VOLATILE] = d["volatile_change"]
    return mc


def new_monitor_arrays(n_nodes: int, steps: int, mc: np.ndarray, n_sub: int = 1) -> dict:
    """The monitor's arrays; ``ml`` / ``mlt`` keep a latency and its time per (node,
    subtask data key j) (seed 000 keeps one per pod; issue 22), ``ms`` the last score
    published per (node, j) (a pod's score; seed 000 6.4), ``ac`` the last Alg. 2 round
    per subtask (its approximation cooldown)."""
    mf = np.zeros((n_nodes, NF))
    mf[:, F_LAT] = np.nan
    mi = np.zeros((n_nodes, NI), np.int64)
    mi[:, I_T_LAT] = -1
    mi[:, I_T_RES] = -1
    mi[:, I_MULT] = 1
    mi[:, I_LABEL] = FIT  # a node nobody has judged yet is routable (seed 000 6.3, T2)
    mi[:, I_T_LABEL] = -(1 << 40)
    mi[:, I_T_OVER] = -(1 << 40)
    mi[:, I_SEEN] = -1
    mg = np.zeros(NG, np.int64)
    mg[G_LAST_POLL] = -(1 << 40)
    n_sub = max(int(n_sub), 1)
    return {"mf": mf, "mi": mi, "mc": mc, "mg": mg,
            "ml": np.full((n_nodes, n_sub), np.nan), "mlt": np.full((n_nodes, n_sub), -1, np.int64),
            "ms": np.full((n_nodes, n_sub), np.nan),
            "ac": np.full(n_sub, -(1 << 40), np.int64),
            "mser": np.zeros((max(steps, 1), len(MONITOR_OPS), 2))}


@njit(cache=True, inline="always")
def charge(R, t, op, calls, nbytes):
    """Add `calls` monitoring calls of `nbytes` bytes in total to step t's cost."""
    R.mser[t, op, 0] += calls
    R.mser[t, op, 1] += nbytes


@njit(cache=True, inline="always")
def period(R, v):
    """v's current period, s: the base period times its multiplier."""
    return R.mc[C_PERIOD] * R.mi[v, I_MULT]


@kernel
def feedback(R, v, latency, t):
    """A latency sample of node v (a completed subtask or a probe) into its average."""
    if R.mi[v, I_T_LAT] < 0 or math.isnan(R.mf[v, F_LAT]):
        R.mf[v, F_LAT] = latency
    else:
        a = R.mc[C_ALPHA]
        R.mf[v, F_LAT] = (1.0 - a) * R.mf[v, F_LAT] + a * latency
    R.mi[v, I_T_LAT] = t


@kernel
def feedback_sub(R, v, j, latency, t):
    """A latency sample of subtask j on node v into the (node, j) average (seed 000 keeps
    a latency per pod: a model on a node). Also tracks v's volatility (seed 000 5.1): a
    sample further than ``volatile_change`` (relative) from the average marks v volatile
    and restarts its count of stable samples; one within it adds to that count."""
    old = R.ml[v, j]
    if R.mlt[v, j] < 0 or math.isnan(old):
        R.ml[v, j] = latency
    else:
        a = R.mc[C_ALPHA]
        R.ml[v, j] = (1.0 - a) * old + a * latency
        if abs(latency - old) > R.mc[C_VOLATILE] * old:
            R.mi[v, I_VOLATILE] = 1
            R.mi[v, I_STABLE] = 0
        else:
            R.mi[v, I_VOLATILE] = 0
            R.mi[v, I_STABLE] += 1
    R.mlt[v, j] = t


@njit(cache=True, inline="always")
def latency_stale_sub(R, v, j, t):
    return R.mlt[v, j] < 0 or t - R.mlt[v, j] >= period(R, v)


@njit(cache=True, inline="always")
def latency_stale(R, v, t):
    return R.mi[v, I_T_LAT] < 0 or t - R.mi[v, I_T_LAT] >= period(R, v)


@njit(cache=True, inline="always")
def metrics_stale(R, v, t):
    return R.mi[v, I_T_RES] < 0 or t - R.mi[v, I_T_RES] >= period(R, v)


@njit(cache=True, inline="always")
def use_fractions(S, v, t):
    """(CPU, memory) use of v as fractions of its allocation: what a metrics API reports.
    Consumption totals are fresh only for nodes touched this step; others used nothing."""
    if S.nd_tstamp[v] != t:
        return 0.0, 0.0
    cpu = S.nd_cons[v, CPU] / S.alloc[v, CPU] if S.alloc[v, CPU] > 0 else 0.0
    mem = S.nd_cons[v, MEMORY] / S.alloc[v, MEMORY] if S.alloc[v, MEMORY] > 0 else 0.0
    return cpu, mem


@njit(cache=True, inline="always")
def _store_metrics(S, R, v, t):
    cpu, mem = use_fractions(S, v, t)
    if R.mi[v, I_SEEN] < 0:
        R.mi[v, I_SEEN] = t
    R.mf[v, F_CPU] = cpu
    R.mf[v, F_MEM] = mem
    R.mi[v, I_T_RES] = t
    if cpu > R.mc[C_THRESHOLD] or mem > R.mc[C_THRESHOLD]:
        R.mi[v, I_T_OVER] = t


@kernel
def read_metrics(S, R, v, t):
    """A metric read of one node (one call listing one node)."""
    _store_metrics(S, R, v, t)
    charge(R, t, OP_METRIC_READ, 1.0, R.mc[C_CALL_BYTES] + R.mc[C_NODE_BYTES])


@kernel
def refresh_metrics(S, R, v, t):
    """Read v's metrics if its cached ones are older than its period."""
    if metrics_stale(R, v, t):
        read_metrics(S, R, v, t)


@kernel
def poll_all(S, R, t):
    """Fixed-interval polling of every online node and the server in one listing call
    (the baseline of seed 000 section 6.4, which queries all workers every interval)."""
    if t - R.mg[G_LAST_POLL] < R.mc[C_PERIOD]:
        return
    R.mg[G_LAST_POLL] = t
    _store_metrics(S, R, 0, t)
    for k in range(S.n_on[0]):
        _store_metrics(S, R, S.on_list[k], t)
    n = S.n_on[0] + 1
    charge(R, t, OP_METRIC_READ, 1.0, R.mc[C_CALL_BYTES] + R.mc[C_NODE_BYTES] * n)


@njit(cache=True, inline="always")
def overloaded(R, v, t):
    """Overloaded at its last reading, or within the cooldown after one."""
    return t - R.mi[v, I_T_OVER] <= R.mc[C_COOLDOWN]


@kernel
def probe_estimate(S, P, R, v, j, t):
    """What an echo probe of v tells about the latency of subtask j there now, s.

    The simulator has no network round trip apart from the transfer phases, so a probe
    returns the node's load-dependent latency (docs/model.md D10): one step for each
    transfer phase on a user node, plus the execution time of j's mean work under
    processor sharing with the n subtasks already there, at least one step
    (docs/routing.md, "Probes")."""
    cores = S.alloc[v, CPU] / 100.0
    work = work_mean(S, P, v, j, 1)  # what v would take: a volunteer's factor included (D29)
    n = R.nq[v]
    if cores <= 0.0:
        ex = R.mc[C_LAT_CAP]
    else:
        ex = max(1.0, (n + 1) * work / cores)
    return ex + (0.0 if v == 0 else 2.0)


@kernel
def probe_latency(S, P, R, v, j, t):
    """An active probe of v (charged) whose answer enters v's latency average."""
    feedback(R, v, probe_estimate(S, P, R, v, j, t), t)
    charge(R, t, OP_LATENCY_PROBE, 1.0, R.mc[C_PROBE_BYTES])


@kernel
def probe_latency_sub(S, P, R, v, j, t):
    """An active probe of subtask j's latency on v (charged), into the (v, j) average
    and v's node average."""
    x = probe_estimate(S, P, R, v, j, t)
    feedback_sub(R, v, j, x, t)
    feedback(R, v, x, t)
    charge(R, t, OP_LATENCY_PROBE, 1.0, R.mc[C_PROBE_BYTES])


@kernel
def refresh_latency(S, P, R, v, j, t):
    """Probe v if its latency is missing or older than its period."""
    if latency_stale(R, v, t):
        probe_latency(S, P, R, v, j, t)


@kernel
def publish_label(R, v, label, t):
    """Set v's label if it differs and the label period has passed (one charged update
    call); returns the label in effect."""
    if label != R.mi[v, I_LABEL] and t - R.mi[v, I_T_LABEL] >= R.mc[C_LABEL_PERIOD]:
        R.mi[v, I_LABEL] = label
        R.mi[v, I_T_LABEL] = t
        charge(R, t, OP_LABEL_UPDATE, 1.0, R.mc[C_LABEL_BYTES])
    return R.mi[v, I_LABEL]
