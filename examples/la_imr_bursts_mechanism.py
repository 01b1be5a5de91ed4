"""Where LA-IMR's P99 under bursts comes from (docs/experiments.md 7.5): per system and
arrival level, the server's mean CPU cores during and outside the bursts and the P99
latency of the requests started in them; for LA-IMR, the share of its decisions sent to
the server during and outside the bursts and, per subtask type, the share it sent to
each tier. The bursts are drawn again from each run's config (D22: their own stream).

    gmmv sweep --serial configs/experiments/la_imr_bursts.yaml
    python examples/la_imr_bursts_mechanism.py [results/la-imr-bursts]
"""

import sys

import numpy as np

from gmm_volunteer.experiments.sweep import load_grid
from gmm_volunteer.io.bundlefiles import load_bundle
from gmm_volunteer.io.results import open_result
from gmm_volunteer.model.bursts import draw_bursts
from gmm_volunteer.model.rng import seed_sequence
from gmm_volunteer.policies.routing import D_SUBTYPE, D_T, D_TIER, TIER_NAMES

results = sys.argv[1] if len(sys.argv) > 1 else "results/la-imr-bursts"
grid = load_grid("configs/experiments/la_imr_bursts.yaml", output=results)
specs = {(s.coords["autoscaler"], s.coords["users"], s.coords["seed"]): s for s in grid.runs()}
systems = sorted({a for a, _, _ in specs}, key=["reactive", "capacity_rule", "la_imr"].index)
levels, seeds = sorted({u for _, u, _ in specs}), sorted({s for *_, s in specs})
names = None
for users in levels:
    print(f"{users} users ({len(seeds)} seeds; means over seeds)")
    per_tier = np.zeros((0, len(TIER_NAMES)))
    for system in systems:
        rows = []
        for seed in seeds:
            spec = specs[(system, users, seed)]
            cfg = spec.config
            names = names or [t.name for t in load_bundle(cfg.model).subtask_types]
            burst = np.zeros(cfg.steps, bool)
            for start, duration, _ in draw_bursts(cfg.demand.bursts, cfg.steps, seed_sequence(seed)):
                burst[start:start + duration] = True
            ds = open_result(spec.path)
            cores = ds["dedicated_capacity"].sel(resource="cpu").values / 100.0
            start = ds["request_start"].values
            done = (ds["request_outcome"].values == 0) & np.isfinite(start)
            lat = ds["request_latency"].values.astype(np.float64)
            inside = burst[np.clip(np.where(done, start, 0).astype(int), 0, cfg.steps - 1)]
            row = [cores[burst].mean(), cores[~burst].mean(),
                   np.quantile(lat[done & inside], 0.99), np.quantile(lat[done & ~inside], 0.99)]
            if "decision" in ds:
                d = ds["decision"].values
                t = d[:, D_T].astype(int)
                row += [np.mean(d[burst[t], D_TIER] == 2), np.mean(d[~burst[t], D_TIER] == 2)]
                counts = np.array([[np.sum((d[:, D_SUBTYPE] == m) & (d[:, D_TIER] == k)) for k in range(len(TIER_NAMES))]
                                   for m in range(len(names))])
                per_tier = counts if per_tier.size == 0 else per_tier + counts
            rows.append(row)
        m = np.nanmean(np.array(rows), axis=0)
        line = (f"  {system:14s} cores in/out of bursts {m[0]:.2f} / {m[1]:.2f}; P99 of requests started "
                f"in/out of bursts {m[2]:.2f} / {m[3]:.2f} s")
        if len(m) > 4:
            line += f"; share to the server in/out of bursts {m[4]:.3f} / {m[5]:.3f}"
        print(line)
    if per_tier.size:
        print("  la_imr's decisions per subtask type, share to " + " / ".join(TIER_NAMES) + " (logged decisions):")
        for m, name in enumerate(names):
            share = per_tier[m] / max(per_tier[m].sum(), 1)
            print(f"    {name:14s} " + " / ".join(f"{x:.3f}" for x in share))
