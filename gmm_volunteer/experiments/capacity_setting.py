"""Cheapest autoscaler setting meeting latency targets (paper 2.4, eq. 3; issue 11 item 5).

Eq. 3 minimises the server's capacity subject to P(latency_k <= tau_k) >= 1 - eps_k.
With an autoscaler (docs/model.md D17) the capacity changes during a run, so the cost is
the **capacity-hours** the autoscaler spends, and what the operator chooses is one of its
numeric options (a *setting*: ``rho_target`` of ``capacity_rule``, the ``target`` of
``reactive``, the ``budget`` of ``la_imr``, ...). For one value of the setting the config
is run with every seed (the same seeds for every value: common random numbers), and

* the cost is the mean over seeds of the run's capacity-hours, in capacity multiplier x h
  (the dedicated capacity over ``base_profile``, integrated over the run: 4 units of
  ``unit: 1`` for one hour are 4 capacity-h; x ``base_profile.cpu`` / 100 gives CPU
  core-hours), with a Student-t interval over the seeds;
* feasibility is the scalar capacity search's test (`capacity.evaluate_records`: per
  request type, a one-sided lower confidence bound of the fraction of ended requests
  within tau_k, Student-t over seeds, or Clopper-Pearson with one seed).

Neither the cost nor feasibility need be monotone in a setting (a higher utilization
target buys fewer units, but the surges it then misses may lengthen queues that a
latency-driven rule answers with more units later), so the search assumes neither:

1. **grid**: ``grid_points`` values evenly spaced over the bounded range [lo, hi];
2. **refinement**: around the cheapest feasible value found so far, the midpoints to its
   evaluated neighbours on either side are evaluated (a cheaper feasible value, if the
   cost and the verdict vary smoothly at the grid's resolution, lies between the best
   and a neighbour: towards a cheaper infeasible neighbour the boundary, towards a
   feasible one the cost's minimum), until both gaps are at most ``tol`` x (hi - lo)
   (1 for an integer option) or the budget is spent.

What this does assume: that the cheapest feasible region is at least one grid spacing
wide where the grid meets it, and that within a grid cell the cost and the verdict
change at most once. A feasible island narrower than the spacing between grid values
can be missed; more grid points (``grid_points``) shrink that risk. The answer is the
cheapest *evaluated* feasible value, by mean capacity-hours; every other evaluated
value's paired difference to it (common random numbers, so the difference has less
noise than either cost) is reported with its interval, so values not distinguishable
in cost from the answer can be seen.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence, Union, get_args, get_origin

import numpy as np

from gmm_volunteer.model.constants import RESOURCES

TABLE_KIND = "gmmv-capacity-setting"
PREFIX = "autoscaler_options."
CPU = RESOURCES.index("cpu")


# -------------------------------------------------------------------------------------
# The setting: a numeric option of the config's autoscaler
# -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """A numeric option of an autoscaler: ``key`` (dotted, ``autoscaler_options.X`` or
    ``autoscaler_options.monitor.X``), its path inside the options and its type."""

    key: str
    path: tuple[str, ...]
    integer: bool

    @property
    def name(self) -> str:
        return ".".join(self.path)

    def values(self, lo: float, hi: float, n: int) -> list[float]:
        """`n` values evenly spaced over [lo, hi] (integers, deduplicated, for an int option)."""
        xs = np.linspace(lo, hi, n)
        if self.integer:
            return sorted({int(round(x)) for x in xs})
        return [float(x) for x in xs]

    def midpoint(self, a: float, b: float) -> float | None:
        """The value halfway between two evaluated values; None when no new value fits."""
        m = (a + b) / 2.0
        if self.integer:
            m = int(math.floor(m))
            return None if m in (a, b) else m
        return float(f"{m:.12g}")  # 0.425, not 0.42500000000000004, in the path


def _numeric(annotation: Any) -> bool | None:
    """True for an int, False for a float, None for anything else (bool, str, Literal,
    a model, a list). ``X | None`` counts as X."""
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        kinds = {_numeric(a) for a in inner}
        if None in kinds or not kinds:
            return None
        return all(kinds)
    if annotation is bool or get_origin(annotation) is Literal:
        return None
    if annotation is int:
        return True
    if annotation is float:
        return False
    return None


def resolve_setting(cfg, key: str) -> Setting:
    """The numeric option `key` of `cfg`'s autoscaler; `ValueError` naming what is wrong
    (a fixed autoscaler, a key outside ``autoscaler_options``, an unknown key with a
    close name suggested, an option that is not a number)."""
    from pydantic import BaseModel

    from gmm_volunteer.model.suggest import did_you_mean
    from gmm_volunteer.policies.registry import policy_class

    policy = policy_class("autoscaler", cfg.autoscaler)
    if policy is None or not getattr(policy, "scales", False):
        raise ValueError(f"the config's autoscaler {cfg.autoscaler!r} does not scale, so it has no "
                         "setting to search; name a scaling one, e.g. --set autoscaler=capacity_rule "
                         "(or search the fixed capacity without --setting)")
    if not key.startswith(PREFIX) or len(key) == len(PREFIX):
        fields = policy.Options.model_fields
        example = next((f for f, info in fields.items() if _numeric(info.annotation) is not None), next(iter(fields)))
        raise ValueError(f"{key!r}: name an option of the autoscaler, {PREFIX}KEY "
                         f"(e.g. {PREFIX}{example})")
    path = tuple(key[len(PREFIX):].split("."))
    model, annotation = policy.Options, None
    for i, part in enumerate(path):
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ValueError(f"{key}: {'.'.join(path[:i])} has no sub-options")
        fields = model.model_fields
        if part not in fields:
            where = PREFIX + ".".join(path[:i] + (part,))
            raise ValueError(f"{where}: {cfg.autoscaler!r} has no option {part!r}"
                             f"{did_you_mean(part, fields)} (options: {', '.join(fields)})")
        annotation = fields[part].annotation
        model = annotation
    kind = _numeric(annotation)
    if kind is None:
        shown = getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")
        raise ValueError(f"{key}: not a numeric option ({shown}); the search varies a number")
    return Setting(key, path, kind)


def with_setting(cfg, setting: Setting, value: float, seed: int | None = None):
    """`cfg` with the setting at `value` (and the seed, if given); `ConfigError` if the
    value is refused by the autoscaler's options model."""
    from gmm_volunteer.run.config import apply_overrides, config_from_dict

    over: dict[str, Any] = {setting.key: int(value) if setting.integer else float(value)}
    if seed is not None:
        over["seed"] = seed
    data = apply_overrides(cfg.model_dump(mode="json", by_alias=True), over)
    return config_from_dict(data, source="setting search")


def parse_range(text: str, setting: Setting) -> tuple[float, float]:
    """``"0.3:0.9"`` (or ``"0.3,0.9"``) -> (0.3, 0.9); `ValueError` if not two numbers
    with lo < hi (for an int option: at least two integers in between)."""
    parts = str(text).replace(",", ":").split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        lo, hi = (float(p) for p in parts)
    except ValueError:
        example = "1:10" if setting.integer else "0.3:0.9"  # an integer option needs two integers
        raise ValueError(f"{text!r}: write LO:HI, e.g. {example}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{text!r}: the bounds must be finite")
    if not lo < hi:
        raise ValueError(f"{text!r}: empty range (need LO < HI)")
    if setting.integer:
        lo, hi = math.ceil(lo), math.floor(hi)
        if not lo < hi:
            raise ValueError(f"{text!r}: {setting.key} is an integer; the range holds fewer than two")
    return lo, hi


# -------------------------------------------------------------------------------------
# One evaluation
# -------------------------------------------------------------------------------------


def capacity_hours(record, base_cpu: float) -> float:
    """Capacity-hours of one run in capacity multiplier x h: the dedicated capacity per
    step over ``base_profile`` summed over the steps (1 s each) / 3600. An autoscaler
    scales every resource together (D17), so the CPU column stands for all."""
    cap = np.asarray(record.dedicated_capacity, np.float64)[:, CPU]
    return float(cap.sum() / base_cpu / 3600.0)


def mean_interval(x: Sequence[float], confidence: float) -> tuple[float, float, float]:
    """Mean and two-sided Student-t interval over independent replicates; with one
    replicate the interval is the point itself (no spread can be estimated)."""
    from scipy import stats

    x = np.asarray(x, np.float64)
    m = float(x.mean())
    if x.size < 2:
        return m, m, m
    h = float(stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return m, m - h, m + h


@dataclass
class SettingEvaluation:
    index: int
    phase: str  # "grid" or "refine"
    value: float
    hours: np.ndarray  # capacity-hours per seed (seed order)
    feasible: bool
    rows: dict  # per request type: (tau, fraction, lower bound, quantile, requests)
    actions: float = float("nan")  # scaling actions that took effect, mean over seeds
    cost: tuple[float, float, float] = field(init=False)  # mean, interval low, high

    def __post_init__(self):
        self.cost = (float("nan"),) * 3

    def line(self, name: str, quantile: float, confidence: float) -> str:
        m, lo, hi = self.cost
        verdict = "meets the targets" if self.feasible else "misses"
        out = [f"{name}={self.value:g}: {m:.3f} capacity-h [{lo:.3f}, {hi:.3f}] "
               f"({100 * confidence:g}% over {self.hours.size} seeds), {self.actions:.1f} scaling actions; {verdict}"]
        from gmm_volunteer.experiments.capacity import bound_miss

        for k, (tau, frac, lb, qv, n) in self.rows.items():
            mark = "ok  " if lb >= quantile else ("MISS (bound)" if bound_miss(frac, lb, quantile) else "MISS")
            out.append(f"  {mark} {k:<10} P(latency <= {tau:g} s) = {frac:.4f}, lower bound {lb:.4f} "
                       f"(need {quantile:g}); P{100 * quantile:g} = {qv:g} s; {n} requests")
        return "\n".join(out)


def simulation_evaluator(cfg, setting: Setting, targets: dict, seeds: Sequence[int], *,
                         quantile: float, confidence: float, completed_only: bool = False,
                         run_fn: Callable | None = None, workers: int = 1):
    """value -> (hours per seed, feasible, rows, mean actions): the config with the
    setting at `value`, run on every seed (common random numbers)."""
    from gmm_volunteer.experiments.capacity import _simulate, evaluate_records

    base_cpu = float(cfg.base_profile.as_array()[CPU])

    def evaluate(value: float):
        cfgs = [with_setting(cfg, setting, value, s) for s in seeds]
        if workers > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=min(workers, len(cfgs))) as pool:
                records = list(pool.map(_simulate, [(run_fn, c) for c in cfgs]))
        else:
            records = [_simulate((run_fn, c)) for c in cfgs]
        hours = np.array([capacity_hours(r, base_cpu) for r in records])
        names = list(records[0].request_type_names)
        ev = evaluate_records(records, value, targets, names, quantile, confidence, completed_only)
        acts = [0 if r.scaling_actions is None else int(np.count_nonzero(np.asarray(r.scaling_actions)[:, 1] >= 0))
                for r in records]
        return hours, ev.feasible, ev.rows, float(np.mean(acts))

    return evaluate


# -------------------------------------------------------------------------------------
# The search
# -------------------------------------------------------------------------------------


@dataclass
class SettingResult:
    setting: Setting
    best: SettingEvaluation | None  # None: no evaluated value met the targets
    path: list[SettingEvaluation]
    lo: float
    hi: float
    quantile: float
    confidence: float
    stopped_by_budget: bool

    def by_value(self) -> list[SettingEvaluation]:
        return sorted(self.path, key=lambda e: e.value)

    def verdict_changes(self) -> int:
        """How often the verdict flips along the evaluated values in order (1 for a
        setting whose feasibility is monotone; more shows it is not, or noise)."""
        v = [e.feasible for e in self.by_value()]
        return sum(a != b for a, b in zip(v, v[1:]))

    def paired_difference(self, ev: SettingEvaluation) -> tuple[float, float, float]:
        """Capacity-hours of `ev` minus the answer's, paired over seeds (the same seeds
        for both: common random numbers), mean and Student-t interval."""
        if self.best is None:
            return (float("nan"),) * 3
        return mean_interval(ev.hours - self.best.hours, self.confidence)

    def bracket(self) -> tuple[float | None, float | None]:
        """The evaluated values next to the answer, below and above (None at an end)."""
        vals = [e.value for e in self.by_value()]
        i = vals.index(self.best.value)
        return (vals[i - 1] if i > 0 else None, vals[i + 1] if i + 1 < len(vals) else None)

    def text(self) -> str:
        name = self.setting.name
        lines = []
        if self.best is None:
            lines.append(f"no evaluated {name} in [{self.lo:g}, {self.hi:g}] meets the targets "
                         f"({len(self.path)} evaluations)")
            return "\n".join(lines)
        b = self.best
        m, lo, hi = b.cost
        below, above = self.bracket()
        lines.append(f"cheapest {name} meeting the targets: {b.value:g} ({m:.3f} capacity-h, "
                     f"{100 * self.confidence:g}% interval over seeds [{lo:.3f}, {hi:.3f}]); "
                     f"evaluated neighbours {'-' if below is None else f'{below:g}'} and "
                     f"{'-' if above is None else f'{above:g}'}")
        cheaper = [e for e in self.path if e.cost[0] < m]
        lines.append(f"  {len(cheaper)} cheaper evaluated value{'s' if len(cheaper) != 1 else ''}, "
                     "every one missing the targets" if cheaper else "  no evaluated value is cheaper")
        close = [e for e in self.path if e is not b and e.feasible and self.paired_difference(e)[1] <= 0]
        if close:
            lines.append(f"  feasible values not shown more expensive (paired {100 * self.confidence:g}% "
                         "interval of the difference includes 0): "
                         + ", ".join(f"{e.value:g}" for e in sorted(close, key=lambda e: e.value)))
        flips = self.verdict_changes()
        if flips > 1:
            lines.append(f"  the verdict changes {flips} times along the evaluated values: feasibility "
                         "is not monotone in the setting here (or noise near the boundary)")
        if self.stopped_by_budget:
            lines.append("  stopped by the evaluation budget before the tolerance was reached")
        return "\n".join(lines)


def find_setting(
    evaluator: Callable[[float], tuple],
    setting: Setting,
    lo: float,
    hi: float,
    *,
    quantile: float = 0.99,
    confidence: float = 0.95,
    grid_points: int = 5,
    tol: float = 0.05,
    max_evaluations: int = 15,
    log: Callable[[SettingEvaluation], None] | None = None,
    before: Callable[[int, str, float], None] | None = None,
) -> SettingResult:
    """The cheapest evaluated value of `setting` in [lo, hi] meeting the targets (module
    doc: a grid, then refinement around the best). `evaluator(value)` returns (hours per
    seed, feasible, rows, mean actions); `before(n, phase, value)` is called before the
    n-th evaluation starts, `log(evaluation)` after it."""
    if not lo < hi:
        raise ValueError(f"empty range [{lo:g}, {hi:g}]")
    if grid_points < 2:
        raise ValueError(f"grid_points must be >= 2, got {grid_points}")
    if tol <= 0:
        raise ValueError(f"tolerance must be > 0, got {tol}")
    if max_evaluations < 1:
        raise ValueError(f"max_evaluations must be >= 1, got {max_evaluations}")
    path: list[SettingEvaluation] = []
    seen: dict[float, SettingEvaluation] = {}

    def evaluate(value: float, phase: str) -> SettingEvaluation:
        if before is not None:
            before(len(path) + 1, phase, value)
        hours, feasible, rows, actions = evaluator(value)
        ev = SettingEvaluation(len(path) + 1, phase, value, np.asarray(hours, np.float64), bool(feasible),
                               rows, float(actions))
        ev.cost = mean_interval(ev.hours, confidence)
        path.append(ev)
        seen[value] = ev
        if log is not None:
            log(ev)
        return ev

    def best() -> SettingEvaluation | None:
        ok = [e for e in path if e.feasible]
        # ties (equal mean cost) go to the smaller value, so the answer is reproducible
        return min(ok, key=lambda e: (e.cost[0], e.value)) if ok else None

    budget_hit = False
    for v in setting.values(lo, hi, grid_points):
        if len(path) >= max_evaluations:
            budget_hit = True
            break
        evaluate(v, "grid")
    gap = 1.0 if setting.integer else tol * (hi - lo)
    while not budget_hit and (b := best()) is not None:
        vals = sorted(seen)
        i = vals.index(b.value)
        todo = []
        for j in (i - 1, i + 1):
            if 0 <= j < len(vals) and abs(vals[j] - b.value) > gap:
                m = setting.midpoint(b.value, vals[j])
                if m is not None and m not in seen:
                    todo.append(m)
        if not todo:
            break
        for m in todo:
            if len(path) >= max_evaluations:
                budget_hit = True
                break
            evaluate(m, "refine")
    return SettingResult(setting, best(), path, lo, hi, quantile, confidence, budget_hit)


def path_rows(result: SettingResult) -> list[dict]:
    """One row per evaluation, in evaluation order: the value, capacity-hours (mean,
    interval, per seed), the paired difference to the answer, the verdict and, per
    request type, tau, fraction met, lower bound, observed quantile and requests."""
    rows = []
    for e in result.path:
        d = result.paired_difference(e)
        row = {"evaluation": e.index, "phase": e.phase, "setting": result.setting.key, "value": e.value,
               "capacity_hours": e.cost[0], "capacity_hours_low": e.cost[1], "capacity_hours_high": e.cost[2],
               "capacity_hours_per_seed": " ".join(f"{h:.6g}" for h in e.hours),
               "difference_to_best": d[0], "difference_low": d[1], "difference_high": d[2],
               "scaling_actions": e.actions, "feasible": e.feasible,
               "best": result.best is not None and e is result.best}
        for k, (tau, frac, lb, qv, n) in e.rows.items():
            row.update({f"{k}_tau_s": tau, f"{k}_fraction": frac, f"{k}_lower_bound": lb,
                        f"{k}_quantile_s": qv, f"{k}_requests": n})
        rows.append(row)
    return rows
