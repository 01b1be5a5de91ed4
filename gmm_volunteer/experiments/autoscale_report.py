"""The autoscaler comparison: metrics, paired differences, the day figure and the HTML
report of a sweep over ``autoscaler`` (issue 11 item 4; docs/experiments.md section 7).

For every run: P99 latency per request type (completed requests, from the combined
dataset), minutes in SLO violation, capacity-hours per resource, scaling actions. A
minute is in violation when the ``quantile`` (0.99) of the latency of the requests that
*ended* in it (completed, abandoned or dropped, each with its latency at the end, as in
paper eq. 3) exceeds ``tau`` seconds; a minute in which nothing ended is not. Each
scaling autoscaler is compared with ``fixed`` and ``la_imr`` with ``capacity_rule`` by
paired differences on the same seeds (`analysis.paired_difference`: runs of one seed
share users, demand and bursts, D5 and D22).

The figure shows the demand multiplier m(t) and, per autoscaler, the server's capacity in
units of base_profile and the P99 latency of the requests completed in each ``window``
over the run, for one seed.
"""

from __future__ import annotations

import datetime as _dt
import html
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from gmm_volunteer.experiments import analysis
from gmm_volunteer.io.conventions import flat_requests
from gmm_volunteer.io.sweepdir import MANIFEST, RUNS_DIR

TAU = 30.0  # s, the SLO of the report: P99 of ended requests per minute
REFERENCE = "fixed"


def runs_dir(results) -> Path:
    """`runs/` of a sweep output directory, given it or its combined store."""
    p = Path(results)
    if not (p / MANIFEST).is_file():
        p = p.parent
    return p / RUNS_DIR


def violation_minutes(store: xr.Dataset, tau: float = TAU, quantile: float = 0.99, minute: int = 60) -> float:
    records = flat_requests(store)
    end, lat = records["request_end"], records["request_latency"].astype(np.float64)
    if end.size == 0:
        return 0.0
    bucket = end // minute
    order = np.argsort(bucket, kind="stable")
    bucket, lat = bucket[order], lat[order]
    cuts = np.flatnonzero(np.diff(bucket)) + 1
    q = [np.quantile(chunk, quantile) for chunk in np.split(lat, cuts)]
    return float(np.count_nonzero(np.asarray(q) > tau))


def timeline(store: xr.Dataset, window: int = 300) -> pd.DataFrame:
    """Per window: hour of the run's clock start, CPU capacity in base_profile units and
    the P99 latency of the requests completed in it."""
    cap = np.asarray(store["dedicated_capacity"].sel(resource="cpu").values, np.float64)
    steps = cap.size
    from gmm_volunteer.io.yamlio import load_yaml

    cfg = load_yaml(str(store.attrs.get("config", "")), "config") or {}
    base_cpu = float((cfg.get("base_profile") or {}).get("cpu", 200.0))
    start_hour = float((cfg.get("demand") or {}).get("start_hour", 0.0))
    records = flat_requests(store)
    done = records["request_outcome"] == 0
    end, lat = records["request_end"][done], records["request_latency"][done].astype(np.float64)
    edges = np.arange(0, steps + window, window)
    idx = np.digitize(end, edges) - 1
    p99 = np.full(edges.size - 1, np.nan)
    for k in range(edges.size - 1):
        sel = lat[idx == k]
        if sel.size:
            p99[k] = np.quantile(sel, 0.99)
    units = np.array([cap[a:b].mean() for a, b in zip(edges[:-1], np.minimum(edges[1:], steps))]) / base_cpu
    return pd.DataFrame({"hour": start_hour + edges[:-1] / 3600.0, "capacity_units": units, "p99": p99})


def demand_series(store: xr.Dataset) -> np.ndarray:
    """The run's demand multiplier m(t) (D18, D22), rebuilt from its stored config and
    seed: the bursts are drawn from the seed's own stream, as in the run."""
    from gmm_volunteer.model.demand import Demand
    from gmm_volunteer.model.rng import seed_sequence
    from gmm_volunteer.io.yamlio import load_yaml

    cfg = load_yaml(str(store.attrs.get("config", "")), "config") or {}
    seed = cfg.get("seed")
    if seed is None:
        seed = int(store.attrs["seed_entropy"])
    return Demand.model_validate(cfg.get("demand") or {}).multiplier(int(store.attrs["steps"]), seed_sequence(seed))


def add_run_metrics(ds: xr.Dataset, results, tau: float = TAU) -> xr.Dataset:
    """`ds` plus ``slo_violation_minutes`` (autoscaler, seed), read from the run stores."""
    from gmm_volunteer.io.results import open_result

    names = ds["run_name"].load()
    out = xr.full_like(names, np.nan, dtype=np.float64)
    where = runs_dir(results)
    for idx in np.ndindex(names.shape):
        name = str(names.values[idx])
        path = where / f"{name}.zarr"
        if name and path.exists():
            out.values[idx] = violation_minutes(open_result(path), tau)
    out.attrs = {"long_name": f"minutes whose P99 latency of ended requests exceeds {tau:g} s", "units": "min"}
    return ds.assign(slo_violation_minutes=out)


def _quantities(ds: xr.Dataset) -> dict:
    ch = ds["capacity_hours"]
    return {
        "P99 all types (s)": analysis.latency_quantile(ds, 0.99, all_types=True),
        "minutes in SLO violation": ds["slo_violation_minutes"],
        "CPU core-hours": ch.sel(resource="cpu", drop=True) / 100.0,
        "memory GB-hours": ch.sel(resource="memory", drop=True) / 1000.0,
        "scaling actions": ds["scaling_actions_total"],
        "abandoned": analysis.request_counts(ds).sel(outcome="abandoned", drop=True),
    }


def summary_table(ds: xr.Dataset) -> pd.DataFrame:
    """Means over seeds per autoscaler: the headline quantities and P99 per request type."""
    cols = {k: v.mean("seed") for k, v in _quantities(ds).items()}
    p99 = analysis.latency_quantile(ds, 0.99).mean("seed")
    for t in p99["request_type"].values:
        cols[f"P99 {t} (s)"] = p99.sel(request_type=t, drop=True)
    df = pd.DataFrame({k: v.to_series() for k, v in cols.items()})
    df.insert(0, "seeds", int(ds.sizes["seed"]))
    return df


def paired_table(ds: xr.Dataset, confidence: float = 0.95) -> pd.DataFrame:
    """Each scaling autoscaler minus `fixed` (minus `reactive` in a grid without `fixed`,
    seed 001's baseline, docs/experiments.md 7.5), and la_imr minus capacity_rule, per
    quantity and per request type's P99: mean per-seed difference, bootstrap interval;
    per value of any other grid dimension (its first) when the grid has one."""
    extra = [d for d in ds["run_complete"].dims if d not in ("autoscaler", "seed")]
    if extra:  # another grid dimension (seed 001's arrival levels, 7.5): a block per value
        d = extra[0]
        parts = [paired_table(ds.sel({d: v}, drop=True), confidence) for v in ds[d].values]
        return pd.concat(parts, keys=[v.item() if hasattr(v, "item") else v for v in ds[d].values], names=[d])
    names = [str(a) for a in ds["autoscaler"].values]
    ref = REFERENCE if REFERENCE in names or "reactive" not in names else "reactive"
    pairs = [(a, ref) for a in names if a != ref and ref in names]
    pairs += [("la_imr", c) for c in names if "la_imr" in names and c.startswith("capacity_rule")]
    qs = _quantities(ds)
    p99 = analysis.latency_quantile(ds, 0.99)
    for t in p99["request_type"].values:
        qs[f"P99 {t} (s)"] = p99.sel(request_type=t, drop=True)
    rows = []
    for a, b in pairs:
        for label, da in qs.items():
            r = analysis.paired_difference(ds, da, "autoscaler", a, b, confidence=confidence, n_resamples=2000)
            rows.append({"comparison": f"{a} - {b}", "quantity": label, "mean": float(r["mean"]),
                         "low": float(r["low"]), "high": float(r["high"]), "seeds": int(r["n_seeds"])})
    return pd.DataFrame(rows).set_index(["comparison", "quantity"])


def join_sweeps(*sweeps) -> xr.Dataset:
    """Several sweeps over `autoscaler` on the same seeds as one dataset with the run
    metrics, for paired differences across them; each sweep is ``(results, labels)``,
    labels renaming its autoscaler values (e.g. ``{"capacity_rule": "capacity_rule_0.87"}``
    for a variant run by another grid)."""
    from gmm_volunteer.experiments.combine import open_combined

    parts = []
    for results, labels in sweeps:
        ds = add_run_metrics(open_combined(results), results)
        parts.append(ds.assign_coords(autoscaler=[(labels or {}).get(str(a), str(a))
                                                  for a in ds["autoscaler"].values]))
    return xr.concat(parts, "autoscaler", data_vars="minimal", coords="minimal", compat="override",
                     join="override", combine_attrs="drop_conflicts")


def day_figure(ds: xr.Dataset, results, seed=None, window: int = 300):
    """Capacity (top) and P99 latency per window (bottom) over the run, per autoscaler,
    for one seed (the first by default: bursts differ between seeds)."""
    import matplotlib.pyplot as plt

    from gmm_volunteer.io.results import open_result

    seed = ds["seed"].values[0] if seed is None else seed
    fig, (dem, top, bottom) = plt.subplots(3, 1, figsize=(11, 9), sharex=True,
                                           gridspec_kw={"height_ratios": [1, 2, 2]})
    drawn = False
    for a in ds["autoscaler"].values:
        name = str(ds["run_name"].sel(autoscaler=a, seed=seed).values)
        path = runs_dir(results) / f"{name}.zarr"
        if not name or not path.exists():
            continue
        store = open_result(path)
        tl = timeline(store, window)
        if not drawn:  # the same in every run of the seed (common random numbers)
            m = demand_series(store)
            dem.plot(tl["hour"].iloc[0] + np.arange(m.size) / 3600.0, m, color="grey", lw=0.7)
            drawn = True
        top.step(tl["hour"], tl["capacity_units"], where="post", label=str(a))
        bottom.plot(tl["hour"], tl["p99"], label=str(a))
    dem.set_ylabel("demand multiplier m(t)")
    top.set_ylabel("server capacity (x base_profile)")
    bottom.set_ylabel(f"P99 latency per {window // 60} min (s)")
    bottom.set_yscale("log")
    bottom.axhline(TAU, color="grey", ls="--", lw=0.8)
    bottom.set_xlabel("hour of the day")
    top.legend(loc="upper left", fontsize=8)
    dem.set_title(f"Demand, capacity and latency over the run, seed {seed}")
    fig.tight_layout()
    return fig


def render_html(ds: xr.Dataset, results, title: str) -> str:
    from gmm_volunteer.experiments.report import _CSS, _img, _table_html

    ds = add_run_metrics(ds, results)
    a = ds.attrs
    conf = 0.95
    meta = [str(a.get("sweep_description", "")), f"grid file: {a.get('sweep_grid_file', '?')}",
            f"runs complete: {a.get('runs_complete', '?')} of {a.get('runs_total', '?')}",
            f"steps per run: {a.get('steps', '?')}",
            f"generated: {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}"]
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>",
             '<p class="meta">' + "<br>".join(html.escape(m) for m in meta if m) + "</p>",
             f"<p>SLO: a minute is in violation when the P99 latency of the requests that ended in it "
             f"(completed, abandoned or dropped) exceeds {TAU:g} s. P99 per request type is over "
             "completed requests. Capacity-hours: CPU in cores x h, memory in GB x h.</p>"]
    cap = "Capacity and P99 latency over the run per autoscaler (first seed)"
    parts += [f"<h2>{cap}</h2>", _img(day_figure(ds, results), cap)]
    parts += ["<h2>Per autoscaler (means over seeds)</h2>", _table_html(summary_table(ds))]
    if ds.sizes.get("seed", 1) >= 2:
        parts += [f"<h2>Paired differences (same seeds), {int(conf * 100)}% bootstrap intervals</h2>",
                  "<p>a - b per seed, averaged; percentile bootstrap over seeds.</p>",
                  _table_html(paired_table(ds, conf))]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(ds: xr.Dataset, results, path, title: str) -> Path:
    path = Path(path)
    text = render_html(ds, results, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def is_autoscaler_sweep(ds: xr.Dataset) -> bool:
    return "autoscaler" in ds.dims and ds.sizes["autoscaler"] > 1
