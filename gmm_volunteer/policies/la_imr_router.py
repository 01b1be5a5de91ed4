"""`la_imr` routing: the routing and offloading half of seed 001 (LA-IMR; docs/routing.md
section 6.3; issue 22). Per subtask, over the simulator's tiers in edge-to-cloud order
(own device, other volunteers, server), the first whose predicted latency (seed 001's
processing law, affine or eq. 5, plus the Erlang-C wait and the network term) is within
``budget_s``; if none is, the tier with the least prediction. Kernels in
policies.queue_aware (mode LA_IMR).

``tier_laws`` (issue 51; docs/model.md D41) calibrates the law per (subtask type, tier)
as seed 001 section III-C calibrates it per (model, tier): each entry's alpha, beta,
gamma predict that pair's whole subtask delay from the tier's arrival rate per server
(`experiments.tier_latency_fit` fits them); pairs without an entry keep the single law.
A tier is a set of nodes (the own device, the other volunteers, the server), so a law
names the tier, not a node."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from gmm_volunteer.model.constants import DECISION_FIELD_UNITS_LAW, DECISION_FIELDS_LAW
from gmm_volunteer.policies.base import OPTIONS_CONFIG
from gmm_volunteer.policies.queue_aware import (
    LA_IMR,
    N_TIERS,
    TIERS,
    LaImrRouterOptions,
    TierRouter,
    tier_downloads,
    tier_place,
)


class TierLaw(BaseModel):
    """alpha + beta (lambda / c)^gamma for one (subtask type, tier) (seed 001 eq. 8)."""

    model_config = OPTIONS_CONFIG
    subtask_type: int = Field(ge=0)  # index in the bundle's subtask_types
    tier: Literal["local", "edge", "cloud"]
    alpha: float = Field(ge=0)
    beta: float = Field(ge=0)
    gamma: float = Field(gt=0, le=10)


class CalibratedLaImrOptions(LaImrRouterOptions):
    model_config = OPTIONS_CONFIG
    # Laws per (subtask type, tier), e.g. the `tier_laws` of
    # configs/experiments/la_imr_tier_latency.yaml; none: the single law for every pair.
    tier_laws: list[TierLaw] = Field(default_factory=list)


class LaImrRouter(TierRouter):
    """Latency-budget routing with offloading upstream (seed 001's routing half)."""

    name = "la_imr"
    Options = CalibratedLaImrOptions
    mode = LA_IMR
    downloads = tier_downloads
    place = tier_place
    # each decision's subtask type and tier rate too, what its laws read (D41)
    decision_fields, decision_field_units = DECISION_FIELDS_LAW, DECISION_FIELD_UNITS_LAW

    def scratch_sizes(self, params):
        nf, ni = super().scratch_sizes(params)
        if not self.options.tier_laws:
            return nf, ni
        return nf + 3 * N_TIERS * int(params.n_types), ni  # (alpha, beta, gamma) per pair

    def check_params(self, params) -> None:
        """Refuse a law for a subtask type the bundle does not have (run preflight)."""
        for k, law in enumerate(self.options.tier_laws):
            if law.subtask_type >= int(params.n_types):
                raise ValueError(f"scheduler_options.tier_laws.{k}.subtask_type: {law.subtask_type} is not a "
                                 f"subtask type of the model (it has {int(params.n_types)}, 0-based)")

    def prepare(self, params, steps: int) -> None:
        super().prepare(params, steps)
        if not self.options.tier_laws:
            return
        self.check_params(params)
        base = len(self._R.af) - 3 * N_TIERS * int(params.n_types)
        self._R.af[base:] = np.nan  # no law: the single law
        for law in self.options.tier_laws:
            o = base + 3 * (law.subtask_type * N_TIERS + TIERS.index(law.tier))
            self._R.af[o:o + 3] = (law.alpha, law.beta, law.gamma)
