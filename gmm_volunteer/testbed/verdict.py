"""Whether the simulator meets its goal against the testbed, and whether the runs can say
(issue 33, docs/validation.md section 6).

Each measure is a per-run value (completed requests per run, the mean latency and the P99
of the run's completed requests). The testbed's mean over its n runs has a 95 % interval
from Student's t with n - 1 degrees of freedom; where the interval's half-width is wider
than the target (relative to the testbed's mean), the runs cannot tell an error inside the
target from one outside it, and the verdict is "cannot decide". Otherwise the error
(simulator mean - testbed mean) / testbed mean is within the target or outside it. The
simulator's own mean, over many more seeds, is taken as known: its interval is reported
beside it and is a small fraction of the testbed's.

Paired (`judge_paired`): where the testbed's users drew what the simulator's users of the
same seed draw (testbed.draws: keyed), each testbed run is set beside the simulator's run
of its seed. Both see the same availability and the same requests' types, think times and
patience, so the difference of a pair holds what the two systems did with them, not the
draw of users; the error's 95 % t interval comes from the pairs' differences (n - 1
degrees of freedom), relative to the testbed's mean, and the verdict is decided as above
with that interval in place of the testbed's own.
"""

from __future__ import annotations

import math

import numpy as np

# The goal of issue 33: P99 within 15 %, completions within 5 %; the mean latency has no
# target of its own and is held to the P99's.
TARGETS = {"completed per run": 0.05, "mean latency (s)": 0.15, "P99 (s)": 0.15}
LEVEL = 0.95
WITHIN, OUTSIDE, UNDECIDED = "within target", "outside", "cannot decide"


def half_width(values) -> float:
    """Half-width of the 95 % t interval of the mean of `values` (inf with fewer than 2)."""
    from scipy import stats

    x = np.asarray(values, float)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return math.inf
    return float(stats.t.ppf(0.5 + LEVEL / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))


def runs_needed(values, target: float, most: int = 1000, scale: float | None = None) -> int | None:
    """Runs for the interval's half-width to be within `target` of `scale` (the mean of
    `values` unless given), if the runs' spread stays what `values` show; None with fewer
    than 2 finite values or a zero scale."""
    from scipy import stats

    x = np.asarray(values, float)
    x = x[np.isfinite(x)]
    scale = x.mean() if scale is None and x.size else scale
    if x.size < 2 or not scale:
        return None
    rel_sd = x.std(ddof=1) / abs(scale)
    for n in range(2, most + 1):
        if stats.t.ppf(0.5 + LEVEL / 2, n - 1) * rel_sd / math.sqrt(n) <= target:
            return n
    return most


def judge(tb_runs, sim_runs, target: float) -> dict:
    """The testbed's mean and 95 % half-width, the simulator's, the relative error and the
    verdict of one measure."""
    tb = np.asarray(tb_runs, float)
    sim = np.asarray(sim_runs, float)
    tb_mean, sim_mean = float(np.nanmean(tb)), float(np.nanmean(sim))
    hw = half_width(tb)
    err = (sim_mean - tb_mean) / tb_mean if tb_mean else math.nan
    rel_hw = hw / abs(tb_mean) if tb_mean else math.inf
    return {"tb": tb_mean, "tb_hw": hw, "sim": sim_mean, "sim_hw": half_width(sim), "error": err,
            "verdict": _decide(err, rel_hw, target), "needed": runs_needed(tb, target)}


def _decide(err: float, rel_hw: float, target: float) -> str:
    """The rule of both judges: cannot decide where the interval's half-width, relative to
    the testbed's mean, is not finite or wider than the target; else within or outside."""
    if not math.isfinite(rel_hw) or rel_hw > target:
        return UNDECIDED
    return WITHIN if abs(err) <= target else OUTSIDE


def judge_paired(tb_runs, sim_runs, target: float) -> dict:
    """`judge` of pairs: `tb_runs[i]` and `sim_runs[i]` are the testbed's and the
    simulator's runs of one seed with the same users' draws; a pair with a missing value
    (a run with no completed request has no latency) is left out. The error's half-width
    `error_hw` is the pairs' differences' 95 % t half-width over the testbed's mean."""
    tb, sim = np.asarray(tb_runs, float), np.asarray(sim_runs, float)
    if tb.shape != sim.shape:
        raise ValueError(f"pairs need as many simulator runs as testbed runs ({sim.size} against {tb.size})")
    both = np.isfinite(tb) & np.isfinite(sim)
    tb, sim = tb[both], sim[both]
    tb_mean = float(tb.mean()) if tb.size else math.nan
    sim_mean = float(sim.mean()) if sim.size else math.nan
    diff = sim - tb
    ok = tb.size > 0 and tb_mean != 0
    err = (sim_mean - tb_mean) / tb_mean if ok else math.nan
    err_hw = half_width(diff) / abs(tb_mean) if ok else math.inf
    return {"tb": tb_mean, "tb_hw": half_width(tb), "sim": sim_mean, "sim_hw": half_width(sim), "error": err,
            "error_hw": err_hw, "pairs": int(tb.size), "verdict": _decide(err, err_hw, target),
            "needed": runs_needed(diff, target, scale=tb_mean) if ok else None}


def row_verdict(verdicts) -> str:
    """A case is outside where any measure that can decide is outside, within where every
    measure is within, else it cannot decide."""
    verdicts = list(verdicts)
    if OUTSIDE in verdicts:
        return OUTSIDE
    return WITHIN if all(v == WITHIN for v in verdicts) else UNDECIDED


def cell(j: dict, digits: int = 1) -> str:
    """``testbed mean ± half-width / simulator mean (error, verdict; runs to decide)``; for
    pairs the error carries its own half-width: ``(error ± half-width paired, ...)``."""
    f = f".{digits}f"
    hw = f" ± {j['tb_hw']:{f}}" if math.isfinite(j["tb_hw"]) else " (one run)"
    err = f"{j['error'] * 100:+.0f} %" if math.isfinite(j["error"]) else "no base"
    if "error_hw" in j and math.isfinite(j["error"]):
        err += f" ± {j['error_hw'] * 100:.0f} % paired" if math.isfinite(j["error_hw"]) else " (one pair)"
    need = ""
    if j["verdict"] == UNDECIDED and j["needed"] is not None:
        need = f"; {j['needed']} runs to decide"
    return f"{j['tb']:{f}}{hw} / {j['sim']:{f}} ({err}, {j['verdict']}{need})"
