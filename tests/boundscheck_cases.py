"""Small end-to-end runs for numba's bounds checking (tests/test_class1_memory.py runs
this file in a subprocess with NUMBA_BOUNDSCHECK=1 and a cache folder of its own).

With bounds checking on, an index outside an array raises IndexError instead of
reading or writing outside it, so every case here either finishes or fails loudly.
Usage: python boundscheck_cases.py WORKDIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def bundle_with_slots(root: Path, slots: int) -> Path:
    from gmm_volunteer.io.bundlefiles import write_bundle
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    b = synthetic_bundle()
    b["task_types"][3]["subtasks"] = (["heavy", "light"] * slots)[:slots]
    path = root / f"bundle-{slots}"
    write_bundle(b, path)
    return path


def cases(root: Path):
    from gmm_volunteer.io.bundlefiles import write_bundle
    from gmm_volunteer.testing.synthetic import synthetic_bundle

    plain = root / "bundle"
    write_bundle(synthetic_bundle(), plain)
    quick = {"availability": {"online": {"dist": "exponential", "mean": 80.0},
                              "offline": {"dist": "exponential", "mean": 40.0}},
             "requests": {"think_time": {"dist": "exponential", "mean": 8.0},
                          "patience": {"dist": "exponential", "mean": 60.0}}}
    yield "uniform, users start empty", {
        "model": str(plain), "users": {"count": 30, "initial_data": "empty"}, **quick}
    yield "uniform, users start filled, tight capacity", {
        "model": str(plain), "users": {"count": 20, "capacity": 0.3}, "server": {"capacity": 0.5}, **quick}
    # The overrun of 0.6.0: a request type with many subtask slots outgrew the batch pool.
    yield "a request type of 400 subtask slots", {
        "model": str(bundle_with_slots(root, 400)), "users": {"count": 40}, **quick}
    yield "reactive autoscaler, no batching", {
        "model": str(plain), "users": {"count": 25}, "autoscaler": "reactive",
        "execution": {"batching": False}, **quick}


def main(root: Path) -> int:
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.run.engine import Simulation

    for name, d in cases(root):
        cfg = config_from_dict({"steps": 150, "seed": 4, "server": {"capacity": 10}, **d})
        record = Simulation(cfg).run(progress=False)
        n = int(np.asarray(record.request_user).size)
        print(f"ok: {name}: {n} requests ended", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
