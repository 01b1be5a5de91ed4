"""A bundle whose execution work is what the testbed's runtime takes (docs/validation.md 6).

The default bundle's work per batch (`subtask_types[*].work.mean_cpu_s`, paper 2.2) was
measured with two intra-op threads; the testbed's nodes run one (a fraction of a core
has no second thread to give). This measures the CPU-seconds of one batch with the
testbed's own session settings (`fitting.collect.models`, one thread) at the bundle's
smaller batch sizes and writes a copy of the bundle with those means; larger batch sizes
keep the bundle's values scaled by the ratio at the largest size measured. Everything
else in the bundle is unchanged, so a simulation with it isolates one mechanism.

    python -m gmm_volunteer.testbed.calibrate BUNDLE_DIR OUT_DIR [--max-batch 10] [--repetitions 3]
        [--cold] [--testbed CONFIG [--node user|server]] [--types NAME,NAME] [--mmap-threshold-kb KB]

`--cold` times each batch as a testbed node meets it: after batches of the other types,
with the heap trimmed, instead of back to back on a warm session.

With `--testbed` the measurement runs inside the limits of that config's node (its
cgroup's CPU quota and memory limit, `testbed.limits`; no link: nothing is transferred),
so the same batches can be timed under a device's quota and under the server's core.
Each type is measured in a fresh process there; a type whose process the node's memory
limit kills is named and keeps the bundle's work. Each measured mean is printed (type,
batch size, CPU-s) on stderr. `--types` measures only the types named (a case's catalogue):
with `--cold` one process holds the session of every type it measures, which a device of
300 MB cannot hold for all five. The measuring process sets glibc's heap as a testbed
node does (`testbed.mmap_threshold_kb`, docs/testbed.md "Memory"): the config's with
`--testbed`, else `--mmap-threshold-kb` (the section's default when not given).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from gmm_volunteer.run.config.testbed import Testbed

MMAP_KB = Testbed().mmap_threshold_kb  # a testbed node's heap setting, by default


def measure(names, batch_sizes, repetitions: int, seed: int = 0, cold: bool = False, mmap_kb: int = 0) -> dict:
    """{name: {batch size: mean CPU-s}} of `run_batch` with one intra-op thread.

    Warm (the default, as the collector measures): each batch repeated back to back on
    the same session. `cold`: every session held at once and the types taken in rotation,
    the heap trimmed before each batch, as a testbed node meets a batch after batches of
    other models (`testbed.sessions: fit` trims after each batch). `mmap_kb`: glibc's
    fixed mmap threshold, as a testbed node sets it (`testbed.mmap_threshold_kb`; 0: the
    dynamic one)."""
    from gmm_volunteer.fitting.collect import models

    models.fix_mmap_threshold(mmap_kb)
    g = np.random.default_rng(seed)
    cpu: dict = {name: {n: [] for n in batch_sizes} for name in names}

    def prepared(name):
        """A session of `name` and its inputs, after one run (the first allocates; not counted)."""
        session = models.make_session(models.model_path(name), threads=1)
        blobs = [models.make_input(name, g) for _ in range(max(batch_sizes))]
        models.run_batch(name, session, blobs[:1])
        return session, blobs

    def timed(name, session, blobs):
        c0 = time.process_time()
        models.run_batch(name, session, blobs)
        return time.process_time() - c0

    if cold:
        held = {name: prepared(name) for name in names}
        for _ in range(repetitions):
            for n in batch_sizes:
                for name in names:
                    models.trim_heap()
                    session, blobs = held[name]
                    cpu[name][n].append(timed(name, session, blobs[:n]))
    else:
        for name in names:  # one session at a time
            session, blobs = prepared(name)
            for n in batch_sizes:
                cpu[name][n] = [timed(name, session, blobs[:n]) for _ in range(repetitions)]
    return {name: {n: float(np.mean(v)) for n, v in per.items()} for name, per in cpu.items()}


def _measure_limited(limits, names, sizes, repetitions: int, cold: bool = False) -> tuple[dict, dict]:
    """`measure` inside `limits` (a testbed.limits.NodeLimits), each type in a fresh
    process (all in one when `cold`: they take turns): ({name: {batch size: CPU-s}},
    {name: why it was not measured}). A type whose process the kernel killed (its model
    and batches do not fit the node's memory) is named, not fatal."""
    import concurrent.futures as cf
    import multiprocessing as mp
    from concurrent.futures.process import BrokenProcessPool

    from gmm_volunteer.testbed.limits import LimitedWorker

    out, skipped = {}, {}
    for group in ([names] if cold else [[name] for name in names]):
        with LimitedWorker(limits, link=False) as lw:
            with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"), initializer=lw.initializer,
                                        initargs=lw.initargs) as ex:
                try:
                    out.update(ex.submit(measure, group, sizes, repetitions, 0, cold,
                                         limits.mmap_threshold_kb).result())
                except BrokenProcessPool:
                    rep = lw.report()
                    skipped.update({name: f"its process was killed ({rep['oom_kills']} OOM kill(s), peak "
                                     f"{rep['memory_peak_mb']:g} MB of {limits.memory_mb:g} MB)" for name in group})
                except BaseException:
                    lw.stop_workers()
                    raise
    return out, skipped


class TypesError(ValueError):
    """A --types name the bundle does not have (checked before any measurement)."""


def calibrate(bundle_dir: Path, out_dir: Path, max_batch: int = 10, repetitions: int = 3, limits=None,
              cold: bool = False, types: list[str] | None = None, mmap_kb: int = 0) -> Path:
    """Measure and write the bundle; `types` (None: every type) limits the measurement to
    some subtask types (a case's catalogue: with --cold one process holds every measured
    type's session, which a small node's memory may not), the others keep their work.
    `mmap_kb`: glibc's fixed mmap threshold of the measuring process (0: dynamic); inside
    `limits` the node's own (`NodeLimits.mmap_threshold_kb`)."""
    from gmm_volunteer.io.bundlefiles import bundle_file, write_bundle

    data = yaml.safe_load(bundle_file(bundle_dir).read_text())
    names = [s["name"] for s in data["subtask_types"]]
    if types is not None:
        unknown = [t for t in types if t not in names]
        if unknown:
            raise TypesError(f"--types: {', '.join(unknown)} is not a subtask type of {bundle_dir} "
                             f"({', '.join(names)})")
        names = [n for n in names if n in types]
    sizes = sorted({n for s in data["subtask_types"] for n in s["work"]["batch_sizes"] if n <= max_batch})
    if limits is not None:
        mmap_kb = limits.mmap_threshold_kb
    measured, skipped = ((measure(names, sizes, repetitions, cold=cold, mmap_kb=mmap_kb), {}) if limits is None
                         else _measure_limited(limits, names, sizes, repetitions, cold))
    for name, why in skipped.items():
        print(f"{name}\tnot measured: {why}; the bundle's work is kept", file=sys.stderr)
    for name, per_size in measured.items():
        for n, cpu in per_size.items():
            print(f"{name}\t{n}\t{cpu:.4f}", file=sys.stderr)
    for s in data["subtask_types"]:
        if s["name"] not in measured:
            continue
        work = s["work"]
        m = measured[s["name"]]
        top = max(n for n in work["batch_sizes"] if n in m)
        ratio = m[top] / work["mean_cpu_s"][work["batch_sizes"].index(top)]
        work["mean_cpu_s"] = [round(m[n], 6) if n in m else round(w * ratio, 6)
                              for n, w in zip(work["batch_sizes"], work["mean_cpu_s"])]
    where = "" if limits is None else (f" inside the limits of the testbed's {limits.node} node of "
                                       f"{limits.config} ({limits.cpu_pct:g} % CPU, {limits.memory_mb:g} MB)")
    from gmm_volunteer.fitting.collect.procstat import cpu_ids, cpu_label, cpu_model

    # the CPU is named: the work of a batch depends on it several times over (docs/validation.md 6)
    cpu = cpu_label(cpu_model(), cpu_ids())
    data["provenance"] = (f"{data.get('provenance', '')} Execution work re-measured with one intra-op "
                          f"thread on {cpu} by gmm_volunteer.testbed.calibrate (batch sizes up to {max_batch}, "
                          f"{repetitions} repetitions"
                          + (", cold: types in rotation, heap trimmed before each batch" if cold else "")
                          + (f", glibc's mmap threshold fixed at {mmap_kb} KB" if mmap_kb else "")
                          + f"){where}"
                          + (f"; not measured there, as in {bundle_dir}: {', '.join(skipped)}" if skipped else "")
                          + (f"; only {', '.join(names)} measured, the others as in {bundle_dir}"
                             if types is not None else "")
                          + f"; everything else as {bundle_dir}.").strip()
    return write_bundle(data, out_dir)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gmm_volunteer.testbed.calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--max-batch", type=int, default=10)
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--testbed", metavar="CONFIG", default=None,
                   help="measure inside the limits of a node of this testbed config (needs root)")
    p.add_argument("--cold", action="store_true",
                   help="each batch after batches of the other types, heap trimmed (as a testbed node meets it)")
    p.add_argument("--node", choices=("user", "server"), default=None,
                   help="with --testbed: a user device (default) or the server")
    p.add_argument("--types", metavar="NAME,NAME", default=None,
                   help="measure only these subtask types (e.g. a case's catalogue); the others keep the bundle's work")
    p.add_argument("--mmap-threshold-kb", type=int, default=None, metavar="KB",
                   help="glibc's fixed mmap threshold while measuring, as a testbed node sets it "
                        f"(testbed.mmap_threshold_kb; default: the config's with --testbed, else {MMAP_KB}; 0: dynamic)")
    args = p.parse_args(argv)
    if args.mmap_threshold_kb is not None and not 0 <= args.mmap_threshold_kb <= 32768:
        print(f"calibrate: --mmap-threshold-kb {args.mmap_threshold_kb}: must be 0 to 32768", file=sys.stderr)
        return 2
    if args.mmap_threshold_kb is not None and args.testbed is not None:
        print("calibrate: --mmap-threshold-kb with --testbed: set testbed.mmap_threshold_kb in the config",
              file=sys.stderr)
        return 2
    mmap_kb = MMAP_KB if args.mmap_threshold_kb is None else args.mmap_threshold_kb
    types = [t.strip() for t in args.types.split(",") if t.strip()] if args.types is not None else None
    if types is not None and not types:
        print("calibrate: --types names no subtask type", file=sys.stderr)
        return 2
    limits = None
    if args.node is not None and args.testbed is None:
        print("calibrate: --node needs --testbed CONFIG", file=sys.stderr)
        return 2
    if args.testbed is not None:
        from gmm_volunteer.testbed.limits import LimitsError, node_limits

        try:
            limits = node_limits(args.testbed, args.node or "user")
        except LimitsError as err:
            print(f"calibrate: {err}", file=sys.stderr)
            return 2
    from gmm_volunteer.testbed.isolation import IsolationError

    try:
        print(calibrate(args.bundle, args.out, args.max_batch, args.repetitions, limits, args.cold, types, mmap_kb))
    except TypesError as err:
        print(f"calibrate: {err}", file=sys.stderr)
        return 2
    except IsolationError as err:
        print(f"calibrate: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
