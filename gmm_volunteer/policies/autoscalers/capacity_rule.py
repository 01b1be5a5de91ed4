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

Caveat (docs/model.md D17): work of requests abandoned before their subtasks finished
is never counted, so R is underestimated while the server is overloaded.
"""

from __future__ import annotations

import math

from pydantic import Field

from gmm_volunteer.policies.autoscalers.base import Autoscaler, AutoscalerOptions


class CapacityRuleOptions(AutoscalerOptions):
    rho_target: float = Field(0.7, gt=0, le=1)
    ewma: float = Field(0.3, gt=0, le=1)  # weight of the newest arrival-rate scrape
    work_per_request: float | None = Field(None, gt=0)  # CPU-s; None = measured


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
    """Cumulative server CPU-seconds over cumulative arrivals, from the scrapes seen."""

    def __init__(self):
        self.work, self.arrivals, self._last = 0.0, 0, None

    def update(self, obs) -> float | None:
        if obs is not self._last:
            self._last = obs
            self.work += obs.server_work
            self.arrivals += obs.arrivals
        return self.work / self.arrivals if self.arrivals > 0 and self.work > 0 else None


class CapacityRule(Autoscaler):
    name = "capacity_rule"
    Options = CapacityRuleOptions

    def reset_state(self) -> None:
        self.lam = Ewma(self.options.ewma)
        self.work = WorkPerRequest()
        self._last = None

    def desired(self, obs, units: int, t: int) -> int:
        if obs is None:
            return units
        if obs is not self._last:  # one EWMA update per scrape, not per decision
            self._last = obs
            self.lam.update(obs.arrival_rate)
        measured = self.work.update(obs)
        r = self.options.work_per_request or measured
        if r is None:
            return units
        return capacity_rule_units(self.lam.value, r, self.options.rho_target,
                                   self.unit_cores)
