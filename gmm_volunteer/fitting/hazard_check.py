"""What a bundle's fitted execution hazard implies per subtask type and batch size, beside
what the traces measured (`gmmv hazards`; docs/model.md D27).

Under `execution.progress: paper` a batch's execution ends by the draw of its phase's
logistic hazard (paper 2.2; fitting/hazard.py), with the consumption it is charged, its
size and its age as covariates. The fit sees only the batch sizes and the CPU the traces
measured; a simulated server forms batches far larger and, overcommitted, charges them
less CPU. This table says what the fitted law does there: for each subtask type and batch
size, the CPU a batch asks when uncontended (the bundle's consumption statistics at that
size, as the simulator interpolates them, D9), the probability that it ends in its first
step, its mean number of steps, the same at half that CPU (a server overcommitted
twice), and the steps the measured runs took at that size, where there are any.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SIZES = (1, 2, 4, 8, 16, 32, 64)
MAX_STEPS = 1000  # steps summed for the mean; a survival left above 1e-9 there is reported


def _execution_cpu(bundle, m: int, n: int) -> float:
    """Mean CPU % asked by an executing batch of subtask type m and size n (D9: IDW over
    the batch-size knots, the size clamped to the measured range)."""
    from gmm_volunteer.model.kernels.arma import idw_weights

    stage = bundle.consumption.stages["execution"]
    knots = np.asarray(stage.levels, float)
    w = np.empty(len(knots))
    idw_weights(min(max(float(n), knots[0]), knots[-1]), knots, len(knots), float(bundle.consumption.idw_power), w)
    return float(w @ np.asarray(stage.resources["cpu"].stats.mean[m], float))


def _steps(block: dict, cpu: float, n: int, m: int) -> tuple[float, float, float]:
    """(P(ends in its first step), mean steps, survival left at MAX_STEPS) of an execution
    charged `cpu` every step."""
    from gmm_volunteer.fitting.hazard import hazard_probability

    age = np.arange(MAX_STEPS)
    with np.errstate(over="ignore"):  # exp of a large logit: h is 0 or 1 there, as it should be
        h = hazard_probability(block, np.full(MAX_STEPS, cpu), np.full(MAX_STEPS, float(n)), age,
                               np.full(MAX_STEPS, m))
    surv = np.concatenate([[1.0], np.cumprod(1.0 - h)])
    return float(h[0]), float(surv[:-1].sum()), float(surv[-1])


def hazard_durations(bundle, runs: pd.DataFrame | None = None, sizes=SIZES) -> pd.DataFrame:
    """One row per subtask type and batch size (see the module docstring). `runs` is a
    trace set's runs table (`fitting.traces.load_traces(...).runs`), or None."""
    from gmm_volunteer.fitting.hazard import duration_steps

    if bundle.hazard is None or "execution" not in bundle.hazard.phases:
        raise ValueError("the bundle has no fitted execution hazard (its `hazard` block)")
    block = bundle.hazard.phases["execution"].model_dump()
    rows = []
    for m, st in enumerate(bundle.subtask_types):
        for n in sizes:
            cpu = _execution_cpu(bundle, m, n)
            p1, mean, left = _steps(block, cpu, n, m)
            _, half, left_half = _steps(block, cpu / 2.0, n, m)
            measured = np.nan
            if runs is not None:
                sel = runs[(runs["subtask_type"] == st.name) & (runs["batch_size"] == n)]
                if len(sel):
                    measured = float(duration_steps(sel["execution_s"].to_numpy(float)).mean())
            rows.append({
                "subtask type": st.name, "batch size": n, "CPU asked (%)": round(cpu, 1),
                "measured steps (mean)": measured,
                "hazard: P(ends in step 1)": p1,
                "hazard: mean steps": mean if left < 1e-9 else f">= {mean:.0f} (S({MAX_STEPS}) = {left:.2g})",
                "hazard at half the CPU: mean steps": (half if left_half < 1e-9
                                                       else f">= {half:.0f} (S({MAX_STEPS}) = {left_half:.2g})"),
            })
    return pd.DataFrame(rows)
