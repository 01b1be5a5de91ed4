"""The routing comparison's tables and figure in `gmmv report` (issue 12 item 5;
docs/experiments.md, "Routing").

* `comparison_table`: per grid point (means over seeds) P99 per request type,
  completed requests, accuracy served, monitoring traffic, the server's CPU
  capacity-hours and the delay estimator's error (gmm_volunteer.experiments.routing_metrics);
* `estimator_table`: per load level (users) and router with a decision log, the mean
  absolute relative error of the hybrid, model-only and queue-only delay estimates on
  that router's decisions, mean and range over seeds (seed 002's claim);
* `latency_over_time`: per-request latency of completed requests against their end
  time, one panel per scheduler (first seed), with the scripted events shaded, for
  sweeps whose runs carry `events` (the six phases of seed 000's testbed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

# Per-run measures only a router gives (routing_metrics): NaN where they do not apply, and
# its monitoring calls. A sweep of plain schedulers has none and gets no routing sections
# (accuracy served is not one: any bundle with accuracies gives it).
ROUTING_MEASURES = ("estimator_mare", "herding_max_placed_mean")


def applies(ds: xr.Dataset) -> bool:
    if "scheduler" not in ds.dims:
        return False
    if "monitor_calls_total" in ds and bool((np.nan_to_num(ds["monitor_calls_total"].values) > 0).any()):
        return True
    return any(name in ds and bool(np.isfinite(ds[name].values).any()) for name in ROUTING_MEASURES)


def _seed_mean(da: xr.DataArray) -> xr.DataArray:
    return da.mean("seed", skipna=True) if "seed" in da.dims else da


def comparison_table(ds: xr.Dataset) -> pd.DataFrame:
    p99 = ds["latency_quantile"].sel(quantile=0.99, method="nearest", drop=True)
    cols = {f"P99 {t} (s)": p99.sel(request_type=t, drop=True) for t in ds["request_type"].values}
    cols["completed"] = ds["requests"].sel(outcome="completed", drop=True).sum("request_type")
    cols["accuracy served"] = ds["accuracy_served"]
    cols["monitoring (MB)"] = ds["monitor_bytes_total"].sum("monitor_op") / 1e6
    cols["monitoring calls"] = ds["monitor_calls_total"].sum("monitor_op")
    if "placements_lost" in ds:  # seed 000's failures (6.2); combined stores before issue 34 lack it
        cols["placements lost"] = ds["placements_lost"]
        cols["to server (share of decisions)"] = ds["server_decision_share"]
    cols["server CPU capacity-hours"] = ds["capacity_hours"].sel(resource="cpu", drop=True)
    cols["estimator error"] = ds["estimator_mare"]
    mean = xr.Dataset({k: _seed_mean(v) for k, v in cols.items()}).compute()
    df = mean.to_dataframe()
    return df[[c for c in cols if c in df.columns]]


def estimator_table(ds: xr.Dataset) -> pd.DataFrame | None:
    """Per load level (users) and router with a decision log: the mean absolute relative
    error of the three estimates on that router's decisions (mean over seeds, and the
    range); the row of `queue_aware`, `model_only`, `queue_only` under its own estimate is
    seed 002's comparison."""
    names = [f"estimator_mare_{e}" for e in ("hybrid", "model_only", "queue_only")]
    if any(n not in ds for n in names):
        return None
    e = xr.Dataset({n.removeprefix("estimator_mare_"): ds[n] for n in names}).compute()
    logged = np.isfinite(e["hybrid"]).any([d for d in e["hybrid"].dims if d != "scheduler"])
    if not bool(logged.any()):
        return None
    e = e.sel(scheduler=ds["scheduler"].values[logged.values])
    cols = {}
    for name in e.data_vars:
        cols[f"{name} mean"] = _seed_mean(e[name])
        if "seed" in e.dims:
            cols[f"{name} range"] = e[name].max("seed") - e[name].min("seed")
    return xr.Dataset(cols).to_dataframe()[list(cols)]


def herding_table(ds: xr.Dataset) -> pd.DataFrame | None:
    """Per grid point (means over seeds): the herding diagnostic (docs/routing.md
    section 7): the most subtasks placed on one node in a step (mean over steps with
    placements, and the run's maximum), the share of steps in which the server had a
    free core while a volunteer held more subtasks than its cores, and the largest
    excess of subtasks over a volunteer's cores; (issue 34) the most placed on one
    volunteer in a step, the share of steps with 5 or more on one volunteer, and the share
    in which a volunteer was given more than its cores + 1 while the server had a free
    core (columns of combined stores that lack them are left out)."""
    names = {"herding_max_placed_mean": "most placed on one node per step (mean)",
             "herding_max_placed_max": "most placed on one node in a step (max)",
             "herding_server_free_share": "share of steps: server free, volunteer over its cores",
             "herding_excess_max": "largest volunteer excess over its cores",
             "herding_volunteer_max": "most placed on one volunteer in a step (max)",
             "herding_volunteer_ge5_share": "share of steps: 5 or more on one volunteer",
             "herding_beyond_bound_share": "share of steps: volunteer given > cores + 1, server free"}
    if any(n not in ds for n in list(names)[:4]):
        return None
    names = {n: label for n, label in names.items() if n in ds}
    cols = {label: _seed_mean(ds[n]) for n, label in names.items()}
    df = xr.Dataset(cols).compute().to_dataframe()[list(cols)]
    return None if df.isna().all().all() else df  # no router placed: nothing to show


def mape_table(ds: xr.Dataset) -> pd.DataFrame | None:
    """Per load level (users) and router with tier decisions: the mean absolute relative
    error (MAPE) of the hybrid, model-only and queue-only delay estimates over every
    completed decision of the run, all tiers, and of the hybrid per tier (means over
    seeds; seed 002's claim is that the hybrid has the least at every load), and of the
    delay the router itself decides by where it logs one (`router`)."""
    names = ([f"estimator_mape_{e}" for e in ("hybrid", "model_only", "queue_only")]
             + [f"estimator_mape_hybrid_{t}" for t in ("local", "edge", "cloud")])
    if any(n not in ds for n in names):
        return None
    if "estimator_mape_router" in ds:  # the delay the router decides by (issue 34)
        names.append("estimator_mape_router")
    e = xr.Dataset({n.removeprefix("estimator_mape_"): _seed_mean(ds[n]) for n in names}).compute()
    keep = np.isfinite(e["hybrid"]).any([d for d in e["hybrid"].dims if d != "scheduler"])
    if not bool(keep.any()):
        return None
    e = e.sel(scheduler=ds["scheduler"].values[keep.values])
    return e.to_dataframe()[list(e.data_vars)]


def _event_spans(config_text: str):
    import yaml

    cfg = yaml.safe_load(config_text)
    steps = int(cfg.get("steps", 0))
    spans = []
    for ev in cfg.get("events") or []:
        end = steps if ev.get("duration_s") is None else ev["at_s"] + ev["duration_s"]
        spans.append((ev["kind"], ev["at_s"], end))
    return spans


def latency_over_time(results_dir: str | Path, ds: xr.Dataset, window_s: int = 500):
    """The figure, or None when the sweep's runs have no scripted events."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gmm_volunteer.io.sweepdir import read_manifest
    from gmm_volunteer.io.conventions import flat_requests
    from gmm_volunteer.io.results import is_complete, open_result

    results_dir = Path(results_dir)
    names = ds["run_name"]
    for d in names.dims:
        if d not in ("scheduler",):
            names = names.isel({d: 0})
    where = {r["name"]: results_dir / r["path"] for r in read_manifest(results_dir)["runs"]}
    runs = [(str(s), where[str(n)]) for s, n in zip(ds["scheduler"].values, names.values) if str(n) in where]
    runs = [(s, p) for s, p in runs if is_complete(p)]
    if not runs:
        return None
    first = open_result(runs[0][1])
    spans = _event_spans(first.attrs.get("config", ""))
    if not spans:
        return None
    colors = {"join": "tab:green", "depart": "tab:red", "overload": "tab:orange"}
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 1.6 * len(runs) + 0.6), sharex=True, squeeze=False)
    for ax, (sched, path) in zip(axes[:, 0], runs):
        r = flat_requests(open_result(path))
        done = r["request_outcome"] == 0
        end, lat = r["request_end"][done], r["request_latency"][done].astype(float)
        ax.plot(end, lat, ",", color="0.6", alpha=0.4, rasterized=True)
        if end.size:
            bins = np.arange(0, int(end.max()) + window_s, window_s)
            idx = np.digitize(end, bins) - 1
            p99 = [np.quantile(lat[idx == b], 0.99) if np.any(idx == b) else np.nan for b in range(bins.size - 1)]
            med = [np.median(lat[idx == b]) if np.any(idx == b) else np.nan for b in range(bins.size - 1)]
            ax.plot(bins[:-1] + window_s / 2, p99, color="tab:blue", lw=1, label=f"P99 per {window_s} s")
            ax.plot(bins[:-1] + window_s / 2, med, color="k", lw=1, label="median")
        for kind, a, b in spans:
            ax.axvspan(a, b, color=colors.get(kind, "0.8"), alpha=0.15, lw=0)
        ax.set_ylabel(sched, rotation=0, ha="right", fontsize=8)
        ax.set_yscale("log")
    axes[0, 0].legend(loc="upper right", fontsize=7)
    axes[-1, 0].set_xlabel("request end (s); shaded: join (green), departure (red), overload (orange)")
    fig.suptitle("Per-request latency of completed requests over time (s, log scale; first seed)")
    fig.tight_layout()
    return fig


def sections(ds: xr.Dataset, img, table_html) -> list[str]:
    """HTML parts for the report (empty when the sweep has no routing measures)."""
    import html

    if not applies(ds):
        return []
    parts = ["<h2>Routing comparison (means over seeds)</h2>",
             "<p>P99 per request type over completed requests; accuracy served = mean top-1 "
             "accuracy of the model variants serving completed requests' classification slots "
             "(docs/model.md D24); monitoring = the routers' monitoring traffic "
             "(docs/routing.md); estimator error = mean |predicted - realized| / realized of "
             "the queue-aware routers' delay predictions.</p>",
             table_html(comparison_table(ds))]
    est = estimator_table(ds)
    if est is not None and np.isfinite(est.to_numpy(dtype=float)).any():
        parts += ["<h2>Delay estimator error per load level (seed 002)</h2>",
                  "<p>Mean |predicted - realized| / realized of each delay estimate, all three "
                  "scored on the decisions of the router in the row (the first "
                  "<code>decision_log</code> decisions of each run).</p>", table_html(est)]
    mape = mape_table(ds)
    if mape is not None:
        parts += ["<h2>Delay estimator MAPE per load level, whole run, every tier (seed 002)</h2>",
                  "<p>Mean |predicted - realized| / realized over every completed decision of "
                  "the run (not only the logged ones), all tiers and the hybrid per tier of the "
                  "decision; means over seeds.</p>", table_html(mape)]
    herd = herding_table(ds)
    if herd is not None:
        parts += ["<h2>Herding per step (means over seeds)</h2>",
                  "<p>Per step in which the router placed: the most subtasks it placed on one "
                  "node and on one volunteer; whether, after placing, the server had a free core "
                  "while a volunteer held more subtasks than its (whole) cores; the share of steps "
                  "with 5 or more on one volunteer, and with a volunteer given more than its cores "
                  "+ 1 while the server had a free core (docs/routing.md section 7).</p>",
                  table_html(herd)]
    from gmm_volunteer.experiments import seed_metrics

    stats = seed_metrics.statistics_table(ds)
    if stats is not None:
        parts += ["<h2>The seeds' own statistics (completed requests)</h2>",
                  "<p>Seed 000: mean, median and IQR of the response time; seed 001: P99 as the "
                  "mean over seeds, its sd over seeds, the maximum; seed 002: P95 of the large "
                  "request types (mean work above the median type's). docs/routing.md section 7.</p>",
                  table_html(stats)]
    paired = seed_metrics.paired_table(ds)
    if paired is not None:
        parts += ["<h2>ASRB against its baselines, paired (seed 000 Table 1)</h2>",
                  "<p>Response time of ASRB minus the baseline's for the requests both completed on "
                  "the same seed (paired on user and request ordinal); BCa 95% interval stratified by "
                  "seed and scripted phase; one-sided t-test, H1: ASRB faster.</p>", table_html(paired)]
    where = ds.attrs.get("results_dir")
    if where:
        try:
            fig = latency_over_time(where, ds)
        except (OSError, KeyError, ValueError) as exc:  # a run store that cannot be read
            parts.append(f"<p class=\"warn\">Latency over time: {html.escape(str(exc))}</p>")
            fig = None
        if fig is not None:
            cap = "Per-request latency over time under the scripted events"
            parts += [f"<h2>{cap}</h2>", img(fig, cap)]
    return parts
