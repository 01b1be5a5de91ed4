"""Invariants of the state, checked after every factor on random small configs
(DESIGN.md section 6): one active request per user, no progress on offline nodes,
every request ends once, hard limits hold after the executor, readiness bounded."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_support import make_config
from gmm_volunteer.engine import Simulation
from gmm_volunteer.params import DONE, EMPTY, IDLE, LOADING, MEMORY, PAUSED, READY, STORAGE


def check_structure(sim: Simulation) -> None:
    S, P = sim.arrays, sim.params
    V = P.n_nodes
    online = S.online.astype(bool)
    assert online[0], "the server is always online"
    # Online list matches the flags.
    on = set(S.on_list[: S.n_on[0]].tolist())
    assert on == set(np.flatnonzero(online[1:]) + 1)
    # At most one active request per user, only while online; the list matches.
    active = set(S.rq_list[: S.n_rq[0]].tolist())
    assert active == set(np.flatnonzero(S.rq_type[1:] >= 0) + 1)
    assert all(online[i] for i in active)
    # Every started request is either active or logged exactly once.
    n_log = int(S.n_lg[0])
    assert int(S.rq_count.sum()) == n_log + len(active)
    pairs = set(zip(S.lg_user[:n_log].tolist(), S.lg_start[:n_log].tolist()))
    assert len(pairs) == n_log, "a request was logged twice"
    assert np.all(S.lg_end[:n_log] >= S.lg_start[:n_log] - 1)
    # No subtask in an active phase on an offline node; batches consistent with slots.
    sizes = {}
    for i in range(1, V):
        for p in range(P.max_slots):
            v = S.ex_node[i, p]
            ph = S.ex_phase[i, p]
            if v < 0:
                assert ph == IDLE and S.ex_batch[i, p] < 0
                continue
            if ph != DONE:
                assert online[v], f"subtask ({i},{p}) runs on offline node {v}"
                b = S.ex_batch[i, p]
                assert S.b_node[b] == v and S.b_phase[b] == ph
                sizes[b] = sizes.get(b, 0) + 1
    alive = S.b_list[: S.n_b[0]]
    assert set(alive.tolist()) == set(sizes), "batch pool and slots disagree"
    for b, n in sizes.items():
        assert S.b_size[b] == n
    # A node runs subtask j (nd_jcount > 0) exactly as long as a live batch of j sits on
    # it: the affinity scheduler finds busy nodes from the batches.
    jcount = np.zeros_like(S.nd_jcount)
    np.add.at(jcount, (S.b_node[alive], S.b_sub[alive]), S.b_size[alive])
    assert np.array_equal(jcount, S.nd_jcount)
    # Readiness never exceeds the data size; holders = online users with ready data.
    assert np.all(S.rd_mb <= P.sub_data_mb[None, :] + 1e-9)
    assert np.all(S.rd_mb >= -1e-9)
    for j in range(P.n_sub):
        holders = set(S.hd_list[j, : S.hd_n[j]].tolist())
        expect = set(np.flatnonzero((S.rd_state[1:, j] == READY) & online[1:]) + 1)
        assert holders == expect
    # Reserved storage is the data of the subtasks ready or downloading, and a node misses
    # n_sub - ready - downloads of them (schedule_downloads bounds from these).
    present = S.rd_state[1:] != EMPTY
    np.testing.assert_allclose(S.rd_reserved[1:], present @ P.sub_data_mb, rtol=0, atol=1e-9)
    assert np.array_equal(P.n_sub - S.rd_nready[1:] - S.nd_ndl[1:], (~present).sum(axis=1))
    # Downloads in the pool are exactly the loading/paused readiness cells.
    dls = S.dl_list[: S.n_dl[0]]
    cells = {(int(S.dl_node[d]), int(S.dl_sub[d])) for d in dls}
    expect = set(zip(*np.nonzero((S.rd_state == LOADING) | (S.rd_state == PAUSED))))
    assert cells == {(int(a), int(b)) for a, b in expect}
    # The executor skips its resume pass while no download is paused.
    assert S.n_paused[0] == np.count_nonzero(S.rd_state == PAUSED)
    # Downloads that do not run (paused, or their node offline) consume nothing.
    for d in dls:
        v, j = S.dl_node[d], S.dl_sub[d]
        if not (online[v] and S.rd_state[v, j] == LOADING):
            assert not S.dl_cons[d].any(), f"download {d} of node {v} is stopped but consumes"


def check_after_executor(sim: Simulation, t: int) -> None:
    """Memory and storage use within allocation once the executor has acted."""
    S = sim.arrays
    for v in [0] + S.on_list[: S.n_on[0]].tolist():
        mem = S.nd_cons[v, MEMORY] if S.nd_tstamp[v] == t else 0.0
        assert mem <= S.alloc[v, MEMORY] + 1e-6, f"node {v} memory {mem} > {S.alloc[v, MEMORY]}"
        if v > 0:
            assert S.rd_used[v] <= S.alloc[v, STORAGE] + 1e-6


def check_placements(sim: Simulation) -> None:
    """Unfinished user-node placements sit on online nodes that hold the data."""
    S = sim.arrays
    for i, p in zip(*np.nonzero(S.ex_node > 0)):
        v = S.ex_node[i, p]
        if S.ex_phase[i, p] != DONE:
            j = S.b_sub[S.ex_batch[i, p]]
            assert S.online[v] and S.rd_state[v, j] == READY


def run_checked(cfg, steps):
    sim = Simulation(cfg)
    check_structure(sim)
    for _ in range(steps):
        sim.advance()
        sim.act_executor()
        check_after_executor(sim, sim.t)
        sim.act_scheduler()
        sim.t += 1
        check_structure(sim)
        check_placements(sim)
    return sim


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    users=st.integers(3, 40),
    scheduler=st.sampled_from(["centralized", "uniform", "affinity"]),
    user_capacity=st.sampled_from([0.3, 1.0, 2.0]),
    server=st.sampled_from([0.5, 2.0, 10.0]),
    seed=st.integers(0, 2**16),
)
def test_invariants_hold_every_step(synthetic_model, users, scheduler, user_capacity, server, seed):
    cfg = make_config(synthetic_model, users=users, steps=150, scheduler=scheduler, seed=seed,
                      user_capacity=user_capacity, server=server,
                      availability={"online": {"dist": "exponential", "mean": 60.0},
                                    "offline": {"dist": "exponential", "mean": 60.0}},
                      requests={"think_time": {"dist": "exponential", "mean": 10.0},
                                "patience": {"dist": "pareto", "scale": 30.0, "shape": 1.5}})
    run_checked(cfg, 150)


def test_tight_resources_keep_invariants(synthetic_model):
    # Weak users and a small server: placements are squeezed by memory and storage.
    cfg = make_config(synthetic_model, users=40, steps=400, scheduler="uniform", seed=3,
                      user_capacity=0.2, server=0.3,
                      availability={"online": {"dist": "exponential", "mean": 200.0},
                                    "offline": {"dist": "exponential", "mean": 50.0}},
                      requests={"think_time": {"dist": "exponential", "mean": 5.0}})
    sim = run_checked(cfg, 400)
    ev = sim.arrays.ser_ev[:400].sum(axis=0)
    assert ev[:, 0].sum() > 0


@pytest.mark.parametrize("scheduler", ["centralized", "uniform", "affinity"])
def test_little_law_exact(synthetic_model, scheduler):
    """Sum over steps of active requests = sum over requests of steps active (Little's
    law in its sample-path form): every request is counted from its start step to its
    last active step, requests still active at the end up to the last step."""
    cfg = make_config(synthetic_model, users=80, steps=800, scheduler=scheduler, seed=2,
                      availability={"online": {"dist": "exponential", "mean": 300.0},
                                    "offline": {"dist": "exponential", "mean": 300.0}},
                      requests={"think_time": {"dist": "exponential", "mean": 15.0}})
    sim = Simulation(cfg)
    rec = sim.run(progress=False)
    S = sim.arrays
    open_users = S.rq_list[: S.n_rq[0]]
    in_flight = int(np.sum(cfg.steps - S.rq_start[open_users]))
    ended = int(np.sum(rec.request_end - rec.request_start + 1))
    assert int(rec.active_requests.sum()) == ended + in_flight
    assert len(rec.request_start) > 200
