"""Allocation and consumption blocks of the bundle (paper 2.2, `a_t` and `c_t`).

Allocation: one ARMA per resource on the workstation trace expressed as a fraction of
the machine's capacity (machine.json), resampled to 1 s.

Consumption: per stage and resource, scaling statistics (mean, sd) per
[subtask type][level] and one ARMA pooled over all runs of the stage. Each run's
per-second series is standardized with its own group's statistics (the ones the
simulator rescales with), the standardized runs are joined with missing-value gaps
(`gmm_volunteer.fitting.arma.join_segments`) and the Yeo-Johnson transform and ARMA are fitted on
the pooled series. Pooling keeps every run (short phases included), where fitting on
the longest run alone would throw most measurements away.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gmm_volunteer.fitting.arma import FULL_GRID, ArmaFit, Transform, fit_series_block, resample_1s
from gmm_volunteer.fitting.idw import idw
from gmm_volunteer.fitting.rounding import sig, sig_matrix
from gmm_volunteer.fitting.traces import RESOURCE_COLUMNS, Traces

COLUMN = {"band_in": "band_in_mbps", "band_out": "band_out_mbps", "cpu": "cpu_pct", "memory": "memory_mb"}
# stage -> (source phase or None for downloads.csv, level name, level column, resources)
STAGES = {
    "data_download": (None, "band_in", "level_mbps", ("band_in", "cpu", "memory")),
    "input_download": ("download", "band_in", "bandwidth_mbps", ("band_in", "cpu", "memory")),
    "execution": ("execution", "batch_size", "batch_size", ("cpu", "memory")),
    "upload": ("upload", "band_out", "bandwidth_mbps", ("band_out", "cpu", "memory")),
}


@dataclass
class SeriesDiag:
    """What the report needs about one fitted series."""

    name: str
    z: np.ndarray  # transformed series the ARMA saw (NaN = gap)
    transform: Transform
    fit: ArmaFit


def fit_allocation(traces: Traces, candidates=FULL_GRID) -> tuple[dict, list[SeriesDiag]]:
    """The bundle's `allocation` block: ARMA on the capacity fraction of each resource."""
    df = traces.resources
    cap = traces.machine["capacity"]
    t = df["time_s"].to_numpy(float)
    block, diags = {}, []
    for res, col in RESOURCE_COLUMNS.items():
        frac = resample_1s(t, df[col].to_numpy(float) / float(cap[col]))
        mean, sd = float(np.mean(frac)), float(np.std(frac, ddof=1))
        blocks, transform, fit, z = fit_series_block([frac], candidates, mean=mean, sd=sd if sd > 0 else 1.0)
        block[res] = {**blocks, "mean": sig(mean), "sd": sig(sd)}
        diags.append(SeriesDiag(f"allocation.{res}", z, transform, fit))
    return block, diags


def stage_table(traces: Traces, stage: str):
    """Per-second rows of one stage with columns run_id, type, level, and resources.

    data_download rows carry type "*": the format repeats one row of statistics for every
    subtask type (downloading does not depend on what is downloaded).
    """
    phase, _, level_col, _ = STAGES[stage]
    if phase is None:
        d = traces.downloads.copy()
        d["type"] = "*"
        d["level"] = d["level_mbps"].astype(float)
        return d.sort_values(["run_id", "t"], kind="stable")
    runs = traces.runs.set_index("run_id")
    c = traces.consumption[traces.consumption["phase"] == phase].copy()
    c["type"] = runs.loc[c["run_id"], "subtask_type"].to_numpy()
    c["level"] = runs.loc[c["run_id"], level_col].to_numpy(float)
    return c.sort_values(["run_id", "t"], kind="stable")


def _group_stats(table, col: str, types: list[str], levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mean and sd (ddof=1; 0 for one sample) per [type][level]; gaps filled by IDW."""
    mean = np.full((len(types), len(levels)), np.nan)
    sd = np.full_like(mean, np.nan)
    g = table.groupby(["type", "level"])[col]
    m, s, n = g.mean(), g.std(ddof=1), g.size()
    for (typ, lev), val in m.items():
        rows = range(len(types)) if typ == "*" else [types.index(typ)]
        j = int(np.flatnonzero(levels == lev)[0])
        for i in rows:
            mean[i, j] = val
            sd[i, j] = s[(typ, lev)] if n[(typ, lev)] > 1 else 0.0
    for i in range(len(types)):
        have = np.isfinite(mean[i])
        if not have.all():
            # unmeasured (type, level): the simulator's own interpolation rule
            mean[i, ~have] = idw(levels[~have], levels[have], mean[i, have])
            sd[i, ~have] = idw(levels[~have], levels[have], sd[i, have])
    return mean, sd


def fit_consumption(traces: Traces, candidates=FULL_GRID) -> tuple[dict, list[SeriesDiag]]:
    """The bundle's `consumption` block (all four stages)."""
    types = [e["name"] for e in traces.catalog]
    stages, diags = {}, []
    for stage, (_, level_name, _, resources) in STAGES.items():
        table = stage_table(traces, stage)
        levels = np.array(sorted(set(table["level"].tolist())), float)
        out_res = {}
        for res in resources:
            col = COLUMN[res]
            mean, sd = _group_stats(table, col, types, levels)
            segments = []
            for (typ, lev, _), run in table.groupby(["type", "level", "run_id"], sort=True):
                i = 0 if typ == "*" else types.index(typ)
                j = int(np.flatnonzero(levels == lev)[0])
                scale = sd[i, j] if sd[i, j] > 0 else 1.0
                segments.append((run["run_id"].iloc[0], (run[col].to_numpy(float) - mean[i, j]) / scale))
            segments = [s for _, s in sorted(segments, key=lambda r: r[0])]
            blocks, transform, fit, z = fit_series_block(segments, candidates, mean=0.0, sd=1.0)
            out_res[res] = {**blocks, "stats": {"mean": sig_matrix(mean), "sd": sig_matrix(sd)}}
            diags.append(SeriesDiag(f"consumption.{stage}.{res}", z, transform, fit))
        stages[stage] = {
            "level": level_name,
            "levels": [sig(v) for v in levels],
            "resources": out_res,
        }
    return {"idw_power": 2.0, "stages": stages}, diags
