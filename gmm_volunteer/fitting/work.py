"""Execution work per subtask type and batch size (docs/model.md, "Progress from granted
resources"; refines paper 2.2, "Execution").

A run's execution work is the CPU time the worker used while executing: the per-second
CPU rows of the phase, each weighted by the part of the second it covers (the last row
of a phase covers its remainder, a phase shorter than 1 s one row of its real length),
so work = sum(cpu_pct / 100 * covered seconds) in CPU-seconds. That is what the machine
had to give, whatever share it got: on a busy machine the time is longer and the CPU
share lower, the product is the same work. The simulator grants each batch a share of
its node's CPU every step and finishes it when its work is done.

Per subtask type: the mean work at every measured batch size (the simulator interpolates
linearly between them), and one log-sd, pooled over batch sizes, of the work around
the mean at its size (lognormal law of mean 1 for the factor).
"""

from __future__ import annotations

import numpy as np

from gmm_volunteer.fitting.rounding import sig, sig_list


def run_work(traces, runs=None, consumption=None) -> "object":
    """Per run: subtask_type, batch_size and execution work in CPU-seconds (of the runs
    and consumption given, by default those of `subtasks/`)."""
    runs = (traces.runs if runs is None else runs).set_index("run_id")
    consumption = traces.consumption if consumption is None else consumption
    c = consumption[(consumption["phase"] == "execution") & consumption["run_id"].isin(runs.index)]
    exec_s = runs.loc[c["run_id"], "execution_s"].to_numpy(float)
    covered = np.clip(exec_s - c["t"].to_numpy(float), 0.0, 1.0)
    cpu_s = c["cpu_pct"].to_numpy(float) / 100.0 * covered
    work = (
        c.assign(cpu_s=cpu_s).groupby("run_id")["cpu_s"].sum().rename("work_cpu_s")
    )
    out = runs[["subtask_type", "batch_size"]].join(work, how="inner").reset_index()
    return out


def work_blocks(traces) -> tuple[dict[str, dict], dict]:
    """subtask type -> the bundle's `work` block; and per-type diagnostics."""
    table = run_work(traces)
    blocks, diag = {}, {}
    for entry in traces.catalog:
        name = entry["name"]
        t = table[(table["subtask_type"] == name) & (table["work_cpu_s"] > 0)]
        sizes = sorted(set(t["batch_size"].astype(int).tolist()))
        means, resid = [], []
        for b in sizes:
            w = t.loc[t["batch_size"] == b, "work_cpu_s"].to_numpy(float)
            means.append(float(w.mean()))
            if w.size > 1:
                lw = np.log(w)
                resid.append(lw - lw.mean())
        r = np.concatenate(resid) if resid else np.zeros(0)
        dof = r.size - len(resid)
        log_sd = float(np.sqrt(np.sum(r * r) / dof)) if dof > 0 else 0.0
        blocks[name] = {
            "distribution": "lognormal",
            "batch_sizes": sizes,
            "mean_cpu_s": sig_list(means),
            "log_sd": sig(log_sd),
        }
        diag[name] = {"runs": int(len(t)), "batch_sizes": sizes, "mean_cpu_s": means, "log_sd": log_sd}
    return blocks, diag


# The work group of the runs of `quota/` (docs/model.md D38); 0 is `subtasks/`'s, the
# bundle's own work table.
QUOTA_GROUP = 1


def execution_runs(traces) -> tuple:
    """Every measured execution, `subtasks/`'s and `quota/`'s (traces/FORMAT.md): (runs with
    the columns `collection`, `cpu_quota_pct` (NaN: no quota) and `work_group`, their
    consumption rows). Only the execution hazard reads the quota runs: the other fits take
    a run's per-second CPU as what its batch asks, which under a quota it is not."""
    import pandas as pd

    runs = traces.runs.assign(collection="subtasks", cpu_quota_pct=np.nan, work_group=0)
    if traces.quota_runs is None:
        return runs, traces.consumption
    return (pd.concat([runs, traces.quota_runs.assign(work_group=QUOTA_GROUP)], ignore_index=True),
            pd.concat([traces.consumption, traces.quota_consumption], ignore_index=True))


def work_tables(traces, exclude: dict[int, float] | None = None) -> dict[tuple[int, int], np.ndarray]:
    """(work group, type index) -> W_m(n), n = 0..MAX_BATCH_TABLE
    (`model.params.hazard_work_table`), the work the execution hazard's fraction of work
    is counted in (docs/model.md D32, D38): group 0 from the runs of `subtasks/` (the
    bundle's work table), group 1 from the quota collection of the largest quota (the
    quota runs' machine at full speed; `traces.quota_reference`). `exclude[g]`: a batch
    size whose runs group g's table leaves out (interpolated or extrapolated instead)."""
    from gmm_volunteer.fitting.traces import quota_reference
    from gmm_volunteer.model.params import hazard_work_table

    sources = {0: run_work(traces)}
    if traces.quota_runs is not None:
        q = traces.quota_runs
        ref = q[q["collection"] == quota_reference(q)]
        sources[QUOTA_GROUP] = run_work(traces, ref, traces.quota_consumption)
    out = {}
    for g, table in sources.items():
        if exclude and g in exclude:
            table = table[table["batch_size"] != exclude[g]]
        for k, entry in enumerate(traces.catalog):
            t = table[(table["subtask_type"] == entry["name"]) & (table["work_cpu_s"] > 0)]
            if len(t):
                means = t.groupby("batch_size")["work_cpu_s"].mean()
                out[g, k] = hazard_work_table(means.index.to_numpy(float), means.to_numpy(float))
    return out
