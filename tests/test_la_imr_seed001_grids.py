"""The shipped grids of seed 001's P99 claim (issue 51 item 3; docs/experiments.md 7.5):
the two systems of a seed share their bursts, the bursty grid has them and the steady one
none, and the router runs with the committed calibrated laws."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from gmm_volunteer.experiments.sweep import load_grid
from gmm_volunteer.model.bursts import draw_bursts
from gmm_volunteer.model.rng import seed_sequence

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "experiments"


def _runs(name):
    grid = load_grid(CONFIGS / name)
    out = {}
    for spec in grid.runs():
        out[(spec.coords["autoscaler"], spec.coords["users"], spec.coords["seed"])] = spec.config
    return out


def test_bursty_grid_shares_its_bursts_between_the_systems_and_has_some():
    runs = _runs("la_imr_bursts.yaml")
    seeds = sorted({s for *_, s in runs})
    levels = sorted({u for _, u, _ in runs})
    assert len(seeds) >= 5 and levels == [500, 1000, 2000]
    counts = []
    for u in levels:
        for s in seeds:
            a = runs[("reactive", u, s)]
            for other in ("capacity_rule", "la_imr"):
                b = runs[(other, u, s)]
                assert a.demand.bursts == b.demand.bursts and a.demand.bursts is not None
                assert a.steps == b.steps and a.users.count == b.users.count == u and a.seed == b.seed == s
            if u == levels[0]:
                counts.append(len(draw_bursts(a.demand.bursts, a.steps, seed_sequence(s))))
    # 6 bursts an hour over the run: a Poisson count of mean 6 per seed; over 10 seeds a
    # total below 30 has probability < 1e-5 (Poisson(60))
    assert sum(counts) >= 30


def test_steady_grid_is_the_bursty_one_without_bursts():
    steady, bursty = _runs("la_imr_steady.yaml"), _runs("la_imr_bursts.yaml")
    assert steady.keys() == bursty.keys()
    for key, cfg in steady.items():
        assert cfg.demand.bursts is None
        other = bursty[key]
        assert cfg.scheduler == other.scheduler and cfg.autoscaler == other.autoscaler
        assert cfg.scheduler_options == other.scheduler_options
        assert cfg.autoscaler_options == other.autoscaler_options


def test_la_imr_runs_the_committed_laws_and_scales_on_routed_load():
    fit = yaml.safe_load((CONFIGS / "la_imr_tier_latency.yaml").read_text())["tier_laws"]
    cfg = _runs("la_imr_bursts.yaml")[("la_imr", 1000, 0)]
    laws = cfg.scheduler_options["tier_laws"]
    assert len(laws) == len(fit)
    for got, want in zip(laws, fit):
        assert (got["subtask_type"], got["tier"]) == (want["subtask_type"], want["tier"])
        for k in ("alpha", "beta", "gamma"):
            assert got[k] == pytest.approx(want[k], rel=1e-5, abs=1e-9)
    assert cfg.autoscaler_options["load"] == "routed"
    assert np.isclose(cfg.scheduler_options["budget_s"], cfg.autoscaler_options["budget"])


def test_router_ablation_grid_has_the_bursty_grids_bursts_and_laws():
    grid = load_grid(CONFIGS / "la_imr_bursts_router.yaml")
    bursty = _runs("la_imr_bursts.yaml")
    for spec in grid.runs():
        cfg, u, s = spec.config, spec.coords["users"], spec.coords["seed"]
        ref = bursty[("la_imr", u, s)]
        assert cfg.demand.bursts == ref.demand.bursts and cfg.steps == ref.steps
        assert cfg.autoscaler == "la_imr" and cfg.autoscaler_options == ref.autoscaler_options
        if spec.coords["scheduler"] == "la_imr":
            assert cfg.scheduler_options == ref.scheduler_options
        else:
            assert cfg.scheduler == "centralized"
