"""Run config: defaults, overrides, error messages, YAML round trip (docs/usage.md)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from gmm_volunteer.run.config import (
    ConfigError,
    Exponential,
    LogNormal,
    Pareto,
    RunConfig,
    Weibull,
    apply_overrides,
    config_from_dict,
    default_output_path,
    load_config,
    parse_override,
    schema_keys,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A directory that passes the config's bundle check (the bundle itself is not read)."""
    d = tmp_path / "models" / "tiny"
    d.mkdir(parents=True)
    (d / "bundle.yaml").write_text("format: gmmv-model-bundle\n")
    return d


MINIMAL = {
    "steps": 10,
    "users": {"count": 5},
    "server": {"capacity": 2},
    "model": "models/tiny",
}


def write(tmp_path: Path, data, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def error_of(path: Path, overrides=()) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return str(info.value)


# ---------------------------------------------------------------------------------
# defaults
# ---------------------------------------------------------------------------------


def test_defaults_filled_in(tmp_path, bundle):
    cfg = load_config(write(tmp_path, MINIMAL))
    assert cfg.seed is None
    assert cfg.steps == 10
    assert cfg.users.count == 5 and cfg.users.capacity == 1.0
    assert cfg.server.capacity == 2.0 and isinstance(cfg.server.capacity, float)
    bp = cfg.base_profile
    assert (bp.band_in, bp.band_out, bp.cpu, bp.memory, bp.storage) == (100.0, 100.0, 200.0, 2500.0, 3000.0)
    assert cfg.scheduler == "uniform" and cfg.executor == "default"
    assert cfg.scheduler_options == {} and cfg.executor_options == {}
    assert cfg.model == str(bundle.resolve())
    assert cfg.availability.online == Weibull(dist="weibull", scale=1133.1, shape=0.5764)
    assert cfg.availability.offline == LogNormal(dist="lognormal", mu=math.log(5259.0), sigma=1.5)
    assert cfg.requests.think_time == Pareto(dist="pareto", scale=30.0, shape=1.5)
    assert cfg.requests.patience == Pareto(dist="pareto", scale=30.0, shape=1.5)
    assert cfg.requests.type_probabilities == [0.4, 0.3, 0.2, 0.1]
    assert cfg.allocation.restart == "burn_in" and cfg.allocation.burn_in_steps == 100
    assert cfg.output.path is None


def test_default_model_resolves_against_config_dir(tmp_path):
    (tmp_path / "configs" / "models" / "default").mkdir(parents=True)
    (tmp_path / "configs" / "models" / "default" / "bundle.yaml").write_text("x: 1\n")
    data = {k: v for k, v in MINIMAL.items() if k != "model"}
    cfg = load_config(write(tmp_path / "configs", data, "q.yaml"))
    assert cfg.model == str((tmp_path / "configs" / "models" / "default").resolve())


def test_output_path_default_and_explicit(tmp_path, bundle):
    path = write(tmp_path, MINIMAL, "my_run.yaml")
    cfg = load_config(path)
    assert cfg.output_path(path) == Path("results/my_run.zarr")
    assert default_output_path("a/b/c.yaml") == Path("results/c.zarr")
    cfg = load_config(path, ["output.path=elsewhere/x.zarr"])
    assert cfg.output_path(path) == Path("elsewhere/x.zarr")


def test_shipped_configs_load(monkeypatch):
    # Needs the built-in policies and the shipped model bundle.
    monkeypatch.chdir(REPO)
    quick = load_config(REPO / "configs" / "quickstart.yaml")
    assert (quick.users.count, quick.users.capacity, quick.server.capacity) == (1000, 1.0, 30.0)
    assert (quick.scheduler, quick.steps, quick.seed, quick.output.path) == ("uniform", 3600, 1, None)
    base = load_config(REPO / "configs" / "paper" / "base.yaml")
    assert (base.steps, base.seed, base.users.count, base.server.capacity) == (100000, 0, 1000, 30.0)
    assert quick.model == base.model == str((REPO / "configs" / "models" / "default").resolve())
    # Both spell out the defaults of section 3.1; nothing differs but the run length.
    assert base.availability == quick.availability == RunConfig.model_fields["availability"].default_factory()
    assert base.requests == quick.requests


# ---------------------------------------------------------------------------------
# overrides
# ---------------------------------------------------------------------------------


def test_overrides_nested_and_typed(tmp_path, bundle):
    cfg = load_config(
        write(tmp_path, MINIMAL),
        [
            "users.count=10000",
            "users.capacity=2",
            "seed=7",
            "requests.type_probabilities=[0.5, 0.5]",
            "availability.online.scale=900.5",
            "allocation.restart=freeze",
            "scheduler_options.rejection_tries=3",
            "output.path=null",
        ],
    )
    assert cfg.users.count == 10000 and isinstance(cfg.users.count, int)
    assert cfg.users.capacity == 2.0
    assert cfg.seed == 7
    assert cfg.requests.type_probabilities == [0.5, 0.5]
    assert cfg.availability.online == Weibull(dist="weibull", scale=900.5, shape=0.5764)
    assert cfg.availability.offline.median() == pytest.approx(5259.0)  # untouched sibling
    assert cfg.allocation.restart == "freeze"
    assert cfg.scheduler_options == {"rejection_tries": 3}
    assert cfg.output.path is None


def test_override_replaces_a_whole_dist(tmp_path, bundle):
    cfg = load_config(write(tmp_path, MINIMAL), ["requests.patience={dist: exponential, mean: 60}"])
    assert cfg.requests.patience == Exponential(dist="exponential", mean=60.0)


def test_override_value_type_is_checked(tmp_path, bundle):
    msg = error_of(write(tmp_path, MINIMAL), ["users.count=many"])
    assert "run.yaml: users.count: must be an integer" in msg


@pytest.mark.parametrize(
    "override, key",
    [
        ("nonsense=1", "nonsense"),
        ("users.cnt=3", "users.cnt"),
        ("users.count.x=3", "users.count.x"),
        ("availability.online.lambda=3", "availability.online.lambda"),
        ("model.path=x", "model.path"),
    ],
)
def test_override_unknown_key(tmp_path, bundle, override, key):
    msg = error_of(write(tmp_path, MINIMAL), [override])
    assert msg.startswith(f"--set {override} on {tmp_path / 'run.yaml'}: {key}: unknown config key")


@pytest.mark.parametrize("override", ["users.count", "=5", "", "users..count=5"])
def test_override_malformed(tmp_path, bundle, override):
    msg = error_of(write(tmp_path, MINIMAL), [override])
    assert "run.yaml" in msg
    assert "malformed" in msg


def test_override_value_not_yaml(tmp_path, bundle):
    msg = error_of(write(tmp_path, MINIMAL), ["requests.type_probabilities=[0.5,"])
    assert msg.startswith(f"{tmp_path / 'run.yaml'}: requests.type_probabilities: cannot parse override value")


def test_override_model_resolves_against_cwd(tmp_path, bundle, monkeypatch):
    other = tmp_path / "elsewhere"
    (other / "m").mkdir(parents=True)
    (other / "m" / "bundle.yaml").write_text("x: 1\n")
    cfg_dir = tmp_path / "cfgs"
    cfg_dir.mkdir()
    path = write(cfg_dir, {**MINIMAL, "model": "../models/tiny"})
    assert load_config(path).model == str(bundle.resolve())
    monkeypatch.chdir(other)
    assert load_config(path, ["model=m"]).model == str((other / "m").resolve())


def test_apply_overrides_copies_and_checks():
    base = {"users": {"count": 5}, "scheduler": "uniform"}
    out = apply_overrides(base, {"users.count": 7, "server.capacity": 10, "scheduler": "affinity"})
    assert out == {"users": {"count": 7}, "server": {"capacity": 10}, "scheduler": "affinity"}
    assert base == {"users": {"count": 5}, "scheduler": "uniform"}  # input untouched
    with pytest.raises(ConfigError, match=r"^grid\.yaml: users\.size: unknown config key"):
        apply_overrides(base, {"users.size": 1}, source="grid.yaml")
    with pytest.raises(ConfigError, match=r"users: cannot set users\.count"):
        apply_overrides({"users": 5}, {"users.count": 1})


def test_parse_override_uses_yaml_types():
    assert parse_override("a.b=10000") == ("a.b", 10000)
    assert parse_override("a=uniform") == ("a", "uniform")
    assert parse_override("a=[1,2]") == ("a", [1, 2])
    assert parse_override("a=1.5") == ("a", 1.5)
    assert parse_override("a=x=y") == ("a", "x=y")  # only the first '=' splits
    assert parse_override("a=") == ("a", None)


# ---------------------------------------------------------------------------------
# malformed files: every message names the file and the key
# ---------------------------------------------------------------------------------

BAD = [
    ("unknown_key", {**MINIMAL, "users": {"count": 5, "cpacity": 2}}, "users.cpacity", "unknown key"),
    ("unknown_top", {**MINIMAL, "stpes": 3}, "stpes", "unknown key"),
    ("wrong_type", {**MINIMAL, "steps": "ten"}, "steps", "must be an integer"),
    ("number_as_string", {**MINIMAL, "server": {"capacity": "30"}}, "server.capacity", "must be a number"),
    ("float_for_int", {**MINIMAL, "steps": 10.0}, "steps", "must be an integer"),
    ("bool_for_number", {**MINIMAL, "users": {"count": 5, "capacity": True}}, "users.capacity", "must be a number"),
    ("negative_users", {**MINIMAL, "users": {"count": -5}}, "users.count", "must be >= 1 (got -5)"),
    ("capacity_inf", {**MINIMAL, "server": {"capacity": float("inf")}}, "server.capacity", "must be a finite number"),
    ("bool_seed", {**MINIMAL, "seed": True}, "seed", "must be an integer"),
    ("capacity_zero", {**MINIMAL, "server": {"capacity": 0}}, "server.capacity", "must be > 0 (got 0)"),
    ("negative_seed", {**MINIMAL, "seed": -1}, "seed", "must be >= 0"),
    ("profile_zero", {**MINIMAL, "base_profile": {"cpu": 0}}, "base_profile.cpu", "must be > 0"),
    ("probs_sum", {**MINIMAL, "requests": {"type_probabilities": [0.5, 0.4]}},
     "requests.type_probabilities", "must sum to 1"),
    ("probs_negative", {**MINIMAL, "requests": {"type_probabilities": [1.5, -0.5]}},
     "requests.type_probabilities", "must be >= 0"),
    ("bad_dist", {**MINIMAL, "availability": {"online": {"dist": "gamma", "scale": 1, "shape": 1}}},
     "availability.online", "unknown dist 'gamma'"),
    ("dist_param", {**MINIMAL, "requests": {"patience": {"dist": "pareto", "scale": 30, "alpha": 1.5}}},
     "requests.patience.alpha", "unknown key"),
    ("dist_param_range", {**MINIMAL, "availability": {"offline": {"dist": "lognormal", "mu": 8, "sigma": -1}}},
     "availability.offline.sigma", "must be > 0"),
    ("dist_missing_tag", {**MINIMAL, "requests": {"think_time": {"scale": 30, "shape": 1.5}}},
     "requests.think_time", "needs a 'dist' key"),
    ("restart_literal", {**MINIMAL, "allocation": {"restart": "warm"}}, "allocation.restart", "must be one of"),
    ("missing_required", {k: v for k, v in MINIMAL.items() if k != "server"}, "server", "required key is missing"),
    ("missing_nested", {**MINIMAL, "users": {"capacity": 2}}, "users.count", "required key is missing"),
    ("section_not_mapping", {**MINIMAL, "users": 5}, "users", "must be a mapping"),
    ("model_missing", {**MINIMAL, "model": "models/nope"}, "model", "does not exist"),
    ("model_no_bundle_file", {**MINIMAL, "model": "models"}, "model", "has no bundle.yaml"),
    ("unknown_scheduler", {**MINIMAL, "scheduler": "round_robbin"}, "scheduler", "unknown scheduler 'round_robbin'"),
    ("unknown_executor", {**MINIMAL, "executor": "lazy"}, "executor", "unknown executor 'lazy'"),
]


@pytest.mark.parametrize("name, data, key, problem", BAD, ids=[b[0] for b in BAD])
def test_malformed_file_names_file_and_key(tmp_path, bundle, name, data, key, problem):
    path = write(tmp_path, data, f"{name}.yaml")
    msg = error_of(path)
    line = next((ln for ln in msg.splitlines() if ln.startswith(f"{path}: {key}: ")), None)
    assert line is not None, msg
    assert problem in line, msg


# A mistyped name gets the close name it was probably meant to be (docs/usage.md, "Errors").
MISTYPED = [
    ("key", {**MINIMAL, "users": {"count": 5, "cpacity": 2}}, "users.cpacity", "unknown key", "capacity"),
    ("top_key", {**MINIMAL, "stpes": 3}, "stpes", "unknown key", "steps"),
    ("case", {**MINIMAL, "Steps": 3}, "Steps", "unknown key", "steps"),
    ("dist_name", {**MINIMAL, "availability": {"online": {"dist": "weibul", "scale": 1, "shape": 1}}},
     "availability.online", "unknown dist 'weibul'", "weibull"),
    ("dist_param", {**MINIMAL, "requests": {"patience": {"dist": "pareto", "scale": 30, "shpe": 1.5}}},
     "requests.patience.shpe", "unknown key", "shape"),
    ("literal", {**MINIMAL, "allocation": {"restart": "burnin"}}, "allocation.restart", "must be one of",
     "burn_in"),
    ("demand_kind", {**MINIMAL, "demand": {"daily": {"kind": "sinusiod"}}}, "demand.daily",
     "unknown kind 'sinusiod'", "sinusoid"),
    ("demand_key", {**MINIMAL, "demand": {"daily": {"kind": "sinusoid", "amplitde": 0.3}}},
     "demand.daily.amplitde", "unknown key", "amplitude"),
    ("allocation_base", {**MINIMAL, "server": {"capacity": 2, "allocation": "fited"}}, "server.allocation",
     "must be 'dedicated', 'fitted'", "fitted"),
    ("resource", {**MINIMAL, "server": {"capacity": 2, "allocation": {"mean": {"cpuu": 0.5}}}},
     "server.allocation.mean.cpuu", "unknown key", "cpu"),
    ("profile_resource", {**MINIMAL, "base_profile": {"memroy": 100}}, "base_profile.memroy", "unknown key",
     "memory"),
    ("scheduler", {**MINIMAL, "scheduler": "unifrom"}, "scheduler", "unknown scheduler 'unifrom'", "uniform"),
    ("executor", {**MINIMAL, "executor": "defualt"}, "executor", "unknown executor 'defualt'", "default"),
    ("autoscaler", {**MINIMAL, "autoscaler": "reactve"}, "autoscaler", "unknown autoscaler 'reactve'",
     "reactive"),
    ("option_key", {**MINIMAL, "scheduler_options": {"rejection_trie": 3}}, "scheduler_options.rejection_trie",
     "unknown key", "rejection_tries"),
]


@pytest.mark.parametrize("name, data, key, problem, close", MISTYPED, ids=[m[0] for m in MISTYPED])
def test_mistyped_name_gets_a_suggestion(tmp_path, bundle, name, data, key, problem, close):
    path = write(tmp_path, data, f"{name}.yaml")
    msg = error_of(path)
    line = next((ln for ln in msg.splitlines() if ln.startswith(f"{path}: {key}: ")), None)
    assert line is not None, msg
    assert problem in line and f"did you mean {close!r}?" in line, line


def test_mistyped_override_key_gets_a_suggestion(tmp_path, bundle):
    msg = error_of(write(tmp_path, MINIMAL), ["users.cuont=3"])
    assert msg.startswith(f"--set users.cuont=3 on {tmp_path / 'run.yaml'}: users.cuont: unknown config key; "
                          "did you mean 'count'?")
    msg = error_of(write(tmp_path, MINIMAL), ["availabilty.online.scale=3"])
    assert "availabilty: unknown config key; did you mean 'availability'?" in msg


@pytest.mark.parametrize("data, override", [
    ({**MINIMAL, "zzzzzz": 1}, ()),
    ({**MINIMAL, "scheduler": "qqqqq"}, ()),
    (MINIMAL, ["users.xyzzy=3"]),
])
def test_no_suggestion_without_a_close_name(tmp_path, bundle, data, override):
    assert "did you mean" not in error_of(write(tmp_path, data), override)


def test_close_name():
    from gmm_volunteer.model.suggest import close_name, did_you_mean, known_keys

    assert close_name("cuont", ["count", "capacity", "allocation"]) == "count"
    assert close_name("COUNT", ["count", "capacity"]) == "count"
    assert close_name("count", ["count", "capacity"]) is None  # exists: nothing to suggest
    assert close_name("zzz", ["count", "capacity"]) is None
    assert close_name(5, ["count"]) is None
    assert did_you_mean("cpuu", ["cpu", "memory"]) == "; did you mean 'cpu'?"
    assert did_you_mean("zzz", ["cpu", "memory"]) == ""
    # a tagged union's branch name in an error location selects that branch
    assert sorted(known_keys(RunConfig, ("requests", "patience", "pareto", "shpe"))) == ["dist", "scale", "shape"]
    assert "capacity" in known_keys(RunConfig, ("users", "cpacity"))
    assert known_keys(RunConfig, ("nope", "deeper", "x")) == []


def test_all_problems_reported_at_once(tmp_path, bundle):
    path = write(tmp_path, {**MINIMAL, "steps": 0, "users": {"count": 0}, "extra": 1})
    lines = error_of(path).splitlines()
    keys = sorted(ln.split(": ")[1] for ln in lines)
    assert keys == ["extra", "steps", "users.count"]


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    path = write(tmp_path, "steps: 10\nusers: {count: 5\nserver:\n  capacity: 3\n", "broken.yaml")
    msg = error_of(path)
    assert msg.startswith(f"{path}: YAML syntax error at line ")
    assert re.search(r"line \d+, column \d+", msg)


@pytest.mark.parametrize("text, problem", [("", "file is empty"), ("- 1\n- 2\n", "top level must be a mapping")])
def test_not_a_mapping(tmp_path, text, problem):
    path = write(tmp_path, text, "odd.yaml")
    msg = error_of(path)
    assert msg.startswith(f"{path}: ") and problem in msg


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    assert error_of(path) == f"{path}: file not found"


def test_config_from_dict_names_source(tmp_path, bundle, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^sweep\.yaml\[3\]: users\.count: must be >= 1"):
        config_from_dict({**MINIMAL, "users": {"count": 0}}, source="sweep.yaml[3]")


# ---------------------------------------------------------------------------------
# allocation fractions of the node classes (paper 2.2: node-specific mean and sd)
# ---------------------------------------------------------------------------------

FITTED = {r: (0.1 * (i + 1), 0.01 * (i + 1)) for i, r in
          enumerate(("band_in", "band_out", "cpu", "memory", "storage"))}


def test_allocation_defaults_dedicated_server_fitted_users(tmp_path, bundle):
    cfg = load_config(write(tmp_path, MINIMAL))
    mean, sd = cfg.server.allocation.fractions(FITTED)
    assert mean.tolist() == [1.0] * 5 and sd.tolist() == [0.0] * 5
    mean, sd = cfg.users.allocation.fractions(FITTED)
    assert mean.tolist() == [FITTED[r][0] for r in FITTED] and sd.tolist() == [FITTED[r][1] for r in FITTED]
    dumped = yaml.safe_load(cfg.to_yaml())
    assert dumped["server"]["allocation"] == "dedicated" and dumped["users"]["allocation"] == "fitted"


def test_allocation_mapping_overrides_chosen_resources(tmp_path, bundle):
    data = {**MINIMAL,
            "server": {"capacity": 2, "allocation": {"sd": {"cpu": 0.2}}},
            "users": {"count": 5, "allocation": {"base": "dedicated", "mean": {"memory": 0.5}}}}
    cfg = load_config(write(tmp_path, data))
    mean, sd = cfg.server.allocation.fractions(FITTED)  # base defaults to the server's: dedicated
    assert mean.tolist() == [1.0] * 5 and sd.tolist() == [0.0, 0.0, 0.2, 0.0, 0.0]
    mean, sd = cfg.users.allocation.fractions(FITTED)
    assert mean.tolist() == [1.0, 1.0, 1.0, 0.5, 1.0] and sd.tolist() == [0.0] * 5
    mean, sd = load_config(write(tmp_path, data), ["server.allocation.base=fitted"]).server.allocation.fractions(FITTED)
    assert mean.tolist() == [FITTED[r][0] for r in FITTED]
    assert sd.tolist() == [0.01, 0.02, 0.2, 0.04, 0.05]


def test_allocation_override_on_top_of_the_shorthand(tmp_path, bundle):
    # users.allocation left out, and written as a bare base name: both take a sub-key override.
    cfg = load_config(write(tmp_path, MINIMAL), ["users.allocation.mean.cpu=0.5"])
    mean, sd = cfg.users.allocation.fractions(FITTED)
    assert cfg.users.allocation.base == "fitted"
    assert mean.tolist() == [0.1, 0.2, 0.5, 0.4, 0.5] and sd.tolist() == [FITTED[r][1] for r in FITTED]
    data = {**MINIMAL, "users": {"count": 5, "allocation": "dedicated"}}
    cfg = load_config(write(tmp_path, data), ["users.allocation.sd.band_in=0.25"])
    mean, sd = cfg.users.allocation.fractions(FITTED)
    assert mean.tolist() == [1.0] * 5 and sd.tolist() == [0.25, 0.0, 0.0, 0.0, 0.0]
    cfg = load_config(write(tmp_path, MINIMAL), ["server.allocation=fitted"])
    assert cfg.server.allocation.fractions(FITTED)[0].tolist() == [FITTED[r][0] for r in FITTED]


@pytest.mark.parametrize(
    "override, key, problem",
    [
        ("server.allocation.mean.cpu=2", "server.allocation.mean.cpu", "must be <= 1 (got 2)"),
        ("server.allocation.mean.cpu=-0.1", "server.allocation.mean.cpu", "must be >= 0"),
        ("users.allocation.sd.memory=-1", "users.allocation.sd.memory", "must be >= 0 (got -1)"),
        ("users.allocation.sd.memory=.nan", "users.allocation.sd.memory", "must be a finite number"),
        ("users.allocation.sd.memory=.inf", "users.allocation.sd.memory", "must be a finite number"),
        ("users.allocation.mean.cpu='0.5'", "users.allocation.mean.cpu", "must be a number"),
        ("users.allocation.mean.cpu=null", "users.allocation.mean.cpu", "must be a number (got null"),
        ("users.allocation=bogus", "users.allocation", "must be 'dedicated', 'fitted' or a mapping"),
        ("users.allocation=3", "users.allocation", "must be 'dedicated', 'fitted' or a mapping"),
        ("users.allocation={base: shared}", "users.allocation.base", "must be one of"),
        ("server.allocation={mean: {gpu: 0.5}}", "server.allocation.mean.gpu", "unknown key"),
        ("server.allocation={means: {cpu: 0.5}}", "server.allocation.means", "unknown key"),
        ("server.allocation.mean.gpu=0.5", "server.allocation.mean.gpu", "unknown config key"),
    ],
)
def test_allocation_errors_name_the_key(tmp_path, bundle, override, key, problem):
    path = write(tmp_path, MINIMAL)
    msg = error_of(path, [override])  # blamed on the override (tests/test_hints.py)
    line = next((ln for ln in msg.splitlines() if ln.startswith(f"--set {override} on {path}: {key}: ")), None)
    assert line is not None, msg
    assert problem in line, msg
    assert len(msg.splitlines()) == 1, msg  # one problem, reported once


def test_allocation_round_trip(tmp_path, bundle):
    cfg = load_config(write(tmp_path, MINIMAL),
                      ["server.allocation={base: fitted, mean: {cpu: 0.75}}", "users.allocation=dedicated"])
    text = cfg.to_yaml()
    dumped = yaml.safe_load(text)
    assert dumped["server"]["allocation"] == {"base": "fitted", "mean": {"cpu": 0.75}}
    assert dumped["users"]["allocation"] == "dedicated"
    again = load_config(write(tmp_path, text, "dump.yaml"))
    assert again == cfg and again.to_yaml() == text


# ---------------------------------------------------------------------------------
# round trip
# ---------------------------------------------------------------------------------


def test_to_yaml_round_trip(tmp_path, bundle):
    cfg = load_config(
        write(tmp_path, MINIMAL),
        [
            "seed=123456789012345678901234567890",
            "requests.patience={dist: exponential, mean: 45.5}",
            "scheduler_options={rejection_tries: 2, max_downloads_per_node: 3}",
            "output.path=out/x.zarr",
        ],
    )
    text = cfg.to_yaml()
    dumped = yaml.safe_load(text)
    # Resolved: every section is present with its defaults.
    # one server dumps as `server:`, never also as `servers:` (docs/model.md D35)
    assert set(dumped) == set(RunConfig.model_fields) - {"servers"}
    assert dumped["base_profile"]["storage"] == 3000.0
    assert dumped["requests"]["patience"] == {"dist": "exponential", "mean": 45.5}
    # Loading the dump from another directory gives the same config (model is absolute).
    other = tmp_path / "a" / "b"
    other.mkdir(parents=True)
    again = load_config(write(other, text, "dump.yaml"))
    assert again == cfg
    assert again.to_yaml() == text


# ---------------------------------------------------------------------------------
# distributions (paper section 2.2)
# ---------------------------------------------------------------------------------

DISTS = [
    Weibull(dist="weibull", scale=1133.1, shape=0.5764),
    LogNormal(dist="lognormal", mu=math.log(5259.0), sigma=1.5),
    Pareto(dist="pareto", scale=30.0, shape=1.5),
    Exponential(dist="exponential", mean=100.0),
]


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: d.dist)
def test_survival_shape_and_median(dist):
    t = np.array([-5.0, 0.0, 1.0, 10.0, 100.0, 1e4, 1e7])
    s = dist.survival(t)
    assert s.shape == t.shape
    assert s[0] == 1.0 and s[1] == 1.0
    assert np.all(np.diff(s) <= 0) and np.all((s >= 0) & (s <= 1))
    assert dist.survival(dist.median()) == pytest.approx(0.5, abs=1e-12)
    assert dist.survival(2.0 * dist.median()) < 0.5
    assert np.ndim(dist.survival(3.0)) == 0


def test_medians_of_the_paper():
    # Section 2.2: online ~10 min, offline ~1.5 h, think time / patience ~48 s.
    online, offline, think, _ = DISTS
    assert online.median() == pytest.approx(600.0, rel=0.02)
    assert offline.median() == pytest.approx(5259.0)
    assert think.median() == pytest.approx(47.62, abs=0.01)
    # Renewal-reward: mean online / (mean online + mean offline) is about 10%.
    frac = online.mean() / (online.mean() + offline.mean())
    assert frac == pytest.approx(0.10, abs=0.005)


def test_pareto_survival_closed_form():
    p = Pareto(dist="pareto", scale=30.0, shape=1.5)
    np.testing.assert_allclose(p.survival([29.9, 30.0, 60.0, 120.0]), [1.0, 1.0, 0.5**1.5, 0.25**1.5])


# ---------------------------------------------------------------------------------
# documentation stays in step with the schema
# ---------------------------------------------------------------------------------


def test_usage_doc_mentions_every_key():
    text = (REPO / "docs" / "usage.md").read_text()
    assert "availability.online" in schema_keys() and "users.count" in schema_keys()
    missing = [k for k in schema_keys() if f"`{k}`" not in text]
    missing += [f"dist: {d.dist}" for d in DISTS if f"`{d.dist}`" not in text]
    assert not missing, f"docs/usage.md does not document: {missing}"
