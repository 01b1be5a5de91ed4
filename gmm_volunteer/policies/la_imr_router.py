"""`la_imr` routing: the routing and offloading half of seed 001 (LA-IMR; docs/routing.md
section 6.3; issue 22). Per subtask, over the simulator's tiers in edge-to-cloud order
(own device, other volunteers, server), the first whose predicted latency (seed 001's
processing law, affine or eq. 5, plus the Erlang-C wait and the network term) is within
``budget_s``; if none is, the tier with the least prediction. Kernels in
policies.queue_aware (mode LA_IMR)."""

from __future__ import annotations

from gmm_volunteer.policies.queue_aware import LA_IMR, LaImrRouterOptions, TierRouter, tier_downloads, tier_place


class LaImrRouter(TierRouter):
    """Latency-budget routing with offloading upstream (seed 001's routing half)."""

    name = "la_imr"
    Options = LaImrRouterOptions
    mode = LA_IMR
    downloads = tier_downloads
    place = tier_place
