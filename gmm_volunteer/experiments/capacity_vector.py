"""Cheapest server capacity vector meeting per-type latency targets (paper 2.4, eq. 3).

Eq. 3:  min_a ||a||_w  s.t.  P(latency_k <= tau_k) >= 1 - eps_k  for every request type k,

with a the server's maximum allocation per resource and ||.||_w a weighted l1 norm. Here
a is written as multipliers m_r of ``base_profile`` (a_r = m_r x base_r) and the cost is
sum_r w_r m_r: w_r is the price of one base profile's worth of resource r (docs/model.md
D20). A vector is *feasible* when, on the same seeds for every vector (common random
numbers), the one-sided lower confidence bound of every type's fraction within tau_k is
at least 1 - eps_k (`gmm_volunteer.experiments.capacity.evaluate_records`: Student-t over seeds,
Clopper-Pearson for one seed).

Why this search. Feasibility is taken to be monotone (more of any resource never hurts),
so the feasible set is closed upwards and the optimum lies on its frontier. Each
evaluation is a set of full simulations, so the search must spend few of them, and
noise (the bound moves with the seeds) rules out gradients. Two phases:

1. *Coordinate bisection.* From the top of the range (which must be feasible), each
   searched resource in turn, most expensive first, is lowered by geometric bisection
   to the smallest value still feasible with the others fixed; passes repeat until no
   resource can be lowered by the tolerance. The result cannot be improved by lowering
   any one resource: it is on the frontier. When resources do not substitute for each
   other (the feasible set is a box, e.g. memory needs its own floor and CPU its own),
   this is the optimum.
2. *Exchange moves.* Where resources substitute (more CPU drains queues so less memory
   is held, or the like), a frontier point can still be improved by raising one
   resource and lowering another. For every ordered pair (j up, i down) the search
   raises m_j by a factor s and evaluates m_i just below its break-even value (where
   the saving pays for the raise): if that misses, the move cannot pay (one
   simulation); if it meets, m_i is bisected further and the move accepted, and phase 1
   runs again. s starts at 2 and shrinks geometrically to the tolerance (a pattern
   search along the frontier). A move whose raise costs more than lowering m_i to the
   bottom could save is never simulated.

Every bisection first bounds its bracket by what earlier evaluations imply under
monotonicity (a feasible vector below the candidate in every other resource, an
infeasible one above it), so later moves cost few simulations. A black-box optimiser
(optuna, CMA-ES) would need far more evaluations to locate a constraint boundary at this
precision in up to five dimensions and gives no such certificate; coordinate bisection
reuses the scalar search's logic and states what it has shown: at the answer, lowering
any searched resource by the tolerance misses a target (the infeasible neighbours are
in the path).

The cost interval reported is the search's resolution: between the cheapest infeasible
neighbour's cost and the answer's. The statistical confidence is the bound's level: each
verdict holds at `confidence` per request type (not jointly over the path).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from gmm_volunteer.experiments.capacity import ALL_TYPES, evaluate_records, parse_duration
from gmm_volunteer.model.constants import RESOURCES

# No subtask needs the server's storage: the server holds every subtask's data a priori
# (paper 2.2) and its storage limit is never enforced (policies/executor.py), so storage
# is fixed at the config's value rather than searched (docs/model.md D20).
NEEDED = tuple(r for r in RESOURCES if r != "storage")


@dataclass(frozen=True)
class Target:
    """Latency threshold tau_k (s) and level 1 - eps_k of one request type."""

    tau: float
    level: float


def parse_level(text: str) -> float:
    """``"0.99"`` or ``"99%"`` -> 0.99; must lie in (0, 1)."""
    t = str(text).strip()
    try:
        value = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"cannot read level {text!r} (write e.g. 0.99 or 99%)") from None
    if not 0.0 < value < 1.0:
        raise ValueError(f"level {text!r} must lie strictly between 0 and 1 (it is 1 - eps)")
    return value


def parse_level_targets(specs: Sequence[str], default_level: float) -> dict[str, Target]:
    """``[TYPE=]DURATION[@LEVEL]`` -> {type or "*": Target}; LEVEL = 1 - eps_k, by
    default `default_level`. E.g. ``light5=10s@0.999``, ``heavy10=30s@95%``, ``20s``."""
    out: dict[str, Target] = {}
    for spec in specs:
        body, at, level = str(spec).partition("@")
        name, sep, dur = body.rpartition("=")
        key = name.strip() if sep else ALL_TYPES
        if sep and not key:
            raise ValueError(f"target {spec!r}: empty request type name")
        if key in out:
            raise ValueError(f"target for {'all request types' if key == ALL_TYPES else repr(key)} given twice")
        try:
            out[key] = Target(parse_duration(dur), parse_level(level) if at else default_level)
        except ValueError as exc:
            raise ValueError(f"target {spec!r}: {exc}") from None
    if not out:
        raise ValueError("no latency target given")
    return out


def parse_resource_values(text: str, what: str, *, positive: bool) -> dict[str, float]:
    """``"cpu=1,memory=0.01"`` -> {"cpu": 1.0, "memory": 0.01}; names from RESOURCES."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"{what} {part!r}: expected RESOURCE=VALUE (e.g. cpu=1)")
        if name not in RESOURCES:
            raise ValueError(f"{what} {part!r}: unknown resource {name!r} (one of: {', '.join(RESOURCES)})")
        if name in out:
            raise ValueError(f"{what}: {name} given twice")
        try:
            x = float(value)
        except ValueError:
            raise ValueError(f"{what} {part!r}: {value.strip()!r} is not a number") from None
        if not math.isfinite(x) or x < 0 or (positive and x == 0):
            raise ValueError(f"{what} {part!r}: must be a finite number {'> 0' if positive else '>= 0'}")
        out[name] = x
    if not out:
        raise ValueError(f"{what}: empty (expected e.g. cpu=1,memory=0.5)")
    return out


def parse_resource_list(text: str, what: str) -> list[str]:
    """``"cpu,memory"`` -> ["cpu", "memory"] (known, distinct resources)."""
    names = [p.strip() for p in str(text).split(",") if p.strip()]
    if not names:
        raise ValueError(f"{what}: empty (expected e.g. cpu,memory)")
    for n in names:
        if n not in RESOURCES:
            raise ValueError(f"{what}: unknown resource {n!r} (one of: {', '.join(RESOURCES)})")
    if len(set(names)) != len(names):
        raise ValueError(f"{what}: a resource is named twice ({text})")
    return names


# -------------------------------------------------------------------------------------
# Evaluating one vector
# -------------------------------------------------------------------------------------


@dataclass
class Point:
    """One evaluated capacity vector (multipliers of base_profile, RESOURCES order)."""

    index: int
    phase: str
    m: np.ndarray
    cost: float
    feasible: bool
    # per request type: (tau, level, pooled fraction met, lower bound, observed quantile, n)
    rows: dict = field(default_factory=dict)

    def vector_text(self, searched: Sequence[str]) -> str:
        return " ".join(f"{r}={self.m[RESOURCES.index(r)]:.3g}x" for r in searched)

    def line(self, searched: Sequence[str], confidence: float) -> str:
        head = (f"[{self.index}] {self.phase}: {self.vector_text(searched)} cost {self.cost:.4g}: "
                + ("meets the targets" if self.feasible else "misses"))
        lines = [head]
        for k, (tau, level, frac, lb, qv, n) in self.rows.items():
            mark = "ok  " if lb >= level else "MISS"
            lines.append(f"    {mark} {k:<10} P(latency <= {tau:g} s) = {frac:.4f}, {100 * confidence:g}% "
                         f"lower bound {lb:.4f} (need {level:g}); P{100 * level:g} = {qv:g} s; {n} requests")
        return "\n".join(lines)


def evaluate_targets(records, targets: Mapping[str, Target], type_names, confidence: float,
                     completed_only: bool = False) -> tuple[bool, dict]:
    """Feasibility of one vector from its runs (one record per seed), each type against
    its own tau_k and level 1 - eps_k; rows as in `Point.rows`."""
    names = list(type_names)
    for key in targets:
        if key != ALL_TYPES and key not in names:
            raise ValueError(f"unknown request type {key!r} in targets (known: {', '.join(names)})")
    check = [k for k in targets if k != ALL_TYPES]
    if ALL_TYPES in targets:
        # As in the scalar search: '*' covers every type that occurred in some run.
        seen = set()
        for rec in records:
            seen.update(int(v) for v in np.unique(np.asarray(rec.request_type)))
        check += [t for i, t in enumerate(names) if t not in targets and i in seen]
    rows, feasible = {}, True
    for name in check:
        tg = targets.get(name, targets.get(ALL_TYPES))
        ev = evaluate_records(records, 0.0, {name: tg.tau}, names, tg.level, confidence, completed_only)
        tau, frac, lb, qv, n = ev.rows[name]
        rows[name] = (tau, tg.level, frac, lb, qv, n)
        feasible &= ev.feasible
    return feasible, rows


def simulation_evaluator(cfg, targets: Mapping[str, Target], seeds: Sequence[int], *,
                         confidence: float, completed_only: bool = False,
                         run_fn: Callable | None = None, workers: int = 1):
    """m (multipliers, RESOURCES order) -> (feasible, rows): the config with the server's
    ``resource_capacity`` set to m, run on every seed (common random numbers)."""
    from gmm_volunteer.experiments.capacity import _simulate
    from gmm_volunteer.run.config import apply_overrides, config_from_dict

    base = cfg.model_dump(mode="json", by_alias=True)
    base.setdefault("server", {}).pop("max_allocation", None)  # replaced by multipliers below

    def evaluate(m: np.ndarray):
        cap = {r: float(x) for r, x in zip(RESOURCES, m)}
        cfgs = [config_from_dict(apply_overrides(base, {"seed": s, "server.resource_capacity": cap}),
                                 source="capacity search") for s in seeds]
        if workers > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=min(workers, len(cfgs))) as pool:
                records = list(pool.map(_simulate, [(run_fn, c) for c in cfgs]))
        else:
            records = [_simulate((run_fn, c)) for c in cfgs]
        return evaluate_targets(records, targets, records[0].request_type_names, confidence, completed_only)

    return evaluate


# -------------------------------------------------------------------------------------
# The search
# -------------------------------------------------------------------------------------


class BudgetSpent(Exception):
    """The evaluation budget ran out; the search stops with the best point so far."""


@dataclass
class VectorResult:
    best: Point | None  # None: the start (top of the range) misses
    path: list[Point]
    searched: list[str]
    weights: np.ndarray
    tol: float
    confidence: float
    stopped_by_budget: bool = False
    lo: float = math.nan
    neighbours: dict = field(default_factory=dict)  # resource -> (value, witness Point) or None

    def cost_bounds(self) -> tuple[float, float]:
        """(lower, upper) cost of the frontier near the answer at the search's resolution:
        the cheapest single-resource neighbour shown to miss, and the answer."""
        if self.best is None:
            return (math.nan, math.nan)
        c = self.best.cost
        lows = [c - self.weights[RESOURCES.index(r)] * (self.best.m[RESOURCES.index(r)] - nb[0])
                for r, nb in self.neighbours.items() if nb is not None]
        return (min(lows) if lows else c, c)

    def non_monotone(self) -> int:
        """Missing points that dominate a meeting point in every resource (monotonicity,
        which the search assumes, is then broken by the noise of the bound)."""
        ok = [p.m for p in self.path if p.feasible]
        return sum(1 for p in self.path if not p.feasible and any(np.all(p.m >= q) for q in ok))

    def text(self) -> str:
        if self.best is None:
            top = self.path[0]
            return f"targets not met at the top of the range ({top.vector_text(self.searched)})"
        lo, hi = self.cost_bounds()
        b = self.best
        lines = [f"cheapest capacity vector found: {b.vector_text(RESOURCES)} (multipliers of base_profile)",
                 f"cost ||a||_w = {b.cost:.4g} (weights {', '.join(f'{r}={w:g}' for r, w in zip(RESOURCES, self.weights))}); "
                 f"frontier cost at the search's resolution within [{lo:.4g}, {hi:.4g}]"]
        for k, (tau, level, frac, lb, qv, n) in b.rows.items():
            lines.append(f"  {k}: P(latency <= {tau:g} s) = {frac:.4f}, {100 * self.confidence:g}% lower bound "
                         f"{lb:.4f} >= {level:g}")
        bottom = [r for r in self.searched if b.m[RESOURCES.index(r)] <= self.lo * (1 + 1e-12)]
        if bottom:
            lines.append(f"  at the bottom of the range ({self.lo:g}x): {', '.join(bottom)}")
        unshown = [r for r, nb in self.neighbours.items() if nb is None and r not in bottom]
        if unshown:
            lines.append(f"  not shown to be minimal (no missing neighbour evaluated): {', '.join(unshown)}")
        clash = self.non_monotone()
        if clash:
            lines.append(f"  {clash} evaluated vector(s) miss although they have at least the resources of one "
                         "that meets: the verdicts near the frontier are noisy; more seeds (--seeds N) steady them")
        if self.stopped_by_budget:
            lines.append("  stopped at the evaluation budget (--max-evaluations): the exchange phase "
                         "did not finish; the vector is on the frontier only if phase 1 finished")
        return "\n".join(lines)


class VectorSearch:
    """Coordinate bisection plus exchange moves (module docstring). `evaluator(m)` returns
    (feasible, rows) for a multiplier vector m in RESOURCES order; `start` gives the
    multipliers of the resources not searched (and is replaced by `hi` on the searched)."""

    def __init__(self, evaluator: Callable, start: np.ndarray, searched: Sequence[str], weights: np.ndarray, *,
                 lo: float = 1.0, hi: float = 100.0, tol: float = 0.05, max_evaluations: int = 60,
                 exchange: bool = True, log: Callable[[Point], None] | None = None,
                 before: Callable[[int, str, np.ndarray], None] | None = None):
        if not 0 < lo < hi:
            raise ValueError(f"need 0 < lo < hi, got lo={lo}, hi={hi}")
        if tol <= 0:
            raise ValueError(f"relative tolerance must be > 0, got {tol}")
        if max_evaluations < 1:
            raise ValueError(f"max_evaluations must be >= 1, got {max_evaluations}")
        if not searched:
            raise ValueError("no resource to search")
        self.evaluator, self.searched = evaluator, list(searched)
        self.idx = [RESOURCES.index(r) for r in self.searched]
        self.w = np.asarray(weights, dtype=np.float64)
        self.lo, self.hi, self.tol, self.budget, self.exchange = lo, hi, tol, max_evaluations, exchange
        self.start = np.array(start, dtype=np.float64)
        self.start[self.idx] = hi
        self.log, self.before = log, before
        self.path: list[Point] = []
        self.cache: dict[tuple, Point] = {}

    # -- evaluations ----------------------------------------------------------------

    def cost(self, m: np.ndarray) -> float:
        return float(np.dot(self.w, m))

    @staticmethod
    def _key(m: np.ndarray) -> tuple:
        return tuple(float(f"{x:.12g}") for x in m)

    def evaluate(self, m: np.ndarray, phase: str) -> Point:
        key = self._key(m)
        if key in self.cache:
            return self.cache[key]
        if len(self.path) >= self.budget:
            raise BudgetSpent
        if self.before is not None:
            self.before(len(self.path) + 1, phase, m)
        feasible, rows = self.evaluator(np.array(m))
        p = Point(len(self.path) + 1, phase, np.array(m), self.cost(m), bool(feasible), rows)
        self.cache[key] = p
        self.path.append(p)
        if self.log is not None:
            self.log(p)
        return p

    def _implied(self, m: np.ndarray, i: int) -> tuple[float, float]:
        """(largest value of resource i known infeasible, smallest known feasible) given
        m's other resources, by monotonicity from the points evaluated so far."""
        others = np.arange(len(m)) != i
        lo, hi = 0.0, math.inf
        for p in self.path:
            if p.feasible and np.all(p.m[others] <= m[others] * (1 + 1e-12)):
                hi = min(hi, p.m[i])
            elif not p.feasible and np.all(p.m[others] >= m[others] * (1 - 1e-12)):
                lo = max(lo, p.m[i])
        return lo, hi

    def lower(self, m: np.ndarray, i: int, phase: str) -> Point | None:
        """The evaluated feasible point with resource i lowered as far as feasible (to
        the tolerance), the others as in m; None when m itself misses."""
        name = RESOURCES[i]
        x = m.copy()
        bad, good = self._implied(x, i)
        good = min(good, x[i])
        if bad >= good:
            # Verdicts that contradict monotonicity (noise of the bound near the frontier):
            # infer nothing below, evaluate.
            bad = 0.0
        top = x.copy()
        top[i] = good
        if good >= math.inf or not self.evaluate(top, phase).feasible:
            return None
        if bad <= 0.0:
            if good <= self.lo * (1 + 1e-12):
                return self.evaluate(top, phase)
            # Probe just below first: at the frontier already, one evaluation says so.
            probe = max(self.lo, good / (1 + self.tol))
            x[i] = probe
            if not self.evaluate(x, f"{phase} (probe {name})").feasible:
                return self.evaluate(top, phase)
            good = probe
            if good > self.lo:
                x[i] = self.lo
                if self.evaluate(x, f"{phase} (bottom {name})").feasible:
                    return self.evaluate(x, phase)
            bad = self.lo
        while good / bad > 1 + self.tol and bad < good:
            x[i] = math.sqrt(bad * good)
            if self.evaluate(x, f"{phase} (bisect {name})").feasible:
                good = x[i]
            else:
                bad = x[i]
        x[i] = good
        return self.evaluate(x, phase)

    def _coordinate_passes(self, p: Point) -> Point:
        order = sorted(self.idx, key=lambda i: -self.w[i])  # most expensive first
        while True:
            moved = False
            for i in order:
                q = self.lower(p.m, i, f"lower {RESOURCES[i]}")
                if q is not None and q.m[i] < p.m[i] / (1 + 1e-9):
                    moved = moved or q.m[i] < p.m[i] / (1 + self.tol) * (1 + 1e-9)
                    p = q
            if not moved:
                return p

    def _exchange(self, p: Point) -> Point:
        s = 2.0
        while s > 1 + self.tol:
            improved = False
            for j in self.idx:
                for i in self.idx:
                    if i == j or p.m[j] >= self.hi:
                        continue
                    up = min(self.hi, p.m[j] * s)
                    # Not worth a simulation if even lowering i to the bottom cannot pay.
                    if self.w[j] * (up - p.m[j]) >= self.w[i] * (p.m[i] - self.lo):
                        continue
                    # The move pays iff resource i can go below its break-even value:
                    # one evaluation just below it decides (monotonicity), and only a
                    # paying move is bisected further.
                    phase = f"exchange {RESOURCES[j]} up, {RESOURCES[i]} down"
                    even = p.m[i] - self.w[j] * (up - p.m[j]) / self.w[i]
                    y = p.m.copy()
                    y[j], y[i] = up, max(self.lo, even / (1 + self.tol))
                    if not self.evaluate(y, phase).feasible:
                        continue
                    q = self.lower(y, i, phase)
                    if q is not None and q.cost < p.cost * (1 - 1e-9):
                        p = self._coordinate_passes(q)
                        improved = True
            if not improved:
                s = math.sqrt(s)
        return p

    def run(self) -> VectorResult:
        res = VectorResult(None, self.path, self.searched, self.w, self.tol, 0.0, lo=self.lo)
        first = self.evaluate(self.start, "start (top of the range)")
        if not first.feasible:
            return res
        best = first
        try:
            best = self._coordinate_passes(best)
            if self.exchange and len(self.idx) > 1:
                best = self._exchange(best)
        except BudgetSpent:
            res.stopped_by_budget = True
            best = min((p for p in self.path if p.feasible), key=lambda p: p.cost)
        res.best = best
        res.neighbours = self._neighbours(best)
        return res

    def _neighbours(self, best: Point) -> dict:
        """Per searched resource r: (v, witness), v the largest value of r below the
        answer shown to miss with the other resources at the answer, shown by `witness`,
        an evaluated missing point with r = v and every other resource at least the
        answer's (monotonicity); None when r is at the bottom of the range or nothing
        shows it."""
        out = {}
        for i in self.idx:
            others = np.arange(len(best.m)) != i
            cands = [p for p in self.path if not p.feasible and p.m[i] < best.m[i]
                     and np.all(p.m[others] >= best.m[others] * (1 - 1e-12))]
            w = max(cands, key=lambda p: p.m[i]) if cands else None
            out[RESOURCES[i]] = None if w is None else (float(w.m[i]), w)
        return out


def frontier(evaluator: Callable, start: np.ndarray, pair: Sequence[str], *, lo: float, hi: float,
             tol: float, points: int = 7, max_evaluations: int = 80, weights=None, log=None, before=None):
    """The feasible frontier over two resources (the others fixed at `start`): for each
    of `points` values of the first resource on a geometric grid over [lo, hi], the
    smallest feasible value of the second found by bisection. Returns (grid, minima,
    path, searched): a minimum is NaN where even `hi` of the second misses or where the
    evaluation budget ran out first, which `searched` (bool per grid value) tells apart.
    `weights` only price the evaluated vectors (the cost column)."""
    a, b = (RESOURCES.index(r) for r in pair)
    w = np.zeros(len(RESOURCES)) if weights is None else np.asarray(weights, dtype=np.float64)
    search = VectorSearch(evaluator, start, list(pair), w, lo=lo, hi=hi, tol=tol,
                          max_evaluations=max_evaluations, exchange=False, log=log, before=before)
    grid = np.geomspace(lo, hi, points)
    minima = np.full(points, np.nan)
    searched = np.zeros(points, dtype=bool)
    m = search.start.copy()
    try:
        for n, x in enumerate(grid[::-1]):  # from the top: earlier rows bound later ones
            m[a], m[b] = x, hi
            q = search.lower(m, b, f"frontier {pair[0]}={x:.3g}x")
            searched[points - 1 - n] = True
            if q is not None:
                minima[points - 1 - n] = q.m[b]
    except BudgetSpent:
        pass
    return grid, minima, search.path, searched


# -------------------------------------------------------------------------------------
# Tables and figure
# -------------------------------------------------------------------------------------

TABLE_KIND = "gmmv capacity vector search"


def path_table(path: Sequence[Point]):
    """One row per evaluated vector: multipliers, cost, verdict, per-type bounds."""
    import pandas as pd

    rows = []
    for p in path:
        row = {"evaluation": p.index, "phase": p.phase}
        row.update({r: float(x) for r, x in zip(RESOURCES, p.m)})
        row.update({"cost": p.cost, "feasible": p.feasible})
        for k, (tau, level, frac, lb, qv, n) in p.rows.items():
            row.update({f"{k}.tau_s": tau, f"{k}.level": level, f"{k}.fraction": frac,
                        f"{k}.lower_bound": lb, f"{k}.quantile_s": qv, f"{k}.requests": n})
        rows.append(row)
    return pd.DataFrame(rows)


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def frontier_figure(path: Sequence[Point], pair: Sequence[str], grid, minima, out, *, weights=None,
                    title: str = ""):
    """PNG of the frontier over `pair`: evaluated points (feasible / missing), the
    smallest feasible value of the second resource per value of the first, the feasible
    region shaded, and, with `weights`, the cheapest frontier point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, b = (RESOURCES.index(r) for r in pair)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ok = [p for p in path if p.feasible]
    bad = [p for p in path if not p.feasible]
    ax.scatter([p.m[a] for p in ok], [p.m[b] for p in ok], marker="o", s=18, color="tab:green",
               label="meets the targets", zorder=3)
    ax.scatter([p.m[a] for p in bad], [p.m[b] for p in bad], marker="x", s=22, color="tab:red",
               label="misses", zorder=3)
    sel = np.isfinite(minima)
    if sel.any():
        ax.step(grid[sel], minima[sel], where="post", color="k", lw=1.2, label="frontier (bisection)")
        ax.fill_between(grid[sel], minima[sel], np.nanmax(grid), step="post", color="tab:green", alpha=0.08)
        if weights is not None:
            w = np.asarray(weights, float)
            costs = w[a] * grid[sel] + w[b] * minima[sel]
            k = int(np.argmin(costs))
            ax.plot(grid[sel][k], minima[sel][k], "*", ms=14, color="tab:blue",
                    label=f"cheapest ({pair[0]}={grid[sel][k]:.3g}x, {pair[1]}={minima[sel][k]:.3g}x)", zorder=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"server {pair[0]} (x base_profile)")
    ax.set_ylabel(f"server {pair[1]} (x base_profile)")
    import textwrap

    ax.set_title("\n".join(textwrap.wrap(title or f"Feasible frontier over {pair[0]} x {pair[1]} (paper eq. 3)",
                                         70)), fontsize=9)
    ax.legend(fontsize=8, loc="center left")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
