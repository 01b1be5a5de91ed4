"""``reactive``: a horizontal pod autoscaler on one observed metric (issue 11 item 3;
the "latency-focused reactive" baseline of seed 001, section V-B, made concrete).

Every ``period`` seconds: desired = ceil(units_observed x observed / target), where
units_observed are the units in effect when the metric was scraped and the metric is
either a latency quantile of recently completed requests (``metric: latency``,
``percentile``) or the server's utilization of one resource (``metric: utilization``,
``resource``). Like Kubernetes' HPA, nothing changes while observed / target is within
``tolerance`` of 1, and nothing changes without a reading (no completed request in the
monitor's window). Scale-in is held back by the control plane's cooldown.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from gmm_volunteer.policies.autoscalers.base import Autoscaler, AutoscalerOptions
from gmm_volunteer.policies.autoscalers.monitor import QUANTILES
from gmm_volunteer.model.constants import RESOURCES


class ReactiveOptions(AutoscalerOptions):
    metric: Literal["latency", "utilization"] = "latency"
    percentile: float = 0.95  # which latency quantile (one the monitor computes)
    resource: Literal[RESOURCES] = "cpu"
    target: float = Field(20.0, gt=0)  # s for latency, a fraction for utilization
    tolerance: float = Field(0.1, ge=0)  # HPA's default

    @field_validator("percentile")
    @classmethod
    def _known_quantile(cls, v: float) -> float:
        if not any(abs(v - q) < 1e-12 for q in QUANTILES):
            raise ValueError(f"must be a quantile the monitor computes: {', '.join(map(str, QUANTILES))}")
        return v


def hpa_desired(units: int, observed: float, target: float, tolerance: float) -> int:
    """ceil(units x observed / target), or `units` when the ratio is within tolerance of 1."""
    ratio = observed / target
    if abs(ratio - 1.0) <= tolerance:
        return units
    return int(math.ceil(units * ratio - 1e-9))  # 1e-9: 3 x 0.7 / 0.7 is 3, not 4


class Reactive(Autoscaler):
    name = "reactive"
    Options = ReactiveOptions

    def observed(self, obs) -> float:
        o = self.options
        if o.metric == "latency":
            return obs.latency_quantile(o.percentile)
        return float(obs.utilization[RESOURCES.index(o.resource)])

    def desired(self, obs, units: int, t: int) -> int:
        if obs is None:
            return units
        value = self.observed(obs)
        if not math.isfinite(value):
            return units
        return hpa_desired(max(obs.units, 1), value, self.options.target, self.options.tolerance)
