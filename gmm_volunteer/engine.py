"""The simulation loop: s_t ~ P(. | s_{t-1}) for t = 0..steps-1 (paper 2, 3.1).

Inside a step the factors run in the order of their dependencies (DESIGN.md section 3):
availability, requests, allocations, (offline resets happen with availability),
consumption, completions; then the executor and the scheduler act. The dynamics are one
numba call per step; policies are Python objects whose `act` runs their own kernel.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from gmm_volunteer import __version__
from gmm_volunteer import rng as rng_mod
from gmm_volunteer.bundle import load_bundle
from gmm_volunteer.kernels.consumption import step_completions, step_consumption
from gmm_volunteer.kernels.heap import heap_push
from gmm_volunteer.kernels.allocation import allocation_restart, step_allocations
from gmm_volunteer.kernels.people import start_think, step_availability, step_requests
from gmm_volunteer.kernels.ops import list_add
from gmm_volunteer.params import READY, Params, build_params, mean_duration, pack_params
from gmm_volunteer.policies import make_executor, make_scheduler
from gmm_volunteer.runrecord import RunRecord
from gmm_volunteer.state import State, allocate, grow_if_needed, pack_state


@njit(cache=True)
def dynamics_step(S, P, t):
    """Factors 1-6 of step t; the policies act afterwards (factor 7)."""
    step_availability(S, P, t)
    S.ser_online[t] = S.n_on[0]
    step_requests(S, P, t)
    S.ser_active[t] = S.n_rq[0]
    step_allocations(S, P, t)
    for r in range(S.alloc.shape[1]):
        S.ser_salloc[t, r] = S.alloc[0, r]
    step_consumption(S, P, t)
    step_completions(S, P, t)


def _length_biased(law: np.ndarray, size: int, g: np.random.Generator) -> np.ndarray:
    """Draws of the length-biased duration law (density t f(t) / E[T])."""
    kind, a, b = int(law[0]), float(law[1]), float(law[2])
    if kind == rng_mod.DIST_WEIBULL:
        return (g.gamma(1.0 + 1.0 / b, size=size)) ** (1.0 / b) * a
    if kind == rng_mod.DIST_LOGNORMAL:
        return np.exp(g.normal(a + b * b, b, size=size))
    if kind == rng_mod.DIST_PARETO:
        return a * g.random(size) ** (-1.0 / (b - 1.0))
    return g.gamma(2.0, a, size=size)


def stationary_availability(P: Params, g: np.random.Generator):
    """Initial (online, age, steps until the next change) of every user, drawn from the
    alternating renewal process's stationary law (paper 2.2; docs/model.md).

    P(online) = E[T_on] / (E[T_on] + E[T_off]); the current period is length-biased and
    the user is at a uniform point in it.
    """
    n = P.n_users
    m_on, m_off = mean_duration(P.on_law), mean_duration(P.off_law)
    online = g.random(n) < m_on / (m_on + m_off)
    total = np.where(online, _length_biased(P.on_law, n, g), _length_biased(P.off_law, n, g))
    age = g.random(n) * total
    residual = total - age
    next_change = np.maximum(np.ceil(residual) - 1, 0).astype(np.int64)
    return online, np.floor(age).astype(np.int64), next_change


@njit(cache=True)
def _init_state(S, P, online, age, next_change):
    S.online[0] = 1
    for j in range(P.n_sub):
        S.rd_state[0, j] = READY
        S.rd_mb[0, j] = P.sub_data_mb[j]
        S.rd_used[0] += P.sub_data_mb[j]
        S.rd_reserved[0] += P.sub_data_mb[j]
    S.rd_nready[0] = P.n_sub
    allocation_restart(S, P, 0, 0)
    for k in range(online.size):
        i = k + 1
        S.av_since[i] = -1 - age[k]
        heap_push(S.ah_t, S.ah_v, S.ah_t, S.ah_n, next_change[k], i, next_change[k])
        if online[k]:
            S.online[i] = 1
            list_add(S.on_list, S.on_pos, S.n_on, i)
            allocation_restart(S, P, i, 0)
            start_think(S, P, i, 0)


def _needs_growth(S: State, P: Params) -> bool:
    return (
        S.n_bfree[0] < S.n_rq[0] * P.max_slots + S.n_b[0] + 64
        or S.n_dlfree[0] < S.n_on[0] + 64
        or S.n_lg[0] + P.n_nodes + 8 > S.lg_user.shape[0]
        or S.rh_n[0] + 2 * P.n_nodes + 8 > S.rh_t.shape[0]
    )


class Simulation:
    """One trajectory, stepped from Python: `run()` it, or `step()` it and look at
    `arrays` (the state as a namedtuple of NumPy arrays) between steps.

    `S` and `P` are the kernels' views of `arrays` and `params` (shared memory).
    """

    def __init__(self, cfg, bundle=None):
        self.cfg = cfg
        self.bundle = bundle if bundle is not None else load_bundle(cfg.model)
        self.params = build_params(cfg, self.bundle)
        self.P = pack_params(self.params)
        self.seed_seq = rng_mod.seed_sequence(cfg.seed)
        gens = rng_mod.streams(self.seed_seq)
        self.executor = make_executor(cfg.executor, cfg.executor_options)
        self.scheduler = make_scheduler(cfg.scheduler, cfg.scheduler_options)
        self.executor.reset(self.P, gens["executor"])
        self.scheduler.reset(self.P, gens["scheduler"])
        self.steps = int(cfg.steps)
        self.arrays = allocate(self.params, self.steps)
        self.arrays.key[0] = rng_mod.hash_key(self.seed_seq)
        self.arrays.rng[:] = rng_mod.stream_states(self.seed_seq)
        self.S = pack_state(self.arrays)
        online, age, next_change = stationary_availability(self.params, gens["init"])
        _init_state(self.S, self.P, online, age, next_change)
        self.t = 0

    def step(self) -> None:
        """Advance one step: factors 1-6, then the executor, then the scheduler."""
        self.advance()
        self.act_executor()
        self.act_scheduler()
        self.t += 1

    def advance(self) -> None:
        """Factors 1-6 of step `t` (the state update before the policies act)."""
        if _needs_growth(self.arrays, self.params):
            self.arrays = grow_if_needed(self.arrays, self.params)
            self.S = pack_state(self.arrays)
        dynamics_step(self.S, self.P, self.t)

    def act_executor(self) -> None:
        self.executor.act(self.S, self.P, self.t)

    def act_scheduler(self) -> None:
        self.scheduler.act(self.S, self.P, self.t)

    def run(self, progress: bool = True) -> RunRecord:
        t0 = time.perf_counter()
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=self.steps, unit="step", unit_scale=True, mininterval=0.5,
                       desc=f"{self.cfg.scheduler} N={self.params.n_users}")
        try:
            while self.t < self.steps:
                self.step()
                if bar is not None and self.t % 1000 == 0:
                    bar.update(self.t - bar.n)
            if bar is not None:
                bar.update(self.t - bar.n)
        finally:
            if bar is not None:
                bar.close()
        return self.record(wall_time_s=time.perf_counter() - t0)

    def record(self, wall_time_s: float = float("nan")) -> RunRecord:
        """The run's record up to the current step."""
        cfg, S, T = self.cfg, self.arrays, self.t
        n = int(S.n_lg[0])
        attrs = {
            "config": cfg.to_yaml(),
            "seed_entropy": str(self.seed_seq.entropy),
            "gmmv_version": __version__,
            "model_bundle": str(cfg.model),
            "model_provisional": bool(self.bundle.provisional),
            "steps": T,
            "users": self.params.n_users,
            "scheduler": cfg.scheduler,
            "executor": cfg.executor,
            "user_capacity": float(cfg.users.capacity),
            "server_capacity": float(cfg.server.capacity),
            "wall_time_s": wall_time_s,
        }
        return RunRecord(
            request_user=S.lg_user[:n].copy(),
            request_type=S.lg_type[:n].copy(),
            request_start=S.lg_start[:n].copy(),
            request_end=S.lg_end[:n].copy(),
            request_outcome=S.lg_out[:n].copy(),
            online_users=S.ser_online[:T].copy(),
            active_requests=S.ser_active[:T].copy(),
            server_allocation=S.ser_salloc[:T].copy(),
            server_consumption=S.ser_scons[:T].copy(),
            user_consumption=S.ser_ucons[:T].copy(),
            subtask_events=S.ser_ev[:T].copy(),
            request_type_names=tuple(t.name for t in self.bundle.task_types),
            attrs=attrs,
        )


def simulate(cfg, progress: bool = True) -> RunRecord:
    """Run one trajectory of `cfg` (a validated RunConfig) and return its record."""
    return Simulation(cfg).run(progress=progress)
