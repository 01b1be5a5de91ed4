"""The result files and the figure of `testbed.compare` (docs/validation.md section 6):
its tables as markdown, each written as a committed result file (docs/results/README.md)
whose header says what the testbed stores recorded and which bundles the simulator read,
and the latency distributions of every case."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from gmm_volunteer.testbed import speed


def setting(text: str) -> list[str]:
    """The overrides of a setting "KEY=VALUE;KEY=VALUE" ('' for none)."""
    return [o.strip() for o in text.split(";") if o.strip()]


def markdown(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def figure(curves, path: Path) -> None:
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


NOTES = {
    "": "Cells: the testbed's mean over its runs ± the half-width of its 95 % t interval / the simulator's "
        "mean (error = (sim - testbed) / testbed; within target, outside, or cannot decide where the "
        "interval is wider than the target, with the runs its spread would need); per-run values "
        "(completions, the mean and the P99 of each run's completed requests). Runs in which a process was "
        "killed for memory or lost are dropped and named. Where every run of a case drew the simulator's "
        "users of its seed (testbed.draws: keyed), the case is judged on pairs: each testbed run beside the "
        "simulator's run of its seed, the simulator's mean over those runs, and the error's 95 % t interval "
        "from the pairs' differences ('± N % paired'), which decides in place of the testbed's own.",
    "-calibration": "The held-out protocol: each candidate simulator setting on the calibration cases only; "
                    "the one with the least mean absolute error is kept for every case.",
}
VARIANTS_NOTE = ("Each setting on top of the simulator's (--sim-set and the kept candidate), against every "
                 "case's testbed runs: the testbed's mean over its runs / the simulator's (signed error). A "
                 "setting measured on a case's own runs diagnoses a mechanism; it does not predict.")
DEFAULT_NOTE = ("Cells: testbed [min, max over its runs] / simulator [5 %, 95 % of its runs] (error = (sim - "
                "testbed) / testbed); latencies of completed requests pooled over the runs.")


def write_results(args, tables: dict, prefix: Path, notes: dict = NOTES) -> None:
    """The tables as result files, their header from what the testbed stores recorded."""
    import shlex

    from gmm_volunteer.io import resultfile
    from gmm_volunteer.io.results import open_result

    first = open_result(sorted(args.results.glob(f"{args.configs[0].stem}-seed*.zarr"))[-1])
    attrs = first.attrs
    command = args.made_by or "python -m gmm_volunteer.testbed.compare " + " ".join(
        shlex.quote(a) for a in sys.argv[1:])
    name = resultfile.bundle_name(attrs["model_bundle"])
    bundles = {name: resultfile.recorded_digest(name, attrs["model_sha256"], Path("."))}
    tried = [o for cand in [*args.candidate, *args.variant] for o in setting(cand)]
    reference = [f"model={args.speed_reference}"] if args.speed_reference is not None else []
    for o in [*args.sim_set, *tried, *reference]:  # a bundle the simulator ran instead, or read the speed against
        key, _, value = o.partition("=")
        if key == "model":
            from gmm_volunteer.io.bundlefiles import load_bundle
            from gmm_volunteer.model.bundle import bundle_digest

            bundles[value] = bundle_digest(load_bundle(value))
    stores = [p for c in args.configs for p in args.results.glob(f"{c.stem}-seed*.zarr")]
    found = sorted({p.name.rsplit("-seed", 1)[1].removesuffix(".zarr") for p in stores}, key=lambda x: (len(x), x))
    seeds = ", ".join(found)
    # The simulator and this comparison ran at this package's version; the testbed runs
    # at their stores' (a headline may gather several), which the note lists.
    from gmm_volunteer import __version__
    from gmm_volunteer.trajectory import TRAJECTORY_VERSION

    made = sorted({str(open_result(p).attrs.get("gmmv_version", "?")) for p in stores})
    for suffix, (table, what) in tables.items():
        resultfile.write(
            Path(f"{prefix}{suffix}.md"), table, command=command, bundles=bundles,
            gmmv_version=__version__, trajectory_version=TRAJECTORY_VERSION,
            title=f"The simulator against the live testbed, {what} (docs/validation.md section 6)",
            note=f"testbed: the stores in {args.results} (gmmv testbed {', '.join(made)}, seeds {seeds}); simulator: "
                 f"{args.sim_seeds} seeds from 1000 on the same configs"
                 + (f" with {', '.join(args.sim_set)}" if args.sim_set else "") + ". "
                 + (f"Requests that started at step {args.from_step} or later only (the CPU columns: whole "
                    "runs). " if args.from_step else "")
                 + (f"Each run predicted at its machine's speed: its {speed.SUFFIX} (calibrate --cold before the run) "
                    f"over {args.speed_reference}, as execution.work_scale (docs/model.md D30). "
                    if args.speed_reference is not None else "")
                 + notes.get(suffix, DEFAULT_NOTE))


