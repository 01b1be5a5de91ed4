"""Smallest server capacity meeting latency targets (paper section 2.4, eq. 3).

Eq. 3 asks, for every request type k, that a request's latency at its end be at most
tau_k with probability at least 1 - eps_k. For a candidate server capacity multiplier m
we simulate the same seeds (common random numbers: every candidate sees the same users)
and estimate, per seed, the fraction of ended requests of type k with latency <= tau_k.
The target counts as met when a one-sided lower confidence bound of that fraction is
>= 1 - eps_k for every k:

* two or more seeds: Student-t bound over the per-seed fractions (seeds are independent
  replicates; requests inside one run are not independent, so they are not treated as
  such);
* one seed: Clopper-Pearson bound over requests (optimistic: it assumes independent
  requests; use several seeds for a real answer).

Feasibility is taken to increase with capacity. The search evaluates the upper end of
the range, then the lower, then bisects geometrically until the bracket is narrower than
the relative tolerance; the answer is the smallest capacity found feasible.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from gmm_volunteer.model.constants import OUTCOMES

ALL_TYPES = "*"
_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """``"10s"``, ``"10"``, ``"1.5min"``, ``"2m"``, ``"1h"`` -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*", str(text))
    if m and m.group(2) in ("ms", "us", "ns"):
        raise ValueError(f"cannot read duration {text!r}: the model's steps are 1 s, so a latency is "
                         f"a whole number of seconds (write e.g. 1s, 10s, 2min)")
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"cannot read duration {text!r} (write e.g. 10s, 2min, 1h)")
    value = float(m.group(1)) * _UNITS[m.group(2)]
    if value <= 0:
        raise ValueError(f"duration {text!r} must be positive")
    return value


def parse_targets(specs) -> dict[str, float]:
    """``["10s"]`` -> {"*": 10}; ``["light5=10s", "heavy10=30s"]`` -> per request type."""
    out: dict[str, float] = {}
    for spec in specs:
        name, sep, dur = str(spec).rpartition("=")
        key = name.strip() if sep else ALL_TYPES
        if sep and not key:
            raise ValueError(f"target {spec!r}: empty request type name")
        if key in out:
            raise ValueError(f"target for {'all request types' if key == ALL_TYPES else key!r} given twice")
        out[key] = parse_duration(dur)
    if not out:
        raise ValueError("no latency target given")
    return out


@dataclass
class Evaluation:
    capacity: float
    feasible: bool
    # per request type: (tau, fraction met (pooled), lower bound, observed quantile, n requests)
    rows: dict = field(default_factory=dict)

    def line(self, quantile: float, confidence: float) -> str:
        verdict = "meets the targets" if self.feasible else "misses"
        lines = [f"capacity {self.capacity:.3f}x: {verdict}"]
        for k, (tau, frac, lb, qv, n) in self.rows.items():
            bound_only = bound_miss(frac, lb, quantile)
            mark = "ok  " if lb >= quantile else ("MISS (bound)" if bound_only else "MISS")
            lines.append(
                f"  {mark} {k:<10} P(latency <= {tau:g} s) = {frac:.4f}, "
                f"{100 * confidence:g}% lower bound {lb:.4f} (need {quantile:g}); "
                f"P{100 * quantile:g} = {qv:g} s; {n} requests"
                + (f" -- the observed fraction meets {quantile:g}, only its {100 * confidence:g}% "
                   "lower bound misses: more seeds (--seeds N) tighten the bound" if bound_only else "")
            )
        return "\n".join(lines)

    def bound_only(self, quantile: float) -> bool:
        """Missed, and only because of the confidence bound: every row's observed
        fraction meets `quantile`."""
        return not self.feasible and all(
            lb >= quantile or bound_miss(frac, lb, quantile) for _, frac, lb, _, _ in self.rows.values())


def bound_miss(frac: float, lb: float, quantile: float) -> bool:
    """A target missed only because of the confidence bound: the observed fraction
    meets `quantile` (1 - eps) but its lower confidence bound does not."""
    return bool(np.isfinite(frac) and frac >= quantile and not (np.isfinite(lb) and lb >= quantile))


@dataclass
class CapacityResult:
    capacity: float | None  # None: not met even at the top of the range
    path: list[Evaluation]
    quantile: float
    confidence: float
    targets: dict
    # The bracket the search ended with: `low` missed (None: the bottom of the range met
    # the targets, or the top did not), `capacity` met. `budget_stopped`: the search ran
    # out of evaluations before the bracket was within the tolerance.
    low: float | None = None
    rel_tol: float = 0.05
    max_evaluations: int = 20
    budget_stopped: bool = False

    def text(self) -> str:
        lines = [e.line(self.quantile, self.confidence) for e in self.path]
        if self.capacity is None:
            top = max(self.path, key=lambda e: e.capacity)
            lines.append(f"targets not met at the top of the range ({top.capacity:g}x)"
                         + (f"; the observed fractions meet them there, only the {100 * self.confidence:g}% "
                            "lower bound misses: add seeds (--seeds N)" if top.bound_only(self.quantile) else ""))
        elif self.low is None:
            lines.append(f"smallest server capacity meeting the targets: {self.capacity:.3f}x "
                         "(the bottom of the range meets them)")
        elif self.budget_stopped:
            lines.append(f"smallest server capacity meeting the targets: in [{self.low:.3f}, {self.capacity:.3f}]x "
                         f"({self.capacity:.3f}x meets, {self.low:.3f}x misses); the search stopped at its budget "
                         f"of {self.max_evaluations} evaluations before the interval was within "
                         f"{100 * self.rel_tol:g}% (--max-evaluations to go on)")
        else:
            lines.append(f"smallest server capacity meeting the targets: {self.capacity:.3f}x "
                         f"(in [{self.low:.3f}, {self.capacity:.3f}]x, within {100 * self.rel_tol:g}%)")
        return "\n".join(lines)


def planned_evaluations(lo: float, hi: float, rel_tol: float, max_evaluations: int) -> int:
    """At most how many evaluations the bisection makes: both ends, then one per halving
    of the log-interval until it is within `rel_tol`, capped by `max_evaluations`."""
    if hi / lo <= 1 + rel_tol:
        return 2
    halvings = max(0, math.ceil(math.log2(math.log(hi / lo) / math.log1p(rel_tol))))
    return max(2, min(max_evaluations, 2 + halvings))


def _lower_bound(fractions: np.ndarray, met: int, n: int, confidence: float) -> float:
    from scipy import stats

    from gmm_volunteer.experiments.intervals import warn_few_seeds

    if fractions.size == 2:
        warn_few_seeds(2, "the Student-t lower bound",
                       f"1 degree of freedom (t = {stats.t.ppf(confidence, 1):.2f} at "
                       f"{100 * confidence:g}%) makes the bound very wide", "use --seeds 3 or more")
    elif fractions.size == 1 and n:
        warn_few_seeds(1, "the lower bound",
                       "it is a Clopper-Pearson bound over requests, which treats the requests of "
                       "one run as independent (optimistic)", "use --seeds 3 or more")
    if fractions.size >= 2:
        mean = fractions.mean()
        se = fractions.std(ddof=1) / math.sqrt(fractions.size)
        # A probability: the t-bound can fall below 0 (few, spread seeds); clipped, which
        # leaves every decision (bound >= quantile, with 0 < quantile < 1) unchanged.
        return float(min(1.0, max(0.0, mean - stats.t.ppf(confidence, fractions.size - 1) * se)))
    if n == 0:
        return float("nan")
    if met == 0:
        return 0.0
    return float(stats.beta.ppf(1 - confidence, met, n - met + 1))


def evaluate_records(records, capacity: float, targets: dict, type_names, quantile: float,
                     confidence: float, completed_only: bool = False) -> Evaluation:
    """Decide feasibility of one capacity from its runs (one record per seed)."""
    rows = {}
    feasible = True
    keys = list(targets)
    for key in keys:
        if key != ALL_TYPES and key not in type_names:
            from gmm_volunteer.model.suggest import did_you_mean

            raise ValueError(f"unknown request type {key!r} in targets{did_you_mean(key, type_names)} "
                             f"(known: {', '.join(type_names)})")
    check = [k for k in keys if k != ALL_TYPES]
    if ALL_TYPES in targets:
        # One target for every request type that occurred; a type nobody requested in
        # any run constrains nothing. A type named explicitly needs evidence.
        seen = set()
        for rec in records:
            seen.update(int(v) for v in np.unique(np.asarray(rec.request_type)))
        check += [t for i, t in enumerate(type_names) if t not in targets and i in seen]
    for name in check:
        tau = targets.get(name, targets.get(ALL_TYPES))
        k = list(type_names).index(name)
        fractions, met_total, n_total, pooled = [], 0, 0, []
        for rec in records:
            sel = np.asarray(rec.request_type) == k
            if completed_only:
                sel &= np.asarray(rec.request_outcome) == OUTCOMES.index("completed")
            lat = np.asarray(rec.request_latency)[sel]
            pooled.append(lat)
            if lat.size:
                met = int(np.sum(lat <= tau))
                fractions.append(met / lat.size)
                met_total += met
                n_total += lat.size
        pooled = np.concatenate(pooled) if pooled else np.empty(0)
        frac = met_total / n_total if n_total else float("nan")
        lb = _lower_bound(np.asarray(fractions), met_total, n_total, confidence)
        qv = float(np.quantile(pooled, quantile)) if pooled.size else float("nan")
        ok = bool(np.isfinite(lb) and lb >= quantile)
        feasible &= ok
        rows[name] = (tau, frac, lb, qv, n_total)
    return Evaluation(capacity, feasible, rows)


def _with(cfg, seed: int, capacity: float):
    from gmm_volunteer.run.config import apply_overrides, config_from_dict

    data = apply_overrides(cfg.model_dump(mode="json", by_alias=True),
                           {"seed": seed, "server.capacity": float(capacity)})
    return config_from_dict(data, source="capacity search")


def _simulate(args):
    run_fn, cfg = args
    if run_fn is None:
        from gmm_volunteer.run.engine import simulate as run_fn
    return run_fn(cfg, progress=False)


def find_capacity(
    cfg,
    targets: dict,
    *,
    quantile: float = 0.99,
    confidence: float = 0.95,
    seeds=(0, 1, 2),
    lo: float = 1.0,
    hi: float = 100.0,
    rel_tol: float = 0.05,
    max_evaluations: int = 20,
    completed_only: bool = False,
    run_fn: Callable | None = None,
    workers: int = 1,
    log: Callable[[str], None] | None = print,
    before: Callable[[float], None] | None = None,
) -> CapacityResult:
    """Smallest server capacity multiplier in [lo, hi] meeting `targets` (see module doc).

    `targets` maps request type names (or ``"*"`` for every type) to latency bounds in
    seconds; `quantile` is 1 - eps. `run_fn(cfg, progress=False) -> RunRecord` defaults
    to the engine; seeds of a candidate run on `workers` processes. `log` receives each
    evaluation's lines when it is done, `before(capacity)` is called before it starts.
    """
    if not 0 < quantile < 1:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo}, hi={hi}")
    if rel_tol <= 0:
        raise ValueError(f"relative tolerance must be > 0, got {rel_tol}")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("need at least one seed")
    cache: dict[float, Evaluation] = {}
    path: list[Evaluation] = []

    def evaluate(m: float) -> Evaluation:
        if m in cache:
            return cache[m]
        if before is not None:
            before(m)
        cfgs = [_with(cfg, s, m) for s in seeds]
        if workers > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=min(workers, len(cfgs))) as pool:
                records = list(pool.map(_simulate, [(run_fn, c) for c in cfgs]))
        else:
            records = [_simulate((run_fn, c)) for c in cfgs]
        names = list(records[0].request_type_names)
        ev = evaluate_records(records, m, targets, names, quantile, confidence, completed_only)
        cache[m] = ev
        path.append(ev)
        if log is not None:
            log(ev.line(quantile, confidence))
        return ev

    def result(cap, low=None):
        return CapacityResult(cap, path, quantile, confidence, dict(targets), low=low, rel_tol=rel_tol,
                              max_evaluations=max_evaluations,
                              budget_stopped=low is not None and hi / lo > 1 + rel_tol)

    if not evaluate(hi).feasible:
        return result(None)
    if evaluate(lo).feasible:
        return result(lo)
    while hi / lo > 1 + rel_tol and len(path) < max_evaluations:
        mid = math.sqrt(lo * hi)
        if evaluate(mid).feasible:
            hi = mid
        else:
            lo = mid
    return result(hi, lo)
