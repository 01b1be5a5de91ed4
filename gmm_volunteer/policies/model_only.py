"""`model_only` routing, a baseline of seed 002_25f372673c2a4e8f ("Experimentele Resultaten";
docs/routing.md): queue_aware with beta = 0 (the Allen-Cunneen estimate alone). Decisions log the hybrid estimator's predictions like
queue_aware's (policies.queue_aware), so every baseline measures the estimators too."""

from __future__ import annotations

from gmm_volunteer.policies.queue_aware import MODEL_ONLY, QueueAwareOptions, TierRouter, tier_downloads, tier_place


class ModelOnly(TierRouter):
    """queue_aware with beta = 0 (the Allen-Cunneen estimate alone) (seed 002 baseline)."""

    name = "model_only"
    Options = QueueAwareOptions
    mode = MODEL_ONLY
    downloads = tier_downloads
    place = tier_place
