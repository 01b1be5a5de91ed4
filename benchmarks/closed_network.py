"""The closed network against an event-driven reference: `python -m benchmarks.run --only
closed`, or alone `python -m benchmarks.closed_network` (benchmarks/README.md).

The system of docs/validation.md section 1 (`synthetic.queueing_config`: N users always
online, exponential think time of mean 100 s, jobs of exponential work of mean 10
CPU-seconds at one core on a 2-core processor-sharing server) run to the same horizon in
seconds by the simulator (1 s steps) and by the SimPy reference of
benchmarks/reference_network.py (events only; on the simulator's step grid, ``grid=True``),
at N = 20, 200 and 2,000: below, near and far beyond saturation (about 22 users), where
the server holds about 180 and 1,980 jobs.

Two timings, each the median over the repeats, the simulator's as a ratio to the
reference's measured in the same run, interleaved (simulator, reference, next N, ...,
then the next repeat) so that a burst of load on a shared machine hits both:

- in process: the simulation only (`Simulation.run` after a warm-up run has loaded the
  kernels; the reference's `env.run`), the model built outside the timing;
- whole process: `python -m benchmarks.closed_network --child sim|ref ...` from start to
  exit, imports and kernel loading included (the simulator's warm numba cache).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
USERS = (20, 200, 2000)
HORIZON_S = 20_000
QUICK_USERS, QUICK_HORIZON_S = (20, 200), 2_000
MARKER = "CLOSED_JSON "


def _bundle_dir() -> Path:
    from gmm_volunteer.io.bundlefiles import write_bundle
    from gmm_volunteer.testing.synthetic import queueing_bundle

    path = Path(tempfile.gettempdir()) / f"gmmv-closed-network-bundle-{os.getuid()}"
    if not (path / "bundle.yaml").exists():
        write_bundle(queueing_bundle(mean_work_s=10.0, demand_pct=100.0), path)
    return path


def time_simulator(users: int, horizon: int, seed: int = 0) -> tuple[float, int]:
    """Seconds of `Simulation.run` for `horizon` steps, and the requests completed."""
    from gmm_volunteer.run.engine import Simulation
    from gmm_volunteer.testing.synthetic import queueing_config

    sim = Simulation(queueing_config(_bundle_dir(), users=users, steps=horizon, seed=seed))
    t0 = time.perf_counter()
    rec = sim.run(progress=False)
    return time.perf_counter() - t0, int((rec.request_outcome == 0).sum())


def time_reference(users: int, horizon: int, seed: int = 0) -> tuple[float, int]:
    """Seconds of the reference's run to `horizon` s, and the jobs completed."""
    from benchmarks.reference_network import run_reference

    t0 = time.perf_counter()
    run = run_reference(users, horizon, grid=True, seed=seed)
    return time.perf_counter() - t0, int(run.end.size)


def warm_up() -> None:
    """A short run of each, so that the timed ones find the kernels loaded."""
    time_simulator(20, 200)
    time_reference(20, 200)


def _child_cmd(which: str, users: int, horizon: int) -> list[str]:
    return [sys.executable, "-m", "benchmarks.closed_network", "--child", which,
            "--users", str(users), "--horizon", str(horizon)]


def _process(which: str, users: int, horizon: int) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run(_child_cmd(which, users, horizon), cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    out = {"ok": p.returncode == 0, "process_s": wall}
    for line in p.stdout.splitlines():
        if line.startswith(MARKER):
            out.update(json.loads(line[len(MARKER):]))
    if p.returncode != 0:
        out["stderr_tail"] = "\n".join(p.stderr.strip().splitlines()[-20:])
    return out


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def section(users=USERS, horizon: int = HORIZON_S, repeats: int = 3, processes: bool = True,
            log=print) -> dict:
    """Time both implementations at each population; returns the runs and the rows."""
    load_start = _loadavg()
    warm_up()
    runs = []
    for k in range(repeats):
        for n in users:
            for which, fn in (("sim", time_simulator), ("ref", time_reference)):
                s, done = fn(n, horizon)
                runs.append({"kind": "in_process", "impl": which, "users": n, "repeat": k,
                             "run_s": s, "completed": done, "load": _loadavg()})
                log(f"  closed {k + 1}/{repeats} N={n} {which} in process: {s:.3f} s "
                    f"({done:,} completed)")
    if processes:
        for k in range(repeats):
            for n in users:
                for which in ("sim", "ref"):
                    r = _process(which, n, horizon)
                    runs.append({"kind": "process", "impl": which, "users": n, "repeat": k,
                                 "load": _loadavg(), **r})
                    log(f"  closed {k + 1}/{repeats} N={n} {which} whole process: "
                        f"{r['process_s']:.2f} s" + ("" if r["ok"] else " FAILED"))
    rows = []
    for n in users:
        row = {"users": n, "horizon_s": horizon, "repeats": repeats}
        for kind, key in (("in_process", "run_s"), ("process", "process_s")):
            for which in ("sim", "ref"):
                row[f"{kind}_{which}_s"] = _med([r.get(key) for r in runs if r["kind"] == kind
                                                 and r["impl"] == which and r["users"] == n
                                                 and r.get("ok", True)])
            s, r = row[f"{kind}_sim_s"], row[f"{kind}_ref_s"]
            row[f"{kind}_x_ref"] = s / r if (s is not None and r) else None
        row["completed_sim"] = next((r["completed"] for r in runs if r["kind"] == "in_process"
                                     and r["impl"] == "sim" and r["users"] == n), None)
        row["completed_ref"] = next((r["completed"] for r in runs if r["kind"] == "in_process"
                                     and r["impl"] == "ref" and r["users"] == n), None)
        rows.append(row)
    return {"runs": runs, "rows": rows, "load_start": load_start, "load_end": _loadavg()}


def render(sec: dict) -> str:
    def f(x, spec=".3f"):
        return "-" if x is None else format(x, spec)

    head = ["N", "horizon s", "sim run s", "ref run s", "x ref", "sim process s",
            "ref process s", "x ref (process)", "completed sim/ref"]
    body = [[f"{r['users']:,}", f"{r['horizon_s']:,}", f(r["in_process_sim_s"]),
             f(r["in_process_ref_s"]), f(r["in_process_x_ref"], ".2f"),
             f(r["process_sim_s"], ".2f"), f(r["process_ref_s"], ".2f"),
             f(r["process_x_ref"], ".2f"), f"{r['completed_sim']:,}/{r['completed_ref']:,}"]
            for r in sec["rows"]]
    w = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines = ["  ".join(c.rjust(x) for c, x in zip(cells, w)) for cells in [head, *body]]
    return "\n".join([
        "Closed network (docs/validation.md 1) against the event-driven SimPy reference "
        "(benchmarks/reference_network.py), same horizon; medians over repeats; x ref = "
        "simulator / reference; run = simulation only, warm kernels; process = whole "
        f"process; load {sec['load_start']} -> {sec['load_end']}",
        *lines])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.closed_network",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--users", default=",".join(map(str, USERS)), help="populations, comma-separated")
    ap.add_argument("--horizon", type=int, default=HORIZON_S, help="seconds (= simulator steps)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-processes", action="store_true", help="in-process timings only")
    ap.add_argument("--out", type=Path, default=None, help="write the runs and rows as JSON here")
    ap.add_argument("--child", choices=("sim", "ref"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    users = [int(x) for x in a.users.split(",") if x.strip()]
    if a.child:  # one whole-process run (timed from outside)
        fn = time_simulator if a.child == "sim" else time_reference
        s, done = fn(users[0], a.horizon)
        print(MARKER + json.dumps({"run_s": s, "completed": done}))
        return 0
    sec = section(users, a.horizon, a.repeats, not a.no_processes)
    print(render(sec))
    if a.out:
        a.out.write_text(json.dumps(sec, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
