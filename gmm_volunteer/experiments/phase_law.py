"""What the paper's phase law asks of the server, per run and per grid point
(`execution.progress: paper`, docs/model.md D27; docs/validation.md section 4.0c).

Under `progress: paper` the run store holds `server_cpu_demand` (the server's CPU demand
before its proportional share) and `server_batches` (its active batches per step).
`phase_law_metrics` reduces them per run (NaN for runs of the work law, which record
neither); `phase_law_report.phase_law_table` shows them per grid point.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from gmm_volunteer.model.constants import CPU


def phase_law_metrics(ds: xr.Dataset) -> dict:
    """Variables for `summary.run_metrics`: the server's CPU demand / allocation (mean over
    steps), the share of steps it exceeds 1, and the server's batches per step (mean)."""
    ratio = over = batches = np.nan
    if "server_cpu_demand" in ds and ds.sizes.get("time", 0):
        demand = np.asarray(ds["server_cpu_demand"].values, dtype=np.float64)
        alloc = np.asarray(ds["server_allocation"].values, dtype=np.float64)[:, CPU]
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(alloc > 0, demand / alloc, np.nan)
        ratio = float(np.nanmean(r)) if np.isfinite(r).any() else np.nan
        over = float(np.mean(demand > alloc))
        batches = float(np.asarray(ds["server_batches"].values, dtype=np.float64).mean())
    return {
        "server_cpu_demand_ratio": ((), ratio, {"long_name": "server CPU demand before the share / allocation, "
                                                             "mean over steps (progress: paper)", "units": "1"}),
        "server_cpu_overcommitted": ((), over, {"long_name": "share of steps whose server CPU demand exceeds "
                                                             "the allocation (progress: paper)", "units": "1"}),
        "server_batches_mean": ((), batches, {"long_name": "server batches active per step, mean over steps "
                                                           "(progress: paper)", "units": "1"}),
    }
