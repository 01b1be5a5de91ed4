"""`jsq` routing, a baseline of seed 002_25f372673c2a4e8f ("Experimentele Resultaten";
docs/routing.md): join the shortest queue: the eligible node (any tier) with the fewest subtasks. Decisions log the hybrid estimator's predictions like
queue_aware's (policies.queue_aware), so every baseline measures the estimators too."""

from __future__ import annotations

from gmm_volunteer.policies.queue_aware import JSQ, TierOptions, TierRouter, tier_downloads, tier_place


class Jsq(TierRouter):
    """join the shortest queue: the eligible node (any tier) with the fewest subtasks (seed 002 baseline)."""

    name = "jsq"
    Options = TierOptions
    mode = JSQ
    downloads = tier_downloads
    place = tier_place
