"""Progress from granted resources (docs/model.md D10; DESIGN.md section 3).

A phase needs work (CPU-seconds to execute, megabits to transfer) and advances by what
its node grants; nodes share CPU proportionally to demand and are work-conserving
inside a step. Checked here against closed forms and conservation laws:

- the work table and the work factor's law (mean 1; sample means within 4.5 standard
  errors, SE = sd / sqrt(n));
- uncontended execution: exponential work of mean mu CPU-s at a constant demand of one
  core finishes after K steps with P(K > m) = exp(-m / mu), a geometric law of mean
  1 / (1 - exp(-1 / mu)); the sample mean of n durations is within 4.5 SE,
  SE = sqrt(1 - p) / (p sqrt(n));
- work conservation in every step: what a node's consumers use is at most its
  allocation, per resource; cumulative work done on a node is at most its cumulative
  CPU allocation; finished work is at most consumed CPU;
- saturation: a server that always has work completes exponential jobs as a Poisson
  process of rate C_t / mu, so the count over T steps is within 4.5 sqrt(mean) (+1 for
  the jobs cut at the window's ends) of sum_t C_t / (100 mu); a server with a tenth of
  the CPU completes a tenth.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

from engine_support import assert_work_within_cpu_used, make_config, step_checking_shares
from gmm_volunteer.io.bundlefiles import write_bundle
from gmm_volunteer.model.bundle import validate_bundle
from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.model.kernels.ops import work_factor
from gmm_volunteer.model.params import CPU, EXECUTION, MAX_BATCH_TABLE, WORK_EXPONENTIAL, WORK_LOGNORMAL, build_params
from gmm_volunteer.testing.synthetic import queueing_bundle, synthetic_bundle

LONG = {"dist": "exponential", "mean": 1.0e9}  # a state that does not end within a test run


def _queueing_config(tmp_path, *, mean_work_s, users, steps, server_cpu_pct, think_s=10.0, seed=3, **extra):
    path = tmp_path / f"q{mean_work_s}"
    if not (path / "bundle.yaml").exists():
        write_bundle(queueing_bundle(mean_work_s=mean_work_s, demand_pct=100.0), path)
    d = dict(
        users=users, steps=steps, scheduler="centralized", seed=seed, server=1.0,
        base_profile={"cpu": server_cpu_pct},
        availability={"online": LONG, "offline": {"dist": "exponential", "mean": 10.0}},
        requests={"think_time": {"dist": "exponential", "mean": think_s}, "patience": LONG,
                  "type_probabilities": [1.0]},
        execution={"batching": False},
    )
    d.update(extra)
    return make_config(path, **d)


def test_work_table_interpolates_measured_means(tmp_path):
    b = synthetic_bundle(exec_mean_s=(2.0, 5.0), exec_cpu_pct=(50.0, 100.0))
    write_bundle(b, tmp_path / "m")
    P = build_params(make_config(tmp_path / "m"), validate_bundle(b))
    for j, m in enumerate(P.sub_type):
        w = b["subtask_types"][m]["work"]
        assert P.wk_mean[j, 1] == pytest.approx(w["mean_cpu_s"][0])
        assert P.wk_mean[j, 10] == pytest.approx(w["mean_cpu_s"][1])
        assert P.wk_mean[j, 4] == pytest.approx(w["mean_cpu_s"][0] + 3 / 9 * (w["mean_cpu_s"][1] - w["mean_cpu_s"][0]))
        assert P.wk_mean[j, 0] == 0.0 and np.all(np.diff(P.wk_mean[j, : MAX_BATCH_TABLE + 1]) > 0)
    # One measured size: work proportional to the batch size.
    q = queueing_bundle(mean_work_s=3.0)
    write_bundle(q, tmp_path / "q")
    Pq = build_params(make_config(tmp_path / "q", requests={"type_probabilities": [1.0]}), validate_bundle(q))
    assert Pq.wk_mean[0, 1] == 3.0 and Pq.wk_mean[0, 7] == pytest.approx(21.0)


@njit
def _factors(dist, log_sd, n, seed):
    st = np.full(8, np.uint64(seed), dtype=np.uint64)
    out = np.empty(n)
    for i in range(n):
        out[i] = work_factor(st, dist, log_sd)
    return out


@pytest.mark.parametrize("log_sd", [0.1, 0.45])
def test_lognormal_work_factor_has_mean_one(log_sd):
    n = 200_000
    x = _factors(WORK_LOGNORMAL, log_sd, n, 11)
    se = math.sqrt(math.exp(log_sd**2) - 1.0) / math.sqrt(n)
    assert abs(x.mean() - 1.0) < 4.5 * se
    lx = np.log(x)
    assert abs(lx.std() - log_sd) < 4.5 * log_sd / math.sqrt(2 * n)
    assert np.all(_factors(WORK_LOGNORMAL, 0.0, 10, 1) == 1.0)


def test_exponential_work_factor():
    n = 200_000
    x = _factors(WORK_EXPONENTIAL, 0.0, n, 5)
    assert abs(x.mean() - 1.0) < 4.5 / math.sqrt(n)
    p = math.exp(-1.0)
    assert abs((x > 1.0).mean() - p) < 4.5 * math.sqrt(p * (1 - p) / n)


def _execution_durations(sim, steps):
    """Steps each server batch spent executing (placement step excluded)."""
    born, out = {}, []
    while sim.t < steps:
        sim.step()
        S = sim.arrays
        alive = set(S.b_list[: S.n_b[0]].tolist())
        for b in list(born):
            if b not in alive or S.b_born[b] != born[b]:
                out.append(sim.t - 1 - born[b])
                del born[b]
        for b in alive:
            if b not in born and S.b_phase[b] == EXECUTION:
                born[b] = int(S.b_born[b])
    return np.array(out)


def test_uncontended_execution_steps_follow_the_work(tmp_path):
    mu = 4.0  # CPU-s of work at a demand of one core: 4 s on average, geometric in steps
    cfg = _queueing_config(tmp_path, mean_work_s=mu, users=60, steps=1500, server_cpu_pct=1.0e5, think_s=20.0)
    d = _execution_durations(Simulation(cfg), cfg.steps)
    p = 1.0 - math.exp(-1.0 / mu)
    assert d.size > 500 and d.min() >= 1
    se = math.sqrt(1 - p) / (p * math.sqrt(d.size))
    assert abs(d.mean() - 1.0 / p) < 4.5 * se, (d.mean(), 1 / p, d.size)


@pytest.mark.parametrize("phase_changes", ["step", "carry_over"])
@pytest.mark.parametrize("scheduler,server", [("centralized", 0.05), ("uniform", 0.2), ("affinity", 0.2)])
def test_work_is_conserved_every_step(synthetic_model, scheduler, server, phase_changes):
    cfg = make_config(synthetic_model, users=120, steps=400, scheduler=scheduler, server=server, seed=7,
                      execution={"phase_changes": phase_changes})
    sim = Simulation(cfg)
    granted = np.zeros(sim.params.n_nodes)

    def grant(S):  # the CPU-seconds each node was granted
        granted[0] += S.alloc[0, CPU] / 100.0
        on = S.on_list[: S.n_on[0]]
        granted[on] += S.alloc[on, CPU] / 100.0

    assert step_checking_shares(sim, grant) > 10  # the configuration does exercise CPU sharing
    assert np.all(sim.arrays.nd_work <= granted * (1 + 1e-9) + 1e-9)
    assert_work_within_cpu_used(sim)


def _server_completions(rec, t0):
    return int(rec.subtask_events[t0:, 0, 1].sum())


def test_saturated_server_completes_capacity_over_work(tmp_path):
    mu, t0, steps = 5.0, 200, 2200
    counts, expected = [], []
    for cpu in (200.0, 20.0):
        cfg = _queueing_config(tmp_path, mean_work_s=mu, users=80, steps=steps, server_cpu_pct=cpu, think_s=10.0)
        sim = Simulation(cfg)
        rec = sim.run(progress=False)
        assert rec.active_requests[t0:].min() > 10  # the queue never empties: always busy
        counts.append(_server_completions(rec, t0))
        expected.append(rec.server_allocation[t0:, CPU].astype(np.float64).sum() / (100.0 * mu))
        # Used CPU never exceeds the allocation; saturated, it uses all of it.
        util = rec.server_consumption[t0:, CPU].sum() / rec.server_allocation[t0:, CPU].sum()
        assert 0.999 < util <= 1.0 + 1e-6
    for n, m in zip(counts, expected):
        assert abs(n - m) < 4.5 * math.sqrt(m) + 1.0, (n, m)
    # A tenth of the CPU completes a tenth (the server allocation path is the same).
    ratio = counts[0] / counts[1]
    se = ratio * math.sqrt(1 / counts[0] + 1 / counts[1])
    assert abs(ratio - 10.0) < 4.5 * se, (ratio, se)


def test_overload_with_patience_abandons_and_stays_within_capacity(tmp_path):
    mu, steps = 5.0, 2000
    cfg = _queueing_config(tmp_path, mean_work_s=mu, users=80, steps=steps, server_cpu_pct=100.0, think_s=10.0,
                           requests={"think_time": {"dist": "exponential", "mean": 10.0},
                                     "patience": {"dist": "exponential", "mean": 60.0},
                                     "type_probabilities": [1.0]})
    rec = Simulation(cfg).run(progress=False)
    out = rec.request_outcome
    assert (out == 1).sum() > 100  # latency grows until patience ends requests
    m = rec.server_allocation[:, CPU].astype(np.float64).sum() / (100.0 * mu)
    assert (out == 0).sum() <= m + 4.5 * math.sqrt(m) + 1.0


def test_no_cpu_share_no_progress(synthetic_model):
    """Users that offer no CPU never finish an execution; the server still does."""
    cfg = config_from_dict({
        "steps": 400, "seed": 2, "scheduler": "uniform", "server": {"capacity": 0.5}, "model": str(synthetic_model),
        "users": {"count": 80, "capacity": 1.0,
                  "allocation": {"base": "fitted", "mean": {"cpu": 0.0}, "sd": {"cpu": 0.0}}}})
    sim = Simulation(cfg)
    rec = sim.run(progress=False)
    S = sim.arrays
    assert np.all(S.nd_work[1:] == 0.0)
    assert rec.completed_work[:, 1].sum() == 0.0 and rec.subtask_events[:, 1, 1].sum() == 0
    assert rec.completed_work[:, 0].sum() > 0.0
    # Executions were placed on users and sat there without progress.
    assert rec.subtask_events[:, 1, 0].sum() > 0


def test_carry_over_runs_a_volunteer_subtask_in_its_execution_time(tmp_path):
    """`execution.phase_changes: carry_over` (docs/model.md D26): a phase that ends inside
    a step hands the rest of the step to the next. With transfers of 1e-6 MB and
    exponential work of mean mu CPU-s at one core on uncontended nodes, a request then
    takes ceil(X) steps, X ~ Exp(mu), on a volunteer as on the server: P(L = 1) =
    p = 1 - exp(-1 / mu), mean 1 / p (within 4.5 standard errors, SE of the mean
    sqrt(1 - p) / (p sqrt(n)), of the share sqrt(p (1 - p) / n)). With phases ending at
    step boundaries, a volunteer's request takes an input step and an upload step more:
    mean 1 / p + 2 f, f the share of requests volunteers ran (within 4.5 SE, SE = sample
    sd / sqrt(n))."""
    mu = 2.0
    p = 1.0 - math.exp(-1.0 / mu)
    for mode in ("step", "carry_over"):
        cfg = _queueing_config(tmp_path, mean_work_s=mu, users=60, steps=3000, server_cpu_pct=1.0e5, think_s=20.0,
                               scheduler="uniform", execution={"batching": False, "phase_changes": mode})
        rec = Simulation(cfg).run(progress=False)
        completed = rec.subtask_events[:, :, 1].sum(axis=0)  # server, volunteers (one subtask a request)
        f = completed[1] / completed.sum()
        assert f > 0.9  # mostly volunteers
        lat = (rec.request_end - rec.request_start)[rec.request_outcome == 0]
        n = lat.size
        assert n > 3000
        if mode == "carry_over":
            assert abs(lat.mean() - 1.0 / p) < 4.5 * math.sqrt(1 - p) / (p * math.sqrt(n)), (lat.mean(), 1 / p)
            assert abs(np.mean(lat == 1) - p) < 4.5 * math.sqrt(p * (1 - p) / n)
        else:  # a volunteer's request: + an input step and an upload step; SE from the sample's sd
            expected = 1.0 / p + 2.0 * f
            assert abs(lat.mean() - expected) < 4.5 * lat.std() / math.sqrt(n), (lat.mean(), expected)


def test_a_volunteer_needs_its_volunteer_factor_times_the_work(tmp_path):
    """`work.volunteer_factor` (docs/model.md D29): a batch executing on a volunteer needs
    the factor times the table's work, on the server the table's. With exponential work of
    mean mu at one core, uncontended nodes, transfers of 1e-6 MB and carry_over (as in the
    test above), a request takes ceil(X) steps with X ~ Exp(mu) on the server and
    Exp(g mu) on a volunteer, g = 3: mean f / p_v + (1 - f) / p, p = 1 - exp(-1 / mu),
    p_v = 1 - exp(-1 / (g mu)), f the share volunteers ran (within 4.5 SE, SE = sample sd /
    sqrt(n)). The volunteers' finished work (`completed_work`) per execution is g mu (the
    mean of an exponential, within 4.5 SE, SE = g mu / sqrt(n)): both the kernel's inline
    progress and `ops.phase_work` apply the factor."""
    mu, g = 2.0, 3.0
    path = tmp_path / "vol"
    data = queueing_bundle(mean_work_s=mu, demand_pct=100.0)
    data["subtask_types"][0]["work"]["volunteer_factor"] = g
    write_bundle(data, path)
    cfg = make_config(path, users=60, steps=3000, scheduler="uniform", seed=3, server=1.0,
                      base_profile={"cpu": 1.0e5},
                      availability={"online": LONG, "offline": {"dist": "exponential", "mean": 10.0}},
                      requests={"think_time": {"dist": "exponential", "mean": 20.0}, "patience": LONG,
                                "type_probabilities": [1.0]},
                      execution={"batching": False, "phase_changes": "carry_over"})
    rec = Simulation(cfg).run(progress=False)
    completed = rec.subtask_events[:, :, 1].sum(axis=0)
    f = completed[1] / completed.sum()
    assert f > 0.9
    p, p_v = 1.0 - math.exp(-1.0 / mu), 1.0 - math.exp(-1.0 / (g * mu))
    lat = (rec.request_end - rec.request_start)[rec.request_outcome == 0]
    n = lat.size
    assert n > 1500
    expected = f / p_v + (1.0 - f) / p
    assert abs(lat.mean() - expected) < 4.5 * lat.std() / math.sqrt(n), (lat.mean(), expected)
    # the factor is not ignored: without it the mean would be 1 / p, many SEs away
    assert abs(lat.mean() - 1.0 / p) > 4.5 * lat.std() / math.sqrt(n)
    per = float(rec.completed_work[:, 1].astype(np.float64).sum()) / completed[1]
    assert abs(per - g * mu) < 4.5 * g * mu / math.sqrt(completed[1]), (per, g * mu)


def test_the_volunteer_factor_at_its_default_leaves_the_bundle_digest_as_before(tmp_path):
    """A bundle written before `work.volunteer_factor` existed keeps the digest its stores
    recorded (D29): 1 written out or left out is the same model, another factor is not;
    a factor of 0 or one above the bound is refused, naming the field."""
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.model.bundle import BundleError, bundle_digest, legacy_bundle_digest

    data = synthetic_bundle()
    write_bundle(data, tmp_path / "none")
    data["subtask_types"][0]["work"]["volunteer_factor"] = 1.0
    write_bundle(data, tmp_path / "one")
    data["subtask_types"][0]["work"]["volunteer_factor"] = 1.5
    write_bundle(data, tmp_path / "other")
    none, one, other = (load_bundle(tmp_path / n) for n in ("none", "one", "other"))
    assert bundle_digest(none) == bundle_digest(one) != bundle_digest(other)
    assert legacy_bundle_digest(none) == legacy_bundle_digest(one) != legacy_bundle_digest(other)
    for bad in (0.0, 1e3):
        data["subtask_types"][0]["work"]["volunteer_factor"] = bad
        with pytest.raises(BundleError, match="volunteer_factor"):
            validate_bundle(data, "b")


def test_a_volunteer_factor_table_is_read_at_the_users_cpu_maximum(tmp_path):
    """`work.volunteer_factor` as a table {users' CPU maximum %: factor} (D29, "as a
    function of the CPU share"): read at base_profile.cpu x users.capacity, linear in log
    CPU between its entries and constant beyond them. A one-entry table is the constant
    factor, trajectory for trajectory; an empty table, a CPU of 0 or a factor of 0 is
    refused, naming the field."""
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.model.bundle import BundleError

    data = synthetic_bundle()
    data["subtask_types"][0]["work"]["volunteer_factor"] = {5.0: 2.0, 15.0: 1.5}
    write_bundle(data, tmp_path / "table")
    work = load_bundle(tmp_path / "table").subtask_types[0].work
    assert work.volunteer_factor_at(5.0) == 2.0 and work.volunteer_factor_at(15.0) == 1.5
    assert work.volunteer_factor_at(1.0) == 2.0 and work.volunteer_factor_at(100.0) == 1.5
    assert work.volunteer_factor_at(math.sqrt(5.0 * 15.0)) == pytest.approx(1.75)
    for cpu, capacity, g in ((5.0, 1.0, 2.0), (15.0, 1.0, 1.5), (5.0, 3.0, 1.5)):
        cfg = make_config(tmp_path / "table", users=4, user_capacity=capacity,
                          base_profile={"cpu": cpu})
        P = build_params(cfg, load_bundle(tmp_path / "table"))
        first = np.asarray(P.sub_type) == 0
        users = P.wk_vol[1]  # node class 1, the users' one class (row 0 is the server's, D36)
        assert first.any() and np.all(users[first] == g), (cpu, capacity, P.wk_vol)
        assert np.all(users[~first] == 1.0) and np.all(P.wk_vol[0] == 1.0)

    def run(factor, name):
        data["subtask_types"][0]["work"]["volunteer_factor"] = factor
        write_bundle(data, tmp_path / name)
        cfg = make_config(tmp_path / name, users=30, steps=300, seed=4, base_profile={"cpu": 15.0})
        return Simulation(cfg).run(progress=False)

    a, b = run(1.7, "scalar"), run({15.0: 1.7}, "one")
    assert np.array_equal(a.request_end, b.request_end) and np.array_equal(a.completed_work, b.completed_work)
    assert (a.request_outcome == 0).sum() > 0
    # and the table is not ignored: another factor at the users' CPU moves the work done
    assert not np.array_equal(a.completed_work, run({15.0: 3.0, 50.0: 1.7}, "other").completed_work)
    for bad in ({}, {0.0: 1.5}, {5.0: 0.0}):
        data["subtask_types"][0]["work"]["volunteer_factor"] = bad
        with pytest.raises(BundleError, match="volunteer_factor"):
            validate_bundle(data, "b")


def test_work_scale_is_the_bundle_with_its_work_scaled(tmp_path):
    """`execution.work_scale` (D30) multiplies every batch's execution work, on the server
    and the volunteers: a run at scale 0.5 is, trajectory for trajectory, the run of the
    bundle whose work table is halved (halving is exact in floating point, through the
    table's interpolation too), and not the run at scale 1. Under `progress: paper` the
    work is not read, so a scale other than 1 is refused, naming the key."""
    from gmm_volunteer.run.config import ConfigError

    data = synthetic_bundle()
    write_bundle(data, tmp_path / "as-measured")
    for st in data["subtask_types"]:
        st["work"]["mean_cpu_s"] = [0.5 * x for x in st["work"]["mean_cpu_s"]]
    write_bundle(data, tmp_path / "halved")

    def run(name, scale):
        cfg = make_config(tmp_path / name, users=30, steps=300, seed=4, base_profile={"cpu": 15.0},
                          execution={"work_scale": scale})
        return Simulation(cfg).run(progress=False)

    scaled, halved, one = run("as-measured", 0.5), run("halved", 1.0), run("as-measured", 1.0)
    assert (scaled.request_outcome == 0).sum() > 0
    assert np.array_equal(scaled.request_end, halved.request_end)
    assert np.array_equal(scaled.completed_work, halved.completed_work)
    assert not np.array_equal(scaled.completed_work, one.completed_work)
    for bad in ({"work_scale": 0.0}, {"work_scale": 2.0, "progress": "paper"}):
        with pytest.raises((ConfigError, ValueError), match="work_scale"):
            config_from_dict({"execution": bad})


def test_a_volunteers_own_cpu_slows_its_executions_by_its_share(tmp_path):
    """`execution.volunteer_overhead_cpu` (D31) takes o % of a core from every user's CPU
    allocation while its batches execute. With dedicated allocations of one core, work
    demanding one core, transfers of 1e-6 MB and carry_over (as in the tests above), o = 50
    halves a volunteer's CPU: a request takes ceil(X) steps with X ~ Exp(mu) on the server
    (its CPU untouched) and Exp(2 mu) on a volunteer, mean f / p_v + (1 - f) / p (within
    4.5 SE, SE = sample sd / sqrt(n)); at o = 0 the mean is 1 / p, many SEs away. An
    overhead of the whole allocation stops every volunteer's execution. 300 users thinking
    200 s on average keep each node busy about 1 % of the time, so that two batches rarely
    share a node (the closed form is for one). Under `progress: paper` a non-zero overhead
    is refused, naming the key."""
    from gmm_volunteer.run.config import ConfigError

    mu = 2.0
    path = tmp_path / "own"
    write_bundle(queueing_bundle(mean_work_s=mu, demand_pct=100.0), path)

    def run(overhead):
        cfg = config_from_dict({
            "steps": 3000, "seed": 3, "scheduler": "uniform", "model": str(path),
            "users": {"count": 300, "capacity": 1.0, "initial_data": "filled", "allocation": "dedicated"},
            "server": {"capacity": 1000.0}, "base_profile": {"cpu": 100.0},
            "availability": {"online": LONG, "offline": {"dist": "exponential", "mean": 10.0}},
            "requests": {"think_time": {"dist": "exponential", "mean": 200.0}, "patience": LONG,
                         "type_probabilities": [1.0]},
            "execution": {"batching": False, "phase_changes": "carry_over", "volunteer_overhead_cpu": overhead}})
        return Simulation(cfg).run(progress=False)

    p, p_v = 1.0 - math.exp(-1.0 / mu), 1.0 - math.exp(-1.0 / (2.0 * mu))
    for overhead in (0.0, 50.0):
        rec = run(overhead)
        completed = rec.subtask_events[:, :, 1].sum(axis=0)
        f = completed[1] / completed.sum()
        assert f > 0.9
        lat = (rec.request_end - rec.request_start)[rec.request_outcome == 0]
        n = lat.size
        assert n > 1500
        se = 4.5 * lat.std() / math.sqrt(n)
        expected = f / p_v + (1.0 - f) / p if overhead else 1.0 / p
        assert abs(lat.mean() - expected) < se, (overhead, lat.mean(), expected)
        if overhead:
            assert abs(lat.mean() - 1.0 / p) > se
    whole = run(100.0)
    assert whole.subtask_events[:, 1, 1].sum() == 0  # no volunteer completes anything
    assert whole.subtask_events[:, 0, 1].sum() > 0  # the server does
    with pytest.raises((ConfigError, ValueError), match="volunteer_overhead_cpu"):
        config_from_dict({"execution": {"volunteer_overhead_cpu": 5.0, "progress": "paper"}})
