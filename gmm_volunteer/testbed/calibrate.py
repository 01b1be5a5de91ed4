"""A bundle whose execution work is what the testbed's runtime takes (docs/validation.md 6).

The default bundle's work per batch (`subtask_types[*].work.mean_cpu_s`, paper 2.2) was
measured with two intra-op threads; the testbed's nodes run one (a fraction of a core
has no second thread to give). This measures the CPU-seconds of one batch with the
testbed's own session settings (`fitting.collect.models`, one thread) at the bundle's
smaller batch sizes and writes a copy of the bundle with those means; larger batch sizes
keep the bundle's values scaled by the ratio at the largest size measured. Everything
else in the bundle is unchanged, so a simulation with it isolates one mechanism.

    python -m gmm_volunteer.testbed.calibrate BUNDLE_DIR OUT_DIR [--max-batch 10] [--repetitions 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import yaml


def measure(names, batch_sizes, repetitions: int, seed: int = 0) -> dict:
    """{name: {batch size: mean CPU-s}} of `run_batch` with one intra-op thread."""
    from gmm_volunteer.fitting.collect import models

    g = np.random.default_rng(seed)
    out = {}
    for name in names:
        session = models.make_session(models.model_path(name), threads=1)
        blobs = [models.make_input(name, g) for _ in range(max(batch_sizes))]
        models.run_batch(name, session, blobs[:1])  # the first run allocates; not counted
        out[name] = {}
        for n in batch_sizes:
            cpu = []
            for _ in range(repetitions):
                c0 = time.process_time()
                models.run_batch(name, session, blobs[:n])
                cpu.append(time.process_time() - c0)
            out[name][n] = float(np.mean(cpu))
    return out


def calibrate(bundle_dir: Path, out_dir: Path, max_batch: int = 10, repetitions: int = 3) -> Path:
    from gmm_volunteer.io.bundle import bundle_file, write_bundle

    data = yaml.safe_load(bundle_file(bundle_dir).read_text())
    names = [s["name"] for s in data["subtask_types"]]
    sizes = sorted({n for s in data["subtask_types"] for n in s["work"]["batch_sizes"] if n <= max_batch})
    measured = measure(names, sizes, repetitions)
    for s in data["subtask_types"]:
        work = s["work"]
        m = measured[s["name"]]
        top = max(n for n in work["batch_sizes"] if n in m)
        ratio = m[top] / work["mean_cpu_s"][work["batch_sizes"].index(top)]
        work["mean_cpu_s"] = [round(m[n], 6) if n in m else round(w * ratio, 6)
                              for n, w in zip(work["batch_sizes"], work["mean_cpu_s"])]
    data["provenance"] = (f"{data.get('provenance', '')} Execution work re-measured with one intra-op "
                          f"thread by gmm_volunteer.testbed.calibrate (batch sizes up to {max_batch}, "
                          f"{repetitions} repetitions); everything else as {bundle_dir}.").strip()
    return write_bundle(data, out_dir)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gmm_volunteer.testbed.calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--max-batch", type=int, default=10)
    p.add_argument("--repetitions", type=int, default=3)
    args = p.parse_args(argv)
    print(calibrate(args.bundle, args.out, args.max_batch, args.repetitions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
