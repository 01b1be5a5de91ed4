"""Reproductions of the paper's figures 2-5 (section 3.2) from a combined sweep dataset.

Each figure has one panel (column) per server capacity; the x axis runs over the user
configurations (users x user capacity), one line per scheduler. Values are means over
seeds. Rendering is headless (Agg), at sizes a reader can put in a paper: 10-11 pt text,
the legend beside the panels, each axis scaled to what it shows.

    fig2  completed vs abandoned requests (the paper's "cancelled"); dropped dotted
    fig3  P99 latency: mean over request types, band = range over request types
    fig4  server CPU and memory consumption: mean over steps, band = +- sd over steps,
          on the consumption's own scale (a log axis when the schedulers' means lie more
          than 20 times apart); the mean allocation is a reference line, or a note in the
          panel when it lies far above a linear axis
    fig5  subtask completion rate on the server and on user nodes (user row omits
          the centralized scheduler, which places nothing on users), on an axis zoomed
          to the rates
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from gmm_volunteer.experiments import analysis  # noqa: E402

COLORS = {"centralized": "tab:red", "uniform": "tab:blue", "affinity": "tab:green"}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # told apart in grey print too
STYLE = {"font.size": 11, "axes.titlesize": 11, "axes.labelsize": 11, "xtick.labelsize": 10,
         "ytick.labelsize": 10, "legend.fontsize": 10, "figure.titlesize": 12}


def _color(name, i):
    return COLORS.get(str(name), f"C{i + 3}")


def _marker(i):
    return MARKERS[i % len(MARKERS)]


GRID_DIMS = ("users", "user_capacity", "server_capacity", "scheduler", "seed")
INNER_DIMS = ("request_type", "outcome", "quantile", "resource", "node_class", "event", "monitor_op")


def prepare(ds: xr.Dataset) -> xr.Dataset:
    """Drop length-1 extra grid dims; refuse longer ones (the figures have no axis for them)."""
    for d in list(ds.dims):
        if d in GRID_DIMS or d in INNER_DIMS:
            continue
        if ds.sizes[d] == 1:
            ds = ds.isel({d: 0}, drop=True)
        else:
            raise ValueError(
                f"the figures have no axis for dimension {d!r} ({ds.sizes[d]} values); "
                f"select one first, e.g. ds.sel({d}=...)"
            )
    return ds


def _mean_over_seeds(da: xr.DataArray) -> xr.DataArray:
    return da.mean("seed", skipna=True) if "seed" in da.dims else da


def _user_configs(ds: xr.Dataset):
    """(selector dicts, tick labels) over users x user_capacity, in grid order."""
    users = list(ds["users"].values) if "users" in ds.dims else [None]
    caps = list(ds["user_capacity"].values) if "user_capacity" in ds.dims else [None]
    sels, labels = [], []
    for u in users:
        for c in caps:
            sel = {}
            label = []
            if u is not None:
                sel["users"] = u
                label.append(f"{int(u) / 1000:g}k" if int(u) >= 1000 else str(int(u)))
            if c is not None:
                sel["user_capacity"] = c
                label.append(f"{float(c):g}x")
            sels.append(sel)
            labels.append("\n".join(label))
    return sels, labels


def _panels(ds: xr.Dataset, nrows: int, title: str, ylabels, sharey="row"):
    caps = list(ds["server_capacity"].values) if "server_capacity" in ds.dims else [None]
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(nrows, len(caps), figsize=(3.4 * len(caps) + 1.0, 2.9 * nrows + 0.9),
                                 squeeze=False, sharey=sharey)
    for j, cap in enumerate(caps):
        axes[0, j].set_title(f"Server {float(cap):g}x" if cap is not None else "")
        for i in range(nrows):
            axes[i, 0].set_ylabel(ylabels[i])
    fig.suptitle(title)
    return fig, axes, caps


def _series(da: xr.DataArray, cap, scheduler, sels) -> np.ndarray:
    out = []
    for sel in sels:
        s = dict(sel)
        if cap is not None:
            s["server_capacity"] = cap
        if scheduler is not None:
            s["scheduler"] = scheduler
        out.append(float(da.sel(s)))
    return np.array(out)


def _schedulers(ds):
    return list(ds["scheduler"].values) if "scheduler" in ds.dims else [None]


def _finish(fig, axes, labels):
    x = np.arange(len(labels))
    for ax in axes.flat:
        ax.set_xticks(x)
        ax.set_xticklabels(labels, fontsize=STYLE["xtick.labelsize"])
        ax.tick_params(axis="y", labelsize=STYLE["ytick.labelsize"])
        ax.grid(alpha=0.3)
    handles, names = {}, []
    for ax in axes.flat:  # every entry once, in the order the panels first show them
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in handles:
                handles[n] = h
                names.append(n)
    fig.supxlabel("user configuration (users, user capacity)", fontsize=STYLE["axes.labelsize"])
    fig.tight_layout()
    if handles:
        # Beside the last panel of the first row; png_bytes saves with a tight bounding
        # box, so the figure grows to hold it and it never strays from the panels.
        axes[0, -1].legend([handles[n] for n in names], names, loc="upper left",
                           bbox_to_anchor=(1.03, 1.0), borderaxespad=0.0, frameon=False,
                           fontsize=STYLE["legend.fontsize"])
    return fig


def fig2_requests(ds: xr.Dataset):
    """Completed vs abandoned requests (the paper's "cancelled"); dropped dotted."""
    ds = prepare(ds)
    counts = _mean_over_seeds(analysis.request_counts(ds))
    sels, labels = _user_configs(ds)
    fig, axes, caps = _panels(ds, 1, "Completed vs abandoned requests", ["requests"])
    x = np.arange(len(labels))
    for j, cap in enumerate(caps):
        ax = axes[0, j]
        for i, sch in enumerate(_schedulers(ds)):
            c = _color(sch, i)
            name = str(sch).capitalize() if sch is not None else ""
            ax.plot(x, _series(counts.sel(outcome="completed"), cap, sch, sels), "-", marker=_marker(i),
                    color=c, ms=4, label=f"{name} completed")
            ax.plot(x, _series(counts.sel(outcome="abandoned"), cap, sch, sels), "--", marker=_marker(i),
                    color=c, ms=4, mfc="none", label=f"{name} abandoned")
            ax.plot(x, _series(counts.sel(outcome="dropped"), cap, sch, sels), ":", color=c,
                    alpha=0.6, label=f"{name} dropped")
    return _finish(fig, axes, labels)


def fig3_latency(ds: xr.Dataset, q: float = 0.99):
    """P99 latency: mean over request types with the range over request types."""
    ds = prepare(ds)
    p = analysis.p99_across_types(ds, q)
    mean, lo, hi = (_mean_over_seeds(p[v]) for v in ("mean", "min", "max"))
    sels, labels = _user_configs(ds)
    fig, axes, caps = _panels(ds, 1, f"P{100 * q:g} request latency (completed requests)",
                              [f"P{100 * q:g} latency (s)"])
    x = np.arange(len(labels))
    for j, cap in enumerate(caps):
        ax = axes[0, j]
        for i, sch in enumerate(_schedulers(ds)):
            c = _color(sch, i)
            ax.plot(x, _series(mean, cap, sch, sels), "-", marker=_marker(i), ms=4, color=c,
                    label=str(sch).capitalize() if sch is not None else "")
            ax.fill_between(x, _series(lo, cap, sch, sels), _series(hi, cap, sch, sels),
                            color=c, alpha=0.15)
    return _finish(fig, axes, labels)


def fig4_server(ds: xr.Dataset):
    """Server CPU (row 1) and memory (row 2): mean over steps +- sd over steps, on the
    consumption's scale (the server's allocation is often ten times its use, and on the
    allocation's scale every scheduler would lie flat on zero). The mean allocation is a
    dashed reference line where it fits that scale, else a note in the panel."""
    ds = prepare(ds)
    sc = analysis.server_consumption(ds)
    mean, sd, alloc = (_mean_over_seeds(sc[v]) for v in ("mean", "sd", "allocation_mean"))
    units = dict(zip(map(str, ds["resource"].values), map(str, ds["resource_unit"].values))) \
        if "resource_unit" in ds.coords else {"cpu": "%", "memory": "MB"}
    sels, labels = _user_configs(ds)
    # each panel on its own scale: capacities differ by up to ten times
    fig, axes, caps = _panels(ds, 2, "Server resource consumption",
                              [f"CPU ({units['cpu']})", f"memory ({units['memory']})"], sharey=False)
    x = np.arange(len(labels))
    for j, cap in enumerate(caps):
        for row, res in enumerate(("cpu", "memory")):
            ax = axes[row, j]
            top, means = 0.0, []
            for i, sch in enumerate(_schedulers(ds)):
                c = _color(sch, i)
                m = _series(mean.sel(resource=res), cap, sch, sels)
                s = _series(sd.sel(resource=res), cap, sch, sels)
                ax.plot(x, m, "-", marker=_marker(i), ms=4, color=c,
                        label=str(sch).capitalize() if sch is not None else "")
                # Consumption is never negative: the band stops at 0.
                ax.fill_between(x, np.maximum(m - s, 0.0), m + s, color=c, alpha=0.15)
                if np.isfinite(m + s).any():
                    top = max(top, float(np.nanmax(m + s)))
                means.append(m)
            a = _series(alloc.sel(resource=res).max("scheduler") if "scheduler" in alloc.dims
                        else alloc.sel(resource=res), cap, None, sels)
            _allocation_reference(ax, x, a, top, np.concatenate(means) if means else np.array([]),
                                  units.get(res, ""))
    return _finish(fig, axes, labels)


LOG_SPAN = 20.0  # schedulers' mean consumption this many times apart: a log axis


def consumption_scale(means: np.ndarray) -> str:
    """"log" when the positive mean consumptions of a panel span more than `LOG_SPAN`
    (a scheduler that keeps the server busy next to ones that offload to users: on a
    linear axis the latter lie on zero), else "linear"."""
    v = means[np.isfinite(means) & (means > 0)]
    return "log" if v.size and v.max() / v.min() > LOG_SPAN else "linear"


def _allocation_reference(ax, x, alloc: np.ndarray, top: float, means: np.ndarray, unit: str) -> None:
    """The y axis scaled to the consumption: on a log axis (`consumption_scale`) the
    allocation fits as a dashed line above it; on a linear one from 0 to a little above
    the consumption (`top`, mean + sd), with the allocation as a dashed line when it lies
    within twice that, else noted in the panel."""
    finite = alloc[np.isfinite(alloc)]
    if consumption_scale(means) == "log":
        positive = means[np.isfinite(means) & (means > 0)]
        ax.set_yscale("log")
        ax.plot(x, alloc, color="0.35", lw=1.2, ls="--", label="allocation (mean)")
        high = max(top, float(finite.max()) if finite.size else top)
        ax.set_ylim(float(positive.min()) / 2.0, 1.6 * high)
        return
    limit = 1.1 * top if top > 0 else None
    finite = alloc[np.isfinite(alloc)]
    if finite.size and (limit is None or finite.max() <= 2 * limit):
        ax.plot(x, alloc, color="0.35", lw=1.2, ls="--", label="allocation (mean)")
        limit = max(limit or 0.0, 1.05 * float(finite.max()))
    elif finite.size:
        lo, hi = float(finite.min()), float(finite.max())
        text = f"{lo:,.0f}" if np.isclose(lo, hi) else f"{lo:,.0f}-{hi:,.0f}"
        ax.text(0.98, 0.96, f"allocation {text} {unit}\n(above the axis)", transform=ax.transAxes,
                ha="right", va="top", fontsize=STYLE["legend.fontsize"] - 1, color="0.3")
    if limit:
        ax.set_ylim(0.0, limit)


def fig5_subtasks(ds: xr.Dataset):
    """Subtask completion rates on the server (row 1) and on user nodes (row 2)."""
    ds = prepare(ds)
    rate = _mean_over_seeds(analysis.subtask_completion_rate(ds))
    sels, labels = _user_configs(ds)
    fig, axes, caps = _panels(ds, 2, "Subtask completion rate", ["server nodes", "user nodes"])
    x = np.arange(len(labels))
    shown = {"server": [], "user": []}
    for j, cap in enumerate(caps):
        for row, node in enumerate(("server", "user")):
            ax = axes[row, j]
            for i, sch in enumerate(_schedulers(ds)):
                if node == "user" and str(sch) == "centralized":
                    continue
                y = _series(rate.sel(node_class=node), cap, sch, sels)
                shown[node].append(y)
                ax.plot(x, y, "-", marker=_marker(i), ms=4, clip_on=False,  # a rate of 1 on the edge
                        color=_color(sch, i), label=str(sch).capitalize() if sch is not None else "")
    for row, node in enumerate(("server", "user")):  # rows share their y axis
        axes[row, 0].set_ylim(*rate_limits(np.concatenate(shown[node]) if shown[node] else np.array([])))
    return _finish(fig, axes, labels)


def rate_limits(values: np.ndarray) -> tuple[float, float]:
    """Y limits for completion rates: zoomed to the values (rates of 0.97-1.00 on a 0-1
    axis all lie on one line), at least 0.01 wide, padded by a tenth of their range, and
    never beyond [0, 1], where no rate can lie (a window or padding that would pass 1
    ends at 1: an axis running to 1.004 reads as rates above 1); that whole range when
    nothing is finite. The markers are drawn unclipped, so a rate of 1 on the top edge
    shows whole."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return 0.0, 1.0
    lo, hi = float(v.min()), float(v.max())
    if hi - lo < 0.01:  # equal rates: a 0.01 window around them, inside [0, 1]
        mid = min(max((lo + hi) / 2.0, 0.005), 0.995)
        lo, hi = mid - 0.005, mid + 0.005
    pad = 0.1 * (hi - lo)
    return max(lo - pad, 0.0), min(hi + pad, 1.0)


FIGURES = {
    "fig2_requests": fig2_requests,
    "fig3_latency": fig3_latency,
    "fig4_server": fig4_server,
    "fig5_subtasks": fig5_subtasks,
}


def png_bytes(fig, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    # tight: the figure holds what is drawn beside its panels (the legend)
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", pad_inches=0.1)
    plt.close(fig)
    return buf.getvalue()


def save_all(ds: xr.Dataset, directory, dpi: int = 110, prefix: str = "") -> list:
    """Write every figure as PNG into `directory` (`prefix` before each name); return the
    paths."""
    from pathlib import Path

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in FIGURES.items():
        p = directory / f"{prefix}{name}.png"
        p.write_bytes(png_bytes(make(ds), dpi))
        paths.append(p)
    return paths
