"""Summaries of collected subtask traces (markdown tables for READMEs and quick looks).

`python -m gmm_volunteer.fitting.collect.summary traces/subtasks [batch sizes...]`
`python -m gmm_volunteer.fitting.collect.summary batching traces/subtasks [types...]`
    per type and batch size: mean execution CPU %, work (CPU-seconds) and time
`python -m gmm_volunteer.fitting.collect.summary profile traces/subtasks [batch size]`
    per type at one batch size (default 2): the inputs of the base-profile rule (paper 3.1)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def _runs(folder: Path) -> dict[str, np.ndarray]:
    import csv
    import gzip

    with gzip.open(folder / "runs.csv.gz", "rt", newline="") as f:
        rows = list(csv.DictReader(f))
    cols = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    return cols


def subtask_table(folder: str | Path, batch_sizes=(1, 2, 10)) -> str:
    folder = Path(folder)
    cat = json.loads((folder / "catalog.json").read_text())
    r = _runs(folder)
    typ = r["subtask_type"]
    bs = r["batch_size"].astype(int)
    ex = r["execution_s"].astype(float)
    pk = r["execution_peak_memory_mb"].astype(float)
    head = ["subtask type", "weights", "model file MB", "input MB", "output MB"]
    for b in batch_sizes:
        head += [f"exec s (b={b})", f"peak MB (b={b})"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cat:
        cells = [c["name"], c["weights"], f"{c['data_size_mb']:.2f}", f"{c['input_size_mb']:.4f}",
                 f"{c['output_size_mb']:.5f}"]
        for b in batch_sizes:
            m = (typ == c["name"]) & (bs == b)
            if m.any():
                cells += [f"{np.median(ex[m]):.3f} ({ex[m].min():.3f}-{ex[m].max():.3f})",
                          f"{np.median(pk[m]):.0f} (max {pk[m].max():.0f})"]
            else:
                cells += ["-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _execution(folder: Path):
    """Execution rows joined with their runs, and per-run work (as gmm_volunteer/fitting/work.py)."""
    import pandas as pd

    runs = pd.read_csv(folder / "runs.csv.gz")
    c = pd.read_csv(folder / "consumption.csv.gz")
    c = c[c["phase"] == "execution"].merge(runs[["run_id", "subtask_type", "batch_size", "execution_s"]], on="run_id")
    # the last row of a phase covers only its remainder
    c["cpu_s"] = c["cpu_pct"] / 100.0 * np.clip(c["execution_s"] - c["t"], 0.0, 1.0)
    work = c.groupby("run_id")["cpu_s"].sum().rename("work_cpu_s")
    return runs.join(work, on="run_id"), c


def batching_table(folder: str | Path, types=None) -> str:
    """Mean execution CPU % (over per-second rows, as the base-profile rule and the
    simulator's consumption statistics take it), mean work in CPU-seconds, mean work
    per subtask and mean execution time, per type and batch size."""
    runs, c = _execution(Path(folder))
    types = types or list(dict.fromkeys(runs["subtask_type"]))
    lines = ["| subtask type | batch | runs | CPU % (mean of rows) | work CPU-s | work per subtask | exec s |",
             "|---|---|---|---|---|---|---|"]
    for t in types:
        for b in sorted(set(runs.loc[runs["subtask_type"] == t, "batch_size"])):
            r = runs[(runs["subtask_type"] == t) & (runs["batch_size"] == b)]
            rows = c[(c["subtask_type"] == t) & (c["batch_size"] == b)]
            lines.append(f"| {t} | {b} | {len(r)} | {rows['cpu_pct'].mean():.0f} | {r['work_cpu_s'].mean():.3g} | "
                         f"{r['work_cpu_s'].mean() / b:.3g} | {r['execution_s'].mean():.3g} |")
    return "\n".join(lines)


def profile_table(folder: str | Path, batch: int = 2) -> str:
    """Per type at one batch size: mean and peak execution memory, mean CPU %, file size;
    the base-profile rule (paper 3.1) takes the largest means."""
    folder = Path(folder)
    cat = json.loads((folder / "catalog.json").read_text())
    runs, c = _execution(folder)
    lines = [f"| subtask type | model file MB | loaded RSS MB | mean exec memory MB (b={batch}) | "
             f"peak MB (b={batch}) | mean CPU % (b={batch}) | exec s (b={batch}) |", "|---|---|---|---|---|---|---|"]
    for e in cat:
        r = runs[(runs["subtask_type"] == e["name"]) & (runs["batch_size"] == batch)]
        rows = c[(c["subtask_type"] == e["name"]) & (c["batch_size"] == batch)]
        if r.empty:
            continue
        lines.append(f"| {e['name']} | {e['data_size_mb']:.1f} | {e.get('worker_loaded_rss_mb', float('nan')):.0f} | "
                     f"{rows['memory_mb'].mean():.0f} | {r['execution_peak_memory_mb'].max():.0f} | "
                     f"{rows['cpu_pct'].mean():.0f} | {r['execution_s'].mean():.3g} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "batching":
        print(batching_table(argv[1] if len(argv) > 1 else "traces/subtasks", argv[2:] or None))
        return 0
    if argv and argv[0] == "profile":
        print(profile_table(argv[1] if len(argv) > 1 else "traces/subtasks", int(argv[2]) if len(argv) > 2 else 2))
        return 0
    folder = argv[0] if argv else "traces/subtasks"
    bsz = [int(x) for x in argv[1:]] or [1, 2, 10]
    print(subtask_table(folder, bsz))
    return 0


if __name__ == "__main__":
    sys.exit(main())

