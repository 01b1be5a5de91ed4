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


def run_work(traces) -> "object":
    """Per run: subtask_type, batch_size and execution work in CPU-seconds."""
    runs = traces.runs.set_index("run_id")
    c = traces.consumption[traces.consumption["phase"] == "execution"]
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
