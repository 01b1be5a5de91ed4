"""``la_imr``: the proactive autoscaler of seed 001 (LA-IMR, arXiv 2505.07417, sections
III-C/III-D and Algorithm 1), for one pool of units: the dedicated server.

Latency of a request served by N units at arrival rate lambda (seed 001, Eqs. 7-8 and 12):

    L(N, lambda) = alpha + beta x (lambda / N)^gamma  +  W_q(N, lambda, mu),

the affine power law of the per-unit arrival rate (an assumed form, not a derived one,
as the seed's critique shows; here it is fitted, `fit_latency_model`) plus the Erlang-C
mean wait of an M/M/N queue (`erlang_c_wait`) with per-unit service rate
mu = R_max / R (R the server work per request, measured as in ``capacity_rule``, R_max the
CPU of one unit). lambda is an EWMA of the observed arrival rate. The desired units are
the fewest N in [min_units, max_units] whose predicted L is within ``budget`` seconds
(``max_units`` if none is). LA-IMR checks a mean-latency model against a P99 target;
the seed's critique notes its P99 then exceeds the SLO; ``budget`` is therefore the
mean-latency budget, and the experiment reports P99 separately.

alpha, beta, gamma come from the simulator's own runs at fixed capacity
(`gmm_volunteer.experiments.latency_fit`, which calls `fit_latency_model` over (per-unit arrival
rate, mean latency minus W_q) points, docs/model.md D23); the defaults are placeholders
of the right order, for configs that do not give fitted values.
"""

from __future__ import annotations

import math

import numpy as np
from typing import Literal

from pydantic import Field

from gmm_volunteer.model.params import CPU
from gmm_volunteer.policies.autoscalers.base import AutoscalerOptions
from gmm_volunteer.policies.autoscalers.capacity_rule import EstimatingAutoscaler, LoadCount


def erlang_c(c: int, a: float) -> float:
    """Probability of waiting in an M/M/c queue with offered load a = lambda / mu
    (Erlang C); 1 when a >= c (unstable). Computed through the Erlang-B recursion
    B_k = a B_{k-1} / (k + a B_{k-1}), C = B_c / (1 - (a / c)(1 - B_c)), which avoids
    the factorials of the textbook formula."""
    if c <= 0 or a >= c:
        return 1.0
    if a <= 0:
        return 0.0
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    rho = a / c
    return b / (1.0 - rho * (1.0 - b))


def erlang_c_wait(c: int, lam: float, mu: float) -> float:
    """Mean wait in queue of M/M/c: C(c, lambda/mu) / (c mu - lambda); inf if unstable."""
    if lam <= 0:
        return 0.0
    if c <= 0 or lam >= c * mu:
        return math.inf
    return erlang_c(c, lam / mu) / (c * mu - lam)


def predicted_latency(n: int, lam: float, mu: float, alpha: float, beta: float, gamma: float) -> float:
    """alpha + beta (lambda / n)^gamma + W_q(n, lambda, mu) (seed 001, Eqs. 8 and 12)."""
    if n <= 0:
        return math.inf
    return alpha + beta * (lam / n) ** gamma + erlang_c_wait(n, lam, mu)


def eq5_latency(n: int, lam: float, mu: float, ref_latency: float, speedup: float, gamma: float,
                work: float, unit_cores: float, background: float = 0.0, floor: float = 0.0) -> float:
    """Seed 001 eq. 5 plus the Erlang-C wait: (L_m / S)(1 + U^gamma) + W_q(n, lambda, mu),
    U = (lambda R_m + B) / R_max the utilization of n units (R_m = `work` CPU-s per
    request, B = `background` cores busy with other work, R_max = n x `unit_cores`),
    at least `floor` (the utilization floor, docs/routing.md section 6.3)."""
    if n <= 0:
        return math.inf
    u = max(floor, (lam * work + background) / (n * unit_cores))
    return ref_latency / speedup * (1.0 + u ** gamma) + erlang_c_wait(n, lam, mu)


def fewest_units(lam: float, mu: float, budget: float, lo: int, hi: int,
                 alpha: float, beta: float, gamma: float, latency=None) -> int:
    """The fewest units in [lo, hi] whose predicted latency is within budget; hi if none.
    `latency(n)` replaces the affine law when given (eq. 5)."""
    for n in range(max(lo, 1), hi + 1):
        pred = latency(n) if latency is not None else predicted_latency(n, lam, mu, alpha, beta, gamma)
        if pred <= budget:
            return n
    return hi


def fit_latency_model(per_unit_rate, latency, weights=None) -> tuple[float, float, float]:
    """Least-squares fit of latency = alpha + beta x rate^gamma (seed 001, Eq. 8).

    `per_unit_rate`: arrival rate per unit (requests / s / unit) of fixed-capacity runs;
    `latency`: their mean latency of completed requests (s). Nonnegative alpha and beta,
    gamma in [0.1, 5] (scipy's bounded trust-region least squares from alpha = min
    latency, beta = its range, gamma = 1). Returns (alpha, beta, gamma)."""
    from scipy.optimize import curve_fit

    x = np.asarray(per_unit_rate, np.float64)
    y = np.asarray(latency, np.float64)
    ok = np.isfinite(x) & np.isfinite(y) & (x >= 0)
    x, y = x[ok], y[ok]
    if x.size < 3:
        raise ValueError(f"need at least 3 finite points to fit alpha, beta, gamma (got {x.size})")
    sigma = None if weights is None else 1.0 / np.sqrt(np.asarray(weights, np.float64)[ok])
    p0 = (float(y.min()), max(float(y.max() - y.min()), 1e-6), 1.0)
    popt, _ = curve_fit(lambda r, a, b, g: a + b * np.power(r, g), x, y, p0=p0, sigma=sigma,
                        bounds=([0.0, 0.0, 0.1], [np.inf, np.inf, 5.0]), maxfev=20000)
    return tuple(float(v) for v in popt)


class LaImrOptions(AutoscalerOptions):
    alpha: float = Field(35.0, ge=0)  # s, idle latency (placeholder: fit it)
    beta: float = Field(20.0, ge=0)  # s per (request/s/unit)^gamma
    gamma: float = Field(1.5, gt=0, le=10)  # rate ** gamma overflows beyond
    budget: float = Field(60.0, gt=0)  # s, mean-latency budget
    ewma: float = Field(0.3, gt=0, le=1)  # weight of the newest arrival-rate scrape
    work_per_request: float | None = Field(None, gt=0)  # CPU-s; None = measured
    # Seed 001's latency law: the affine power law (eqs. 7-8) or eq. 5 (issue 22).
    latency_form: Literal["affine", "eq5"] = "affine"
    # eq. 5's reference latency L_m (s; None: the work per request on one unit) and S.
    reference_latency: float | None = Field(None, gt=0)
    speedup: float = Field(1.0, gt=0)
    # Utilization floor rho_low: no scale-in while the server's CPU utilization is at or
    # above it (0: off), and the least U eq. 5 assumes.
    utilization_floor: float = Field(0.0, ge=0, le=1)
    # The load it scales on: routed to the server (default) or every request (D41).
    load: LoadCount = "routed"


class LaImr(EstimatingAutoscaler):
    name = "la_imr"
    Options = LaImrOptions

    def desired(self, obs, units: int, t: int) -> int:
        if obs is None:
            return units
        r = self.estimates(obs)
        if r is None:
            return units
        o = self.options
        mu = self.unit_cores / r  # requests / s one unit serves
        lam = self.lam.value
        latency = None
        if o.latency_form == "eq5":
            ref = o.reference_latency or r / self.unit_cores

            def latency(n):
                return eq5_latency(n, lam, mu, ref, o.speedup, o.gamma, r, self.unit_cores,
                                   floor=o.utilization_floor)
        want = fewest_units(lam, mu, o.budget, o.min_units, o.max_units, o.alpha, o.beta, o.gamma, latency)
        if o.utilization_floor > 0 and want < units and float(obs.utilization[CPU]) >= o.utilization_floor:
            return units  # rho_low: busy enough, keep the units
        return want
