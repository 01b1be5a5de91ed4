"""Random bursts of demand: surges at Poisson times with bounded-Pareto sizes and
durations (issue 11 item 1; docs/model.md D22).

Seed 001 (LA-IMR, section V) drives its autoscalers with bursty arrivals emulated by a
bounded-Pareto law; the paper's users (paper 2.2) have stationary think times. A burst
here is a surge like a scripted one (`demand.Surge`): the demand multiplier m(t) is
multiplied by the burst's factor during its duration. Bursts start at the events of a
Poisson process of ``rate`` per hour over the run; each factor and each duration is a
bounded-Pareto draw. Overlapping bursts multiply, as overlapping surges do.

The draws come from their own random stream, derived from the run's seed without
spawning (spawning would shift every other stream, D5), and happen once, before the run:
runs that differ only in policy, capacity or autoscaler see the same bursts.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from gmm_volunteer.model.errors import not_below

# Tag of the bursts' stream among the streams derived from the run's seed sequence.
BURST_STREAM = 0xB0257


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class BoundedPareto(_Strict):
    """Pareto with shape ``alpha`` truncated to [low, high]:
    P(X > x) = (x^-alpha - high^-alpha) / (low^-alpha - high^-alpha)."""

    alpha: float = Field(gt=0)
    low: float = Field(gt=0)
    high: float = Field(gt=0)

    # A field validator, so that the error names demand.bursts.<law>.high.
    _above_low = not_below("high", "low", strictly=True)

    def quantile(self, u: np.ndarray) -> np.ndarray:
        """Inverse CDF: low / (1 - u (1 - (low/high)^alpha))^(1/alpha), u in [0, 1)."""
        u = np.asarray(u, np.float64)
        ratio = (self.low / self.high) ** self.alpha
        return self.low / (1.0 - u * (1.0 - ratio)) ** (1.0 / self.alpha)

    def mean(self) -> float:
        a, lo, hi = self.alpha, self.low, self.high
        if abs(a - 1.0) < 1e-12:
            return lo * hi / (hi - lo) * np.log(hi / lo)
        return (lo ** a / (1.0 - (lo / hi) ** a)) * a / (a - 1.0) * (lo ** (1.0 - a) - hi ** (1.0 - a))


class Bursts(_Strict):
    """Config section ``demand.bursts`` (docs/usage.md, "Demand over time")."""

    rate: float = Field(gt=0)  # bursts per hour (Poisson)
    factor: BoundedPareto  # multiplier of m(t) during a burst
    duration: BoundedPareto  # s (rounded to whole steps, at least 1)


def burst_generator(seed_seq: np.random.SeedSequence) -> np.random.Generator:
    """The bursts' own Generator, derived without spawning from the run's `seed_seq`."""
    ss = np.random.SeedSequence(seed_seq.entropy, spawn_key=tuple(seed_seq.spawn_key) + (BURST_STREAM,))
    return np.random.Generator(np.random.PCG64(ss))


def draw_bursts(bursts: Bursts, steps: int, seed_seq: np.random.SeedSequence) -> list[tuple[int, int, float]]:
    """(start, duration, factor) of the bursts of a run of `steps` steps, by start.

    Fixed order of draws: the count (Poisson, mean rate x steps / 3600), the starts
    (uniform over the steps), the factors' and then the durations' uniforms."""
    rng = burst_generator(seed_seq)
    n = int(rng.poisson(bursts.rate * steps / 3600.0))
    starts = np.sort(rng.integers(0, steps, n)) if steps > 0 else np.zeros(0, np.int64)
    factors = bursts.factor.quantile(rng.random(n))
    durations = np.maximum(1, np.rint(bursts.duration.quantile(rng.random(n)))).astype(np.int64)
    return [(int(s), int(d), float(f)) for s, d, f in zip(starts, durations, factors)]
