"""The paper's section 3.2 findings, checked on a sweep of the paper's grid.

Each finding is a statement of paper section 3.2 (in our words), the quantity that tests
it on a combined sweep dataset (dims users, user_capacity, server_capacity, scheduler,
optionally seed: `configs/paper/grid_one_seed.yaml`), the rule that decides whether it
holds, and our value. The rules are written before looking at the numbers and stay
fixed; a finding that does not hold is reported as such, with the figures, never tuned
to agree (docs/validation.md discusses why each differs).

`paper_findings(ds)` returns a table; `gmmv report` shows it when the dataset has the
grid's dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import xarray as xr

from gmm_volunteer.experiments import analysis

GRID_DIMS = ("users", "user_capacity", "server_capacity", "scheduler")


@dataclass(frozen=True)
class Finding:
    key: str
    paper: str  # what paper section 3.2 reports (paraphrased)
    measure: str  # what we compute, and the rule that decides "holds"
    check: Callable[[dict], tuple[bool | None, str]]  # quantities -> (holds, our value)


def grid_quantities(ds: xr.Dataset) -> dict:
    """Means over seeds of the quantities the findings read."""
    counts = analysis.request_counts(ds)
    sc = analysis.server_consumption(ds)
    q = {
        "completed": counts.sel(outcome="completed", drop=True),
        "abandoned": counts.sel(outcome="abandoned", drop=True),
        "p99": analysis.latency_quantile(ds, 0.99, all_types=True),
        "cpu": sc["mean"].sel(resource="cpu", drop=True),
        "cpu_alloc": sc["allocation_mean"].sel(resource="cpu", drop=True),
        "mem": sc["mean"].sel(resource="memory", drop=True),
        "mem_alloc": sc["allocation_mean"].sel(resource="memory", drop=True),
        "rate": analysis.subtask_completion_rate(ds),
    }
    return {k: (v.mean("seed", skipna=True) if "seed" in v.dims else v).compute() for k, v in q.items()}


def _v(da: xr.DataArray, **sel) -> float:
    return float(da.sel(**sel).values)


def _largest(q, dim):
    return q["completed"][dim].values.max()


def _f_central_user_capacity(q):
    c = q["completed"].sel(scheduler="centralized")
    if c.sizes.get("user_capacity", 1) < 2:
        return None, "needs two user capacities"
    a, b = c.isel(user_capacity=0), c.isel(user_capacity=-1)
    rel = float(np.nanmax(np.abs(a - b) / np.maximum(a, 1)))
    return rel < 0.01, f"largest relative difference {rel:.2%}"


def _f_central_plateau(q):
    c = q["completed"].sel(scheduler="centralized", server_capacity=10).isel(user_capacity=0)
    a = q["abandoned"].sel(scheduler="centralized", server_capacity=10).isel(user_capacity=0)
    users = c["users"].values
    comp = [float(c.sel(users=u)) for u in users]
    # Plateau: completions at the largest population at most 1.2x those at 1,000 users
    # although the population grows 10x; surge: abandoned >= a third of completed there.
    if 1000 not in users:
        return None, "needs 1,000 users"
    ratio = comp[-1] / max(float(c.sel(users=1000)), 1)
    surge = float(a.isel(users=-1)) / max(comp[-1], 1)
    text = ("completed " + ", ".join(f"{int(u)}: {x:,.0f}" for u, x in zip(users, comp))
            + f"; abandoned/completed at {int(users[-1])}: {surge:.2f}")
    return (ratio <= 1.2 and surge >= 1 / 3), text


def _f_central_cancel_ratio(q):
    c = q["completed"].sel(scheduler="centralized").isel(users=-1, user_capacity=0)
    a = q["abandoned"].sel(scheduler="centralized").isel(users=-1, user_capacity=0)
    r = (a / c.where(c > 0)).values
    caps = c["server_capacity"].values
    big = r[caps >= 30]
    text = ", ".join(f"{int(s)}x: {x:.2f}" for s, x in zip(caps, r))
    return bool(np.all((big >= 0.25) & (big <= 0.6))), "abandoned/completed at the largest population: " + text


def _f_uniform_matches_small(q):
    rows = []
    ok = True
    for u in q["completed"]["users"].values:
        if u > 1000:
            continue
        c = q["completed"].sel(users=u, scheduler="centralized").isel(user_capacity=0)
        un = q["completed"].sel(users=u, scheduler="uniform").isel(user_capacity=0)
        rel = float(np.max(np.abs(un - c) / np.maximum(c, 1)))
        ok &= rel <= 0.05
        rows.append(f"{int(u)}: {rel:.1%}")
    return ok, "largest relative difference in completions, by users: " + ", ".join(rows)


def _f_uniform_wins_large(q):
    sel = dict(users=_largest(q, "users"))
    cu = q["completed"].sel(scheduler="uniform", **sel).isel(user_capacity=0)
    cc = q["completed"].sel(scheduler="centralized", **sel).isel(user_capacity=0)
    au = q["abandoned"].sel(scheduler="uniform", **sel).isel(user_capacity=0)
    ac = q["abandoned"].sel(scheduler="centralized", **sel).isel(user_capacity=0)
    ok = bool(np.all(cu > cc) and np.all(au < ac))
    caps = cu["server_capacity"].values
    text = "; ".join(f"{int(s)}x: completed {float(cu.sel(server_capacity=s)):,.0f} vs {float(cc.sel(server_capacity=s)):,.0f}, "
                     f"abandoned {float(au.sel(server_capacity=s)):,.0f} vs {float(ac.sel(server_capacity=s)):,.0f}"
                     for s in caps)
    return ok, "uniform vs centralized: " + text


def _f_uniform_p99(q):
    sel = dict(users=_largest(q, "users"))
    pu = q["p99"].sel(scheduler="uniform", **sel).isel(user_capacity=0)
    pc = q["p99"].sel(scheduler="centralized", **sel).isel(user_capacity=0)
    caps = pu["server_capacity"].values
    text = ", ".join(f"{int(s)}x: {float(pu.sel(server_capacity=s)):.0f} vs {float(pc.sel(server_capacity=s)):.0f} s" for s in caps)
    return bool(np.all(pu < pc)), "P99 uniform vs centralized: " + text


def _f_central_cpu_saturates(q):
    sel = dict(users=_largest(q, "users"), scheduler="centralized")
    u = (q["cpu"] / q["cpu_alloc"]).sel(**sel).isel(user_capacity=0)
    caps = u["server_capacity"].values
    text = ", ".join(f"{int(s)}x: {float(u.sel(server_capacity=s)):.2f}" for s in caps)
    return bool(np.all(u >= 0.95)), "server CPU used / allocated at the largest population: " + text


def _f_central_memory(q):
    sel = dict(users=_largest(q, "users"), scheduler="centralized")
    m = (q["mem"] / q["mem_alloc"]).sel(**sel).isel(user_capacity=0)
    caps = m["server_capacity"].values
    text = ", ".join(f"{int(s)}x: {float(m.sel(server_capacity=s)):.2f}" for s in caps)
    ok = None
    if 10 in caps and 30 in caps:
        ok = bool(1.5 <= float(m.sel(server_capacity=10)) <= 2.5 and float(m.sel(server_capacity=30)) > 1.0)
    return ok, "server memory demand / allocation at the largest population: " + text


def _f_distributed_fewer_resources(q):
    sel = dict(users=_largest(q, "users"))
    c = q["cpu"].sel(scheduler="centralized", **sel).isel(user_capacity=0)
    parts, ok = [], True
    for s in ("uniform", "affinity"):
        if s not in q["cpu"]["scheduler"].values:
            continue
        r = q["cpu"].sel(scheduler=s, **sel).isel(user_capacity=0) / c
        ok &= bool(np.all(r < 0.5))
        parts.append(f"{s}: " + ", ".join(f"{float(x):.2f}" for x in r.values))
    return ok, "server CPU relative to centralized at the largest population, by server capacity: " + "; ".join(parts)


def _f_uniform_user_rate(q):
    r = q["rate"].sel(scheduler="uniform", node_class="user")
    lo, hi = float(r.min()), float(r.max())
    by_uc = r.mean(("users", "server_capacity"))
    better = bool(by_uc.isel(user_capacity=-1) > by_uc.isel(user_capacity=0)) if by_uc.sizes.get("user_capacity", 1) > 1 else None
    ok = bool(lo >= 0.7 and hi <= 0.97 and (better is not False))
    return ok, f"range {lo:.3f}-{hi:.3f}; mean by user capacity " + ", ".join(f"{float(x):.3f}" for x in by_uc.values)


def _f_central_server_rate(q):
    r = q["rate"].sel(scheduler="centralized", node_class="server").isel(user_capacity=0)
    big = _largest(q, "users")
    at10 = float(r.sel(server_capacity=10, users=big))
    at30 = float(r.sel(server_capacity=30, users=big)) if 30 in r["server_capacity"].values else np.nan
    small = float(r.sel(server_capacity=10, users=1000)) if 1000 in r["users"].values else np.nan
    ok = bool(at10 <= 0.4 and 0.4 <= at30 <= 0.8 and small >= 0.9)
    return ok, f"10x: {small:.2f} at 1,000 users, {at10:.2f} at {int(big):,}; 30x at {int(big):,}: {at30:.2f}"


def _f_distributed_plateau(q):
    sel = dict(users=_largest(q, "users"))
    parts, ok = [], True
    for s in ("uniform", "affinity"):
        p = q["p99"].sel(scheduler=s, **sel).isel(user_capacity=0)
        caps = p["server_capacity"].values
        if 50 not in caps or caps.max() <= 50:
            return None, "needs 50x and a larger capacity"
        a, b = float(p.sel(server_capacity=50)), float(p.sel(server_capacity=caps.max()))
        rel = (a - b) / a if a > 0 else 0.0
        ok &= rel < 0.2
        parts.append(f"{s}: P99 {a:.0f} s at 50x, {b:.0f} s at {int(caps.max())}x")
    return ok, "; ".join(parts)


FINDINGS = (
    Finding("central_user_capacity", "Centralized results do not depend on user capacity (Fig. 2).",
            "completed requests at user capacity 1 vs 2; holds if within 1% everywhere", _f_central_user_capacity),
    Finding("central_plateau", "Centralized at 10x: completions grow through 1,000 users, then plateau and decline "
            "as cancellations surge (Fig. 2).",
            "completions at the largest population <= 1.2x those at 1,000, and abandoned >= 1/3 of completed there",
            _f_central_plateau),
    Finding("central_cancel_ratio", "At large user counts, centralized cancellations are about 1/3-1/2 of completions "
            "even at 30x and above (Fig. 2).",
            "abandoned / completed at the largest population; holds if in [0.25, 0.6] for every capacity >= 30x",
            _f_central_cancel_ratio),
    Finding("uniform_matches_small", "Uniform matches centralized through 1,000 users (Fig. 2).",
            "completed requests within 5% for every population <= 1,000 and capacity", _f_uniform_matches_small),
    Finding("uniform_wins_large", "At 10,000 users uniform completes more and cancels less than centralized at every "
            "server capacity, 100x included (Fig. 2).",
            "both inequalities at every capacity (user capacity 1)", _f_uniform_wins_large),
    Finding("uniform_p99_large", "At 10,000 users uniform has much lower P99 latency than centralized (Fig. 3).",
            "P99 (all types) lower at every capacity (user capacity 1)", _f_uniform_p99),
    Finding("central_cpu_saturates", "Centralized CPU consumption reaches every allocation limit (Fig. 4).",
            "server CPU used / allocated >= 0.95 at the largest population, every capacity", _f_central_cpu_saturates),
    Finding("central_memory_demand", "Centralized memory demand is about twice the 25 GB allocation at 10x and slightly "
            "above 75 GB at 30x (Fig. 4).",
            "memory demand / allocation in [1.5, 2.5] at 10x and > 1 at 30x (largest population)", _f_central_memory),
    Finding("distributed_fewer_resources", "Distributed policies use substantially fewer dedicated resources "
            "(Fig. 4).", "server CPU < half of centralized's at the largest population, every capacity",
            _f_distributed_fewer_resources),
    Finding("uniform_user_rate", "Uniform's user-side subtask completion rate is about 0.75-0.95 and improves with "
            "user capacity (Fig. 5).", "all cells in [0.7, 0.97] and the mean higher at user capacity 2",
            _f_uniform_user_rate),
    Finding("central_server_rate", "Centralized server-side completion at 10x falls from 0.9-1.0 (<= 1,000 users) to "
            "about 0.2 at 10,000; at 30x about 0.6 at 10,000 (Fig. 5).",
            ">= 0.9 at 1,000 users and <= 0.4 at the largest population at 10x; 0.4-0.8 at 30x", _f_central_server_rate),
    Finding("distributed_plateau", "Both distributed policies improve little beyond 30-50x server capacity (Fig. 3).",
            "P99 at the largest capacity within 20% of that at 50x (largest population)", _f_distributed_plateau),
)


def paper_findings(ds: xr.Dataset) -> pd.DataFrame:
    """One row per finding: paper statement, measure and rule, our value, holds."""
    missing = [d for d in GRID_DIMS if d not in ds.dims]
    if missing:
        raise ValueError(f"the dataset lacks the grid dimensions {missing} (a sweep of configs/paper/grid*.yaml)")
    q = grid_quantities(ds)
    rows = []
    for f in FINDINGS:
        try:
            holds, value = f.check(q)
        except (KeyError, IndexError, ValueError) as err:  # a grid without that cell
            holds, value = None, f"not computable on this grid ({err})"
        verdict = "n/a" if holds is None else ("holds" if holds else "does not hold")
        rows.append({"finding": f.key, "paper (section 3.2)": f.paper, "measure and rule": f.measure,
                     "ours": value, "verdict": verdict})
    return pd.DataFrame(rows).set_index("finding")


def has_grid_dims(ds: xr.Dataset) -> bool:
    return all(d in ds.dims for d in GRID_DIMS)
