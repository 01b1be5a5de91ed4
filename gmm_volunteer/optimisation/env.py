"""A Gymnasium environment for eq. 2: a learning agent sets the scheduler between steps.

Paper section 2.4, eq. 2: the scheduler pi maximises the long-run average reward
r(s_t) = -1^T delta(q_t, dq_t), where delta_i = 1 when user i's request latency dq grows
in step t. Here one environment step advances the simulation k steps (1 s each) under
the `weighted` scheduler (gmm_volunteer/policies/weighted.py) with the weights the
action sets, and the reward is the sum of r(s_t) over those k steps, minus an optional
cost of the dedicated capacity in effect.

Latency increments are counted as in `gmm_volunteer.optimisation.problem` (docs/model.md
D3, D19): a window [t0, t1) adds L(t1) - L(t0), kept up to date in `SchedulingEnv._observe`.

Observation (float32 Box, bounds in `observation_space`):

=======================  ======  ===========================================================
entries                  bounds  meaning
=======================  ======  ===========================================================
online                   [0, 1]  online users / registered users, at the window's end
active per type (K)      [0, 1]  active requests of each request type / registered users
waiting per type (K)     [0, 1]  of those, requests with a subtask not yet placed
utilisation (5)          [0, 2]  server consumption / allocation per resource (band_in,
                                 band_out, cpu, memory, storage), window mean; CPU demand
                                 may exceed the allocation (it then slows down), so it is
                                 clipped at 2
completed share          [0, 1]  completed / ended requests in the window (0 if none)
latency mean, P99        [0, C]  of the requests completed in the window, in units of
                                 ``latency_scale`` seconds, clipped at C = ``latency_cap``
=======================  ======  ===========================================================

Action: Box [-1, 1]^4, the weights of the weighted scheduler (server, batch, memory,
wait, in `policies.weighted.WEIGHTS` order) divided by ``weight_bound``.

Seeding: ``reset(seed=s)`` simulates with root seed s (the trajectory of
``gmmv run --set seed=s`` with the same scheduler settings); ``reset()`` without a seed
draws the next root seed from the environment's ``np_random``, so a seeded first reset
fixes every later episode. Episodes end by truncation at the config's ``steps``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from gmm_volunteer.io.bundlefiles import load_bundle
from gmm_volunteer.run.config import RunConfig
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.model.kernels.ops import OUT_COMPLETED
from gmm_volunteer.optimisation.problem import active_latency, resolve_config
from gmm_volunteer.policies.weighted import WEIGHTS

N_RES = 5


def with_seed(cfg: RunConfig, seed: int) -> RunConfig:
    return cfg.model_copy(update={"seed": int(seed)})


ENV_MAX = 1e12  # bound of every numeric option: far above any meaningful setting


def _check_options(*, k, warmup, weight_bound, capacity_cost, reward_scale, latency_scale,
                   latency_cap, initial_weights) -> None:
    """Every option finite and in range: NaN passes every comparison and would put NaN
    observations outside the observation space and NaN or -inf into the rewards."""
    import math

    def real(name, x, lo, lo_open=True):
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) \
                or not math.isfinite(x) or not (x > lo if lo_open else x >= lo) or abs(x) > ENV_MAX:
            raise ValueError(f"{name}: need a finite number {'>' if lo_open else '>='} {lo:g} "
                             f"and <= {ENV_MAX:g}, got {x!r}")

    for name, x, lo in (("k", k, 1), ("warmup", warmup, 0)):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not lo <= x <= 10**9:
            raise ValueError(f"{name}: need an integer in [{lo}, 10^9], got {x!r}")
    real("weight_bound", weight_bound, 0.0)
    real("latency_scale", latency_scale, 0.0)
    real("latency_cap", latency_cap, 0.0)
    # a cost or scale of either sign is a choice; only its finiteness is required
    real("reward_scale", reward_scale, -ENV_MAX, lo_open=False)
    real("capacity_cost", capacity_cost, -ENV_MAX, lo_open=False)
    for i, w in enumerate(initial_weights):
        real(f"initial_weights[{i}]", w, -ENV_MAX, lo_open=False)

class SchedulingEnv(gym.Env):
    """`gmm_volunteer/Scheduling-v0` (module docstring). Options:

    config: run config (path, mapping or RunConfig; default configs/scheduling_env.yaml);
        its scheduler is replaced by `weighted`.
    k: simulated steps per environment step.
    warmup: steps simulated at reset with ``initial_weights`` before the first
        observation (the request process starts empty, docs/model.md D2).
    weight_bound: an action of 1 sets a weight to this value.
    capacity_cost: reward cost per step of one base profile of dedicated capacity
        (mean over resources of capacity / base profile); 0 gives eq. 2 exactly.
    reward_scale: multiplies the reward (1: the sum of r(s_t) itself).
    latency_scale, latency_cap: units and clip of the latency observations.
    """

    metadata = {"render_modes": []}

    def __init__(self, config=None, overrides=(), k: int = 60, warmup: int = 300,
                 weight_bound: float = 10.0, capacity_cost: float = 0.0, reward_scale: float = 1.0,
                 initial_weights=(0.0, 0.0, 0.0, -20.0), latency_scale: float = 60.0, latency_cap: float = 10.0):
        _check_options(k=k, warmup=warmup, weight_bound=weight_bound, capacity_cost=capacity_cost,
                       reward_scale=reward_scale, latency_scale=latency_scale, latency_cap=latency_cap,
                       initial_weights=initial_weights)
        self.cfg = resolve_config(config, overrides)
        if warmup + k > self.cfg.steps:
            raise ValueError(f"warmup + k = {warmup + k} exceeds the config's steps ({self.cfg.steps})")
        self.k, self.warmup = int(k), int(warmup)
        self.weight_bound, self.capacity_cost = float(weight_bound), float(capacity_cost)
        self.reward_scale = float(reward_scale)
        self.initial_weights = tuple(float(w) for w in initial_weights)
        self.latency_scale, self.latency_cap = float(latency_scale), float(latency_cap)
        self.bundle = load_bundle(self.cfg.model)
        self.n_types = len(self.bundle.task_types)
        n_obs = 1 + 2 * self.n_types + N_RES + 3
        high = np.ones(n_obs, np.float32)
        high[1 + 2 * self.n_types: 1 + 2 * self.n_types + N_RES] = 2.0
        high[-2:] = self.latency_cap
        self.observation_space = gym.spaces.Box(np.zeros(n_obs, np.float32), high, dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(len(WEIGHTS),), dtype=np.float32)
        self.base = self.cfg.base_profile.as_array()
        self.sim: Simulation | None = None

    # -- Gymnasium API ------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        run_seed = seed if seed is not None else int(self.np_random.integers(2**63))
        self.sim = Simulation(with_seed(self.cfg, run_seed), bundle=self.bundle)
        self.sim.scheduler.set_options(**dict(zip(WEIGHTS, self.initial_weights)))
        self._logged = 0          # request-log entries already counted
        self._ended_latency = 0   # their latencies' sum
        self.sim.run_to(self.warmup)
        obs, info = self._observe(0)
        info.update(run_seed=run_seed)
        return obs, info

    def step(self, action):
        if self.sim is None:
            raise RuntimeError("call reset() before step()")
        a = np.clip(np.asarray(action, np.float64).reshape(len(WEIGHTS)), -1.0, 1.0)
        weights = {w: float(x) * self.weight_bound for w, x in zip(WEIGHTS, a)}
        self.sim.scheduler.set_options(**weights)
        t0, before = self.sim.t, self._latency
        self.sim.run_to(t0 + self.k)
        obs, info = self._observe(t0)
        increments = self._latency - before
        cap = self.sim.control.capacity_series(self.sim.t)[t0:]
        capacity = float(np.sum(np.mean(cap / self.base, axis=1)))
        reward = -self.reward_scale * increments - self.capacity_cost * capacity
        info.update(latency_increments=increments, capacity_steps=capacity, weights=weights)
        truncated = self.sim.t >= self.cfg.steps
        return obs, float(reward), False, truncated, info

    # -- observation ----------------------------------------------------------------------

    def _observe(self, t0: int):
        """Observation of the window [t0, t); updates L(t) (module docstring)."""
        A, t, params = self.sim.arrays, self.sim.t, self.sim.params
        n = int(A.n_lg[0])
        lat = (A.lg_end[self._logged:n] - A.lg_start[self._logged:n]).astype(np.int64)
        # the completed ones' latencies from their end times (under latency: substep inside
        # the step, D34); eq. 2's L(t) counts whole steps
        done = (A.lg_time[self._logged:n] - A.lg_start[self._logged:n])[A.lg_out[self._logged:n] == OUT_COMPLETED]
        self._ended_latency += int(lat.sum())
        self._logged = n
        self._latency = self._ended_latency + active_latency(A, t)
        active = A.rq_list[: int(A.n_rq[0])]
        types = A.rq_type[active].astype(np.int64)
        # Requests with a subtask not yet placed: slots beyond a type's subtask count
        # are unplaced too, so only the first task_nsub slots are looked at.
        slots = np.arange(A.ex_node.shape[1])[None, :] < params.task_nsub[types][:, None]
        waiting = np.any((A.ex_node[active] < 0) & slots, axis=1)
        alloc = A.ser_salloc[t0:t].astype(np.float64)
        cons = A.ser_scons[t0:t].astype(np.float64)
        util = np.divide(cons, alloc, out=np.zeros_like(cons), where=alloc > 0)
        n_users = params.n_users
        obs = np.concatenate([
            [A.n_on[0] / n_users],
            np.bincount(types, minlength=self.n_types) / n_users,
            np.bincount(types[waiting], minlength=self.n_types) / n_users,
            util.mean(axis=0) if t > t0 else np.zeros(N_RES),
            [done.size / lat.size if lat.size else 0.0],
            [done.mean() / self.latency_scale if done.size else 0.0,
             np.quantile(done, 0.99) / self.latency_scale if done.size else 0.0],
        ])
        obs = np.clip(obs, self.observation_space.low, self.observation_space.high).astype(np.float32)
        return obs, {"t": t, "completed": int(done.size), "ended": int(lat.size)}


def make_vector_env(num_envs: int, **kwargs) -> gym.vector.SyncVectorEnv:
    """`num_envs` environments stepped together (`gymnasium.vector.SyncVectorEnv`, in
    this process); ``kwargs`` are `SchedulingEnv`'s options. ``reset(seed=[s0, s1, ...])``
    runs sub-environment i on seed s_i; ``reset(seed=s)`` on seeds s, s + 1, ...
    (``gymnasium.make_vec("gmm_volunteer/Scheduling-v0", num_envs, vectorization_mode="sync")``
    builds the same)."""
    return gym.vector.SyncVectorEnv([lambda: SchedulingEnv(**kwargs) for _ in range(int(num_envs))])
