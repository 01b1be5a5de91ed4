"""An event-driven reference of the closed network (docs/validation.md section 1), in
SimPy, written for the benchmark of the simulator against it (benchmarks/closed_network.py).

The system is the one of tests/test_queueing.py: N users, always online, each thinking
for an exponential time of mean Z and then sending one job of exponential work of mean
w CPU-seconds to a dedicated server of C cores; a job asks for d cores and the server
shares its cores by processor sharing (docs/model.md D10), so with n jobs present each
is served at min(d, C / n) cores. Nobody abandons, nobody goes offline.

Nothing is stepped: the only events are a user's think time ending and a job leaving.
The server keeps one virtual clock, the service every job present has received since
time 0 (it advances at min(d, C / n) per second while n jobs are present), and a heap of
the virtual times at which its jobs finish, so an arrival or a departure costs O(log n)
and the jobs present are never visited one by one. The next departure is one pending
SimPy timeout; an arrival replaces it (the superseded timeout fires and is ignored).

Two time bases:

- ``grid=False``: continuous time, the textbook network: think time T ~ Exp(Z); the
  means are exactly those of `theory.mva_delay_ld` with delay Z.
- ``grid=True``: the simulator's 1 s step, reproduced event by event (tests/test_queueing.py
  describes it): the think time is D = max(1, ceil(T)) whole steps; a request that starts
  in step s reaches the server at the start of step s + 1 (time s + 1); a job that leaves
  at time c, inside step floor(c), is finished at the end of that step with latency
  floor(c) - s, and its user thinks from step floor(c) + 1. Arrivals therefore happen at
  whole seconds, departures at any time, and the server's sharing is exact inside a step
  as the simulator's work-conserving share is (`consumption.cpu_share_time`). The
  simulator's recorded throughput and latency have the same law.

Random numbers come from Python's `random.Random(seed)`: the reference shares no stream
with the simulator, so the two agree in law, not draw by draw.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

import numpy as np
import simpy


class PSServer:
    """A processor-sharing station of `capacity` cores whose jobs each ask for at most
    `demand` cores: with n jobs present each is served at min(demand, capacity / n)
    cores (the load-dependent rate of `theory.ps_server_rate`)."""

    def __init__(self, env: simpy.Environment, capacity: float, demand: float):
        self.env = env
        self.capacity = float(capacity)
        self.demand = float(demand)
        self.vtime = 0.0  # CPU-seconds received by each job present, since time 0
        self.since = 0.0  # the time `vtime` is at
        self.jobs: list = []  # heap of (virtual finish time, arrival number, done event)
        self.arrivals = 0
        self.generation = 0  # of the pending departure timeout; older ones are stale

    def _speed(self) -> float:
        n = len(self.jobs)
        return min(self.demand, self.capacity / n) if n else 0.0

    def _catch_up(self) -> None:
        now = self.env.now
        if self.jobs:
            self.vtime += (now - self.since) * self._speed()
        self.since = now

    def serve(self, work: float) -> simpy.Event:
        """An event that succeeds when a job of `work` CPU-seconds arriving now leaves."""
        self._catch_up()
        done = self.env.event()
        heapq.heappush(self.jobs, (self.vtime + work, self.arrivals, done))
        self.arrivals += 1
        self._schedule()
        return done

    def _schedule(self) -> None:
        self.generation += 1
        if self.jobs:
            dt = max(0.0, (self.jobs[0][0] - self.vtime) / self._speed())
            timeout = self.env.timeout(dt, self.generation)
            timeout.callbacks.append(self._depart)

    def _depart(self, timeout: simpy.Event) -> None:
        if timeout.value != self.generation:  # an arrival rescheduled the departure
            return
        self._catch_up()
        finish, _, done = heapq.heappop(self.jobs)
        self.vtime = max(self.vtime, finish)  # no drift from rounding
        done.succeed()
        self._schedule()


@dataclass
class ReferenceRun:
    """What a reference run recorded: per finished job its end and its latency (seconds;
    with ``grid`` the step it ended in and its latency in steps, as the simulator's
    request log has them), and the number of jobs that reached the server."""

    end: np.ndarray
    latency: np.ndarray
    users: int
    horizon: float
    arrivals: int


def run_reference(users: int, horizon: float, *, think_mean: float = 100.0, mean_work: float = 10.0,
                  capacity: float = 2.0, demand: float = 1.0, grid: bool = True,
                  seed: int = 0) -> ReferenceRun:
    """Simulate the closed network for `horizon` seconds (every user starts thinking at
    time 0, as the simulator's users do at step 0); returns the finished jobs."""
    rng = random.Random(seed)
    env = simpy.Environment()
    server = PSServer(env, capacity, demand)
    ends: list[float] = []
    lats: list[float] = []
    rate_think, rate_work = 1.0 / think_mean, 1.0 / mean_work

    def user_grid():
        # at step 0 the user thinks D steps; its first request starts in step D
        wait = max(1, math.ceil(rng.expovariate(rate_think))) + 1
        while True:
            yield env.timeout(wait)
            arrival = env.now  # = s + 1, s the step the request started in
            yield server.serve(rng.expovariate(rate_work))
            step = math.floor(env.now)  # the step the job left in
            ends.append(step)
            lats.append(step - arrival + 1)
            # idle to the end of the step, then D steps of thinking, then the request's step
            wait = step + 2 + max(1, math.ceil(rng.expovariate(rate_think))) - env.now

    def user_continuous():
        while True:
            yield env.timeout(rng.expovariate(rate_think))
            arrival = env.now
            yield server.serve(rng.expovariate(rate_work))
            ends.append(env.now)
            lats.append(env.now - arrival)

    body = user_grid if grid else user_continuous
    for _ in range(users):
        env.process(body())
    env.run(until=horizon)
    return ReferenceRun(end=np.asarray(ends), latency=np.asarray(lats), users=users,
                        horizon=float(horizon), arrivals=server.arrivals)
