"""`execution.progress: paper` (docs/model.md D27): phases end by draws from the fitted
hazards, every active batch is charged its sampled consumption for whole steps, and CPU
overcommit scales consumption down before the hazard sees it (paper 2.2 as written)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine_support import assert_work_within_cpu_used, make_config, step_checking_shares
from gmm_volunteer.io.bundlefiles import write_bundle
from gmm_volunteer.run.config import ConfigError, config_from_dict
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.model.kernels.hazard import hazard
from gmm_volunteer.model.params import CPU, EXECUTION
from gmm_volunteer.run.preflight import check_run
from gmm_volunteer.testing.synthetic import hazard_block, queueing_bundle, synthetic_bundle
from test_invariants import run_checked

LONG = {"dist": "exponential", "mean": 1.0e9}  # a state that does not end within a test run


def _bundle(path, bundle, **hazard):
    if not (path / "bundle.yaml").exists():
        bundle["hazard"] = hazard_block(len(bundle["subtask_types"]), **hazard)
        write_bundle(bundle, path)
    return path


def _queueing(tmp_path, *, server_cpu_pct, users, steps, think_s=10.0, seed=3, name="q", **hazard):
    path = _bundle(tmp_path / name, queueing_bundle(mean_work_s=1.0, demand_pct=100.0), **hazard)
    return make_config(
        path, users=users, steps=steps, scheduler="centralized", seed=seed, server=1.0,
        base_profile={"cpu": server_cpu_pct},
        availability={"online": LONG, "offline": {"dist": "exponential", "mean": 10.0}},
        requests={"think_time": {"dist": "exponential", "mean": think_s}, "patience": LONG,
                  "type_probabilities": [1.0]},
        execution={"batching": False, "progress": "paper"})


@pytest.fixture(scope="module")
def paper_model(tmp_path_factory):
    """The synthetic bundle with hazards that depend on consumption (degree 1)."""
    return _bundle(tmp_path_factory.mktemp("paper") / "bundle", synthetic_bundle(), probability=0.4, consumption_coef=0.8)


def test_constant_hazard_gives_a_geometric_phase(tmp_path):
    """A constant execution hazard h: a server batch executes D steps, D ~ Geometric(h),
    mean 1 / h, P(D = 1) = h (within 4.5 standard errors: of the mean sqrt(1 - h) /
    (h sqrt(n)), of the share sqrt(h (1 - h) / n)), whatever its work."""
    h = 0.3
    cfg = _queueing(tmp_path, server_cpu_pct=1.0e5, users=60, steps=1500, think_s=20.0,
                    probability={"download": 0.5, "execution": h, "upload": 0.5})
    sim = Simulation(cfg)
    born, d = {}, []
    while sim.t < cfg.steps:
        sim.step()
        S = sim.arrays
        alive = set(S.b_list[: S.n_b[0]].tolist())
        for b in list(born):
            if b not in alive or S.b_born[b] != born[b]:
                d.append(sim.t - 1 - born.pop(b))
        for b in alive:
            if b not in born and S.b_phase[b] == EXECUTION:
                born[b] = int(S.b_born[b])
    d = np.array(d)
    n = d.size
    assert n > 2000 and d.min() >= 1
    assert abs(d.mean() - 1 / h) < 4.5 * math.sqrt(1 - h) / (h * math.sqrt(n)), (d.mean(), 1 / h, n)
    assert abs((d == 1).mean() - h) < 4.5 * math.sqrt(h * (1 - h) / n)


def test_overcommitted_cpu_lowers_what_the_hazard_sees(tmp_path):
    """On a server of 150 % CPU with n executing jobs that each ask 100 %, every job is
    charged 100 min(1, 1.5 / n) %, and that scaled value is the hazard's covariate: the
    phase ends counted over the run match the sum of the hazards at the scaled values
    (a martingale: within 4.5 sd, sd = sqrt(sum h (1 - h))), and not the sum at the
    unscaled demand."""
    cfg = _queueing(tmp_path, server_cpu_pct=150.0, users=40, steps=600, think_s=5.0,
                    probability=0.5, consumption_coef=1.5)
    sim = Simulation(cfg)
    expected = variance = unscaled = 0.0
    ended = 0
    overcommitted = 0
    while sim.t < cfg.steps:
        S = sim.arrays
        # the server's executing batches in this step (placed by earlier steps' scheduler)
        execs = [(b, S.b_size[b], S.b_age[b]) for b in S.b_list[: S.n_b[0]]
                 if S.b_node[b] == 0 and S.b_phase[b] == EXECUTION]
        sim.advance()
        if execs:
            share = min(1.0, 150.0 / (100.0 * len(execs)))
            overcommitted += share < 1.0
            for b, size, age in execs:
                assert S.b_cons[b, CPU] == pytest.approx(100.0 * share, rel=1e-12)
                h = hazard(sim.P, 1, 0, S.b_cons[b, CPU], size, age)
                expected += h
                variance += h * (1 - h)
                unscaled += hazard(sim.P, 1, 0, 100.0, size, age)
                ended += S.b_node[b] < 0  # a server batch that ends its execution is done
        assert S.ser_scons[sim.t, CPU] <= 150.0 * (1 + 1e-6)
        assert S.ser_demand[sim.t, 0] >= S.ser_scons[sim.t, CPU] * (1 - 1e-6)
        sim.act_executor()
        sim.act_scheduler()
        sim.t += 1
    assert overcommitted > 100  # the configuration does overcommit the server
    sd = math.sqrt(variance)
    assert abs(ended - expected) < 4.5 * sd, (ended, expected, sd)
    assert unscaled - expected > 9.0 * sd  # the unscaled demand would predict other ends


@pytest.mark.parametrize("scheduler,server", [("centralized", 0.05), ("uniform", 0.2), ("affinity", 0.2)])
def test_shares_hold_every_step(paper_model, scheduler, server):
    """What a node uses of CPU and bandwidth never exceeds its allocation, users'
    transfers never exceed the server's links, and the CPU-seconds charged to executions
    (`completed_work` under paper) never exceed the CPU used; memory is charged whole and
    may exceed the allocation until the executor acts, as in paper Fig. 4."""
    cfg = make_config(paper_model, users=120, steps=400, scheduler=scheduler, server=server, seed=7,
                      execution={"progress": "paper"})
    sim = Simulation(cfg)
    assert step_checking_shares(sim) > 10
    assert_work_within_cpu_used(sim)


@pytest.mark.parametrize("scheduler", ["centralized", "uniform", "affinity"])
def test_invariants_hold_under_paper_progress(paper_model, scheduler):
    cfg = make_config(paper_model, users=30, steps=200, scheduler=scheduler, seed=11, user_capacity=0.5,
                      server=0.5, execution={"progress": "paper"},
                      availability={"online": {"dist": "exponential", "mean": 60.0},
                                    "offline": {"dist": "exponential", "mean": 60.0}},
                      requests={"think_time": {"dist": "exponential", "mean": 10.0},
                                "patience": {"dist": "pareto", "scale": 30.0, "shape": 1.5}})
    sim = run_checked(cfg, 200)
    assert sim.arrays.ser_ev[:200, :, 1].sum() > 0  # subtasks do complete


def test_same_seed_same_run_and_work_runs_ignore_the_hazards(paper_model):
    runs = [Simulation(make_config(paper_model, users=60, steps=300, seed=5, execution={"progress": p})).run(progress=False)
            for p in ("paper", "paper", "work")]
    a, b, w = runs
    for name in ("request_start", "request_end", "request_outcome"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert np.array_equal(a.server_consumption, b.server_consumption)
    assert "server_cpu_demand" in a.policy_series and "server_cpu_demand" not in w.policy_series
    assert not np.array_equal(a.server_consumption, w.server_consumption)


def test_paper_needs_hazards_and_step_phase_changes(tmp_path, synthetic_model):
    with pytest.raises(ConfigError, match="carry_over needs progress: work"):
        config_from_dict({"steps": 10, "users": {"count": 5}, "server": {"capacity": 1}, "model": str(synthetic_model),
                          "execution": {"progress": "paper", "phase_changes": "carry_over"}})
    cfg = make_config(synthetic_model, execution={"progress": "paper"})  # a bundle without hazards
    with pytest.raises(ConfigError, match="execution.progress: paper .* has none for download, execution, upload"):
        check_run(cfg, "run.yaml", memory=False)


def test_clamp_evaluates_large_batches_at_the_largest_measured_size():
    """`hazard_batch_size: clamp` evaluates the hazard of a batch larger than the largest
    measured size (16 on paper-scale) at that size; `extrapolate` at its own, where the
    work-fraction hazard divides by the larger work of a batch of 64 and so ends it later,
    step by step, than one of 16 (docs/model.md D27, D32)."""
    from gmm_volunteer.io.bundlefiles import load_bundle, packaged_bundle
    from gmm_volunteer.model.params import build_params, pack_params

    path = packaged_bundle("paper-scale")
    bundle = load_bundle(path)
    h = {}
    for mode in ("extrapolate", "clamp"):
        cfg = make_config(path, execution={"progress": "paper", "hazard_batch_size": mode})
        P = pack_params(build_params(cfg, bundle))
        h[mode] = [hazard(P, 1, 0, 155.0, n, 0) for n in (16, 64)]
    assert h["clamp"][1] == h["clamp"][0] == h["extrapolate"][0]
    assert 0.0 < h["extrapolate"][1] < h["extrapolate"][0]


def test_gmmv_hazards_prints_and_writes_a_result_file(tmp_path, capsys):
    from gmm_volunteer.cli.commands import main
    from gmm_volunteer.io import resultfile

    assert main(["hazards", "paper-scale", "--sizes", "1", "64"]) == 0  # the checks without traces pass
    out_text = capsys.readouterr().out
    lines = out_text.split("\n\n")[0].splitlines()
    assert len(lines) == 1 + 2 * 14  # a header, two sizes of each of the 14 subtask types
    assert "FAIL" not in out_text and out_text.count("PASS") == 3
    out = tmp_path / "h.md"
    assert main(["hazards", "paper-scale", "--sizes", "2", "-o", str(out)]) == 0
    result = resultfile.read(out)
    assert "paper-scale" in result.header["bundles"] and result.table.count("\n") == 2 + 14 - 1
    assert main(["hazards", str(tmp_path / "nowhere")]) == 2
    assert main(["hazards", "paper-scale", "--sizes", "0"]) == 2


@pytest.mark.parametrize("name", ["default", "paper-scale"])
def test_kernel_hazard_is_the_fitted_block(name):
    """The kernel's `hazard` gives the probability `fitting.hazard.hazard_probability` gives
    from the bundle's block, under the shipped forms (execution: work fraction; download
    and upload: the paper form with log size; cloglog, per-type terms; docs/model.md D32),
    for types, CPU, sizes (beyond the measured ones and the work table too) and ages drawn
    at random."""
    from gmm_volunteer.fitting.hazard import hazard_probability
    from gmm_volunteer.fitting.hazard_check import _work
    from gmm_volunteer.io.bundlefiles import load_bundle, packaged_bundle
    from gmm_volunteer.model.params import build_params, pack_params

    path = packaged_bundle(name)
    bundle = load_bundle(path)
    P = pack_params(build_params(make_config(path, execution={"progress": "paper"}), bundle))
    rng = np.random.default_rng(0)
    for h, phase in enumerate(("download", "execution", "upload")):
        block = bundle.hazard.phases[phase].model_dump()
        for _ in range(200):
            m = int(rng.integers(len(bundle.subtask_types)))
            cons, size, age = float(rng.uniform(5, 200)), int(rng.integers(1, 700)), int(rng.integers(0, 5000))
            want = hazard_probability(block, [cons], [size], [age], [m], [_work(bundle, m, size)])[0]
            assert hazard(P, h, m, cons, size, age) == pytest.approx(want, rel=1e-9, abs=1e-300)
