"""The simulator's prediction error against the testbed (docs/validation.md section 6).

For each case (a testbed config), the testbed's stores over a few seeds are compared with
the simulator on the same config (the `testbed:` section is the simulator's to ignore)
over many seeds: completed, abandoned and dropped requests per run, latency of completed
requests (mean, P50, P95, P99; pooled over the runs, all types and per request type),
and the server's CPU. Error = (simulator - testbed) / testbed.

    python -m gmm_volunteer.testbed.compare RESULTS_DIR CONFIG... [--sim-seeds 50]
        [--figure PATH] [-o RESULT_FILE]

reads RESULTS_DIR/<config stem>-seed<s>.zarr (written by `gmmv testbed`), prints the
tables, and writes the figure of the two latency distributions per case.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from gmm_volunteer.model.constants import CPU, OUTCOMES

QUANTILES = (0.5, 0.95, 0.99)


def _stats(datasets) -> dict:
    """Per-run counts and pooled latencies of a list of result datasets."""
    from gmm_volunteer.io import conventions

    per_run = {o: [] for o in OUTCOMES}
    cpu, lat, lat_type = [], [], []
    for ds in datasets:
        out = np.asarray(ds["request_outcome"].values)
        for i, o in enumerate(OUTCOMES):
            per_run[o].append(int((out == i).sum()))
        done = out == 0
        lat.append(np.asarray(ds["request_latency"].values)[done])
        lat_type.append(np.asarray(ds[conventions.CODE].values)[done])
        cpu.append(float(np.asarray(ds["server_consumption"].values)[:, CPU].mean()))
    names = [str(v) for v in np.asarray(datasets[0][conventions.TYPE].values)]
    return {"runs": len(datasets), "counts": {o: np.array(v) for o, v in per_run.items()},
            "cpu": np.array(cpu), "latency": np.concatenate(lat), "type": np.concatenate(lat_type),
            "names": names}


def _latency_stats(lat: np.ndarray) -> list[float]:
    if lat.size == 0:
        return [float("nan")] * (1 + len(QUANTILES))
    return [float(lat.mean())] + [float(q) for q in np.quantile(lat, QUANTILES)]


def _simulate(config: Path, seeds) -> list:
    from gmm_volunteer.io.results import build_dataset
    from gmm_volunteer.model.engine import simulate
    from gmm_volunteer.testbed.config import load_testbed

    out = []
    for s in seeds:
        cfg, _ = load_testbed(config, [f"seed={s}"])
        out.append(build_dataset(simulate(cfg, progress=False)))
    return out


def _cell(tb: float, lo: float, hi: float, sim: float, digits: int = 1) -> str:
    err = f"{(sim - tb) / tb * 100:+.0f} %" if tb else "no base"
    rng = f" [{lo:.{digits}f}, {hi:.{digits}f}]" if np.isfinite(lo) else ""
    return f"{tb:.{digits}f}{rng} / {sim:.{digits}f} ({err})"


def compare(results: Path, configs: list[Path], sim_seeds: int = 50, figure: Path | None = None):
    from gmm_volunteer.io.results import open_result

    rows, type_rows, curves = [], [], []
    for config in configs:
        stores = sorted(results.glob(f"{config.stem}-seed*.zarr"))
        if not stores:
            print(f"{config.stem}: no testbed stores in {results}", file=sys.stderr)
            continue
        tb_ds = [open_result(p) for p in stores]
        tb, sim = _stats(tb_ds), _stats(_simulate(config, range(1000, 1000 + sim_seeds)))
        row = [config.stem, f"{tb['runs']} / {sim['runs']}"]
        for o in OUTCOMES:
            c = tb["counts"][o]
            row.append(_cell(c.mean(), c.min(), c.max(), sim["counts"][o].mean()))
        # latency: pooled over runs; the testbed's range is over its runs
        per_seed = np.array([_latency_stats(np.asarray(d["request_latency"].values)[np.asarray(d["request_outcome"].values) == 0])
                             for d in tb_ds])
        for i, (t, s) in enumerate(zip(_latency_stats(tb["latency"]), _latency_stats(sim["latency"]))):
            row.append(_cell(t, np.nanmin(per_seed[:, i]), np.nanmax(per_seed[:, i]), s))
        row.append(_cell(tb["cpu"].mean(), tb["cpu"].min(), tb["cpu"].max(), sim["cpu"].mean()))
        rows.append(row)
        for k, name in enumerate(tb["names"]):
            t = _latency_stats(tb["latency"][tb["type"] == k])
            s = _latency_stats(sim["latency"][sim["type"] == k])
            n_t, n_s = int((tb["type"] == k).sum()), int((sim["type"] == k).sum())
            type_rows.append([config.stem, name, f"{n_t} / {n_s / sim['runs'] * tb['runs']:.0f}",
                              _cell(t[0], np.nan, np.nan, s[0]), _cell(t[3], np.nan, np.nan, s[3])])
        curves.append((config.stem, tb["latency"], sim["latency"]))
    head = ["case", "runs (testbed / sim)"] + [f"{o} per run" for o in OUTCOMES] + \
        ["mean latency (s)", "P50 (s)", "P95 (s)", "P99 (s)", "server CPU (%)"]
    table = _markdown(head, rows)
    type_table = _markdown(["case", "request type", "completed (testbed / sim, same runs)",
                            "mean latency (s)", "P99 (s)"], type_rows)
    if figure is not None and curves:
        _figure(curves, figure)
    return table, type_table


def _markdown(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _figure(curves, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(curves)
    cols = 3
    fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(4 * cols, 3.2 * ((n + cols - 1) // cols)),
                             squeeze=False)
    for ax, (name, tb, sim) in zip(axes.flat, curves):
        for lat, label, style in ((tb, "testbed", "-"), (sim, "simulator", "--")):
            if lat.size:
                x = np.sort(lat)
                ax.step(x, np.arange(1, x.size + 1) / x.size, style, where="post", label=f"{label} ({x.size})")
        ax.set_title(name)
        ax.set_xlabel("latency of completed requests (s)")
        ax.set_ylabel("fraction")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gmm_volunteer.testbed.compare", description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path)
    p.add_argument("configs", type=Path, nargs="+")
    p.add_argument("--sim-seeds", type=int, default=50)
    p.add_argument("--figure", type=Path)
    args = p.parse_args(argv)
    table, type_table = compare(args.results, args.configs, args.sim_seeds, args.figure)
    print(table)
    print()
    print(type_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
