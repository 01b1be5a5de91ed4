"""Duration laws of the model (paper section 2.2): online and offline periods, think
times and patience, each a law with survival function S(t) in seconds. The one
definition of each law: its name and code, its parameters, S(t), mean, median,
length-biased draws (for the stationary start, docs/model.md D2) and the inverse-survival
draw the kernels use. The config (`config.Dist`), the parameters (`params.dist_law`),
the engine and the kernels all read them from here.

A law travels to the kernels as ``[code, a, b]`` (float64): a and b are the law's
parameters in the order of `PARAMETERS` (exponential has only a; never has none).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

WEIBULL, LOGNORMAL, PARETO, EXPONENTIAL, NEVER = range(5)
NAMES = ("weibull", "lognormal", "pareto", "exponential", "never")  # NAMES[code]
CODES = {name: code for code, name in enumerate(NAMES)}
PARAMETERS = {  # config keys of a and b
    "weibull": ("scale", "shape"),       # S(t) = exp(-(t / scale)^shape)
    "lognormal": ("mu", "sigma"),        # S(t) = 1 - Phi((log t - mu) / sigma), log seconds
    "pareto": ("scale", "shape"),        # S(t) = (scale / t)^shape for t >= scale, else 1
    "exponential": ("mean",),            # S(t) = exp(-t / mean)
    "never": (),                         # S(t) = 1: the state never ends
}
# Longest duration in steps; a law's extreme tail and `never` are capped here. 2^50 steps
# (~36 million years) is never reached by a run, and t + MAX_DURATION fits an int64 timer.
MAX_DURATION = 1 << 50


def law_array(name: str, *ab: float) -> np.ndarray:
    """``[code, a, b]`` of the law `name` with parameters `ab` (see `PARAMETERS`)."""
    if name not in CODES:
        raise ValueError(f"unknown distribution {name!r}")
    a, b = (tuple(float(x) for x in ab) + (0.0, 0.0))[:2]
    return np.array([CODES[name], a, b], dtype=np.float64)


def survival(law, t):
    """S(t) for t in seconds (an array or a number)."""
    kind, a, b = int(law[0]), float(law[1]), float(law[2])
    t = np.asarray(t, dtype=float)
    if kind == WEIBULL:
        return np.exp(-((np.maximum(t, 0.0) / a) ** b))
    if kind == LOGNORMAL:
        from scipy.special import ndtr

        with np.errstate(divide="ignore"):
            z = (np.log(np.where(t > 0, t, 1.0)) - a) / b
        return np.where(t > 0, ndtr(-z), 1.0)
    if kind == PARETO:
        return np.where(t < a, 1.0, (a / np.maximum(t, a)) ** b)
    if kind == EXPONENTIAL:
        return np.exp(-np.maximum(t, 0.0) / a)
    return np.ones_like(t)[()]


def mean(law) -> float:
    """E[T]; infinite for `never` and for a Pareto law with shape <= 1."""
    kind, a, b = int(law[0]), float(law[1]), float(law[2])
    if kind == WEIBULL:
        return a * math.gamma(1.0 + 1.0 / b)
    if kind == LOGNORMAL:
        return math.exp(a + b * b / 2.0)
    if kind == PARETO:
        return a * b / (b - 1.0) if b > 1.0 else math.inf
    if kind == EXPONENTIAL:
        return a
    return math.inf


def median(law) -> float:
    kind, a, b = int(law[0]), float(law[1]), float(law[2])
    if kind == WEIBULL:
        return a * math.log(2.0) ** (1.0 / b)
    if kind == LOGNORMAL:
        return math.exp(a)
    if kind == PARETO:
        return a * 2.0 ** (1.0 / b)
    if kind == EXPONENTIAL:
        return a * math.log(2.0)
    return math.inf


def length_biased(law, size: int, g: np.random.Generator) -> np.ndarray:
    """Draws of the length-biased law (density t f(t) / E[T]); +inf for a state that
    never ends (no draws are taken then)."""
    kind, a, b = int(law[0]), float(law[1]), float(law[2])
    if kind == NEVER:
        return np.full(size, np.inf)
    if kind == WEIBULL:
        return (g.gamma(1.0 + 1.0 / b, size=size)) ** (1.0 / b) * a
    if kind == LOGNORMAL:
        return np.exp(g.normal(a + b * b, b, size=size))
    if kind == PARETO:
        return a * g.random(size) ** (-1.0 / (b - 1.0))
    return g.gamma(2.0, a, size=size)


@njit(cache=True)
def continuous_duration(kind, a, b, u1, u2):
    """Inverse-survival draw T with S(T) = u1 (u2 is used by the lognormal only).

    weibull(a=scale, b=shape), lognormal(a=mu, b=sigma), pareto(a=scale, b=shape),
    exponential(a=mean); never gives +inf.
    """
    if kind == NEVER:
        return np.inf
    if kind == WEIBULL:
        return a * (-np.log(u1)) ** (1.0 / b)
    elif kind == LOGNORMAL:
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        return np.exp(a + b * z)
    elif kind == PARETO:
        return a * u1 ** (-1.0 / b)
    else:
        return -a * np.log(u1)


@njit(cache=True)
def discrete_duration(kind, a, b, u1, u2):
    """Steps D a state lasts under the discrete-time hazard S(d)/S(d-1) (paper 2.2).

    The state persists from age d-1 to d with probability S(d)/S(d-1), so
    P(D > n) = S(n) = P(T > n) and D = ceil(T) has exactly that law (at least 1).
    A state that never ends lasts MAX_DURATION steps: its timer never fires in a run.
    """
    if kind == NEVER:
        return np.int64(MAX_DURATION)
    t = continuous_duration(kind, a, b, u1, u2)
    if not t < MAX_DURATION:  # also catches inf/nan from extreme tails
        return MAX_DURATION
    d = np.int64(np.ceil(t))
    return d if d >= 1 else np.int64(1)
