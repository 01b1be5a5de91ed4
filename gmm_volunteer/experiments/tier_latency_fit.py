"""LA-IMR's router law calibrated per (subtask type, tier) on what each tier serves, and
its held-out error against the single law (issue 51 item 3; seed 001 section III-C;
docs/model.md D41; docs/experiments.md section 7.5).

Seed 001 profiles each (model, tier) offline and fits L = alpha + beta (lambda / N)^gamma
to its latencies. Section 7.1 (`latency_fit`) fits one law on the server's request
latencies; the router then applied it to subtasks on every tier, per core. Here:

1. the run config is simulated with the ``random`` router (each subtask to a tier drawn
   uniformly among the available ones, so that every tier serves every subtask type over
   a range of loads) at a fixed server capacity (``autoscaler: fixed``), for every
   (users, server capacity) of the training and the held-out settings, one seed each;
2. every logged decision after the warm-up that completed gives a point per (subtask
   type, tier): x, the tier's arrival rate per server as the router saw it at the
   decision (decision field ``rate_per_server``), and y, the subtask's realized delay
   (placement to result, its wait and transfers included);
3. alpha, beta, gamma are fitted per pair on the training points (`fit_law`, scipy's
   bounded least squares, with the standard errors of its covariance);
4. the laws predict the held-out decisions; per pair and split, the mean realized and
   predicted delay and the mean absolute relative error per decision;
5. both routers, the single law (``--single ALPHA BETA GAMMA``, section 7.1's) and the
   calibrated laws, run the held-out settings as ``la_imr`` routers, and the router's
   own whole-run error (`routing_metrics.whole_run_mape`, estimator "router") is given
   for each: the held-out error of both in operation.

Command: ``python -m gmm_volunteer.experiments.tier_latency_fit CONFIG -o FILE.yaml
[--table FIT.md --operation-table HELD_OUT.md]``; FILE.yaml holds ``tier_laws`` for
``scheduler_options`` and the tables; FIT.md and HELD_OUT.md are the two tables as
committed result files (docs/results/README.md).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from gmm_volunteer.experiments.latency_fit import add_run_arguments, checked_output, fit_parser
from gmm_volunteer.policies.routing import D_RATE, D_REAL, D_SUBTYPE, D_T, D_TIER, ESTIMATOR_NAMES, TIER_NAMES


def fit_law(x, y) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """Least squares of y = alpha + beta x^gamma (seed 001 eq. 8) with alpha, beta >= 0,
    gamma in [0.05, 5]; ((alpha, beta, gamma), their standard errors from the fit's
    covariance, NaN where it is singular). At least 4 points."""
    from scipy.optimize import curve_fit

    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0)
    x, y = x[ok], y[ok]
    if x.size < 4:
        raise ValueError(f"need at least 4 points to fit alpha, beta, gamma (got {x.size})")
    p0 = (max(float(np.quantile(y, 0.05)), 0.0), max(float(y.std()), 1e-3), 1.0)
    popt, pcov = curve_fit(lambda r, a, b, g: a + b * np.power(r, g), x, y, p0=p0,
                           bounds=([0.0, 0.0, 0.05], [np.inf, np.inf, 5.0]), maxfev=20000)
    with np.errstate(invalid="ignore"):
        se = np.sqrt(np.diag(pcov))
    return tuple(float(v) for v in popt), tuple(float(v) if np.isfinite(v) else math.nan for v in se)


def decisions(record, warmup: int) -> np.ndarray:
    """Completed logged decisions placed at or after the warm-up: (subtask type, tier,
    rate per server, realized delay) rows."""
    d = np.asarray(record.policy_series["decision"][1], np.float64)
    keep = (d[:, D_T] >= warmup) & np.isfinite(d[:, D_REAL]) & np.isfinite(d[:, D_RATE])
    return d[keep][:, [D_SUBTYPE, D_TIER, D_RATE, D_REAL]]


def run_config(path, users: int, capacity: float, steps: int, seed: int, scheduler: str = "random",
               options: dict | None = None):
    """The run config with `users`, a fixed server of `capacity` and `scheduler`."""
    import yaml

    from gmm_volunteer.run.config import load_config

    return load_config(path, [
        "autoscaler=fixed", "autoscaler_options={}", f"server.capacity={capacity}",
        f"users.count={users}", f"scheduler={scheduler}",
        f"scheduler_options={yaml.safe_dump(options or {}, default_flow_style=True).strip()}",
        f"steps={steps}", f"seed={seed}",
    ])


def fit_pairs(train: np.ndarray, min_points: int) -> list[dict]:
    """A law per (subtask type, tier) with at least `min_points` training decisions."""
    laws = []
    for m in np.unique(train[:, 0]).astype(int):
        for tier in range(len(TIER_NAMES)):
            sel = (train[:, 0] == m) & (train[:, 1] == tier)
            if np.count_nonzero(sel) < min_points:
                continue
            (a, b, g), (sa, sb, sg) = fit_law(train[sel, 2], train[sel, 3])
            laws.append({"subtask_type": int(m), "tier": TIER_NAMES[tier], "alpha": a, "beta": b, "gamma": g,
                         "se": {"alpha": sa, "beta": sb, "gamma": sg}, "points": int(np.count_nonzero(sel))})
    return laws


def evaluate(laws: list[dict], rows: np.ndarray, split: str, names) -> list[dict]:
    """Per law: decisions of its pair in `rows`, mean realized and predicted delay, and
    the mean absolute relative error per decision."""
    out = []
    for law in laws:
        sel = (rows[:, 0] == law["subtask_type"]) & (rows[:, 1] == TIER_NAMES.index(law["tier"]))
        x, y = rows[sel, 2], rows[sel, 3]
        if not y.size:
            continue
        pred = law["alpha"] + law["beta"] * np.power(x, law["gamma"])
        good = y > 0
        out.append({"split": split, "subtask": names[law["subtask_type"]], "tier": law["tier"],
                    "decisions": int(y.size), "rate_per_server": float(x.mean()), "realized": float(y.mean()),
                    "predicted": float(pred.mean()),
                    "error": float(np.mean(np.abs(pred[good] - y[good]) / y[good])) if good.any() else math.nan})
    return out


def table(rows: list[dict]) -> str:
    head = ["| split | subtask | tier | decisions | rate per server (1/s) | realized mean (s) "
            "| predicted mean (s) | mean abs. relative error |", "|" + "---|" * 8]
    return "\n".join(head + [
        f"| {r['split']} | {r['subtask']} | {r['tier']} | {r['decisions']:,} | {r['rate_per_server']:.3f} | "
        f"{r['realized']:.2f} | {r['predicted']:.2f} | {100 * r['error']:.1f} % |" for r in rows])


def router_error(record) -> dict:
    """The la_imr router's whole-run error of its own predictions (mean absolute relative
    error over every completed decision, the store's ``estimator_error``), per tier and
    over all, with the decisions it is over."""
    e = np.asarray(record.policy_series["estimator_error"][1])[:, ESTIMATOR_NAMES.index("router"), :]
    out = {"all": float(e[:, 0].sum() / e[:, 1].sum()) if e[:, 1].sum() > 0 else math.nan,
           "decisions": int(e[:, 1].sum())}
    for k, t in enumerate(TIER_NAMES):
        out[t] = float(e[k, 0] / e[k, 1]) if e[k, 1] > 0 else math.nan
        out[f"{t}_decisions"] = int(e[k, 1])
    return out


def run_fit(config, train, test, steps, warmup, seed, single, budget, min_points=50, progress=print) -> dict:
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.run.engine import simulate

    rows = {}
    for split, settings in (("train", train), ("test", test)):
        got = []
        for users, cap in settings:
            progress(f"tier latency fit: {split} run, {users} users, server {cap:g}, random router ...")
            cfg = run_config(config, users, cap, steps, seed)
            got.append(decisions(simulate(cfg, progress=False), warmup))
        rows[split] = np.concatenate(got) if got else np.zeros((0, 4))
    names = [s.name for s in load_bundle(cfg.model).subtask_types]
    laws = fit_pairs(rows["train"], min_points)
    points = evaluate(laws, rows["train"], "train", names) + evaluate(laws, rows["test"], "test", names)
    a, b, g = single
    base = {"alpha": a, "beta": b, "gamma": g, "budget_s": budget}
    calibrated = {**base, "tier_laws": [{k: law[k] for k in ("subtask_type", "tier", "alpha", "beta", "gamma")}
                                        for law in laws]}
    operation = []
    for users, cap in test:
        for name, options in (("single", base), ("calibrated", calibrated)):
            progress(f"tier latency fit: held-out run, {users} users, server {cap:g}, la_imr {name} ...")
            rec = simulate(run_config(config, users, cap, steps, seed, "la_imr", options), progress=False)
            operation.append({"users": users, "server_capacity": cap, "law": name, **router_error(rec)})
    return {"tier_laws": calibrated["tier_laws"],
            "fit": [{**{k: v for k, v in law.items() if k not in ("subtask_type",)},
                     "subtask_type": law["subtask_type"], "subtask": names[law["subtask_type"]]} for law in laws],
            "runs": {"config": str(config), "train": [list(s) for s in train], "test": [list(s) for s in test],
                     "steps": steps, "warmup": warmup, "seed": seed, "single": list(single), "budget_s": budget},
            "points": points, "operation": operation}


def operation_table(rows: list[dict]) -> str:
    head = ["| users | server capacity | law | router error, all (decisions) | local | edge | cloud |",
            "|" + "---|" * 7]

    def f(r, k):
        v = r[k]
        return "-" if not math.isfinite(v) else f"{100 * v:.1f} % ({r[f'{k}_decisions' if k != 'all' else 'decisions']:,})"
    return "\n".join(head + [f"| {r['users']} | {r['server_capacity']:g} | {r['law']} | {f(r, 'all')} | "
                             f"{f(r, 'local')} | {f(r, 'edge')} | {f(r, 'cloud')} |" for r in rows])


def _setting(text):
    try:
        users, cap = text.split(":")
        users, cap = int(users), float(cap)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not USERS:CAPACITY: {text!r}") from None
    if users <= 0 or cap <= 0:
        raise argparse.ArgumentTypeError(f"users and capacity must be > 0, got {text!r}")
    return users, cap


def main(argv=None) -> int:
    ap = fit_parser("tier_latency_fit", "Fit LA-IMR's router law per (subtask type, tier) and compare its "
                    "held-out error with the single law (docs/experiments.md 7.5).",
                    "run config (scheduler, autoscaler, users and server capacity replaced)",
                    "YAML file for the laws and the tables")
    ap.add_argument("--train", type=_setting, nargs="+", default=[(500, 2.0), (1000, 2.0), (500, 4.0), (1000, 4.0)],
                    help="training settings USERS:SERVER_CAPACITY")
    ap.add_argument("--test", type=_setting, nargs="+", default=[(2000, 2.0), (2000, 4.0)],
                    help="held-out settings USERS:SERVER_CAPACITY")
    add_run_arguments(ap, 900, 120)
    ap.add_argument("--single", type=float, nargs=3, default=[0.0, 2.3735, 0.1670], metavar=("ALPHA", "BETA", "GAMMA"),
                    help="the single law to compare (default section 7.1's)")
    ap.add_argument("--budget", type=float, default=3.0, help="the routers' budget_s in the held-out runs")
    ap.add_argument("--min-points", type=int, default=50, help="training decisions a pair needs for a law")
    ap.add_argument("--table", help="also write the fit's table as a result file (e.g. docs/results/NAME.md)")
    ap.add_argument("--operation-table", help="and the held-out routers' errors as another (with --table)")
    args = ap.parse_args(argv)
    from gmm_volunteer.run.config import ConfigError

    out = checked_output(ap, args)
    if (args.table is None) != (args.operation_table is None):
        ap.error("--table and --operation-table go together")
    for f in (args.table, args.operation_table):
        if f is not None and Path(f).is_dir():
            ap.error(f"{f}: is a directory")
    if args.budget <= 0 or args.min_points < 4:
        ap.error("--budget must be > 0 and --min-points at least 4")
    try:
        run_config(args.config, *args.train[0], args.steps, args.seed)
    except ConfigError as exc:
        print(f"{ap.prog}: error: {exc}", file=sys.stderr)
        return 2
    result = run_fit(args.config, args.train, args.test, args.steps, args.warmup, args.seed, args.single,
                     args.budget, args.min_points, progress=lambda m: print(m, file=sys.stderr))
    import yaml

    from gmm_volunteer import __version__

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# LA-IMR router laws per (subtask type, tier), gmm-volunteer {__version__}, fitted by\n"
                   f"# python -m gmm_volunteer.experiments.tier_latency_fit {' '.join(argv or sys.argv[1:])}\n"
                   + yaml.safe_dump(result, sort_keys=False), encoding="utf-8")
    print(table(result["points"]))
    print()
    print(operation_table(result["operation"]))
    print(f"wrote {out}")
    if args.table is not None:
        for path in write_results(args, argv, result):
            print(f"wrote {path}")
    return 0


def write_results(args, argv, result) -> list[Path]:
    """The fit and the held-out comparison as two result files (docs/results/README.md)."""
    import shlex

    from gmm_volunteer import __version__
    from gmm_volunteer.io import resultfile
    from gmm_volunteer.io.bundlefiles import load_bundle
    from gmm_volunteer.model.bundle import bundle_digest
    from gmm_volunteer.trajectory import TRAJECTORY_VERSION, policy_key, policy_trajectory_version

    cfg = run_config(args.config, *args.train[0], args.steps, args.seed)
    name = resultfile.bundle_name(str(cfg.model)) or str(cfg.model)
    keys = [policy_key("scheduler", s) for s in ("random", "la_imr")] + [policy_key("autoscaler", "fixed")]
    ops = result["operation"]
    note = "; ".join(f"{r['users']} users, server {r['server_capacity']:g}, {r['law']} law: router error "
                     f"{100 * r['all']:.1f} %" for r in ops)
    head = dict(command=shlex.join(["python", "-m", "gmm_volunteer.experiments.tier_latency_fit",
                                    *(argv if argv is not None else sys.argv[1:])]),
                bundles={name: bundle_digest(load_bundle(cfg.model))}, gmmv_version=__version__,
                trajectory_version=TRAJECTORY_VERSION, policies={k: policy_trajectory_version(k) for k in keys})
    return [resultfile.write(args.table, table(result["points"]), **head,
                             title="LA-IMR's router law per (subtask type, tier): fit and held-out error per "
                                   "pair (docs/experiments.md section 7.5)"),
            resultfile.write(args.operation_table, operation_table(ops), note=note, **head,
                             title="LA-IMR's router error at held-out loads, single law against the laws per "
                                   "(subtask type, tier) (docs/experiments.md section 7.5)")]


if __name__ == "__main__":
    sys.exit(main())
