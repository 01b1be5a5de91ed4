"""What a testbed volunteer's batches take in memory and CPU under glibc's two heap
settings (docs/testbed.md, "Memory"; `testbed.mmap_threshold_kb`).

One process holds the session of every subtask type of the bundle, as a volunteer under
`testbed.sessions: fit` does once it has met them all (nothing is released while the
estimate fits), and runs the same plan of batches: each type at each batch size, the types
in turn, twice, the heap trimmed before each batch as after each of a volunteer's. Per
batch it records the process's peak resident memory above its start (`VmHWM`, set back
before the batch) and the CPU-s. Each setting runs in fresh processes, since the setting
is per process, `--repetitions` of each, in turns; the table sets the peaks beside what
`sessions: fit` assumes a batch needs: the bundle's estimate (paper 2.3, mean + 2 sd)
plus what the sessions hold.

    python -m gmm_volunteer.testbed.heap [--bundle BUNDLE] [--repetitions 3] [-o RESULT.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = (1, 5, 6, 7, 8)
ROUNDS = 2


def worker(bundle: str, mmap_kb: int) -> dict:
    """Run the plan in this process under `mmap_kb` (0: glibc's dynamic threshold):
    {"held": MB the sessions hold, "rows": [[type, batch size, peak MB above start, CPU-s]]}."""
    import numpy as np

    from gmm_volunteer.fitting.collect import models
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.testbed.device import peak_resident_mb, resident_mb

    models.fix_mmap_threshold(mmap_kb)
    names = [s.name for s in load_bundle(bundle).subtask_types]
    g = np.random.default_rng(0)
    blobs = {n: [models.make_input(n, g) for _ in range(max(SIZES))] for n in names}
    models.trim_heap()
    start = resident_mb()
    sessions = {n: models.make_session(models.model_path(n), threads=1) for n in names}
    models.trim_heap()
    held = resident_mb() - start
    rows = []
    for _ in range(ROUNDS):
        for k in SIZES:
            for n in names:
                models.trim_heap()
                peak_resident_mb(reset=True)
                c0 = time.process_time()
                models.run_batch(n, sessions[n], blobs[n][:k])
                cpu = time.process_time() - c0
                rows.append([n, k, round(peak_resident_mb() - start, 1), round(cpu, 5)])
    return {"held": round(held, 1), "rows": rows}


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:,.0f}" if round(lo) == round(hi) else f"{lo:,.0f}-{hi:,.0f}"


def table(bundle, runs: dict[int, list[dict]], fixed_kb: int) -> str:
    """The markdown table of `runs` ({setting KB: [worker outputs]}; 0 and `fixed_kb`)."""
    from gmm_volunteer.model.params import memory_table

    est = {s.name: memory_table(s.memory.batch_sizes, s.memory.execution_mb) for s in bundle.subtask_types}
    held = max(r["held"] for rs in runs.values() for r in rs)
    by = {kb: {} for kb in runs}
    for kb, rs in runs.items():
        for r in rs:
            for name, k, peak, cpu in r["rows"]:
                by[kb].setdefault((name, k), []).append((peak, cpu))
    lines = [f"| subtask type | batch size | estimate + sessions held, MB | peak, dynamic threshold, MB | "
             f"peak, fixed at {fixed_kb:,} KB, MB | CPU-s, dynamic | CPU-s, fixed | CPU fixed / dynamic |",
             "|---|---|---|---|---|---|---|---|"]
    for (name, k) in by[0]:
        dyn, fix = by[0][(name, k)], by[fixed_kb][(name, k)]
        c_dyn, c_fix = statistics.median(c for _, c in dyn), statistics.median(c for _, c in fix)
        lines.append(f"| {name} | {k} | {held + float(est[name][k]):,.0f} | {_span([p for p, _ in dyn])} | "
                     f"{_span([p for p, _ in fix])} | {c_dyn:.4f} | {c_fix:.4f} | {c_fix / c_dyn:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gmm_volunteer.testbed.heap", description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", default="default", help="a shipped bundle's name or a bundle directory")
    p.add_argument("--repetitions", type=int, default=3, help="fresh processes per setting (default 3)")
    p.add_argument("-o", "--output", type=Path, default=None, help="write a result file (docs/results/README.md)")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from gmm_volunteer.io.bundlefiles import load_bundle, packaged_bundle
    from gmm_volunteer.model.bundle import BundleError, bundle_digest

    source = args.bundle if Path(args.bundle).is_dir() else (packaged_bundle(args.bundle) or args.bundle)
    try:
        bundle = load_bundle(source)
    except (BundleError, OSError) as exc:
        print(f"heap: --bundle {args.bundle}: {exc}", file=sys.stderr)
        return 2
    if args.worker is not None:
        print(json.dumps(worker(str(source), args.worker)))
        return 0
    if args.repetitions < 1:
        print(f"heap: --repetitions {args.repetitions}: must be at least 1", file=sys.stderr)
        return 2
    if args.output is not None:
        from gmm_volunteer.cli.errors import CommandError
        from gmm_volunteer.cli.outputs import check_result_target

        try:
            check_result_target(args.output)
        except CommandError as exc:
            print(f"heap: {exc}", file=sys.stderr)
            return 2
    from gmm_volunteer.fitting.collect.procstat import cpu_ids, cpu_label, cpu_model
    from gmm_volunteer.run.config.testbed import Testbed

    fixed = Testbed().mmap_threshold_kb
    runs: dict[int, list[dict]] = {0: [], fixed: []}
    load = f"{os.getloadavg()[0]:.2f}"  # as run.py records it
    for i in range(args.repetitions):
        for kb in runs:  # in turns, so that a drift of the machine meets both
            print(f"heap: repetition {i + 1}/{args.repetitions}, threshold {kb or 'dynamic'}", file=sys.stderr)
            out = subprocess.run([sys.executable, "-m", "gmm_volunteer.testbed.heap", "--bundle", str(source),
                                  "--worker", str(kb)], capture_output=True, text=True)
            if out.returncode:
                print(f"heap: the measuring process failed:\n{out.stderr}", file=sys.stderr)
                return 1
            runs[kb].append(json.loads(out.stdout))
    text = table(bundle, runs, fixed)
    if args.output is None:
        print(text)
        return 0
    from gmm_volunteer._version import __version__
    from gmm_volunteer.io import resultfile
    from gmm_volunteer.trajectory import TRAJECTORY_VERSION

    this = ["python", "-m", "gmm_volunteer.testbed.heap", "--bundle", args.bundle,
            "--repetitions", str(args.repetitions), "-o", str(args.output)]
    held = max(r["held"] for rs in runs.values() for r in rs)
    path = resultfile.write(
        args.output, text, command=shlex.join(this),
        bundles={resultfile.bundle_name(str(source)) or args.bundle: bundle_digest(bundle)},
        gmmv_version=__version__, trajectory_version=TRAJECTORY_VERSION,
        title="A volunteer's batches under glibc's dynamic and fixed mmap threshold (docs/testbed.md, Memory)",
        note=(f"One process per repetition and setting holding every session ({held:.0f} MB above its imports), "
              f"one intra-op thread, batches in turn, heap trimmed before each; peak: VmHWM above the start, "
              f"min-max over {args.repetitions} processes x {ROUNDS} rounds; CPU-s: median. On {cpu_label(cpu_model(), cpu_ids())}, "
              f"1-minute load {load} at the start."))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
