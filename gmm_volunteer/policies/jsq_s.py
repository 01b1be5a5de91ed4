"""`jsq_s` routing, a baseline of seed 002_25f372673c2a4e8f ("Experimentele Resultaten";
docs/routing.md section 4; issues 22, 34): join the shortest queue scaled by capacity:
the eligible node (any tier) with the least (subtasks + 1) / cores x the subtask's mean
work, plus the transfers to a volunteer, ties drawn uniformly (`queue_aware.jsq_delay`, scaled).
Decisions log the hybrid estimator's predictions like queue_aware's and this measure as
the router's own, so every baseline measures the estimators too."""

from __future__ import annotations

from gmm_volunteer.policies.queue_aware import JSQ_S, TierOptions, TierRouter, tier_downloads, tier_place


class JsqS(TierRouter):
    """Join the shortest queue scaled by capacity, the new subtask and the transfers counted
    (seed 002 baseline)."""

    name = "jsq_s"
    Options = TierOptions
    mode = JSQ_S
    downloads = tier_downloads
    place = tier_place
