"""`queue_only` routing, a baseline of seed 002_25f372673c2a4e8f ("Experimentele Resultaten";
docs/routing.md): queue_aware with beta = 1 (the observed queue alone). Decisions log the hybrid estimator's predictions like
queue_aware's (policies.queue_aware), so every baseline measures the estimators too."""

from __future__ import annotations

from gmm_volunteer.policies.queue_aware import QUEUE_ONLY, QueueAwareOptions, TierRouter, tier_downloads, tier_place


class QueueOnly(TierRouter):
    """queue_aware with beta = 1 (the observed queue alone) (seed 002 baseline)."""

    name = "queue_only"
    Options = QueueAwareOptions
    mode = QUEUE_ONLY
    downloads = tier_downloads
    place = tier_place
