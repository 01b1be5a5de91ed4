"""Energy and per-class statistics of one run (docs/model.md D36, D37), for `run_metrics`
and the printed summary: the joules the service spent per completed request, and with
several user classes what each class gave and what its users got (do the users of weak
devices get worse service?).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from gmm_volunteer.model.constants import OUTCOMES, OUT_COMPLETED

CLASS_DIM = "user_class"


def _total(ds: xr.Dataset, name: str) -> float:
    return float(np.asarray(ds[name].values, dtype=np.float64).sum()) if name in ds else float("nan")


def energy_metrics(ds: xr.Dataset, completed: int) -> dict:
    """Energy of the run (NaN for stores made before it was recorded): the server's,
    the users' devices', and both per completed request."""
    srv, users = _total(ds, "server_energy"), _total(ds, "user_energy")
    per = (srv + users) / completed if completed > 0 else float("nan")
    return {
        "server_energy_total": ((), srv, {"long_name": "energy the server spent over the run", "units": "J"}),
        "user_energy_total": ((), users, {"long_name": "energy the service added on the users' devices "
                                                       "over the run", "units": "J"}),
        "energy_per_request": ((), per, {"long_name": "energy (server and users) per completed request",
                                         "units": "J"}),
    }


def class_metrics(ds: xr.Dataset, records: dict, quantiles: np.ndarray) -> dict:
    """Per-class variables on dim ``user_class`` when the store has several classes (an
    empty dict otherwise): online users (mean), CPU-seconds given, subtask events, energy,
    and the requests each class's users sent by outcome, with latency quantiles of the
    completed ones."""
    if "request_user_class" not in records or "class_online_users" not in ds:
        return {}
    n = ds.sizes[CLASS_DIM]
    cls = records["request_user_class"].astype(np.int64)
    outcome = records["request_outcome"].astype(np.int64)
    latency = records["request_latency"]
    counts = np.zeros((n, len(OUTCOMES)), np.int64)
    np.add.at(counts, (cls, outcome), 1)
    lq = np.full((n, quantiles.size), np.nan)
    for c in range(n):
        sel = latency[(cls == c) & (outcome == OUT_COMPLETED)]
        if sel.size:
            lq[c] = np.quantile(sel, quantiles)
    dims = (CLASS_DIM,)
    return {
        "class_online_users_mean": (dims, np.asarray(ds["class_online_users"].values, np.float64).mean(axis=0),
                                    {"long_name": "users of the class online, mean over steps", "units": "1"}),
        "class_cpu_given_total": (dims, np.asarray(ds["class_cpu_given"].values, np.float64).sum(axis=0),
                                  {"long_name": "CPU-seconds the class's devices gave over the run", "units": "s"}),
        "class_subtask_events_total": ((CLASS_DIM, "event"),
                                       np.asarray(ds["class_subtask_events"].values, np.int64).sum(axis=0),
                                       {"long_name": "subtask events on the class's devices", "units": "1"}),
        "class_energy_total": (dims, np.asarray(ds["user_energy"].values, np.float64).sum(axis=0),
                               {"long_name": "energy the service added on the class's devices", "units": "J"}),
        "class_requests": ((CLASS_DIM, "outcome"), counts,
                           {"long_name": "requests the class's users sent, by outcome", "units": "1"}),
        "class_latency_quantile": ((CLASS_DIM, "quantile"), lq,
                                   {"long_name": "latency quantile of the class's completed requests",
                                    "units": "s"}),
    }


def class_coords(ds: xr.Dataset) -> dict:
    """The ``user_class`` coordinate of `class_metrics`' variables."""
    return {CLASS_DIM: (CLASS_DIM, np.array([str(c) for c in ds[CLASS_DIM].values], dtype=object))}


def summary_lines(m: xr.Dataset, table, fmt) -> list[str]:
    """The summary's energy line and, with several classes, its per-class table
    (`table(header, rows)` and `fmt(x, digits)` are the summary's own)."""
    lines = []
    if np.isfinite(float(m["server_energy_total"])):
        lines += ["", "Energy (docs/model.md D37)",
                  *table(["server (kJ)", "users (kJ)", "per completed request (J)"],
                         [[fmt(float(m["server_energy_total"]) / 1e3, 1), fmt(float(m["user_energy_total"]) / 1e3, 1),
                           fmt(float(m["energy_per_request"]), 1)]])]
    if "class_requests" not in m:
        return lines
    qlabels = [f"P{100 * q:g} (s)" for q in m["quantile"].values]
    ev = m["class_subtask_events_total"]
    rows = []
    for c, name in enumerate(m[CLASS_DIM].values):
        rows.append([str(name), fmt(float(m["class_online_users_mean"].values[c]), 1),
                     fmt(float(m["class_cpu_given_total"].values[c]), 1),
                     fmt(int(ev.sel(event="complete").values[c])), fmt(int(ev.sel(event="abort").values[c])),
                     fmt(float(m["class_energy_total"].values[c]) / 1e3, 1),
                     *(fmt(int(x)) for x in m["class_requests"].values[c]),
                     *(fmt(float(x)) for x in m["class_latency_quantile"].values[c])])
    lines += ["", "Per user class (docs/model.md D36; requests by the class of the user who sent them)",
              *table(["class", "online mean", "CPU-s given", "subtasks completed", "aborted", "energy (kJ)",
                      *OUTCOMES, *qlabels], rows)]
    return lines


def class_table(ds: xr.Dataset):
    """One row per grid point and user class of a combined sweep dataset (D36): means over
    seeds of the requests the class's users sent by outcome, the P99 latency of their
    completed requests, the CPU-seconds the class's devices gave and the energy the service
    added on them (`gmmv results table ... classes`). Raises ValueError for a sweep
    without several classes."""
    import pandas as pd

    if "class_requests" not in ds:
        raise ValueError("the sweep's runs have one user class (no users.classes): no per-class results")
    cols = {
        **{name: ds["class_requests"].sel(outcome=name, drop=True) for name in OUTCOMES},
        "P99 (s)": ds["class_latency_quantile"].sel(quantile=0.99, drop=True),
        "online (mean)": ds["class_online_users_mean"],
        "CPU-s given": ds["class_cpu_given_total"],
        "energy (kJ)": ds["class_energy_total"] / 1e3,
    }
    mean = xr.Dataset({k: (v.mean("seed", skipna=True) if "seed" in v.dims else v)
                       for k, v in cols.items()}).compute()
    df: pd.DataFrame = mean.to_dataframe()[list(cols)]
    if "seed" in ds.dims:
        df.insert(0, "seeds", int(ds.sizes["seed"]))
    return df
