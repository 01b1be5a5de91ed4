"""User classes (docs/model.md D36) and the energy the service spends (D37)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine_support import make_config
from gmm_volunteer.io.results import build_dataset
from gmm_volunteer.model.errors import ConfigError
from gmm_volunteer.model.params import CPU
from gmm_volunteer.run import checkpoint as ck
from gmm_volunteer.run.engine import Simulation

PHONES = {"name": "phones", "share": 0.5, "capacity": 0.5, "work_scale": 3.0,
          "power": {"idle_w": 1.0, "full_w": 4.0, "mbit_j": 0.5},
          "availability": {"online": {"dist": "exponential", "mean": 600.0},
                           "offline": {"dist": "exponential", "mean": 3000.0}}}
LAPTOPS = {"name": "laptops", "share": 0.3, "allocation": {"base": "fitted", "mean": {"cpu": 0.5}}}
DESKTOPS = {"name": "desktops", "share": 0.2, "capacity": 2.0, "allocation": "dedicated",
            "power": {"idle_w": 40.0, "full_w": 120.0}}
THREE = [PHONES, LAPTOPS, DESKTOPS]


def _users(users: int, classes=None) -> dict:
    d = {"count": users, "capacity": 1.0, "initial_data": "filled"}
    if classes is not None:
        d["classes"] = classes
    return d


def _dataset(model, users=200, steps=600, classes=None, **extra):
    cfg = make_config(model, users=users, steps=steps, **extra)
    if classes is not None:
        cfg = cfg.model_copy(update={"users": cfg.users.model_validate(_users(users, classes))})
    sim = Simulation(cfg)
    return sim, build_dataset(sim.run(progress=False)).load()


def test_one_class_list_is_the_config_without_classes(synthetic_model):
    """A config whose users are one class of every default is today's run, bit for bit:
    every variable of the store equal."""
    for scheduler in ("uniform", "centralized"):
        _, plain = _dataset(synthetic_model, scheduler=scheduler)
        _, one = _dataset(synthetic_model, scheduler=scheduler, classes=[{"name": "users", "share": 1.0}])
        assert sorted(plain.variables) == sorted(one.variables)
        assert "user_energy" in plain and plain["user_energy"].dims == ("time", "user_class")
        for name in plain.variables:
            u, v = plain[name].values, one[name].values
            assert np.array_equal(u, v, equal_nan=u.dtype.kind == "f"), name


def test_classes_are_drawn_once_from_the_seed(synthetic_model):
    """A user's class depends on the seed and the user only: the same for another
    scheduler and server capacity (common random numbers), and the shares are met within
    4 binomial standard deviations (n = 20,000: 4 sd of the 0.5 share is 0.014)."""
    n = 20_000
    a = make_config(synthetic_model, users=n, steps=1, seed=3)
    a = a.model_copy(update={"users": a.users.model_validate(_users(n, THREE))})
    b = a.model_copy(update={"scheduler": "centralized", "server": a.server.model_copy(update={"capacity": 50.0})})
    ca, cb = Simulation(a).arrays.node_class, Simulation(b).arrays.node_class
    assert ca[0] == 0 and np.array_equal(ca, cb)
    for k, c in enumerate(THREE):
        p = c["share"]
        share = np.mean(ca[1:] == k + 1)
        assert abs(share - p) <= 4 * math.sqrt(p * (1 - p) / n), (c["name"], share)


def test_each_class_follows_its_own_laws(synthetic_model):
    """Phones are online 600 / 3600 of the time (their exponential laws), the others
    about a tenth (the default laws): the stationary start per class, within 4 binomial
    sd; and the phones' devices are half the base profile with 3x the volunteer work."""
    n = 6000
    sim, _ = _dataset(synthetic_model, users=n, steps=1, classes=THREE)
    cls, online = sim.arrays.node_class[1:], sim.arrays.online[1:]
    phones = cls == 1
    p = 600.0 / 3600.0
    assert abs(online[phones].mean() - p) <= 4 * math.sqrt(p * (1 - p) / phones.sum())
    assert online[~phones].mean() < 0.2
    P = sim.params
    np.testing.assert_array_equal(P.amax[1], P.amax[2] * 0.5)
    np.testing.assert_array_equal(P.amax[3], P.amax[2] * 2.0)
    np.testing.assert_allclose(P.wk_vol[1], 3.0 * P.wk_vol[2])
    assert np.all(P.wk_vol[0] == 1.0)
    assert P.al_const.tolist() == [1, 0, 0, 1]  # server and desktops dedicated
    assert P.al_mean[2, CPU] == 0.5


def test_per_class_series_add_up_to_the_totals(synthetic_model):
    """Online users, CPU and subtask events per class sum to the users' totals (CPU in
    float32: 1e-4 relative); each request's class is its user's."""
    sim, ds = _dataset(synthetic_model, users=300, steps=900, classes=THREE, server=2.0)
    assert list(ds["user_class"].values) == ["phones", "laptops", "desktops"]
    np.testing.assert_array_equal(ds["class_online_users"].sum("user_class"), ds["online_users"])
    cpu = ds["user_consumption"].sel(resource="cpu").values / 100.0
    np.testing.assert_allclose(ds["class_cpu_given"].sum("user_class").values, cpu, rtol=1e-4, atol=1e-4)
    assert cpu.sum() > 0
    np.testing.assert_array_equal(ds["class_subtask_events"].sum("user_class").values,
                                  ds["subtask_events"].sel(node_class="user").values)
    users = ds["request_user"].values
    got = ds["request_user_class"].values
    mask = ~np.isnan(users)
    np.testing.assert_array_equal(got[mask], sim.arrays.node_class[users[mask].astype(int)] - 1)


def test_energy_follows_the_power_models(synthetic_model):
    """The server draws idle_w per base profile of capacity plus the CPU slope; a class's
    devices draw only what the service adds: (full - idle) x CPU / their CPU maximum, plus
    mbit_j per Mbit moved. Checked against the stored consumption."""
    sim, ds = _dataset(synthetic_model, users=300, steps=900, classes=THREE, server=2.0)
    base_cpu = sim.cfg.base_profile.cpu
    srv_cpu = ds["server_consumption"].sel(resource="cpu").values.astype(np.float64)
    idle, full = sim.cfg.server.power.idle_w, sim.cfg.server.power.full_w
    np.testing.assert_allclose(ds["server_energy"].values, idle * 2.0 + (full - idle) * srv_cpu / base_cpu,
                               rtol=1e-12)
    phones = ds["user_energy"].sel(user_class="phones").values
    want = (3.0 * ds["class_cpu_given"].sel(user_class="phones").values.astype(np.float64) * 100.0
            / sim.params.amax[1, CPU] + 0.5 * ds["class_transfer"].sel(user_class="phones").values)
    np.testing.assert_allclose(phones, want, rtol=1e-6)
    assert ds["user_energy"].attrs["units"] == "J" and ds["server_energy"].attrs["units"] == "J"
    assert (ds["user_energy"].values >= 0).all() and phones.sum() > 0


@pytest.mark.parametrize("change, needle", [
    ({"share": 0.6}, "users.classes: the shares must sum to 1"),
    ({"colour": "red"}, "users.classes.0.colour: unknown"),
    ({"power": {"idle_w": -1.0, "full_w": 2.0}}, "users.classes.0.power.idle_w: must be >= 0"),
    ({"name": None}, "users.classes.0.name"),
])
def test_bad_classes_are_refused_naming_the_key(synthetic_model, change, needle):
    from gmm_volunteer.run.config import config_from_dict

    first = {k: v for k, v in {**PHONES, **change}.items() if v is not None}
    d = {"steps": 10, "users": _users(10, [first, LAPTOPS, DESKTOPS]), "server": {"capacity": 1.0},
         "model": str(synthetic_model)}
    with pytest.raises(ConfigError) as err:
        config_from_dict(d, source="c.yaml")
    assert needle in str(err.value)


def test_a_resumed_run_with_classes_is_the_uninterrupted_run(synthetic_model, tmp_path):
    """The classes and the per-class counts are state: a checkpoint holds them."""
    from test_checkpoint import assert_same_store
    from gmm_volunteer.io.results import write_result

    cfg = make_config(synthetic_model, users=200, steps=1500, seed=4)
    cfg = cfg.model_copy(update={"users": cfg.users.model_validate(_users(200, THREE))})
    cfg.output.path = str(tmp_path / "resumed.zarr")
    write_result(Simulation(cfg).run(progress=False), tmp_path / "whole.zarr")
    sim = Simulation(cfg)
    folder = ck.checkpoint_dir(cfg.output.path)
    sim.run(progress=False, until=700, checkpoint=ck.Checkpointer(folder, 700))
    resumed = ck.restore(ck.checkpoints(folder)[-1], cfg)
    write_result(resumed.run(progress=False), tmp_path / "resumed.zarr")
    assert_same_store(tmp_path / "resumed.zarr", tmp_path / "whole.zarr")


def test_summary_prints_a_row_per_class_and_the_energy_per_request(synthetic_model):
    """`gmmv summarize`'s text: per-class rows with several classes, none with one; the
    energy per completed request is the run's joules over its completed requests."""
    from gmm_volunteer.experiments.summary import run_metrics, summarize

    _, ds = _dataset(synthetic_model, users=300, steps=900, classes=THREE, server=2.0)
    text = summarize(ds)
    assert "Per user class" in text
    for c in THREE:
        assert any(line.startswith(c["name"] + " ") for line in text.splitlines()), c["name"]
    m = run_metrics(ds)
    done = int(m["requests"].sel(outcome="completed").sum())
    joules = float(ds["server_energy"].sum()) + float(ds["user_energy"].sum())
    assert float(m["energy_per_request"]) == pytest.approx(joules / done, rel=1e-12)
    assert int(m["class_requests"].sum()) == int(m["requests"].sum())
    _, one = _dataset(synthetic_model, users=100, steps=300)
    text = summarize(one)
    assert "Energy" in text and "Per user class" not in text


def test_the_shipped_three_class_config_runs_and_records_per_class(tmp_path):
    """configs/three_classes.yaml (reduced to 300 users, 600 steps) runs; its store names
    the classes and has per-class online users and energy with CF units."""
    from pathlib import Path

    from gmm_volunteer.io.results import open_result, write_result
    from gmm_volunteer.run.config import load_config

    path = Path(__file__).resolve().parents[1] / "configs" / "three_classes.yaml"
    cfg = load_config(path, ["users.count=300", "steps=600"])
    write_result(Simulation(cfg).run(progress=False), tmp_path / "three.zarr")
    ds = open_result(tmp_path / "three.zarr")
    assert list(ds["user_class"].values) == ["phones", "laptops", "desktops"]
    assert ds["class_online_users"].dims == ("time", "user_class") and ds["class_online_users"].attrs["units"] == "1"
    assert ds["user_energy"].attrs["units"] == "J" and ds["server_energy"].attrs["units"] == "J"
    assert int(ds["class_online_users"].sum()) == int(ds["online_users"].sum()) > 0


def test_an_override_names_a_class_by_its_number(synthetic_model, tmp_path):
    """`--set users.classes.N.key=...` reaches a class's keys (docs/usage.md, "User
    classes"); the shares are checked on the overridden config, and a class that is not
    in the list is refused naming it."""
    import yaml

    from gmm_volunteer.run.config import load_config

    path = tmp_path / "three.yaml"
    path.write_text(yaml.safe_dump({"steps": 10, "users": _users(10, THREE), "server": {"capacity": 1.0},
                                   "model": str(synthetic_model)}))
    cfg = load_config(path, ["users.classes.0.share=0.4", "users.classes.1.share=0.4",
                             "users.classes.2.power.full_w=90"])
    assert [c.share for c in cfg.users.classes] == [0.4, 0.4, 0.2]
    assert cfg.users.classes[2].power.full_w == 90 and cfg.users.classes[2].power.idle_w == 40
    assert cfg.users.classes[0].work_scale == 3.0  # the rest of the entry as written
    for override, problem in [("users.classes.0.share=0.4", "users.classes: the shares must sum to 1"),
                              ("users.classes.3.share=0.1", "users.classes.3"),
                              ("users.classes.0.colour=red", "users.classes.0.colour: unknown")]:
        with pytest.raises(ConfigError) as err:
            load_config(path, [override])
        assert problem in str(err.value), (override, str(err.value))
