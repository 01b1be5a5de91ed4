"""The autoscaler slot (issue 10 item 3; docs/model.md D17): server capacity as state,
the `fixed` default, config validation, the recorded capacity series and actions,
capacity-hours, and the conformance checker over autoscalers."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from gmm_volunteer.run.config import ConfigError, config_from_dict
from gmm_volunteer.run.engine import Simulation, simulate
from gmm_volunteer.policies import autoscaler_names
from gmm_volunteer.testing.conformance import ConformanceError, check_policy
from gmm_volunteer.io.results import build_dataset
from gmm_volunteer.experiments.summary import capacity_hours, run_metrics, summarize

BASE = np.array([100.0, 100.0, 200.0, 2500.0, 3000.0])
STEP_UP = "test_autoscale:StepUp"  # an autoscaler outside the package, by module:Class


def cfg_of(model, **kw):
    data = {"steps": 120, "seed": 3, "model": str(model), "users": {"count": 20},
            "server": {"capacity": 2.0},
            "requests": {"think_time": {"dist": "exponential", "mean": 10.0}}}
    data.update(kw)
    return config_from_dict(data)


def test_fixed_is_the_default_and_records_a_constant_capacity(synthetic_model):
    cfg = cfg_of(synthetic_model)
    assert cfg.autoscaler == "fixed" and cfg.autoscaler_options == {}
    rec = simulate(cfg, progress=False)
    assert rec.dedicated_capacity.shape == (120, 5)
    np.testing.assert_array_equal(rec.dedicated_capacity, np.tile((2.0 * BASE).astype(np.float32), (120, 1)))
    assert rec.scaling_actions.shape == (0, 4)
    assert rec.attrs["autoscaler"] == "fixed"


@pytest.mark.parametrize("bad, needle", [
    ({"autoscaler": "no_such_scaler"}, "autoscaler: unknown autoscaler 'no_such_scaler'"),
    ({"autoscaler_options": {"bogus": 1}}, "autoscaler_options.bogus"),
    ({"autoscaler": STEP_UP, "autoscaler_options": {"period": 0}}, "autoscaler_options.period"),
    ({"autoscaler": STEP_UP, "autoscaler_options": {"monitor": {"lag": "x"}}}, "autoscaler_options.monitor.lag"),
    ({"autoscaler": STEP_UP, "autoscaler_options": {"min_units": 5, "max_units": 2}},
     "autoscaler_options.max_units: must be >= min_units"),
    ({"autoscaler": STEP_UP, "autoscaler_options": {"initial_units": 99}}, "autoscaler_options.initial_units"),
])
def test_bad_autoscaler_config_names_the_key(synthetic_model, bad, needle):
    with pytest.raises(ConfigError) as exc:
        cfg_of(synthetic_model, **bad)
    assert needle in str(exc.value)


def test_bad_autoscaler_option_exits_2_from_the_cli(synthetic_model, tmp_path, capsys):
    from gmm_volunteer.cli.commands import main

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"steps": 10, "users": {"count": 5}, "server": {"capacity": 1},
                                    "model": str(synthetic_model), "autoscaler": STEP_UP,
                                    "autoscaler_options": {"bogus": 1}}))
    assert main(["run", str(path)]) == 2
    assert "autoscaler_options.bogus" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_the_allocation_reads_the_capacity_state(synthetic_model):
    """Capacity is state: changing it between steps changes the server's next allocation
    (dedicated server: allocation = capacity), and only the server's."""
    sim = Simulation(cfg_of(synthetic_model))
    for _ in range(5):
        sim.step()
    users_before = sim.arrays.alloc[1:].copy()
    np.testing.assert_array_equal(sim.arrays.alloc[0], 2.0 * BASE)
    sim.arrays.srv_cap[:] = 3.0 * BASE
    sim.step()
    np.testing.assert_array_equal(sim.arrays.alloc[0], 3.0 * BASE)
    np.testing.assert_array_equal(sim.arrays.ser_salloc[5], (3.0 * BASE).astype(np.float32))
    assert users_before.shape == sim.arrays.alloc[1:].shape


def test_capacity_series_and_actions_reach_the_result_store(synthetic_model):
    cfg = cfg_of(synthetic_model, steps=400, autoscaler=STEP_UP,
                 autoscaler_options={"period": 10, "provisioning_delay": 20, "cooldown": 60, "max_units": 8})
    rec = simulate(cfg, progress=False)
    ds = build_dataset(rec)
    assert ds["dedicated_capacity"].dims == ("time", "resource")
    assert ds["dedicated_capacity"].attrs["units_coordinate"] == "resource_unit"
    assert "Mbit/s" in list(ds["resource_unit"].values)
    assert ds["scaling_actions"].dims == ("scaling_action", "action_field")
    assert list(ds["action_field"].values) == ["ordered", "effective", "from_units", "to_units"]
    # one unit more every 100 s from 2 (ordered at 100, 200, 300; 20 s to serve)
    assert ds["scaling_actions"].values.tolist() == [[100, 120, 2, 3], [200, 220, 3, 4], [300, 320, 4, 5]]
    units = rec.dedicated_capacity[:, 2] / 200.0
    assert units[119] == 2 and units[120] == 3 and units[399] == 5
    # each action's cost: + 1 unit from its effective step to the end (400 steps)
    np.testing.assert_allclose(ds["scaling_action_cost"].values, [280 / 3600, 180 / 3600, 80 / 3600])
    total = 2 * 400 / 3600 + ds["scaling_action_cost"].values.sum()
    np.testing.assert_allclose(capacity_hours(ds)[2] / 200.0, total, rtol=1e-9)
    # capacity-hours = sum over steps of the capacity in effect / 3600
    np.testing.assert_allclose(capacity_hours(ds), rec.dedicated_capacity.astype(np.float64).sum(0) / 3600.0)
    text = summarize(ds)
    assert f"Dedicated capacity (autoscaler {STEP_UP}; 3 scaling actions)" in text and "capacity-hours" in text


def test_capacity_hours_of_a_fixed_run_and_of_an_old_store(synthetic_model):
    rec = simulate(cfg_of(synthetic_model, steps=360), progress=False)
    ds = build_dataset(rec)
    # 2 x base for 360 s = 0.1 h: CPU 400 % x 0.1 h = 40 %·h
    np.testing.assert_allclose(run_metrics(ds)["capacity_hours"].values, 2.0 * BASE * 0.1, rtol=1e-6)
    from gmm_volunteer.experiments.analysis import quantity  # registers the ds.gmmv accessor

    assert float(ds.gmmv.metrics()["scaling_actions_total"]) == 0
    np.testing.assert_allclose(ds.gmmv.capacity_hours().values, 2.0 * BASE * 0.1, rtol=1e-6)
    assert float(quantity(ds, "cpu_core_hours")) == pytest.approx(0.4)
    # A store written before autoscalers existed: the constant capacity of its config.
    old = ds.drop_vars(["dedicated_capacity", "scaling_actions", "action_field"])
    np.testing.assert_allclose(capacity_hours(old), 2.0 * BASE * 0.1, rtol=1e-6)


CONFORMANCE_OPTIONS = {"reactive": {"target": 5.0}}  # low enough to scale in 200 steps


@pytest.mark.parametrize("name", autoscaler_names())
def test_registered_autoscalers_conform(synthetic_model, name):
    # Short periods and delays so that 200 steps see scaling actions.
    opts = {} if name == "fixed" else {"period": 5, "provisioning_delay": 7, "cooldown": 20,
                                       "monitor": {"period": 5, "lag": 0, "window": 30}}
    opts.update(CONFORMANCE_OPTIONS.get(name, {}))
    assert "control plane" in check_policy("autoscaler", name, opts, model=synthetic_model)


def test_an_outside_autoscaler_named_by_module_and_class_conforms(synthetic_model):
    checks = check_policy("autoscaler", STEP_UP, {"period": 5, "provisioning_delay": 3, "cooldown": 10},
                          model=synthetic_model)
    assert "control plane" in checks


def test_conformance_rejects_an_autoscaler_that_breaks_the_control_plane(synthetic_model):
    """A policy that moves the capacity itself, behind the control plane's back."""
    with pytest.raises(ConformanceError, match="without an action|not units x unit"):
        check_policy("autoscaler", "test_autoscale:Sneaky", {"period": 5}, model=synthetic_model)


from gmm_volunteer.policies.autoscalers.base import Autoscaler, AutoscalerOptions  # noqa: E402


class StepUp(Autoscaler):
    """One unit more at every multiple of 100 s (a constructed policy)."""

    name = "step-up"
    Options = AutoscalerOptions

    def desired(self, obs, units, t):
        return units + 1 if t % 100 == 0 else units


class Sneaky(Autoscaler):
    name = "sneaky"
    Options = AutoscalerOptions

    def bind(self, control):
        super().bind(control)
        self.control = control

    def desired(self, obs, units, t):
        # Wrong: bypasses the control plane (no action recorded, no delay).
        self.control._changes.append((t, units + 1))
        return units
