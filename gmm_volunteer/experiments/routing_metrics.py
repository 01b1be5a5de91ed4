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
    D_PRED, D_PRED_MODEL, D_PRED_QUEUE, D_REAL, ESTIMATOR_NAMES, H_EXCESS, H_IDLE_SERVER, H_MAX_PLACED,
    TIER_NAMES)
from gmm_volunteer.model.variants import accuracy_served, variant_share


ESTIMATORS = {"hybrid": D_PRED, "model_only": D_PRED_MODEL, "queue_only": D_PRED_QUEUE}


def estimator_error(ds, estimator: str | None = None) -> tuple[float, int]:
    """(mean absolute relative error, decisions it is over) of `estimator` (default: the
    one the run's router decides by)."""
    if "decision" not in ds:
        return float("nan"), 0
    d = np.asarray(ds["decision"].values, dtype=np.float64)
    if d.size == 0:
        return float("nan"), 0
    if estimator is None:
        sched = str(ds.attrs.get("scheduler", ""))
        estimator = sched if sched in ESTIMATORS else "hybrid"
    pred, real = d[:, ESTIMATORS[estimator]], d[:, D_REAL]
    ok = np.isfinite(pred) & np.isfinite(real) & (real > 0)
    if not ok.any():
        return float("nan"), 0
    return float(np.mean(np.abs(pred[ok] - real[ok]) / real[ok])), int(ok.sum())


def whole_run_mape(ds, estimator: str, tier: str | None = None) -> tuple[float, int]:
    """(mean absolute relative error, decisions) of `estimator` over every completed
    decision of the run (issue 22: not only the logged ones), of one tier or all."""
    if "estimator_error" not in ds:
        return float("nan"), 0
    e = ds["estimator_error"].sel(estimator=estimator)
    if tier is not None:
        e = e.sel(tier=tier)
    else:
        e = e.sum("tier")
    tot, n = float(e.sel(error_stat="sum_abs_rel_error")), float(e.sel(error_stat="decisions"))
    return (tot / n if n > 0 else float("nan")), int(n)


def herding(ds) -> dict[str, float]:
    """The herding diagnostic reduced over the run's steps in which the router placed
    something: mean and maximum of the most subtasks placed on one node in a step, the
    share of those steps in which the server had a free core while a volunteer held more
    subtasks than its cores, and the largest such excess."""
    if "herding" not in ds:
        return {k: float("nan") for k in ("mean", "max", "server_free_share", "excess_max")}
    h = np.asarray(ds["herding"].values, dtype=np.float64)
    placed = h[:, H_MAX_PLACED] > 0
    if not placed.any():
        return {"mean": 0.0, "max": 0.0, "server_free_share": 0.0, "excess_max": 0.0}
    return {"mean": float(h[placed, H_MAX_PLACED].mean()), "max": float(h[:, H_MAX_PLACED].max()),
            "server_free_share": float(h[placed, H_IDLE_SERVER].mean()),
            "excess_max": float(h[:, H_EXCESS].max())}


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
    return {
        **mape,
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
