"""Invariants of the simulator's state (DESIGN.md section 6), as plain checks that raise
AssertionError: used by the tests and by the policy conformance checker
(policies.conformance), so an outside policy is held to the same rules."""

from __future__ import annotations

import numpy as np

from gmm_volunteer.model.params import DONE, EMPTY, IDLE, LOADING, MEMORY, PAUSED, READY, STORAGE


def check_structure(sim: Simulation) -> None:
    S, P = sim.arrays, sim.params
    V, ns = P.n_nodes, P.n_srv  # nodes 0..ns-1 are the servers (docs/model.md D35)
    online = S.online.astype(bool)
    assert online[:ns].all(), "the servers are always online"
    # Online list matches the flags.
    on = set(S.on_list[: S.n_on[0]].tolist())
    assert on == set(np.flatnonzero(online[ns:]) + ns)
    # At most one active request per user, only while online; the list matches.
    active = set(S.rq_list[: S.n_rq[0]].tolist())
    assert active == set(np.flatnonzero(S.rq_type[ns:] >= 0) + ns)
    assert all(online[i] for i in active)
    # Every started request is either active or logged exactly once.
    n_log = int(S.n_lg[0])
    assert int(S.rq_count.sum()) == n_log + len(active)
    pairs = set(zip(S.lg_user[:n_log].tolist(), S.lg_start[:n_log].tolist()))
    assert len(pairs) == n_log, "a request was logged twice"
    assert np.all(S.lg_end[:n_log] >= S.lg_start[:n_log] - 1)
    # The end time (D34) lies within the request: not before its start, not after the
    # step that ended it (a result is in by the end of its step).
    assert np.all(S.lg_time[:n_log] <= S.lg_end[:n_log])
    assert np.all(S.lg_time[:n_log] >= S.lg_start[:n_log] - 1)
    # No subtask in an active phase on an offline node; batches consistent with slots.
    sizes = {}
    for i in range(ns, V):
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
        expect = set(np.flatnonzero((S.rd_state[ns:, j] == READY) & online[ns:]) + ns)
        assert holders == expect
    # Reserved storage is the data of the subtasks ready or downloading, and a node misses
    # n_sub - ready - downloads of them (schedule_downloads bounds from these).
    present = S.rd_state[ns:] != EMPTY
    np.testing.assert_allclose(S.rd_reserved[ns:], present @ P.sub_data_mb, rtol=0, atol=1e-9)
    assert np.array_equal(P.n_sub - S.rd_nready[ns:] - S.nd_ndl[ns:], (~present).sum(axis=1))
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
    """Memory and storage use within allocation once the executor has acted.

    The step's memory c_t (`nd_cons`) also holds batches that finished in the step (an
    upload that ended, or under carry_over a subtask that passed all its phases): their use
    is past, and the executor cannot abort them. So: what still runs on a node (its
    batches and running downloads) fits its memory, and the step's total does too unless
    the executor aborted everything it could (D11)."""
    S = sim.arrays
    batches = S.b_list[: S.n_b[0]]
    runs = [d for d in S.dl_list[: S.n_dl[0]] if S.rd_state[S.dl_node[d], S.dl_sub[d]] == LOADING]
    ns = sim.params.n_srv
    for v in list(range(ns)) + S.on_list[: S.n_on[0]].tolist():
        mine = batches[S.b_node[batches] == v]
        active = S.b_cons[mine, MEMORY].sum() + sum(S.dl_cons[d, MEMORY] for d in runs if S.dl_node[d] == v)
        assert active <= S.alloc[v, MEMORY] + 1e-6, f"node {v} memory of what runs {active} > {S.alloc[v, MEMORY]}"
        mem = S.nd_cons[v, MEMORY] if S.nd_tstamp[v] == t else 0.0
        assert mem <= S.alloc[v, MEMORY] + 1e-6 or (mine.size == 0 and not any(S.dl_node[d] == v for d in runs)), \
            f"node {v} memory {mem} > {S.alloc[v, MEMORY]} with consumers left to abort"
        if v >= ns:
            assert S.rd_used[v] <= S.alloc[v, STORAGE] + 1e-6


def check_placements(sim: Simulation) -> None:
    """Unfinished user-node placements sit on online nodes that hold the data."""
    S = sim.arrays
    for i, p in zip(*np.nonzero(S.ex_node >= sim.params.n_srv)):
        v = S.ex_node[i, p]
        if S.ex_phase[i, p] != DONE:
            j = S.b_sub[S.ex_batch[i, p]]
            assert S.online[v] and S.rd_state[v, j] == READY


def check_scheduler_duties(sim) -> None:
    """After the scheduler: the obsolete-request list is drained (its buffer holds one
    step's worth) and no request whose subtasks are all done is left unfinished."""
    S, P = sim.arrays, sim.params
    assert S.n_obs[0] == 0, f"{S.n_obs[0]} obsolete requests left uncancelled"
    for i in S.rq_list[: S.n_rq[0]]:
        waits = P.rtt_on and S.rq_due[i] > sim.t  # its servers' results are on their way (D39)
        assert waits or S.rq_ndone[i] < P.task_nsub[S.rq_type[i]], f"request of user {i} is done but not finished"
