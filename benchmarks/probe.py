"""The limit probe: the per-step arithmetic no layout of the simulator can avoid, for a
population, in the cheapest layout, timed in a fresh process like `benchmarks.one`.

    python -m benchmarks.probe --config configs/paper/base.yaml --set users.count=10000 \
        --steps 20000

Prints one line ``BENCH_JSON {...}`` (`per_step_us`, `per_step_cpu_us`, ...). `make
bench` divides every run's per-step cost by the probe's for the same population,
measured in the same bench run, so that the figures say how far the simulator is from
the arithmetic it must do, whatever the load of a shared machine did to both.

What a probe step does, for the run config's population, laws and model bundle
(`Params`), with the simulator's own samplers (counter-based keyed draws, the SplitMix64
streams and their ziggurat normals, the ARMA recursion, the inverse Yeo-Johnson, the IDW
weights, the binary timer heaps):

1. **Availability events.** Users switch online/offline at the ends of durations drawn
   from the availability laws (keyed draws, one timer heap); a user coming online
   restarts its allocation history with the config's burn-in draws; one going offline
   gives its dense row to the last online user.
2. **Request events.** Every online user alternates think time and a request that ends
   at its patience (keyed draws for the type and both durations, a second heap with
   tokens for stale timers).
3. **Allocations.** The ARMA of every resource for every online user and the server,
   innovations drawn as one block, rows dense and contiguous per lag (the layout of
   `kernels/allocation.py`), inverse Yeo-Johnson, clipped fraction of the maximum, written
   to a dense row per online user (not scattered by user id).
4. **Consumption.** One consumption sample per online user per step: the ARMA of every
   modelled resource of a stage, its innovations drawn as one block, the statistics
   interpolated (IDW) at the sample's level or looked up by batch size, inverse
   Yeo-Johnson, clipped; the user's row takes stage ``row % 4`` (subtask data, input
   download, execution, upload), so the four stages' models are all exercised; the
   sums of the step go to a per-step record, as the simulator records c_t.

Every array is bound once outside the loops (numba counts references on each read of a
structure's array in a loop, which costs more than this arithmetic). So the probe's work
is set by the population and the model alone, not by what the
schedulers make the users do: a run with fewer consumers than online users (the
corrected workload keeps most online users idle) can come under it, one with more
(every online user downloading at start-up) above it. What it leaves out is what the
simulator adds around that arithmetic: batches and downloads as entities, phases and
work, shares of nodes and links, completions, the executor and the scheduler.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import numpy as np
from numba import njit

from gmm_volunteer.model.kernels.arma import arma_value, yeo_johnson_inverse
from gmm_volunteer.model.kernels.heap import heap_pop, heap_push
from gmm_volunteer.model.laws import MAX_DURATION, discrete_duration
from gmm_volunteer.model.params import LEVEL_BAND_IN, LEVEL_BAND_OUT, LEVEL_BATCH, N_CRES, N_RES
from gmm_volunteer.model.rng import (
    KEY_AVAILABILITY, KEY_PATIENCE, KEY_REQUEST_TYPE, KEY_THINK, STREAM_ALLOCATION,
    STREAM_CONSUMPTION, fill_normals, keyed_uniform)

MARKER = "BENCH_JSON "
N_STAGES = 4


@njit(cache=True, inline="always")
def _duration(key, component, law, entity, counter):
    u1 = keyed_uniform(key, component, entity, counter, 0)
    u2 = keyed_uniform(key, component, entity, counter, 1)
    return discrete_duration(np.int64(law[0]), law[1], law[2], u1, u2)


@njit(cache=True)
def _burn_in(P, al_y, al_e, rng, row, t):
    """The burn-in draws of a restarted allocation history (innovations as one block)."""
    nb = P.burn_in
    if nb <= 0:
        return
    raw = np.empty(nb * N_RES)
    fill_normals(rng, STREAM_ALLOCATION, raw, nb * N_RES)
    al_p, al_q, al_ar, al_ma, al_sigma, al_yoff, al_eoff = P.al_p, P.al_q, P.al_ar, P.al_ma, P.al_sigma, P.al_yoff, P.al_eoff
    for b in range(nb):
        tb = t - nb + b
        for r in range(N_RES):
            py, qe = al_p[r] + 1, al_q[r] + 1
            eps = al_sigma[r] * raw[b * N_RES + r]
            z = eps
            for i in range(al_p[r]):
                z += al_ar[r, i] * al_y[al_yoff[r] + (tb - 1 - i) % py, row]
            for j in range(al_q[r]):
                z += al_ma[r, j] * al_e[al_eoff[r] + (tb - 1 - j) % qe, row]
            al_y[al_yoff[r] + tb % py, row] = z
            al_e[al_eoff[r] + tb % qe, row] = eps


@njit(cache=True)
def probe_steps(P, key, rng, st, t0, t1):
    """Steps t0..t1-1 of the probe; `st` holds its arrays (see `probe_state`). Every
    array is bound once, outside the loops (numba counts references on each read of a
    structure's array and on each array passed to a call: in a loop that costs more than
    the arithmetic)."""
    (online, on_list, on_pos, n_on, ah_t, ah_v, ah_n, rh_t, rh_v, rh_tok, rh_n, rq_tok,
     rq_active, av_count, rq_count, al_y, al_e, alloc, cs_h, cs_out, nrm, rec) = st
    w = np.empty(P.levels.shape[1])
    # the first user class's laws (node class 1; docs/model.md D36): the probe's users are alike
    on_law, off_law, think_law, patience_law, n_task = P.on_law[1], P.off_law[1], P.think_law, P.patience_law, P.n_task
    al_p, al_q, al_ar, al_ma, al_sigma, al_yoff, al_eoff = P.al_p, P.al_q, P.al_ar, P.al_ma, P.al_sigma, P.al_yoff, P.al_eoff
    al_const, al_mean, al_sd, al_zm, al_zsd, al_lam, amax = P.al_const, P.al_mean, P.al_sd, P.al_zm, P.al_zsd, P.al_lam, P.amax
    n_levels, knots, level_kind, st_mean, st_sd, has = P.n_levels, P.levels, P.level_kind, P.st_mean, P.st_sd, P.cs_has
    cs_ar, cs_ma, bt_mean, bt_sd, cs_sigma, cs_p, cs_q = P.cs_ar, P.cs_ma, P.bt_mean, P.bt_sd, P.cs_sigma, P.cs_p, P.cs_q
    cs_yoff, cs_ymask, cs_eoff, cs_emask = P.cs_yoff, P.cs_ymask, P.cs_eoff, P.cs_emask
    cs_zm, cs_zsd, cs_lam, idw_power = P.cs_zm, P.cs_zsd, P.cs_lam, P.idw_power
    for t in range(t0, t1):
        # 1. availability events
        while ah_n[0] > 0 and ah_t[0] <= t:
            _, i, _ = heap_pop(ah_t, ah_v, ah_t, ah_n)
            n = av_count[i] + 1
            av_count[i] = n
            if online[i]:
                online[i] = 0
                row = on_pos[i] + 1
                last = n_on[0]
                al_y[:, row] = al_y[:, last]
                al_e[:, row] = al_e[:, last]
                k = on_pos[i]
                lu = on_list[n_on[0] - 1]
                on_list[k] = lu
                on_pos[lu] = k
                n_on[0] -= 1
                on_pos[i] = -1
                rq_tok[i] += 1
                d = _duration(key, KEY_AVAILABILITY, off_law, i, n)
            else:
                online[i] = 1
                on_pos[i] = n_on[0]
                on_list[n_on[0]] = i
                n_on[0] += 1
                row = n_on[0]
                al_y[:, row] = 0.0
                al_e[:, row] = 0.0
                _burn_in(P, al_y, al_e, rng, row, t)
                rq_active[i] = 0
                dd = _duration(key, KEY_THINK, think_law, i, rq_count[i])
                rq_tok[i] += 1
                if dd < MAX_DURATION:
                    heap_push(rh_t, rh_v, rh_tok, rh_n, t + dd, i, rq_tok[i])
                d = _duration(key, KEY_AVAILABILITY, on_law, i, n)
            if d < MAX_DURATION:
                heap_push(ah_t, ah_v, ah_t, ah_n, t + d, i, t + d)
        # 2. request events: think time ends in a request, patience in the next think
        while rh_n[0] > 0 and rh_t[0] <= t:
            _, i, tok = heap_pop(rh_t, rh_v, rh_tok, rh_n)
            if tok != rq_tok[i] or not online[i]:
                continue
            c = rq_count[i]
            if rq_active[i] == 0:
                rq_count[i] = c + 1
                u = keyed_uniform(key, KEY_REQUEST_TYPE, i, c, 0)
                rq_active[i] = 1 + np.int64(u * n_task)
                d = _duration(key, KEY_PATIENCE, patience_law, i, c)
            else:
                rq_active[i] = 0
                d = _duration(key, KEY_THINK, think_law, i, c)
            rq_tok[i] += 1
            if d < MAX_DURATION:
                heap_push(rh_t, rh_v, rh_tok, rh_n, t + d, i, rq_tok[i])
        # 3. allocations: rows 0 (server, unless constant) .. n_on
        n = n_on[0] + 1
        lo = 1 if al_const[0] else 0
        hi = 1 if al_const[1] else n
        if hi > lo:
            fill_normals(rng, STREAM_ALLOCATION, nrm, (hi - lo) * N_RES)
        for r in range(N_RES):
            sigma = al_sigma[r]
            py, qe = al_p[r] + 1, al_q[r] + 1
            yw = al_y[al_yoff[r] + t % py]
            ew = al_e[al_eoff[r] + t % qe]
            for row in range(lo, hi):
                ew[row] = sigma * nrm[(row - lo) * N_RES + r]
                yw[row] = ew[row]
            for i in range(al_p[r]):
                c, yl = al_ar[r, i], al_y[al_yoff[r] + (t - 1 - i) % py]
                for row in range(lo, hi):
                    yw[row] += c * yl[row]
            for j in range(al_q[r]):
                c, el = al_ma[r, j], al_e[al_eoff[r] + (t - 1 - j) % qe]
                for row in range(lo, hi):
                    yw[row] += c * el[row]
        for row in range(n):
            cls = 0 if row == 0 else 1
            for r in range(N_RES):
                if al_const[cls]:
                    f = al_mean[cls, r]
                else:
                    z = al_y[al_yoff[r] + t % (al_p[r] + 1), row]
                    f = al_mean[cls, r] + al_sd[cls, r] * yeo_johnson_inverse(al_zm[r] + al_zsd[r] * z, al_lam[r])
                alloc[row, r] = min(max(f, 0.0), 1.0) * amax[cls, r]
        # 4. consumption: one sample per online user, stage row % 4
        m = n - 1
        fill_normals(rng, STREAM_CONSUMPTION, nrm, m * N_CRES)
        at = 0
        for row in range(1, n):
            stage = row % N_STAGES
            kind = level_kind[stage]
            nl = n_levels[stage]
            tab = kind == LEVEL_BATCH
            band = 0 if kind == LEVEL_BAND_IN else (1 if kind == LEVEL_BAND_OUT else -1)
            level = alloc[row, band] if band >= 0 else 1.0
            if not tab:
                q = min(max(level, knots[stage, 0]), knots[stage, nl - 1])
                exact = -1
                for i in range(nl):
                    dq = abs(q - knots[stage, i])
                    if dq < 1e-12:
                        exact = i
                        break
                    w[i] = 1.0 / (dq * dq) if idw_power == 2.0 else 1.0 / dq**idw_power
                if exact >= 0:
                    for i in range(nl):
                        w[i] = 0.0
                    w[exact] = 1.0
                else:
                    sw = 0.0
                    for i in range(nl):
                        sw += w[i]
                    for i in range(nl):
                        w[i] /= sw
            for r in range(N_CRES):
                if not has[stage, r]:
                    continue
                mean = 0.0
                sd = 0.0
                if tab:
                    mean = bt_mean[stage, 0, 1, r]
                    sd = bt_sd[stage, 0, 1, r]
                else:
                    for l in range(nl):
                        mean += w[l] * st_mean[stage, 0, r, l]
                        sd += w[l] * st_sd[stage, 0, r, l]
                eps = cs_sigma[stage, r] * nrm[at]
                at += 1
                p, qq = cs_p[stage, r], cs_q[stage, r]
                yo, ym, eo, em = cs_yoff[stage, r], cs_ymask[stage, r], cs_eoff[stage, r], cs_emask[stage, r]
                z = eps
                for i in range(p):
                    z += cs_ar[stage, r, i] * cs_h[row, yo + ((t - 1 - i) & ym)]
                for j in range(qq):
                    z += cs_ma[stage, r, j] * cs_h[row, eo + ((t - 1 - j) & em)]
                if p > 0:
                    cs_h[row, yo + (t & ym)] = z
                if qq > 0:
                    cs_h[row, eo + (t & em)] = eps
                val = arma_value(z, cs_zm[stage, r], cs_zsd[stage, r], cs_lam[stage, r], mean, sd)
                val = val if val > 0.0 else 0.0
                cs_out[row, r] = val
                rec[t, r] += val
        rec[t, N_CRES] = n_on[0]
    return t1


def probe_state(P, n_users: int, steps: int, seed: int):
    """The probe's arrays for n_users users from the stationary availability law (the
    simulator's own draw), and its key and streams, from `seed`."""
    from gmm_volunteer.model import rng as rng_mod
    from gmm_volunteer.run.engine import stationary_availability

    ss = rng_mod.seed_sequence(seed)
    gens = rng_mod.streams(ss)
    key = np.uint64(rng_mod.hash_key(ss))
    rng = rng_mod.stream_states(ss).copy()
    online0, _, next_change = stationary_availability(P, gens["init"])
    V = n_users + 1
    online = np.zeros(V, np.int8)
    on_list = np.full(n_users, -1, np.int64)
    on_pos = np.full(V, -1, np.int64)
    n_on = np.zeros(1, np.int64)
    ah_t = np.zeros(V + 8, np.int64)
    ah_v = np.zeros(V + 8, np.int64)
    ah_n = np.zeros(1, np.int64)
    rh_t = np.zeros(2 * V + 8, np.int64)
    rh_v = np.zeros(2 * V + 8, np.int64)
    rh_tok = np.zeros(2 * V + 8, np.int64)
    rh_n = np.zeros(1, np.int64)
    rq_tok = np.zeros(V, np.int64)
    rq_active = np.zeros(V, np.int64)
    av_count = np.zeros(V, np.int64)
    rq_count = np.zeros(V, np.int64)
    al_y = np.zeros((int((P.al_p + 1).sum()), V))
    al_e = np.zeros((int((P.al_q + 1).sum()), V))
    alloc = np.zeros((V, N_RES))
    cs_h = np.zeros((V, max(int(P.b_hist), int(P.dl_hist))))
    cs_out = np.zeros((V, N_CRES))
    nrm = np.zeros(V * max(N_RES, N_CRES))
    rec = np.zeros((steps, N_CRES + 1))
    st = (online, on_list, on_pos, n_on, ah_t, ah_v, ah_n, rh_t, rh_v, rh_tok, rh_n, rq_tok,
          rq_active, av_count, rq_count, al_y, al_e, alloc, cs_h, cs_out, nrm, rec)
    _init(P, key, rng, st, online0, next_change)
    return key, rng, st


@njit(cache=True)
def _init(P, key, rng, st, online0, next_change):
    (online, on_list, on_pos, n_on, ah_t, ah_v, ah_n, rh_t, rh_v, rh_tok, rh_n, rq_tok,
     rq_active, av_count, rq_count, al_y, al_e, alloc, cs_h, cs_out, nrm, rec) = st
    for k in range(online0.size):
        i = k + 1
        if next_change[k] < MAX_DURATION:
            heap_push(ah_t, ah_v, ah_t, ah_n, next_change[k], i, next_change[k])
        if online0[k]:
            online[i] = 1
            on_pos[i] = n_on[0]
            on_list[n_on[0]] = i
            n_on[0] += 1
            _burn_in(P, al_y, al_e, rng, n_on[0], 0)
            d = _duration(key, KEY_THINK, P.think_law, i, 0)
            rq_tok[i] += 1
            if d < MAX_DURATION:
                heap_push(rh_t, rh_v, rh_tok, rh_n, d, i, rq_tok[i])


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure(cfg_path: str, overrides: list[str], steps: int, warmup: int) -> dict:
    """Build the probe for the config's population, run `warmup` untimed steps (loads or
    compiles the kernel), then time `steps` steps."""
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.run.config import load_config
    from gmm_volunteer.model.params import build_params, pack_params

    cfg = load_config(cfg_path, overrides=overrides)
    params = build_params(cfg, load_bundle(cfg.model))
    P = pack_params(params)
    total = warmup + steps
    t0 = time.perf_counter()
    key, rng, st = probe_state(params, params.n_users, total, int(cfg.seed))
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    probe_steps(P, key, rng, st, 0, warmup)
    warm_s = time.perf_counter() - t0
    w0, c0 = time.perf_counter(), time.process_time()
    probe_steps(P, key, rng, st, warmup, total)
    run_s, cpu_s = time.perf_counter() - w0, time.process_time() - c0
    rec = st[-1]
    return {
        "users": int(params.n_users), "steps": steps, "warmup_steps": warmup,
        "build_s": build_s, "warmup_s": warm_s, "run_s": run_s, "run_cpu_s": cpu_s,
        "per_step_us": run_s / steps * 1e6, "per_step_cpu_us": cpu_s / steps * 1e6,
        "mean_online_users": float(rec[warmup:, N_CRES].mean()),
        "checksum": float(rec[warmup:, :N_CRES].sum()),
        "peak_rss_mb": _maxrss_mb(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probe", description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="run config YAML (population, laws, bundle)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override (repeatable)")
    ap.add_argument("--steps", type=int, default=20_000, help="timed steps (default 20,000)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 1:
        ap.error("--steps and --warmup must be >= 1")
    out = measure(args.config, args.overrides, args.steps, args.warmup)
    sys.stdout.write(MARKER + json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
