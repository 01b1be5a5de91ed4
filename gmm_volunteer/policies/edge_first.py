"""`edge_first` routing, a baseline of seed 002_25f372673c2a4e8f ("Experimentele Resultaten";
docs/routing.md): the edge tier when a volunteer can take the subtask, else local, else cloud. Decisions log the hybrid estimator's predictions like
queue_aware's (policies.queue_aware), so every baseline measures the estimators too."""

from __future__ import annotations

from gmm_volunteer.policies.queue_aware import EDGE_FIRST, TierOptions, TierRouter, tier_downloads, tier_place


class EdgeFirst(TierRouter):
    """the edge tier when a volunteer can take the subtask, else local, else cloud (seed 002 baseline)."""

    name = "edge_first"
    Options = TierOptions
    mode = EDGE_FIRST
    downloads = tier_downloads
    place = tier_place
