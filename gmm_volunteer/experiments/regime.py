"""Where each paper finding holds: a map over offered work / server capacity (issue 21
item 4; paper 3.2; docs/validation.md section 4).

The findings of `findings.py` are statements about the whole grid ("at 10,000 users,
at every capacity ..."). Whether they can appear depends on how loaded the dedicated
server would be if it ran everything: the offered work over its capacity,

    rho = sum_k (requests of type k per second) x w_k / C,

with w_k the CPU-seconds of a type-k request's subtasks each run alone (the bundle's
work tables at batch size 1, paper 2.2), the request rate counted in the run (every
request that started, whatever its end), and C the server's mean CPU allocation in
cores. rho is a property of the cell (users, user capacity, server capacity), the same
for every scheduler up to the request counts, which depend on latency through the
think-time loop (a closed population, D3).

`cell_verdicts` restates each finding cell by cell (the local form of its rule: the
same thresholds as `findings.py`, on one cell), and `regime_figure` plots them against
rho: a filled marker where the local rule holds, an open one where it does not.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd
import xarray as xr

from gmm_volunteer.experiments import analysis
from gmm_volunteer.experiments.findings import grid_quantities
from gmm_volunteer.io.bundlefiles import load_bundle


def request_work(bundle) -> np.ndarray:
    """CPU-seconds of a request of each task type, its subtasks each run alone
    (batch size 1), in the bundle's task-type order."""
    from gmm_volunteer.model.params import work_table

    st = {s.name: s for s in bundle.subtask_types}
    one = {n: float(work_table(s.work.batch_sizes, s.work.mean_cpu_s, 1)[1]) for n, s in st.items()}
    return np.array([sum(one[n] for n in t.subtasks) for t in bundle.task_types])


def offered_load(ds: xr.Dataset, bundle=None) -> xr.DataArray:
    """rho per grid cell (and seed), as in the module docstring."""
    bundle = bundle if bundle is not None else load_bundle(ds.attrs["model_bundle"])
    w = xr.DataArray(request_work(bundle), dims="request_type",
                     coords={"request_type": [t.name for t in bundle.task_types]})
    counts = analysis.request_counts(ds, by_type=True).sum("outcome")  # aligned on type names
    steps = float(ds.attrs.get("steps") or ds.sizes["time"])
    cores = analysis.server_consumption(ds)["allocation_mean"].sel(resource="cpu", drop=True) / 100.0
    return ((counts * w).sum("request_type") / steps / cores).rename("offered_load")


def _rel(a, b):
    return np.abs(a - b) / np.maximum(b, 1)


# finding key -> (scheduler whose cells carry the rho, local rule on the quantities q
# selected at one cell; True / False / NaN where it does not apply)
LOCAL: dict[str, tuple[str, Callable]] = {
    "central_user_capacity": ("centralized", lambda q: _rel(q["completed"].sel(scheduler="centralized").isel(user_capacity=-1),
                                                           q["completed"].sel(scheduler="centralized").isel(user_capacity=0)) < 0.01),
    "central_plateau": ("centralized", lambda q: q["abandoned"].sel(scheduler="centralized")
                        >= q["completed"].sel(scheduler="centralized") / 3),
    "central_cancel_ratio": ("centralized", lambda q: ((q["abandoned"] / q["completed"]).sel(scheduler="centralized") >= 0.25)
                             & ((q["abandoned"] / q["completed"]).sel(scheduler="centralized") <= 0.6)),
    "uniform_matches_small": ("centralized", lambda q: _rel(q["completed"].sel(scheduler="uniform"),
                                                           q["completed"].sel(scheduler="centralized")) <= 0.05),
    "uniform_wins_large": ("centralized", lambda q: (q["completed"].sel(scheduler="uniform") > q["completed"].sel(scheduler="centralized"))
                           & (q["abandoned"].sel(scheduler="uniform") < q["abandoned"].sel(scheduler="centralized"))),
    "uniform_p99_large": ("centralized", lambda q: q["p99"].sel(scheduler="uniform") < q["p99"].sel(scheduler="centralized")),
    "central_cpu_saturates": ("centralized", lambda q: (q["cpu"] / q["cpu_alloc"]).sel(scheduler="centralized") >= 0.95),
    "central_memory_demand": ("centralized", lambda q: (q["mem"] / q["mem_alloc"]).sel(scheduler="centralized") >= 1.5),
    "distributed_fewer_resources": ("centralized", lambda q: (q["cpu"].sel(scheduler="uniform")
                                                            < 0.5 * q["cpu"].sel(scheduler="centralized"))),
    "uniform_user_rate": ("uniform", lambda q: (q["rate"].sel(scheduler="uniform", node_class="user") >= 0.7)
                          & (q["rate"].sel(scheduler="uniform", node_class="user") <= 0.97)),
    "central_server_rate": ("centralized", lambda q: q["rate"].sel(scheduler="centralized", node_class="server") <= 0.4),
}


def cell_verdicts(ds: xr.Dataset, bundle=None) -> pd.DataFrame:
    """One row per (finding, cell): users, user capacity, server capacity, rho (of the
    carrying scheduler's run, mean over seeds) and whether the local rule holds."""
    q = grid_quantities(ds)
    rho = offered_load(ds, bundle)
    if "seed" in rho.dims:
        rho = rho.mean("seed")
    rows = []
    for key, (sched, rule) in LOCAL.items():
        try:
            verdict = rule(q)
        except (KeyError, IndexError, ValueError):
            continue  # the grid lacks what the rule compares
        r = rho.sel(scheduler=sched)
        verdict, r = xr.broadcast(verdict.astype(float), r)
        frame = xr.Dataset({"holds": verdict, "rho": r}).to_dataframe().reset_index()
        frame["finding"] = key
        rows.append(frame[["finding", "users", "user_capacity", "server_capacity", "rho", "holds"]])
    out = pd.concat(rows, ignore_index=True)
    return out.drop_duplicates(["finding", "users", "user_capacity", "server_capacity"])


def regime_figure(verdicts: pd.DataFrame, title: str = ""):
    """The regime map: findings (rows) against rho (log x axis); filled = holds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys(verdicts["finding"]))
    fig, ax = plt.subplots(figsize=(8.0, 0.45 * len(keys) + 1.4))
    for y, key in enumerate(keys):
        f = verdicts[verdicts["finding"] == key]
        jitter = 0.18 * (f["user_capacity"].to_numpy() - 1.5)  # user capacity 1 below, 2 above
        held = f["holds"].to_numpy() == 1.0
        ax.scatter(f["rho"][held], y + jitter[held], s=22, color="tab:green", label="holds" if y == 0 else None)
        ax.scatter(f["rho"][~held], y + jitter[~held], s=22, facecolors="none", edgecolors="tab:red",
                   label="does not hold" if y == 0 else None)
    ax.axvline(1.0, color="0.6", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yticks(range(len(keys)), keys)
    ax.invert_yaxis()
    ax.set_xlabel("offered work / server CPU capacity (rho; 1 = the server alone would be saturated)")
    ax.set_title(title or "Where each section 3.2 finding holds, cell by cell")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
