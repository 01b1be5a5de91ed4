"""Execution order on a node, `execution.discipline` (docs/model.md D28).

The closed network of tests/test_queueing.py with two job sizes: N users always online,
exponential think time of mean Z, unbounded patience; each request is one job, `short`
or `long` with probability 1/2, whose work is exponential of mean w_s = 5 or w_l = 45
CPU-seconds (`synthetic.two_size_bundle`) at a demand of one core; centralized on a
server of one core, batching off. One core and a demand of one core make the server a
single server under both disciplines, so they differ only in the order of service:

- `shared` (processor sharing) is insensitive: the network is product form and its means
  are those of exponential work of mean (w_s + w_l) / 2 (`theory.mva_delay_ld`);
- `fifo` (one batch at a time) is the finite-source M/H2/1//N queue, solved exactly as a
  Markov chain (`theory.fifo_mixture_delay`; with `concurrency: 2` on two cores, 40
  users, the M/H2/2//N queue). Its mean response is longer (work of
  squared coefficient of variation 2.28 > 1), and the wait before service does not
  depend on the job's own size, so the mean latencies of long and short jobs differ by
  exactly w_l - w_s; under processor sharing they differ by more (a long job is slowed
  by every short one).

The 1 s step is accounted for as in tests/test_queueing.py: the delay station's mean is
Z_d + 1 + e (Z_d = `discrete_mean`, 1 s before service, e = 1/2 the unused part of the
last step), the latency's mean R + e. The Markov chain takes that delay as exponential;
the simulator's is a whole number of steps plus 1.5 s, about 1/400 of its mean, an effect
this test measures with the rest.

Tolerance: 4.5 standard errors by batch means (1,200,000 steps, about 35,000 requests,
after a warm-up cut into 20 batches, SE = sd of the batch means / sqrt(20); about 1.7 s
for the mean latency of 71-92 s). A run of one discipline does not fit the other's
prediction within its tolerance (checked), so the test tells them apart.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine_support import make_config
from test_invariants import run_checked
from gmm_volunteer.cli.commands import main
from gmm_volunteer.io.bundlefiles import write_bundle
from gmm_volunteer.run.config import Exponential
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.model.params import CPU, EXECUTION
from gmm_volunteer.model.theory import discrete_mean, fifo_mixture_delay, mva_delay_ld, ps_server_rate
from gmm_volunteer.testing.synthetic import two_size_bundle

WORK = (5.0, 45.0)  # CPU-seconds: short, long
USERS, THINK = 20, 600.0
STEPS, WARMUP, BATCHES = 1_200_000, 2_000, 20
E_LAST = 0.5
Z_DELAY = discrete_mean(Exponential(dist="exponential", mean=THINK)) + 1.0 + E_LAST


def _config(path, discipline, seed, steps=STEPS, users=USERS, cores=1, **execution):
    return make_config(
        path, users=users, steps=steps, scheduler="centralized", seed=seed, server=1.0,
        base_profile={"cpu": 100.0 * cores},
        availability={"online": {"dist": "never"}, "offline": {"dist": "exponential", "mean": 10.0}},
        requests={"think_time": {"dist": "exponential", "mean": THINK}, "patience": {"dist": "never"},
                  "type_probabilities": [0.5, 0.5]},
        execution={"batching": False, "discipline": discipline, **execution},
    )


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("two") / "b"
    write_bundle(two_size_bundle(mean_work_s=WORK), path)
    return path


@pytest.fixture(scope="module")
def runs(bundle):
    return {d: Simulation(_config(bundle, d, seed=11)).run(progress=False) for d in ("shared", "fifo")}


def _batch_means(rec):
    """Per batch of steps: throughput, mean latency, mean latency of short and of long
    jobs, and long minus short."""
    edges = np.linspace(WARMUP, STEPS, BATCHES + 1).astype(int)
    done = rec.request_outcome == 0
    end, typ = rec.request_end[done], rec.request_type[done]
    lat = rec.request_latency[done].astype(float)
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        sel = (end >= a) & (end < b)
        s, lg = lat[sel & (typ == 0)].mean(), lat[sel & (typ == 1)].mean()
        out.append((sel.sum() / (b - a), lat[sel].mean(), s, lg, lg - s))
    bm = np.array(out)
    return bm.mean(axis=0), bm.std(axis=0, ddof=1) / math.sqrt(BATCHES)


def _predictions():
    x_f, r_f, _ = fifo_mixture_delay(USERS, Z_DELAY, WORK, (0.5, 0.5))
    mva = mva_delay_ld(USERS, Z_DELAY, ps_server_rate(1.0, 1.0, sum(WORK) / 2))
    return {"fifo": (x_f, r_f + E_LAST), "shared": (mva.throughput[-1], mva.response[-1] + E_LAST)}


def test_each_discipline_matches_its_closed_form_and_not_the_other(runs):
    pred = _predictions()
    measured = {d: _batch_means(rec) for d, rec in runs.items()}
    for d, rec in runs.items():
        assert np.all(rec.request_outcome == 0) and rec.online_users.min() == USERS
        (x, r, *_), (sx, sr, *_) = measured[d]
        px, pr = pred[d]
        assert abs(x - px) < 4.5 * sx, f"{d} throughput: measured {x:.5f} +- {sx:.5f}, theory {px:.5f}"
        assert abs(r - pr) < 4.5 * sr, f"{d} latency: measured {r:.3f} +- {sr:.3f}, theory {pr:.3f}"
    # The check discriminates: neither run's latency is within its tolerance of the other
    # discipline's prediction.
    for d, other in (("fifo", "shared"), ("shared", "fifo")):
        (_, r, *_), (_, sr, *_) = measured[d]
        assert abs(r - pred[other][1]) > 4.5 * sr, f"{d} run {r:.3f} +- {sr:.3f} also fits {other} {pred[other][1]:.3f}"


def test_short_jobs_wait_behind_long_ones_under_fifo_only(runs):
    (_, _, short_f, _, diff_f), (_, _, ss_f, _, sd_f) = _batch_means(runs["fifo"])
    (_, _, short_s, _, diff_s), (_, _, ss_s, _, sd_s) = _batch_means(runs["shared"])
    # FIFO: the wait does not depend on the job's size; long minus short is w_l - w_s.
    assert abs(diff_f - (WORK[1] - WORK[0])) < 4.5 * sd_f, (diff_f, sd_f)
    # Processor sharing: short jobs pass long ones (more than w_l - w_s between them) ...
    assert diff_s - (WORK[1] - WORK[0]) > 4.5 * sd_s, (diff_s, sd_s)
    # ... and are served far sooner than behind a FIFO queue.
    assert short_f - short_s > 4.5 * (ss_f + ss_s), (short_f, short_s)


def test_fifo_with_two_at_a_time_on_two_cores_matches_its_chain(bundle):
    """`concurrency: 2` on a server of two cores: the M/H2/2//N FIFO queue (40 users, so
    that jobs do queue), against `fifo_mixture_delay(..., servers=2)`; the wait still does
    not depend on the job's size."""
    users = 40
    rec = Simulation(_config(bundle, "fifo", seed=12, users=users, cores=2, concurrency=2)).run(progress=False)
    (x, r, _, _, diff), (sx, sr, _, _, sd) = _batch_means(rec)
    px, pr, _ = fifo_mixture_delay(users, Z_DELAY, WORK, (0.5, 0.5), servers=2)
    ps = mva_delay_ld(users, Z_DELAY, ps_server_rate(2.0, 1.0, sum(WORK) / 2)).response[-1] + E_LAST
    assert abs(x - px) < 4.5 * sx, (x, sx, px)
    assert abs(r - (pr + E_LAST)) < 4.5 * sr, (r, sr, pr + E_LAST)
    assert abs(r - ps) > 4.5 * sr, (r, sr, ps)  # not what sharing gives
    assert abs(diff - (WORK[1] - WORK[0])) < 4.5 * sd, (diff, sd)


def test_fifo_one_at_a_time_in_order_and_work_conserved(synthetic_model):
    """Under fifo at most k batches per node hold CPU at the end of a step, they are the
    oldest in execution, and no node does more work than the CPU it was granted."""
    for scheduler, server, k in (("centralized", 0.5, 1), ("uniform", 0.2, 2), ("affinity", 0.2, 1)):
        cfg = make_config(synthetic_model, users=120, steps=400, scheduler=scheduler, server=server, seed=7,
                          execution={"discipline": "fifo", "concurrency": k})
        sim = Simulation(cfg)
        granted = np.zeros(sim.params.n_nodes)
        queued = 0
        while sim.t < cfg.steps:
            t = sim.t
            sim.advance()
            S = sim.arrays
            granted[0] += S.alloc[0, CPU] / 100.0
            on = S.on_list[: S.n_on[0]]
            granted[on] += S.alloc[on, CPU] / 100.0
            touched = S.nd_touched[: S.n_touched[0]]
            assert np.all(S.nd_cons[touched, CPU] <= S.alloc[touched, CPU] * (1 + 1e-9) + 1e-9), t
            # batches still executing that were there before this step: those that ran
            # (CPU > 0) number at most k and entered execution before every waiting one
            live = S.b_list[: S.n_b[0]]
            ex = live[(S.b_phase[live] == EXECUTION) & (S.b_born[live] < t)]
            for v in np.unique(S.b_node[ex]):
                mine = ex[S.b_node[ex] == v]
                ran = mine[S.b_cons[mine, CPU] > 0.0]
                waited = mine[S.b_cons[mine, CPU] == 0.0]
                assert ran.size <= k, (t, v, ran.size)
                if ran.size and waited.size:
                    queued += 1
                    assert S.b_born[ran].max() <= S.b_born[waited].min(), (t, v)
            sim.act_executor()
            sim.act_scheduler()
            sim.t += 1
        assert queued > 10, scheduler  # batches did wait in the queue
        assert np.all(sim.arrays.nd_work <= granted * (1 + 1e-9) + 1e-9), scheduler


@pytest.mark.parametrize("phase_changes", ["step", "carry_over"])
@pytest.mark.parametrize("scheduler", ["centralized", "uniform", "affinity"])
def test_state_invariants_hold_under_fifo(synthetic_model, scheduler, phase_changes):
    cfg = make_config(synthetic_model, users=40, steps=300, scheduler=scheduler, seed=5, server=0.3,
                      execution={"discipline": "fifo", "phase_changes": phase_changes})
    sim = run_checked(cfg, 300)
    assert sim.arrays.ser_ev[:300, :, 0].sum() > 0  # subtasks completed


def test_same_seed_same_fifo_trajectory(synthetic_model):
    cfg = make_config(synthetic_model, users=60, steps=300, scheduler="uniform", seed=2, server=0.3,
                      execution={"discipline": "fifo", "concurrency": 2, "phase_changes": "carry_over"})
    a, b = (Simulation(cfg).run(progress=False) for _ in range(2))
    assert np.array_equal(a.request_latency, b.request_latency)
    assert np.array_equal(a.server_consumption, b.server_consumption)


BASE = "seed: 1\nsteps: 600\nusers: {count: 200, capacity: 1}\nserver: {capacity: 5}\n"


@pytest.mark.parametrize("sets, says", [
    (["execution.discipline=lifo"], "execution.discipline"),
    (["execution.discipline=fifo", "execution.concurrency=0"], "execution.concurrency"),
    (["execution.concurrency=2"], "concurrency: 2 needs discipline: fifo"),
    (["execution.discipline=fifo", "execution.progress=paper"], "discipline: fifo needs progress: work"),
])
def test_validate_refuses_bad_disciplines_with_exit_2(tmp_path, monkeypatch, capsys, sets, says):
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(BASE)
    args = ["validate", str(cfg)]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and says in err, err
    assert main(["validate", str(cfg), "--set", "execution.discipline=fifo", "--set", "execution.concurrency=3"]) == 0
