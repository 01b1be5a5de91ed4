"""Per-step cost over a run, window by window, in process CPU time.

    python -m benchmarks.windows --config configs/paper/base.yaml \
        --set users.count=10000 --set scheduler=centralized --steps 100000 --window 10000

Prints, for each window of steps, the process CPU time per step (us), the active
batches and requests at its end, and the memory: the process's resident set now and at
its peak, the request log (entries and MB: the run's output, the one structure that
grows with the steps) and the subtask-data downloads in the list (running, paused and
frozen ones: a user that goes offline mid-download keeps its download, D7) with the
capacities of the batch and download pools. With a million users (configs/scale/
million.yaml) this shows whether anything but the log grows after start-up. Process time rather than wall time, so that two
versions run one after the other on a shared machine can be compared (their wall times
depend on what else runs; CPU time is still inflated by contention for caches, so
compare only runs made under the same load). Nothing is written.
"""

from __future__ import annotations

import argparse
import resource
import time


def _rss_mb() -> tuple[float, float]:
    """(resident, peak resident) MB of this process, from /proc/self/status."""
    now = peak = float("nan")
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    now = int(line.split()[1]) / 1024.0
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) / 1024.0
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return now, peak


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.windows", description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/paper/base.yaml", help="run config YAML")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override (repeatable)")
    ap.add_argument("--steps", type=int, default=20_000, help="steps of the run")
    ap.add_argument("--window", type=int, default=2_000, help="steps per window")
    args = ap.parse_args(argv)
    if args.window < 1 or args.steps < args.window:
        ap.error("need 1 <= --window <= --steps")

    from gmm_volunteer.run.config import load_config
    from gmm_volunteer.run.engine import Simulation

    cfg = load_config(args.config, overrides=[*args.overrides, f"steps={args.steps}"])
    t0 = time.perf_counter()
    sim = Simulation(cfg)
    now, peak = _rss_mb()
    print(f"built in {time.perf_counter() - t0:.1f} s: rss {now:,.0f} MB, peak {peak:,.0f} MB", flush=True)
    sim.run(progress=False, until=10)  # loads (or compiles) the kernels
    costs = []
    print("window_end  us_per_step  active_batches  active_requests  rss_MB  peak_MB  "
          "log_entries  log_MB  downloads  batch_pool  download_pool", flush=True)
    for end in range(args.window, args.steps + 1, args.window):
        t0 = time.process_time()
        sim.run(progress=False, until=end)
        us = (time.process_time() - t0) / (end - max(10, end - args.window)) * 1e6
        costs.append(us)
        a = sim.arrays
        now, peak = _rss_mb()
        n_lg = int(a.n_lg[0])
        log_mb = n_lg * sum(getattr(a, f).itemsize for f in
                            ("lg_user", "lg_type", "lg_start", "lg_end", "lg_out", "lg_acc")) / 2**20
        print(f"{end:10d}  {us:11.1f}  {int(a.n_b[0]):14d}  {int(a.n_rq[0]):15d}  {now:6,.0f}  "
              f"{peak:7,.0f}  {n_lg:11,d}  {log_mb:6,.0f}  {int(a.n_dl[0]):9,d}  "
              f"{a.b_node.shape[0]:10,d}  {a.dl_node.shape[0]:13,d}", flush=True)
    print(f"mean {sum(costs) / len(costs):.1f} us per step, min {min(costs):.1f}, max {max(costs):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
