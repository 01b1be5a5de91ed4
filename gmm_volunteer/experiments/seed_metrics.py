"""Each neighbouring system's own reported metrics, with its statistics (issue 22 item 5;
docs/routing.md section 7).

* ASRB (seed 000 section 6.2, Table 1): mean, median and IQR of the response time;
  the mean pairwise difference to a baseline with a phase-stratified BCa bootstrap
  interval and a one-sided t-test (H1: difference < 0);
* LA-IMR (seed 001 section VI, Table VI as the review gives it): per arrival level, the
  P99 latency, its standard deviation over replicates, the IQR and the maximum;
* queue-aware offloading (seed 002 "Experimentele Resultaten"): mean latency, the P95 of
  large tasks (request types whose mean work is above the median type's) and the
  estimators' MAPE per load level (routing_metrics).

Pairing (ASRB): two runs on the same seed share users and demand (common random numbers,
docs/model.md D5), so a user's n-th request is the same request in both (same type,
patience and think time before it); a request is paired when it completed in both.

The functions take plain arrays, so they serve result stores (`request_arrays`) and
tests alike.
"""

from __future__ import annotations

import numpy as np

from gmm_volunteer.io.conventions import TYPE, flat_requests


def request_arrays(ds) -> dict[str, np.ndarray]:
    """user, type, start, latency (s) and completed flag per request of a result store
    (type by type, `conventions.flat_requests`)."""
    r = flat_requests(ds)
    return {"user": r["request_user"].astype(np.int64), "type": r[TYPE].astype(np.int64),
            "start": r["request_start"], "latency": r["request_latency"].astype(np.float64),
            "completed": r["request_outcome"] == 0}


def request_ordinal(user: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Each request's ordinal among its user's requests, in order of start step (0 for a
    user's first)."""
    order = np.lexsort((np.asarray(start), np.asarray(user)))
    u = np.asarray(user)[order]
    idx = np.arange(u.size)
    first = np.r_[True, u[1:] != u[:-1]] if u.size else np.zeros(0, bool)
    out = np.empty(u.size, np.int64)
    out[order] = idx - np.maximum.accumulate(np.where(first, idx, 0))
    return out


def pair_requests(a: dict, b: dict) -> tuple[np.ndarray, np.ndarray]:
    """Indices (ia, ib) of the requests completed in both runs, matched on (user, the
    request's ordinal among the user's requests).

    Users are a closed loop: a request's start depends on when the previous one ended, so
    two schedulers' runs start the same request at different steps. Its type, patience and
    the think time before it are drawn keyed on (user, ordinal) (docs/model.md D5), so the
    n-th request of a user is the same request in both runs."""
    oa, ob = request_ordinal(a["user"], a["start"]), request_ordinal(b["user"], b["start"])
    ka = (a["user"] * (1 << 32) + oa)[a["completed"]]
    kb = (b["user"] * (1 << 32) + ob)[b["completed"]]
    common, ia, ib = np.intersect1d(ka, kb, assume_unique=True, return_indices=True)
    return np.flatnonzero(a["completed"])[ia], np.flatnonzero(b["completed"])[ib]


def response_summary(latency: np.ndarray) -> dict[str, float]:
    """Mean, median, IQR and maximum of completed requests' response times (s)."""
    x = np.asarray(latency, dtype=np.float64)
    if x.size == 0:
        return {k: float("nan") for k in ("n", "mean", "median", "iqr", "max")} | {"n": 0.0}
    q1, q3 = np.percentile(x, [25, 75])
    return {"n": float(x.size), "mean": float(x.mean()), "median": float(np.median(x)),
            "iqr": float(q3 - q1), "max": float(x.max())}


def paired_difference(diff: np.ndarray, phase: np.ndarray | None = None, n_resamples: int = 100_000,
                      confidence: float = 0.95, seed: int = 0) -> dict[str, float]:
    """Seed 000 Table 1: the mean pairwise difference, its phase-stratified BCa bootstrap
    interval and a one-sided t-test of H1: mean < 0.

    Stratification: the phases are resampled separately (scipy's bootstrap resamples each
    of several samples independently) and the statistic is the phase-size-weighted mean
    of the phase means, which is the overall mean of the original data."""
    from scipy import stats

    d = np.asarray(diff, dtype=np.float64)
    if d.size < 2:
        raise ValueError(f"need at least 2 paired requests, got {d.size}")
    if phase is None:
        phase = np.zeros(d.size, np.int64)
    phase = np.asarray(phase)
    groups = [d[phase == p] for p in np.unique(phase)]
    groups = [g for g in groups if g.size >= 2]  # a stratum of one cannot be jackknifed
    sizes = np.array([g.size for g in groups], dtype=np.float64)
    w = sizes / sizes.sum()

    def stat(*xs, axis=-1):
        return sum(wk * np.mean(x, axis=axis) for wk, x in zip(w, xs))

    # resamples (and BCa's jackknife samples) in batches of about 4 million values: a run
    # has tens of thousands of paired requests, and all at once would take gigabytes
    batch = max(1, int(4_000_000 // max(sizes.max(), 1)))
    res = stats.bootstrap(tuple(groups), stat, method="BCa", n_resamples=n_resamples, batch=batch,
                          confidence_level=confidence, vectorized=True, paired=False,
                          random_state=np.random.default_rng(seed))
    t = stats.ttest_1samp(d, 0.0, alternative="less")
    return {"n": float(d.size), "mean": float(d.mean()), "ci_low": float(res.confidence_interval.low),
            "ci_high": float(res.confidence_interval.high), "t": float(t.statistic),
            "p_one_sided": float(t.pvalue), "phases": float(len(groups))}


def phase_of(start: np.ndarray, boundaries) -> np.ndarray:
    """The phase index of each request from its start step: phase k starts at
    boundaries[k - 1] (phase 0 before the first boundary)."""
    return np.searchsorted(np.asarray(sorted(boundaries)), np.asarray(start), side="right")


def tail_by_level(latency_by_replicate: dict, q: float = 0.99) -> dict:
    """LA-IMR's Table VI statistics: for each arrival level, the latencies of each
    replicate (seed) -> the mean over replicates of the q-quantile, its standard deviation
    over replicates (ddof 1; NaN for one replicate), the IQR and the maximum of the
    pooled latencies."""
    out = {}
    for level, reps in latency_by_replicate.items():
        reps = [np.asarray(r, dtype=np.float64) for r in reps if len(r)]
        if not reps:
            continue
        qs = np.array([np.quantile(r, q) for r in reps])
        pooled = np.concatenate(reps)
        q1, q3 = np.percentile(pooled, [25, 75])
        out[level] = {"p": float(qs.mean()), "p_sd": float(qs.std(ddof=1)) if qs.size > 1 else float("nan"),
                      "iqr": float(q3 - q1), "max": float(pooled.max()), "replicates": float(qs.size)}
    return out


def large_types(mean_work_by_type: np.ndarray) -> np.ndarray:
    """Seed 002's large tasks: request types whose mean work is above the median type's."""
    w = np.asarray(mean_work_by_type, dtype=np.float64)
    return np.flatnonzero(w > np.median(w))


def queue_aware_summary(latency: np.ndarray, rtype: np.ndarray, large: np.ndarray) -> dict[str, float]:
    """Mean latency of completed requests and the P95 of the large types' ones (s)."""
    x = np.asarray(latency, dtype=np.float64)
    big = np.isin(np.asarray(rtype), large)
    return {"mean": float(x.mean()) if x.size else float("nan"),
            "p95_large": float(np.quantile(x[big], 0.95)) if big.any() else float("nan"),
            "n_large": float(big.sum())}


# --- tables of a sweep (gmmv report, gmmv results table) ---------------------------------

def _grid_runs(ds):
    """(grid point labels, seed, run store path) of every complete run of a combined
    dataset whose sweep directory is known (`results_dir` attribute)."""
    from pathlib import Path

    from gmm_volunteer.io.results import is_complete
    from gmm_volunteer.io.sweepdir import read_manifest

    where = ds.attrs.get("results_dir")
    if not where:
        return []
    paths = {r["name"]: Path(where) / r["path"] for r in read_manifest(where)["runs"]}
    names = ds["run_name"].to_series().dropna()
    out = []
    for idx, name in names.items():
        idx = idx if isinstance(idx, tuple) else (idx,)
        point = dict(zip(names.index.names, idx))
        seed = point.pop("seed", 0)
        p = paths.get(str(name))
        if p is not None and is_complete(p):
            out.append((point, seed, p))
    return out


def _phase_bounds(config_text: str) -> list[int]:
    import yaml

    cfg = yaml.safe_load(config_text) or {}
    steps = int(cfg.get("steps", 0))
    cuts = set()
    for ev in cfg.get("events") or []:
        cuts.add(int(ev["at_s"]))
        if ev.get("duration_s") is not None:
            cuts.add(int(ev["at_s"]) + int(ev["duration_s"]))
    return sorted(c for c in cuts if 0 < c < steps)


def statistics_table(ds):
    """Per grid point (seeds pooled or averaged as each seed reports them): the response
    time's mean, median and IQR of completed requests (seed 000), the P99 as the mean over
    seeds with its sd over seeds and the maximum (seed 001), and the P95 of the large
    request types (seed 002; large = mean work above the median type's, from the bundle).
    None when the sweep's run stores cannot be found."""
    import pandas as pd

    from gmm_volunteer.experiments.regime import request_work
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.io.results import open_result

    runs = _grid_runs(ds)
    if not runs:
        return None
    large = large_types(request_work(load_bundle(ds.attrs["model_bundle"])))
    groups: dict[tuple, list] = {}
    for point, _seed, path in runs:
        r = request_arrays(open_result(path))
        done = r["completed"]
        groups.setdefault(tuple(point.items()), []).append((r["latency"][done], r["type"][done]))
    rows = []
    for key, reps in groups.items():
        lat = np.concatenate([x for x, _ in reps])
        typ = np.concatenate([t for _, t in reps])
        s = response_summary(lat)
        tail = tail_by_level({0: [x for x, _ in reps]})
        q = queue_aware_summary(lat, typ, large)
        rows.append(dict(key) | {"seeds": len(reps), "completed (per seed)": s["n"] / len(reps),
                                 "mean (s)": s["mean"], "median (s)": s["median"], "IQR (s)": s["iqr"],
                                 "P99 (s)": tail.get(0, {}).get("p", np.nan),
                                 "P99 sd over seeds (s)": tail.get(0, {}).get("p_sd", np.nan),
                                 "max (s)": s["max"], "P95 large types (s)": q["p95_large"]})
    df = pd.DataFrame(rows)
    keys = [k for k, _ in next(iter(groups))]
    return df.set_index(keys)


def paired_table(ds, router: str = "asrb", baselines=("qedgeproxy", "proximity"),
                 n_resamples: int = 20_000):
    """Seed 000 Table 1 on a sweep over `scheduler`: for each other grid point, `router`
    minus each baseline, the mean difference of the response times of requests completed
    by both on the same seed (paired on user and the request's ordinal), its BCa interval stratified
    by seed and scripted phase, and the one-sided t-test (H1: the router is faster).
    None when the sweep lacks the router or every baseline."""
    import pandas as pd

    from gmm_volunteer.io.results import open_result

    runs = _grid_runs(ds)
    by = {}
    for point, seed, path in runs:
        if "scheduler" not in point:
            return None
        rest = tuple((k, v) for k, v in point.items() if k != "scheduler")
        by[(rest, point["scheduler"], seed)] = path
    rows = []
    rests = sorted({k[0] for k in by if k[1] == router})
    for rest in rests:
        for base in baselines:
            seeds = sorted(s for (r, sc, s) in by if r == rest and sc == router
                           and (rest, base, s) in by)
            if not seeds:
                continue
            diffs, strata = [], []
            for s in seeds:
                a_ds, b_ds = open_result(by[(rest, router, s)]), open_result(by[(rest, base, s)])
                a, b = request_arrays(a_ds), request_arrays(b_ds)
                ia, ib = pair_requests(a, b)
                phase = phase_of(a["start"][ia], _phase_bounds(a_ds.attrs.get("config", "")))
                diffs.append(a["latency"][ia] - b["latency"][ib])
                strata.append(phase + 1000 * len(strata))
            d = np.concatenate(diffs)
            if d.size < 2:
                continue
            res = paired_difference(d, np.concatenate(strata), n_resamples=n_resamples)
            rows.append(dict(rest) | {"a - b": f"{router} - {base}", "seeds": len(seeds),
                                      "paired requests": res["n"], "mean difference (s)": res["mean"],
                                      "BCa 95% low": res["ci_low"], "BCa 95% high": res["ci_high"],
                                      "t": res["t"], "p (one-sided, a faster)": res["p_one_sided"]})
    if not rows:
        return None
    df = pd.DataFrame(rows)
    return df.set_index([k for k, _ in rests[0]] + ["a - b"])


def queue_aware_paired_table(ds, n_resamples: int = 20_000):
    """Seed 002's comparison paired (issue 51): `queue_aware` minus each of its baselines
    and its two single-source estimators, as `paired_table` computes it per grid point."""
    return paired_table(ds, "queue_aware", ("model_only", "queue_only", "jsq", "jsq_s", "oracle", "edge_first"),
                        n_resamples)


def _surge_bounds(config_text: str) -> tuple[int, int, int] | None:
    """(start, end, steps) of the first scripted surge of the request rate (`demand.surges`)."""
    import yaml

    cfg = yaml.safe_load(config_text) or {}
    surges = (cfg.get("demand") or {}).get("surges") or []
    if not surges:
        return None
    start, dur = int(surges[0]["start"]), int(surges[0]["duration"])
    return start, start + dur, int(cfg.get("steps", 0))


def surge_table(ds, edge_s: int = 60):
    """Seed 002's burst adaptivity ("Experimentele Resultaten": under bursts the policy
    moves work between tiers and its latency settles sooner than a static policy's), per
    grid point, seeds pooled: the mean latency of the completed requests that started
    before, during and after the first scripted surge, and in its first and last `edge_s`
    seconds; and the share of the logged decisions placed on the server in each span (the
    decision log keeps the first `decision_log` decisions of a run). None without a surge
    or run stores."""
    import pandas as pd

    from gmm_volunteer.io.results import open_result

    runs = _grid_runs(ds)
    if not runs:
        return None
    bounds = _surge_bounds(open_result(runs[0][2]).attrs.get("config", ""))
    if bounds is None:
        return None
    a, b, steps = bounds
    spans = {"before": (0, a), "surge": (a, b), f"surge first {edge_s} s": (a, a + edge_s),
             f"surge last {edge_s} s": (b - edge_s, b), "after": (b, steps)}
    groups: dict[tuple, list] = {}
    for point, _seed, path in runs:
        store = open_result(path)
        r = request_arrays(store)
        done = r["completed"]
        dec = None
        if "decision" in store:  # the decision log (its first `decision_log` decisions)
            log = store["decision"]
            dec = (log.sel(decision_field="step").values, log.sel(decision_field="node").values)
        groups.setdefault(tuple(point.items()), []).append((r["start"][done], r["latency"][done], dec))
    rows = []
    for key, reps in groups.items():
        start = np.concatenate([x for x, _, _ in reps])
        lat = np.concatenate([y for _, y, _ in reps])
        row = dict(key)
        for name, (lo, hi) in spans.items():
            x = lat[(start >= lo) & (start < hi)]
            row[f"mean {name} (s)"] = float(x.mean()) if x.size else np.nan
        if all(d is not None for _, _, d in reps):
            t = np.concatenate([d[0] for _, _, d in reps])
            node = np.concatenate([d[1] for _, _, d in reps])
            for name in ("before", "surge", "after"):
                lo, hi = spans[name]
                m = (t >= lo) & (t < hi)
                row[f"to server {name}"] = float((node[m] == 0).mean()) if m.any() else np.nan
        rows.append(row)
    keys = [k for k, _ in next(iter(groups))]
    return pd.DataFrame(rows).set_index(keys)


def phase_table(ds):
    """Per grid point and scripted phase (seed 000's T1-T6: the spans between the events'
    starts and ends): the P99 latency of the completed requests that started in the phase
    and the completions per 1,000 s of it, pooled over seeds, as "P99 / rate". None when
    the runs have no scripted events."""
    import pandas as pd

    from gmm_volunteer.io.results import open_result

    runs = _grid_runs(ds)
    if not runs:
        return None
    first = open_result(runs[0][2])
    cuts = _phase_bounds(first.attrs.get("config", ""))
    if not cuts:
        return None
    steps = int(ds.attrs.get("steps") or first.sizes["time"])
    edges = [0, *cuts, steps]
    names = [f"T{k + 1} [{a}, {b})" for k, (a, b) in enumerate(zip(edges[:-1], edges[1:]))]
    groups: dict[tuple, list] = {}
    for point, _seed, path in runs:
        r = request_arrays(open_result(path))
        done = r["completed"]
        groups.setdefault(tuple(point.items()), []).append(
            (phase_of(r["start"][done], cuts), r["latency"][done]))
    rows = []
    for key, reps in groups.items():
        ph = np.concatenate([p for p, _ in reps])
        lat = np.concatenate([x for _, x in reps])
        row = dict(key)
        for k, name in enumerate(names):
            x = lat[ph == k]
            span = (edges[k + 1] - edges[k]) * len(reps)
            p99 = f"{np.quantile(x, 0.99):.1f}" if x.size else "-"
            row[name] = f"{p99} / {1000.0 * x.size / span:,.0f}"
        rows.append(row)
    keys = [k for k, _ in next(iter(groups))]
    return pd.DataFrame(rows).set_index(keys)
