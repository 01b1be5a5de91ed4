"""LA-IMR's latency model fitted from the simulator's own runs at fixed capacity, and its
prediction error on held-out loads (issue 11 items 3-4; seed 001 section III-C;
docs/model.md D23; docs/experiments.md section 7).

Seed 001 fits L = alpha + beta x lambda~^gamma (lambda~ the per-unit arrival rate) to
latencies measured at a few loads and then uses it, plus the Erlang-C wait of M/M/N
(Eq. 12), to choose replicas. Its critique asks for the parameters to be frozen on one
load range and tested on another. Here:

1. the run config is simulated at fixed capacity (``autoscaler: fixed``, N units of the
   autoscaler's ``unit``) with the demand multiplier held constant at a load factor f
   (no daily profile, no surge, no burst), for every N in ``units`` and f in the
   training and the held-out loads, one seed each;
2. per run, after a warm-up: the arrival rate lambda (requests started per second), the
   server CPU-seconds per request R (so mu = R_max / R per unit, as the autoscaler
   measures it), and the mean latency of completed requests;
3. alpha, beta, gamma are fitted (`la_imr.fit_latency_model`) on the training runs to
   the observed mean latency minus the Erlang-C wait W_q(N, lambda, mu), so that the
   model LA-IMR evaluates, alpha + beta (lambda/N)^gamma + W_q, reproduces them;
4. that model predicts the held-out runs; the table gives observed, predicted and the
   relative error.

Command: ``python -m gmm_volunteer.experiments.latency_fit CONFIG -o FILE.yaml`` (options below);
FILE.yaml holds the parameters as ``autoscaler_options`` for ``la_imr`` and the table.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gmm_volunteer.policies.autoscalers.la_imr import erlang_c_wait, fit_latency_model


@dataclass
class Point:
    units: int
    load: float  # demand multiplier f
    split: str  # "train" or "test"
    arrival_rate: float  # requests / s
    per_unit_rate: float  # requests / s / unit
    work_per_request: float  # server CPU-s per request (R)
    utilization: float  # lambda R / (N R_max)
    mean_latency: float  # s, completed requests started after the warm-up
    p99_latency: float
    erlang_wait: float  # W_q(N, lambda, mu), s
    predicted: float = math.nan  # alpha + beta (lambda/N)^gamma + W_q, s
    relative_error: float = math.nan  # (predicted - observed) / observed


def run_config(path, units: int, load: float, unit: float, steps: int, seed: int):
    """The run config at N fixed units and constant load factor f."""
    from gmm_volunteer.run.config import load_config

    return load_config(path, [
        "autoscaler=fixed", "autoscaler_options={}", f"server.capacity={units * unit}",
        f"demand.daily={{kind: table, points: [[0.0, {load}]]}}", "demand.surges=[]",
        "demand.bursts=null", f"steps={steps}", f"seed={seed}",
    ])


def measure(record, cfg, units: int, load: float, unit: float, warmup: int, split: str) -> Point:
    steps = int(cfg.steps)
    start, end, out = record.request_start, record.request_end, record.request_outcome
    after = start >= warmup
    lam = float(np.count_nonzero(after)) / (steps - warmup)
    # R: server CPU-seconds of executions finished after the warm-up per request started
    # after it (the autoscalers' own estimate, D17)
    work = float(record.completed_work[warmup:, 0].astype(np.float64).sum())
    r = work / max(1, int(np.count_nonzero(after)))
    unit_cores = unit * float(cfg.base_profile.cpu) / 100.0
    mu = unit_cores / r if r > 0 else math.inf
    done = after & (out == 0)
    lat = (end[done] - start[done]).astype(np.float64)
    return Point(units=units, load=load, split=split, arrival_rate=lam, per_unit_rate=lam / units,
                 work_per_request=r, utilization=lam * r / (units * unit_cores),
                 mean_latency=float(lat.mean()) if lat.size else math.nan,
                 p99_latency=float(np.quantile(lat, 0.99)) if lat.size else math.nan,
                 erlang_wait=erlang_c_wait(units, lam, mu))


def fit_and_evaluate(points: list[Point]) -> tuple[dict, list[Point]]:
    """Fit alpha, beta, gamma on the training points, predict every point."""
    train = [p for p in points if p.split == "train"]
    x = [p.per_unit_rate for p in train]
    y = [p.mean_latency - p.erlang_wait for p in train]
    alpha, beta, gamma = fit_latency_model(x, y)
    for p in points:
        p.predicted = alpha + beta * p.per_unit_rate ** gamma + p.erlang_wait
        p.relative_error = (p.predicted - p.mean_latency) / p.mean_latency
    return {"alpha": alpha, "beta": beta, "gamma": gamma}, points


def error_summary(points: list[Point]) -> dict:
    out = {}
    for split in ("train", "test"):
        e = np.array([abs(p.relative_error) for p in points if p.split == split and math.isfinite(p.relative_error)])
        out[split] = {"runs": int(e.size), "mean_abs_relative_error": float(e.mean()) if e.size else math.nan,
                      "max_abs_relative_error": float(e.max()) if e.size else math.nan}
    return out


def table(points: list[Point]) -> str:
    """A Markdown table of the points (the experiment's output and docs/experiments.md)."""
    head = ("| split | units | load f | lambda (1/s) | lambda/N | utilization | mean latency (s) "
            "| W_q (s) | predicted (s) | error |")
    rows = [head, "|" + "---|" * 10]
    for p in points:
        rows.append(f"| {p.split} | {p.units} | {p.load:g} | {p.arrival_rate:.2f} | {p.per_unit_rate:.3f} | "
                    f"{p.utilization:.2f} | {p.mean_latency:.2f} | {p.erlang_wait:.2f} | {p.predicted:.2f} | "
                    f"{100 * p.relative_error:+.1f} % |")
    return "\n".join(rows)


def run_fit(config, units, train_loads, test_loads, steps, warmup, seed, unit=1.0, progress=print) -> dict:
    from gmm_volunteer.run.engine import simulate

    points = []
    for split, loads in (("train", train_loads), ("test", test_loads)):
        for n in units:
            for f in loads:
                cfg = run_config(config, n, f, unit, steps, seed)
                progress(f"latency fit: {split} run, {n} units, load {f:g} ...")
                points.append(measure(simulate(cfg, progress=False), cfg, n, f, unit, warmup, split))
    params, points = fit_and_evaluate(points)
    return {"autoscaler_options": params, "errors": error_summary(points),
            "runs": {"config": str(config), "units": list(units), "train_loads": list(train_loads),
                     "test_loads": list(test_loads), "steps": steps, "warmup": warmup, "seed": seed,
                     "unit": unit},
            "points": [asdict(p) for p in points]}, points


def _positive_list(kind):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return v
    return parse


def fit_parser(module: str, description: str, config_help: str, output_help: str) -> argparse.ArgumentParser:
    """The parser of a fit command (this and tier_latency_fit): a run config and -o."""
    ap = argparse.ArgumentParser(prog=f"python -m gmm_volunteer.experiments.{module}", description=description)
    ap.add_argument("config", help=config_help)
    ap.add_argument("-o", "--output", required=True, help=output_help)
    return ap


def add_run_arguments(ap, steps: int, warmup: int) -> None:
    """The run-length and seed options the fit commands share (this and tier_latency_fit)."""
    ap.add_argument("--steps", type=_positive_list(int), default=steps)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--seed", type=int, default=0)


def checked_output(ap, args) -> Path:
    """-o and --warmup checked before any run (exit 2 naming the option)."""
    out = Path(args.output)
    if not 0 <= args.warmup < args.steps:
        ap.error(f"--warmup: must be in [0, --steps), got {args.warmup}")
    if out.is_dir():
        ap.error(f"-o {args.output}: is a directory")
    return out


def main(argv=None) -> int:
    ap = fit_parser("latency_fit", "Fit LA-IMR's latency model from fixed-capacity runs and evaluate it on "
                    "held-out loads (docs/experiments.md section 7).",
                    "run config (its demand profile and autoscaler are replaced)",
                    "YAML file for the parameters and the table")
    ap.add_argument("--units", type=_positive_list(int), nargs="+", default=[12, 24])
    ap.add_argument("--train-loads", type=_positive_list(float), nargs="+", default=[0.5, 0.75, 1.0])
    ap.add_argument("--test-loads", type=_positive_list(float), nargs="+", default=[1.5, 2.0])
    ap.add_argument("--unit", type=_positive_list(float), default=1.0, help="capacity of one unit (x base_profile)")
    add_run_arguments(ap, 3600, 600)
    args = ap.parse_args(argv)
    from gmm_volunteer.run.config import ConfigError

    out = checked_output(ap, args)
    if len(args.units) * len(args.train_loads) < 3:
        ap.error("--units x --train-loads: need at least 3 training runs to fit alpha, beta, gamma")
    try:
        run_config(args.config, args.units[0], args.train_loads[0], args.unit, args.steps, args.seed)
    except ConfigError as exc:
        print(f"{ap.prog}: error: {exc}", file=sys.stderr)
        return 2
    result, points = run_fit(args.config, args.units, args.train_loads, args.test_loads, args.steps,
                             args.warmup, args.seed, args.unit,
                             progress=lambda m: print(m, file=sys.stderr))
    import yaml

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("# LA-IMR latency model fitted by python -m gmm_volunteer.experiments.latency_fit\n"
                   + yaml.safe_dump(result, sort_keys=False), encoding="utf-8")
    p = result["autoscaler_options"]
    print(f"alpha = {p['alpha']:.4f} s, beta = {p['beta']:.4f}, gamma = {p['gamma']:.4f}")
    print(table(points))
    for split, e in result["errors"].items():
        print(f"{split}: {e['runs']} runs, mean |error| {100 * e['mean_abs_relative_error']:.1f} %, "
              f"max {100 * e['max_abs_relative_error']:.1f} %")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
