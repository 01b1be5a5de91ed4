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
docs/model.md D5), so a request is the same request in both when its (user, start step)
is; a request is paired when it completed in both.

The functions take plain arrays, so they serve result stores (`request_arrays`) and
tests alike.
"""

from __future__ import annotations

import numpy as np

from gmm_volunteer.io.conventions import CODE


def request_arrays(ds) -> dict[str, np.ndarray]:
    """user, type, start, latency (s) and completed flag per request of a result store."""
    start = np.asarray(ds["request_start"].values, dtype=np.int64)
    end = np.asarray(ds["request_end"].values, dtype=np.int64)
    return {"user": np.asarray(ds["request_user"].values, dtype=np.int64),
            "type": np.asarray(ds[CODE].values, dtype=np.int64),
            "start": start, "latency": (end - start).astype(np.float64),
            "completed": np.asarray(ds["request_outcome"].values) == 0}


def pair_requests(a: dict, b: dict) -> tuple[np.ndarray, np.ndarray]:
    """Indices (ia, ib) of the requests completed in both runs, matched on (user, start)."""
    ka = a["user"][a["completed"]] * (1 << 32) + a["start"][a["completed"]]
    kb = b["user"][b["completed"]] * (1 << 32) + b["start"][b["completed"]]
    common, ia, ib = np.intersect1d(ka, kb, assume_unique=False, return_indices=True)
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

    res = stats.bootstrap(tuple(groups), stat, method="BCa", n_resamples=n_resamples,
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
