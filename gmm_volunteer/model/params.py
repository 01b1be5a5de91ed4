"""Compile a run config and a model bundle into the flat arrays the kernels read.

Everything the numba kernels need is in one `Params` namedtuple of scalars and arrays,
built once per run. Index conventions (used throughout the kernels):

* nodes v = 0..N + S - 1: v = 0..S-1 are the dedicated servers (S = ``n_srv``, one in
  paper 2.1; several in config order, docs/model.md D35), v = S - 1 + i is user i's
  device (with one server, v = i);
* node classes c = 0..C: c = 0 is the servers, c = 1..C the user classes (docs/model.md
  D36), in the order of ``users.classes``; node v is of class ``S.node_class[v]``. Every
  per-class parameter has C + 1 rows (the availability laws' row 0 is never read);
* resources r: 0 band_in, 1 band_out, 2 cpu, 3 memory, 4 storage (`constants.RESOURCES`);
* subtasks j = 0..J-1: what a node's readiness, storage and batches are keyed by
  (docs/model.md D7). With `execution.subtask_data: model` (default) one j per distinct
  subtask type (CV model) the task types request, in order of first appearance, shared
  by every slot that runs it; with `slot` one j per (task type k, slot p) pair, in task
  order, as paper 2.2 indexes readiness by (v, k, p). Slot p of task type k is subtask
  `task_sub[k, p]`; subtask j runs subtask type `sub_type[j]`;
* consumption stages s: 0 data_download, 1 input_download, 2 execution, 3 upload;
* execution phases: 0 idle, 1 download, 2 execution, 3 upload, 4 done.
"""

from __future__ import annotations

import math
from collections import namedtuple

from numba import njit
from numba.experimental import structref

import numpy as np

from gmm_volunteer.model import laws
from gmm_volunteer.model.bundle import STAGES, Bundle
from gmm_volunteer.model.kernels.arma import batch_level_statistics
from gmm_volunteer.model.constants import (  # noqa: F401  (kernels import them from here too)
    BAND_IN, BAND_OUT, CONSUMPTION_RESOURCES, CPU, DONE, DOWNLOAD, EMPTY, EXECUTION, IDLE, LOADING,
    MEMORY, N_CRES, N_RES, PAUSED, PHASES, READY, RESOURCES, STORAGE, UPLOAD,
)
from gmm_volunteer.model.network import node_network
from gmm_volunteer.model.subtasks import subtask_keys, variant_tables  # noqa: F401  (read from here too)
from gmm_volunteer.model.structs import ParamsStruct

LEVEL_BATCH, LEVEL_BAND_IN, LEVEL_BAND_OUT = range(3)
MAX_BATCH_TABLE = 512  # memory and work estimates tabulated for batch sizes 0..MAX_BATCH_TABLE
WORK_LOGNORMAL, WORK_EXPONENTIAL = range(2)  # law of a batch's execution work around its mean

PARAM_FIELDS = (
    # sizes
    "n_users n_nodes n_sub n_task n_types max_slots hist n_classes cl_cum "
    # availability and requests
    "on_law off_law think_law patience_law type_cum "
    # tasks and subtasks
    "task_nsub task_sub sub_type n_req sub_acc var_list var_n task_nacc sub_data_mb sub_dl_mem sub_heaviest mem_est min_data_mb "
    # work a phase needs (progress from granted resources)
    "wk_mean wk_dist wk_lsd wk_vol sub_in_mb sub_out_mb batching carry_over substep fifo vol_overhead "
    # phase ends drawn from the fitted hazards (execution.progress: paper; D27)
    "paper_progress hz_nmax hz_res hz_cm hz_cs hz_terms hz_nterms hz_coef hz_icpt hz_type hz_logage "
    "hz_form hz_link hz_logn hz_tdev hz_work "
    # allocations
    "amax al_p al_q al_ar al_ma al_sigma al_lam al_zm al_zsd al_mean al_sd al_const al_yoff al_eoff restart burn_in "
    # consumption
    "cs_p cs_q cs_ar cs_ma cs_sigma cs_lam cs_zm cs_zsd cs_has level_kind levels n_levels "
    "cs_nhas st_mean st_sd idw_power bt_mean bt_sd cs_yoff cs_eoff cs_ymask cs_emask b_hist dl_hist "
    # the dedicated servers (D35): how many, each one's maximum allocation and allocation
    # fraction law (the control plane's starting capacity and the allocation kernel's)
    "n_srv sv_amax sv_mean sv_sd sv_const "
    # network distance (D35): whether any, each node's round-trip time to its home server,
    # its home server (the nearest), and its round-trip time to every server
    "rtt_on nd_rtt nd_home sv_rtt"
).split()
Params = namedtuple("Params", PARAM_FIELDS)

# Field types of Params (the kernels' struct type is built from this; build_params casts
# to it). "i" = int64 scalar, "f" = float64 scalar, (dtype, ndim) = C-contiguous array.
PARAM_SPEC = {
    **{k: "i" for k in "n_classes n_req n_users n_nodes n_sub n_task n_types max_slots hist restart burn_in b_hist dl_hist batching carry_over substep fifo paper_progress rtt_on n_srv".split()},
    **{k: "f" for k in "min_data_mb idw_power hz_nmax vol_overhead".split()},
    **{k: (np.float64, 1) for k in (
        "think_law patience_law type_cum cl_cum sub_data_mb sub_dl_mem sub_heaviest al_sigma al_lam "
        "al_zm al_zsd wk_lsd sub_in_mb sub_out_mb sub_acc hz_icpt hz_logage nd_rtt").split()},
    **{k: (np.int64, 1) for k in (
        "task_nsub sub_type var_n task_nacc al_p al_q al_const al_yoff al_eoff cs_nhas level_kind n_levels wk_dist "
        "hz_res hz_nterms hz_form hz_link hz_logn sv_const nd_home").split()},
    **{k: (np.float64, 2) for k in (
        "on_law off_law wk_vol mem_est wk_mean amax al_ar al_ma al_mean al_sd cs_sigma cs_lam cs_zm cs_zsd levels "
        "hz_cm hz_cs hz_coef hz_type hz_work sv_amax sv_mean sv_sd sv_rtt").split()},
    **{k: (np.int64, 2) for k in "task_sub var_list cs_p cs_q cs_yoff cs_eoff cs_ymask cs_emask".split()},
    "cs_has": (np.bool_, 2),
    **{k: (np.float64, 3) for k in "cs_ar cs_ma hz_tdev".split()},
    **{k: (np.float64, 4) for k in "st_mean st_sd bt_mean bt_sd".split()},
    "hz_terms": (np.int64, 3),
}
assert set(PARAM_SPEC) == set(PARAM_FIELDS)


def _cast(name, value):
    kind = PARAM_SPEC[name]
    if kind == "i":
        return int(value)
    if kind == "f":
        return float(value)
    dtype, ndim = kind
    arr = np.ascontiguousarray(value, dtype=dtype)
    if arr.ndim != ndim:
        raise ValueError(f"Params.{name}: expected {ndim} dimensions, got {arr.ndim}")
    return arr


def _numba_type(kind):
    from numba import types
    from numba.np.numpy_support import from_dtype

    if kind == "i":
        return types.int64
    if kind == "f":
        return types.float64
    dtype, ndim = kind
    return types.Array(from_dtype(np.dtype(dtype)), ndim, "C")


PARAMS_TYPE = ParamsStruct([(name, _numba_type(PARAM_SPEC[name])) for name in PARAM_FIELDS])


def dist_law(d) -> np.ndarray:
    """[kind, a, b] for a config distribution (`laws.law_array`)."""
    return d.law()


def memory_table(batch_sizes, execution_mb, n_max: int = MAX_BATCH_TABLE) -> np.ndarray:
    """Execution-memory estimate m^y for batch sizes 0..n_max (paper 2.3).

    Linear interpolation between measured batch sizes, linear extrapolation beyond the
    largest one (from the last two knots), zero for an empty batch.
    """
    xs = np.asarray(batch_sizes, dtype=np.float64)
    ys = np.asarray(execution_mb, dtype=np.float64)
    n = np.arange(n_max + 1, dtype=np.float64)
    out = np.interp(n, xs, ys)
    if len(xs) >= 2:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        beyond = n > xs[-1]
        out[beyond] = ys[-1] + slope * (n[beyond] - xs[-1])
    # Below the smallest measured size, scale down proportionally (m(0) = 0).
    below = n < xs[0]
    out[below] = ys[0] * n[below] / xs[0]
    return np.maximum(out, 0.0)


_WORK_CODES = {"lognormal": WORK_LOGNORMAL, "exponential": WORK_EXPONENTIAL}


def work_table(batch_sizes, mean_cpu_s, n_max: int = MAX_BATCH_TABLE) -> np.ndarray:
    """Mean execution work (CPU-seconds) of a batch of n subtasks, n = 0..n_max.

    Linear interpolation between measured batch sizes, linear extrapolation beyond the
    largest (from the last two knots) and proportional below the smallest, as for the
    memory estimates (`memory_table`): the same rules, so one helper. A single measured
    size gives work proportional to the batch size."""
    if len(batch_sizes) == 1:
        return float(mean_cpu_s[0]) / float(batch_sizes[0]) * np.arange(n_max + 1, dtype=np.float64)
    return memory_table(batch_sizes, mean_cpu_s, n_max)


def hazard_work_table(batch_sizes, mean_cpu_s, n_max: int = MAX_BATCH_TABLE) -> np.ndarray:
    """The work W_m(n) the work-fraction hazard divides by (docs/model.md D32): the work
    table made non-decreasing in n (a running maximum), so that a larger batch never
    has less work to do; size 0 reads size 1."""
    w = np.maximum.accumulate(work_table(batch_sizes, mean_cpu_s, n_max))
    w[0] = w[1]
    return w


def _arma_arrays(blocks, hist):
    n = len(blocks)
    p = np.zeros(n, np.int64)
    q = np.zeros(n, np.int64)
    ar = np.zeros((n, hist))
    ma = np.zeros((n, hist))
    sigma = np.zeros(n)
    lam = np.ones(n)
    zm = np.zeros(n)
    zsd = np.ones(n)
    for i, (arma, yj) in enumerate(blocks):
        if arma is None:
            continue
        p[i], q[i] = arma.order
        ar[i, : p[i]] = arma.ar
        ma[i, : q[i]] = arma.ma
        sigma[i] = arma.sigma
        lam[i], zm[i], zsd[i] = yj.lam, yj.z_mean, yj.z_sd
    return p, q, ar, ma, sigma, lam, zm, zsd


def history_length(bundle: Bundle) -> int:
    orders = [m.arma.order for m in bundle.allocation.values()]
    for stage in bundle.consumption.stages.values():
        orders += [r.arma.order for r in stage.resources.values()]
    need = max(1, max(max(p, q) for p, q in orders))
    return 1 << (need - 1).bit_length()  # a power of two: ring indices by bit mask


def _ring(order: int) -> int:
    return 0 if order == 0 else 1 << (int(order) - 1).bit_length()


def consumption_rings(cs_p, cs_q):
    """Where each consumption ARMA keeps its history inside a batch's or download's row.

    Per stage, resource by resource: a ring of z values (length the power of two >= p)
    and a ring of innovations (>= q), side by side, so that a row holds only what its
    models read (a few cache lines instead of N_CRES x 2 x hist values). Returns offsets,
    masks and the row widths for batches (stages 1-3) and downloads (stage 0)."""
    n_st, n_res = cs_p.shape
    yoff, eoff = np.zeros((n_st, n_res), np.int64), np.zeros((n_st, n_res), np.int64)
    ymask, emask = np.zeros((n_st, n_res), np.int64), np.zeros((n_st, n_res), np.int64)
    width = np.zeros(n_st, np.int64)
    for s in range(n_st):
        cur = 0
        for r in range(n_res):
            ly, le = _ring(cs_p[s, r]), _ring(cs_q[s, r])
            yoff[s, r], ymask[s, r] = cur, max(ly - 1, 0)
            cur += ly
            eoff[s, r], emask[s, r] = cur, max(le - 1, 0)
            cur += le
        width[s] = cur
    return yoff, eoff, ymask, emask, max(1, int(width[1:].max())), max(1, int(width[0]))


def _cumulative(probs) -> np.ndarray:
    """Cumulative probabilities, the last exactly 1 (a uniform draw always finds one)."""
    cum = np.cumsum(np.asarray(probs, dtype=np.float64))
    cum[-1] = 1.0
    return cum


def build_params(cfg, bundle: Bundle, key=None) -> Params:
    """Flatten `cfg` (a RunConfig) and `bundle` into kernel parameters. `key`, the run's
    hash key (`rng.hash_key`), draws the users' round-trip times to the server (D35);
    without it (a check before the run) they are left zero."""
    n_users = int(cfg.users.count)
    rtt_on, nd_rtt, nd_home, sv_rtt = node_network(cfg, n_users, key)
    n_srv = sv_rtt.shape[0]
    hist = history_length(bundle)
    n_types = len(bundle.subtask_types)

    probs = np.asarray(cfg.requests.type_probabilities, dtype=np.float64)
    if len(probs) != len(bundle.task_types):
        raise ValueError(
            f"requests.type_probabilities has {len(probs)} entries but the model bundle "
            f"defines {len(bundle.task_types)} task types "
            f"({', '.join(t.name for t in bundle.task_types)})"
        )
    type_cum = _cumulative(probs)

    n_task = len(bundle.task_types)
    max_slots = max(len(t.subtasks) for t in bundle.task_types)
    task_nsub = np.array([len(t.subtasks) for t in bundle.task_types], np.int64)
    per_model = cfg.execution.subtask_data == "model"
    task_sub, sub_type = subtask_keys(bundle, per_model)
    n_req = len(sub_type)
    sub_type, sub_acc, var_list, var_n, task_nacc = variant_tables(
        bundle, task_sub, task_nsub, sub_type, bool(cfg.execution.variants), per_model)
    n_sub = len(sub_type)
    st = bundle.subtask_types
    sub_data_mb = np.array([st[m].data_size_mb for m in sub_type])
    sub_dl_mem = np.array([st[m].memory.download_mb for m in sub_type])
    mem_est = np.stack([memory_table(st[m].memory.batch_sizes, st[m].memory.execution_mb) for m in sub_type])

    base_vec = cfg.base_profile.as_array()
    # Node classes (D36): row 0 the server, rows 1..C the user classes.
    classes = cfg.users.class_list(cfg.availability)
    amax = np.stack([cfg.server.maximum(base_vec)] + [c.maximum(base_vec) for c in classes])
    servers = getattr(cfg, "servers", None) or [cfg.server]

    alloc_blocks = [(bundle.allocation[r].arma, bundle.allocation[r].yeo_johnson) for r in RESOURCES]
    al_p, al_q, al_ar, al_ma, al_sigma, al_lam, al_zm, al_zsd = _arma_arrays(alloc_blocks, hist)
    # Rows of each resource in the allocation histories (kernels/allocation.py): p + 1
    # slots of z values and q + 1 of innovations.
    al_yoff = np.concatenate([[0], np.cumsum(al_p + 1)[:-1]]).astype(np.int64)
    al_eoff = np.concatenate([[0], np.cumsum(al_q + 1)[:-1]]).astype(np.int64)
    # Mean and sd of the allocation fraction per node class (0 server, 1 users) and
    # resource (paper 2.2: node-specific; config server.allocation, users.allocation).
    # A class whose sd is 0 for every resource is constant, mean x amax: it draws nothing.
    fitted = {r: (bundle.allocation[r].mean, bundle.allocation[r].sd) for r in RESOURCES}
    laws = [cfg.server.allocation] + [c.allocation for c in classes]
    al_mean = np.stack([law.fractions(fitted)[0] for law in laws])
    al_sd = np.stack([law.fractions(fitted)[1] for law in laws])
    al_const = np.all(al_sd == 0.0, axis=1).astype(np.int64)
    # each server's own (row 0 of the node classes is the first server's)
    sv_mean = np.stack([s.allocation.fractions(fitted)[0] for s in servers])
    sv_sd = np.stack([s.allocation.fractions(fitted)[1] for s in servers])

    # Consumption: stage x consumption-resource ARMA blocks and scaling statistics.
    cres = CONSUMPTION_RESOURCES
    n_st = len(STAGES)
    max_levels = max(len(bundle.consumption.stages[s].levels) for s in STAGES)
    blocks, has = [], np.zeros((n_st, N_CRES), np.bool_)
    levels = np.zeros((n_st, max_levels))
    n_levels = np.zeros(n_st, np.int64)
    level_kind = np.zeros(n_st, np.int64)
    st_mean = np.zeros((n_st, n_types, N_CRES, max_levels))
    st_sd = np.zeros((n_st, n_types, N_CRES, max_levels))
    kinds = {"batch_size": LEVEL_BATCH, "band_in": LEVEL_BAND_IN, "band_out": LEVEL_BAND_OUT}
    for s, sname in enumerate(STAGES):
        stage = bundle.consumption.stages[sname]
        n_levels[s] = len(stage.levels)
        levels[s, : n_levels[s]] = stage.levels
        level_kind[s] = kinds[stage.level]
        for r, rname in enumerate(cres):
            res = stage.resources.get(rname)
            if res is None:
                blocks.append((None, None))
                continue
            has[s, r] = True
            blocks.append((res.arma, res.yeo_johnson))
            st_mean[s, :, r, : n_levels[s]] = np.asarray(res.stats.mean)
            st_sd[s, :, r, : n_levels[s]] = np.asarray(res.stats.sd)
    cs = _arma_arrays(blocks, hist)
    cs = [a.reshape((n_st, N_CRES) + a.shape[1:]) for a in cs]
    cs_yoff, cs_eoff, cs_ymask, cs_emask, b_hist, dl_hist = consumption_rings(cs[0], cs[1])
    idw_power = float(bundle.consumption.idw_power)
    bt_mean, bt_sd = batch_level_statistics(levels, n_levels, level_kind, st_mean, st_sd, idw_power,
                                            LEVEL_BATCH, MAX_BATCH_TABLE)

    # Work of a phase (docs/model.md, "Progress from granted resources"): mean CPU-seconds
    # of a batch's execution per batch size, its law around the mean; transfer sizes.
    wk_mean = np.stack([work_table(st[m].work.batch_sizes, st[m].work.mean_cpu_s) for m in sub_type])
    wk_mean *= cfg.execution.work_scale  # the machine's speed against the bundle's (D30; 1 exactly as measured)
    wk_dist = np.array([_WORK_CODES[st[m].work.distribution] for m in sub_type], np.int64)
    wk_lsd = np.array([st[m].work.log_sd for m in sub_type])
    # A volunteer's batch costs this times the table's work (D29; 1 = as on the server),
    # read at the users' CPU maximum where the bundle gives it per CPU share
    # (row 0 the server's, 1: its work is the table's), times the class's own speed (D36)
    wk_vol = np.stack([np.ones(len(sub_type))] + [
        np.array([st[m].work.volunteer_factor_at(amax[1 + c, CPU]) * cl.work_scale for m in sub_type])
        for c, cl in enumerate(classes)])
    sub_in_mb = np.array([st[m].input_size_mb for m in sub_type])
    sub_out_mb = np.array([st[m].output_size_mb for m in sub_type])
    hz = hazard_arrays(bundle.hazard, n_types)
    # the work the work-fraction hazard divides by (D32): the bundle's, not work_scale's
    hz["hz_work"] = np.stack([hazard_work_table(st[m].work.batch_sizes, st[m].work.mean_cpu_s)
                              for m in range(n_types)])

    raw = dict(
        n_users=n_users,
        n_nodes=n_users + n_srv,
        n_sub=n_sub,
        n_task=n_task,
        n_types=n_types,
        max_slots=max_slots,
        hist=hist,
        n_classes=len(classes),
        cl_cum=_cumulative([c.share for c in classes]),
        # per node class; the server's row 0 repeats the first class's and is never read
        on_law=np.stack([dist_law(c.availability.online) for c in classes[:1] + classes]),
        off_law=np.stack([dist_law(c.availability.offline) for c in classes[:1] + classes]),
        think_law=dist_law(cfg.requests.think_time),
        patience_law=dist_law(cfg.requests.patience),
        type_cum=type_cum,
        task_nsub=task_nsub,
        task_sub=task_sub,
        sub_type=sub_type,
        n_req=n_req,
        sub_acc=sub_acc,
        var_list=var_list,
        var_n=var_n,
        task_nacc=task_nacc,
        sub_data_mb=sub_data_mb,
        sub_dl_mem=sub_dl_mem,
        # total size of the k largest subtask data, k = 0..n_sub (policies.common)
        sub_heaviest=np.concatenate([[0.0], np.cumsum(np.sort(sub_data_mb)[::-1])]),
        mem_est=mem_est,
        wk_mean=wk_mean,
        wk_dist=wk_dist,
        wk_lsd=wk_lsd,
        wk_vol=wk_vol,
        sub_in_mb=sub_in_mb,
        sub_out_mb=sub_out_mb,
        batching=1 if cfg.execution.batching else 0,
        carry_over=1 if cfg.execution.phase_changes == "carry_over" else 0,
        # requests and subtasks end when their last phase's work ran out inside the step (D34)
        substep=1 if cfg.execution.latency == "substep" else 0,
        # batches a node executes at once under discipline: fifo; 0 = shared (D28)
        fifo=cfg.execution.concurrency if cfg.execution.discipline == "fifo" else 0,
        # CPU a volunteer's process takes outside its executions, % of a core (D31)
        vol_overhead=float(cfg.execution.volunteer_overhead_cpu),
        paper_progress=1 if cfg.execution.progress == "paper" else 0,
        # batch sizes above the largest measured one are evaluated at it (clamp), or not
        hz_nmax=(float(bundle.consumption.stages["execution"].levels[-1])
                 if cfg.execution.hazard_batch_size == "clamp" else math.inf),
        **hz,
        min_data_mb=float(sub_data_mb.min()),
        amax=amax,
        al_p=al_p,
        al_q=al_q,
        al_ar=al_ar,
        al_ma=al_ma,
        al_sigma=al_sigma,
        al_lam=al_lam,
        al_zm=al_zm,
        al_zsd=al_zsd,
        al_mean=al_mean,
        al_sd=al_sd,
        al_const=al_const,
        al_yoff=al_yoff,
        al_eoff=al_eoff,
        restart=0 if cfg.allocation.restart == "burn_in" else 1,
        burn_in=int(cfg.allocation.burn_in_steps),
        cs_p=cs[0],
        cs_q=cs[1],
        cs_ar=cs[2],
        cs_ma=cs[3],
        cs_sigma=cs[4],
        cs_lam=cs[5],
        cs_zm=cs[6],
        cs_zsd=cs[7],
        cs_has=has,
        cs_nhas=has.sum(axis=1),  # innovations per sample of each stage
        level_kind=level_kind,
        levels=levels,
        n_levels=n_levels,
        st_mean=st_mean,
        st_sd=st_sd,
        idw_power=idw_power,
        bt_mean=bt_mean,
        bt_sd=bt_sd,
        cs_yoff=cs_yoff,
        cs_eoff=cs_eoff,
        cs_ymask=cs_ymask,
        cs_emask=cs_emask,
        b_hist=b_hist,
        dl_hist=dl_hist,
        n_srv=n_srv,
        sv_amax=np.stack([s.maximum(base_vec) for s in servers]),
        sv_mean=sv_mean,
        sv_sd=sv_sd,
        sv_const=np.all(sv_sd == 0.0, axis=1).astype(np.int64),
        rtt_on=rtt_on,
        nd_rtt=nd_rtt,
        nd_home=nd_home,
        sv_rtt=sv_rtt,
    )
    return Params(**{k: _cast(k, v) for k, v in raw.items()})


HAZARD_PHASES = PHASES  # phases DOWNLOAD..UPLOAD -> rows 0..2 of the hazard arrays
HAZARD_AGE_TABLE = 4096  # log(age + 1) of batch ages tabulated for the hazards
HAZARD_FORMS = ("paper", "work_fraction")  # hz_form codes (D32)
HAZARD_LINKS = ("logit", "cloglog")  # hz_link codes


def hazard_arrays(hazard, n_types: int) -> dict:
    """The bundle's fitted phase hazards (paper 2.2; fitting/hazard.py) as kernel arrays,
    one row per phase: the resource whose consumption is the covariate, covariate means
    and sds (consumption, batch size, log(age + 1)), the polynomial terms and their
    coefficients, the intercept and the type effects. Zeros when the bundle has none
    (then only progress: work can run; preflight says so)."""
    phases = hazard.phases if hazard is not None else {}
    n_terms = max([len(ph.terms) for ph in phases.values()] + [1])
    out = dict(hz_res=np.zeros(3, np.int64), hz_cm=np.zeros((3, 3)), hz_cs=np.ones((3, 3)),
               hz_terms=np.zeros((3, n_terms, 3), np.int64), hz_nterms=np.zeros(3, np.int64),
               hz_coef=np.zeros((3, n_terms)), hz_icpt=np.zeros(3), hz_type=np.zeros((3, n_types)),
               hz_logage=np.log1p(np.arange(HAZARD_AGE_TABLE, dtype=np.float64)),
               hz_form=np.zeros(3, np.int64), hz_link=np.zeros(3, np.int64), hz_logn=np.zeros(3, np.int64),
               hz_tdev=np.zeros((3, n_types, n_terms)))
    for h, name in enumerate(HAZARD_PHASES):
        ph = phases.get(name)
        if ph is None:
            continue
        out["hz_res"][h] = CONSUMPTION_RESOURCES.index(ph.consumption_resource)
        out["hz_cm"][h] = ph.covariate_mean
        out["hz_cs"][h] = ph.covariate_sd
        out["hz_nterms"][h] = len(ph.terms)
        if ph.terms:
            out["hz_terms"][h, : len(ph.terms)] = np.asarray(ph.terms)
            out["hz_coef"][h, : len(ph.coef)] = ph.coef
        out["hz_icpt"][h] = ph.intercept
        out["hz_type"][h] = ph.type_coef
        out["hz_form"][h] = HAZARD_FORMS.index(ph.form)
        out["hz_link"][h] = HAZARD_LINKS.index(ph.link)
        out["hz_logn"][h] = ph.batch_size_scale == "log"
        if ph.type_terms is not None and ph.terms:
            out["hz_tdev"][h, :, : len(ph.terms)] = np.asarray(ph.type_terms)
    return out


def mean_duration(law: np.ndarray) -> float:
    """Mean of the continuous duration law (for the stationary availability start);
    infinite for `never`."""
    if int(law[0]) == laws.PARETO and law[2] <= 1.0:
        raise ValueError("a Pareto availability law needs shape > 1 to have a stationary state")
    return laws.mean(law)


# Generated from PARAM_FIELDS: copies references, not data.
@njit(cache=True)
def _pack(T):
    s = structref.new(PARAMS_TYPE)
    s.n_users = T.n_users
    s.n_nodes = T.n_nodes
    s.n_sub = T.n_sub
    s.n_task = T.n_task
    s.n_types = T.n_types
    s.max_slots = T.max_slots
    s.hist = T.hist
    s.n_classes = T.n_classes
    s.cl_cum = T.cl_cum
    s.on_law = T.on_law
    s.off_law = T.off_law
    s.think_law = T.think_law
    s.patience_law = T.patience_law
    s.type_cum = T.type_cum
    s.task_nsub = T.task_nsub
    s.task_sub = T.task_sub
    s.sub_type = T.sub_type
    s.n_req = T.n_req
    s.sub_acc = T.sub_acc
    s.var_list = T.var_list
    s.var_n = T.var_n
    s.task_nacc = T.task_nacc
    s.sub_data_mb = T.sub_data_mb
    s.sub_dl_mem = T.sub_dl_mem
    s.sub_heaviest = T.sub_heaviest
    s.mem_est = T.mem_est
    s.wk_mean = T.wk_mean
    s.wk_dist = T.wk_dist
    s.wk_lsd = T.wk_lsd
    s.wk_vol = T.wk_vol
    s.sub_in_mb = T.sub_in_mb
    s.sub_out_mb = T.sub_out_mb
    s.batching = T.batching
    s.carry_over = T.carry_over
    s.substep = T.substep
    s.fifo = T.fifo
    s.vol_overhead = T.vol_overhead
    s.paper_progress = T.paper_progress
    s.hz_nmax = T.hz_nmax
    s.hz_res = T.hz_res
    s.hz_cm = T.hz_cm
    s.hz_cs = T.hz_cs
    s.hz_terms = T.hz_terms
    s.hz_nterms = T.hz_nterms
    s.hz_coef = T.hz_coef
    s.hz_icpt = T.hz_icpt
    s.hz_type = T.hz_type
    s.hz_logage = T.hz_logage
    s.hz_form = T.hz_form
    s.hz_link = T.hz_link
    s.hz_logn = T.hz_logn
    s.hz_tdev = T.hz_tdev
    s.hz_work = T.hz_work
    s.min_data_mb = T.min_data_mb
    s.amax = T.amax
    s.al_p = T.al_p
    s.al_q = T.al_q
    s.al_ar = T.al_ar
    s.al_ma = T.al_ma
    s.al_sigma = T.al_sigma
    s.al_lam = T.al_lam
    s.al_zm = T.al_zm
    s.al_zsd = T.al_zsd
    s.al_mean = T.al_mean
    s.al_sd = T.al_sd
    s.al_const = T.al_const
    s.al_yoff = T.al_yoff
    s.al_eoff = T.al_eoff
    s.restart = T.restart
    s.burn_in = T.burn_in
    s.cs_p = T.cs_p
    s.cs_q = T.cs_q
    s.cs_ar = T.cs_ar
    s.cs_ma = T.cs_ma
    s.cs_sigma = T.cs_sigma
    s.cs_lam = T.cs_lam
    s.cs_zm = T.cs_zm
    s.cs_zsd = T.cs_zsd
    s.cs_has = T.cs_has
    s.cs_nhas = T.cs_nhas
    s.level_kind = T.level_kind
    s.levels = T.levels
    s.n_levels = T.n_levels
    s.st_mean = T.st_mean
    s.st_sd = T.st_sd
    s.idw_power = T.idw_power
    s.bt_mean = T.bt_mean
    s.bt_sd = T.bt_sd
    s.cs_yoff = T.cs_yoff
    s.cs_eoff = T.cs_eoff
    s.cs_ymask = T.cs_ymask
    s.cs_emask = T.cs_emask
    s.b_hist = T.b_hist
    s.dl_hist = T.dl_hist
    s.n_srv = T.n_srv
    s.sv_amax = T.sv_amax
    s.sv_mean = T.sv_mean
    s.sv_sd = T.sv_sd
    s.sv_const = T.sv_const
    s.rtt_on = T.rtt_on
    s.nd_rtt = T.nd_rtt
    s.nd_home = T.nd_home
    s.sv_rtt = T.sv_rtt
    return s


def pack_params(P: Params):
    """The kernels' view of `P` (a ParamsRef sharing its arrays)."""
    return _pack(P)
