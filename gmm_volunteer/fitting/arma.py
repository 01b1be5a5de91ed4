"""Generative ARMA blocks (paper 2.2, "Allocated resources" and "Resource consumption").

A series x is turned into the zero-mean, unit-variance series the ARMA is fitted on:

    s = (x - mean) / sd              standardize
    y = yeo_johnson(s, lam)          lam by maximum likelihood on [0, 2] (scipy's llf)
    z = (y - z_mean) / z_sd          re-standardize

then ARMA(p, q) with p in {1, 2, 5, 10}, q in {0, 1, 2, 5, 10} is fitted to z by exact
maximum likelihood (statsmodels ARIMA, state space, no trend) and the order with the
lowest AIC is kept. The bundle stores the ARMA and (lam, z_mean, z_sd); the scaling
statistics (mean, sd) are stored beside it by the caller (docs/formats.md, section 1).

Several independent segments (one per measured run) are fitted jointly by
concatenating them with `SEGMENT_GAP` missing values in between: the Kalman filter
skips missing observations, so no spurious jump joins two runs, and after the gap the
state has nearly forgotten the previous run (docs/fitting.md).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from gmm_volunteer.fitting.rounding import sig, sig_list

P_CANDIDATES = (1, 2, 5, 10)
Q_CANDIDATES = (0, 1, 2, 5, 10)
FULL_GRID: tuple[tuple[int, int], ...] = tuple((p, q) for p in P_CANDIDATES for q in Q_CANDIDATES)
# `--quick`: the paper's p and q up to 5 and 2 (9 of the 20 candidates, the cheap ones).
QUICK_GRID: tuple[tuple[int, int], ...] = tuple((p, q) for p in (1, 2, 5) for q in (0, 1, 2))
# Missing steps between joined runs. After g missing steps the filter's memory of the
# previous run is the ACF at lag g + 1 (0.02 for an AR(1) with phi = 0.7 at g = 10);
# longer gaps cost Kalman steps on every candidate for little gain.
SEGMENT_GAP = 10
# Quasi-Newton iterations per candidate. The small candidates converge in 5..25; the
# large over-parametrized ones (near-cancelling roots) creep on for hundreds of
# iterations at tens of seconds each, and stopping them early only raises their AIC.
MAXITER = 50
LAMBDA_BOUNDS = (0.0, 2.0)
# Within-run pairs at a candidate's longest lag needed to fit it (none left: white noise).
MIN_PAIRS = 30
SEGMENT_ORDER_SEED = 20260812
# Below this spread a series is treated as constant (no transform, white-noise ARMA).
_CONSTANT_SD = 1e-9


@dataclass
class Transform:
    """Standardize -> Yeo-Johnson -> re-standardize, with its fitted constants."""

    mean: float
    sd: float
    lam: float
    z_mean: float
    z_sd: float
    lam_unconstrained: float = float("nan")  # scipy's unrestricted MLE, for the report

    def forward(self, x: np.ndarray) -> np.ndarray:
        from scipy.stats import yeojohnson

        s = (np.asarray(x, float) - self.mean) / self.sd
        return (yeojohnson(s, lmbda=self.lam) - self.z_mean) / self.z_sd

    def inverse(self, z: np.ndarray) -> np.ndarray:
        y = self.z_mean + self.z_sd * np.asarray(z, float)
        return self.mean + self.sd * yeo_johnson_inverse(y, self.lam)


def yeo_johnson_inverse(y: np.ndarray, lam: float) -> np.ndarray:
    """Inverse of the Yeo-Johnson transform (scipy ships only the forward direction).

    Values outside the range of the forward transform map to -inf / +inf (docs/fitting.md).
    """
    y = np.asarray(y, float)
    out = np.empty_like(y)
    pos = y >= 0
    with np.errstate(divide="ignore"):
        _yj_inverse_into(out, y, pos, lam)
    return out


def _yj_inverse_into(out: np.ndarray, y: np.ndarray, pos: np.ndarray, lam: float) -> None:
    # Outside the forward transform's range (lam > 2: y < -1/(lam-2); lam < 0:
    # y > -1/lam) the base is clamped at 0 and the result is -inf / +inf, never NaN.
    if abs(lam) < 1e-12:
        out[pos] = np.expm1(y[pos])
    else:
        out[pos] = np.power(np.maximum(lam * y[pos] + 1.0, 0.0), 1.0 / lam) - 1.0
    if abs(lam - 2.0) < 1e-12:
        out[~pos] = -np.expm1(-y[~pos])
    else:
        out[~pos] = 1.0 - np.power(np.maximum(1.0 - (2.0 - lam) * y[~pos], 0.0), 1.0 / (2.0 - lam))


def yeo_johnson_lambda(s: np.ndarray) -> float:
    """Maximum likelihood lambda restricted to [0, 2] (scipy's Yeo-Johnson log-likelihood).

    Only for lambda in [0, 2] does the transform map the real line onto itself; outside,
    one tail is squeezed into a bounded interval and an ARMA sample beyond it has no
    preimage (the simulator would saturate it to an arbitrary huge value). A generative
    model needs every sample to map back, so the likelihood is maximized on [0, 2].
    """
    from scipy.optimize import minimize_scalar
    from scipy.stats import yeojohnson_llf

    res = minimize_scalar(lambda lam: -yeojohnson_llf(lam, s), bounds=LAMBDA_BOUNDS, method="bounded", options={"xatol": 1e-7})
    lo, hi = LAMBDA_BOUNDS
    # the bounded search stops within its tolerance of a boundary optimum: snap to it
    return lo if res.x - lo < 1e-5 else hi if hi - res.x < 1e-5 else float(res.x)


def fit_transform(x: np.ndarray, mean: float | None = None, sd: float | None = None) -> tuple[Transform, np.ndarray]:
    """Fit the transform on `x` (NaN ignored); return it and the transformed series.

    `mean`/`sd` default to the series' own; pass them to standardize with
    statistics computed elsewhere (e.g. per run group, see `gmm_volunteer.fitting.consumption`).
    """
    from scipy.stats import yeojohnson, yeojohnson_normmax

    x = np.asarray(x, float)
    ok = np.isfinite(x)
    m = float(np.mean(x[ok])) if mean is None else float(mean)
    s = float(np.std(x[ok], ddof=1)) if sd is None else float(sd)
    if not s > _CONSTANT_SD:
        return Transform(m, 1.0, 1.0, 0.0, 1.0), np.where(ok, 0.0, np.nan)
    std = (x[ok] - m) / s
    if float(np.std(std)) <= _CONSTANT_SD:
        return Transform(m, s, 1.0, 0.0, 1.0), np.where(ok, 0.0, np.nan)
    lam = yeo_johnson_lambda(std)
    y = yeojohnson(std, lmbda=lam)
    z_mean, z_sd = float(np.mean(y)), float(np.std(y, ddof=1))
    t = Transform(m, s, lam, z_mean, z_sd, lam_unconstrained=float(yeojohnson_normmax(std)))
    z = np.full_like(x, np.nan)
    z[ok] = (y - z_mean) / z_sd
    return t, z


def join_segments(segments: list[np.ndarray], gap: int = SEGMENT_GAP) -> np.ndarray:
    """Concatenate independent segments with `gap` NaNs between them."""
    parts: list[np.ndarray] = []
    for i, s in enumerate(segments):
        if i:
            parts.append(np.full(gap, np.nan))
        parts.append(np.asarray(s, float))
    return np.concatenate(parts) if parts else np.empty(0)


@dataclass
class ArmaFit:
    order: tuple[int, int]
    ar: np.ndarray
    ma: np.ndarray
    sigma: float
    aic: float
    aic_grid: dict[tuple[int, int], float] = field(default_factory=dict)
    nobs: int = 0

    def block(self) -> dict:
        """The bundle's `arma` block (rounded, plain Python types)."""
        return {
            "order": [int(self.order[0]), int(self.order[1])],
            "ar": sig_list(self.ar),
            "ma": sig_list(self.ma),
            "sigma": sig(self.sigma),
            "aic": sig(self.aic) if np.isfinite(self.aic) else None,
            "aic_grid": {f"{p},{q}": sig(a) for (p, q), a in sorted(self.aic_grid.items())},
        }


def fit_candidate(z: np.ndarray, p: int, q: int):
    """(AIC, parameter names, parameters) of `fit_arma_order`, or None when the fit
    fails: what `select_arma` keeps of a candidate, small enough to come back from a
    worker process."""
    try:
        res = fit_arma_order(z, p, q)
    except (np.linalg.LinAlgError, ValueError):
        return None
    return float(res.aic), list(res.model.param_names), np.asarray(res.params, float)


def fit_arma_order(z: np.ndarray, p: int, q: int):
    """ML fit of a zero-mean ARMA(p, q) to `z` (NaN = missing); statsmodels results."""
    from statsmodels.tsa.arima.model import ARIMA

    model = ARIMA(np.asarray(z, float), order=(p, 0, q), trend="n")
    with warnings.catch_warnings():
        # Convergence chatter is expected on the larger candidates; a non-converged
        # fit simply scores worse on AIC.
        warnings.simplefilter("ignore")
        # cov_type="none": standard errors are not needed for selection and their
        # numerical Hessian costs more than the fit itself on the large candidates.
        return model.fit(cov_type="none", low_memory=True, method_kwargs={"maxiter": MAXITER})


def candidate_work(p: int, q: int) -> int:
    """The relative CPU cost of fitting ARMA(p, q) on a series, for progress estimates:
    the quasi-Newton's numerical gradient runs the Kalman filter once per parameter
    (p + q + 1 with the variance), and a filter step costs about the state's dimension
    max(p, q + 1) (statsmodels' univariate filter). On the shipped traces' 4,198 s
    allocation series ARMA(5, 2) (work 40) took 1.9-2.8 s CPU, ARMA(2, 1) (8) 0.3-0.5 s
    and ARMA(1, 1) (6) 0.25-0.7 s: the iteration counts (2 to `MAXITER`) scatter around
    it, and a per-candidate count (ARMA(1, 0) = ARMA(5, 2)) does not."""
    return (p + q + 1) * max(p, q + 1)


def grid_work(candidates) -> int:
    """`candidate_work` summed over a grid: one series' share of a stage's work."""
    return sum(candidate_work(p, q) for p, q in set(candidates))


class Decided(NamedTuple):
    """What a progress listener hears: `n` candidates decided, `fitted` the work
    (`candidate_work`) of those fitted, `skipped` that of those decided without a fit
    (ruled out by `MIN_PAIRS`, failed, or a constant series' whole grid). A tuple, so it
    passes between processes."""

    n: int
    fitted: int = 0
    skipped: int = 0


# Listeners told after each ARMA candidate fit (`candidate_progress`): progress inside
# the long fitting stages (`gmmv fit`).
_ON_CANDIDATE: list = []
# Executors the candidates of a series are fitted in (`candidate_pool`); none: in turn.
_POOLS: list = []


@contextlib.contextmanager
def candidate_pool(executor):
    """While active, `select_arma` fits a series' candidates side by side in `executor`'s
    processes (`fit_candidate` in each; started with one BLAS thread, as the caller is:
    `fitting.fit`), keeping them in the grid's order, so the selection and the bundle
    are those of one process."""
    _POOLS.append(executor)
    try:
        yield
    finally:
        _POOLS.remove(executor)


@contextlib.contextmanager
def candidate_progress(callback):
    """While active, ``callback(decided)`` hears of every candidate decided (a
    `Decided`; a constant series, which needs no fit, counts its whole grid at once)."""
    _ON_CANDIDATE.append(callback)
    try:
        yield
    finally:
        _ON_CANDIDATE.remove(callback)


def _tick(n: int = 1, fitted: int = 0, skipped: int = 0) -> None:
    for callback in list(_ON_CANDIDATE):
        callback(Decided(n, fitted, skipped))


def select_arma(z: np.ndarray, candidates=FULL_GRID) -> ArmaFit:
    """Fit every (p, q) in `candidates` and keep the lowest AIC (ties: fewer params).

    `z` is the transformed series (NaN marks gaps). A candidate whose fit fails is left
    out of the grid. A constant series gives the white-noise ARMA(1, 0) with phi = 0.
    """
    z = np.asarray(z, float)
    nobs = int(np.isfinite(z).sum())
    if nobs == 0:
        raise ValueError("no observations to fit an ARMA on")
    if float(np.nanstd(z)) <= _CONSTANT_SD:
        _tick(len(set(candidates)), skipped=grid_work(candidates))
        return ArmaFit((1, 0), np.zeros(1), np.zeros(0), 0.0, float("nan"), {}, nobs)
    grid: dict[tuple[int, int], float] = {}
    best = None
    orders = sorted(set(candidates), key=lambda pq: (pq[0] + pq[1], pq))
    if _POOLS:  # side by side, taken in the grid's order
        futures = [_POOLS[-1].submit(fit_candidate, z, p, q) for p, q in orders]
        fits = (future.result() for future in futures)
    else:
        fits = (fit_candidate(z, p, q) for p, q in orders)
    for (p, q), fitted in zip(orders, fits):
        if fitted is None:
            _tick(skipped=candidate_work(p, q))
            continue
        _tick(fitted=candidate_work(p, q))
        aic, names, values = fitted
        if not np.isfinite(aic):
            continue
        grid[(p, q)] = aic
        if best is None or aic < best[0] - 1e-9:
            best = (aic, p, q, names, values)
    if best is None:
        raise ValueError("no ARMA candidate could be fitted")
    aic, p, q, names, values = best
    params = dict(zip(names, values))
    ar = np.array([params[f"ar.L{i}"] for i in range(1, p + 1)])
    ma = np.array([params[f"ma.L{j}"] for j in range(1, q + 1)])
    sigma = float(np.sqrt(params["sigma2"]))
    return ArmaFit((p, q), ar, ma, sigma, aic, grid, nobs)


def resample_1s(time_s: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Linear interpolation of an irregular series onto a 1 s grid from its first sample."""
    t = np.asarray(time_s, float)
    grid = np.arange(t[0], t[-1] + 1e-9, 1.0)
    return np.interp(grid, t, np.asarray(values, float))


def fit_series_block(segments: list[np.ndarray], candidates=FULL_GRID, mean=None, sd=None) -> tuple[dict, Transform, ArmaFit, np.ndarray]:
    """Transform + ARMA selection over independent segments; return the bundle blocks.

    The transform is fitted on every value. The ARMA sees only segments of at least two
    values (a single second says nothing about autocorrelation), joined in a fixed
    pseudo-random order: runs are measured in a systematic order (batch size after
    batch size), and joined in that order their trend would leak across the gaps into
    the fitted autocorrelation. A candidate is fitted only if at least `MIN_PAIRS`
    within-run pairs are max(p, q) apart (its longest lag is identified by the runs, not
    by the gaps); with no such candidate the block is white noise (ARMA(1, 0), phi = 0,
    `aic` None).

    Returns (`{"arma": ..., "yeo_johnson": ...}`, transform, fit, the series the ARMA saw).
    """
    segments = [np.asarray(seg, float) for seg in segments]
    transform, z_all = fit_transform(np.concatenate(segments), mean=mean, sd=sd)
    z_segs = np.split(z_all, np.cumsum([len(seg) for seg in segments])[:-1])
    usable = [zs for zs in z_segs if len(zs) >= 2]
    lengths = np.array([len(zs) for zs in usable], int)

    def pairs(lag: int) -> int:
        return int(np.maximum(lengths - lag, 0).sum())

    # a lag-k coefficient is identified by within-run pairs k apart, not by the gaps
    allowed = [(p, q) for p, q in candidates if pairs(max(p, q, 1)) >= MIN_PAIRS]
    if allowed or float(np.nanstd(z_all)) <= _CONSTANT_SD:
        order = np.random.default_rng(SEGMENT_ORDER_SEED).permutation(len(usable)) if len(usable) > 1 else [0]
        z = join_segments([usable[i] for i in order]) if usable else z_all
        fit = select_arma(z, allowed or candidates)
        ruled_out = set(candidates) - set(allowed or candidates)  # decided unfitted: counted too
        _tick(len(ruled_out), skipped=grid_work(ruled_out))
    else:
        z = join_segments(usable) if usable else z_all
        sigma = float(np.nanstd(z_all, ddof=1)) if np.isfinite(z_all).sum() > 1 else 0.0
        fit = ArmaFit((1, 0), np.zeros(1), np.zeros(0), sigma, float("nan"), {}, int(np.isfinite(z_all).sum()))
        _tick(len(set(candidates)), skipped=grid_work(candidates))  # every candidate ruled out: decided
    blocks = {
        "arma": fit.block(),
        "yeo_johnson": {"lam": sig(transform.lam), "z_mean": sig(transform.z_mean), "z_sd": sig(transform.z_sd)},
    }
    return blocks, transform, fit, z


def simulate_arma(ar, ma, sigma: float, n: int, rng: np.random.Generator, burn: int = 500) -> np.ndarray:
    """Sample path of the fitted ARMA (statsmodels sign convention), for diagnostics."""
    from statsmodels.tsa.arima_process import ArmaProcess

    proc = ArmaProcess(np.r_[1.0, -np.asarray(ar, float)], np.r_[1.0, np.asarray(ma, float)])
    return proc.generate_sample(nsample=n, scale=sigma, distrvs=rng.standard_normal, burnin=burn)
