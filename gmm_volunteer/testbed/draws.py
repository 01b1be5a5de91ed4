"""A testbed user's random draws (paper 2.2: availability and requests), from one of two
sources (`testbed.draws`, docs/testbed.md "Draws"):

* ``keyed``: the simulator's own. The simulator draws the n-th online or offline period,
  think time, request type and patience of user i from a hash keyed by (the seed's key,
  component, i, n) (`model.rng`, `model.kernels.people`), and every user's stationary
  start from the run's "init" stream (`engine.stationary_availability`). A device keyed by
  the same seed draws the same numbers, so a testbed run and the simulator's run of its
  seed see the same users: their availability, and the n-th request of each user with its
  type, think time and patience (common random numbers; `testbed.compare` pairs them).
  Where the two systems serve a request differently, the sequence of a user's draws stays
  aligned by its counter; only when the draws are used shifts.
* ``own``: streams of the device's own, spawned from the seed (the runs before 0.8.5).

Device v is the simulator's node v (node 0 is the server). Run as plain Python: a
volunteer under a small CPU quota should not compile numba code.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from gmm_volunteer.model import laws
from gmm_volunteer.model.rng import KEY_AVAILABILITY, KEY_PATIENCE, KEY_REQUEST_TYPE, KEY_THINK, keyed_uniform_int

# The kernels' inverse-survival draw, run as plain Python
_duration = laws.discrete_duration.py_func


def draw(law, g: np.random.Generator) -> int:
    return int(_duration(int(law[0]), float(law[1]), float(law[2]), 1.0 - g.random(), g.random()))


def stationary_start(on_law, off_law, g: np.random.Generator) -> tuple[bool, int]:
    """(online at step 0, step of the first change): `engine.stationary_availability`'s
    law for one user (the current period is length-biased, the user uniform inside it)."""
    m_on, m_off = laws.mean(on_law), laws.mean(off_law)
    p_on = 1.0 if math.isinf(m_on) else m_on / (m_on + m_off)
    online = bool(g.random() < p_on)
    total = float(laws.length_biased(on_law if online else off_law, 1, g)[0])
    if not math.isfinite(total):
        return online, laws.MAX_DURATION
    residual = total - g.random() * total
    return online, int(max(math.ceil(residual) - 1, 0))


def keyed_spec(cfg, entropy: int) -> dict:
    """What the devices need to draw the simulator's users of seed `entropy`: the key of
    its counter-based draws and each user's stationary start (online at step 0, step of
    its first change), made as `engine.Simulation` makes them."""
    from gmm_volunteer.run.engine import stationary_availability
    from gmm_volunteer.model.rng import hash_key, seed_sequence, streams

    ss = seed_sequence(entropy)
    init = streams(ss)["init"]  # the Simulation's first spawn, as in its __init__
    P = SimpleNamespace(n_users=cfg.users.count, on_law=cfg.availability.online.law(),
                        off_law=cfg.availability.offline.law())
    online, _, next_change = stationary_availability(P, init)
    return {"key": str(int(hash_key(ss))),
            "start": [[bool(o), int(c)] for o, c in zip(online, next_change)]}


class Draws:
    """User v's draws, in the order the device asks for them: `start()` once, then
    `period(online)` at each switch (the law of the state entered), `think()` at each
    think time, `request()` (type, patience) at each request."""

    def __init__(self, spec: dict, v: int):
        self.laws = {k: np.array(x) for k, x in spec["laws"].items()}
        self.type_cum = np.cumsum(spec["type_probabilities"])
        self.keyed = spec.get("draws", "own") == "keyed"
        self.v = v
        if self.keyed:
            self.key = int(spec["key"])
            self.first = spec["start"][v - 1]
            self.n_switch = self.n_think = self.n_request = 0
        else:
            seq = np.random.SeedSequence(spec["entropy"]).spawn(spec["users"] + 1)[v]
            self.g_avail, self.g_think, self.g_patience, self.g_type = (
                np.random.Generator(np.random.PCG64(s)) for s in seq.spawn(4))

    def _keyed(self, component: int, law, n: int) -> int:
        """`people.keyed_duration` of user v's n-th draw of `component`."""
        u1 = keyed_uniform_int(self.key, component, self.v, n, 0)
        u2 = keyed_uniform_int(self.key, component, self.v, n, 1)
        return int(_duration(int(law[0]), float(law[1]), float(law[2]), u1, u2))

    def start(self) -> tuple[bool, int]:
        if self.keyed:
            return bool(self.first[0]), int(self.first[1])
        return stationary_start(self.laws["online"], self.laws["offline"], self.g_avail)

    def period(self, online: bool) -> int:
        """The length of the period just entered (online: an online period)."""
        law = self.laws["online" if online else "offline"]
        if not self.keyed:
            return draw(law, self.g_avail)
        self.n_switch += 1  # the kernels' av_count: the first switch draws counter 1
        return self._keyed(KEY_AVAILABILITY, law, self.n_switch)

    def think(self) -> int:
        if not self.keyed:
            return draw(self.laws["think_time"], self.g_think)
        n, self.n_think = self.n_think, self.n_think + 1
        return self._keyed(KEY_THINK, self.laws["think_time"], n)

    def request(self) -> tuple[int, int]:
        """(type, patience) of the next request."""
        if not self.keyed:
            k = int(min(np.searchsorted(self.type_cum, self.g_type.random(), side="right"), len(self.type_cum) - 1))
            return k, draw(self.laws["patience"], self.g_patience)
        n, self.n_request = self.n_request, self.n_request + 1
        u = keyed_uniform_int(self.key, KEY_REQUEST_TYPE, self.v, n, 0)
        k = 0
        while k < len(self.type_cum) - 1 and u > self.type_cum[k]:  # as `people._start_request`
            k += 1
        return k, self._keyed(KEY_PATIENCE, self.laws["patience"], n)
