"""Policy search for eq. 2 (paper 2.4): tune the weighted scheduler's weights with common
random numbers, then compare it with other schedulers on held-out seeds.

Objective. Eq. 2 maximises the long-run average reward r(s_t) = -(latency increments in
step t); a run of T steps estimates it by the mean increments per step after a warm-up,
(L(T) - L(w)) / (T - w) with L as in `gmm_volunteer.optimisation.problem` (the requests
accruing latency per step; lower is better). Every candidate is run on the same training
seeds (common random numbers, docs/model.md D5): the differences between candidates are
then differences of policy, not of the users' draws. The optimiser minimises the mean
over the training seeds.

Optimisers (`minimise`): ``cma`` (CMA-ES, the `cma` package), ``optuna`` (TPE, the
`optuna` package), ``random`` (uniform draws, NumPy only). All are seeded, so a search is
reproducible.

Comparison (`compare`). On held-out seeds every scheduler runs once per seed; for a
baseline b and the tuned scheduler w, the paired differences d_s = m_b(s) - m_w(s) over
the n seeds give mean(d) +- t_{0.975, n-1} sd(d) / sqrt(n) (a two-sided 95 % t-interval;
pairing by seed removes the variation the seeds share).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from scipy import stats

from gmm_volunteer.cli import feedback
from gmm_volunteer.io.bundlefiles import load_bundle
from gmm_volunteer.run.config import RunConfig, config_from_dict
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.model.kernels.ops import OUT_COMPLETED
from gmm_volunteer.optimisation.problem import latency_total
from gmm_volunteer.policies.weighted import WEIGHTS

METRICS = ("eq2_cost", "mean_latency", "p99_latency", "completed")
"""Per-run metrics after the warm-up: mean latency increments per step (eq. 2's cost),
mean and P99 latency of completed requests (s), completed requests."""
METHODS = ("cma", "optuna", "random")


# -- one run --------------------------------------------------------------------------


def run_metrics(cfg: RunConfig, warmup: int, bundle=None) -> dict[str, float]:
    """`METRICS` of one run of `cfg`; requests count if they ended at or after step
    `warmup` (latencies) and increments if they happened in steps warmup..T-1."""
    sim = Simulation(cfg, bundle=bundle)
    sim.run_to(warmup)
    A = sim.arrays
    logged = int(A.n_lg[0])
    before = latency_total(A, sim.t)
    sim.run_to(sim.steps)
    A = sim.arrays  # pools may have grown: new arrays
    n = int(A.n_lg[0])
    after = latency_total(A, sim.t)
    ended = slice(logged, n)
    # from the end time: the end step, or under latency: substep the time inside it (D34)
    lat = (A.lg_time[ended] - A.lg_start[ended])[A.lg_out[ended] == OUT_COMPLETED]
    return {
        "eq2_cost": (after - before) / max(sim.t - warmup, 1),
        "mean_latency": float(lat.mean()) if lat.size else math.nan,
        "p99_latency": float(np.quantile(lat, 0.99)) if lat.size else math.nan,
        "completed": float(lat.size),
    }


def policy_config(cfg: RunConfig, scheduler: str, options: dict | None = None, seed: int | None = None) -> RunConfig:
    """`cfg` with another scheduler (validated like a config file) and seed."""
    data = cfg.model_dump(mode="json")
    data.update(scheduler=scheduler, scheduler_options=dict(options or {}))
    if seed is not None:
        data["seed"] = int(seed)
    return config_from_dict(data)


def evaluate(cfg: RunConfig, scheduler: str, options: dict | None, seeds: Sequence[int],
             warmup: int, bundle=None) -> dict[str, np.ndarray]:
    """`METRICS` of `scheduler` on each seed: name -> array over `seeds`."""
    bundle = bundle if bundle is not None else load_bundle(cfg.model)
    base = policy_config(cfg, scheduler, options)
    rows = [run_metrics(base.model_copy(update={"seed": int(s)}), warmup, bundle) for s in seeds]
    return {m: np.array([r[m] for r in rows]) for m in METRICS}


# -- the optimiser ---------------------------------------------------------------------


@dataclass
class SearchResult:
    x: np.ndarray                 # best point found
    value: float                  # its objective
    history: list = field(default_factory=list)  # (point, value) in evaluation order


def minimise(objective: Callable[[np.ndarray], float], dim: int, bound: float, trials: int,
             method: str = "cma", seed: int = 0,
             report: Callable[[int, np.ndarray, float, float], None] | None = None) -> SearchResult:
    """Minimise `objective` over [-bound, bound]^dim with `trials` evaluations.

    ``report(i, x, value, best)`` is called after each evaluation (progress)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    if trials < 1 or dim < 1 or not bound > 0:
        raise ValueError("need trials >= 1, dim >= 1 and bound > 0")
    history: list[tuple[np.ndarray, float]] = []

    def f(x) -> float:
        x = np.clip(np.asarray(x, np.float64), -bound, bound)
        value = float(objective(x))
        history.append((x, value))
        if report is not None:
            report(len(history), x, value, min(v for _, v in history))
        return value

    if method == "random":
        rng = np.random.default_rng(seed)
        for _ in range(trials):
            f(rng.uniform(-bound, bound, dim))
    elif method == "cma":
        import cma

        # Start at the centre (weights 0: the uniform law) with a step of a third of
        # the box, the usual CMA-ES advice for a box constraint.
        es = cma.CMAEvolutionStrategy(np.zeros(dim), bound / 3.0, {
            "bounds": [-bound, bound], "seed": seed + 1, "verbose": -9, "maxfevals": trials,
            "popsize": max(4, 4 + int(3 * math.log(dim))),
        })
        while len(history) < trials:
            xs = es.ask()
            xs = xs[: trials - len(history)]
            values = [f(x) for x in xs]
            if len(xs) < es.popsize:
                break
            es.tell(xs, values)
    else:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
        study.optimize(lambda tr: f([tr.suggest_float(f"x{i}", -bound, bound) for i in range(dim)]),
                       n_trials=trials)
    best = min(range(len(history)), key=lambda i: history[i][1])
    return SearchResult(history[best][0], history[best][1], history)


# -- tuning the weighted scheduler -------------------------------------------------------


@dataclass
class Tuned:
    weights: dict[str, float]     # all of WEIGHTS: the tuned ones and the fixed ones
    train_value: float            # mean eq2_cost over the training seeds
    search: SearchResult
    names: tuple[str, ...]        # the weights searched


def tune(cfg: RunConfig, train_seeds: Sequence[int], trials: int, *, method: str = "cma",
         bound: float = 10.0, warmup: int = 300, names: Sequence[str] = WEIGHTS,
         fixed: dict[str, float] | None = None, seed: int = 0, bundle=None) -> Tuned:
    """Tune the weighted scheduler's weights `names` in [-bound, bound] (the others at
    `fixed`, else their defaults) to minimise the mean eq2_cost over `train_seeds`."""
    unknown = [n for n in names if n not in WEIGHTS]
    if unknown or not names:
        raise ValueError(f"weights to tune must be among {', '.join(WEIGHTS)} (got {list(names)})")
    bundle = bundle if bundle is not None else load_bundle(cfg.model)
    fixed = dict(fixed or {})

    def weights_of(x) -> dict[str, float]:
        return {**fixed, **{n: float(v) for n, v in zip(names, x)}}

    def objective(x) -> float:
        return float(evaluate(cfg, "weighted", weights_of(x), train_seeds, warmup, bundle)["eq2_cost"].mean())

    t0 = time.perf_counter()

    def report(i, x, value, best):
        shown = ", ".join(f"{n}={v:+.2f}" for n, v in zip(names, x))
        feedback.info(f"trial {i}/{trials}: {shown}: eq2 cost {value:.3f} (best {best:.3f}, "
                      f"{time.perf_counter() - t0:.0f} s)")

    result = minimise(objective, len(names), bound, trials, method, seed, report)
    return Tuned(weights_of(result.x), result.value, result, tuple(names))


# -- paired comparison on held-out seeds ---------------------------------------------------


def paired_interval(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> tuple[float, float, float, int]:
    """Mean of a - b over the seeds where both are finite, with the two-sided t-interval
    mean +- t_{(1+level)/2, n-1} sd / sqrt(n): (mean, low, high, n)."""
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    d = d[np.isfinite(d)]
    n = d.size
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = float(d.mean())
    if n == 1:
        return mean, math.nan, math.nan, 1
    half = float(stats.t.ppf((1 + level) / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
    return mean, mean - half, mean + half, n


def compare(cfg: RunConfig, weights: dict[str, float], baselines: Sequence[str], test_seeds: Sequence[int],
            warmup: int = 300, bundle=None) -> dict:
    """Run the tuned weighted scheduler and each baseline (default options) on
    `test_seeds`; return per-scheduler metrics and the paired differences
    baseline - tuned for every metric."""
    bundle = bundle if bundle is not None else load_bundle(cfg.model)
    runs = {}
    for name, opts in [("weighted (tuned)", ("weighted", weights))] + [(b, (b, {})) for b in baselines]:
        t0 = time.perf_counter()
        runs[name] = evaluate(cfg, opts[0], opts[1], test_seeds, warmup, bundle)
        feedback.info(f"held-out: {name} on {len(test_seeds)} seeds ({time.perf_counter() - t0:.0f} s)")
    tuned = runs["weighted (tuned)"]
    diffs = {b: {m: paired_interval(runs[b][m], tuned[m]) for m in METRICS} for b in baselines}
    return {"runs": runs, "differences": diffs}
