"""Shared set-up for simulator tests: a synthetic bundle on disk and quick configs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gmm_volunteer.io.bundlefiles import write_bundle
from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.testing.synthetic import synthetic_bundle


def bundle_dir(tmp: Path, **kwargs) -> Path:
    path = Path(tmp) / "bundle"
    if not (path / "bundle.yaml").exists():
        write_bundle(synthetic_bundle(**kwargs), path)
    return path


def make_config(model: Path, *, users=50, steps=300, scheduler="uniform", seed=1, server=10.0,
                user_capacity=1.0, initial_data="filled", **extra):
    d = {
        "steps": steps,
        "seed": seed,
        "users": {"count": users, "capacity": user_capacity, "initial_data": initial_data},
        "server": {"capacity": server},
        "scheduler": scheduler,
        "model": str(model),
    }
    d.update(extra)
    return config_from_dict(d)


def step_checking_shares(sim, on_step=None) -> int:
    """Step `sim` by stage to its last step, checking after each step's dynamics (docs/model.md
    D10) that no node uses more CPU or bandwidth than its allocation (shares; memory is a
    hard limit the executor enforces) and that users' transfers stay within the server's
    links (the series are float32: 1e-6 relative). `on_step(S)` then sees the state arrays.
    Returns how many steps had a node's CPU contended (a batch's CPU factor below 1)."""
    from gmm_volunteer.model.params import CPU

    contended = 0
    while sim.t < sim.cfg.steps:
        t = sim.t
        sim.advance()
        S = sim.arrays
        touched = S.nd_touched[: S.n_touched[0]]
        for r in (0, 1, CPU):
            used, alloc = S.nd_cons[touched, r], S.alloc[touched, r]
            assert np.all(used <= alloc * (1 + 1e-9) + 1e-9), (t, r)
        assert S.ser_ucons[t, 0] <= S.alloc[0, 1] * (1 + 1e-6) + 1e-6
        assert S.ser_ucons[t, 1] <= S.alloc[0, 0] * (1 + 1e-6) + 1e-6
        contended += int(np.any(S.nd_fac[touched, 2] < 1.0))
        if on_step is not None:
            on_step(S)
        sim.act_executor()
        sim.act_scheduler()
        sim.t += 1
    return contended


def assert_work_within_cpu_used(sim) -> None:
    """The CPU-seconds of work completed (or, under progress: paper, charged to executions)
    never exceed the CPU used, per node class, and some work was done; 1e-5 relative for
    the float32 series."""
    from gmm_volunteer.model.params import CPU

    rec = sim.record()
    done = rec.completed_work.astype(np.float64).sum(axis=0)
    used = np.array([rec.server_consumption[:, CPU].sum(), rec.user_consumption[:, CPU].sum()]) / 100.0
    assert done.sum() > 0
    assert np.all(done <= used * (1 + 1e-5) + 1e-3), (done, used)
