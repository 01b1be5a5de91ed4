"""Subtask data held and batched per model or per slot (docs/model.md D7, D8; issue 21).

The shipped catalogue fills 30 (task type, slot) pairs with 5 subtask types, so the two
keyings differ: per model a node holds each model once and same-model subtasks batch
together whatever slot they fill; per slot (paper 2.2's literal indexing) every slot is
a subtask of its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gmm_volunteer.io.bundlefiles import load_bundle
from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.model.params import READY, build_params

ROOT = Path(__file__).resolve().parents[1]
MODEL = str(ROOT / "gmm_volunteer/bundles/default")
BUNDLE = load_bundle(MODEL)
DISTINCT_MB = sum(s.data_size_mb for s in BUNDLE.subtask_types
                  if any(s.name in t.subtasks for t in BUNDLE.task_types))


def _cfg(subtask_data, scheduler="uniform", users=300, steps=3000, seed=2):
    return config_from_dict({"seed": seed, "steps": steps, "users": {"count": users},
                             "server": {"capacity": 10}, "scheduler": scheduler, "model": MODEL,
                             "execution": {"subtask_data": subtask_data}})


def test_slots_of_one_model_share_a_subtask_per_model_only():
    per_model = build_params(_cfg("model"), BUNDLE)
    per_slot = build_params(_cfg("slot"), BUNDLE)
    names = [s.name for s in BUNDLE.subtask_types]
    for k, task in enumerate(BUNDLE.task_types):
        for p, name in enumerate(task.subtasks):
            assert names[per_model.sub_type[per_model.task_sub[k, p]]] == name
            assert names[per_slot.sub_type[per_slot.task_sub[k, p]]] == name
    n_slots = sum(len(t.subtasks) for t in BUNDLE.task_types)
    assert per_slot.n_sub == n_slots
    assert per_model.n_sub == len(set(per_model.sub_type)) < n_slots
    assert per_model.sub_data_mb.sum() == pytest.approx(DISTINCT_MB)


@pytest.fixture(scope="module")
def runs():
    out = {}
    for key in ("model", "slot"):
        sim = Simulation(_cfg(key))
        sim.run(progress=False)
        out[key] = sim
    return out


def test_no_device_stores_a_model_twice(runs):
    """Per model, what any node holds is at most the distinct data; the server holds
    exactly it. Per slot, the same run lets a device hold a model once per slot."""
    S = runs["model"].arrays
    held = S.rd_mb.sum(axis=1)
    assert S.rd_used[0] == pytest.approx(DISTINCT_MB)
    assert held.max() <= DISTINCT_MB * (1 + 1e-9)
    assert np.count_nonzero(S.rd_state[1:] == READY) > 0, "some volunteer should hold data"
    slot = runs["slot"].arrays
    assert slot.rd_used[0] > DISTINCT_MB * 1.5
    assert slot.rd_mb[1:].sum(axis=1).max() > DISTINCT_MB


def _mixed_batches(sim, steps):
    """Number of steps with a batch whose members fill different (task type, slot) pairs."""
    mixed = 0
    for _ in range(steps):
        sim.step()
        S = sim.arrays
        users, slots = np.nonzero(S.ex_batch >= 0)
        keys = {}
        for i, p in zip(users, slots):
            keys.setdefault(int(S.ex_batch[i, p]), set()).add((int(S.rq_type[i]), int(p)))
        mixed += any(len(v) > 1 for v in keys.values())
    return mixed


@pytest.mark.parametrize("key, expect_mixed", [("model", True), ("slot", False)])
def test_same_model_subtasks_batch_together_whatever_slot(key, expect_mixed):
    sim = Simulation(_cfg(key, scheduler="centralized", users=400, steps=600))
    mixed = _mixed_batches(sim, 600)
    assert (mixed > 0) == expect_mixed, mixed


# ---- data held at t = 0 (docs/model.md D2; model/initial_data.py) ----------------------

def _initial(cfg_extra, users=2000):
    d = {"seed": 5, "steps": 10, "users": {"count": users}, "server": {"capacity": 10},
         "scheduler": "uniform", "model": MODEL, **cfg_extra}
    sim = Simulation(config_from_dict(d))
    return sim.arrays, sim.params


def test_filled_users_hold_what_fits_and_the_holder_lists_agree():
    S, p = _initial({})
    # the shipped catalogue's 148 MB fit 3 GB: every user holds every requested model
    assert np.all(S.rd_state[1:, : p.n_req] == READY)
    assert np.allclose(S.rd_mb[1:].sum(axis=1), DISTINCT_MB)
    assert S.rd_usertotal[0] == pytest.approx(2000 * DISTINCT_MB)
    online = np.flatnonzero(S.online[1:]) + 1
    for j in range(p.n_req):
        assert sorted(S.hd_list[j, : S.hd_n[j]]) == sorted(online)


def test_filled_storage_is_a_random_fill_that_stops_when_nothing_more_fits():
    """With a mean storage allocation of about 39 MB (140 MB x the fitted mean fraction
    0.28), ResNet-50 (102 MB) never fits and the other four (46 MB) do not all fit:
    users hold different subsets, each with no missing model that would still fit."""
    small = {"base_profile": {"storage": 140.0}}
    S, p = _initial(small, users=400)
    sizes = np.array([s.data_size_mb for s in BUNDLE.subtask_types])
    size_j = sizes[p.sub_type[: p.n_req]]
    budget = float(p.al_mean[1, 4] * p.amax[1, 4])
    held = S.rd_state[1:, : p.n_req] == READY
    used = (held * size_j).sum(axis=1)
    assert np.all(used <= budget + 1e-9)
    missing_fit = (~held) & (size_j[None, :] <= (budget - used)[:, None])
    assert not missing_fit.any()
    assert len({tuple(r) for r in held}) > 1, "fills should differ between users"


def test_empty_start_and_joining_users_hold_nothing():
    empty, _ = _initial({"users": {"count": 300, "initial_data": "empty"}}, users=300)
    assert empty.rd_mb[1:].sum() == 0
    join = {"events": [{"kind": "join", "nodes": [1, 2, 3], "at_s": 5}]}
    S, _ = _initial(join, users=300)
    assert S.rd_mb[1:4].sum() == 0 and S.rd_mb[4:].sum() > 0


def test_initial_data_is_keyed_by_user():
    """User i's fill does not depend on the user count or the scheduler (D5)."""
    small = {"base_profile": {"storage": 140.0}}
    a, _ = _initial({**small, "scheduler": "affinity"}, users=200)
    b, _ = _initial(small, users=400)
    assert np.array_equal(a.rd_state[1:], b.rd_state[1:201])
