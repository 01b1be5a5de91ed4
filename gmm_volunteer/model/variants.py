"""Model variants and the accuracy served (issue 12 item 1; docs/model.md D24;
docs/routing.md, "Model variants").

The bundle's catalog says which subtask types are functionally equivalent (`function`)
and their accuracy; with ``execution.variants`` a slot whose type has variants may be
served by any of them (subtasks.variant_tables). The kernels record, per completed
subtask, the subtask that served it (``S.sv_count``), and per ended request the mean
accuracy of the variants that served its slots (``S.lg_acc``; slots whose type gives no
accuracy do not count). This module turns them into result variables:

* ``request_accuracy`` (request): that mean for completed requests, NaN for the others;
* ``subtasks_served`` (subtask_type_requested, subtask_type_served): completed subtasks
  by the type the slot asked for and the type that served it;
* ``subtask_type_accuracy`` (subtask_type_served): the catalog's accuracies.

Summary measure (`accuracy_served`): the mean of ``request_accuracy`` over completed
requests, i.e. the mean top-1 accuracy a completed request's classification slots got.
"""

from __future__ import annotations

import numpy as np


def has_accuracy(params) -> bool:
    return bool(np.any(np.asarray(params.task_nacc) > 0))


def served_series(params, arrays, n_requests: int, type_names: list[str],
                  type_accuracy: list[float | None]) -> tuple[dict, dict]:
    """(series, coords) for the run record (RunRecord.policy_series); empty when the
    bundle gives no accuracy."""
    if not has_accuracy(params):
        return {}, {}
    outcome = arrays.lg_out[:n_requests]
    acc = np.where(outcome == 0, arrays.lg_acc[:n_requests], np.nan)
    acc[params.task_nacc[arrays.lg_type[:n_requests].astype(np.int64)] == 0] = np.nan
    m = len(type_names)
    served = np.zeros((m, m), np.int64)
    n_req = params.n_req
    np.add.at(served, (params.sub_type[:n_req, None], params.sub_type[None, :]),
              arrays.sv_count[:n_req, : params.n_sub])
    series = {
        "request_accuracy": (("request",), acc, {
            "long_name": "mean accuracy of the model variants that served a completed request's slots",
            "units": "1"}),
        "subtasks_served": (("subtask_type_requested", "subtask_type_served"), served, {
            "long_name": "completed subtasks by requested and serving subtask type", "units": "1"}),
        "subtask_type_accuracy": (("subtask_type_served",),
                                  np.array([np.nan if a is None else a for a in type_accuracy]), {
            "long_name": "accuracy of each subtask type (the bundle's catalog; NaN: none given)",
            "units": "1"}),
    }
    coords = {"subtask_type_requested": list(type_names), "subtask_type_served": list(type_names)}
    return series, coords


def accuracy_served(ds) -> float:
    """Mean accuracy served over completed requests (NaN without `request_accuracy`)."""
    if "request_accuracy" not in ds:
        return float("nan")
    a = np.asarray(ds["request_accuracy"].values, dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else float("nan")


def variant_share(ds) -> float:
    """Share of completed subtasks of types with variants that a variant other than the
    requested one served (NaN without `subtasks_served`)."""
    if "subtasks_served" not in ds:
        return float("nan")
    c = np.asarray(ds["subtasks_served"].values, dtype=np.float64)
    rated = np.isfinite(np.asarray(ds["subtask_type_accuracy"].values, dtype=np.float64))
    c = c[np.ix_(rated, rated)]
    total = c.sum()
    return float((total - np.trace(c)) / total) if total > 0 else float("nan")
