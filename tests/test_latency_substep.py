"""Latency below the step: `execution.latency` (docs/model.md D34).

Under `substep` a phase whose work runs out inside a step ends there, and a request's end
is the moment its last result came in, a real number of seconds. Checked here:

- a lightly loaded node against the closed form latency = input / link + work / rate +
  output / link, with every rate taken from the bundle and the config: exactly (1e-9 s)
  for one user with deterministic work, and, for exponential work on a few hundred
  users, the sample mean within 4.5 standard errors (SE = sample sd / sqrt(n));
- `whole_step`, the default, gives the request logs 0.9.0 gave (hashes recorded from
  0.9.0 before the option existed), and the store keeps its integer records;
- the store of a `substep` run holds real ends and latencies, read back as they were
  written, and `gmmv summarize` prints them to the millisecond; under `progress: paper`
  `substep` is refused (exit 2, naming the key);
- a router's realised subtask delay is its result's time minus its placement step.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from gmm_volunteer.io.bundlefiles import write_bundle
from gmm_volunteer.io.conventions import flat_requests
from gmm_volunteer.experiments.summary import summarize
from gmm_volunteer.io.results import open_result, write_result
from gmm_volunteer.run.config import ConfigError, config_from_dict
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.testing.synthetic import queueing_bundle

LONG = {"dist": "exponential", "mean": 1.0e9}  # a state that does not end within a test run
IN_MB, OUT_MB = 2.0, 1.0  # a subtask's input and result
BAND_IN, BAND_OUT = 40.0, 20.0  # every node's links, Mbit/s (dedicated allocations)


def _bundle(path, *, mean_work_s, deterministic):
    """`queueing_bundle` whose transfers ask their node's whole link (the mean of a
    transfer's own bandwidth is its level at every knot: rate = the allocation, D9) and
    whose work is exponential or, with `deterministic`, exactly `mean_work_s`."""
    b = queueing_bundle(mean_work_s=mean_work_s, demand_pct=100.0)
    job = b["subtask_types"][0]
    job["input_size_mb"], job["output_size_mb"] = IN_MB, OUT_MB
    if deterministic:
        job["work"]["distribution"] = "lognormal"
        job["work"]["log_sd"] = 0.0
    for stage in ("input_download", "upload"):
        st = b["consumption"]["stages"][stage]
        own = "band_in" if stage == "input_download" else "band_out"
        st["resources"][own]["stats"]["mean"] = [list(map(float, st["levels"]))]
    write_bundle(b, path)
    return path


def _config(model, *, users, steps, think_s, latency="substep", phase_changes="carry_over", seed=3):
    return config_from_dict({
        "steps": steps, "seed": seed, "scheduler": "uniform", "model": str(model),
        # two cores: an execution's one core fits beside a transfer's CPU (5 %), so nothing
        # but the work sets its rate
        "users": {"count": users, "capacity": 1.0, "initial_data": "filled", "allocation": "dedicated"},
        "server": {"capacity": 1000.0, "allocation": "dedicated"},
        "base_profile": {"cpu": 200.0, "band_in": BAND_IN, "band_out": BAND_OUT},
        "availability": {"online": LONG, "offline": {"dist": "exponential", "mean": 10.0}},
        "requests": {"think_time": {"dist": "exponential", "mean": think_s}, "patience": LONG,
                     "type_probabilities": [1.0]},
        "execution": {"batching": False, "phase_changes": phase_changes, "latency": latency}})


def _transfer_s():
    """Input download plus result upload on a volunteer, s: megabits over the link."""
    return 8.0 * IN_MB / BAND_IN + 8.0 * OUT_MB / BAND_OUT


def test_one_user_takes_exactly_its_work_and_transfers(tmp_path):
    """One user (no contention), work of exactly w CPU-s at one core: a request the
    server runs takes w s, one a volunteer runs w + 8 I / B_in + 8 O / B_out s (0.4 + 0.4
    here), to 1e-9 s; under whole_step the same run's latencies are whole steps."""
    w = 1.3
    model = _bundle(tmp_path / "det", mean_work_s=w, deterministic=True)
    rec = Simulation(_config(model, users=1, steps=2000, think_s=3.0)).run(progress=False)
    lat = rec.request_latency[rec.request_outcome == 0]
    assert lat.dtype == np.float64 and lat.size > 200
    on_server = np.abs(lat - w) < 1e-9
    on_volunteer = np.abs(lat - (w + _transfer_s())) < 1e-9
    assert np.all(on_server | on_volunteer), np.unique(np.round(lat, 6))
    served = rec.subtask_events[:, :, 1].sum(axis=0)  # completions: server, volunteers
    assert on_server.sum() == served[0] and on_volunteer.sum() == served[1] > 0
    whole = Simulation(_config(model, users=1, steps=2000, think_s=3.0, latency="whole_step")).run(progress=False)
    wl = whole.request_latency[whole.request_outcome == 0]
    assert wl.dtype == np.int64 and set(np.unique(wl).tolist()) <= {2, 3}  # ceil(1.3), ceil(2.1)


@pytest.mark.parametrize("phase_changes", ["carry_over", "step"])
def test_exponential_work_on_light_nodes_has_the_closed_form_mean(tmp_path, phase_changes):
    """Exponential work X of mean mu CPU-s at one core on nodes busy about 1 % of the time
    (300 users thinking 200 s): latency = X on the server, X + transfers on a volunteer,
    mean mu + f T, f the share of requests volunteers ran, T the transfer time (within
    4.5 SE, SE = sample sd / sqrt(n)). With phase_changes: step each phase still begins
    at a step boundary and only the last ends inside its step: a volunteer's request
    waits for the boundary after its input download (1 - 0.4 s) and after its execution
    (1 - frac(X + 1)), so its mean adds 0.6 + E[1 - frac(X)] to the execution's mu;
    E[frac(X)] = mu - e^{-1/mu} / (1 - e^{-1/mu}) for X ~ Exp(mu)."""
    mu = 1.5
    model = _bundle(tmp_path / "exp", mean_work_s=mu, deterministic=False)
    rec = Simulation(_config(model, users=300, steps=3000, think_s=200.0, phase_changes=phase_changes)).run(
        progress=False)
    served = rec.subtask_events[:, :, 1].sum(axis=0)
    f = served[1] / served.sum()
    assert 0.5 < f < 1.0  # both kinds of node ran requests
    lat = rec.request_latency[rec.request_outcome == 0]
    n = lat.size
    assert n > 3000
    if phase_changes == "carry_over":
        expected = mu + f * _transfer_s()
    else:
        q = math.exp(-1.0 / mu)
        frac = mu - q / (1.0 - q)  # E[frac(X)]
        upload = 8.0 * OUT_MB / BAND_OUT
        expected = mu + f * ((1.0 - 8.0 * IN_MB / BAND_IN) + 8.0 * IN_MB / BAND_IN + (1.0 - frac) + upload)
    se = lat.std() / math.sqrt(n)
    assert abs(lat.mean() - expected) < 4.5 * se, (lat.mean(), expected, se)
    assert np.mean(lat != np.round(lat)) > 0.99  # no longer whole steps


# Request logs of 0.9.0 (before execution.latency existed), sha256 of request start, end,
# outcome and the subtask events, first 16 hex digits: the shipped default bundle, 1,500
# users, 400 steps, seed 5, server capacity 0.5.
WHOLE_STEP_0_9_0 = {
    ("step", "shared", "uniform"): (764, "e6cff91591e213af"),
    ("carry_over", "fifo", "uniform"): (795, "ec424de0aabebd4b"),
    ("step", "shared", "queue_aware"): (765, "592ae38dc25647d9"),
}


@pytest.mark.parametrize("key", sorted(WHOLE_STEP_0_9_0))
def test_whole_step_runs_as_before(key):
    phase_changes, discipline, scheduler = key
    cfg = config_from_dict({"steps": 400, "seed": 5, "scheduler": scheduler, "users": {"count": 1500},
                            "server": {"capacity": 0.5},
                            "execution": {"phase_changes": phase_changes, "discipline": discipline}})
    assert cfg.execution.latency == "whole_step"
    rec = Simulation(cfg).run(progress=False)
    h = hashlib.sha256()
    for a in (rec.request_start, rec.request_end, rec.request_outcome, rec.subtask_events):
        h.update(np.ascontiguousarray(a).tobytes())
    assert rec.request_end.dtype == np.int64
    assert (rec.request_end.size, h.hexdigest()[:16]) == WHOLE_STEP_0_9_0[key]


def test_the_store_keeps_real_ends_and_latencies(tmp_path):
    """A substep run's store: request_end and request_latency as float64 on disk (NaN
    padding), read back as written, latency = end - start; a whole_step store keeps
    int64."""
    model = _bundle(tmp_path / "det", mean_work_s=0.7, deterministic=True)
    for latency, dtype in (("substep", np.float64), ("whole_step", np.int64)):
        rec = Simulation(_config(model, users=5, steps=300, think_s=5.0, latency=latency)).run(progress=False)
        path = write_result(rec, tmp_path / f"{latency}.zarr")
        ds = open_result(path)
        assert ds["request_end"].encoding["dtype"] == dtype
        r = flat_requests(ds)
        assert r["request_end"].dtype == dtype and r["request_latency"].dtype == dtype
        order = np.argsort(rec.request_type, kind="stable")
        np.testing.assert_array_equal(r["request_end"], rec.request_end[order])
        np.testing.assert_array_equal(r["request_latency"], (rec.request_end - rec.request_start)[order])
        # `gmmv summarize` prints real latencies to the millisecond, whole ones as before
        row = next(line for line in summarize(ds).splitlines() if line.startswith("all "))
        assert all(len(x.split(".")[1]) == (3 if latency == "substep" else 1) for x in row.split()[-3:]), row


def test_substep_is_refused_under_the_papers_law(run_yaml, capsys):
    from gmm_volunteer.cli.commands import main

    with pytest.raises(ConfigError, match="latency: substep needs progress: work"):
        config_from_dict({"execution": {"progress": "paper", "latency": "substep"}})
    before = sorted(p.name for p in run_yaml.parent.iterdir())
    argv = ["run", "run.yaml", "--set", "execution.progress=paper", "--set", "execution.latency=substep"]
    assert main(argv) == 2
    assert "latency: substep needs progress: work" in capsys.readouterr().err
    assert sorted(p.name for p in run_yaml.parent.iterdir()) == before


def test_a_routers_realised_delay_is_the_results_time(tmp_path):
    """The routers' passive feedback (docs/routing.md; D34): under substep a placed
    subtask's realised delay is its result's time minus its placement step, the closed
    form of the test above per decision: w on the server (node 0), w + transfers on a
    volunteer, to 1e-9 s; under whole_step the whole steps ceil of those."""
    from gmm_volunteer.policies.routing import DECISION_FIELDS

    w = 1.3
    model = _bundle(tmp_path / "det", mean_work_s=w, deterministic=True)
    for latency, on_server, on_volunteer in (("substep", w, w + _transfer_s()), ("whole_step", 2.0, 3.0)):
        data = _config(model, users=1, steps=1500, think_s=3.0, latency=latency).model_dump(mode="json")
        data["scheduler"] = "queue_aware"
        rec = Simulation(config_from_dict(data)).run(progress=False)
        _, log, _ = rec.policy_series["decision"]
        real = log[:, DECISION_FIELDS.index("realized")]
        node = log[:, DECISION_FIELDS.index("node")]
        done = ~np.isnan(real)
        assert done.sum() > 100 and (node[done] == 0).any() and (node[done] > 0).any()
        expected = np.where(node[done] == 0, on_server, on_volunteer)
        assert np.all(np.abs(real[done] - expected) < 1e-9), (latency, np.unique(real[done]))
