"""Several dedicated servers and their network distance to the users (docs/model.md D35):
the `servers:` config, its errors and overrides, the per-user round-trip-time draws, one
server in `servers:` storing exactly what the same server in `server:` stores, what the
engine and the policies refuse, and a transfer's round trip against its closed form (the
engine with several servers: tests/test_servers_engine.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from gmm_volunteer.model import network, rng
from gmm_volunteer.run.config import ConfigError, config_from_dict, load_config

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def minimal(tmp_path: Path) -> dict:
    d = tmp_path / "bundle"
    d.mkdir()
    (d / "bundle.yaml").write_text("format: gmmv-model-bundle\n")  # only its existence is checked
    return {"steps": 10, "users": {"count": 5}, "model": str(d)}


TWO = [{"name": "edge", "capacity": 1, "rtt": 0.01},
       {"name": "cloud", "capacity": 8, "rtt": {"dist": "lognormal", "mu": -2.5, "sigma": 0.3}}]


def error_of(tmp_path: Path, data: dict) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value).replace(f"{path}: ", "")


# ---------------------------------------------------------------------------------
# the config
# ---------------------------------------------------------------------------------


def test_one_server_in_a_list_resolves_as_the_single_server(minimal):
    single = config_from_dict({**minimal, "server": {"capacity": 2}})
    listed = config_from_dict({**minimal, "servers": [{"capacity": 2}]})
    assert single.to_yaml() == listed.to_yaml()
    assert "servers" not in listed.to_yaml() and listed.server_names() == ["server"]
    assert listed.server is listed.servers[0]


def test_several_servers_keep_their_order_names_and_laws(minimal):
    cfg = config_from_dict({**minimal, "servers": TWO})
    assert cfg.server_names() == ["edge", "cloud"]
    assert cfg.server.name == "edge" and cfg.server_named("cloud").capacity == 8
    assert cfg.server_named(None) is cfg.servers[0]
    np.testing.assert_array_equal(cfg.servers[0].rtt.law(), network.rtt_law("fixed", 0.01))
    dumped = yaml.safe_load(cfg.to_yaml())
    assert "server" not in dumped and [s["name"] for s in dumped["servers"]] == ["edge", "cloud"]
    again = config_from_dict({**minimal, **{k: v for k, v in dumped.items() if k != "model"}})
    assert again.to_yaml() == cfg.to_yaml()  # the resolved config reloads as itself


BAD = [
    ("duplicate", {"servers": [{"name": "a", "capacity": 1}, {"name": "a", "capacity": 2}]},
     "servers: entry 1: name 'a' is also the name of entry 0"),
    ("negative_rtt", {"servers": [{"name": "a", "capacity": 1}, {"name": "b", "capacity": 2, "rtt": -0.1}]},
     "servers.1.rtt.seconds: must be >= 0"),
    ("negative_low", {"servers": [{"capacity": 1, "rtt": {"dist": "uniform", "low": -1, "high": 1}}]},
     "servers.0.rtt.low: must be >= 0"),
    ("high_below_low", {"servers": [{"capacity": 1, "rtt": {"dist": "uniform", "low": 0.2, "high": 0.1}}]},
     "servers.0.rtt.high: must be >= low"),
    ("rtt_never", {"server": {"capacity": 1, "rtt": {"dist": "never"}}}, "server.rtt: unknown dist 'never'"),
    ("unknown_key", {"servers": [{"name": "a", "capacity": 1, "rttt": 0.1}]},
     "servers.0.rttt: unknown key; did you mean 'rtt'?"),
    ("both", {"server": {"capacity": 2}, "servers": [{"capacity": 2}]}, "servers: give either `server:`"),
    ("empty", {"servers": []}, "servers: must list 1 to"),
    ("null_list", {"servers": None}, "servers: must be a list of servers"),
    ("null_server", {"server": None}, "server: must be a mapping"),
    ("bad_name", {"servers": [{"name": "edge 1", "capacity": 1}]}, "servers.0.name: "),
    ("unknown_scaled", {"servers": TWO, "autoscaler": "reactive", "autoscaler_options": {"server": "fog"}},
     "autoscaler_options: server: 'fog' is not a server of this config (servers: edge, cloud)"),
    ("missing", {}, "server: required key is missing"),
]


@pytest.mark.parametrize("name, extra, problem", BAD, ids=[b[0] for b in BAD])
def test_bad_servers_name_the_key(tmp_path, minimal, name, extra, problem):
    assert problem in error_of(tmp_path, {**minimal, **extra})


def test_autoscaler_scales_the_server_it_names(minimal):
    from gmm_volunteer.policies import make_autoscaler
    from gmm_volunteer.policies.autoscalers.control import ControlPlane

    cfg = config_from_dict({**minimal, "servers": TWO, "autoscaler": "reactive",
                            "autoscaler_options": {"server": "cloud", "unit": 2.0}})
    auto = make_autoscaler(cfg.autoscaler, cfg.autoscaler_options)
    params = type("P", (), {"amax": np.zeros((2, 5))})()
    assert ControlPlane(auto, cfg, params).units == 4  # cloud's capacity 8 in units of 2
    first = make_autoscaler(cfg.autoscaler, {"unit": 1.0})
    assert ControlPlane(first, cfg, params).units == 1  # edge, the first, by default


def test_usage_doc_lists_the_server_keys():
    text = (REPO / "docs" / "usage.md").read_text()
    for key in ("`servers`", "`server.name`", "`server.rtt`", "`fixed`", "`uniform`"):
        assert key in text, key


# ---------------------------------------------------------------------------------
# the round-trip-time draws
# ---------------------------------------------------------------------------------


def test_rtt_draws_are_keyed_by_seed_server_and_user():
    laws = np.stack([network.rtt_law("uniform", 0.0, 1.0), network.rtt_law("exponential", 0.05)])
    key = rng.hash_key(rng.seed_sequence(7))
    a = network.user_rtts(laws, 50, key)
    assert a.shape == (2, 51) and np.all(a[:, 0] == 0.0)
    np.testing.assert_array_equal(a, network.user_rtts(laws, 50, key))  # same seed, same draws
    # a user's distance does not depend on how many users or which servers come after
    np.testing.assert_array_equal(network.user_rtts(laws[:1], 20, key)[0], a[0, :21])
    assert not np.array_equal(a, network.user_rtts(laws, 50, rng.hash_key(rng.seed_sequence(8))))


def test_rtt_draws_follow_their_law():
    """Mean of n = 20,000 draws within 4 standard errors of the law's mean (the tolerance
    comes from n: a false failure has probability about 6e-5)."""
    n = 20_000
    key = rng.hash_key(rng.seed_sequence(11))
    cases = [("fixed", (0.03, 0.0), 0.03, 0.0), ("uniform", (0.01, 0.05), 0.03, 0.04 / math.sqrt(12)),
             ("exponential", (0.08, 0.0), 0.08, 0.08),
             ("lognormal", (-3.0, 0.5), math.exp(-3.0 + 0.125), math.exp(-3.0 + 0.125) * math.sqrt(math.exp(0.25) - 1))]
    for name, (a, b), mean, sd in cases:
        x = network.user_rtts(network.rtt_law(name, a, b)[None, :], n, key)[0, 1:]
        assert abs(x.mean() - mean) <= 4 * sd / math.sqrt(n) + 1e-12, (name, x.mean(), mean)
        assert x.min() >= 0.0
    fixed = network.user_rtts(network.rtt_law("fixed", 0.03)[None, :], 10, key)[0, 1:]
    assert np.all(fixed == 0.03)


# ---------------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------------


def _store_files(path: Path) -> dict[str, object]:
    """Every file of a store by relative path: bytes, except the root metadata (its JSON
    without the measured wall time) and the manifest (which hashes that metadata)."""
    import json

    out: dict[str, object] = {}
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = str(f.relative_to(path))
        if rel == "gmmv-manifest.json":
            continue
        if rel == "zarr.json":
            meta = json.loads(f.read_text())
            meta.get("attributes", {}).pop("wall_time_s", None)
            out[rel] = meta
        else:
            out[rel] = f.read_bytes()
    return out


def test_one_server_in_servers_stores_what_server_stores(tmp_path, monkeypatch):
    from gmm_volunteer.cli.commands import main

    base = {"seed": 3, "steps": 120, "users": {"count": 40}}
    stores = []
    for name, section in (("single", {"server": {"capacity": 2}}), ("listed", {"servers": [{"capacity": 2}]})):
        d = tmp_path / name
        d.mkdir()
        (d / "run.yaml").write_text(yaml.safe_dump({**base, **section}))
        monkeypatch.chdir(d)
        assert main(["run", "run.yaml", "-o", "run.zarr", "--quiet"]) == 0
        stores.append(_store_files(d / "run.zarr"))
    assert stores[0].keys() == stores[1].keys() and len(stores[0]) > 10
    different = [k for k in stores[0] if stores[0][k] != stores[1][k]]
    assert not different, different


def resumed_and_whole(folder: Path, first: str, resumed: str) -> tuple[dict, dict]:
    """The stores (`_store_files`) of config file `resumed` run from a checkpoint that a
    run of config file `first` saved at step 100, and of `first` run uninterrupted; in
    `folder`, the current directory."""
    from gmm_volunteer.cli.commands import main
    from gmm_volunteer.io.results import is_complete
    from gmm_volunteer.run import checkpoint as ck
    from gmm_volunteer.run.engine import Simulation

    assert main(["run", first, "-o", "whole.zarr", "--quiet"]) == 0
    cfg = load_config(folder / first)
    cfg.output.path = "out.zarr"
    saved = ck.checkpoint_dir(folder / "out.zarr")
    Simulation(cfg).run(progress=False, until=100, checkpoint=ck.Checkpointer(saved, 100))
    assert main(["run", resumed, "-o", "out.zarr", "--resume", str(saved), "--quiet"]) == 0
    assert is_complete(folder / "out.zarr")
    return _store_files(folder / "out.zarr"), _store_files(folder / "whole.zarr")


def test_a_checkpoint_of_server_resumes_under_the_same_config_in_servers(tmp_path, monkeypatch):
    """A checkpoint records the resolved config, which is the same for both spellings: a
    run saved under `server:` resumes under `servers:` and ends in the uninterrupted store."""
    monkeypatch.chdir(tmp_path)
    base = {"seed": 3, "steps": 200, "users": {"count": 40}}
    (tmp_path / "single.yaml").write_text(yaml.safe_dump({**base, "server": {"capacity": 2}}))
    (tmp_path / "listed.yaml").write_text(yaml.safe_dump({**base, "servers": [{"capacity": 2}]}))
    out, whole = resumed_and_whole(tmp_path, "single.yaml", "listed.yaml")
    assert whole.keys() == out.keys()
    different = [k for k in whole if whole[k] != out[k] and k != "zarr.json"]
    assert not different, different


REFUSED = [
    ({"servers": [{"name": "a", "capacity": 1}, {"name": "a", "capacity": 2}]},
     "run.yaml: servers: entry 1: name 'a' is also the name of entry 0"),
    ({"servers": TWO, "autoscaler": "reactive", "autoscaler_options": {"server": "fog"}},
     "run.yaml: autoscaler_options: server: 'fog' is not a server of this config"),
    ({"servers": TWO, "scheduler": "jsq"}, "run.yaml: scheduler: 'jsq' chooses between one dedicated server "
                                           "and the volunteers; it does not run a config with several servers"),
    ({"server": {"capacity": 2, "rtt": 0.05}, "execution": {"progress": "paper"}},
     "run.yaml: server.rtt: a network distance needs execution.progress: work"),
    ({"servers": [TWO[0], {**TWO[1], "rtt": 0.1}], "execution": {"progress": "paper"}},
     "run.yaml: servers.0.rtt: a network distance needs"),
]


@pytest.mark.parametrize("extra, needle", REFUSED, ids=["duplicate", "unknown_scaled", "jsq_two", "paper", "paper_two"])
def test_run_refuses_before_any_work(tmp_path, monkeypatch, capsys, extra, needle):
    """Exit 2 naming the file and the key, and nothing written: bad input, and what the
    engine or a policy does not simulate (a router with several servers, D40)."""
    from gmm_volunteer.cli.commands import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({"steps": 10, "users": {"count": 5}, **extra}))
    before = sorted(tmp_path.rglob("*"))
    assert main(["run", "run.yaml", "--quiet"]) == 2
    assert needle in capsys.readouterr().err
    assert sorted(tmp_path.rglob("*")) == before


def _input_download_steps(rtt: float, steps: int = 240) -> dict[int, int]:
    """How many users' input downloads (paper 2.2's download phase) lasted how many steps,
    over a run of 100 users at a fixed round-trip time `rtt` to the server; batching off,
    so that a batch keeps its record from download to execution."""
    import collections

    from gmm_volunteer.model.constants import DOWNLOAD, EXECUTION
    from gmm_volunteer.run.config import config_from_dict
    from gmm_volunteer.run.engine import Simulation

    cfg = config_from_dict({"seed": 5, "steps": steps, "users": {"count": 100},
                            "server": {"capacity": 2, "rtt": rtt}, "execution": {"batching": False}})
    sim = Simulation(cfg)
    lasted: collections.Counter = collections.Counter()
    before: dict = {}
    for t in range(steps):
        sim.step()
        a = sim.arrays
        now = {b: (a.b_phase[b], a.b_born[b]) for b in a.b_list[: a.n_b[0]] if a.b_node[b] > 0}
        for b, (phase, born) in now.items():
            # entered execution in step t from a download that began at the end of step `began`
            if phase == EXECUTION and born == t and before.get(b, (None,))[0] == DOWNLOAD:
                lasted[t - before[b][1]] += 1
        before = now
    return dict(lasted)


@pytest.mark.parametrize("rtt", [0.0, 1.5, 2.0])
def test_a_transfer_waits_its_round_trip_then_moves_its_data(rtt):
    """Closed form of a lightly loaded user (D35): an input of well under a second of its
    link's rate takes floor(rtt) + 1 whole steps, the round trip and then the data, in the
    step where the wait ends (rtt = 2: the wait covers two steps, the data move in the
    third). No download ends sooner; a few share a busy link and last longer."""
    lasted = _input_download_steps(rtt)
    expect = math.floor(rtt) + 1
    assert min(lasted) == expect, lasted
    assert lasted[expect] >= 0.9 * sum(lasted.values()) and sum(lasted.values()) > 100, lasted


def test_the_schema_takes_server_or_servers_not_both():
    """`gmmv schema` (checked by an independent validator, as an editor checks a file)
    accepts what the loader accepts here and marks what it refuses."""
    import jsonschema

    from gmm_volunteer.cli.schema import config_schema

    check = jsonschema.Draft202012Validator(config_schema())
    base = {"steps": 10, "users": {"count": 5}}
    assert not list(check.iter_errors({**base, "server": {"capacity": 2}}))
    assert not list(check.iter_errors({**base, "servers": TWO}))
    for bad in ({}, {"server": {"capacity": 2}, "servers": TWO}, {"servers": []}, {"server": None},
                {"servers": [{"capacity": 1, "rtt": -0.1}]}):
        assert list(check.iter_errors({**base, **bad})), bad


OVERRIDES_BAD = [
    ("servers.2.capacity=1", "servers.2: cannot set servers.2.capacity: servers has 2 entries (0 to 1)"),
    ("servers.x.capacity=1", "servers.x: an entry of servers is named by its number"),
    ("servers.1.capcity=1", "servers.1.capcity: unknown config key; did you mean 'capacity'?"),
    ("servers.1.rtt=-1", "servers.1.rtt.seconds: must be >= 0"),
    ("server.capacity=3", "servers: give either `server:`"),
]


def test_an_override_names_a_server_by_its_number(tmp_path, minimal):
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump({**minimal, "servers": TWO}))
    cfg = load_config(path, ["servers.1.capacity=16", "servers.0.rtt=0.02"])
    assert [s.capacity for s in cfg.servers] == [1, 16] and cfg.servers[0].rtt.seconds == 0.02
    assert cfg.servers[1].rtt.mu == -2.5  # the rest of the entry as written
    for override, problem in OVERRIDES_BAD:
        with pytest.raises(ConfigError) as info:
            load_config(path, [override])
        assert problem in str(info.value), (override, str(info.value))
    single = tmp_path / "one.yaml"
    single.write_text(yaml.safe_dump({**minimal, "server": {"capacity": 2}}))
    with pytest.raises(ConfigError, match="servers: cannot set servers.0.capacity: the config has no servers list"):
        load_config(single, ["servers.0.capacity=3"])
