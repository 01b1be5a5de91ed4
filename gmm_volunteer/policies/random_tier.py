"""`random` routing, a baseline of seed 002_25f372673c2a4e8f ("Experimentele Resultaten";
docs/routing.md): a tier drawn uniformly among the available ones. Decisions log the hybrid estimator's predictions like
queue_aware's (policies.queue_aware), so every baseline measures the estimators too."""

from __future__ import annotations

from gmm_volunteer.model.constants import DECISION_FIELD_UNITS_LAW, DECISION_FIELDS_LAW
from gmm_volunteer.policies.queue_aware import RANDOM, TierOptions, TierRouter, tier_downloads, tier_place


class RandomTier(TierRouter):
    """a tier drawn uniformly among the available ones (seed 002 baseline)."""

    name = "random"
    Options = TierOptions
    mode = RANDOM
    # each decision's subtask type and tier rate too: the data seed 001's law per (subtask
    # type, tier) is fitted on (experiments.tier_latency_fit, docs/model.md D41)
    decision_fields, decision_field_units = DECISION_FIELDS_LAW, DECISION_FIELD_UNITS_LAW
    downloads = tier_downloads
    place = tier_place
