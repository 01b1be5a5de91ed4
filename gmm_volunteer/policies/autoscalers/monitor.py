"""What an autoscaler observes: metrics scraped every ``period`` seconds, readable
``lag`` seconds after the scrape (DESIGN.md section 7; issue 11 item 2).

A scrape at the start of step s covers the finished steps before s:

* ``arrivals`` and ``arrival_rate``: requests started in [s - period, s) (from the
  users' request counters, so a request counts when it starts, whether it later
  completes, is abandoned or dropped);
* ``latency``: quantiles ``QUANTILES`` of the latency of the requests that *completed*
  in [s - window, s) (``n_completed`` of them; NaN when none did), and ``abandoned``,
  how many ran out of patience in that window;
* ``utilization``: server consumption / server allocation per resource, averaged over
  [s - period, s) (docs/model.md D9: consumption is what was granted, so at most 1 for
  CPU and bandwidth; NaN for a resource with no allocation);
* ``server_work``: CPU-seconds of the executions that finished on the server in
  [s - period, s) (the ``completed_work`` series; the capacity rule's R is this over the
  arrivals);
* ``server_starts`` and ``starts``: subtasks placed on the server, and on any node, in
  [s - period, s) (the ``subtask_events`` series, the server being node class 0), so
  that an autoscaler can scale on the load routed to the server (issue 51, D41).

Everything is read from the state's request log and per-step series, which the
kernels write anyway, so observing costs the dynamics nothing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from gmm_volunteer.model.constants import EV_START
from gmm_volunteer.model.params import N_RES

QUANTILES = (0.5, 0.9, 0.95, 0.99)


@dataclass(frozen=True)
class Observation:
    time: int  # step of the scrape (covers the steps before it)
    visible_at: int  # first step an autoscaler can read it
    period: int
    arrivals: int
    arrival_rate: float  # requests / s
    latency: dict  # quantile -> s, completed requests in the window
    n_completed: int
    abandoned: int
    utilization: np.ndarray  # (N_RES,) consumption / allocation
    server_work: float  # CPU-s finished on the server in the period
    units: int  # units in effect at the scrape
    server_starts: int = 0  # subtasks placed on the server in the period
    starts: int = 0  # subtasks placed on any node in the period

    @property
    def routed_share(self) -> float:
        """The share of the period's placements that went to the server (1 when nothing
        was placed: the arrivals, if any, are then not yet routed anywhere)."""
        return self.server_starts / self.starts if self.starts > 0 else 1.0

    def latency_quantile(self, q: float) -> float:
        return float(self.latency[q])


class Monitor:
    """Scrapes the state every ``period`` steps and releases each scrape ``lag`` steps
    later (`visible`)."""

    def __init__(self, period: int, lag: int, window: int):
        self.period, self.lag, self.window = int(period), int(lag), int(window)
        self._pending: deque[Observation] = deque()
        self._latest: Observation | None = None
        self._recent: deque = deque()  # (end, latency, outcome) arrays of logged requests
        self._seen = 0  # request-log entries read so far
        self._arrived = 0  # requests started before the last scrape

    def start(self, arrays) -> None:
        self._arrived = int(arrays.rq_count.sum())

    def due(self, t: int) -> bool:
        return t > 0 and t % self.period == 0

    def scrape(self, arrays, t: int, units: int, server: int = 0) -> Observation:
        """The observation of step t: the requests of the window (all of them, wherever
        they ran) and the utilization and work of the scaled `server` (its own with
        several servers, D35)."""
        n = int(arrays.n_lg[0])
        if n > self._seen:
            sl = slice(self._seen, n)
            end = arrays.lg_end[sl].copy()
            # latency from the end time: the end step, or under latency: substep the time
            # inside it (docs/model.md D34)
            lat = arrays.lg_time[sl] - arrays.lg_start[sl]
            self._recent.append((end, lat, arrays.lg_out[sl].copy()))
            self._seen = n
        lo = t - self.window
        while self._recent and self._recent[0][0].max() < lo:
            self._recent.popleft()
        if self._recent:
            end = np.concatenate([r[0] for r in self._recent])
            lat = np.concatenate([r[1] for r in self._recent])
            out = np.concatenate([r[2] for r in self._recent])
            inside = (end >= lo) & (end < t)
            done = lat[inside & (out == 0)]
            abandoned = int(np.count_nonzero(inside & (out == 1)))
        else:
            done, abandoned = np.zeros(0), 0
        latency = ({q: float(v) for q, v in zip(QUANTILES, np.quantile(done, QUANTILES))}
                   if done.size else {q: float("nan") for q in QUANTILES})
        arrived = int(arrays.rq_count.sum())
        arrivals = arrived - self._arrived
        self._arrived = arrived
        a = max(0, t - self.period)
        several = getattr(arrays, "ser_svcons", np.zeros(0)).shape[0] > 0
        cons = (arrays.ser_svcons[a:t, server] if several else arrays.ser_scons[a:t]).astype(np.float64)
        alloc = (arrays.ser_svalloc[a:t, server] if several else arrays.ser_salloc[a:t]).astype(np.float64)
        work = arrays.ser_svwork[a:t, server] if several else arrays.ser_work[a:t, 0]
        ok = alloc > 0
        count = ok.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            total = np.where(ok, cons / np.where(ok, alloc, 1.0), 0.0).sum(axis=0)
            utilization = np.where(count > 0, total / count, np.nan) if cons.shape[0] else np.full(N_RES, np.nan)
        obs = Observation(
            time=t, visible_at=t + self.lag, period=t - a, arrivals=arrivals,
            arrival_rate=arrivals / max(1, t - a), latency=latency, n_completed=int(done.size),
            abandoned=abandoned, utilization=np.asarray(utilization, np.float64),
            server_work=float(work.astype(np.float64).sum()), units=units,
            server_starts=int(arrays.ser_ev[a:t, 0, EV_START].sum()), starts=int(arrays.ser_ev[a:t, :, EV_START].sum()),
        )
        self._pending.append(obs)
        return obs

    def visible(self, t: int) -> Observation | None:
        """The latest scrape readable at step t (None before the first)."""
        while self._pending and self._pending[0].visible_at <= t:
            self._latest = self._pending.popleft()
        return self._latest

    def next_event(self, t: int) -> int:
        """First step after t at which the monitor scrapes."""
        return (t // self.period + 1) * self.period

    # -- checkpoints (run.checkpoint) ---------------------------------------------------

    def checkpoint_state(self) -> dict:
        """The scrapes not yet visible, the latest visible one, the logged requests of
        the latency window and the counters, as plain data."""
        return {"pending": [_observation_state(o) for o in self._pending],
                "latest": None if self._latest is None else _observation_state(self._latest),
                "recent": [tuple(r) for r in self._recent], "seen": int(self._seen), "arrived": int(self._arrived)}

    def restore_checkpoint(self, state: dict) -> None:
        if not isinstance(state, dict) or set(state) != {"pending", "latest", "recent", "seen", "arrived"}:
            raise ValueError("monitor: not a monitor's state (pending, latest, recent, seen, arrived)")
        if not (isinstance(state["pending"], list) and isinstance(state["recent"], list)):
            raise ValueError("monitor: pending and recent must be lists")
        for key in ("seen", "arrived"):
            if type(state[key]) is not int or state[key] < 0:
                raise ValueError(f"monitor.{key}: {state[key]!r} is not a count")
        recent = []
        for r in state["recent"]:
            if not (isinstance(r, tuple) and len(r) == 3 and all(isinstance(a, np.ndarray) and a.ndim == 1
                                                                  and a.shape == r[0].shape for a in r)):
                raise ValueError("monitor.recent: not (end, latency, outcome) arrays of one length")
            recent.append(r)
        self._pending = deque(_observation(o) for o in state["pending"])
        self._latest = None if state["latest"] is None else _observation(state["latest"])
        self._recent = deque(recent)
        self._seen, self._arrived = state["seen"], state["arrived"]


_OBS_TYPES = {"time": int, "visible_at": int, "period": int, "arrivals": int, "arrival_rate": float,
              "n_completed": int, "abandoned": int, "server_work": float, "units": int,
             "server_starts": int, "starts": int}


def _observation_state(obs: Observation) -> dict:
    d = {k: kind(getattr(obs, k)) for k, kind in _OBS_TYPES.items()}
    d.update(latency=[(float(q), float(v)) for q, v in obs.latency.items()], utilization=obs.utilization)
    return d


def _observation(d) -> Observation:
    """The `Observation` `_observation_state` wrote; ValueError for anything else."""
    if not isinstance(d, dict) or set(d) != set(_OBS_TYPES) | {"latency", "utilization"}:
        raise ValueError("monitor: not an observation")
    for key, kind in _OBS_TYPES.items():
        if type(d[key]) is not kind:
            raise ValueError(f"monitor: observation {key} {d[key]!r} is not a {kind.__name__}")
    lat = d["latency"]
    if not (isinstance(lat, list) and all(isinstance(p, tuple) and len(p) == 2
                                          and all(type(x) is float for x in p) for p in lat)):
        raise ValueError("monitor: observation latency is not (quantile, seconds) pairs")
    util = d["utilization"]
    if not (isinstance(util, np.ndarray) and util.dtype == np.float64 and util.shape == (N_RES,)):
        raise ValueError(f"monitor: observation utilization is not {N_RES} float64 values")
    return Observation(**{k: d[k] for k in _OBS_TYPES}, latency=dict(lat), utilization=util)
