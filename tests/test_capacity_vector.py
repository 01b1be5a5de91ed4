"""Eq. 3 over a capacity vector: the search on feasibility oracles with a known optimum,
one small real simulation, parsing and bad input (docs/optimisation.md)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gmm_volunteer.experiments.capacity_vector import (
    RESOURCES,
    Target,
    VectorSearch,
    frontier,
    parse_level_targets,
    parse_resource_list,
    parse_resource_values,
)
from gmm_volunteer.run.config import ConfigError, load_config

from helpers import write_tiny_grid

BAND_IN, BAND_OUT, CPU, MEMORY, STORAGE = range(5)
TOL = 0.05


def oracle(test):
    """An evaluator whose verdict is `test(m)`; counts its calls."""
    calls = []

    def evaluate(m):
        calls.append(np.array(m))
        return bool(test(m)), {}

    evaluate.calls = calls
    return evaluate


def weights(**w):
    out = np.zeros(len(RESOURCES))
    for r, x in w.items():
        out[RESOURCES.index(r)] = x
    return out


def test_box_feasible_set_gives_its_corner():
    # Feasible iff every resource is above its own floor: the cheapest vector is the
    # corner of floors (band_out's floor is below the range: it goes to the bottom).
    floor = np.array([3.7, 0.2, 12.5, 2.2, 0.0])
    ev = oracle(lambda m: np.all(m >= floor))
    searched = ["band_in", "band_out", "cpu", "memory"]
    res = VectorSearch(ev, np.full(5, 30.0), searched, weights(band_in=1, band_out=1, cpu=1, memory=0.5),
                       lo=1.0, hi=100.0, tol=TOL, max_evaluations=200).run()
    m = res.best.m
    # Bisection stops within the relative tolerance above each floor (or at lo = 1).
    for i, r in enumerate(RESOURCES[:4]):
        want = max(floor[i], 1.0)
        assert want <= m[i] <= want * (1 + TOL), (r, m[i], want)
    assert m[STORAGE] == 30.0  # not searched: kept at the start value
    assert not res.stopped_by_budget
    # Certificate: each searched resource not at the bottom has an infeasible neighbour
    # within the tolerance below it.
    for r, p in res.neighbours.items():
        i = RESOURCES.index(r)
        if m[i] > 1.0:
            value, witness = p
            assert not witness.feasible and witness.m[i] == value and m[i] / value <= 1 + TOL + 1e-9
            assert np.all(np.delete(witness.m, i) >= np.delete(m, i))
        else:
            assert p is None
    lo, hi = res.cost_bounds()
    assert lo < hi == res.best.cost
    # Every evaluation is in the path, each evaluated once.
    assert len(res.path) == len(ev.calls) == len({tuple(c) for c in ev.calls})


def test_half_space_needs_the_exchange_phase():
    # Feasible iff cpu + 10 memory >= 100. With weights cpu=1, memory=2, memory buys 5
    # units of the constraint per unit of cost, cpu 1: the optimum is cpu at the bottom
    # (1) and memory = 9.9, cost 1 + 19.8 = 20.8. Coordinate bisection alone, lowering
    # the dearer memory first, stops at cpu = 90, memory = 1 (cost 92).
    ev = oracle(lambda m: m[CPU] + 10 * m[MEMORY] >= 100)
    w = weights(cpu=1, memory=2)
    plain = VectorSearch(ev, np.ones(5), ["cpu", "memory"], w, tol=TOL, exchange=False,
                         max_evaluations=200).run()
    assert plain.best.m[MEMORY] == 1.0 and 90 <= plain.best.m[CPU] <= 90 * (1 + TOL)
    res = VectorSearch(oracle(lambda m: m[CPU] + 10 * m[MEMORY] >= 100), np.ones(5), ["cpu", "memory"], w,
                       tol=TOL, max_evaluations=300).run()
    best = 1 + 2 * 9.9
    assert res.best.feasible and res.best.m[CPU] + 10 * res.best.m[MEMORY] >= 100
    # Within the tolerance: memory within a factor 1 + TOL of 9.9 and cpu at 1 gives a
    # cost at most 1 + 2 * 9.9 * (1 + TOL).
    assert best <= res.best.cost <= 1 + 2 * 9.9 * (1 + TOL), res.best.m
    assert any(p.phase.startswith("exchange") for p in res.path)


def test_infeasible_top_and_budget():
    res = VectorSearch(oracle(lambda m: False), np.ones(5), ["cpu"], weights(cpu=1)).run()
    assert res.best is None and len(res.path) == 1 and "not met" in res.text()
    res = VectorSearch(oracle(lambda m: m[CPU] >= 7), np.ones(5), ["cpu", "memory"], weights(cpu=1, memory=1),
                       max_evaluations=3).run()
    assert res.stopped_by_budget and len(res.path) == 3 and res.best.feasible
    assert "budget" in res.text()


def test_frontier_over_two_resources_follows_a_known_curve():
    # Feasible iff cpu * memory >= 20: the smallest memory at cpu = x is 20 / x.
    ev = oracle(lambda m: m[CPU] * m[MEMORY] >= 20)
    grid, minima, path, searched = frontier(ev, np.ones(5), ["cpu", "memory"], lo=1, hi=50, tol=TOL, points=5,
                                            max_evaluations=200)
    assert searched.all()
    for x, y in zip(grid, minima):
        want = max(1.0, 20 / x)
        if want > 50:
            assert np.isnan(y)
        else:
            assert want <= y <= want * (1 + TOL) + 1e-9, (x, y, want)


def test_a_frontier_cut_short_by_its_budget_says_which_points_it_did_not_search():
    ev = oracle(lambda m: m[CPU] * m[MEMORY] >= 20)
    grid, minima, path, searched = frontier(ev, np.ones(5), ["cpu", "memory"], lo=1, hi=50, tol=TOL, points=5,
                                            max_evaluations=8)
    assert len(path) == 8
    assert searched[-1] and not searched[0]  # searched from the top down, the bottom not reached
    assert np.isnan(minima[~searched]).all() and np.isfinite(minima[searched]).all()


def test_target_and_resource_parsing():
    t = parse_level_targets(["light5=10s@0.999", "heavy10=30s@95%", "20s"], 0.99)
    assert t == {"light5": Target(10, 0.999), "heavy10": Target(30, 0.95), "*": Target(20, 0.99)}
    assert parse_resource_values("cpu=1, memory=0.01", "--weights", positive=False) == {"cpu": 1, "memory": 0.01}
    assert parse_resource_list("cpu,memory", "--search") == ["cpu", "memory"]
    for bad, msg in [(["10s@1"], "between 0 and 1"), (["10s@x"], "cannot read level"),
                     (["a=1s", "a=2s"], "twice"), (["=1s"], "empty request type")]:
        with pytest.raises(ValueError, match=msg):
            parse_level_targets(bad, 0.99)
    for bad, msg in [("gpu=1", "unknown resource 'gpu'"), ("cpu", "RESOURCE=VALUE"), ("cpu=-1", ">= 0"),
                     ("cpu=x", "not a number"), ("cpu=1,cpu=2", "twice"), ("", "empty")]:
        with pytest.raises(ValueError, match=msg):
            parse_resource_values(bad, "--weights", positive=False)


# -- the config: per-resource server capacity --------------------------------------------


def test_per_resource_capacity_in_the_config(tmp_path):
    from gmm_volunteer.model.params import build_params

    write_tiny_grid(tmp_path)
    base = tmp_path / "base.yaml"
    plain = load_config(base)
    vec = load_config(base, ["server.resource_capacity.cpu=7", "server.max_allocation.memory=1234"])
    b = plain.base_profile.as_array()
    expect = b * plain.server.capacity
    expect[CPU], expect[MEMORY] = b[CPU] * 7, 1234.0
    assert np.array_equal(vec.server.maximum(b), expect)
    # Unset: the scalar behaviour bit for bit, and the stored config text unchanged.
    assert np.array_equal(plain.server.maximum(b), b * plain.server.capacity)
    assert set(__import__("yaml").safe_load(plain.to_yaml())["server"]) == {"capacity", "allocation"}
    P = build_params(vec, __import__("gmm_volunteer.io.bundlefiles", fromlist=["load_bundle"]).load_bundle(vec.model))
    assert np.array_equal(P.amax[0], expect)


@pytest.mark.parametrize("override, key", [
    (["server.resource_capacity.cpu=0"], "server.resource_capacity.cpu"),
    (["server.resource_capacity.gpu=2"], "server.resource_capacity.gpu"),
    (["server.max_allocation.memory=-5"], "server.max_allocation.memory"),
    (["server.resource_capacity.cpu=2", "server.max_allocation.cpu=300"], "server.max_allocation"),
    (["server.resource_capacity.cpu=2", "autoscaler=reactive"], "autoscaler"),
])
def test_bad_per_resource_capacity_names_the_key(tmp_path, override, key):
    write_tiny_grid(tmp_path)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + ":"):
        load_config(tmp_path / "base.yaml", override)


# -- the command ------------------------------------------------------------------------


@pytest.mark.parametrize("args, named", [
    (["--p99", "10s", "--weights", "gpu=1"], "--weights"),
    (["--p99", "10s", "--search", "cpu,cpu"], "--search"),
    (["--p99", "10s@2"], "--p99"),
    (["--p99", "10s", "--frontier", "cpu"], "--frontier"),
    (["--p99", "10s", "--frontier", "cpu,memory,storage"], "--frontier"),
    (["--p99", "10s", "--search", "cpu", "--max-evaluations", "0"], "--max-evaluations"),
    (["--p99", "10s", "--search", "cpu", "--lo", "5", "--hi", "2"], "--lo"),
    (["--p99", "10s@0.9"], "--p99"),  # a level needs the vector search
])
def test_capacity_cli_bad_vector_input_exits_2(tmp_path, capsys, args, named):
    from gmm_volunteer.cli.commands import main

    write_tiny_grid(tmp_path)
    out = tmp_path / "out"
    assert main(["capacity", str(tmp_path / "base.yaml"), "-o", str(out), *args]) == 2
    assert named in capsys.readouterr().err
    assert not list(tmp_path.glob("out*"))  # nothing written


def test_capacity_cli_refuses_to_replace_a_foreign_file(tmp_path, capsys):
    from gmm_volunteer.cli.commands import main

    write_tiny_grid(tmp_path)
    foreign = tmp_path / "out.csv"
    foreign.write_text("precious,data\n1,2\n")
    assert main(["capacity", str(tmp_path / "base.yaml"), "-o", str(tmp_path / "out"), "--p99", "10s",
                 "--search", "cpu"]) == 2
    assert "out.csv" in capsys.readouterr().err and foreign.read_text() == "precious,data\n1,2\n"


def test_real_simulation_lowers_the_non_binding_resource(tmp_path, capsys):
    """A small real run: under the centralized scheduler every subtask runs on the
    server, so its CPU decides the latency; memory is made non-binding (every batch
    fits in 0.25 x 1,000,000 MB). The search must keep CPU above the bottom and
    take memory to the bottom."""
    from gmm_volunteer.cli.commands import main

    write_tiny_grid(tmp_path)
    out = tmp_path / "vec"
    rc = main(["capacity", str(tmp_path / "base.yaml"), "--p99", "20s@0.9", "--search", "cpu,memory",
               "--weights", "cpu=1,memory=1", "--seeds", "2", "--lo", "0.25", "--hi", "16", "--tol", "0.25",
               "--max-evaluations", "30", "-o", str(out), "-q",
               "--set", "scheduler=centralized", "--set", "users.count=300", "--set", "steps=900",
               "--set", "base_profile.memory=1000000"])
    text = capsys.readouterr().out
    assert rc == 0, text
    summary = json.loads((tmp_path / "vec.json").read_text())
    m = summary["best"]["multipliers"]
    assert m["memory"] == 0.25, text  # non-binding: at the bottom
    assert m["cpu"] > 0.25, text  # binding: the bottom of cpu misses (shown in the path)
    rows = (tmp_path / "vec.csv").read_text().splitlines()
    assert len(rows) == summary["evaluations"] + 1
    # The answer's cpu is shown minimal: a missing evaluation just below it (the others
    # at least the answer's), within the tolerance.
    nb = summary["best"]["missing_neighbours"]["cpu"]
    assert nb is not None and m["cpu"] / nb["value"] <= 1.25 + 1e-9, text
    witness = summary["path"][nb["evaluation"] - 1]
    assert not witness["feasible"] and witness["memory"] >= m["memory"]
