"""Reproductions of the paper's figures 2-5 (section 3.2) from a combined sweep dataset.

Each figure has one panel (column) per server capacity; the x axis runs over the user
configurations (users x user capacity), one line per scheduler. Values are means over
seeds. Rendering is headless (Agg).

    fig2  completed vs cancelled (= abandoned) requests; dropped shown dotted
    fig3  P99 latency: mean over request types, band = range over request types
    fig4  server CPU and memory consumption: mean over steps, band = +- sd over steps
    fig5  subtask completion rate on the server and on user nodes (user row omits
          the centralized scheduler, which places nothing on users)
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


def _color(name, i):
    return COLORS.get(str(name), f"C{i + 3}")


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


def _panels(ds: xr.Dataset, nrows: int, title: str, ylabels):
    caps = list(ds["server_capacity"].values) if "server_capacity" in ds.dims else [None]
    fig, axes = plt.subplots(nrows, len(caps), figsize=(3.2 * len(caps) + 0.8, 2.8 * nrows + 0.8),
                             squeeze=False, sharey="row")
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
        ax.set_xticklabels(labels, fontsize=7)
        ax.grid(alpha=0.3)
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.supxlabel("user configuration (users, user capacity)", fontsize=9)
    if handles:
        # Outside the panels, on the right: the figure widens instead of the panels shrinking.
        width, height = fig.get_size_inches()
        extra = 2.2
        fig.set_size_inches(width + extra, height)
        fig.legend(handles, names, loc="center right", fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0, width / (width + extra), 1))
    else:
        fig.tight_layout()
    return fig


def fig2_requests(ds: xr.Dataset):
    """Completed vs cancelled (abandoned) requests; dropped dotted."""
    ds = prepare(ds)
    counts = _mean_over_seeds(analysis.request_counts(ds))
    sels, labels = _user_configs(ds)
    fig, axes, caps = _panels(ds, 1, "Completed vs cancelled requests", ["requests"])
    x = np.arange(len(labels))
    for j, cap in enumerate(caps):
        ax = axes[0, j]
        for i, sch in enumerate(_schedulers(ds)):
            c = _color(sch, i)
            name = str(sch).capitalize() if sch is not None else ""
            ax.plot(x, _series(counts.sel(outcome="completed"), cap, sch, sels), "-o", color=c,
                    ms=3, label=f"{name} completed")
            ax.plot(x, _series(counts.sel(outcome="abandoned"), cap, sch, sels), "--s", color=c,
                    ms=3, label=f"{name} cancelled")
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
            ax.plot(x, _series(mean, cap, sch, sels), "-o", ms=3, color=c,
                    label=str(sch).capitalize() if sch is not None else "")
            ax.fill_between(x, _series(lo, cap, sch, sels), _series(hi, cap, sch, sels),
                            color=c, alpha=0.2)
    return _finish(fig, axes, labels)


def fig4_server(ds: xr.Dataset):
    """Server CPU (row 1) and memory (row 2): mean over steps +- sd over steps."""
    ds = prepare(ds)
    sc = analysis.server_consumption(ds)
    mean, sd, alloc = (_mean_over_seeds(sc[v]) for v in ("mean", "sd", "allocation_mean"))
    units = dict(zip(map(str, ds["resource"].values), map(str, ds["resource_unit"].values))) \
        if "resource_unit" in ds.coords else {"cpu": "%", "memory": "MB"}
    sels, labels = _user_configs(ds)
    fig, axes, caps = _panels(ds, 2, "Server resource consumption",
                              [f"CPU ({units['cpu']})", f"memory ({units['memory']})"])
    x = np.arange(len(labels))
    for j, cap in enumerate(caps):
        for row, res in enumerate(("cpu", "memory")):
            ax = axes[row, j]
            for i, sch in enumerate(_schedulers(ds)):
                c = _color(sch, i)
                m = _series(mean.sel(resource=res), cap, sch, sels)
                s = _series(sd.sel(resource=res), cap, sch, sels)
                ax.plot(x, m, "-o", ms=3, color=c, label=str(sch).capitalize() if sch is not None else "")
                # Consumption is never negative: the band stops at 0.
                ax.fill_between(x, np.maximum(m - s, 0.0), m + s, color=c, alpha=0.2)
            a = _series(alloc.sel(resource=res).max("scheduler") if "scheduler" in alloc.dims
                        else alloc.sel(resource=res), cap, None, sels)
            ax.plot(x, a, color="0.4", lw=1, ls="--", label="allocation (mean)")
    return _finish(fig, axes, labels)


def fig5_subtasks(ds: xr.Dataset):
    """Subtask completion rates on the server (row 1) and on user nodes (row 2)."""
    ds = prepare(ds)
    rate = _mean_over_seeds(analysis.subtask_completion_rate(ds))
    sels, labels = _user_configs(ds)
    fig, axes, caps = _panels(ds, 2, "Subtask completion rate", ["server nodes", "user nodes"])
    x = np.arange(len(labels))
    for j, cap in enumerate(caps):
        for row, node in enumerate(("server", "user")):
            ax = axes[row, j]
            for i, sch in enumerate(_schedulers(ds)):
                if node == "user" and str(sch) == "centralized":
                    continue
                ax.plot(x, _series(rate.sel(node_class=node), cap, sch, sels), "-o", ms=3,
                        color=_color(sch, i), label=str(sch).capitalize() if sch is not None else "")
            ax.set_ylim(-0.02, 1.02)
    return _finish(fig, axes, labels)


FIGURES = {
    "fig2_requests": fig2_requests,
    "fig3_latency": fig3_latency,
    "fig4_server": fig4_server,
    "fig5_subtasks": fig5_subtasks,
}


def png_bytes(fig, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
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
