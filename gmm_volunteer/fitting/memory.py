"""Conservative memory estimates for the schedulers (paper 2.3).

The schedulers treat memory as a hard limit and check it with mean + 2 sd of the
measured memory: execution-stage memory per subtask type and batch size (the simulator
interpolates linearly between the measured batch sizes) and subtask-data download
memory (per type when the downloads can be attributed to types, via a `subtask_type`
column or the collector's downloads/meta.json; otherwise pooled over all downloads).
"""

from __future__ import annotations

import numpy as np

from gmm_volunteer.fitting.rounding import sig, sig_list

SAFETY_SD = 2.0


def _mean_plus_2sd(x: np.ndarray) -> float:
    x = np.asarray(x, float)
    sd = float(np.std(x, ddof=1)) if len(x) > 1 else 0.0
    return float(np.mean(x)) + SAFETY_SD * sd


def execution_memory(traces) -> dict[str, tuple[list[int], list[float]]]:
    """subtask type -> (measured batch sizes, mean + 2 sd of execution memory in MB)."""
    runs = traces.runs.set_index("run_id")
    c = traces.consumption[traces.consumption["phase"] == "execution"]
    typ = runs.loc[c["run_id"], "subtask_type"].to_numpy()
    bs = runs.loc[c["run_id"], "batch_size"].to_numpy(int)
    mem = c["memory_mb"].to_numpy(float)
    out = {}
    for entry in traces.catalog:
        name = entry["name"]
        sizes = sorted(set(bs[typ == name].tolist()))
        out[name] = ([int(b) for b in sizes], [_mean_plus_2sd(mem[(typ == name) & (bs == b)]) for b in sizes])
    return out


def download_memory(traces) -> dict[str, float]:
    """subtask type -> mean + 2 sd of memory while downloading subtask data (MB)."""
    d = traces.downloads
    names = [e["name"] for e in traces.catalog]
    if "subtask_type" in d.columns:
        typ = d["subtask_type"].astype(str).to_numpy()
        mem = d["memory_mb"].to_numpy(float)
        if all((typ == n).any() for n in names):
            return {n: _mean_plus_2sd(mem[typ == n]) for n in names}
    pooled = _mean_plus_2sd(d["memory_mb"].to_numpy(float))
    return {n: pooled for n in names}


def memory_blocks(traces) -> dict[str, dict]:
    """subtask type -> the bundle's `memory` block."""
    ex, dl = execution_memory(traces), download_memory(traces)
    return {
        name: {"batch_sizes": sizes, "execution_mb": sig_list(vals), "download_mb": sig(dl[name])}
        for name, (sizes, vals) in ex.items()
    }


def mean_execution(traces, column: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """subtask type -> (batch sizes, mean per-second `column` during execution)."""
    runs = traces.runs.set_index("run_id")
    c = traces.consumption[traces.consumption["phase"] == "execution"]
    typ = runs.loc[c["run_id"], "subtask_type"].to_numpy()
    bs = runs.loc[c["run_id"], "batch_size"].to_numpy(int)
    vals = c[column].to_numpy(float)
    out = {}
    for entry in traces.catalog:
        name = entry["name"]
        sizes = np.array(sorted(set(bs[typ == name].tolist())))
        out[name] = (sizes, np.array([vals[(typ == name) & (bs == b)].mean() for b in sizes]))
    return out
