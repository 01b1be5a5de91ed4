"""Demand that changes over time: a daily profile, scripted surges and random bursts
(issue 11 item 1; docs/model.md D18, D22).

The paper's users are stationary (paper 2.2: think times and online/offline periods
drawn from fixed laws). Here a multiplier m(t) >= 0 of the request rate and, if asked,
of the rate at which offline users come back, varies over the day and in surges:

    m(t) = daily(hour of t) x product of the factors of the surges active at t,

the surges being the scripted ones and the bounded-Pareto bursts (`bursts.py`) drawn
for the run from their own random stream.

It acts as a time change (a non-homogeneous renewal process): a duration D0 drawn from
the stationary law (the same keyed draw as without a profile, D5) ends at the first
step e with sum_{u=t}^{e-1} m(u) >= D0. Where m = 2, think times pass twice as fast, so a
user issues requests twice as often; the n-th think time of a user is still the same
uniform draw under every policy (common random numbers). With no profile and no surge
(the default) nothing is changed: the stationary model, bit for bit.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gmm_volunteer.model.bursts import Bursts, draw_bursts


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Sinusoid(_Strict):
    """1 + amplitude x cos(2 pi (hour - peak_hour) / 24)."""

    kind: Literal["sinusoid"] = "sinusoid"
    amplitude: float = Field(0.5, ge=0, le=1)
    peak_hour: float = Field(14.0, ge=0, lt=24)

    def factor(self, hour: np.ndarray) -> np.ndarray:
        return 1.0 + self.amplitude * np.cos(2.0 * math.pi * (hour - self.peak_hour) / 24.0)


class Table(_Strict):
    """(hour, factor) points, linear in between and around midnight (periodic)."""

    kind: Literal["table"] = "table"
    points: list[tuple[float, float]] = Field(min_length=1)

    @field_validator("points")
    @classmethod
    def _points(cls, v):
        hours = [h for h, _ in v]
        if any(not 0 <= h < 24 for h in hours):
            raise ValueError("hours must be in [0, 24)")
        if any(b <= a for a, b in zip(hours, hours[1:])):
            raise ValueError("hours must increase")
        if any(not (f >= 0 and math.isfinite(f)) for _, f in v):
            raise ValueError("factors must be finite and >= 0")
        return v

    def factor(self, hour: np.ndarray) -> np.ndarray:
        h = np.array([p[0] for p in self.points])
        f = np.array([p[1] for p in self.points])
        # periodic: repeat the points a day before and after
        return np.interp(hour, np.concatenate([h - 24, h, h + 24]), np.concatenate([f, f, f]))


class Surge(_Strict):
    """A scripted surge: the multiplier is times `factor` in [start, start + duration)."""

    start: int = Field(ge=0)  # step
    duration: int = Field(ge=1)  # steps
    factor: float = Field(gt=0)


class Demand(_Strict):
    """Config section ``demand`` (docs/usage.md)."""

    daily: Sinusoid | Table | None = Field(None, discriminator="kind")
    start_hour: float = Field(0.0, ge=0, lt=24)  # clock hour at step 0
    surges: list[Surge] = Field(default_factory=list)
    bursts: Bursts | None = None  # random surges (D22)
    think_time: bool = True  # m scales the request rate (think times)
    online: bool = False  # m scales the rate at which offline users come online

    @model_validator(mode="after")
    def _something_to_scale(self):
        if self.active and not (self.think_time or self.online):
            raise ValueError("a daily profile or surges need think_time or online to be true")
        return self

    @property
    def active(self) -> bool:
        return self.daily is not None or bool(self.surges) or self.bursts is not None

    def all_surges(self, steps: int, seed_seq: np.random.SeedSequence | None = None) -> list[Surge]:
        """The scripted surges, then the bursts drawn for a run of `steps` steps whose
        root seed sequence is `seed_seq` (required when there are bursts)."""
        if self.bursts is None:
            return list(self.surges)
        if seed_seq is None:
            raise ValueError("random bursts need the run's seed sequence")
        return list(self.surges) + [Surge(start=s, duration=d, factor=f)
                                    for s, d, f in draw_bursts(self.bursts, steps, seed_seq)]

    def multiplier(self, steps: int, seed_seq: np.random.SeedSequence | None = None) -> np.ndarray:
        """m(t) for t = 0..steps-1 (`seed_seq`: the run's, for the bursts)."""
        t = np.arange(steps, dtype=np.float64)
        m = np.ones(steps) if self.daily is None else self.daily.factor((self.start_hour + t / 3600.0) % 24.0)
        for s in self.all_surges(steps, seed_seq):
            m[s.start: s.start + s.duration] *= s.factor
        return m


def cumulative(m: np.ndarray) -> np.ndarray:
    """cum[k] = sum of m over steps < k (length steps + 1), what the kernel searches."""
    return np.concatenate([[0.0], np.cumsum(m, dtype=np.float64)])


def demand_arrays(demand: Demand, steps: int,
                  seed_seq: np.random.SeedSequence | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(dm_cum, dm_on) of the state: the cumulative multiplier and which durations it
    warps ([think time, offline period]); a 1-element cum and zeros when inactive."""
    if not demand.active:
        return np.zeros(1), np.zeros(2, np.int64)
    on = np.array([int(demand.think_time), int(demand.online)], np.int64)
    return cumulative(demand.multiplier(steps, seed_seq)), on
