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
from gmm_volunteer.fitting.work import work_tables


def with_work(pp: PersonPeriod, tables: dict[tuple[int, int], np.ndarray]) -> PersonPeriod:
    """The person-period rows with each row's W_m(n) from `tables` (`fitting.work.work_tables`,
    the table of the row's work group)."""
    out = pp.subset(np.ones(len(pp.age), bool))
    group = np.zeros(len(pp.age), int) if pp.group is None else pp.group
    out.work = np.array([tables[int(g), int(k)][int(n)] for g, k, n in zip(group, pp.type_idx, pp.n)])
    return out


def _groups(pp: PersonPeriod) -> list[int]:
    return [0] if pp.group is None else sorted(set(pp.group.astype(int).tolist()))


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
            tables = work_tables(traces, {g: s for g in _groups(pp)})
            train, test = with_work(train, tables), with_work(test, tables)
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


def work_of_runs(tables: dict[tuple[int, int], np.ndarray], runs, types: list[str]) -> np.ndarray:
    """W_m(n) of each run of `subtasks/`'s runs table (work group 0)."""
    return np.array([tables[0, types.index(t)][int(n)] for t, n in zip(runs["subtask_type"], runs["batch_size"])])


def largest_size_held_out(traces, degree: int, form: str = HAZARD_FORM, link: str = HAZARD_LINK) -> list[dict]:
    """The execution hazard refitted without the largest measured batch size of each work
    group (`subtasks/`; the quota collections', D38), and its mean steps there (each
    collection's type at its runs' mean CPU, the work extrapolated from the group's
    smaller sizes) against the measured mean: one row per collection and subtask type
    measured at that size."""
    from gmm_volunteer.fitting.hazard_check import cell_steps, within
    from gmm_volunteer.fitting.hazard import duration_steps
    from gmm_volunteer.fitting.work import execution_runs

    pp = person_period(traces, "execution")
    group = np.zeros(len(pp.n), int) if pp.group is None else pp.group.astype(int)
    top = {g: float(pp.n[group == g].max()) for g in _groups(pp)}
    tables = work_tables(traces, top)
    train = pp.subset(pp.n != np.array([top[g] for g in group]))
    if form == "work_fraction":
        train = with_work(train, tables)
    fit = fit_phase(train, degree, len(traces.catalog), "cpu", form, link)
    runs, consumption = execution_runs(traces)
    cpu = consumption[consumption["phase"] == "execution"].groupby("run_id")["cpu_pct"].mean()
    types = [e["name"] for e in traces.catalog]
    rows = []
    held = runs[runs["batch_size"] == runs["work_group"].map(top)]
    for (coll, name), g in held.groupby(["collection", "subtask_type"], sort=True):
        k, c, n = types.index(name), float(cpu.loc[g["run_id"]].mean()), int(g["batch_size"].iloc[0])
        pred = cell_steps(fit.block, c, n, k, tables[int(g["work_group"].iloc[0]), k][n])
        meas = float(duration_steps(g["execution_s"].to_numpy(float)).mean())
        rows.append({"collection": coll, "subtask type": name, "batch size": n, "CPU (%)": c,
                     "measured steps": meas, "predicted steps": pred, "within": within(pred, meas)})
    return rows


def checks_of_fit(model, traces, diag: dict) -> tuple[str, bool]:
    """The checks of `fitting.hazard_check` on a fitted bundle (a validated `Bundle`) and
    its traces, with the largest measured size of each work group held out: (text, all passed)."""
    from gmm_volunteer.fitting.hazard_check import checks_text, hazard_checks

    checks = hazard_checks(model, traces)
    block = model.hazard.phases["execution"]
    degree = max([sum(t) for t in block.terms if block.form == "paper" or t[0] == 0] + [1])
    held = largest_size_held_out(traces, degree, diag["form"], diag["link"])
    bad = [f"{r['subtask type']} at {r['batch size']}" + ("" if r["collection"] == "subtasks" else f", {r['collection']}")
           + f": {r['predicted steps']:.2f} steps against {r['measured steps']:.2f} measured"
           for r in held if not r["within"]]
    checks.insert(1, {"check": "the largest measured size held out, predicted within the same tolerance",
                      "passed": not bad, "failures": bad, "examined": len(held)})
    return checks_text(checks), all(c["passed"] for c in checks)
