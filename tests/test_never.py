"""The duration law `never` (a state that never ends): config, sampling, stationary start,
and short simulations with always-online users and unbounded patience (docs/usage.md,
docs/model.md D2)."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import yaml

from engine_support import make_config
from gmm_volunteer.model import rng
from gmm_volunteer.run.config import DIST_NAMES, ConfigError, Never, config_from_dict, load_config
from gmm_volunteer.model import laws
from gmm_volunteer.run.engine import Simulation, stationary_availability
from gmm_volunteer.model.params import dist_law, mean_duration
from gmm_volunteer.io.runrecord import OUTCOMES

REPO = Path(__file__).resolve().parents[1]
NEVER = {"dist": "never"}
COMPLETED, ABANDONED, DROPPED = (OUTCOMES.index(o) for o in ("completed", "abandoned", "dropped"))


@pytest.fixture
def minimal(tmp_path: Path) -> dict:
    d = tmp_path / "bundle"
    d.mkdir()
    (d / "bundle.yaml").write_text("format: gmmv-model-bundle\n")  # only its existence is checked
    return {"steps": 10, "users": {"count": 5}, "server": {"capacity": 2}, "model": str(d)}


# ---------------------------------------------------------------------------------
# the law itself
# ---------------------------------------------------------------------------------


def test_never_law_has_no_end():
    law = Never(dist="never")
    t = np.array([-1.0, 0.0, 1.0, 1e9, 1e300])
    assert np.array_equal(law.survival(t), np.ones_like(t))
    assert np.ndim(law.survival(3.0)) == 0 and law.survival(3.0) == 1.0
    assert law.mean() == math.inf and law.median() == math.inf
    assert "never" in DIST_NAMES


def test_never_samples_max_duration():
    code = dist_law(Never(dist="never"))
    assert int(code[0]) == laws.NEVER
    assert mean_duration(code) == math.inf
    for u1, u2 in [(1e-300, 0.5), (0.5, 0.5), (1.0 - 1e-16, 0.1)]:
        assert laws.continuous_duration(laws.NEVER, 0.0, 0.0, u1, u2) == math.inf
        assert laws.discrete_duration(laws.NEVER, 0.0, 0.0, u1, u2) == laws.MAX_DURATION


def test_config_accepts_never_and_round_trips(minimal):
    cfg = config_from_dict({**minimal, "availability": {"online": NEVER}, "requests": {"patience": NEVER}})
    assert cfg.availability.online == Never(dist="never")
    assert cfg.requests.patience == Never(dist="never")
    dumped = yaml.safe_load(cfg.to_yaml())
    assert dumped["availability"]["online"] == NEVER and dumped["requests"]["patience"] == NEVER
    assert config_from_dict(dumped) == cfg
    cfg = config_from_dict({**minimal, "availability": {"offline": NEVER}})
    assert cfg.availability.offline == Never(dist="never")


BAD = [
    ("both_never", {"availability": {"online": NEVER, "offline": NEVER}}, "availability",
     "cannot both be {dist: never}"),
    ("think_never", {"requests": {"think_time": NEVER}}, "requests.think_time", "no request would ever arrive"),
    ("never_with_param", {"requests": {"patience": {"dist": "never", "mean": 5}}}, "requests.patience.mean",
     "unknown key"),
    ("pareto_online_infinite_mean", {"availability": {"online": {"dist": "pareto", "scale": 30, "shape": 1}}},
     "availability.online", "needs shape > 1"),
    ("pareto_offline_infinite_mean", {"availability": {"offline": {"dist": "pareto", "scale": 30, "shape": 0.5}}},
     "availability.offline", "needs shape > 1"),
    ("misspelt", {"requests": {"patience": {"dist": "nevr"}}}, "requests.patience",
     "(expected one of: weibull, lognormal, pareto, exponential, never)"),
]


@pytest.mark.parametrize("name, extra, key, problem", BAD, ids=[b[0] for b in BAD])
def test_forbidden_laws_name_the_key(tmp_path, minimal, name, extra, key, problem):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**minimal, **extra}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    lines = str(info.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: {key}: ") and problem in lines[0], lines


def test_pareto_availability_with_finite_mean_still_accepted(minimal):
    cfg = config_from_dict({**minimal, "availability": {"online": {"dist": "pareto", "scale": 30, "shape": 1.01}}})
    assert cfg.availability.online.mean() == pytest.approx(30 * 1.01 / 0.01)


@pytest.mark.parametrize(
    "override, needle",
    [
        ("availability={online: {dist: never}, offline: {dist: never}}", "bad.yaml: availability: "),
        ("requests.think_time={dist: never}", "bad.yaml: requests.think_time: "),
    ],
)
def test_cli_refuses_forbidden_never_exit_2_writes_nothing(tmp_path, monkeypatch, capsys, minimal, override,
                                                           needle):
    from gmm_volunteer.cli.commands import main

    def no_simulation(*args, **kwargs):
        raise AssertionError("the simulator must not run on an invalid config")

    monkeypatch.setitem(sys.modules, "gmm_volunteer.run.engine", types.SimpleNamespace(simulate=no_simulation))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(minimal))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(["run", "bad.yaml", "--quiet", "--set", override]) == 2
    assert needle in capsys.readouterr().err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_usage_doc_lists_never():
    text = (REPO / "docs" / "usage.md").read_text()
    assert "| `never` |" in text


# ---------------------------------------------------------------------------------
# stationary start (docs/model.md D2)
# ---------------------------------------------------------------------------------

EXP = np.array([laws.EXPONENTIAL, 50.0, 0.0])
WEIBULL = np.array([laws.WEIBULL, 1133.1, 0.5764])
LOGNORMAL = np.array([laws.LOGNORMAL, math.log(5259.0), 1.5])
NEVER_LAW = np.array([laws.NEVER, 0.0, 0.0])


def params_with(on, off, n=1000):
    return types.SimpleNamespace(n_users=n, on_law=on, off_law=off)


def test_stationary_start_when_online_never_ends():
    online, age, next_change = stationary_availability(params_with(NEVER_LAW, LOGNORMAL), np.random.default_rng(1))
    assert online.all() and (age == 0).all() and (next_change == laws.MAX_DURATION).all()


def test_stationary_start_when_offline_never_ends():
    online, age, next_change = stationary_availability(params_with(EXP, NEVER_LAW), np.random.default_rng(2))
    assert not online.any() and (age == 0).all() and (next_change == laws.MAX_DURATION).all()


def test_stationary_start_refuses_both_never():
    with pytest.raises(ValueError, match="no stationary state"):
        stationary_availability(params_with(NEVER_LAW, NEVER_LAW), np.random.default_rng(3))


def test_length_biased_never_takes_no_draws():
    g = np.random.default_rng(4)
    assert np.isposinf(laws.length_biased(NEVER_LAW, 5, g)).all()
    assert g.random() == np.random.default_rng(4).random()


def test_stationary_start_of_finite_laws_is_unchanged():
    """The draws for finite laws are those of the formula before `never` existed, so
    existing configs keep their trajectories bit for bit."""
    P = params_with(WEIBULL, LOGNORMAL, 5000)
    got = stationary_availability(P, np.random.default_rng(5))
    g = np.random.default_rng(5)
    m_on, m_off = mean_duration(WEIBULL), mean_duration(LOGNORMAL)
    online = g.random(P.n_users) < m_on / (m_on + m_off)
    total = np.where(online, laws.length_biased(WEIBULL, P.n_users, g), laws.length_biased(LOGNORMAL, P.n_users, g))
    age = g.random(P.n_users) * total
    next_change = np.maximum(np.ceil(total - age) - 1, 0).astype(np.int64)
    for a, b in zip(got, (online, np.floor(age).astype(np.int64), next_change)):
        assert np.array_equal(a, b)


# ---------------------------------------------------------------------------------
# short simulations
# ---------------------------------------------------------------------------------

USERS, STEPS = 30, 300
THINK = {"dist": "exponential", "mean": 10.0}


def run(model, **extra):
    sim = Simulation(make_config(model, users=USERS, steps=STEPS, scheduler="centralized", server=0.2, **extra))
    online = np.empty(STEPS, np.int64)
    while sim.t < STEPS:
        sim.step()
        online[sim.t - 1] = sim.arrays.online[1:].sum()
    return sim, online, sim.record()


def test_always_online_users_with_unbounded_patience(synthetic_model):
    sim, online, rec = run(synthetic_model, availability={"online": NEVER},
                           requests={"think_time": THINK, "patience": NEVER})
    assert (online == USERS).all() and (rec.online_users == USERS).all()
    assert sim.arrays.ah_n[0] == 0  # no availability timer was ever set
    counts = np.bincount(rec.request_outcome, minlength=3)
    assert counts[COMPLETED] > 0
    assert counts[ABANDONED] == 0 and counts[DROPPED] == 0
    # No patience timers: at most one (think-time) timer per user, nothing accumulates.
    assert sim.arrays.rh_n[0] <= USERS


def test_finite_patience_does_abandon_on_the_same_system(synthetic_model):
    """The same always-online system with a short patience abandons requests, so the
    check above can fail."""
    _, online, rec = run(synthetic_model, availability={"online": NEVER},
                         requests={"think_time": THINK, "patience": {"dist": "exponential", "mean": 2.0}})
    assert (online == USERS).all()
    assert np.sum(rec.request_outcome == ABANDONED) > 0


def test_always_offline_users_make_no_requests(synthetic_model):
    _, online, rec = run(synthetic_model, availability={"offline": NEVER})
    assert (online == 0).all() and rec.request_outcome.size == 0
