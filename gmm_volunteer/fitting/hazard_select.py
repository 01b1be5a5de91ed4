"""The hazard degree chosen by held-out likelihood, and the bundle's `hazard` block
(paper 2.2: "polynomial interactions up to degree 3"; docs/model.md D32).

Every candidate degree of a phase is fitted by the one estimator of `fitting/hazard.py`
(ridge-penalized ML) on the runs of all measured batch sizes but one, and scored by the
log-likelihood of the runs of the size left out; the sum over the sizes left out, one at
a time, picks the degree. Under the work-fraction form the work W_m(n) of the size left
out is interpolated (or extrapolated) from the other sizes' work, as the simulator does
beyond the measured sizes, so that nothing of the left-out runs enters their prediction.
"""

from __future__ import annotations

import numpy as np

from gmm_volunteer.fitting.hazard import (
    DEGREES, HAZARD_FORM, HAZARD_LINK, IMMEDIATE_LOGIT, PHASE_RESOURCE, PersonPeriod, _log_lik, covariates, design, fit_phase, offset, person_period,
)


def work_tables(traces, exclude_size: float | None = None) -> dict[int, np.ndarray]:
    """type index -> W_m(n), n = 0..MAX_BATCH_TABLE (`model.params.hazard_work_table`), from
    the runs' measured work (`fitting.work.run_work`), the runs of `exclude_size` left out."""
    from gmm_volunteer.fitting.work import run_work
    from gmm_volunteer.model.params import hazard_work_table

    table = run_work(traces)
    if exclude_size is not None:
        table = table[table["batch_size"] != exclude_size]
    out = {}
    for k, entry in enumerate(traces.catalog):
        t = table[(table["subtask_type"] == entry["name"]) & (table["work_cpu_s"] > 0)]
        means = t.groupby("batch_size")["work_cpu_s"].mean()
        out[k] = hazard_work_table(means.index.to_numpy(float), means.to_numpy(float))
    return out


def with_work(pp: PersonPeriod, tables: dict[int, np.ndarray]) -> PersonPeriod:
    """The person-period rows with each row's W_m(n) from `tables`."""
    out = pp.subset(np.ones(len(pp.age), bool))
    out.work = np.array([tables[int(k)][int(n)] for k, n in zip(pp.type_idx, pp.n)])
    return out


def heldout_loglik(fit, pp: PersonPeriod) -> float:
    """Log-likelihood of rows `pp` under a `PhaseFit` (unrounded coefficients); rows of
    types the fit set aside (immediate) have h = 1 there and count only if they end at once."""
    form, link = fit.block["form"], fit.block["link"]
    if not fit.fitted_types:
        return _log_lik(pp.event, np.full(len(pp.event), IMMEDIATE_LOGIT), "logit")
    sel = np.isin(pp.type_idx, fit.fitted_types)
    unseen = ~sel & ~np.isin(pp.type_idx, fit.immediate)
    if unseen.any():
        raise ValueError("held-out rows of a subtask type the fit did not see")
    # set-aside types: linear predictor IMMEDIATE_LOGIT whatever the covariates
    ll = _log_lik(pp.event[~sel], np.full(int((~sel).sum()), IMMEDIATE_LOGIT), "logit")
    cov = covariates(pp.c[sel], pp.n[sel], pp.age[sel], None if pp.work is None else pp.work[sel], form)
    X = design(cov, pp.type_idx[sel], fit.fitted_types, fit.terms, fit.mean, fit.sd)
    return ll + _log_lik(pp.event[sel], X @ fit.params + offset(cov, fit.mean, form), link)


def leave_one_size_out(traces, pp: PersonPeriod, phase: str, degree: int, form: str, link: str) -> float:
    """Sum over measured batch sizes of the held-out log-likelihood of that size's runs."""
    n_types = len(traces.catalog)
    total = 0.0
    for s in sorted(set(pp.n.tolist())):
        train, test = pp.subset(pp.n != s), pp.subset(pp.n == s)
        if form == "work_fraction":
            train, test = with_work(train, work_tables(traces, s)), with_work(test, work_tables(traces, s))
        # a type measured at the left-out size only cannot be predicted: skip its rows
        test = test.subset(np.isin(test.type_idx, np.unique(train.type_idx)))
        fit = fit_phase(train, degree, n_types, PHASE_RESOURCE[phase], form, link)
        total += heldout_loglik(fit, test)
    return total


def phase_form(phase: str, form: str) -> str:
    """The work-fraction form is the execution phase's only (transfers have no CPU work)."""
    return form if phase == "execution" else "paper"


def fit_hazard(traces, degrees=DEGREES, form: str = HAZARD_FORM, link: str = HAZARD_LINK) -> tuple[dict, dict]:
    """The bundle's `hazard` block and diagnostics: per phase, the degree with the highest
    leave-one-size-out likelihood, refitted on every run."""
    n_types = len(traces.catalog)
    pps = {ph: person_period(traces, ph) for ph in PHASE_RESOURCE}
    tables = work_tables(traces)
    blocks, heldout, fits = {}, {}, {}
    for ph, pp in pps.items():
        f = phase_form(ph, form)
        if f == "work_fraction":
            pps[ph] = pp = with_work(pp, tables)
        if len(set(pp.n.tolist())) > 1:
            heldout[ph] = {q: leave_one_size_out(traces, pp, ph, q, f, link) for q in degrees}
            best = max(degrees, key=lambda q: (heldout[ph][q], -q))
        else:
            heldout[ph], best = {}, min(degrees)
        fits[ph] = fit_phase(pp, best, n_types, PHASE_RESOURCE[ph], f, link)
        blocks[ph] = fits[ph].block
    degree = max([max([sum(t) for t in b["terms"]] + [1]) for b in blocks.values()])
    block = {"degree": int(degree), "phases": blocks}
    return block, {"fits": fits, "heldout": heldout, "person_period": pps, "work_tables": tables,
                   "form": form, "link": link}


def work_of_runs(tables: dict[int, np.ndarray], runs, types: list[str]) -> np.ndarray:
    """W_m(n) of each run of a runs table."""
    return np.array([tables[types.index(t)][int(n)] for t, n in zip(runs["subtask_type"], runs["batch_size"])])


def largest_size_held_out(traces, degree: int, form: str = HAZARD_FORM, link: str = HAZARD_LINK) -> list[dict]:
    """The execution hazard refitted without the largest measured batch size, and its mean
    steps there (each type at its runs' mean CPU, the work extrapolated from the smaller
    sizes) against the measured mean: one row per subtask type measured at that size."""
    from gmm_volunteer.fitting.hazard_check import within
    from gmm_volunteer.fitting.hazard import duration_steps, hazard_probability

    pp = person_period(traces, "execution")
    top = float(pp.n.max())
    tables = work_tables(traces, top)
    train = pp.subset(pp.n != top)
    if form == "work_fraction":
        train = with_work(train, tables)
    fit = fit_phase(train, degree, len(traces.catalog), "cpu", form, link)
    cpu = traces.consumption[traces.consumption["phase"] == "execution"].groupby("run_id")["cpu_pct"].mean()
    types = [e["name"] for e in traces.catalog]
    rows = []
    runs = traces.runs[traces.runs["batch_size"] == top]
    age = np.arange(5000)
    for name, g in runs.groupby("subtask_type", sort=True):
        k, c = types.index(name), float(cpu.loc[g["run_id"]].mean())
        with np.errstate(over="ignore"):
            h = hazard_probability(fit.block, np.full(age.size, c), np.full(age.size, top), age,
                                   np.full(age.size, k), np.full(age.size, tables[k][int(top)]))
        pred = float(np.concatenate([[1.0], np.cumprod(1.0 - h)])[:-1].sum())
        meas = float(duration_steps(g["execution_s"].to_numpy(float)).mean())
        rows.append({"subtask type": name, "batch size": int(top), "CPU (%)": c, "measured steps": meas,
                     "predicted steps": pred, "within": within(pred, meas)})
    return rows


def checks_of_fit(model, traces, diag: dict) -> tuple[str, bool]:
    """The checks of `fitting.hazard_check` on a fitted bundle (a validated `Bundle`) and
    its traces, with the largest measured size held out: (text, all passed)."""
    from gmm_volunteer.fitting.hazard_check import checks_text, hazard_checks

    checks = hazard_checks(model, traces.runs)
    block = model.hazard.phases["execution"]
    degree = max([sum(t) for t in block.terms if block.form == "paper" or t[0] == 0] + [1])
    held = largest_size_held_out(traces, degree, diag["form"], diag["link"])
    bad = [f"{r['subtask type']} at {r['batch size']}: {r['predicted steps']:.2f} steps against "
           f"{r['measured steps']:.2f} measured" for r in held if not r["within"]]
    checks.insert(1, {"check": "the largest measured size held out, predicted within the same tolerance",
                      "passed": not bad, "failures": bad, "examined": len(held)})
    return checks_text(checks), all(c["passed"] for c in checks)
