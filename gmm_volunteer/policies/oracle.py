"""`oracle` routing, a baseline of seed 002_25f372673c2a4e8f ("Experimentele Resultaten";
docs/routing.md section 4; issues 22, 34): the tier whose delay, from the true remaining
work on its node (processor sharing, no later arrivals; the batch the subtask joins
there, `queue_aware.oracle_delay`), is least. Decisions log the hybrid estimator's
predictions like queue_aware's and this true delay as the router's own, checked against
the realized delays."""

from __future__ import annotations

from gmm_volunteer.policies.queue_aware import ORACLE, TierOptions, TierRouter, tier_downloads, tier_place


class Oracle(TierRouter):
    """The tier whose delay, from the true remaining work on its node (processor sharing, no later arrivals), is least (seed 002 baseline)."""

    name = "oracle"
    Options = TierOptions
    mode = ORACLE
    downloads = tier_downloads
    place = tier_place
