"""Fitting diagnostics written to `<bundle>/report/` (report.md + PNG figures).

- AIC grids of every ARMA selection (table and heatmaps),
- autocorrelation of the transformed data vs a long sample of the fitted ARMA,
- empirical (Kaplan-Meier) vs fitted survival of each phase duration,
- memory estimates (mean + 2 sd) vs the per-second observations,
- the fitted allocation fractions (mean and sd per resource, section 2.2),
- the derived base profile beside the paper's (section 3.1),
- Lloyd-Max levels of the resource trace vs the levels the downloads were measured at.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gmm_volunteer.model.constants import PHASES
from gmm_volunteer.fitting.arma import FULL_GRID, P_CANDIDATES, Q_CANDIDATES, simulate_arma

ACF_LAGS = 30
SIM_STEPS = 20000


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _aic_table(series) -> list[str]:
    head = "| series | Yeo-Johnson lam (unrestricted) | chosen (p, q) | AIC | "
    lines = [head + " | ".join(f"{p},{q}" for p, q in FULL_GRID) + " |"]
    lines.append("|" + "---|" * (4 + len(FULL_GRID)))
    for s in series:
        cells = [f"{s.fit.aic_grid[pq]:.1f}" if pq in s.fit.aic_grid else "" for pq in FULL_GRID]
        if np.isfinite(s.fit.aic):
            aic = f"{s.fit.aic:.1f}"
        else:
            aic = "constant series" if s.fit.sigma == 0 else "white noise: too few within-run lag pairs"
        lines.append(f"| {s.name} | {s.transform.lam:.3g} ({s.transform.lam_unconstrained:.3g}) | {s.fit.order} | {aic} | " + " | ".join(cells) + " |")
    return lines


def _aic_heatmaps(series, path: Path) -> None:
    plt = _plt()
    n = len(series)
    cols = 5
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False)
    for ax, s in zip(axes.flat, series):
        grid = np.full((len(P_CANDIDATES), len(Q_CANDIDATES)), np.nan)
        for (p, q), a in s.fit.aic_grid.items():
            if p in P_CANDIDATES and q in Q_CANDIDATES:
                grid[P_CANDIDATES.index(p), Q_CANDIDATES.index(q)] = a
        if np.isfinite(grid).any():
            grid = grid - np.nanmin(grid)
        ax.imshow(grid, cmap="viridis_r", aspect="auto")
        ax.set_xticks(range(len(Q_CANDIDATES)), [str(q) for q in Q_CANDIDATES])
        ax.set_yticks(range(len(P_CANDIDATES)), [str(p) for p in P_CANDIDATES])
        ax.set_xlabel("q")
        ax.set_ylabel("p")
        ax.set_title(s.name.replace("consumption.", ""), fontsize=7)
        for (i, j), a in np.ndenumerate(grid):
            if np.isfinite(a):
                ax.text(j, i, f"{a:.0f}", ha="center", va="center", fontsize=5, color="w" if a > np.nanmax(grid) / 2 else "k")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle("AIC minus the series' minimum (0 = chosen)", fontsize=9)
    fig.subplots_adjust(hspace=0.6, wspace=0.35)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _acf_plots(series, path: Path) -> list[str]:
    from statsmodels.tsa.stattools import acf

    plt = _plt()
    n = len(series)
    cols = 5
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    lines = ["| series | lag-1 ACF data | lag-1 ACF simulated | max abs diff (lags 1..10) |", "|---|---|---|---|"]
    rng = np.random.default_rng(0)
    for ax, s in zip(axes.flat, series):
        z = s.z
        if np.isfinite(s.fit.aic) and np.isfinite(z).sum() > ACF_LAGS + 2:
            # adjusted: divide by the number of within-run pairs at each lag, not by all
            # values (short runs hold far fewer pairs than values)
            data = acf(z, nlags=ACF_LAGS, missing="conservative", adjusted=True)
            sim = acf(simulate_arma(s.fit.ar, s.fit.ma, s.fit.sigma, SIM_STEPS, rng), nlags=ACF_LAGS)
            lags = np.arange(ACF_LAGS + 1)
            ax.plot(lags, data, "o", ms=3, label="data")
            ax.plot(lags, sim, "-", label="fitted ARMA (simulated)")
            diff = float(np.nanmax(np.abs(data[1:11] - sim[1:11])))
            lines.append(f"| {s.name} | {data[1]:.3f} | {sim[1]:.3f} | {diff:.3f} |")
        else:
            ax.text(0.5, 0.5, "no lag pairs / constant", ha="center", transform=ax.transAxes)
            lines.append(f"| {s.name} | - | - | - |")
        ax.set_title(s.name.replace("consumption.", ""), fontsize=7)
        ax.set_xlabel("lag (s)")
    # the legend on the first panel with lines: the first series may be constant, and a
    # legend of nothing is matplotlib's warning on every fit
    labelled = next((ax for ax in axes.flat if ax.get_legend_handles_labels()[0]), None)
    if labelled is not None:
        labelled.legend(fontsize=6)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.subplots_adjust(hspace=0.6, wspace=0.3)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return lines


def _survival_plots(bundle, diag, traces, path: Path) -> list[str]:
    from statsmodels.duration.survfunc import SurvfuncRight

    from gmm_volunteer.fitting.hazard import consumption_paths, duration_steps, fitted_survival
    from gmm_volunteer.fitting.hazard_select import work_of_runs

    plt = _plt()
    types = [e["name"] for e in traces.catalog]
    runs = traces.runs.sort_values("run_id", kind="stable")
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    lines = ["| phase | runs | median steps (data) | max abs S difference | fit |", "|---|---|---|---|---|"]
    best = diag["hazard"]["fits"]
    for ax, phase in zip(axes, PHASES):
        steps = duration_steps(runs[f"{phase}_s"].to_numpy(float))
        km = SurvfuncRight(steps.astype(float), np.ones(len(steps)))
        d_max = int(steps.max())
        grid = np.arange(d_max + 1)
        # S(d) = P(D > d), a right-continuous step function of the KM estimate
        idx = np.searchsorted(km.surv_times, grid, side="right") - 1
        s_km = np.where(idx >= 0, km.surv_prob[np.clip(idx, 0, None)], 1.0)
        paths = consumption_paths(traces, phase)
        s_fit = fitted_survival(
            bundle["hazard"]["phases"][phase],
            [paths[r] for r in runs["run_id"]],
            runs["batch_size"].to_numpy(float),
            np.array([types.index(t) for t in runs["subtask_type"]]),
            d_max,
            work_of_runs(diag["hazard"]["work_tables"], runs, types),
        )
        ax.step(grid, s_km, where="post", label="Kaplan-Meier (data)")
        ax.step(grid, s_fit, where="post", label="fitted hazard")
        ax.set_title(f"{phase}")
        ax.set_xlabel("steps in phase")
        ax.set_ylabel("P(duration > d)")
        ax.set_ylim(-0.02, 1.02)
        blk = best[phase].block
        note = f"{blk['form']}, {blk['link']}, degree {max([sum(t) for t in blk['terms']] + [0])}"
        note += "" if best[phase].converged else " (NOT CONVERGED)"
        if best[phase].immediate:
            note += "; always first step (h = 1): " + ", ".join(types[k] for k in best[phase].immediate)
        lines.append(f"| {phase} | {len(steps)} | {np.median(steps):.0f} | {np.max(np.abs(s_km - s_fit)):.3f} | {note} |")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return lines


def _memory_plots(bundle, traces, path: Path) -> None:
    plt = _plt()
    runs = traces.runs.set_index("run_id")
    c = traces.consumption[traces.consumption["phase"] == "execution"]
    typ = runs.loc[c["run_id"], "subtask_type"].to_numpy()
    bs = runs.loc[c["run_id"], "batch_size"].to_numpy(float)
    mem = c["memory_mb"].to_numpy(float)
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, st in enumerate(bundle["subtask_types"]):
        sel = typ == st["name"]
        jitter = 1.0 + 0.04 * (k - len(bundle["subtask_types"]) / 2)
        (line,) = ax.plot(st["memory"]["batch_sizes"], st["memory"]["execution_mb"], "-", label=f"{st['name']} mean+2sd")
        ax.plot(bs[sel] * jitter, mem[sel], ".", ms=2, alpha=0.4, color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel("execution memory (MB)")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _lloyd_max_lines(traces) -> list[str]:
    if not traces.levels or not traces.levels.get("levels_mbps"):
        return ["downloads/levels.json absent: nothing to compare."]
    try:
        from gmm_volunteer.fitting.collect.lloyd_max import lloyd_max
    except ImportError:
        return ["gmm_volunteer.fitting.collect.lloyd_max not available: comparison skipped."]
    measured = sorted(traces.levels["levels_mbps"])
    try:
        levels, _ = lloyd_max(traces.resources["band_in_mbps"].to_numpy(float), len(measured), int(traces.levels.get("iters") or 100))
    except Exception as err:  # diagnostics must not fail the fit
        return [f"Lloyd-Max recomputation failed: {err}"]
    return [
        f"- levels the downloads were measured at (levels.json): {[round(x, 2) for x in measured]} Mbit/s",
        f"- Lloyd-Max levels of resources.csv.gz band_in_mbps, recomputed: {[round(float(x), 2) for x in sorted(levels)]} Mbit/s",
        f"- levels.json says preliminary: {traces.levels.get('preliminary')}",
    ]


def _allocation_lines(bundle: dict) -> list[str]:
    """The fitted allocation fractions (paper 2.2: the mean and sd that rescale the ARMA)."""
    lines = [
        "Mean and sd (ddof 1) of each resource's allocation, as a fraction of the measured "
        "machine's capacity, over the trace. A node class with `allocation: fitted` (the users "
        "by default; the server is `dedicated`, mean 1 and sd 0) draws these fractions of its "
        "maximum allocation (docs/usage.md, \"Allocation fractions\").",
        "",
        "| resource | mean | sd |",
        "|---|---|---|",
    ]
    for res, model in bundle["allocation"].items():
        lines.append(f"| {res} | {float(model['mean']):.4g} | {float(model['sd']):.4g} |")
    return lines


def write_report(bundle: dict, diag: dict, traces, out: Path) -> Path:
    """Write report.md and figures under `out`; return the report.md path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    series = diag["series"]
    _aic_heatmaps(series, out / "aic_grids.png")
    acf_lines = _acf_plots(series, out / "acf.png")
    surv_lines = _survival_plots(bundle, diag, traces, out / "survival.png")
    _memory_plots(bundle, traces, out / "memory.png")
    prof, detail = bundle["derived_base_profile"], diag["profile"]
    hz = diag["hazard"]
    md = [
        "# Fitting diagnostics",
        "",
        f"Provenance: {bundle['provenance']}",
        "",
        "## ARMA order selection (paper 2.2)",
        "",
        "AIC per candidate (p, q); the lowest is kept. Heatmaps show AIC minus the minimum.",
        "",
        *_aic_table(series),
        "",
        "![AIC grids](aic_grids.png)",
        "",
        "## Autocorrelation: transformed data vs fitted ARMA",
        "",
        f"Data ACF of the transformed series (within-run pairs only) vs the ACF of a {SIM_STEPS}-step sample "
        "of the fitted ARMA.",
        "",
        *acf_lines,
        "",
        "![ACF](acf.png)",
        "",
        "## Phase durations: Kaplan-Meier vs fitted hazard",
        "",
        "Under the default phase law (execution.progress: work) a diagnostic of the traces: phases "
        "progress by the work they need and the resources granted (section 'Execution work'); under "
        "execution.progress: paper these hazards end the phases (docs/model.md D27).",
        "",
        f"Execution form {hz['form']}, link {hz['link']} (docs/model.md D32). Polynomial degree of each "
        "phase chosen by the log-likelihood of each measured batch size left out in turn "
        "(one estimator, ridge-penalized ML, for every degree): "
        + "; ".join(f"{ph}: " + ", ".join(f"{q}: {v:.1f}" for q, v in h.items()) for ph, h in hz["heldout"].items() if h)
        + ".",
        "",
        *surv_lines,
        "",
        "### Checks of the execution hazard (docs/model.md D32; `gmmv hazards`)",
        "",
        "```",
        *hz["checks_text"].splitlines(),
        "```",
        "",
        *hz.get("quota_text", "").splitlines(),
        "![Survival](survival.png)",
        "",
        "## Memory estimates (mean + 2 sd) vs observations",
        "",
        "![Memory](memory.png)",
        "",
        "## Execution work (CPU-seconds per batch)",
        "",
        "Work of a run = sum over its execution rows of CPU % / 100 x seconds covered. Mean per "
        "batch size (interpolated linearly by the simulator) and the log-sd of work around it, "
        "pooled over batch sizes.",
        "",
        "| subtask type | runs | " + " | ".join(f"n={b}" for b in diag["work"][next(iter(diag["work"]))]["batch_sizes"]) + " | log-sd |",
        "|---|---|" + "---|" * len(diag["work"][next(iter(diag["work"]))]["batch_sizes"]) + "---|",
        *[f"| {name} | {w['runs']} | " + " | ".join(f"{x:.3g}" for x in w["mean_cpu_s"]) + f" | {w['log_sd']:.3f} |"
          for name, w in diag["work"].items()],
        "",
        "## Task types",
        "",
        f"- light subtask types (lighter half by mean execution time): {diag['groups']['light']}",
        f"- heavy subtask types: {diag['groups']['heavy']}",
        "",
        "## Allocation fractions (paper 2.2)",
        "",
        *_allocation_lines(bundle),
        "",
        "## Base profile (paper 3.1)",
        "",
        "| resource | largest mean at batch size 2 (type) | derived | paper |",
        "|---|---|---|---|",
        f"| memory (MB) | {detail['memory_mb']['largest'][1]:.1f} ({detail['memory_mb']['largest'][0]}) | {prof['memory_mb']:.0f} | {prof['paper_memory_mb']:.0f} |",
        f"| CPU (%) | {detail['cpu_pct']['largest'][1]:.1f} ({detail['cpu_pct']['largest'][0]}) | {prof['cpu_pct']:.0f} | {prof['paper_cpu_pct']:.0f} |",
        "",
        "## Bandwidth levels (Lloyd-Max)",
        "",
        *_lloyd_max_lines(traces),
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(md))
    return path
