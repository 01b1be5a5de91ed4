"""The simulator state s_t (paper 2.1, eq. 1) as flat arrays, request-centric.

The paper's execution tensor y (users x nodes x task types x subtasks) is almost empty: a
user has at most one active request. We store execution per request slot (user i, slot p):
the node it is placed on, its phase and its batch. Same-node/same-subtask/same-phase/
same-age subtasks form explicit batch records (they share one completion draw), linked
per node and holding their own consumption history. Index structures (online users,
active requests, downloads, online holders of ready data per subtask, event heaps) keep a
step's cost proportional to what is active, not to N x N.

Scalars that kernels update live in length-1 arrays. Pools (batches, downloads, request
log) have a capacity that `grow_if_needed` doubles between steps.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit
from numba.experimental import structref

from gmm_volunteer.model.params import CPU, N_CRES, N_RES, Params
from gmm_volunteer.model.structs import StateStruct, struct_fields

STATE_FIELDS = (
    # availability (o, d^o): online flag, step of the last change, keyed period counter
    "online av_since av_count on_list on_pos n_on "
    # node classes (D36): each node's class (0 the server), online users per class
    "node_class cl_on "
    # scripted events (D25): hold end and background availability state per user, the
    # share of CPU and memory allocation each node keeps, nodes below a full share
    "av_hold av_sched ev_scale ev_n "
    # event heaps: availability transitions and request timers (think time / patience)
    "ah_t ah_v ah_n rh_t rh_v rh_tok rh_n "
    # requests (q, d^q)
    "rq_type rq_since rq_start rq_count rq_nthink rq_tok rq_ndone rq_acc rq_list rq_pos n_rq obs_list n_obs "
    # when the results the servers executed reach the requester (D39; with a distance only)
    "rq_due "
    # request log
    "lg_user lg_type lg_start lg_end lg_time lg_out lg_acc n_lg "
    # completed subtasks per subtask j (variants served, D24)
    "sv_count "
    # allocations a_t and their ARMA histories
    "alloc al_y al_e al_normals al_park_y al_park_e "
    # readiness x (per node and subtask) and its index structures
    "rd_state rd_mb rd_used rd_usertotal rd_reserved rd_nready rd_dl hd_list hd_n hd_pos "
    # subtask-data downloads (pool)
    "dl_node dl_sub dl_age dl_cons dl_h dl_list dl_pos n_dl dl_free n_dlfree dl_run n_dlrun n_paused "
    # execution y per request slot
    "ex_node ex_phase ex_batch ex_tend "
    # batches (pool) and their member lists
    "b_node b_sub b_phase b_age b_born b_size b_head b_mem b_cons b_h b_eps b_done b_tau b_share b_lead "
    "b_nnext b_nprev b_list b_pos n_b b_free n_bfree sl_next sl_prev cs_normals "
    # per-node aggregates
    "nd_bhead nd_jcount nd_ndl nd_committed nd_cons nd_fac nd_work nd_touched nd_tstamp n_touched "
    # merge table: batch born this step per (node, subtask, phase), hashed (ops.merge_record)
    "mg_key mg_id mg_t "
    # per-step series
    "key rng ser_online ser_active ser_salloc ser_scons ser_ucons ser_ev ser_work ser_demand "
    # per user class (D36; written only when there are several): online users, and the
    # band_in, band_out and CPU their nodes used
    "ser_conline ser_ccons "
    # per dedicated server (D35; written only when there are several): its allocation,
    # what it used and the CPU-seconds of the executions it finished
    "ser_svalloc ser_svcons ser_svwork "
    # each dedicated server's maximum allocation per resource, server s at s * N_RES...,
    # set by the control plane (autoscaler; docs/model.md D17); the allocation kernel
    # reads it, not P.sv_amax
    "srv_cap "
    # time-varying demand: cumulative rate multiplier and which durations it warps
    # ([think time, offline period]); length 1 and zeros for the stationary model (D18)
    "dm_cum dm_on"
).split()
State = namedtuple("State", STATE_FIELDS)


def _i(n, fill=0, dtype=np.int64):
    # Zeros come from np.zeros, whose pages the OS maps only when first written: a pool
    # or log takes memory for what it holds, not for its capacity.
    return np.zeros(n, dtype) if fill == 0 else np.full(n, fill, dtype=dtype)


def merge_table_size(batch_capacity: int) -> int:
    """Slots of the merge table for a batch pool of this capacity: a power of two with at
    least 4 slots per batch. A step records at most one entry per batch formed and one
    per phase change, at most twice the pool, so the table stays at most half full."""
    return 1 << int(4 * batch_capacity - 1).bit_length()


LOG_PRESIZE = 1 << 22  # request-log entries (about 120 MB) above which the log is pre-sized


def expected_requests(P, steps: int) -> int:
    """About how many requests a run of `steps` steps ends: online users x steps / mean
    think time (a request is at least one think time apart from the user's previous one),
    from the stationary share of online users; 0 when a law has no finite mean."""
    from gmm_volunteer.model import laws

    try:
        shares = np.diff(P.cl_cum, prepend=0.0)
        means = [(laws.mean(P.on_law[1 + c]), laws.mean(P.off_law[1 + c])) for c in range(P.n_classes)]
        m_think = laws.mean(P.think_law)
    except (AttributeError, TypeError, ValueError, IndexError):
        return 0
    if not all(np.isfinite(x) and x > 0 for x in (*np.ravel(means), m_think)):
        return 0
    on = sum(w * m_on / (m_on + m_off) for w, (m_on, m_off) in zip(shares, means))
    return int(P.n_users * on * steps / max(m_think, 1.0))


def allocate(P: Params, steps: int) -> State:
    """Empty state for `P` and a run of `steps` steps (everything offline, no requests)."""
    V, J, S = P.n_nodes, P.n_sub, P.max_slots
    C = getattr(P, "n_classes", 1)  # user classes (D36); sizing namespaces leave it out
    sv_amax = getattr(P, "sv_amax", P.amax[:1])  # the servers' maxima (D35); sizing namespaces give one
    n_srv = sv_amax.shape[0]
    b_cap = max(256, V // 2)
    d_cap = max(256, V // 4)
    # The request log is the one structure that grows with the horizon (the run's output:
    # 38 bytes per ended request). A large one is sized from the requests the run should
    # end, with room to spare, so that it seldom grows: growing copies it, and a copy of
    # a million users' log late in a run would double its memory for a moment. Capacity
    # costs address space only (`_i`: pages are mapped when first written). Small logs
    # start small and grow as they always did.
    lg_cap = max(1024, V * 4)
    expected = int(1.5 * expected_requests(P, steps))
    if expected > LOG_PRESIZE:
        lg_cap = max(lg_cap, expected)
    heap_a = V + 1
    heap_r = 4 * V + 16  # lazy deletion leaves stale entries; grown when needed
    st = State(
        online=np.zeros(V, np.uint8),
        av_since=_i(V),
        av_count=_i(V),
        on_list=_i(V, -1, np.int32),
        on_pos=_i(V, -1, np.int32),
        n_on=_i(1),
        node_class=_i(V),  # drawn when the run starts (engine.assign_classes)
        cl_on=_i(C + 1),
        av_hold=_i(V, -1),
        av_sched=np.zeros(V, np.uint8),
        ev_scale=np.ones(V),
        ev_n=_i(1),
        ah_t=_i(heap_a),
        ah_v=_i(heap_a, 0, np.int32),
        ah_n=_i(1),
        rh_t=_i(heap_r),
        rh_v=_i(heap_r, 0, np.int32),
        rh_tok=_i(heap_r),
        rh_n=_i(1),
        rq_type=_i(V, -1, np.int8),
        rq_since=_i(V),
        rq_start=_i(V),
        rq_count=_i(V),
        rq_nthink=_i(V),
        rq_tok=_i(V),
        rq_ndone=_i(V, 0, np.int32),
        rq_acc=np.zeros(V),
        rq_list=_i(V, -1, np.int32),
        rq_pos=_i(V, -1, np.int32),
        n_rq=_i(1),
        obs_list=_i(V, -1, np.int32),
        rq_due=np.zeros(V if getattr(P, "rtt_on", 0) else 1),
        n_obs=_i(1),
        lg_user=_i(lg_cap, 0, np.int32),
        lg_type=_i(lg_cap, 0, np.int8),
        lg_start=_i(lg_cap),
        lg_end=_i(lg_cap),
        lg_time=np.zeros(lg_cap),  # when it ended, s (real under execution.latency: substep, D34)
        lg_out=_i(lg_cap, 0, np.int8),
        lg_acc=np.zeros(lg_cap),
        n_lg=_i(1),
        # completed subtasks by (requested subtask, serving subtask): variants, D24
        sv_count=np.zeros((P.n_req, J), np.int64),
        alloc=np.zeros((V, N_RES)),
        al_y=np.zeros((int(np.sum(P.al_p)) + N_RES, V)),
        al_e=np.zeros((int(np.sum(P.al_q)) + N_RES, V)),
        al_normals=np.zeros(V * N_RES),
        al_park_y=np.zeros((V if P.restart == 1 else 1, int(np.sum(P.al_p)) + N_RES)),
        al_park_e=np.zeros((V if P.restart == 1 else 1, int(np.sum(P.al_q)) + N_RES)),
        rd_state=np.zeros((V, J), np.int8),
        rd_mb=np.zeros((V, J)),
        rd_used=np.zeros(V),
        rd_usertotal=np.zeros(1),
        rd_reserved=np.zeros(V),
        rd_nready=_i(V, 0, np.int32),
        rd_dl=np.full((V, J), -1, np.int32),
        # Entries past hd_n[j] are never read: zeros, which the OS maps lazily, so only the
        # rows' used prefixes (online holders) take memory.
        hd_list=np.zeros((J, V), np.int32),
        hd_n=_i(J),
        hd_pos=np.full((V, J), -1, np.int32),
        dl_node=_i(d_cap, -1, np.int32),
        dl_sub=_i(d_cap, -1, np.int32),
        dl_age=_i(d_cap),
        dl_cons=np.zeros((d_cap, N_CRES)),
        dl_h=np.zeros((d_cap, P.dl_hist)),
        dl_list=_i(d_cap, -1, np.int32),
        dl_pos=_i(d_cap, -1, np.int32),
        n_dl=_i(1),
        dl_free=np.arange(d_cap - 1, -1, -1, dtype=np.int32),
        n_dlfree=np.array([d_cap], np.int64),
        dl_run=_i(d_cap, -1, np.int32),
        n_dlrun=_i(1),
        n_paused=_i(1),
        ex_node=np.full((V, S), -1, np.int32),
        ex_phase=np.zeros((V, S), np.int8),
        ex_batch=np.full((V, S), -1, np.int32),
        # when the slot's last phase ended, s: kept under execution.latency: substep only
        # (D34; 8 bytes a slot, 80 MB at 10^6 users of 10 slots)
        ex_tend=np.zeros((V, S) if getattr(P, "substep", 0) else (1, 1)),
        b_node=_i(b_cap, -1, np.int32),
        b_sub=_i(b_cap, -1, np.int32),
        b_phase=_i(b_cap, 0, np.int8),
        b_age=_i(b_cap),
        b_born=_i(b_cap),
        b_size=_i(b_cap, 0, np.int32),
        b_head=_i(b_cap, -1, np.int64),
        b_mem=np.zeros(b_cap),
        b_cons=np.zeros((b_cap, N_CRES)),
        b_h=np.zeros((b_cap, P.b_hist)),
        b_eps=np.ones(b_cap),
        b_done=np.zeros(b_cap),
        b_tau=np.full(b_cap, -1.0),  # when in the step its phase ended (D26; carry_over only)
        b_share=np.zeros(b_cap),  # an executing batch's CPU factor in the step (D28; fifo only)
        # the part of its birth step a user's transfer phase had when it was carried in
        # (D26), which its round trip already ran in (D35)
        b_lead=np.zeros(b_cap),
        b_nnext=_i(b_cap, -1, np.int32),
        b_nprev=_i(b_cap, -1, np.int32),
        b_list=_i(b_cap, -1, np.int32),
        b_pos=_i(b_cap, -1, np.int32),
        n_b=_i(1),
        b_free=np.arange(b_cap - 1, -1, -1, dtype=np.int32),
        n_bfree=np.array([b_cap], np.int64),
        cs_normals=np.zeros((b_cap + d_cap) * N_CRES),
        sl_next=_i(V * S, -1, np.int32),
        sl_prev=_i(V * S, -1, np.int32),
        nd_bhead=_i(V, -1, np.int32),
        nd_jcount=np.zeros((V, J), np.int32),
        nd_ndl=_i(V, 0, np.int32),
        nd_committed=np.zeros(V),
        nd_cons=np.zeros((V, N_RES)),
        nd_fac=np.ones((V, 3)),
        nd_work=np.zeros(V),
        nd_touched=_i(V, -1, np.int32),
        nd_tstamp=_i(V, -1),
        n_touched=_i(1),
        mg_key=_i(merge_table_size(b_cap)),
        mg_id=_i(merge_table_size(b_cap), -1, np.int32),
        mg_t=_i(merge_table_size(b_cap), -1),
        key=np.zeros(1, np.uint64),
        rng=np.zeros(8, np.uint64),
        ser_online=np.zeros(steps, np.int32),
        ser_active=np.zeros(steps, np.int32),
        ser_salloc=np.zeros((steps, N_RES), np.float32),
        ser_scons=np.zeros((steps, N_RES), np.float32),
        ser_ucons=np.zeros((steps, N_RES), np.float32),
        ser_ev=np.zeros((steps, C + 1, 5), np.int32),  # per node class
        ser_work=np.zeros((steps, 2), np.float32),
        # progress: paper only (D27): the server's CPU demand before the share (%) and
        # its batches active in the step
        ser_demand=np.zeros((steps, 2), np.float32),
        ser_svalloc=np.zeros((steps if n_srv > 1 else 0, n_srv, N_RES), np.float32),
        ser_svcons=np.zeros((steps if n_srv > 1 else 0, n_srv, N_RES), np.float32),
        ser_svwork=np.zeros((steps if n_srv > 1 else 0, n_srv), np.float32),
        srv_cap=np.array(sv_amax, np.float64).ravel(),
        ser_conline=np.zeros((steps if C > 1 else 0, C), np.int32),
        ser_ccons=np.zeros((steps if C > 1 else 0, C, CPU + 1), np.float32),
        dm_cum=np.zeros(1),
        dm_on=np.zeros(2, np.int64),
    )
    return st


_POOL_GROUPS = {
    # pool name: (count field, free-stack field, free-count field, fields indexed by pool id)
    "batch": ("n_b", "b_free", "n_bfree",
              ("b_node", "b_sub", "b_phase", "b_age", "b_born", "b_size", "b_head", "b_mem",
               "b_cons", "b_h", "b_eps", "b_done", "b_tau", "b_share", "b_lead", "b_nnext", "b_nprev", "b_list", "b_pos")),
    "download": ("n_dl", "dl_free", "n_dlfree",
                 ("dl_node", "dl_sub", "dl_age", "dl_cons", "dl_h", "dl_list", "dl_pos", "dl_run")),
}
_LOG_FIELDS = ("lg_user", "lg_type", "lg_start", "lg_end", "lg_time", "lg_out", "lg_acc")


def _grow_array(a: np.ndarray, new_len: int, fill, used: int | None = None) -> np.ndarray:
    """`a` enlarged to `new_len` rows; only its first `used` rows (all by default) are
    copied, the rest of a zero-filled array is left unwritten (and so unmapped)."""
    shape = (new_len,) + a.shape[1:]
    out = np.zeros(shape, a.dtype) if fill == 0 else np.full(shape, fill, dtype=a.dtype)
    n = a.shape[0] if used is None else used
    out[:n] = a[:n]
    return out


def _grow_pool(st: State, changes: dict, fields, free: str, nfree: str, need: int) -> None:
    d = st._asdict()
    cap = d[fields[0]].shape[0]
    new_cap = cap
    while d[nfree][0] + (new_cap - cap) < need:
        new_cap *= 2
    if new_cap == cap:
        return
    for f in fields:
        changes[f] = _grow_array(d[f], new_cap, _POOL_FILL.get(f, 0))
    old_free = d[free][: d[nfree][0]]
    new_ids = np.arange(new_cap - 1, cap - 1, -1, dtype=np.int32)
    changes[free] = np.concatenate([new_ids, old_free, np.zeros(cap - old_free.size, np.int32)])
    changes[nfree] = np.array([new_ids.size + old_free.size], np.int64)


_POOL_FILL = {**{f: -1 for f in ("b_node", "b_sub", "b_head", "b_nnext", "b_nprev", "b_list", "b_pos",
                                 "dl_node", "dl_sub", "dl_list", "dl_pos", "dl_run")},
              "b_tau": -1.0}


def grow_if_needed(st: State, P: Params, t: int) -> State:
    """Enlarge pools that could run out during the next step (called between steps).

    Bounds for step t: new batches <= unplaced slots of the requests active after its
    requests factor + existing batches (`kernels.step.batch_need`); new downloads <=
    online nodes; ended requests <= users; heap pushes <= 2 per user.
    """
    from gmm_volunteer.model.kernels.step import batch_need

    changes: dict = {}
    _, _, _, b_fields = _POOL_GROUPS["batch"]
    need = batch_need(st.rh_t, st.rh_n, int(st.n_rq[0]), int(st.n_b[0]), int(P.max_slots), int(t))
    _grow_pool(st, changes, b_fields, "b_free", "n_bfree", int(need))
    _, _, _, d_fields = _POOL_GROUPS["download"]
    _grow_pool(st, changes, d_fields, "dl_free", "n_dlfree", int(st.n_on[0]) + 64)
    size = merge_table_size(changes.get("b_node", st.b_node).shape[0])
    if st.mg_key.shape[0] < size:  # between steps every entry is stale: start empty
        changes["mg_key"] = _i(size)
        changes["mg_id"] = _i(size, -1, np.int32)
        changes["mg_t"] = _i(size, -1)
    need = (changes.get("b_node", st.b_node).shape[0] + changes.get("dl_node", st.dl_node).shape[0]) * N_CRES
    if st.cs_normals.shape[0] < need:  # one innovation per modelled resource of each batch/download
        changes["cs_normals"] = np.zeros(need)
    V = P.n_nodes
    if st.n_lg[0] + V + 8 > st.lg_user.shape[0]:
        for f in _LOG_FIELDS:
            arr = getattr(st, f)
            changes[f] = _grow_array(arr, max(arr.shape[0] * 2, int(st.n_lg[0]) + V + 8), 0,
                                     used=int(st.n_lg[0]))
    if st.rh_n[0] + 2 * V + 8 > st.rh_t.shape[0]:
        for f in ("rh_t", "rh_v", "rh_tok"):
            arr = getattr(st, f)
            changes[f] = _grow_array(arr, arr.shape[0] * 2 + 2 * V, 0)
    return st._replace(**changes) if changes else st


def example_state() -> State:
    """A tiny allocation: every field's dtype and number of dimensions, which do not
    depend on sizes (the struct type below; a checkpoint's arrays are checked on them)."""
    from types import SimpleNamespace

    return allocate(SimpleNamespace(n_nodes=2, n_sub=1, n_req=1, hist=1, max_slots=1, restart=0, b_hist=1, dl_hist=1,
                                    al_p=np.zeros(N_RES, np.int64), al_q=np.zeros(N_RES, np.int64),
                                    amax=np.zeros((2, N_RES))), 1)


def _state_type():
    """Struct type from a tiny allocation: field types do not depend on sizes."""
    return StateStruct(struct_fields(example_state()))


STATE_TYPE = _state_type()


# Generated from STATE_FIELDS: copies references, not data.
@njit(cache=True)
def _pack(T):
    s = structref.new(STATE_TYPE)
    s.online = T.online
    s.av_since = T.av_since
    s.av_count = T.av_count
    s.on_list = T.on_list
    s.on_pos = T.on_pos
    s.n_on = T.n_on
    s.node_class = T.node_class
    s.cl_on = T.cl_on
    s.av_hold = T.av_hold
    s.av_sched = T.av_sched
    s.ev_scale = T.ev_scale
    s.ev_n = T.ev_n
    s.ah_t = T.ah_t
    s.ah_v = T.ah_v
    s.ah_n = T.ah_n
    s.rh_t = T.rh_t
    s.rh_v = T.rh_v
    s.rh_tok = T.rh_tok
    s.rh_n = T.rh_n
    s.rq_type = T.rq_type
    s.rq_since = T.rq_since
    s.rq_start = T.rq_start
    s.rq_count = T.rq_count
    s.rq_nthink = T.rq_nthink
    s.rq_tok = T.rq_tok
    s.rq_ndone = T.rq_ndone
    s.rq_acc = T.rq_acc
    s.rq_list = T.rq_list
    s.rq_pos = T.rq_pos
    s.n_rq = T.n_rq
    s.obs_list = T.obs_list
    s.n_obs = T.n_obs
    s.rq_due = T.rq_due
    s.lg_user = T.lg_user
    s.lg_type = T.lg_type
    s.lg_start = T.lg_start
    s.lg_end = T.lg_end
    s.lg_time = T.lg_time
    s.lg_out = T.lg_out
    s.lg_acc = T.lg_acc
    s.n_lg = T.n_lg
    s.sv_count = T.sv_count
    s.alloc = T.alloc
    s.al_y = T.al_y
    s.al_e = T.al_e
    s.al_normals = T.al_normals
    s.al_park_y = T.al_park_y
    s.al_park_e = T.al_park_e
    s.rd_state = T.rd_state
    s.rd_mb = T.rd_mb
    s.rd_used = T.rd_used
    s.rd_usertotal = T.rd_usertotal
    s.rd_reserved = T.rd_reserved
    s.rd_nready = T.rd_nready
    s.rd_dl = T.rd_dl
    s.hd_list = T.hd_list
    s.hd_n = T.hd_n
    s.hd_pos = T.hd_pos
    s.dl_node = T.dl_node
    s.dl_sub = T.dl_sub
    s.dl_age = T.dl_age
    s.dl_cons = T.dl_cons
    s.dl_h = T.dl_h
    s.dl_list = T.dl_list
    s.dl_pos = T.dl_pos
    s.n_dl = T.n_dl
    s.dl_free = T.dl_free
    s.n_dlfree = T.n_dlfree
    s.dl_run = T.dl_run
    s.n_dlrun = T.n_dlrun
    s.n_paused = T.n_paused
    s.ex_node = T.ex_node
    s.ex_phase = T.ex_phase
    s.ex_batch = T.ex_batch
    s.ex_tend = T.ex_tend
    s.b_node = T.b_node
    s.b_sub = T.b_sub
    s.b_phase = T.b_phase
    s.b_age = T.b_age
    s.b_born = T.b_born
    s.b_size = T.b_size
    s.b_head = T.b_head
    s.b_mem = T.b_mem
    s.b_cons = T.b_cons
    s.b_h = T.b_h
    s.b_eps = T.b_eps
    s.b_done = T.b_done
    s.b_tau = T.b_tau
    s.b_share = T.b_share
    s.b_lead = T.b_lead
    s.b_nnext = T.b_nnext
    s.b_nprev = T.b_nprev
    s.b_list = T.b_list
    s.b_pos = T.b_pos
    s.n_b = T.n_b
    s.b_free = T.b_free
    s.n_bfree = T.n_bfree
    s.sl_next = T.sl_next
    s.sl_prev = T.sl_prev
    s.cs_normals = T.cs_normals
    s.nd_bhead = T.nd_bhead
    s.nd_jcount = T.nd_jcount
    s.nd_ndl = T.nd_ndl
    s.nd_committed = T.nd_committed
    s.nd_cons = T.nd_cons
    s.nd_fac = T.nd_fac
    s.nd_work = T.nd_work
    s.nd_touched = T.nd_touched
    s.nd_tstamp = T.nd_tstamp
    s.n_touched = T.n_touched
    s.mg_key = T.mg_key
    s.mg_id = T.mg_id
    s.mg_t = T.mg_t
    s.key = T.key
    s.rng = T.rng
    s.ser_online = T.ser_online
    s.ser_active = T.ser_active
    s.ser_salloc = T.ser_salloc
    s.ser_scons = T.ser_scons
    s.ser_ucons = T.ser_ucons
    s.ser_ev = T.ser_ev
    s.ser_work = T.ser_work
    s.ser_demand = T.ser_demand
    s.ser_conline = T.ser_conline
    s.ser_ccons = T.ser_ccons
    s.ser_svalloc = T.ser_svalloc
    s.ser_svcons = T.ser_svcons
    s.ser_svwork = T.ser_svwork
    s.srv_cap = T.srv_cap
    s.dm_cum = T.dm_cum
    s.dm_on = T.dm_on
    return s


def pack_state(st: State):
    """The kernels' view of `st` (a StateRef sharing its arrays)."""
    return _pack(st)
