"""Per-run measures of the routing comparison (issue 12 items 1, 4 and 5;
docs/routing.md): the accuracy served, the share of slots a model variant other than the
requested one served (gmm_volunteer.model.variants), and the queue-aware routers' delay
estimator error.

Estimator error (seed 002 claims its hybrid estimator is the most accurate): over the
logged decisions whose subtask completed, the mean absolute relative error
|predicted - realized| / realized of the chosen tier's delay, where realized is the
subtask's latency from placement to completion (s, at least one step) and predicted
T_k = W_k + s_k + D_k (docs/routing.md section 4) with W_k from each of the three
estimators the log keeps: the hybrid, the model-only (beta = 0) and the queue-only
(beta = 1). All three are scored on the same decisions, those of the run's router, so
they are compared on equal terms; ``estimator_mare`` is the one the router itself
decides by. NaN for runs without a decision log.
"""

from __future__ import annotations

import numpy as np

from gmm_volunteer.policies.routing import (
    D_PRED, D_PRED_MODEL, D_PRED_QUEUE, D_PRED_ROUTER, D_REAL, ESTIMATOR_NAMES, H_EXCESS, H_IDLE_SERVER, H_MAX_PLACED,
    H_SERVER_FREE, H_VOL_PLACED, H_VOL_PLACED_OVER, TIER_NAMES)
from gmm_volunteer.model.variants import accuracy_served, variant_share


ESTIMATORS = {"hybrid": D_PRED, "model_only": D_PRED_MODEL, "queue_only": D_PRED_QUEUE,
              "router": D_PRED_ROUTER}


def estimator_error(ds, estimator: str | None = None) -> tuple[float, int]:
    """(mean absolute relative error, decisions it is over) of `estimator` (default: the
    one the run's router decides by)."""
    if "decision" not in ds:
        return float("nan"), 0
    d = np.asarray(ds["decision"].values, dtype=np.float64)
    if d.size == 0:
        return float("nan"), 0
    if estimator is None:  # the router's own prediction (issue 34), else as before it
        sched = str(ds.attrs.get("scheduler", ""))
        own = d.shape[1] > D_PRED_ROUTER and np.isfinite(d[:, D_PRED_ROUTER]).any()
        estimator = "router" if own else (sched if sched in ESTIMATORS else "hybrid")
    if ESTIMATORS[estimator] >= d.shape[1]:  # a log made before the field existed
        return float("nan"), 0
    pred, real = d[:, ESTIMATORS[estimator]], d[:, D_REAL]
    ok = np.isfinite(pred) & np.isfinite(real) & (real > 0)
    if not ok.any():
        return float("nan"), 0
    return float(np.mean(np.abs(pred[ok] - real[ok]) / real[ok])), int(ok.sum())


def whole_run_mape(ds, estimator: str, tier: str | None = None) -> tuple[float, int]:
    """(mean absolute relative error, decisions) of `estimator` over every completed
    decision of the run (issue 22: not only the logged ones), of one tier or all."""
    if "estimator_error" not in ds or estimator not in ds["estimator"].values:
        return float("nan"), 0
    e = ds["estimator_error"].sel(estimator=estimator)
    if tier is not None:
        e = e.sel(tier=tier)
    else:
        e = e.sum("tier")
    tot, n = float(e.sel(error_stat="sum_abs_rel_error")), float(e.sel(error_stat="decisions"))
    return (tot / n if n > 0 else float("nan")), int(n)


HERDING_KEYS = ("mean", "max", "server_free_share", "excess_max", "volunteer_max", "volunteer_ge5_share",
                "beyond_bound_server_free_share")
# a pile-up as issue 34 counts them: this many subtasks or more on one volunteer in a step
PILE_UP = 5


def herding(ds) -> dict[str, float]:
    """The herding diagnostic reduced over the run's steps in which the router placed
    something: mean and maximum of the most subtasks placed on one node in a step, the
    share of those steps in which the server had a free core while a volunteer held more
    subtasks than its cores, and the largest such excess; (issue 34) the most subtasks
    placed on one volunteer in a step, the share of steps with `PILE_UP` or more on one
    volunteer, and the share of steps in which a volunteer was given more than its cores
    + 1 while the server had a free core after placing (ASRB's bound, docs/routing.md
    section 7). The last three are NaN for stores made before they were recorded."""
    if "herding" not in ds:
        return {k: float("nan") for k in HERDING_KEYS}
    h = np.asarray(ds["herding"].values, dtype=np.float64)
    placed = h[:, H_MAX_PLACED] > 0
    if not placed.any():
        return {k: 0.0 for k in HERDING_KEYS}
    out = {"mean": float(h[placed, H_MAX_PLACED].mean()), "max": float(h[:, H_MAX_PLACED].max()),
           "server_free_share": float(h[placed, H_IDLE_SERVER].mean()),
           "excess_max": float(h[:, H_EXCESS].max())}
    if h.shape[1] <= H_SERVER_FREE:
        return {**out, **{k: float("nan") for k in HERDING_KEYS[4:]}}
    beyond = (h[placed, H_VOL_PLACED_OVER] > 1.0) & (h[placed, H_SERVER_FREE] > 0)
    return {**out, "volunteer_max": float(h[:, H_VOL_PLACED].max()),
            "volunteer_ge5_share": float((h[placed, H_VOL_PLACED] >= PILE_UP).mean()),
            "beyond_bound_server_free_share": float(beyond.mean())}


def routing_metrics(ds) -> dict:
    """name -> (dims, value, attrs) for `summary.run_metrics`."""
    mare, n = estimator_error(ds)
    hd = herding(ds)
    mape = {}
    for e in ESTIMATOR_NAMES:
        mape[f"estimator_mape_{e}"] = ((), whole_run_mape(ds, e)[0], {
            "long_name": f"mean absolute relative error of the {e} delay estimate over every "
                         "completed decision of the run", "units": "1"})
        for tr in TIER_NAMES:
            mape[f"estimator_mape_{e}_{tr}"] = ((), whole_run_mape(ds, e, tr)[0], {
                "long_name": f"as estimator_mape_{e}, decisions to the {tr} tier", "units": "1"})
    mape["estimator_mape_decisions"] = ((), float(whole_run_mape(ds, "hybrid")[1]), {
        "long_name": "completed decisions the whole-run estimator error is over", "units": "1"})
    n_cloud, n_all = whole_run_mape(ds, "hybrid", "cloud")[1], whole_run_mape(ds, "hybrid")[1]
    lost = float(ds["node_placements_lost"].sum()) if "node_placements_lost" in ds else float("nan")
    return {
        **mape,
        "server_decision_share": ((), n_cloud / n_all if n_all > 0 else float("nan"), {
            "long_name": "share of a tier router's completed decisions that went to the server",
            "units": "1"}),
        "placements_lost": ((), lost, {
            "long_name": "placements reset (node offline) or aborted by the executor, all nodes",
            "units": "1"}),
        "herding_max_placed_mean": ((), hd["mean"], {
            "long_name": "most subtasks placed on one node in a step, mean over steps with placements",
            "units": "1"}),
        "herding_max_placed_max": ((), hd["max"], {
            "long_name": "most subtasks placed on one node in one step", "units": "1"}),
        "herding_server_free_share": ((), hd["server_free_share"], {
            "long_name": "share of steps with placements in which the server had a free core while "
                         "a volunteer held more subtasks than its cores", "units": "1"}),
        "herding_excess_max": ((), hd["excess_max"], {
            "long_name": "most subtasks beyond its cores on one volunteer", "units": "1"}),
        "herding_volunteer_max": ((), hd["volunteer_max"], {
            "long_name": "most subtasks placed on one volunteer in one step", "units": "1"}),
        "herding_volunteer_ge5_share": ((), hd["volunteer_ge5_share"], {
            "long_name": f"share of steps with placements in which one volunteer was given {PILE_UP} "
                         "or more subtasks", "units": "1"}),
        "herding_beyond_bound_share": ((), hd["beyond_bound_server_free_share"], {
            "long_name": "share of steps with placements in which a volunteer was given more than its "
                         "cores + 1 subtasks while the server had a free core", "units": "1"}),
        "accuracy_served": ((), accuracy_served(ds), {
            "long_name": "mean accuracy of the model variants serving completed requests", "units": "1"}),
        "variant_share": ((), variant_share(ds), {
            "long_name": "share of completed subtasks with variants served by another variant",
            "units": "1"}),
        "estimator_mare": ((), mare, {
            "long_name": "mean absolute relative error of the routers' delay predictions",
            "units": "1"}),
        "estimator_decisions": ((), float(n), {
            "long_name": "completed decisions the estimator error is over", "units": "1"}),
        **{f"estimator_mare_{e}": ((), estimator_error(ds, e)[0], {
            "long_name": f"mean absolute relative error of the {e} delay estimate on the "
                         "router's decisions", "units": "1"}) for e in ESTIMATORS},
    }
