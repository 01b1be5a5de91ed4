"""A rough estimate of a run's simulation time, made before it runs (`gmmv validate`).

The cost of a step grows with the users online (their requests, downloads and batches).
Per scheduler, the cost per online user and step is that measured by `make bench` of
0.5.0 (benchmarks/baselines/0.5.0-2026-12-02.txt: 10,000 users x 100,000 steps of
configs/paper/base.yaml, about 1,010 online, on the project's 2-core build machine):
centralized 252, uniform 571, affinity 405 us per step. Other schedulers are taken as
uniform. The figure holds within about a factor of 2 on that machine for 1,000 to
10,000 users; above 100,000 users a step costs up to 3.4x more per online user (the
server's outbound link saturates; README, "Speed"). Compilation is separate: a cold
cache adds 1-2 minutes per policy pair.
"""

from __future__ import annotations

import math

BASE_US = 10.0  # per step, whatever the users (the 1,000-user rows leave about this)
PER_ONLINE_US = {"centralized": 0.24, "uniform": 0.56, "affinity": 0.39}
DEFAULT_SCHEDULER = "uniform"
BASIS = ("0.5.0 benchmarks on the 2-core build machine (benchmarks/baselines/0.5.0-2026-12-02.txt); "
         "expect a factor of 2 either way, up to 3.4x more above 100,000 users")


def online_fraction(cfg) -> float:
    """The stationary fraction of users online: mean online / (mean online + offline),
    weighted by the shares of the user classes (docs/model.md D36)."""
    return sum(c.share * _online_fraction(c.availability) for c in cfg.users.class_list(cfg.availability))


def _online_fraction(availability) -> float:
    on, off = availability.online.mean(), availability.offline.mean()
    if math.isinf(on):
        return 1.0
    if math.isinf(off):
        return 0.0
    return on / (on + off)


def estimate_seconds(cfg) -> tuple[float, str]:
    """(seconds of simulation, a note on the figure's basis) for `cfg`."""
    per_online = PER_ONLINE_US.get(str(cfg.scheduler))
    note = BASIS
    if per_online is None:
        per_online = PER_ONLINE_US[DEFAULT_SCHEDULER]
        note = f"scheduler {cfg.scheduler} not benchmarked: taken as {DEFAULT_SCHEDULER}; " + BASIS
    online = cfg.users.count * online_fraction(cfg)
    return cfg.steps * (BASE_US + per_online * online) * 1e-6, note
