"""The Gymnasium environment gmm_volunteer/Scheduling-v0 (gmm_volunteer/optimisation/env.py):
Gymnasium's own checker, seeding, and the reward against eq. 2 recomputed from a run's
records."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import gmm_volunteer.optimisation  # noqa: F401  (registers the environment)
from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.optimisation import ENV_ID
from gmm_volunteer.optimisation.env import SchedulingEnv, make_vector_env

K, WARMUP, STEPS = 20, 40, 200


def tiny(model, **extra) -> dict:
    """A run small enough to step through in a second, with churn and impatient users."""
    return {
        "steps": STEPS, "seed": 1, "model": str(model), "scheduler": "weighted",
        "users": {"count": 30, "capacity": 0.5}, "server": {"capacity": 0.3},
        "availability": {"online": {"dist": "exponential", "mean": 150.0},
                         "offline": {"dist": "exponential", "mean": 60.0}},
        "requests": {"think_time": {"dist": "exponential", "mean": 8.0},
                     "patience": {"dist": "pareto", "scale": 40.0, "shape": 1.5}},
        **extra,
    }


@pytest.fixture
def make(synthetic_model):
    def build(**options):
        return SchedulingEnv(config_from_dict(tiny(synthetic_model)), k=K, warmup=WARMUP, **options)
    return build


def actions(n, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=(n, 4)).astype(np.float32)


def rollout(env, seed, acts):
    obs, _ = env.reset(seed=seed)
    out = [obs]
    rewards = []
    for a in acts:
        obs, r, terminated, truncated, _ = env.step(a)
        out.append(obs)
        rewards.append(r)
        if terminated or truncated:
            break
    return np.array(out), np.array(rewards), truncated


def test_check_env_passes(make):
    check_env(make())


def test_registered_and_made_by_id(synthetic_model):
    env = gym.make(ENV_ID, config=tiny(synthetic_model), k=K, warmup=WARMUP)
    assert isinstance(env.unwrapped, SchedulingEnv)
    obs, _ = env.reset(seed=2)
    assert env.observation_space.contains(obs)


def test_same_seed_same_trajectory(make):
    acts = actions(8)
    a = rollout(make(), 7, acts)
    b = rollout(make(), 7, acts)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    c = rollout(make(), 8, acts)
    assert not (np.array_equal(a[0], c[0]) and np.array_equal(a[1], c[1]))
    # An unseeded reset draws its run seed from np_random: fixed by the first seed.
    e1, e2 = make(), make()
    e1.reset(seed=5)
    e2.reset(seed=5)
    assert e1.reset()[1]["run_seed"] == e2.reset()[1]["run_seed"]


def increments_from_records(record, arrays, T):
    """Per-step latency increments delta_t, t < T (docs/model.md D3), from the request
    log and the requests still active after step T-1: a request started in s and last
    active in e adds one in each step s+1..e."""
    delta = np.zeros(T + 1, np.int64)
    starts = record.request_start
    ends = record.request_end
    active = arrays.rq_list[: int(arrays.n_rq[0])]
    starts = np.concatenate([starts, arrays.rq_start[active]])
    ends = np.concatenate([ends, np.full(active.size, T - 1)])
    np.add.at(delta, starts + 1, 1)   # each request adds from s + 1 ...
    np.add.at(delta, ends + 1, -1)    # ... through e (e = s, latency 0, adds none)
    return np.cumsum(delta)[:T], starts


def test_reward_is_minus_latency_increments(make):
    env = make()
    _, rewards, truncated = rollout(env, 3, actions(100, seed=1))
    assert truncated and rewards.size == (STEPS - WARMUP) // K
    record = env.sim.record()
    delta, starts = increments_from_records(record, env.sim.arrays, STEPS)
    windows = delta[WARMUP:].reshape(-1, K).sum(axis=1)
    assert windows.sum() > 0  # the construction has latency to count
    np.testing.assert_array_equal(rewards, -windows)
    # The same increments from the per-step series: the active requests after step t's
    # request factor, less those that started in step t (their latency is still 0).
    started = np.bincount(starts, minlength=STEPS)[:STEPS]
    np.testing.assert_array_equal(delta, record.active_requests - started)


def test_capacity_cost(make):
    acts = actions(4, seed=2)
    _, plain, _ = rollout(make(), 4, acts)
    _, costed, _ = rollout(make(capacity_cost=2.0), 4, acts)
    # server capacity 0.3 base profiles on every resource, k steps per window
    np.testing.assert_allclose(costed, plain - 2.0 * 0.3 * K)


def test_vector_env_runs_each_seed(synthetic_model, make):
    envs = make_vector_env(2, config=config_from_dict(tiny(synthetic_model)), k=K, warmup=WARMUP)
    acts = actions(3, seed=3)
    obs, _ = envs.reset(seed=[11, 12])
    got = [obs]
    for a in acts:
        obs, *_ = envs.step(np.stack([a, a]))
        got.append(obs)
    got = np.array(got)
    for i, seed in enumerate((11, 12)):
        single, _, _ = rollout(make(), seed, acts)
        np.testing.assert_array_equal(got[:, i], single)


def test_weights_change_without_recompiling(make):
    from gmm_volunteer.policies.runner import compiled_runner

    env = make()
    rollout(env, 1, actions(2))
    sim = env.sim
    run = compiled_runner(sim.executor.act_kernel, sim.scheduler.downloads, sim.scheduler.place)
    before = list(run.signatures)
    assert len(before) == 1
    rollout(env, 1, actions(5, seed=9))  # other weights, a new Simulation
    assert run.signatures == before


def test_weighted_scheduler_conforms_with_waiting(synthetic_model):
    """The conformance checker on weights that exercise every branch: waiting drawn
    often (wait above the nodes), server and batch preferences, memory aversion."""
    from gmm_volunteer.testing.conformance import check_policy

    check_policy("scheduler", "weighted", {"server_weight": 3.0, "batch_weight": 2.0,
                                           "memory_weight": -1.0, "wait_weight": 1.0},
                 model=synthetic_model, steps=150)
