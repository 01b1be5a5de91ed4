"""Per-run routing measures: estimator error, accuracy served, variant share."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from gmm_volunteer.policies.routing import DECISION_FIELDS
from gmm_volunteer.experiments.routing_metrics import estimator_error, routing_metrics
from gmm_volunteer.model.variants import accuracy_served, variant_share


def _decisions(pred, real):
    d = np.full((len(pred), len(DECISION_FIELDS)), 0.0)
    d[:, DECISION_FIELDS.index("predicted")] = pred
    d[:, DECISION_FIELDS.index("realized")] = real
    d[:, DECISION_FIELDS.index("predicted_router")] = np.nan  # a router that predicts none
    return xr.Dataset({"decision": (("decision", "decision_field"), d)})


def test_estimator_error_is_the_mean_absolute_relative_error_of_completed_decisions():
    ds = _decisions([2.0, 3.0, 10.0, 4.0], [4.0, 3.0, 5.0, np.nan])
    mare, n = estimator_error(ds)
    assert n == 3
    assert mare == pytest.approx((0.5 + 0.0 + 1.0) / 3)


def test_the_routers_own_prediction_is_its_error_when_it_logs_one():
    """The Oracle, JSQ-S and LA-IMR log the delay they decide by (issue 34)."""
    ds = _decisions([2.0, 3.0], [4.0, 3.0])
    d = ds["decision"].values.copy()
    d[:, DECISION_FIELDS.index("predicted_router")] = [4.0, 6.0]
    ds = ds.assign(decision=(("decision", "decision_field"), d))
    ds.attrs["scheduler"] = "oracle"
    assert estimator_error(ds)[0] == pytest.approx(0.5)
    assert estimator_error(ds, "hybrid")[0] == pytest.approx(0.25)


def test_measures_are_nan_where_they_do_not_apply():
    ds = xr.Dataset()
    m = routing_metrics(ds)
    counts = ("estimator_decisions", "estimator_mape_decisions")
    assert all(np.isnan(v[1]) for k, v in m.items() if k not in counts)
    assert all(m[k][1] == 0 for k in counts)


def test_accuracy_served_and_variant_share():
    ds = xr.Dataset({
        "request_accuracy": (("request",), [0.718, np.nan, 0.761, 0.74]),
        "subtasks_served": (("a", "b"), np.array([[5, 0, 0], [0, 6, 2], [0, 0, 2]])),
        "subtask_type_accuracy": (("b",), [np.nan, 0.718, 0.761]),
    })
    assert accuracy_served(ds) == pytest.approx((0.718 + 0.761 + 0.74) / 3)
    assert variant_share(ds) == pytest.approx(2 / 10)


def test_each_estimate_is_scored_on_the_same_decisions():
    ds = _decisions([2.0, 3.0], [4.0, 3.0])
    d = ds["decision"].values.copy()
    d[:, DECISION_FIELDS.index("predicted_model")] = [4.0, 6.0]
    d[:, DECISION_FIELDS.index("predicted_queue")] = [8.0, 3.0]
    ds = ds.assign(decision=(("decision", "decision_field"), d))
    assert estimator_error(ds, "hybrid")[0] == pytest.approx(0.25)
    assert estimator_error(ds, "model_only")[0] == pytest.approx(0.5)
    assert estimator_error(ds, "queue_only")[0] == pytest.approx(0.5)
    ds.attrs["scheduler"] = "model_only"  # the router's own estimate by default
    assert estimator_error(ds)[0] == pytest.approx(0.5)
    m = routing_metrics(ds)
    assert m["estimator_mare_hybrid"][1] == pytest.approx(0.25)


def test_herding_table_leaves_out_columns_older_stores_lack():
    from gmm_volunteer.experiments.routing_report import herding_table

    old = {n: (("scheduler",), [1.0, 2.0]) for n in (
        "herding_max_placed_mean", "herding_max_placed_max", "herding_server_free_share", "herding_excess_max")}
    ds = xr.Dataset(old, coords={"scheduler": ["asrb", "jsq"]})
    assert list(herding_table(ds).columns) == [
        "most placed on one node per step (mean)", "most placed on one node in a step (max)",
        "share of steps: server free, volunteer over its cores", "largest volunteer excess over its cores"]
    new = ds.assign(herding_volunteer_max=(("scheduler",), [2.0, 3.0]),
                    herding_volunteer_ge5_share=(("scheduler",), [0.0, 0.1]),
                    herding_beyond_bound_share=(("scheduler",), [0.0, 0.2]))
    df = herding_table(new)
    assert df.shape == (2, 7) and df.loc["jsq", "share of steps: volunteer given > cores + 1, server free"] == 0.2
