"""`oracle` routing, a baseline of seed 002_25f372673c2a4e8f ("Experimentele Resultaten";
docs/routing.md section 4; issue 22): the tier whose delay, from the true remaining work on its node (processor sharing, no later arrivals), is least. Decisions log the hybrid estimator's
predictions like queue_aware's (policies.queue_aware), so every baseline measures the
estimators too."""

from __future__ import annotations

from gmm_volunteer.policies.queue_aware import ORACLE, TierOptions, TierRouter, tier_downloads, tier_place


class Oracle(TierRouter):
    """The tier whose delay, from the true remaining work on its node (processor sharing, no later arrivals), is least (seed 002 baseline)."""

    name = "oracle"
    Options = TierOptions
    mode = ORACLE
    downloads = tier_downloads
    place = tier_place
