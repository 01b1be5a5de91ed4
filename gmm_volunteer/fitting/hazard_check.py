"""What a bundle's fitted execution hazard implies per subtask type and batch size, beside
what the traces measured, and the checks a fit must pass (`gmmv hazards`; docs/model.md
D27, D32).

Under `execution.progress: paper` a batch's execution ends by the draw of its phase's
hazard (paper 2.2; fitting/hazard.py), with the consumption it is charged, its size and
its age (or the fraction of its work done) as covariates. The fit sees only the batch
sizes and the CPU the traces measured; a simulated server forms batches far larger and,
overcommitted, charges them less CPU. The table says what the fitted law does there: for
each subtask type and batch size, the CPU a batch asks when uncontended (the bundle's
consumption statistics at that size, as the simulator interpolates them, D9), the
probability that it ends in its first step, its mean number of steps, the same at half
that CPU (a server overcommitted twice), and the steps the measured runs took at that
size, where there are any.

The checks (`hazard_checks`), each over every subtask type:
- *measured*: at every measured size, mean steps at the CPU asked within
  max(`TOL_STEPS`, `TOL_REL` x measured) of the measured mean; with `quota/` collections
  (D38) also per (collection, type, size): at the CPU its runs were measured to use and
  the work of its machine (`quota_cells`), so at every CPU level the traces hold;
- *ends*: every batch of size 1..`ENDS_UP_TO` ends (survival below 1e-9 at `MAX_STEPS`);
- *monotone in size*: mean steps never fall as the size grows over 1..`GRID_MAX`, beyond
  the largest measured size;
- *monotone in CPU*: mean steps never fall as the CPU asked is halved and quartered, at
  every size of that grid.
The held-out check (the largest measured size left out of the fit and predicted) needs a
refit, `largest_size_held_out`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SIZES = (1, 2, 4, 8, 16, 32, 64)
MAX_STEPS = 5000  # steps summed for the mean; a survival left above 1e-9 there is reported
TOL_STEPS, TOL_REL = 0.5, 0.15  # a measured cell holds within max(0.5 step, 15 %)
ENDS_UP_TO = 64
GRID_MAX = 128
CPU_FACTORS = (1.0, 0.5, 0.25)
_MONOTONE_SLACK = 1e-6  # relative: sums of 5000 survival terms agree to ~1e-12


def _execution_cpu(bundle, m: int, n: int) -> float:
    """Mean CPU % asked by an executing batch of subtask type m and size n (D9: IDW over
    the batch-size knots, the size clamped to the measured range)."""
    from gmm_volunteer.model.kernels.arma import idw_weights

    stage = bundle.consumption.stages["execution"]
    knots = np.asarray(stage.levels, float)
    w = np.empty(len(knots))
    idw_weights(min(max(float(n), knots[0]), knots[-1]), knots, len(knots), float(bundle.consumption.idw_power), w)
    return float(w @ np.asarray(stage.resources["cpu"].stats.mean[m], float))


def _work(bundle, m: int, n: int) -> float:
    """W_m(n), the work the work-fraction hazard divides by (`model.params.hazard_work_table`)."""
    from gmm_volunteer.model.params import MAX_BATCH_TABLE, hazard_work_table

    wk = bundle.subtask_types[m].work
    table = hazard_work_table(wk.batch_sizes, wk.mean_cpu_s)
    if n <= MAX_BATCH_TABLE:
        return float(table[n])
    return float(table[-1] + (table[-1] - table[-2]) * (n - MAX_BATCH_TABLE))


def cell_steps(block: dict, cpu: float, n: int, m: int, work: float) -> float:
    """Mean steps of an execution of type m and size n charged `cpu` every step, its work `work`."""
    return _steps(block, cpu, n, m, work)[1]


def _steps(block: dict, cpu: float, n: int, m: int, work: float) -> tuple[float, float, float]:
    """(P(ends in its first step), mean steps, survival left at MAX_STEPS) of an execution
    charged `cpu` every step."""
    from gmm_volunteer.fitting.hazard import hazard_probability

    age = np.arange(MAX_STEPS)
    with np.errstate(over="ignore"):  # exp of a large predictor: h is 0 or 1 there, as it should be
        h = hazard_probability(block, np.full(MAX_STEPS, cpu), np.full(MAX_STEPS, float(n)), age,
                               np.full(MAX_STEPS, m), np.full(MAX_STEPS, work))
    surv = np.concatenate([[1.0], np.cumprod(1.0 - h)])
    return float(h[0]), float(surv[:-1].sum()), float(surv[-1])


def _block(bundle) -> dict:
    if bundle.hazard is None or "execution" not in bundle.hazard.phases:
        raise ValueError("the bundle has no fitted execution hazard (its `hazard` block)")
    return bundle.hazard.phases["execution"].model_dump()


def _measured(runs, name: str, n: int) -> float:
    from gmm_volunteer.fitting.hazard import duration_steps

    if runs is None:
        return np.nan
    sel = runs[(runs["subtask_type"] == name) & (runs["batch_size"] == n)]
    return float(duration_steps(sel["execution_s"].to_numpy(float)).mean()) if len(sel) else np.nan


def _mean_text(mean: float, left: float):
    return mean if left < 1e-9 else f">= {mean:.0f} (S({MAX_STEPS}) = {left:.2g})"


def hazard_durations(bundle, runs: pd.DataFrame | None = None, sizes=SIZES) -> pd.DataFrame:
    """One row per subtask type and batch size (see the module docstring). `runs` is a
    trace set's runs table (`fitting.traces.load_traces(...).runs`), or None."""
    block = _block(bundle)
    rows = []
    for m, st in enumerate(bundle.subtask_types):
        for n in sizes:
            cpu, w = _execution_cpu(bundle, m, n), _work(bundle, m, n)
            p1, mean, left = _steps(block, cpu, n, m, w)
            _, half, left_half = _steps(block, cpu / 2.0, n, m, w)
            rows.append({
                "subtask type": st.name, "batch size": n, "CPU asked (%)": round(cpu, 1),
                "measured steps (mean)": _measured(runs, st.name, n),
                "hazard: P(ends in step 1)": p1,
                "hazard: mean steps": _mean_text(mean, left),
                "hazard at half the CPU: mean steps": _mean_text(half, left_half),
            })
    return pd.DataFrame(rows)


def within(predicted: float, measured: float) -> bool:
    """A measured cell holds: |predicted - measured| <= max(TOL_STEPS, TOL_REL x measured)."""
    return abs(predicted - measured) <= max(TOL_STEPS, TOL_REL * measured)


def quota_cells(bundle, traces) -> pd.DataFrame:
    """One row per (quota collection, subtask type, batch size) of `traces.quota_runs`
    (D38): the quota, the runs, the mean of their per-second execution CPU, the work W of
    the quota machine (`fitting.work.work_tables`, group 1), the measured mean steps and
    the fitted hazard's mean steps at that CPU and work, and whether they agree (`within`).
    Empty without quota collections."""
    from gmm_volunteer.fitting.hazard import duration_steps
    from gmm_volunteer.fitting.work import QUOTA_GROUP, work_tables

    if traces is None or traces.quota_runs is None:
        return pd.DataFrame()
    block, tables = _block(bundle), work_tables(traces)
    names = [st.name for st in bundle.subtask_types]
    cons = traces.quota_consumption
    cpu = cons[cons["phase"] == "execution"].groupby("run_id")["cpu_pct"].mean()
    rows = []
    for (coll, quota, name, n), g in traces.quota_runs.groupby(
            ["collection", "cpu_quota_pct", "subtask_type", "batch_size"], sort=True):
        m, n = names.index(name), int(n)
        work = float(tables[QUOTA_GROUP, [e["name"] for e in traces.catalog].index(name)][n])
        c = float(cpu.loc[g["run_id"]].mean())
        meas = float(duration_steps(g["execution_s"].to_numpy(float)).mean())
        pred = cell_steps(block, c, n, m, work)
        rows.append({"collection": coll, "CPU quota (%)": quota, "subtask type": name, "batch size": n,
                     "runs": len(g), "CPU used (%)": round(c, 1), "work (CPU-s)": work,
                     "measured steps (mean)": meas, "hazard: mean steps": pred, "within": within(pred, meas)})
    return pd.DataFrame(rows)


def quota_table(bundle, traces) -> str:
    """`quota_cells` as a markdown section of a report (empty without quota collections)."""
    from gmm_volunteer.io.resultfile import markdown_table

    cells = quota_cells(bundle, traces)
    if not len(cells):
        return ""
    return ("Cells of the quota/ collections (docs/model.md D38): mean steps measured and under the "
            "fitted hazard at the CPU the runs used and the work of their machine at full speed.\n\n"
            + markdown_table(cells.assign(within=cells["within"].map({True: "yes", False: "NO"}))) + "\n")


def hazard_checks(bundle, traces=None) -> list[dict]:
    """The checks of the module docstring: one dict per check (name, passed, failures:
    a list of what failed, examined: how many cases). `traces`: the trace set the bundle
    was fitted on (`fitting.traces.load_traces`), or None."""
    block = _block(bundle)
    out = []
    if traces is not None:
        bad, cases = [], 0
        for (name, n), g in traces.runs.groupby(["subtask_type", "batch_size"], sort=True):
            m = [st.name for st in bundle.subtask_types].index(name)
            n = int(n)
            _, mean, _ = _steps(block, _execution_cpu(bundle, m, n), n, m, _work(bundle, m, n))
            meas = _measured(g, name, n)
            cases += 1
            if not within(mean, meas):
                bad.append(f"{name} at {n}: {mean:.2f} steps against {meas:.2f} measured")
        quota = quota_cells(bundle, traces)
        for r in quota.to_dict("records"):
            cases += 1
            if not r["within"]:
                bad.append(f"{r['subtask type']} at {r['batch size']}, {r['collection']} ({r['CPU used (%)']:g} % "
                           f"used): {r['hazard: mean steps']:.2f} steps against {r['measured steps (mean)']:.2f} measured")
        out.append({"check": f"measured cells within max({TOL_STEPS} step, {TOL_REL:.0%})", "passed": not bad,
                    "failures": bad, "examined": cases})
    grid = np.arange(1, GRID_MAX + 1)
    ends, size_bad, cpu_bad = [], [], []
    for m, st in enumerate(bundle.subtask_types):
        means = np.empty((len(CPU_FACTORS), len(grid)))
        for i, n in enumerate(grid):
            cpu, w = _execution_cpu(bundle, m, int(n)), _work(bundle, m, int(n))
            for j, f in enumerate(CPU_FACTORS):
                _, means[j, i], left = _steps(block, cpu * f, int(n), m, w)
                if j == 0 and n <= ENDS_UP_TO and left >= 1e-9:
                    ends.append(f"{st.name} at {n}: S({MAX_STEPS}) = {left:.2g}")
        slack = _MONOTONE_SLACK * means
        falls = np.nonzero(np.diff(means[0]) < -slack[0, 1:])[0]
        size_bad += [f"{st.name}: {means[0, i]:.3g} steps at {grid[i]}, {means[0, i + 1]:.3g} at {grid[i + 1]}"
                     for i in falls[:3]]
        for j in range(1, len(CPU_FACTORS)):
            drop = np.nonzero(means[j] < means[j - 1] - slack[j - 1])[0]
            cpu_bad += [f"{st.name} at {grid[i]}: {means[j - 1, i]:.3g} steps at {CPU_FACTORS[j - 1]:g} x the "
                        f"CPU asked, {means[j, i]:.3g} at {CPU_FACTORS[j]:g} x" for i in drop[:3]]
    n_types = len(bundle.subtask_types)
    out += [
        {"check": f"every batch of size 1-{ENDS_UP_TO} ends", "passed": not ends, "failures": ends,
         "examined": n_types * ENDS_UP_TO},
        {"check": f"mean steps never fall as the batch grows (1-{GRID_MAX})", "passed": not size_bad,
         "failures": size_bad, "examined": n_types * (GRID_MAX - 1)},
        {"check": "mean steps never fall as the CPU is halved and quartered", "passed": not cpu_bad,
         "failures": cpu_bad, "examined": n_types * GRID_MAX * (len(CPU_FACTORS) - 1)},
    ]
    return out


def checks_text(checks: list[dict]) -> str:
    """The checks as lines, a failing one loudly."""
    lines = []
    for c in checks:
        head = "PASS" if c["passed"] else "FAIL"
        lines.append(f"{head}  {c['check']} ({c['examined']} cases" +
                     ("" if c["passed"] else f", {len(c['failures'])} failed") + ")")
        lines += [f"      {f}" for f in c["failures"][:12]]
    if not all(c["passed"] for c in checks):
        lines.append("THE FITTED EXECUTION HAZARD FAILS ITS CHECKS: what the paper's law shows on it is "
                     "partly an artifact of the fit (docs/model.md D32).")
    return "\n".join(lines)
