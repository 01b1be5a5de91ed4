"""Summaries of collected subtask traces (markdown tables for READMEs and quick looks).

`python -m gmm_volunteer.fitting.collect.summary traces/subtasks [batch sizes...]`
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


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    folder = argv[0] if argv else "traces/subtasks"
    bsz = [int(x) for x in argv[1:]] or [1, 2, 10]
    print(subtask_table(folder, bsz))
    return 0


if __name__ == "__main__":
    sys.exit(main())

