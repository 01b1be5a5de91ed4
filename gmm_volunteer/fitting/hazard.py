"""Phase-completion hazards (paper 2.2, "Subtask execution states"; Singer & Willett [23]).

For each phase (download, execution, upload) a discrete-time hazard model is fitted on
person-period data: a run whose phase lasted D = max(1, ceil(seconds)) steps gives
rows for ages 0..D-1, the last one with event = 1. Covariates, standardized over the
person-period rows: c = consumption of the phase's resource in that second,
n = batch size, l = log(age + 1). The linear predictor holds every monomial of
(zc, zn, zl) of total degree 1..q, an intercept and one-hot subtask type (the first
fitted type is the reference, its type_coef 0). Fitted by maximum likelihood with
statsmodels Logit; the common degree q in {1, 2, 3} minimizes the mean AIC over the
three phases. Types that always finish a phase in its first step and separated data
are handled in `fit_phase` (docs/fitting.md).
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass

import numpy as np

from gmm_volunteer.fitting.rounding import sig, sig_list

PHASE_RESOURCE = {"download": "band_in", "execution": "cpu", "upload": "band_out"}
_COLUMN = {"band_in": "band_in_mbps", "band_out": "band_out_mbps", "cpu": "cpu_pct"}
DEGREES = (1, 2, 3)
# Ridge strength used only when the unpenalized MLE does not exist (separation).
_RIDGE_ALPHA = 1e-3
# Logit of a phase that always ends in its first step: h = 1 - 1e-13.
IMMEDIATE_LOGIT = 30.0


def duration_steps(seconds) -> np.ndarray:
    """Steps a phase occupies in the 1 s simulation: max(1, ceil(seconds))."""
    return np.maximum(1, np.ceil(np.asarray(seconds, float) - 1e-9)).astype(int)


def terms_for_degree(degree: int) -> list[tuple[int, int, int]]:
    """Exponent triples (e_c, e_n, e_l) with total degree 1..degree, spec order."""
    out = []
    for d in range(1, degree + 1):
        out += sorted((t for t in itertools.product(range(d + 1), repeat=3) if sum(t) == d), reverse=True)
    return out


@dataclass
class PersonPeriod:
    """One row per (run, age) of a phase."""

    run_id: np.ndarray
    type_idx: np.ndarray
    c: np.ndarray
    n: np.ndarray
    age: np.ndarray
    event: np.ndarray

    def covariates(self) -> np.ndarray:
        return np.column_stack([self.c, self.n, np.log(self.age + 1.0)])


def consumption_paths(traces, phase: str) -> dict:
    """run_id -> per-second consumption of the phase's resource (t order)."""
    col = _COLUMN[PHASE_RESOURCE[phase]]
    c = traces.consumption[traces.consumption["phase"] == phase].sort_values(["run_id", "t"], kind="stable")
    return {rid: g[col].to_numpy(float) for rid, g in c.groupby("run_id", sort=True)}


def extend_path(path: np.ndarray, length: int) -> np.ndarray:
    """A run's consumption over `length` steps; beyond the measured seconds the last value holds."""
    if len(path) >= length:
        return path[:length]
    return np.concatenate([path, np.full(length - len(path), path[-1])])


def person_period(traces, phase: str) -> PersonPeriod:
    types = [e["name"] for e in traces.catalog]
    paths = consumption_paths(traces, phase)
    runs = traces.runs.sort_values("run_id", kind="stable")
    steps = duration_steps(runs[f"{phase}_s"].to_numpy(float))
    cols = {k: [] for k in ("run_id", "type_idx", "c", "n", "age", "event")}
    for (_, run), d in zip(runs.iterrows(), steps):
        ages = np.arange(d)
        cols["run_id"].append(np.full(d, run["run_id"]))
        cols["type_idx"].append(np.full(d, types.index(run["subtask_type"])))
        cols["c"].append(extend_path(paths[run["run_id"]], d))
        cols["n"].append(np.full(d, float(run["batch_size"])))
        cols["age"].append(ages.astype(float))
        ev = np.zeros(d)
        ev[-1] = 1.0
        cols["event"].append(ev)
    return PersonPeriod(**{k: np.concatenate(v) for k, v in cols.items()})


@dataclass
class PhaseFit:
    block: dict
    params: np.ndarray  # unrounded: intercept, term coefs, type dummies
    bse: np.ndarray | None
    aic: float
    regularized: bool
    terms: list
    mean: np.ndarray
    sd: np.ndarray
    immediate: list  # subtask types whose phase always ends in its first step


def design(cov: np.ndarray, type_idx: np.ndarray, dummy_types, terms, mean, sd) -> np.ndarray:
    """Intercept, polynomial terms of standardized covariates, one dummy per type in
    `dummy_types` (an int K means types 1..K-1, type 0 the reference)."""
    if isinstance(dummy_types, (int, np.integer)):
        dummy_types = range(1, int(dummy_types))
    z = (cov - mean) / sd
    cols = [np.ones(len(cov))]
    for e in terms:
        cols.append(np.prod([z[:, i] ** e[i] for i in range(3)], axis=0))
    for k in dummy_types:
        cols.append((type_idx == k).astype(float))
    return np.column_stack(cols)


def hazard_probability(block: dict, c, n, age, type_idx) -> np.ndarray:
    """h for covariate arrays, from a bundle phase block (used by diagnostics and tests)."""
    mean, sd = np.asarray(block["covariate_mean"]), np.asarray(block["covariate_sd"])
    cov = np.column_stack([np.asarray(c, float), np.asarray(n, float), np.log(np.asarray(age, float) + 1.0)])
    z = (cov - mean) / sd
    eta = np.full(len(cov), float(block["intercept"]))
    for e, b in zip(block["terms"], block["coef"]):
        eta += b * np.prod([z[:, i] ** e[i] for i in range(3)], axis=0)
    eta += np.asarray(block["type_coef"], float)[np.asarray(type_idx, int)]
    return 1.0 / (1.0 + np.exp(-eta))


def _logit(y: np.ndarray, X: np.ndarray):
    """ML Logit fit, or None when the MLE does not exist or is not reached."""
    import statsmodels.api as sm
    from statsmodels.tools.sm_exceptions import ConvergenceWarning, PerfectSeparationWarning

    if not 0 < y.sum() < len(y):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerfectSeparationWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            res = sm.Logit(y, X).fit(disp=0, method="newton", maxiter=100)
        except (PerfectSeparationWarning, np.linalg.LinAlgError, ValueError):
            return None
    if not res.mle_retvals.get("converged", False) or not np.all(np.isfinite(res.params)):
        return None
    return res


def fit_phase(pp: PersonPeriod, degree: int, n_types: int, resource: str) -> PhaseFit:
    """Logit hazard of one phase at one polynomial degree.

    A subtask type whose every run ends the phase in its first step has an infinite ML
    type effect; its rows are set aside and its type_coef makes h = 1 (IMMEDIATE_LOGIT).
    The other types are fitted by ML (reference: the first of them, type_coef 0); if the
    MLE still does not exist (separation), by a lightly ridge-penalized binomial GLM.
    """
    import statsmodels.api as sm

    present = sorted(set(pp.type_idx.astype(int).tolist()))
    immediate = [k for k in present if pp.event[pp.type_idx == k].all() and (pp.age[pp.type_idx == k] == 0).all()]
    rest = [k for k in present if k not in immediate]
    sel = np.isin(pp.type_idx, rest)
    cov = pp.covariates()[sel] if rest else pp.covariates()
    mean = cov.mean(axis=0)
    sd = cov.std(axis=0, ddof=1) if len(cov) > 1 else np.zeros(3)
    sd = np.where(sd > 1e-12, sd, 1.0)
    type_coef = np.zeros(n_types)
    if not rest:
        # every run of every type ends at once: h = 1, no covariate carries information
        block = {
            "consumption_resource": resource,
            "covariate_mean": sig_list(mean),
            "covariate_sd": sig_list(sd),
            "terms": [],
            "coef": [],
            "intercept": IMMEDIATE_LOGIT,
            "type_coef": [0.0] * n_types,
            "aic": 2.0,  # one parameter, log-likelihood 0 (to 1e-10)
        }
        return PhaseFit(block, np.array([IMMEDIATE_LOGIT]), None, 2.0, False, [], mean, sd, immediate)
    # A covariate with u distinct values spans polynomials up to degree u - 1 only: higher
    # powers are collinear with the lower ones (a constant one is absorbed by the
    # intercept; batch sizes {1, 5} allow zn but not zn^2). Such terms are dropped.
    distinct = [len(np.unique(cov[:, i])) for i in range(3)]
    terms = [t for t in terms_for_degree(degree) if all(t[i] <= distinct[i] - 1 for i in range(3))]
    X = design(cov, pp.type_idx[sel], rest[1:], terms, mean, sd)
    y = pp.event[sel]
    res = _logit(y, X)
    if res is not None:
        params, bse, llf, regularized = np.asarray(res.params, float), np.asarray(res.bse, float), float(res.llf), False
    else:
        # No finite MLE (separation): a small ridge penalty gives the finite estimate
        # closest to it.
        model = sm.GLM(y, X, family=sm.families.Binomial())
        params = np.asarray(model.fit_regularized(alpha=_RIDGE_ALPHA, L1_wt=0.0).params, float)
        bse, llf, regularized = None, float(model.loglike(params)), True
    nt = len(terms)
    for j, k in enumerate(rest[1:]):
        type_coef[k] = params[1 + nt + j]
    for k in immediate:
        type_coef[k] = IMMEDIATE_LOGIT - params[0]
    # set-aside rows are predicted with probability 1 - 1e-13: log-likelihood 0
    aic = 2.0 * (len(params) + len(immediate)) - 2.0 * llf
    block = {
        "consumption_resource": resource,
        "covariate_mean": sig_list(mean),
        "covariate_sd": sig_list(sd),
        "terms": [list(t) for t in terms],
        "coef": sig_list(params[1 : 1 + nt]),
        "intercept": sig(params[0]),
        "type_coef": sig_list(type_coef),
        "aic": sig(aic),
    }
    return PhaseFit(block, params, bse, aic, regularized, terms, mean, sd, immediate)


def select_hazard(pps: dict[str, PersonPeriod], n_types: int, degrees=DEGREES) -> tuple[dict, dict]:
    """Fit every phase at every degree; keep the degree with the lowest mean AIC.

    Returns the bundle's `hazard` block and {degree: {phase: PhaseFit}} for diagnostics.
    """
    fits = {q: {ph: fit_phase(pp, q, n_types, PHASE_RESOURCE[ph]) for ph, pp in pps.items()} for q in degrees}
    mean_aic = {q: float(np.mean([f.aic for f in fits[q].values()])) for q in degrees}
    best = min(degrees, key=lambda q: (mean_aic[q], q))
    block = {"degree": int(best), "phases": {ph: fits[best][ph].block for ph in pps}}
    return block, {"fits": fits, "mean_aic": mean_aic}


def fit_hazard(traces, degrees=DEGREES) -> tuple[dict, dict]:
    n_types = len(traces.catalog)
    pps = {ph: person_period(traces, ph) for ph in PHASE_RESOURCE}
    block, diag = select_hazard(pps, n_types, degrees)
    diag["person_period"] = pps
    return block, diag


def fitted_survival(block: dict, paths: list[np.ndarray], n: np.ndarray, type_idx: np.ndarray, max_steps: int) -> np.ndarray:
    """Mean over runs of S(d) = P(phase lasts > d steps), d = 0..max_steps, under the fit.

    Each run's consumption path is held at its last value beyond the measured seconds.
    """
    surv = np.zeros(max_steps + 1)
    for path, nb, k in zip(paths, n, type_idx):
        c = extend_path(path, max_steps)
        h = hazard_probability(block, c, np.full(max_steps, nb), np.arange(max_steps), np.full(max_steps, k))
        surv += np.concatenate([[1.0], np.cumprod(1.0 - h)])
    return surv / max(len(paths), 1)
