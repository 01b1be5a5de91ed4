"""The autoscaler base class and the control-plane options every scaling policy shares.

An autoscaler is one class in one file, like a scheduler (policies.base): a pydantic
``Options`` model and one method, ``desired(obs, units, t)``, returning the number of
capacity units it wants given the latest `monitor.Observation` the monitor lets it see.
It runs in Python between kernel calls, every ``period`` seconds (a decision every few
seconds costs microseconds; the kernels are untouched). Everything else, units, limits,
delays, the cooldown and the record of actions, is the control plane's
(`control.ControlPlane`), so a policy cannot skip a delay or exceed a limit.

The ``fixed`` autoscaler (`fixed.Fixed`) does not scale: the control plane then never
stops the fused runner and the server keeps ``server.capacity`` x ``base_profile``
(the behaviour before autoscalers existed, bit for bit).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from gmm_volunteer.model.errors import not_below
from gmm_volunteer.policies.base import OPTIONS_CONFIG, _KernelPolicy


class MonitorOptions(BaseModel):
    """What the autoscaler can observe, and how late (DESIGN.md section 7)."""

    model_config = OPTIONS_CONFIG
    # Seconds between two scrapes of the metrics (Prometheus' default is 15 s; LA-IMR,
    # seed 001, reacts to arrival-rate changes within seconds, so 5 s by default).
    period: int = Field(5, ge=1)
    # Seconds from a scrape to the moment an autoscaler can read it (scrape, store and
    # query latency of a monitoring stack).
    lag: int = Field(5, ge=0)
    # Seconds of finished requests the latency percentiles are computed over.
    window: int = Field(60, ge=1)


class AutoscalerOptions(BaseModel):
    """Control-plane options shared by the scaling autoscalers (docs/model.md D17).

    Capacity comes in units: one unit is ``unit`` x ``base_profile`` (a replica of that
    profile), so the server has units x unit x base_profile, between ``min_units`` and
    ``max_units``. ``initial_units`` defaults to the units nearest the scaled server's
    ``capacity``. ``server`` names the server it scales (the first by default).
    """

    model_config = OPTIONS_CONFIG
    # The dedicated server it scales, by name (docs/model.md D35); None, the first.
    server: str | None = None
    period: int = Field(15, ge=1)  # s between decisions (a horizontal pod autoscaler's sync period)
    unit: float = Field(1.0, gt=0, le=1e6)  # capacity multiplier of one unit (x base_profile)
    min_units: int = Field(1, ge=0, le=1_000_000)
    max_units: int = Field(64, ge=1, le=1_000_000)
    initial_units: int | None = Field(None, ge=0, le=1_000_000)
    provisioning_delay: int = Field(30, ge=0)  # s from a scale-out order to its capacity
    cooldown: int = Field(300, ge=0)  # s a lower recommendation must hold before scale-in
    monitor: MonitorOptions = Field(default_factory=MonitorOptions)

    # Field validators (not a model validator) so that an error names its key.
    _max_above_min = not_below("max_units", "min_units")

    @field_validator("initial_units")
    @classmethod
    def _initial_within(cls, v, info: ValidationInfo):
        lo, hi = info.data.get("min_units"), info.data.get("max_units")
        if v is not None and lo is not None and hi is not None and not lo <= v <= hi:
            raise ValueError(f"must be within [min_units, max_units] = [{lo}, {hi}], got {v}")
        return v


class Autoscaler(_KernelPolicy):
    """Base of the autoscalers. Subclasses set ``name`` and ``Options`` (derived from
    `AutoscalerOptions`, or any strict model for a policy that does not scale) and
    implement ``desired``. ``scales = False`` marks a policy that never changes the
    capacity (the control plane then stays out of the run entirely)."""

    _HOOKS: ClassVar[tuple[str, ...]] = ()
    scales: ClassVar[bool] = True
    # It decides on observations of the server it scales (`autoscaler_options.server`),
    # which the control plane takes from that server's own series (D35).
    several_servers: ClassVar[bool] = True

    def desired(self, obs, units: int, t: int) -> int:
        """Units wanted at step `t`, given the latest visible observation `obs` (None
        before the first one is visible) and the units ordered so far `units`
        (effective plus provisioning)."""
        raise NotImplementedError

    unit_cores: float = float("nan")

    def bind(self, control) -> None:
        """Called by the control plane before the run: ``unit_cores`` is the CPU of one
        unit in cores (unit x base_profile.cpu / 100)."""
        self.unit_cores = float(control.o.unit * control.base[2] / 100.0)

    def reset_state(self) -> None:
        """Forget what earlier runs taught the policy (EWMAs, ...); called by `reset`."""

    def reset(self, P, rng) -> None:
        super().reset(P, rng)
        self.reset_state()
