"""A self-contained HTML report of a sweep: figures 2-5 as embedded PNGs, and tables.

The page has no external references (images are base64 data URIs, styles inline), so
it opens from disk in any browser and can be mailed as one file.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import xarray as xr

from gmm_volunteer.experiments import analysis, figures, findings, routing_report
from gmm_volunteer.experiments.intervals import BOOTSTRAP_TWO_SEEDS, MIN_SEEDS, FewSeedsWarning, warn_few_seeds
from gmm_volunteer.model.constants import OUTCOMES

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
.warn { background: #fff3cd; border: 1px solid #e0c060; padding: 0.6em; }
img { max-width: 100%; } .meta { color: #555; font-size: 0.9em; }
"""


def grid_frame(data: xr.Dataset | xr.DataArray, ds: xr.Dataset) -> pd.DataFrame:
    """`data` (means over seeds, or paired differences) as a table with one row per grid
    point, its index ordered as the sweep's grid (the dims of `ds`), whatever order the
    reductions left the dims in: every table of the report reads in the same order."""
    order = [d for d in ds.dims if d in data.dims]
    return data.to_dataframe(dim_order=order)


def _seed_means(cols: dict, ds: xr.Dataset) -> pd.DataFrame:
    mean = xr.Dataset({k: (v.mean("seed", skipna=True) if "seed" in v.dims else v)
                       for k, v in cols.items()}).compute()
    df = grid_frame(mean, ds)
    return df[[c for c in cols if c in df.columns]]


def overview_table(ds: xr.Dataset) -> pd.DataFrame:
    """One row per grid point: means over seeds of the headline quantities."""
    counts = analysis.request_counts(ds)
    p99 = analysis.latency_quantile(ds, 0.99, all_types=True)
    p99_types = analysis.p99_across_types(ds)
    sc = analysis.server_consumption(ds)["mean"]
    rate = analysis.subtask_completion_rate(ds)
    cols = {
        "completed": counts.sel(outcome="completed", drop=True),
        "abandoned": counts.sel(outcome="abandoned", drop=True),
        "dropped": counts.sel(outcome="dropped", drop=True),
        "P99 all types (s)": p99,
        "P99 min type (s)": p99_types["min"],
        "P99 max type (s)": p99_types["max"],
        "server CPU (%)": sc.sel(resource="cpu", drop=True),
        "server memory (MB)": sc.sel(resource="memory", drop=True),
        "completion rate server": rate.sel(node_class="server", drop=True),
        "completion rate user": rate.sel(node_class="user", drop=True),
    }
    if "energy_per_request" in ds:  # stores made before energy was recorded lack it (D37)
        cols["energy per completed request (J)"] = ds["energy_per_request"]
    df = _seed_means(cols, ds)
    if "seed" in ds.dims:
        df.insert(0, "seeds", int(ds.sizes["seed"]))
    return df


def latency_by_type_table(ds: xr.Dataset) -> pd.DataFrame:
    """One row per grid point: mean and P99 latency of completed requests per request type
    (means over seeds), with the server's CPU use."""
    mean = ds["latency_mean"]
    p99 = analysis.latency_quantile(ds, 0.99)
    cols = {}
    for t in mean["request_type"].values:
        cols[f"{t} mean (s)"] = mean.sel(request_type=t, drop=True)
        cols[f"{t} P99 (s)"] = p99.sel(request_type=t, drop=True)
    cols["P99 all types (s)"] = analysis.latency_quantile(ds, 0.99, all_types=True)
    cols["completed"] = analysis.request_counts(ds).sel(outcome="completed", drop=True)
    cols["server CPU (%)"] = analysis.server_consumption(ds)["mean"].sel(resource="cpu", drop=True)
    return _seed_means(cols, ds)


def paired_table(ds: xr.Dataset, what: str = "p99", reference: str = "centralized",
                 confidence: float = 0.95) -> pd.DataFrame | None:
    """Each scheduler minus `reference` on the same seeds, with bootstrap intervals.

    Over fewer than `MIN_SEEDS` seeds no interval is given (no columns low and high, a
    `FewSeedsWarning`): over two seeds the bootstrap interval is the range of the two
    differences, of width 0 when they are equal (docs/experiments.md, section 4)."""
    if "scheduler" not in ds.dims or "seed" not in ds.dims or ds.sizes["seed"] < 2:
        return None
    few = warn_few_seeds(int(ds.sizes["seed"]), f"paired differences of {what}",
                         f"no interval is given ({BOOTSTRAP_TWO_SEEDS})")
    schedulers = [str(s) for s in ds["scheduler"].values]
    if reference not in schedulers:
        reference = schedulers[0]
    frames = []
    for other in schedulers:
        if other == reference:
            continue
        with warnings.catch_warnings():  # warned above, once, with what the table does about it
            warnings.simplefilter("ignore", FewSeedsWarning)
            res = analysis.paired_difference(ds, what, "scheduler", other, reference,
                                             confidence=confidence, n_resamples=2000)
        sel = res[["mean", "n_seeds"] if few else ["mean", "low", "high", "n_seeds"]]
        # a grid over the scheduler alone leaves 0-dimensional results: one row
        df = grid_frame(sel, ds) if sel["mean"].ndim else pd.DataFrame({k: [sel[k].item()] for k in sel.data_vars})
        unit = res["mean"].attrs.get("units")
        if unit and unit != "1":  # every column with a unit says it
            df = df.rename(columns={c: f"{c} ({unit})" for c in ("mean", "low", "high") if c in df})
        df = df.rename(columns={"n_seeds": "seeds"})
        df.insert(0, "comparison", f"{other} - {reference}")
        frames.append(df)
    if not frames:
        return None
    return pd.concat(frames)


def _img(fig, alt: str = "figure") -> str:
    data = base64.b64encode(figures.png_bytes(fig)).decode("ascii")
    return f'<img alt="{html.escape(alt, quote=True)}" src="data:image/png;base64,{data}">'


# Columns of counts: means over seeds of whole numbers, shown without trailing zeros
# (202, 193.5), never as 202.00. Rates and shares (in [0, 1]) get three decimals, every
# other column two: a column's format follows what it holds, never its values (a P99 of
# whole seconds beside one of 2.50 s, or a completion rate of 0.996 shown as 1.00, would
# read as different kinds of number).
COUNT_COLUMNS = ("seeds", *OUTCOMES, "requests", "monitoring calls", "placements lost",
                 "most placed on one node in a step (max)", "largest volunteer excess over its cores",
                 "most placed on one volunteer in a step (max)")
RATE_DECIMALS = 3


def _count_text(v: float) -> str:
    return "-" if not np.isfinite(v) else f"{v:,.2f}".rstrip("0").rstrip(".")


def _is_rate(col) -> bool:
    name = str(col)
    return "rate" in name.split() or name.startswith("share") or "(share" in name


def _table_html(df: pd.DataFrame) -> str:
    """The table as HTML: counts (`COUNT_COLUMNS`) without needless decimals, rates and
    shares with three, others with two; a missing value as '-'."""
    df = df.copy()
    for col in df.columns:
        values = df[col]
        if values.dtype.kind not in "fiu":
            continue
        if str(col) in COUNT_COLUMNS:
            df[col] = values.astype(np.float64).map(_count_text)
        elif values.dtype.kind == "f" and _is_rate(col):
            df[col] = values.map(lambda v: "-" if not np.isfinite(v) else f"{v:.{RATE_DECIMALS}f}")
    return df.to_html(float_format=lambda v: f"{v:,.2f}", na_rep="-", border=0, escape=True)


def render_html(ds: xr.Dataset, title: str = "gmm-volunteer sweep report",
                progress: Callable[[str], None] | None = None) -> str:
    """The whole report page as one HTML string. `progress(part)` is called as each part
    that may take a while starts (a figure reading every run store takes minutes on a
    large sweep), so that a command can say what it is doing."""
    say = progress or (lambda part: None)
    say("preparing the statistics")
    ds = figures.prepare(ds)
    a = ds.attrs
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    meta = [
        f"grid file: {a.get('sweep_grid_file', '?')}",
        f"base config: {a.get('sweep_base_config', '?')}",
        f"runs complete: {a.get('runs_complete', '?')} of {a.get('runs_total', '?')}",
        f"steps per run: {a.get('steps', '?')}",
        f"model bundle: {a.get('model_bundle', '?')}",
        f"gmmv version: {a.get('gmmv_version', '?')}",
        f"generated: {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
    ]
    if a.get("sweep_description"):
        meta.insert(0, str(a["sweep_description"]))
    parts.append('<p class="meta">' + "<br>".join(html.escape(str(m)) for m in meta) + "</p>")
    if a.get("model_provisional"):
        parts.append('<p class="warn">Provisional model bundle (not fitted from traces): the '
                     "numbers illustrate the model, not a measured system.</p>")
    if "run_complete" in ds and not bool(np.asarray(ds["run_complete"].values).all()):
        parts.append('<p class="warn">Some runs are missing; their cells are averaged over the '
                     "seeds that are present (or shown as '-').</p>")
    parts.append("<p>Latency quantiles are over completed requests. Values are means over seeds; "
                 "abandoned requests are those whose user's patience ran out (the paper's "
                 "'cancelled'), dropped requests (user went offline) are dotted.</p>")
    captions = {
        "fig2_requests": "Figure 2: completed vs abandoned requests",
        "fig3_latency": "Figure 3: P99 latency, mean over request types, band = range over types",
        "fig4_server": "Figure 4: server CPU and memory consumption, mean +- sd over steps "
                       "(each panel on the consumption's scale, log where schedulers differ "
                       "more than 20 times; a band reaching the bottom of a log axis: sd above "
                       "the mean; dashed: mean allocation)",
        "fig5_subtasks": "Figure 5: subtask completion rates on server and user nodes "
                         "(axis zoomed to the rates)",
    }
    for name, make in figures.FIGURES.items():
        say(captions[name].partition(":")[0].lower())
        parts.append(f"<h2>{html.escape(captions[name])}</h2>")
        parts.append(_img(make(ds), captions[name]))
    say("tables")
    parts.append("<h2>Overview (means over seeds)</h2>")
    parts.append(_table_html(overview_table(ds)))
    paired = paired_table(ds)
    if paired is not None:
        n_seeds = int(ds.sizes["seed"])
        if n_seeds < MIN_SEEDS:
            parts.append("<h2>Paired P99 differences (same seeds)</h2>")
            parts.append(f'<p class="warn">No intervals: {n_seeds} seeds are too few '
                         f"({html.escape(BOOTSTRAP_TWO_SEEDS)}, of width 0 where the two differences "
                         f"are equal). Run {MIN_SEEDS} or more seeds for 95% intervals.</p>")
            parts.append("<p>Negative = lower P99 than the reference scheduler; the mean "
                         "per-seed difference.</p>")
        else:
            parts.append("<h2>Paired P99 differences (same seeds), 95% bootstrap intervals</h2>")
            parts.append("<p>Negative = lower P99 than the reference scheduler. "
                         "Percentile bootstrap over seeds of the mean per-seed difference.</p>")
        parts.append(_table_html(paired))
    # the routing comparison (issue 12; gmm_volunteer.routing_report)
    parts += routing_report.sections(ds, _img, _table_html)
    if findings.has_grid_dims(ds):
        say("the paper's findings and their regime map")
        parts.append("<h2>The paper's section 3.2 findings on this grid</h2>")
        parts.append("<p>Each rule was fixed before the numbers were seen; 'does not hold' is a "
                     "result, discussed in docs/validation.md, not a defect to tune away.</p>")
        parts.append(findings.paper_findings(ds).to_html(border=0, escape=True))
        parts += _regime_section(ds)
    parts.append("</body></html>")
    return "\n".join(parts)


def _regime_section(ds: xr.Dataset) -> list[str]:
    """The regime map of the findings (experiments/regime.py), when the bundle the runs
    used can be read (it gives the work per request)."""
    from gmm_volunteer.experiments import regime
    from gmm_volunteer.model.bundle import BundleError

    caption = "Where each finding holds: cell by cell, against offered work / server capacity"
    try:
        verdicts = regime.cell_verdicts(ds)
    except (BundleError, KeyError, OSError, ValueError) as err:
        return [f"<h2>{html.escape(caption)}</h2>",
                f"<p>Not drawn: the runs' model bundle cannot be read ({html.escape(str(err))}).</p>"]
    return [f"<h2>{html.escape(caption)}</h2>",
            "<p>The local form of each rule above, on one cell (same thresholds); filled = holds. "
            "Offered work = requests per second x CPU-seconds per request at batch size 1, over the "
            "server's mean CPU allocation (docs/validation.md section 4).</p>",
            _img(regime.regime_figure(verdicts), "Regime map: " + caption)]


def write_report(ds: xr.Dataset, path, title: str = "gmm-volunteer sweep report",
                 progress: Callable[[str], None] | None = None) -> Path:
    path = Path(path)
    text = render_html(ds, title, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
