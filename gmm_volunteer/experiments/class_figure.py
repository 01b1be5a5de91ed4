"""The figure of docs/experiments.md section 9 (docs/model.md D36, D37): energy per
completed request and P99 latency per scheduler and server capacity, for populations
side by side (each a sweep over ``server.capacity`` x ``scheduler``, means over seeds).

    python -m gmm_volunteer.experiments.class_figure results/classes-homogeneous \\
        results/classes --label homogeneous --label "three classes" \\
        -o docs/figures/experiments-9-classes.png
"""

from __future__ import annotations

import argparse

import numpy as np
import xarray as xr


def class_figure(datasets: dict[str, xr.Dataset]):
    """Two panels: joules per completed request and P99 of completed requests (all
    types), bars per (server capacity, population), grouped by scheduler."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = next(iter(datasets.values()))
    schedulers = [str(s) for s in first["scheduler"].values]
    caps = [float(c) for c in first["server_capacity"].values]
    bars = [(label, cap) for cap in caps for label in datasets]
    width = 0.8 / len(bars)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    panels = (("energy_per_request", None, "J per completed request"),
              ("latency_quantile_all", 0.99, "P99 latency, all types (s)"))
    x = np.arange(len(schedulers))
    for ax, (name, q, ylabel) in zip(axes, panels):
        for k, (label, cap) in enumerate(bars):
            da = datasets[label][name]
            if q is not None:
                da = da.sel(quantile=q)
            da = da.sel(server_capacity=cap).mean("seed") if "seed" in da.dims else da.sel(server_capacity=cap)
            ax.bar(x + (k - (len(bars) - 1) / 2) * width, [float(da.sel(scheduler=s)) for s in schedulers],
                   width, label=f"{label}, server {cap:g}x")
        ax.set_xticks(x, schedulers)
        ax.set_ylabel(ylabel)
    axes[0].legend(fontsize=8)
    fig.suptitle("10,000 users, 20,000 steps: device classes beside the paper's users (D36, D37)")
    fig.tight_layout()
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gmm_volunteer.experiments.class_figure",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="sweep directories (or combined stores)")
    ap.add_argument("--label", action="append", required=True, help="one per sweep, in order")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    args = ap.parse_args(argv)
    if len(args.label) != len(args.results):
        ap.error(f"{len(args.results)} sweeps need as many --label (got {len(args.label)})")
    from gmm_volunteer.cli.experiments import _open_results

    fig = class_figure({label: _open_results(path) for label, path in zip(args.label, args.results)})
    fig.savefig(args.output, dpi=110, bbox_inches="tight")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
