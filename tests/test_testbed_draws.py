"""The testbed's users draw what the simulator's users of the same seed draw
(testbed.draws: keyed; gmm_volunteer.testbed.draws): the counter-based uniform in plain
Python equals the kernels', the stationary start is the Simulation's, and a device's
sequence of periods and request types is the one the simulator's run of that seed shows.
No root needed: the devices' draws are read without starting a testbed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gmm_volunteer.model.rng import keyed_uniform, keyed_uniform_int
from gmm_volunteer.testbed.config import load_testbed
from gmm_volunteer.testbed.draws import Draws, keyed_spec

CHURN = Path(__file__).resolve().parents[1] / "configs" / "testbed" / "churn-uniform.yaml"


def test_keyed_uniform_in_python_integers_is_the_kernels():
    g = np.random.default_rng(7)
    for _ in range(500):
        key = int(g.integers(0, 2**64, dtype=np.uint64))
        c, e, n, d = (int(x) for x in g.integers(0, 2**31, 4))
        assert keyed_uniform_int(key, c, e, n, d) == keyed_uniform(np.uint64(key), c, e, n, d)


def _spec(cfg, draws="keyed"):
    spec = {"entropy": int(cfg.seed), "users": cfg.users.count, "draws": draws,
            "type_probabilities": list(cfg.requests.type_probabilities),
            "laws": {"online": cfg.availability.online.law().tolist(),
                     "offline": cfg.availability.offline.law().tolist(),
                     "think_time": cfg.requests.think_time.law().tolist(),
                     "patience": cfg.requests.patience.law().tolist()}}
    return {**spec, **keyed_spec(cfg, int(cfg.seed))} if draws == "keyed" else spec


def _online_per_step(draws: Draws, steps: int) -> np.ndarray:
    """The device's availability loop (device.Device.run) without the clock: online over
    steps [t, change) of each period."""
    on = np.zeros(steps, bool)
    online, change = draws.start()
    t = 0
    while t < steps:
        on[t:min(change, steps)] = online
        t, online = change, not online
        change = t + draws.period(online)
    return on


@pytest.mark.parametrize("seed", [1, 5])
def test_devices_see_the_simulators_users_of_their_seed(seed):
    from gmm_volunteer.io.results import build_dataset
    from gmm_volunteer.run.engine import simulate

    cfg, _ = load_testbed(CHURN, [f"seed={seed}", "steps=600"])
    record = simulate(cfg, progress=False)
    ds = build_dataset(record)
    spec = _spec(cfg)
    # availability: the number online at each step, from the devices' own periods
    online = sum(_online_per_step(Draws(spec, v), cfg.steps).astype(int) for v in range(1, cfg.users.count + 1))
    sim_online = np.asarray(ds["online_users"].values)
    assert 0 < sim_online.min() < sim_online.max()  # churn: the count moves
    np.testing.assert_array_equal(online, sim_online)
    # requests: each user's n-th request has the type the device draws for its n-th
    users, starts, types = record.request_user, record.request_start, record.request_type
    checked = 0
    for v in range(1, cfg.users.count + 1):
        mine = np.flatnonzero(users == v)
        sim_types = types[mine[np.argsort(starts[mine], kind="stable")]]
        d = Draws(spec, v)
        assert [d.request()[0] for _ in sim_types] == sim_types.tolist()
        checked += len(sim_types)
    assert checked > 50 and len(set(types.tolist())) == len(cfg.requests.type_probabilities)


def test_keyed_draws_depend_on_the_seed_and_own_draws_on_their_streams():
    cfg1, _ = load_testbed(CHURN, ["seed=1"])
    cfg2, _ = load_testbed(CHURN, ["seed=2"])
    a, b = Draws(_spec(cfg1), 1), Draws(_spec(cfg2), 1)
    assert [a.think() for _ in range(20)] != [b.think() for _ in range(20)]
    own, keyed = Draws(_spec(cfg1, "own"), 1), Draws(_spec(cfg1), 1)
    assert not own.keyed and keyed.keyed
    assert [own.think() for _ in range(20)] != [keyed.think() for _ in range(20)]
