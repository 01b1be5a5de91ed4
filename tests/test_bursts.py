"""Random bursts of demand (issue 11 item 1; docs/model.md D22): the bounded-Pareto law,
the Poisson count, the bursts' own stream (common random numbers), validation, and a
run with drawn bursts equal to the same run with those bursts scripted."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gmm_volunteer.model.bursts import BoundedPareto, Bursts, draw_bursts
from gmm_volunteer.run.config import ConfigError, config_from_dict
from gmm_volunteer.model.demand import Demand
from gmm_volunteer.run.engine import Simulation, simulate
from gmm_volunteer.model.rng import seed_sequence

LAW = BoundedPareto(alpha=1.2, low=60.0, high=1800.0)
Z = 4.5  # standard errors: the repository's tolerance for statistical checks


def test_bounded_pareto_quantile_is_the_inverse_cdf():
    x = LAW.quantile(np.array([0.0, 0.5, 1.0 - 1e-15]))
    assert x[0] == pytest.approx(60.0) and x[2] == pytest.approx(1800.0, rel=1e-9)
    cdf = lambda v: (LAW.low ** -LAW.alpha - v ** -LAW.alpha) / (LAW.low ** -LAW.alpha - LAW.high ** -LAW.alpha)
    assert cdf(x[1]) == pytest.approx(0.5)


def test_bounded_pareto_draws_have_the_law_and_its_mean():
    n = 40_000
    x = LAW.quantile(np.random.default_rng(0).random(n))
    assert x.min() >= LAW.low and x.max() <= LAW.high
    # mean: within Z standard errors of the closed form (se = sample sd / sqrt(n))
    assert abs(x.mean() - LAW.mean()) <= Z * x.std() / math.sqrt(n)
    # P(X <= 300): within Z binomial standard errors
    p = (LAW.low ** -LAW.alpha - 300.0 ** -LAW.alpha) / (LAW.low ** -LAW.alpha - LAW.high ** -LAW.alpha)
    assert abs(np.mean(x <= 300.0) - p) <= Z * math.sqrt(p * (1 - p) / n)


def test_burst_count_is_poisson_with_the_rate_and_draws_are_keyed_by_seed():
    b = Bursts(rate=2.0, factor={"alpha": 1.5, "low": 1.5, "high": 4.0}, duration=LAW)
    steps, seeds = 7200, 400
    counts = np.array([len(draw_bursts(b, steps, seed_sequence(s))) for s in range(seeds)])
    mean = 2.0 * steps / 3600.0  # Poisson: variance = mean
    assert abs(counts.mean() - mean) <= Z * math.sqrt(mean / seeds)
    one = draw_bursts(b, steps, seed_sequence(7))
    assert one == draw_bursts(b, steps, seed_sequence(7))  # same seed, same bursts
    assert one != draw_bursts(b, steps, seed_sequence(8))
    assert all(0 <= s < steps and 1 <= d <= 1800 and 1.5 <= f <= 4.0 for s, d, f in one)
    assert [s for s, _, _ in one] == sorted(s for s, _, _ in one)


def test_bad_bursts_config_names_the_key(synthetic_model):
    base = {"steps": 10, "users": {"count": 5}, "server": {"capacity": 1}, "model": str(synthetic_model)}
    law = {"alpha": 1.2, "low": 60, "high": 1800}
    for bursts, needle in [({"rate": 0, "factor": law, "duration": law}, "demand.bursts.rate"),
                           ({"rate": 1, "factor": {**law, "high": 10}, "duration": law},
                            "demand.bursts.factor.high: .*must be > low"),
                           ({"rate": 1, "factor": law}, "demand.bursts.duration"),
                           ({"rate": 1, "factor": law, "duration": {**law, "alpha": -1}},
                            "demand.bursts.duration.alpha"),
                           ({"rate": 1, "factor": law, "duration": law, "sizes": 2}, "demand.bursts.sizes")]:
        with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace(r"\.*", ".*")):
            config_from_dict({**base, "demand": {"bursts": bursts}})


def _cfg(model, demand, **kw):
    data = {"steps": 900, "seed": 11, "model": str(model), "users": {"count": 60},
            "server": {"capacity": 4.0}, "scheduler": "uniform",
            "requests": {"think_time": {"dist": "exponential", "mean": 20.0}}, "demand": demand}
    data.update(kw)
    return config_from_dict(data)


BURSTS = {"rate": 12.0, "factor": {"alpha": 1.5, "low": 2.0, "high": 5.0},
          "duration": {"alpha": 1.2, "low": 30, "high": 200}}


def test_drawn_bursts_equal_the_same_bursts_scripted(synthetic_model):
    """The bursts' stream is their own: a run with drawn bursts is, array for array, the
    run with those bursts given as scripted surges."""
    cfg = _cfg(synthetic_model, {"bursts": BURSTS})
    drawn = draw_bursts(cfg.demand.bursts, cfg.steps, seed_sequence(cfg.seed))
    assert len(drawn) >= 1
    scripted = _cfg(synthetic_model, {"surges": [{"start": s, "duration": d, "factor": f} for s, d, f in drawn]})
    a, b = simulate(cfg, progress=False), simulate(scripted, progress=False)
    for name in ("request_start", "request_end", "request_type", "request_outcome", "online_users",
                 "server_consumption", "user_consumption"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_runs_differing_in_autoscaler_or_scheduler_share_the_bursts(synthetic_model):
    base = Simulation(_cfg(synthetic_model, {"bursts": BURSTS}))
    for kw in ({"scheduler": "centralized"},
               {"autoscaler": "capacity_rule", "autoscaler_options": {"max_units": 8}}):
        other = Simulation(_cfg(synthetic_model, {"bursts": BURSTS}, **kw))
        np.testing.assert_array_equal(base.arrays.dm_cum, other.arrays.dm_cum)
    m = Demand(bursts=BURSTS).multiplier(900, seed_sequence(11))
    np.testing.assert_allclose(base.arrays.dm_cum[1:], np.cumsum(m))
    assert m.max() >= 2.0 and m.min() == 1.0


def test_bad_bursts_exit_2_from_the_cli(synthetic_model, tmp_path, capsys):
    import yaml

    from gmm_volunteer.cli.commands import main

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"steps": 10, "users": {"count": 5}, "server": {"capacity": 1},
                                    "model": str(synthetic_model),
                                    "demand": {"bursts": {"rate": 1, "factor": {"alpha": 1, "low": 2, "high": 1},
                                                          "duration": {"alpha": 1, "low": 1, "high": 9}}}}))
    assert main(["run", str(path)]) == 2
    assert "demand.bursts.factor.high" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()
