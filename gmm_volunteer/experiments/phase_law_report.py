"""The phase-law table of a sweep: what the paper's phase law asks of the server per grid
point, beside the outcomes it explains (`gmmv results table RESULTS phase-law`; docs/model.md
D27, docs/validation.md section 4.0c). The per-run metrics are `phase_law.phase_law_metrics`."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from gmm_volunteer.experiments import analysis


def phase_law_table(ds: xr.Dataset) -> pd.DataFrame | None:
    """One row per grid point: outcomes, the server's CPU used and demanded over its
    allocation, its batches per step and the subtasks the executor aborted."""
    if "server_cpu_demand_ratio" not in ds or not np.isfinite(ds["server_cpu_demand_ratio"].values).any():
        return None
    counts = analysis.request_counts(ds)
    sc = analysis.server_consumption(ds)
    events = ds["subtask_events_total"]
    cols = {
        "completed": counts.sel(outcome="completed", drop=True),
        "abandoned": counts.sel(outcome="abandoned", drop=True),
        "P99 all types (s)": analysis.latency_quantile(ds, 0.99, all_types=True),
        "server CPU used / allocation": (sc["mean"] / sc["allocation_mean"]).sel(resource="cpu", drop=True),
        "server CPU demand / allocation": ds["server_cpu_demand_ratio"],
        "steps overcommitted": ds["server_cpu_overcommitted"],
        "server memory / allocation": (sc["mean"] / sc["allocation_mean"]).sel(resource="memory", drop=True),
        "server batches per step": ds["server_batches_mean"],
        "aborted subtasks": events.sel(event="abort", drop=True).sum("node_class"),
        "completion rate server": analysis.subtask_completion_rate(ds).sel(node_class="server", drop=True),
    }
    mean = xr.Dataset({k: (v.mean("seed", skipna=True) if "seed" in v.dims else v)
                       for k, v in cols.items()}).compute()
    return mean.to_dataframe()[list(cols)]
