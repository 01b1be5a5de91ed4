"""``fixed``: the dedicated server keeps ``server.capacity`` x ``base_profile`` for the
whole run (paper 3.1 sweeps the capacity as a constant; docs/model.md D17)."""

from __future__ import annotations

from gmm_volunteer.policies.autoscalers.base import Autoscaler
from gmm_volunteer.policies.base import NoOptions


class FixedOptions(NoOptions):
    """No options: the capacity is the config's ``server.capacity``."""

    model_config = {**NoOptions.model_config, "frozen": True}


class Fixed(Autoscaler):
    name = "fixed"
    Options = FixedOptions
    scales = False

    def desired(self, obs, units: int, t: int) -> int:
        return units
