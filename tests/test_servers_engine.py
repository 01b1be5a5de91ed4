"""The engine with several dedicated servers (docs/model.md D35, D39, D40): one server
runs as 0.10.0 did, bit for bit; two servers keep the state's invariants, both serve,
and their per-server outputs add up to the core ones; the requester's round trip to a
server against its closed form; the shipped two-server config at reduced size."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from test_invariants import run_checked
from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.run.engine import Simulation

REPO = Path(__file__).resolve().parents[1]

TWO = [{"name": "edge", "capacity": 1, "rtt": {"dist": "uniform", "low": 0.005, "high": 0.02}},
       {"name": "cloud", "capacity": 4, "rtt": {"dist": "uniform", "low": 0.06, "high": 0.12}}]


AFTER_THE_RUN = ("server_energy", "user_energy")  # from the recorded consumption (D37)


def record_digest(rec) -> str:
    """sha256 (16 hex digits) of every array of a run record: the requests, the per-step
    series and the variables a run adds (`policy_series`), in name order; but the
    energies, which are computed after the run from the recorded consumption with power
    models that 0.11.0 changed (D37), not a trajectory."""
    h = hashlib.sha256()
    for name in ("request_user", "request_type", "request_start", "request_end", "request_outcome",
                 "online_users", "active_requests", "server_allocation", "server_consumption",
                 "user_consumption", "subtask_events", "completed_work", "dedicated_capacity",
                 "scaling_actions", "scaling_action_cost"):
        h.update(name.encode())
        h.update(np.ascontiguousarray(getattr(rec, name)).tobytes())
    for name in sorted(set(rec.policy_series) - set(AFTER_THE_RUN)):
        h.update(name.encode())
        h.update(np.ascontiguousarray(rec.policy_series[name][1]).tobytes())
    return h.hexdigest()[:16]


# One server, configs that exercise what the generalisation touched (allocations, links,
# the executor, the three schedulers, events, classes, the control plane): 300 users,
# 600 steps of the shipped default bundle. Digests written by 0.10.0 (commit 731ef99),
# the energies left out (`record_digest`).
ONE_SERVER = {
    "centralized_fitted_freeze": {"scheduler": "centralized", "server": {"capacity": 2, "allocation": "fitted"},
                                  "allocation": {"restart": "freeze"}},
    "affinity_classes_events": {
        "scheduler": "affinity", "server": {"capacity": 2},
        "users": {"count": 300, "classes": [{"name": "phone", "share": 0.5, "capacity": 0.5},
                                            {"name": "laptop", "share": 0.5}]},
        "events": [{"kind": "overload", "nodes": [0, 3], "at_s": 100, "duration_s": 200, "factor": 0.5},
                   {"kind": "depart", "user_range": [0.1, 0.2], "at_s": 300, "duration_s": 100}]},
    "uniform_carry_substep_fifo": {"server": {"capacity": 2},
                                   "execution": {"phase_changes": "carry_over", "latency": "substep",
                                                 "discipline": "fifo"}},
    "uniform_reactive": {"server": {"capacity": 2}, "autoscaler": "reactive"},
}
DIGESTS_0_10_0 = {
    "centralized_fitted_freeze": "5e3496a6efaaf3c6",
    "affinity_classes_events": "f2a5acffe20f79af",
    "uniform_carry_substep_fifo": "d0038cec6bda566d",
    "uniform_reactive": "debca63c8f8880dd",
}


def one_server_config(name: str):
    return config_from_dict({"seed": 2, "steps": 600, "users": {"count": 300}, **ONE_SERVER[name]})


@pytest.mark.parametrize("name", sorted(ONE_SERVER))
def test_one_server_runs_as_0_10_0(name):
    rec = Simulation(one_server_config(name)).run(progress=False)
    assert record_digest(rec) == DIGESTS_0_10_0[name]


@pytest.mark.parametrize("scheduler", ["centralized", "uniform", "affinity"])
def test_two_servers_keep_the_invariants_and_add_up(scheduler):
    """Every step's invariants hold (testing/invariants.py), both servers finish work,
    and the per-server series sum to the core ones (float32 sums in another order:
    1e-5 relative)."""
    cfg = config_from_dict({"seed": 4, "steps": 400, "users": {"count": 200}, "servers": TWO,
                            "scheduler": scheduler})
    sim = run_checked(cfg, 400)
    assert sim.params.n_srv == 2 and sim.params.n_nodes == 202
    rec = sim.record()
    series = rec.policy_series
    work = series["work_per_server"][1].sum(axis=0)
    assert np.all(work > 0), work
    np.testing.assert_allclose(work.sum(), rec.completed_work[:, 0].sum(), rtol=1e-5)
    np.testing.assert_allclose(series["allocation_per_server"][1].sum(axis=1), rec.server_allocation, rtol=1e-5)
    np.testing.assert_allclose(series["consumption_per_server"][1].sum(axis=1), rec.server_consumption,
                               rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(series["energy_per_server"][1].sum(axis=1), rec.policy_series["server_energy"][1])
    assert rec.policy_coords["server"] == ["edge", "cloud"]
    assert rec.request_user.min() >= 1 and rec.request_user.max() <= 200  # users by number


def test_users_are_the_same_whatever_the_number_of_servers():
    """User draws are keyed by the user's number (D35): a second server leaves every
    user's class and round-trip time to the first server as they were."""
    base = {"seed": 6, "steps": 5, "users": {"count": 50, "classes": [{"name": "a", "share": 0.3},
                                                                       {"name": "b", "share": 0.7}]}}
    one = Simulation(config_from_dict({**base, "servers": TWO[:1]}))
    two = Simulation(config_from_dict({**base, "servers": TWO}))
    np.testing.assert_array_equal(one.arrays.node_class[1:], two.arrays.node_class[2:])
    np.testing.assert_array_equal(one.params.sv_rtt[0, 1:], two.params.sv_rtt[0, 2:])
    near = np.argmin(two.params.sv_rtt[:, 2:], axis=0)
    np.testing.assert_array_equal(two.params.nd_home[2:], near)  # the nearest is home
    assert np.all(two.params.nd_home[2:] == 0)  # the edge's 5-20 ms beat the cloud's 60-120


@pytest.mark.parametrize("rtt", [None, 0.0, 0.03, 1.5, 2.0])
def test_a_server_result_reaches_its_requester_a_round_trip_later(tmp_path, rtt):
    """Closed form (D39): a lightly loaded server executes a subtask of 0.3 CPU-s in the
    step after its request arrived (latency 1 without a distance); with a fixed round
    trip r the result is in at that step's end + r, and the request ends at the first
    step end at or after it: every completed request takes exactly 1 + ceil(r) steps."""
    from test_latency_substep import _bundle, _config

    model = _bundle(tmp_path / "det", mean_work_s=0.3, deterministic=True)
    cfg = _config(model, users=40, steps=600, think_s=20.0, latency="whole_step", phase_changes="step")
    d = yaml.safe_load(cfg.to_yaml())
    d["scheduler"] = "centralized"
    if rtt is not None:
        d["server"]["rtt"] = rtt
    rec = Simulation(config_from_dict(d)).run(progress=False)
    lat = rec.request_latency[rec.request_outcome == 0]
    assert lat.size > 500
    expect = 1 + (0 if rtt is None else math.ceil(rtt))
    assert set(np.unique(lat).tolist()) == {expect}


def test_the_shipped_two_server_config_runs_and_stores_per_server(tmp_path, monkeypatch):
    """configs/continuum_two_servers.yaml at reduced size (300 users, 300 steps): `gmmv
    run` writes a store with per-server variables on a `server` dimension, and `gmmv
    summarize` prints a row per server."""
    from gmm_volunteer.cli.commands import main
    from gmm_volunteer.io.results import open_result

    d = yaml.safe_load((REPO / "configs" / "continuum_two_servers.yaml").read_text())
    d["users"]["count"], d["steps"] = 300, 300
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(d))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "run.yaml", "-o", "two.zarr", "--quiet"]) == 0
    ds = open_result(tmp_path / "two.zarr")
    assert list(ds["server"].values) == ["edge", "cloud"]
    for name in ("allocation_per_server", "consumption_per_server", "capacity_per_server"):
        assert ds[name].dims == ("time", "server", "resource") and ds[name].attrs["units_coordinate"] == "resource_unit"
    assert ds["work_per_server"].attrs["units"] == "s" and ds["energy_per_server"].attrs["units"] == "J"
    cores = ds["capacity_per_server"].sel(resource="cpu").isel(time=0).values / 100.0
    np.testing.assert_array_equal(cores, [4.0, 32.0])  # the sizes the config states
    assert float(ds["work_per_server"].sum()) > 0
    from gmm_volunteer.experiments.summary import summarize

    text = summarize(ds)
    assert "Per server" in text and "\nedge " in text and "\ncloud " in text


@pytest.mark.parametrize("phase_changes", ["step", "carry_over"])
def test_substep_round_trips_have_their_closed_form(tmp_path, phase_changes):
    """Under latency: substep (D34) with a fixed round trip r to the one server, one user,
    work of exactly w = 1.3 CPU-s at one core, input and result 0.4 s each on their
    links: a request the server ran ends w + r after it arrived (D39). One a volunteer ran
    waits r, moves its input, executes and uploads, waiting r again (D35): with phase
    changes at step boundaries (r = 0.03 s) the execution starts at the next boundary
    and the upload at the one after its end, 3 + r + 0.4 s; carried over inside the step
    (D26) w + 2 r + 0.8 s: with r = 0.2 s the upload begins 0.1 s before a step boundary
    (at 0.2 + 0.4 + 1.3), so its wait runs on past the boundary. To 1e-9 s."""
    from test_latency_substep import OUT_MB, BAND_OUT, _bundle, _config, _transfer_s

    w, r = 1.3, (0.03 if phase_changes == "step" else 0.2)
    model = _bundle(tmp_path / "det", mean_work_s=w, deterministic=True)
    d = yaml.safe_load(_config(model, users=1, steps=2000, think_s=3.0, phase_changes=phase_changes).to_yaml())
    d["server"]["rtt"] = r
    rec = Simulation(config_from_dict(d)).run(progress=False)
    lat = rec.request_latency[rec.request_outcome == 0]
    assert lat.dtype == np.float64 and lat.size > 150
    on_server = np.abs(lat - (w + r)) < 1e-9
    volunteer = 3.0 + r + 8.0 * OUT_MB / BAND_OUT if phase_changes == "step" else w + 2 * r + _transfer_s()
    on_volunteer = np.abs(lat - volunteer) < 1e-9
    assert np.all(on_server | on_volunteer), np.unique(np.round(lat, 6))
    served = rec.subtask_events[:, :, 1].sum(axis=0)  # completions: server, volunteers
    assert on_server.sum() == served[0] and on_volunteer.sum() == served[1] > 0


def test_a_two_server_run_resumes_from_its_checkpoint_as_if_uninterrupted(tmp_path, monkeypatch):
    """A checkpoint of a two-server run (autoscaler scaling the cloud) resumes to the
    store the uninterrupted run writes, file by file (bar the measured wall time)."""
    from test_servers import resumed_and_whole

    monkeypatch.chdir(tmp_path)
    (tmp_path / "two.yaml").write_text(yaml.safe_dump({
        "seed": 3, "steps": 200, "users": {"count": 60}, "servers": TWO, "scheduler": "affinity",
        "autoscaler": "reactive", "autoscaler_options": {"server": "cloud", "unit": 1.0, "period": 20}}))
    out, whole = resumed_and_whole(tmp_path, "two.yaml", "two.yaml")
    assert whole.keys() == out.keys() and any("work_per_server" in k for k in whole)
    different = [k for k in whole if whole[k] != out[k] and k != "zarr.json"]
    assert not different, different


def test_a_simulation_refuses_a_policy_that_does_not_choose_among_servers():
    """Built directly (not through `gmmv run`'s preflight), a simulation of two servers
    and a router that knows one is refused naming the router (D40), not run on the first
    server alone."""
    cfg = config_from_dict({"seed": 1, "steps": 5, "users": {"count": 10}, "servers": TWO, "scheduler": "jsq"})
    with pytest.raises(ValueError, match="scheduler: 'jsq' chooses between one dedicated server"):
        Simulation(cfg)


@pytest.mark.parametrize("autoscaler", ["la_imr", "capacity_rule"])
def test_an_autoscaler_counting_routed_load_refuses_several_servers(autoscaler):
    """`load: routed` (D41) counts the subtasks started on every server, so with two
    servers it is refused naming the option; `load: all` reads no placement and runs."""
    base = {"seed": 1, "steps": 5, "users": {"count": 10}, "servers": TWO, "autoscaler": autoscaler,
            "autoscaler_options": {"server": "cloud"}}
    with pytest.raises(ValueError, match=f"autoscaler: '{autoscaler}' with `load: routed`"):
        Simulation(config_from_dict(base))
    base["autoscaler_options"] = {"server": "cloud", "load": "all"}
    Simulation(config_from_dict(base)).run()
