"""Scripted events: overload, departures, joins (issue 12 item 5; docs/model.md D25)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gmm_volunteer.run.config import ConfigError, config_from_dict
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.model.params import CPU, MEMORY

ROOT = Path(__file__).resolve().parents[1]
MODEL = str(ROOT / "gmm_volunteer/bundles/default")


def _cfg(events, users=60, steps=900, scheduler="uniform"):
    return config_from_dict({"seed": 7, "steps": steps, "users": {"count": users},
                             "server": {"capacity": 10}, "scheduler": scheduler,
                             "model": MODEL, "events": events})


@pytest.mark.parametrize("events, key", [
    ([{"kind": "depart", "at_s": 5, "nodes": [61]}], "events.0.nodes"),
    ([{"kind": "depart", "at_s": 5, "nodes": [0]}], "events.0"),
    ([{"kind": "depart", "at_s": 5, "nodes": [1], "factor": 0.5}], "events.0"),
    ([{"kind": "overload", "at_s": 5, "nodes": [1], "factor": 1.5}], "events.0.factor"),
    ([{"kind": "join", "at_s": 5, "user_range": [0.0, 0.01]}], "events.0.user_range"),
    ([{"kind": "join", "at_s": 5}], "events.0"),
    ([{"kind": "depart", "at_s": 5, "nodes": [1], "duration": 3}], "events.0.duration"),
    ([{"kind": "depart", "at_s": 10, "duration_s": 50, "nodes": [3]},
      {"kind": "depart", "at_s": 40, "duration_s": 5, "nodes": [3]}], "events.1"),
    ([{"kind": "join", "at_s": 10, "nodes": [3]},
      {"kind": "depart", "at_s": 5, "duration_s": 2, "nodes": [3]}], "events.1"),
])
def test_bad_events_name_the_key(events, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        _cfg(events)


def test_overload_scales_the_allocations_it_names_and_nothing_before():
    """The server's allocation draws come from its own stream, so with and without the
    event they are the same numbers, times the factor inside the interval."""
    plain = Simulation(_cfg([])).run(progress=False)
    ev = [{"kind": "overload", "at_s": 300, "duration_s": 200, "nodes": [0], "factor": 0.25}]
    hit = Simulation(_cfg(ev)).run(progress=False)
    a, b = plain.server_allocation, hit.server_allocation
    assert np.array_equal(a[:300], b[:300])
    for r in (CPU, MEMORY):
        np.testing.assert_allclose(b[300:500, r], 0.25 * a[300:500, r], rtol=1e-6)  # float32 series
    for r in (0, 1, 4):  # bandwidth and storage are not touched
        np.testing.assert_array_equal(a[300:500, r], b[300:500, r])
    assert np.array_equal(a[500:], b[500:])


def _sim_until(events, t):
    sim = Simulation(_cfg(events))
    sim.run(progress=False, until=t)
    return sim


def test_departed_users_stay_away_and_come_back_to_their_process():
    users = np.arange(1, 31)  # user_range [0, 0.5] of 60
    ev = [{"kind": "depart", "at_s": 200, "duration_s": 300, "user_range": [0.0, 0.5]}]
    plain = _sim_until([], 700)
    sim = Simulation(_cfg(ev))
    online_before = None
    seen_online = 0
    for t in range(700):
        sim.step()
        if t == 199:
            online_before = sim.arrays.online[users].copy()
        if 200 <= t < 500:
            seen_online += int(sim.arrays.online[users].sum())
    assert online_before.sum() > 0  # someone was there to leave
    assert seen_online == 0
    # after the hold every user is in its own process's state: the unscripted run's
    assert np.array_equal(sim.arrays.online, plain.arrays.online)
    # the users outside the range never noticed (their draws are keyed, D5)
    rest = np.arange(31, 61)
    assert np.array_equal(sim.arrays.av_count[rest], plain.arrays.av_count[rest])


def test_joining_users_are_away_until_they_join_then_held_online():
    ev = [{"kind": "join", "at_s": 300, "duration_s": 200, "nodes": [5, 6, 7]}]
    sim = Simulation(_cfg(ev))
    for t in range(600):
        sim.step()
        on = sim.arrays.online[[5, 6, 7]]
        if t < 300:
            assert on.sum() == 0, t
        elif t < 500:
            assert on.sum() == 3, t


def test_events_keep_common_random_numbers_before_they_start():
    ev = [{"kind": "depart", "at_s": 400, "duration_s": 100, "user_range": [0.0, 0.3]}]
    a = Simulation(_cfg([])).run(progress=False)
    b = Simulation(_cfg(ev)).run(progress=False)
    ea, eb = a.request_end < 399, b.request_end < 399
    assert ea.sum() > 10
    for x, y in ((a.request_user, b.request_user), (a.request_start, b.request_start),
                 (a.request_outcome, b.request_outcome)):
        assert np.array_equal(x[ea], y[eb])
    assert np.array_equal(a.online_users[:400], b.online_users[:400])
    assert not np.array_equal(a.online_users[400:500], b.online_users[400:500])
