"""Per-run measures of the routing comparison (issue 12 items 1, 4 and 5;
docs/routing.md): the accuracy served, the share of slots a model variant other than the
requested one served (gmm_volunteer.model.variants), and the queue-aware routers' delay
estimator error.

Estimator error (seed 002 claims its hybrid estimator is the most accurate): over the
logged decisions whose subtask completed, the mean absolute relative error
|predicted - realized| / realized of the chosen tier's delay, where realized is the
subtask's latency from placement to completion (s, at least one step) and predicted
the router's T_k = W_k + s_k + D_k (docs/routing.md section 4). NaN for runs without a
decision log.
"""

from __future__ import annotations

import numpy as np

from gmm_volunteer.policies.routing import D_PRED, D_REAL
from gmm_volunteer.model.variants import accuracy_served, variant_share


def estimator_error(ds) -> tuple[float, int]:
    """(mean absolute relative error, decisions it is over)."""
    if "decision" not in ds:
        return float("nan"), 0
    d = np.asarray(ds["decision"].values, dtype=np.float64)
    if d.size == 0:
        return float("nan"), 0
    pred, real = d[:, D_PRED], d[:, D_REAL]
    ok = np.isfinite(pred) & np.isfinite(real) & (real > 0)
    if not ok.any():
        return float("nan"), 0
    return float(np.mean(np.abs(pred[ok] - real[ok]) / real[ok])), int(ok.sum())


def routing_metrics(ds) -> dict:
    """name -> (dims, value, attrs) for `summary.run_metrics`."""
    mare, n = estimator_error(ds)
    return {
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
    }
