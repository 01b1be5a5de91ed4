"""`jsq` routing, a baseline of seed 002_25f372673c2a4e8f ("Experimentele Resultaten";
docs/routing.md section 4; issue 51): join the shortest queue: the eligible node (any
tier) with the least (subtasks + 1) x the subtask's mean work, plus the transfers to a
volunteer, ties drawn uniformly (`queue_aware.jsq_delay`, unscaled by the cores; JSQ-S
scales it). Decisions log the hybrid estimator's predictions like queue_aware's and this
measure as the router's own, so every baseline measures the estimators too."""

from __future__ import annotations

from gmm_volunteer.policies.queue_aware import JSQ, TierOptions, TierRouter, tier_downloads, tier_place


class Jsq(TierRouter):
    """Join the shortest queue, the new subtask and the transfers counted (seed 002 baseline)."""

    name = "jsq"
    Options = TierOptions
    mode = JSQ
    downloads = tier_downloads
    place = tier_place
