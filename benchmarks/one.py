"""One timed simulation run, meant to be started in a fresh process by `benchmarks.run`.

    python -m benchmarks.one --config configs/paper/base.yaml \
        --set users.count=1000 --set scheduler=uniform --set steps=100000

Prints one line ``BENCH_JSON {...}`` on stdout with the timings (seconds), the mean
online users / active requests / active subtasks of the run and the process's peak
resident memory. Nothing is written to disk. Phases:

- ``import_s``: importing the simulator (NumPy, numba, the package).
- ``construct_s``: ``Simulation(cfg)``: bundle, parameters, state arrays, initial state
  (its first kernel call loads, or compiles, the initial-state kernel).
- ``first_step_s``: the first step, run like the others (through the fused runner,
  policies/runner.py): loads (warm cache) or compiles (cold cache) the kernels.
- ``run_s``: ``run()`` for the remaining ``steps - 1`` steps, including building the run
  record; ``per_step_us`` and ``steps_per_s`` come from this phase only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

MARKER = "BENCH_JSON "


def _maxrss_mb() -> float:
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.one", description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="run config YAML")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override (repeatable)")
    args = ap.parse_args(argv)

    out: dict = {"config": args.config, "overrides": args.overrides,
                 "numba_cache_dir": os.environ.get("NUMBA_CACHE_DIR")}
    t0 = time.perf_counter()
    import numpy as np

    from gmm_volunteer.model.config import load_config
    from gmm_volunteer.model.engine import Simulation

    out["import_s"] = time.perf_counter() - t0
    out["rss_after_import_mb"] = _maxrss_mb()

    cfg = load_config(args.config, overrides=args.overrides)
    steps = int(cfg.steps)
    if steps < 2:
        raise SystemExit("benchmarks.one needs steps >= 2 (the first step is timed apart)")

    t0 = time.perf_counter()
    sim = Simulation(cfg)
    out["construct_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    sim.run(progress=False, until=1)
    out["first_step_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    rec = sim.run(progress=False)
    run_s = time.perf_counter() - t0
    timed = steps - 1

    ev = rec.subtask_events.astype(np.int64).sum(axis=1)  # (steps, event), both node classes
    # start - (complete + abort + reset + cancel): subtasks assigned and not yet ended.
    in_flight = np.cumsum(ev[:, 0] - ev[:, 1:].sum(axis=1))

    out.update(
        users=int(sim.params.n_users),
        scheduler=cfg.scheduler,
        steps=steps,
        timed_steps=timed,
        run_s=run_s,
        per_step_us=run_s / timed * 1e6,
        steps_per_s=timed / run_s if run_s > 0 else float("inf"),
        total_s=out["import_s"] + out["construct_s"] + out["first_step_s"] + run_s,
        mean_online_users=float(rec.online_users.mean()),
        mean_active_requests=float(rec.active_requests.mean()),
        mean_active_subtasks=float(in_flight.mean()),
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
