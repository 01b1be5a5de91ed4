"""Per-step cost over a run, window by window, in process CPU time.

    python -m benchmarks.windows --config configs/paper/base.yaml \
        --set users.count=10000 --set scheduler=centralized --steps 100000 --window 10000

Prints, for each window of steps, the process CPU time per step (us) and the active
batches and requests at its end. Process time rather than wall time, so that two
versions run one after the other on a shared machine can be compared (their wall times
depend on what else runs; CPU time is still inflated by contention for caches, so
compare only runs made under the same load). Nothing is written.
"""

from __future__ import annotations

import argparse
import time


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

    from gmm_volunteer.model.config import load_config
    from gmm_volunteer.model.engine import Simulation

    cfg = load_config(args.config, overrides=[*args.overrides, f"steps={args.steps}"])
    sim = Simulation(cfg)
    sim.run(progress=False, until=10)  # loads (or compiles) the kernels
    costs = []
    print("window_end  us_per_step  active_batches  active_requests")
    for end in range(args.window, args.steps + 1, args.window):
        t0 = time.process_time()
        sim.run(progress=False, until=end)
        us = (time.process_time() - t0) / (end - max(10, end - args.window)) * 1e6
        costs.append(us)
        a = sim.arrays
        print(f"{end:10d}  {us:11.1f}  {int(a.n_b[0]):14d}  {int(a.n_rq[0]):15d}")
    print(f"mean {sum(costs) / len(costs):.1f} us per step, min {min(costs):.1f}, max {max(costs):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
