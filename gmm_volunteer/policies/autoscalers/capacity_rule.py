"""``capacity_rule``: the no-model ablation asked for by the critique of seed 001
(concrete test: desired = ceil(lambda x R / (rho_target x R_max))).

lambda is an EWMA of the observed arrival rate (weight ``ewma`` on each new scrape,
the same smoothing LA-IMR uses, so the two differ only in the latency model); R is
the mean server work per request in CPU-seconds, measured by the monitor as the
server CPU-seconds of finished executions over the requests that arrived, cumulated
since the start of the run (a slowly moving estimate, unless ``work_per_request``
fixes it); R_max is the CPU of one unit in cores (unit x base_profile.cpu / 100).
No latency target enters: the rule keeps the server's CPU utilization near
``rho_target``.

``load`` (issue 51, docs/model.md D41) says which arrivals lambda and R count: ``routed``
(default), the requests' worth of load routed to the server, the arrival rate times the
share of the period's subtask placements that went to the server (`Observation.routed_share`);
``all``, every request wherever its subtasks ran (before 0.11.0). With every subtask on
the server (the centralized scheduler) the share is exactly 1 and the two agree bit for bit.

Caveat (docs/model.md D17): work of requests abandoned before their subtasks finished
is never counted, so R is underestimated while the server is overloaded.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from gmm_volunteer.policies.autoscalers.base import Autoscaler, AutoscalerOptions


# Which arrivals an estimating autoscaler counts (module docstring; D41).
LoadCount = Literal["routed", "all"]


class CapacityRuleOptions(AutoscalerOptions):
    rho_target: float = Field(0.7, gt=0, le=1)
    ewma: float = Field(0.3, gt=0, le=1)  # weight of the newest arrival-rate scrape
    work_per_request: float | None = Field(None, gt=0)  # CPU-s; None = measured
    load: LoadCount = "routed"


def capacity_rule_units(lam: float, work: float, rho_target: float, unit_cores: float) -> int:
    """ceil(lam x R / (rho_target x R_max)): units that keep utilization at rho_target."""
    return int(math.ceil(lam * work / (rho_target * unit_cores) - 1e-9))


class Ewma:
    """x <- w x new + (1 - w) x x, started at the first value (seed 001 leaves the start
    unspecified, its minor comments note; starting at the first reading avoids a
    transient from an arbitrary zero)."""

    def __init__(self, weight: float):
        self.weight, self.value = float(weight), None

    def update(self, x: float) -> float:
        self.value = x if self.value is None else self.weight * x + (1.0 - self.weight) * self.value
        return self.value


class WorkPerRequest:
    """Cumulative server CPU-seconds over cumulative arrivals, from the scrapes seen
    (each counted once: `seen` is the step of the last scrape counted)."""

    def __init__(self, routed: bool = False):
        self.work, self.arrivals, self.seen, self.routed = 0.0, 0, None, routed

    def update(self, obs) -> float | None:
        if obs.time != self.seen:
            self.seen = obs.time
            self.work += obs.server_work
            # routed: the requests' worth routed to the server (module docstring)
            self.arrivals += obs.arrivals * obs.routed_share if self.routed else obs.arrivals
        return self.work / self.arrivals if self.arrivals > 0 and self.work > 0 else None


class EstimatingAutoscaler(Autoscaler):
    """An autoscaler that estimates the arrival rate (an `Ewma`, updated once per scrape)
    and the work per request (`WorkPerRequest`) from the scrapes it sees: capacity_rule
    and la_imr. A scrape is known by its step (`Observation.time`), so the estimates are
    plain numbers a checkpoint holds (docs/policies.md, "Checkpoints")."""

    @property
    def several_servers(self) -> bool:
        """`load: routed` counts the subtasks started on every server (the stores' server
        node class), not on the one this autoscaler scales, so it refuses several servers
        (docs/model.md D40, D41); `load: all` does not read where subtasks ran."""
        return self.options.load == "all"

    several_servers_reason = ("with `load: routed` counts the subtasks started on every server, not on "
                              "the one it scales; set autoscaler_options.load: all, or use one server")

    def reset_state(self) -> None:
        self.lam = Ewma(self.options.ewma)
        self.work = WorkPerRequest(self.options.load == "routed")
        self.seen = None  # step of the last scrape the EWMA took

    def estimates(self, obs) -> float | None:
        """Update the estimates with `obs` (once per scrape); the work per request:
        the option's, else the measured one (None while nothing is measured)."""
        if obs.time != self.seen:  # one EWMA update per scrape, not per decision
            self.seen = obs.time
            self.lam.update(obs.arrival_rate * (obs.routed_share if self.options.load == "routed" else 1.0))
        measured = self.work.update(obs)
        return self.options.work_per_request or measured

    def checkpoint_state(self) -> dict:
        return {"rate": self.lam.value, "seen": self.seen, "work": self.work.work,
                "arrivals": self.work.arrivals, "work_seen": self.work.seen}

    def restore_checkpoint(self, state: dict) -> None:
        def number(key, kinds, none=True):
            v = state.get(key)
            if not ((none and v is None) or type(v) in kinds):
                raise ValueError(f"{key}: {v!r} is not a {' or '.join(k.__name__ for k in kinds)}")
            return v

        if not isinstance(state, dict) or set(state) != {"rate", "seen", "work", "arrivals", "work_seen"}:
            raise ValueError("not the estimates of an estimating autoscaler (rate, seen, work, arrivals, work_seen)")
        self.lam.value = number("rate", (float,))
        self.seen = number("seen", (int,))
        self.work.work = number("work", (float,), none=False)
        self.work.arrivals = number("arrivals", (int, float), none=False)
        self.work.seen = number("work_seen", (int,))


class CapacityRule(EstimatingAutoscaler):
    name = "capacity_rule"
    Options = CapacityRuleOptions

    def desired(self, obs, units: int, t: int) -> int:
        if obs is None:
            return units
        r = self.estimates(obs)
        if r is None:
            return units
        return capacity_rule_units(self.lam.value, r, self.options.rho_target,
                                   self.unit_cores)
