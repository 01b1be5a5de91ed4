"""The simulation loop: s_t ~ P(. | s_{t-1}) for t = 0..steps-1 (paper 2, 3.1).

Inside a step the factors run in the order of their dependencies (DESIGN.md section 3):
availability, requests, allocations, (offline resets happen with availability),
consumption, completions; then the executor and the scheduler act. The dynamics are one
numba call per step (`kernels.step`); policies are Python objects whose `act` runs their
jitted hooks (policies.base). `run()` uses the fused runner (`policies.runner`), which
runs chunks of steps in one call instead, with the same result, for every policy pair.
"""

from __future__ import annotations

import math
import time

import numpy as np

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer._version import __version__
from gmm_volunteer.model import rng as rng_mod
from gmm_volunteer.model.rng import KEY_CLASS, keyed_uniform
from gmm_volunteer.io.bundlefiles import load_bundle
from gmm_volunteer.model.bundle import bundle_digest
from gmm_volunteer.model.demand import demand_arrays
from gmm_volunteer.model.events import Script, check_events
from gmm_volunteer.model.initial_data import fill_initial_data
from gmm_volunteer.model.kernels.allocation import allocation_restart
from gmm_volunteer.model.kernels.heap import heap_push
from gmm_volunteer.model.kernels.ops import list_add
from gmm_volunteer.model.kernels.people import start_think, user_number
from gmm_volunteer.model.kernels.step import dynamics_step, needs_growth
from gmm_volunteer.model.params import READY, Params, build_params, mean_duration, pack_params
from gmm_volunteer.model.laws import MAX_DURATION, length_biased
from gmm_volunteer.policies import make_autoscaler, make_executor, make_scheduler
from gmm_volunteer.policies.autoscalers.control import ControlPlane, autoscaler_generator
from gmm_volunteer.policies.base import several_servers_refusal
from gmm_volunteer.policies.runner import fused_runner
from gmm_volunteer.io.runrecord import RunRecord
from gmm_volunteer.model.variants import served_series
from gmm_volunteer.run.class_series import class_series, user_events
from gmm_volunteer.run.server_series import server_series
from gmm_volunteer.model.state import allocate, grow_if_needed, pack_state
from gmm_volunteer.policies.guard import guard


@kernel
def assign_classes(S, P):
    """Each user's device class (docs/model.md D36): a draw keyed by (seed, user) from the
    classes' shares, so that a user has the same class whatever the policies, the
    capacities, the number of users or of servers (common random numbers, D5; the key
    is the user's number, D35). The servers are node class 0; with one class nothing is
    drawn."""
    for v in range(P.n_srv, P.n_nodes):
        c = 0
        if P.n_classes > 1:
            u = keyed_uniform(S.key[0], KEY_CLASS, user_number(P, v), 0, 0)
            while c < P.n_classes - 1 and u > P.cl_cum[c]:
                c += 1
        S.node_class[v] = c + 1


def _online_share(on_law: np.ndarray, off_law: np.ndarray) -> float:
    """P(online) of the stationary alternating renewal process (see below)."""
    m_on, m_off = mean_duration(on_law), mean_duration(off_law)
    if math.isinf(m_on) and math.isinf(m_off):
        raise ValueError("online and offline durations both never end: no stationary state")
    return 1.0 if math.isinf(m_on) else m_on / (m_on + m_off)  # 0.0 when m_off is infinite


def stationary_availability(P: Params, g: np.random.Generator, node_class: np.ndarray | None = None):
    """Initial (online, age, steps until the next change) of every user, drawn from the
    alternating renewal process's stationary law (paper 2.2; docs/model.md).

    P(online) = E[T_on] / (E[T_on] + E[T_off]); the current period is length-biased and
    the user is at a uniform point in it.

    When one state never ends (`never`, infinite mean) P(online) is 1 or 0: every user
    is in that state, at age 0, and its switch is at `laws.MAX_DURATION`, i.e. never
    (docs/model.md, D2). Both never ending has no stationary law (the config refuses it).
    Each user follows the laws of its class (`node_class`, per node; D36): the laws are
    rows per node class, row 0 the server's and unread (`Params`), or one law for all.
    With one class the draws are those made before classes existed.
    """
    n = P.n_users
    on_laws, off_laws = np.atleast_2d(P.on_law), np.atleast_2d(P.off_law)
    first = 0 if on_laws.shape[0] == 1 else 1
    cls = np.full(n, first) if node_class is None else np.asarray(node_class[-n:]) if n else np.zeros(0, np.int64)
    used = range(first, on_laws.shape[0])
    p_on = np.zeros(on_laws.shape[0])
    for c in used:
        p_on[c] = _online_share(on_laws[c], off_laws[c])
    online = g.random(n) < p_on[cls]
    total = np.zeros(n)
    for c in used:
        drawn = np.where(online, length_biased(on_laws[c], n, g), length_biased(off_laws[c], n, g))
        total = drawn if len(used) == 1 else np.where(cls == c, drawn, total)
    # A never-ending period has no uniform point: its age is taken as 0 (the age is
    # recorded, never read by the dynamics). Finite periods keep the draws they had.
    ends = np.isfinite(total)
    age = g.random(n) * np.where(ends, total, 0.0)
    residual = np.where(ends, total - age, np.inf)
    next_change = np.minimum(np.maximum(np.ceil(residual) - 1, 0), MAX_DURATION).astype(np.int64)
    return online, np.floor(age).astype(np.int64), next_change


@kernel
def _init_state(S, P, online, age, next_change):
    """The servers online with every subtask's data (paper 2.2: the server holds it a
    priori; each server, D35), and the users as drawn (node S + k is the k-th)."""
    for s in range(P.n_srv):
        S.online[s] = 1
        S.cl_on[0] += 1
        for j in range(P.n_sub):
            S.rd_state[s, j] = READY
            S.rd_mb[s, j] = P.sub_data_mb[j]
            S.rd_used[s] += P.sub_data_mb[j]
            S.rd_reserved[s] += P.sub_data_mb[j]
        S.rd_nready[s] = P.n_sub
        allocation_restart(S, P, s, 0)
    for k in range(online.size):
        i = k + P.n_srv
        S.av_since[i] = -1 - age[k]
        if next_change[k] < MAX_DURATION:  # a state that never ends gets no timer
            heap_push(S.ah_t, S.ah_v, S.ah_t, S.ah_n, next_change[k], i, next_change[k])
        if online[k]:
            S.online[i] = 1
            S.cl_on[S.node_class[i]] += 1
            list_add(S.on_list, S.on_pos, S.n_on, i)
            allocation_restart(S, P, i, 0)
            start_think(S, P, i, 0)


def _frozen(a: np.ndarray) -> np.ndarray:
    """A read-only view of `a`."""
    v = a.view()
    v.flags.writeable = False
    return v


CHUNK = 1000  # steps per fused-runner call: progress updates and Ctrl-C come between chunks


class Simulation:
    """One trajectory, stepped from Python: `run()` it, or `step()` it and look at
    `arrays` (the state as a namedtuple of NumPy arrays) between steps.

    `S` and `P` are the kernels' views of `arrays` and `params` (shared memory).
    """

    def __init__(self, cfg, bundle=None):
        self.seed_seq = rng_mod.seed_sequence(cfg.seed)  # before the model: it draws distances (D35)
        self._build_model(cfg, bundle if bundle is not None else load_bundle(cfg.model))
        gens = rng_mod.streams(self.seed_seq)
        self._build_policies(gens["executor"], gens["scheduler"], autoscaler_generator(self.seed_seq))
        self.arrays = allocate(self.params, self.steps)
        self.arrays.key[0] = rng_mod.hash_key(self.seed_seq)
        self.arrays.rng[:] = rng_mod.stream_states(self.seed_seq)
        dm_cum, dm_on = demand_arrays(cfg.demand, self.steps, self.seed_seq)  # D18, D22; inactive by default
        self.arrays = self.arrays._replace(dm_cum=dm_cum, dm_on=dm_on)
        self.S = pack_state(self.arrays)
        self.control.start(self.arrays)
        assign_classes(self.S, self.P)  # D36
        online, age, next_change = stationary_availability(self.params, gens["init"], self.arrays.node_class)
        _init_state(self.S, self.P, online, age, next_change)
        fill_initial_data(self.S, self.P, self.params, cfg)  # D2
        self.t = 0
        self._grown_at = -1
        self.wall_time_s = 0.0  # of the run so far (a resumed run's earlier parts included)

    def _build_model(self, cfg, bundle) -> None:
        """What the run's config and bundle determine and a run never changes: the
        attributes a checkpoint does not hold (run.checkpoint_state.DERIVED, with `S`)."""
        self.cfg = cfg
        self.bundle = bundle
        # the users' round-trip times are drawn from the run's seed (D35): `seed_seq` is set
        self.params = build_params(cfg, bundle, key=rng_mod.hash_key(self.seed_seq))
        self.P = pack_params(self.params)
        self.steps = int(cfg.steps)

    def _build_policies(self, executor_rng, scheduler_rng, autoscaler_rng) -> None:
        """The policies as the config makes them, reset with these Generators and
        prepared for the run, the control plane and the scripted events: what a run
        starts with, and what a checkpoint's state is restored into (run.checkpoint)."""
        cfg = self.cfg
        with guard([("executor", cfg.executor)], "__init__ or reset"):
            self.executor = make_executor(cfg.executor, cfg.executor_options)
            self.executor.reset(self.P, executor_rng)
        with guard([("scheduler", cfg.scheduler)], "__init__ or reset"):
            self.scheduler = make_scheduler(cfg.scheduler, cfg.scheduler_options)
            self.scheduler.reset(self.P, scheduler_rng)
        # The autoscaler acts through the control plane between kernel calls (D17).
        with guard([("autoscaler", cfg.autoscaler)], "__init__ or reset"):
            self.autoscaler = make_autoscaler(cfg.autoscaler, cfg.autoscaler_options)
            self.autoscaler.reset(self.P, autoscaler_rng)
        for kind in ("executor", "scheduler", "autoscaler"):  # `gmmv run` says so before (preflight)
            names = cfg.server_names() if hasattr(cfg, "server_names") else []
            refusal = several_servers_refusal(kind, getattr(cfg, kind), getattr(self, kind), names)
            if refusal:
                raise ValueError(refusal)
        self.control = ControlPlane(self.autoscaler, cfg, self.params)
        check_events(cfg.events, self.params.n_users)  # configs check this at load already
        self.script = Script(cfg.events, self.params.n_users, self.params.n_srv)  # scripted events (D25)
        for kind, policy in (("executor", self.executor), ("scheduler", self.scheduler)):
            if hasattr(policy, "prepare"):  # policies that keep arrays (routers)
                with guard([(kind, getattr(cfg, kind))], "prepare"):
                    policy.prepare(self.params, self.steps)

    def step(self) -> None:
        """Advance one step: the control plane's due actions, factors 1-6, then the
        executor, then the scheduler."""
        self.act_control()
        self.act_events()
        self.advance()
        self.act_executor()
        self.act_scheduler()
        self.t += 1

    def advance(self) -> None:
        """Factors 1-6 of step `t` (the state update before the policies act)."""
        if needs_growth(self.S, self.P, self.t):
            self._grow()
        dynamics_step(self.S, self.P, self.t)

    def _grow(self) -> None:
        self.arrays = grow_if_needed(self.arrays, self.params, self.t)
        self.S = pack_state(self.arrays)

    def act_control(self) -> None:
        """What the autoscaler's control plane has due at the start of step `t` (D17)."""
        if self.t >= self.control.next_event:
            with guard([("autoscaler", self.cfg.autoscaler)], "desired"):
                self.control.act(self.arrays, self.t)

    def act_events(self) -> None:
        """The scripted events due at the start of step `t` (D25)."""
        if self.t >= self.script.next_event:
            self.script.act(self.S, self.P, self.t)

    def _chunk_end(self, stop: int) -> int:
        """Where the next fused chunk must stop: the control plane or the script acts."""
        return int(min(stop, self.t + CHUNK, self.control.next_event, self.script.next_event))

    def act_executor(self) -> None:
        with guard([("executor", self.cfg.executor)], "a hook (act_kernel)"):
            self.executor.act(self.S, self.P, self.t)

    def act_scheduler(self) -> None:
        with guard([("scheduler", self.cfg.scheduler)], "a hook (downloads or place)"):
            self.scheduler.act(self.S, self.P, self.t)

    def run(self, progress: bool = True, fused: bool = True, until: int | None = None,
            checkpoint=None) -> RunRecord:
        """Run to the last step (or to step `until`) and return the record so far.

        With `fused` (the default), policies built on `policies.base` advance CHUNK
        steps per kernel call (`policies.runner`); other policies, or `fused=False`,
        go through `step()` every step. Both give the same trajectory. A `checkpoint`
        (`run.checkpoint.Checkpointer`) saves the whole run whenever a checkpoint is
        due; the trajectory is the same with or without."""
        t0 = time.perf_counter()
        wall0 = self.wall_time_s
        stop = self.steps if until is None else min(int(until), self.steps)
        runner = fused_runner(self.scheduler, self.executor) if fused else None
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=self.steps, initial=self.t, unit="step", unit_scale=True, mininterval=0.5,
                       desc=f"{self.cfg.scheduler} N={self.params.n_users}")
        try:
            if checkpoint is None:
                self._advance_to(stop, runner, bar)
            while checkpoint is not None and self.t < stop:
                self._advance_to(min(stop, checkpoint.next_step(self.t)), runner, bar)
                if checkpoint.due(self):
                    self.wall_time_s = wall0 + time.perf_counter() - t0
                    checkpoint.save(self)
            if bar is not None:
                bar.update(self.t - bar.n)
        finally:
            if bar is not None:
                bar.close()
        self.wall_time_s = wall0 + time.perf_counter() - t0
        return self.record(wall_time_s=self.wall_time_s)

    def run_to(self, stop: int) -> None:
        """Advance to step `stop` on the fused path, like `run`, but without building a
        record: for callers that act between short stretches of steps (the Gymnasium
        environment, gmm_volunteer.optimisation.env). The policies' current options
        are read here, so options changed since the last call take effect now."""
        self._advance_to(min(int(stop), self.steps), fused_runner(self.scheduler, self.executor))

    def _advance_to(self, stop: int, runner, bar=None) -> None:
        """Steps t..stop-1: through `step()` without a fused runner, else in chunks that
        end where the control plane or the script must act."""
        while self.t < stop:
            if runner is None:
                self.step()
            else:
                self.act_control()
                self.act_events()
                self._run_chunk(runner, self._chunk_end(stop))
            if bar is not None and (runner is not None or self.t % 1000 == 0):
                bar.update(self.t - bar.n)

    def _run_chunk(self, runner, end: int) -> None:
        """Steps t..end-1 through the fused runner, growing pools where it stops."""
        while self.t < end:
            with guard([("executor", self.cfg.executor), ("scheduler", self.cfg.scheduler)],
                       "a hook (act_kernel, downloads or place)"):
                t = runner(self.S, self.P, self.t, end)
            if t < end:  # the pools must grow before step t
                if t == self._grown_at:  # grown here already, and the runner stopped again
                    raise RuntimeError(f"step {t}: growing the state's pools did not make room")
                self._grown_at = t
                self.t = t  # the bounds are those of step t (timers due by then)
                self._grow()
            self.t = t

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
            "model_sha256": bundle_digest(self.bundle),
            "steps": T,
            "users": self.params.n_users,
            "scheduler": cfg.scheduler,
            "executor": cfg.executor,
            "user_capacity": float(cfg.users.capacity),
            "server_capacity": float(cfg.server.capacity),
            "autoscaler": cfg.autoscaler,
            "wall_time_s": wall_time_s,
        }
        # Views, not copies: the log and the series are append-only (a later step writes
        # past n and T, a growing pool copies into new arrays), so the record stays as it
        # is while the run goes on, and a million users' log is not held twice. Read-only,
        # so that no reader of the record can write into the run's state.
        return RunRecord(
            # users by number, 1..N (the log holds nodes: user i is node S - 1 + i, D35)
            request_user=_frozen(S.lg_user[:n] if self.params.n_srv == 1
                                 else (S.lg_user[:n] - (self.params.n_srv - 1)).astype(S.lg_user.dtype)),
            request_type=_frozen(S.lg_type[:n]),
            request_start=_frozen(S.lg_start[:n]),
            # when each ended: the last active step, or under latency: substep the time (D34)
            request_end=_frozen(S.lg_time[:n] if self.params.substep else S.lg_end[:n]),
            request_outcome=_frozen(S.lg_out[:n]),
            online_users=_frozen(S.ser_online[:T]),
            active_requests=_frozen(S.ser_active[:T]),
            server_allocation=_frozen(S.ser_salloc[:T]),
            server_consumption=_frozen(S.ser_scons[:T]),
            user_consumption=_frozen(S.ser_ucons[:T]),
            subtask_events=_frozen(user_events(S.ser_ev[:T])),
            completed_work=_frozen(S.ser_work[:T]),
            request_type_names=tuple(t.name for t in self.bundle.task_types),
            attrs=attrs,
            dedicated_capacity=self.control.capacity_series(T),
            scaling_actions=self.control.action_table(),
            scaling_action_cost=self.control.action_costs(T),
            **self._policy_series(T),
        )

    def _policy_series(self, T: int) -> dict:
        series, coords = served_series(self.params, self.arrays, int(self.arrays.n_lg[0]),
                                       [s.name for s in self.bundle.subtask_types],
                                       [s.accuracy for s in self.bundle.subtask_types])
        # per user class and energy (D36, D37)
        capacity = self.control.capacity_series(T)
        cs, cc = class_series(self.cfg, self.params, self.arrays, T, int(self.arrays.n_lg[0]),
                              capacity, self.control.server)
        series.update(cs)
        coords.update(cc)
        ss, sc = server_series(self.cfg, self.params, self.arrays, T, self.control.server,
                               capacity if self.control.scales else None)  # several servers (D35)
        series.update(ss)
        coords.update(sc)
        if self.params.paper_progress:  # what the paper's accounting asks of the server (D27)
            series["server_cpu_demand"] = (("time",), self.arrays.ser_demand[:T, 0].copy(), {
                "long_name": "server CPU demand before the proportional share (progress: paper)",
                "units": "percent"})
            series["server_batches"] = (("time",), self.arrays.ser_demand[:T, 1].astype(np.int32), {
                "long_name": "batches active on the server in the step (progress: paper)",
                "units": "1"})
        for policy in (self.executor, self.scheduler):
            if hasattr(policy, "record_series"):
                s, c = policy.record_series(T)
                series.update(s)
                coords.update(c)
        return {"policy_series": series, "policy_coords": coords}


def simulate(cfg, progress: bool = True, bundle=None) -> RunRecord:
    """Run one trajectory of `cfg` (a validated RunConfig) and return its record;
    `bundle`: its model bundle when already loaded (`preflight.check_start` returns it)."""
    return Simulation(cfg, bundle).run(progress=progress)
