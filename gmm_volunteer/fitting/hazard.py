"""Phase-completion hazards (paper 2.2, "Subtask execution states"; Singer & Willett [23]).

For each phase (download, execution, upload) a discrete-time hazard model is fitted on
person-period data: a run whose phase lasted D = max(1, ceil(seconds)) steps gives
rows for ages 0..D-1, the last one with event = 1. Paper 2.2's covariates, standardized
over the person-period rows: c = consumption of the phase's resource in that second,
n = batch size (entered as log n), l = log(age + 1). The linear predictor holds every
monomial of (zc, zn, zl) of total degree 1..q, an intercept and the subtask type, which
enters the intercept and every monomial: each type has the shared coefficients plus a
deviation of its own, the deviations pooled toward zero by the estimator's ridge
penalty (docs/model.md D32). The link is logit (the paper's) or complementary log-log.

`form: work_fraction` (execution only) replaces the covariates by the fraction of the
batch's mean work one step does, s = c / 100 / W_m(n) (W from the bundle's work table,
D10), and the fraction done, f = (age + 1) s: log s enters as an offset (coefficient 1,
`OFFSET_TERM`), log f as the polynomial. The hazard depends on how far the batch has
come, so a larger batch (more work) or less CPU ends later by construction wherever the
hazard rises with f.

One estimator for every candidate: ridge-penalized maximum likelihood (`PENALTY` on every
coefficient but the intercept), which exists under separation too; the degree q of each
phase is the one with the highest likelihood of the batch sizes left out, one at a time
(`fitting/hazard_select.py`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from gmm_volunteer.fitting.rounding import sig, sig_list, sig_matrix

PHASE_RESOURCE = {"download": "band_in", "execution": "cpu", "upload": "band_out"}
_COLUMN = {"band_in": "band_in_mbps", "band_out": "band_out_mbps", "cpu": "cpu_pct"}
DEGREES = (1, 2, 3)
LINKS = ("logit", "cloglog")
FORMS = ("paper", "work_fraction")
# What `gmmv fit` fits by default (docs/model.md D32: the form that holds on the traces)
HAZARD_FORM, HAZARD_LINK = "work_fraction", "cloglog"
# Ridge penalty (on the standardized scale) of every coefficient but the intercept: the
# one estimator of every candidate; small against the hundreds of rows of a phase, it
# keeps estimates finite where durations are (nearly) deterministic (separation).
PENALTY = 1.0
# Linear predictor of a phase that always ends in its first step: h = 1 - 1e-13 (logit).
IMMEDIATE_LOGIT = 30.0
# Fraction of work done below which a step counts as none (a batch charged no CPU)
_MIN_FRACTION = 1e-6


def duration_steps(seconds) -> np.ndarray:
    """Steps a phase occupies in the 1 s simulation: max(1, ceil(seconds))."""
    return np.maximum(1, np.ceil(np.asarray(seconds, float) - 1e-9)).astype(int)


def terms_for_degree(degree: int, covariates=(0, 1, 2)) -> list[tuple[int, int, int]]:
    """Exponent triples (e_c, e_n, e_l) with total degree 1..degree, spec order; only the
    covariates listed enter (the work-fraction form: its third alone)."""
    out = []
    for d in range(1, degree + 1):
        out += sorted((t for t in itertools.product(range(d + 1), repeat=3)
                       if sum(t) == d and all(t[i] == 0 for i in range(3) if i not in covariates)), reverse=True)
    return out


# The work-fraction form's offset: log of the fraction of work one step does, coefficient
# 1, so that the hazard per step is a hazard per unit of work times the step's length
# (a grouped continuous-time hazard under the complementary log-log link).
OFFSET_TERM = (1, 0, 0)


def offset(cov: np.ndarray, mean: np.ndarray, form: str) -> np.ndarray:
    """The linear predictor's fixed part beside the intercept: x0 - mean0 (work fraction)."""
    return cov[:, 0] - mean[0] if form == "work_fraction" else np.zeros(len(cov))


def form_terms(degree: int, form: str) -> list[tuple[int, int, int]]:
    """The fitted monomials of a form at a degree: the paper's every monomial of (zc, zn,
    zl); the work-fraction form's powers of log f (beside its offset, `OFFSET_TERM`)."""
    if form == "work_fraction":
        return [(0, 0, k) for k in range(1, degree + 1)]
    return terms_for_degree(degree)


@dataclass
class PersonPeriod:
    """One row per (run, age) of a phase; `work` is the mean work (CPU-s) of the run's
    type and batch size (for the work-fraction form; 1 where it is not used), `group`
    the work group of the run's collection (`fitting.work.work_tables`; 0: `subtasks/`)."""

    run_id: np.ndarray
    type_idx: np.ndarray
    c: np.ndarray
    n: np.ndarray
    age: np.ndarray
    event: np.ndarray
    work: np.ndarray | None = None
    group: np.ndarray | None = None

    def subset(self, sel: np.ndarray) -> "PersonPeriod":
        return PersonPeriod(*(None if getattr(self, f) is None else getattr(self, f)[sel]
                              for f in self.__dataclass_fields__))


def covariates(c, n, age, work=None, form: str = "paper", batch_size_scale: str = "log") -> np.ndarray:
    """Raw covariate columns (c, n, l) of a form, before standardization."""
    c, n, age = (np.asarray(x, float) for x in (c, n, age))
    n_col = np.log(n) if batch_size_scale == "log" else n
    if form == "work_fraction":
        step = np.maximum(c / 100.0 / np.asarray(work, float), _MIN_FRACTION)  # fraction done per step
        return np.column_stack([np.log(step), n_col, np.log(np.maximum((age + 1.0) * step, _MIN_FRACTION))])
    return np.column_stack([c, n_col, np.log(age + 1.0)])


def consumption_paths(traces, phase: str, consumption=None) -> dict:
    """run_id -> per-second consumption of the phase's resource (t order), of `subtasks/`
    or of the consumption rows given."""
    col = _COLUMN[PHASE_RESOURCE[phase]]
    rows = traces.consumption if consumption is None else consumption
    c = rows[rows["phase"] == phase].sort_values(["run_id", "t"], kind="stable")
    return {rid: g[col].to_numpy(float) for rid, g in c.groupby("run_id", sort=True)}


def extend_path(path: np.ndarray, length: int) -> np.ndarray:
    """A run's consumption over `length` steps; beyond the measured seconds the last value holds."""
    if len(path) >= length:
        return path[:length]
    return np.concatenate([path, np.full(length - len(path), path[-1])])


def person_period(traces, phase: str) -> PersonPeriod:
    """The person-period rows of a phase: of every run of `subtasks/`, and for the
    execution phase of `quota/`'s too (`fitting.work.execution_runs`; docs/model.md D38)."""
    from gmm_volunteer.fitting.work import execution_runs

    types = [e["name"] for e in traces.catalog]
    if phase == "execution":
        runs, consumption = execution_runs(traces)
    else:
        runs, consumption = traces.runs.assign(work_group=0), traces.consumption
    paths = consumption_paths(traces, phase, consumption)
    runs = runs.sort_values("run_id", kind="stable")
    steps = duration_steps(runs[f"{phase}_s"].to_numpy(float))
    cols = {k: [] for k in ("run_id", "type_idx", "c", "n", "age", "event", "group")}
    for (_, run), d in zip(runs.iterrows(), steps):
        cols["run_id"].append(np.full(d, run["run_id"]))
        cols["type_idx"].append(np.full(d, types.index(run["subtask_type"])))
        cols["c"].append(extend_path(paths[run["run_id"]], d))
        cols["n"].append(np.full(d, float(run["batch_size"])))
        cols["age"].append(np.arange(d, dtype=float))
        ev = np.zeros(d)
        ev[-1] = 1.0
        cols["event"].append(ev)
        cols["group"].append(np.full(d, int(run["work_group"])))
    pp = PersonPeriod(**{k: np.concatenate(v) for k, v in cols.items()})
    pp.work = np.ones(len(pp.age))
    return pp


def inverse_link(eta: np.ndarray, link: str) -> np.ndarray:
    """h from the linear predictor, overflow-safe."""
    eta = np.asarray(eta, float)
    if link == "cloglog":
        return -np.expm1(-np.exp(np.minimum(eta, 30.0)))
    e = np.exp(-np.abs(eta))
    return np.where(eta >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _log_lik(y, eta, link) -> float:
    """Bernoulli log-likelihood at linear predictor eta, computed without cancellation."""
    if link == "cloglog":
        mu = inverse_link(eta, link)
        log1m = -np.exp(np.minimum(eta, 30.0))  # log(1 - h)
        return float(np.sum(np.where(y > 0, np.log(np.maximum(mu, 1e-300)), log1m)))
    # logit: log h = -log(1 + e^-eta), log(1 - h) = -log(1 + e^eta)
    return float(np.sum(np.where(y > 0, -np.logaddexp(0.0, -eta), -np.logaddexp(0.0, eta))))


def penalized_fit(y: np.ndarray, X: np.ndarray, link: str, penalty: float = PENALTY,
                  offset: np.ndarray | None = None, max_iter: int = 200) -> tuple[np.ndarray, float, bool]:
    """Ridge-penalized ML of a binomial GLM (column 0 the unpenalized intercept; `offset`
    added to the linear predictor with coefficient 1) by Fisher scoring with step
    halving: (coefficients, log-likelihood, converged)."""
    off = np.zeros(len(y)) if offset is None else offset
    p = X.shape[1]
    lam = np.full(p, penalty)
    lam[0] = 0.0
    beta = np.zeros(p)
    rate = np.clip(y.mean(), 1e-6, 1 - 1e-6)
    beta[0] = np.log(rate / (1 - rate)) if link == "logit" else np.log(-np.log1p(-rate))

    def objective(b):
        return _log_lik(y, X @ b + off, link) - 0.5 * np.sum(lam * b * b)

    obj = objective(beta)
    converged = False
    for _ in range(max_iter):
        eta = X @ beta + off
        mu = np.clip(inverse_link(eta, link), 1e-12, 1 - 1e-12)
        if link == "logit":
            dmu = mu * (1 - mu)
        else:
            dmu = np.exp(np.minimum(eta, 30.0) - np.exp(np.minimum(eta, 30.0)))
        w = dmu * dmu / (mu * (1 - mu))
        score = X.T @ ((y - mu) * dmu / (mu * (1 - mu))) - lam * beta
        info = (X * w[:, None]).T @ X + np.diag(lam) + 1e-10 * np.eye(p)
        step = np.linalg.solve(info, score)
        t = 1.0
        while t > 1e-6:
            cand = beta + t * step
            new = objective(cand)
            if new >= obj - 1e-12:
                break
            t /= 2
        else:
            break
        done = abs(new - obj) < 1e-10 * (1 + abs(obj)) and np.max(np.abs(t * step)) < 1e-7
        beta, obj = cand, new
        if done:
            converged = True
            break
    return beta, _log_lik(y, X @ beta + off, link), converged


@dataclass
class PhaseFit:
    block: dict
    params: np.ndarray  # unrounded: intercept, shared terms, type intercepts, type deviations
    loglik: float
    converged: bool
    terms: list
    mean: np.ndarray
    sd: np.ndarray
    immediate: list  # subtask types whose phase always ends in its first step (set aside)
    fitted_types: list


def design(cov, type_idx, fitted_types, terms, mean, sd) -> np.ndarray:
    """Intercept, the shared monomials of the standardized covariates, one intercept
    dummy per fitted type but the first, and each fitted type's own copy of every
    monomial (its deviation from the shared coefficient)."""
    z = (np.asarray(cov, float) - mean) / sd
    mono = [np.prod([z[:, i] ** e[i] for i in range(3)], axis=0) for e in terms]
    cols = [np.ones(len(z)), *mono]
    dummies = [(np.asarray(type_idx) == k).astype(float) for k in fitted_types]
    cols += dummies[1:]
    for d in dummies:
        cols += [d * m for m in mono]
    return np.column_stack(cols)


def linear_predictor(block: dict, c, n, age, type_idx, work=None) -> np.ndarray:
    """eta of a bundle phase block at covariate arrays (the kernel's `hazard`, in numpy)."""
    form = block.get("form", "paper")
    cov = covariates(c, n, age, work, form, block.get("batch_size_scale", "raw"))
    z = (cov - np.asarray(block["covariate_mean"])) / np.asarray(block["covariate_sd"])
    type_idx = np.asarray(type_idx, int)
    eta = float(block["intercept"]) + np.asarray(block["type_coef"], float)[type_idx]
    dev = block.get("type_terms")
    for f, (e, b) in enumerate(zip(block["terms"], block["coef"])):
        coef = b + (np.asarray(dev, float)[type_idx, f] if dev else 0.0)
        eta = eta + coef * np.prod([z[:, i] ** e[i] for i in range(3)], axis=0)
    return eta


def hazard_probability(block: dict, c, n, age, type_idx, work=None) -> np.ndarray:
    """h for covariate arrays, from a bundle phase block (diagnostics and tests)."""
    return inverse_link(linear_predictor(block, c, n, age, type_idx, work), block.get("link", "logit"))


def _standardization(cov):
    mean = cov.mean(axis=0)
    sd = cov.std(axis=0, ddof=1) if len(cov) > 1 else np.zeros(3)
    return mean, np.where(sd > 1e-12, sd, 1.0)


def fit_phase(pp: PersonPeriod, degree: int, n_types: int, resource: str, form: str = "paper",
              link: str = "logit", penalty: float = PENALTY) -> PhaseFit:
    """The hazard of one phase at one polynomial degree (see the module docstring).

    Under the paper form a subtask type whose every run ends the phase in its first step
    has an infinite effect; its rows are set aside and its type_coef makes h = 1
    (IMMEDIATE_LOGIT). The work-fraction form keeps them: their fraction of work done at
    age 0 is far above 1, which the shared coefficients carry.
    """
    present = sorted(set(pp.type_idx.astype(int).tolist()))
    immediate = [] if form == "work_fraction" else [
        k for k in present if pp.event[pp.type_idx == k].all() and (pp.age[pp.type_idx == k] == 0).all()]
    rest = [k for k in present if k not in immediate]
    sel = np.isin(pp.type_idx, rest)
    cov = covariates(pp.c, pp.n, pp.age, pp.work, form)
    mean, sd = _standardization(cov[sel] if rest else cov)
    base = {"consumption_resource": resource, "form": form, "link": link, "batch_size_scale": "log"}
    if not rest:
        # every run of every type ends at once: h = 1, no covariate carries information
        block = {**base, "link": "logit", "covariate_mean": sig_list(mean), "covariate_sd": sig_list(sd),
                 "terms": [], "coef": [], "intercept": IMMEDIATE_LOGIT, "type_coef": [0.0] * n_types}
        return PhaseFit(block, np.array([IMMEDIATE_LOGIT]), 0.0, True, [], mean, sd, immediate, [])
    # A covariate with u distinct values spans polynomials up to degree u - 1 only: higher
    # powers are collinear with the lower ones (a constant one is absorbed by the
    # intercept; batch sizes {1, 5} allow zn but not zn^2). Such terms are dropped.
    distinct = [len(np.unique(cov[sel][:, i])) for i in range(3)]
    terms = [t for t in form_terms(degree, form) if all(t[i] <= distinct[i] - 1 for i in range(3))]
    X = design(cov[sel], pp.type_idx[sel], rest, terms, mean, sd)
    params, llf, converged = penalized_fit(pp.event[sel], X, link, penalty, offset(cov[sel], mean, form))
    nt, nk = len(terms), len(rest)
    type_coef = np.zeros(n_types)
    type_terms = np.zeros((n_types, nt))
    for j, k in enumerate(rest[1:]):
        type_coef[k] = params[1 + nt + j]
    for j, k in enumerate(rest):
        type_terms[k] = params[nt + nk + j * nt: nt + nk + (j + 1) * nt]
    for k in immediate:
        type_coef[k] = IMMEDIATE_LOGIT - params[0]
        # the set-aside type's h = 1 whatever the covariates: no monomial of its own
        type_terms[k] = -params[1: 1 + nt]
    coef = params[1: 1 + nt]
    block_terms = [list(t) for t in terms]
    if form == "work_fraction":  # the offset as a term of coefficient sd: z * sd = x - mean
        block_terms, coef = [list(OFFSET_TERM), *block_terms], np.concatenate([[sd[0]], coef])
        type_terms = np.column_stack([np.zeros(n_types), type_terms])
    block = {**base, "covariate_mean": sig_list(mean), "covariate_sd": sig_list(sd),
             "terms": block_terms, "coef": sig_list(coef),
             "intercept": sig(params[0]), "type_coef": sig_list(type_coef),
             "type_terms": sig_matrix(type_terms) if len(block_terms) else None}
    return PhaseFit(block, params, llf, converged, terms, mean, sd, immediate, rest)


def fitted_survival(block: dict, paths: list[np.ndarray], n: np.ndarray, type_idx: np.ndarray, max_steps: int,
                    work: np.ndarray | None = None) -> np.ndarray:
    """Mean over runs of S(d) = P(phase lasts > d steps), d = 0..max_steps, under the fit.

    Each run's consumption path is held at its last value beyond the measured seconds.
    """
    surv = np.zeros(max_steps + 1)
    work = np.ones(len(paths)) if work is None else work
    for path, nb, k, w in zip(paths, n, type_idx, work):
        c = extend_path(path, max_steps)
        with np.errstate(over="ignore"):
            h = hazard_probability(block, c, np.full(max_steps, nb), np.arange(max_steps), np.full(max_steps, k),
                                   np.full(max_steps, w))
        surv += np.concatenate([[1.0], np.cumprod(1.0 - h)])
    return surv / max(len(paths), 1)
