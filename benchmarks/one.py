"""One timed simulation run, meant to be started in a fresh process by `benchmarks.run`.

    python -m benchmarks.one --config configs/paper/base.yaml \
        --set users.count=1000 --set scheduler=uniform --set steps=100000 [--progress]

Prints one line ``BENCH_JSON {...}`` on stdout with the timings (seconds), the mean
workload of the run and the process's peak resident memory. Nothing is written to disk.
Phases:

- ``import_s``: importing the simulator (NumPy, numba, the package).
- ``construct_s``: ``Simulation(cfg)``: bundle, parameters, state arrays, initial state
  (its first kernel call loads, or compiles, the initial-state kernel).
- ``first_step_s``: the first step, run like the others (through the fused runner,
  policies/runner.py): loads (warm cache) or compiles (cold cache) the kernels.
- ``warmup_s``: with ``--warmup N`` (N > 1), steps 2..N, untimed in ``run_s``: the
  start-up transient of a large population left out of its per-step cost (the workload
  means are then over the timed steps only).
- ``run_s``: the remaining ``steps - 1`` (``steps - N``) steps, in windows of ``--sample-every`` steps,
  and building the run record; ``per_step_us`` and ``steps_per_s`` come from this phase
  only (``run_cpu_s`` / ``per_step_cpu_us``: the same in process CPU time). The
  sampling between windows is timed apart (``sample_s``) and not counted in it.

At the end of each window the state is sampled for the consumers whose consumption the
step samples (paper 2.2, c_t; `step_consumption` in model/kernels/consumption.py): the
active batches and the running subtask-data downloads. Their number, not the number of
online users, is the consumption factor's work per step.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

MARKER = "BENCH_JSON "
SAMPLE_EVERY = 100  # steps per window: the workload is sampled at every window end
PROGRESS_EVERY_S = 5.0  # at most one --progress line per this many seconds (and the last)


def _maxrss_mb() -> float:
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def sampled_consumers(arrays) -> tuple[int, int]:
    """(active batches, running subtask-data downloads) in the state `arrays` between
    two steps: the consumers whose ARMA consumption `step_consumption` samples (paper
    2.2). A download runs when its node is online and its readiness for the subtask is
    LOADING (a paused download's node went offline); the next step's availability
    factor may still change that before its consumption, so this is a sample of the
    workload, not the kernel's own count."""
    import numpy as np

    from gmm_volunteer.model.constants import LOADING

    d = arrays.dl_list[: int(arrays.n_dl[0])]
    v, j = arrays.dl_node[d], arrays.dl_sub[d]
    running = (arrays.online[v] != 0) & (arrays.rd_state[v, j] == LOADING)
    return int(arrays.n_b[0]), int(np.count_nonzero(running))


def window_ends(start: int, steps: int, every: int) -> list[int]:
    """The steps at which the windows after step `start` end: every `every` steps, and
    the last step."""
    ends = list(range(start + every, steps, every))
    return ends + [steps] if steps > start else ends


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.one", description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="run config YAML")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override (repeatable)")
    ap.add_argument("--sample-every", type=int, default=SAMPLE_EVERY, metavar="N",
                    help=f"steps per window; the workload is sampled at each window end "
                         f"(default {SAMPLE_EVERY})")
    ap.add_argument("--warmup", type=int, default=1, metavar="N",
                    help="steps run before the timed phase: the first step is timed apart "
                         "(`first_step_s`), steps 2..N untimed (`warmup_s`: a window after "
                         "the start-up transient of a large population); default 1")
    ap.add_argument("--progress", action="store_true",
                    help="a line on stderr after a window (at most one per "
                         f"{PROGRESS_EVERY_S:.0f} s): step reached, elapsed s, workload")
    args = ap.parse_args(argv)
    if args.warmup < 1:
        ap.error(f"--warmup must be >= 1, got {args.warmup}")
    if args.sample_every < 1:
        ap.error(f"--sample-every must be >= 1, got {args.sample_every}")

    out: dict = {"config": args.config, "overrides": args.overrides,
                 "numba_cache_dir": os.environ.get("NUMBA_CACHE_DIR")}
    t0 = time.perf_counter()
    import numpy as np

    from gmm_volunteer.run.config import load_config
    from gmm_volunteer.run.engine import Simulation

    out["import_s"] = time.perf_counter() - t0
    out["rss_after_import_mb"] = _maxrss_mb()

    cfg = load_config(args.config, overrides=args.overrides)
    steps = int(cfg.steps)
    if steps < args.warmup + 1:
        raise SystemExit("benchmarks.one needs steps > --warmup (the first step is timed apart)")

    t0 = time.perf_counter()
    sim = Simulation(cfg)
    out["construct_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    sim.run(progress=False, until=1)
    out["first_step_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if args.warmup > 1:
        sim.run_to(args.warmup)
    out["warmup_s"] = time.perf_counter() - t0

    # Windows: run_to advances like run() (same fused path; the trajectory does not
    # depend on where a run stops, tests/test_bench_sampling.py) but builds no record;
    # the last window is a run() and builds it.
    run_s = run_cpu_s = sample_s = 0.0
    batches, downloads = [], []
    ends = window_ends(args.warmup, steps, args.sample_every)
    t_start, t_shown = time.perf_counter(), 0.0
    for end in ends:
        w0, c0 = time.perf_counter(), time.process_time()
        if end < steps:
            sim.run_to(end)
        else:
            rec = sim.run(progress=False)
        run_s += time.perf_counter() - w0
        run_cpu_s += time.process_time() - c0
        w0 = time.perf_counter()
        nb, nd = sampled_consumers(sim.arrays)
        batches.append(nb)
        downloads.append(nd)
        sample_s += time.perf_counter() - w0
        now = time.perf_counter() - t_start
        if args.progress and (now - t_shown >= PROGRESS_EVERY_S or end == steps):
            t_shown = now
            print(f"[benchmarks.one] step {end:,}/{steps:,}  {now:,.0f} s  "
                  f"{run_s / (end - args.warmup) * 1e6:,.0f} us/step  online "
                  f"{int(sim.arrays.n_on[0]):,}  batches {nb:,}  downloads {nd:,}  "
                  f"rss {_maxrss_mb():,.0f} MB", file=sys.stderr, flush=True)
    timed = steps - args.warmup
    skip = args.warmup if args.warmup > 1 else 0  # workload means over the timed window

    ev = rec.subtask_events.astype(np.int64).sum(axis=1)  # (steps, event), both node classes
    # start - (complete + abort + reset + cancel): subtasks assigned and not yet ended.
    in_flight = np.cumsum(ev[:, 0] - ev[:, 1:].sum(axis=1))[skip:]

    out.update(
        users=int(sim.params.n_users),
        scheduler=cfg.scheduler,
        steps=steps,
        timed_steps=timed,
        warmup_steps=args.warmup,
        run_s=run_s,
        run_cpu_s=run_cpu_s,
        per_step_us=run_s / timed * 1e6,
        per_step_cpu_us=run_cpu_s / timed * 1e6,
        steps_per_s=timed / run_s if run_s > 0 else float("inf"),
        total_s=out["import_s"] + out["construct_s"] + out["first_step_s"] + out["warmup_s"] + run_s,
        sample_every=args.sample_every,
        workload_samples=len(ends),
        sample_s=sample_s,
        mean_online_users=float(rec.online_users[skip:].mean()),
        mean_active_requests=float(rec.active_requests[skip:].mean()),
        mean_active_subtasks=float(in_flight.mean()),
        mean_active_batches=float(np.mean(batches)),
        mean_running_downloads=float(np.mean(downloads)),
        subtask_starts=int(ev[:, 0].sum()),
        requests_ended=int(rec.request_outcome.shape[0]),
        model_provisional=bool(rec.attrs.get("model_provisional", False)),
        peak_rss_mb=_maxrss_mb(),
    )
    sys.stdout.write(MARKER + json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
