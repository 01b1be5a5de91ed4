"""Scheduler behaviour (paper 2.3) and determinism of whole runs."""

from __future__ import annotations

import numpy as np
import pytest

from engine_support import make_config
from gmm_volunteer.run.engine import Simulation, simulate
from gmm_volunteer.model.params import DONE, READY
from gmm_volunteer.policies import executor_names, make_scheduler, scheduler_names
from gmm_volunteer.io.runrecord import EVENTS

BUSY = dict(
    availability={"online": {"dist": "exponential", "mean": 2000.0}, "offline": {"dist": "exponential", "mean": 500.0}},
    requests={"think_time": {"dist": "exponential", "mean": 20.0}},
)


def test_registry_lists_builtin_policies():
    assert {"centralized", "uniform", "affinity"} <= set(scheduler_names())
    assert "default" in executor_names()
    with pytest.raises(KeyError, match="unknown scheduler"):
        make_scheduler("nope")


def test_centralized_places_nothing_on_users(synthetic_model):
    cfg = make_config(synthetic_model, users=60, steps=600, scheduler="centralized", **BUSY)
    rec = simulate(cfg, progress=False)
    ev = rec.subtask_events.sum(axis=0)
    start = EVENTS.index("start")
    assert ev[0, start] > 100
    assert ev[1].sum() == 0


@pytest.mark.parametrize("scheduler", ["uniform", "affinity"])
def test_distributed_placements_on_online_ready_nodes(synthetic_model, scheduler):
    cfg = make_config(synthetic_model, users=60, steps=600, scheduler=scheduler, server=1.0, **BUSY)
    sim = Simulation(cfg)
    user_starts = 0
    while sim.t < cfg.steps:
        before = sim.arrays.ex_node.copy()
        sim.step()
        S = sim.arrays
        new = (S.ex_node > 0) & (S.ex_node != before) & (S.ex_phase != DONE)
        for i, p in zip(*np.nonzero(new)):
            v = S.ex_node[i, p]
            j = S.b_sub[S.ex_batch[i, p]]
            assert S.online[v] == 1 and S.rd_state[v, j] == READY
            user_starts += 1
    assert user_starts > 50, "the run should place work on users at all"


def colocated_fraction(cfg):
    """Fraction of user-node placements that go to a node already running (or placed in
    the same step) the same subtask, and the number of placements."""
    sim = Simulation(cfg)
    hits = total = 0
    while sim.t < cfg.steps:
        sim.advance()
        sim.act_executor()
        S = sim.arrays
        before = S.ex_node.copy()
        running = S.nd_jcount.copy()
        sim.act_scheduler()
        sim.t += 1
        new = (S.ex_node > 0) & (S.ex_node != before)
        for i, p in zip(*np.nonzero(new)):
            v, j = S.ex_node[i, p], S.b_sub[S.ex_batch[i, p]] if S.ex_batch[i, p] >= 0 else -1
            if j < 0:
                continue
            total += 1
            hits += running[v, j] > 0
    return hits / max(total, 1), total


def test_affinity_colocates_more_than_uniform(synthetic_model):
    kw = dict(users=150, steps=900, server=0.5, user_capacity=2.0, seed=5, **BUSY)
    aff, n_aff = colocated_fraction(make_config(synthetic_model, scheduler="affinity", **kw))
    uni, n_uni = colocated_fraction(make_config(synthetic_model, scheduler="uniform", **kw))
    assert n_aff > 100 and n_uni > 100
    # Two proportions: the difference must exceed 4.5 standard errors.
    se = np.sqrt(aff * (1 - aff) / n_aff + uni * (1 - uni) / n_uni)
    assert aff - uni > 4.5 * se, (aff, uni, se)


@pytest.mark.parametrize("scheduler", ["centralized", "uniform", "affinity"])
def test_same_seed_same_run(synthetic_model, scheduler):
    cfg = make_config(synthetic_model, users=40, steps=400, scheduler=scheduler, seed=9, **BUSY)
    a, b = simulate(cfg, progress=False), simulate(cfg, progress=False)
    for name in ("request_user", "request_type", "request_start", "request_end", "request_outcome",
                 "online_users", "active_requests", "server_allocation", "server_consumption",
                 "user_consumption", "subtask_events"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    c = simulate(make_config(synthetic_model, users=40, steps=400, scheduler=scheduler, seed=10, **BUSY), progress=False)
    # (The dedicated server's allocation is the same constant on every seed.)
    assert not np.array_equal(a.online_users, c.online_users)
    assert not np.array_equal(a.server_consumption, c.server_consumption)


def test_common_random_numbers_across_schedulers(synthetic_model):
    """Availability, allocations and the users' n-th requests do not depend on the policy."""
    runs = {s: simulate(make_config(synthetic_model, users=40, steps=400, scheduler=s, seed=9, **BUSY), progress=False)
            for s in ("centralized", "uniform")}
    a, b = runs["centralized"], runs["uniform"]
    np.testing.assert_array_equal(a.online_users, b.online_users)
    np.testing.assert_array_equal(a.server_allocation, b.server_allocation)
    # The first request of every user has the same type and start under both policies.
    def first(rec):
        out = {}
        for u, k, s in zip(rec.request_user, rec.request_type, rec.request_start):
            out.setdefault(int(u), (int(k), int(s)))
        return out
    fa, fb = first(a), first(b)
    common = set(fa) & set(fb)
    assert len(common) > 20
    assert all(fa[u] == fb[u] for u in common)


# -- naming a policy: registered name, module:Class, entry point -------------------------


def test_policy_named_by_import_string_and_entry_point(synthetic_model, monkeypatch):
    from importlib.metadata import EntryPoint

    from gmm_volunteer.policies import registry
    from gmm_volunteer.policies.uniform import Uniform

    assert registry.resolve("scheduler", "gmm_volunteer.policies.uniform:Uniform") is Uniform
    ep = EntryPoint(name="my-uniform", value="gmm_volunteer.policies.uniform:Uniform",
                    group="gmm_volunteer.schedulers")
    monkeypatch.setattr(registry, "entry_points",
                        lambda group: [ep] if group == "gmm_volunteer.schedulers" else [])
    assert "my-uniform" in scheduler_names()
    cfg = make_config(synthetic_model, users=20, steps=50, scheduler="my-uniform",
                      scheduler_options={"rejection_tries": 1})
    sim = Simulation(cfg)
    assert type(sim.scheduler) is Uniform and sim.scheduler.options.rejection_tries == 1


def test_unknown_policy_names_the_ways_to_name_one():
    from gmm_volunteer.policies.registry import UnknownPolicyError, resolve

    with pytest.raises(UnknownPolicyError, match="package.module:Class"):
        resolve("scheduler", "no_such_scheduler")
    with pytest.raises(UnknownPolicyError, match="cannot import"):
        resolve("executor", "no_such_module:X")
