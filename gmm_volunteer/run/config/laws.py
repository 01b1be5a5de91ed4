"""The duration laws of a run config (paper section 2.2: availability and requests) and
the numeric domains of every key (docs/usage.md, "Limits")."""

from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from gmm_volunteer.model import laws, network
from gmm_volunteer.model.errors import not_below

_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, protected_namespaces=())

# Numeric domains (docs/usage.md, "Limits"). Beyond them a value is not a setting anyone
# means, and the arithmetic of the model would overflow (durations, capacities), take
# forever (burn-in) or not fit the kernels' integer types (users, steps).
MAX_USERS = 100_000_000
MAX_STEPS = 1_000_000_000  # about 32 years of 1 s steps
MAX_CAPACITY = 1e6  # capacity multiplier
MAX_PROFILE = 1e9  # base_profile value, in its unit (Mbit/s, %, MB)
MAX_BURN_IN = 10_000
MAX_SECONDS = 1e12  # a duration law's scale or mean (about 31,700 years)
MIN_SHAPE, MAX_SHAPE = 0.05, 100.0  # Weibull and Pareto shapes
MAX_LOG_MU = 30.0  # lognormal mu, log seconds: exp(30) s is about 10^13 s
MAX_LOG_SIGMA = 10.0
MAX_ALLOCATION_SD = 10.0  # sd of an allocation fraction (1 = the whole maximum)
MAX_REQUEST_TYPES = 127  # request types are stored as int8
MAX_CONCURRENCY = 1_000_000  # batches a node executes at once under discipline: fifo


class _DistBase(BaseModel):
    """Base of the duration laws: ``law()`` (the ``[code, a, b]`` the kernels read),
    ``survival(t)`` (S(t) = P(duration > t), vectorised over ``t`` in seconds),
    ``median()`` and ``mean()``, all from their one definition in `model.laws`."""

    model_config = _STRICT

    def law(self) -> np.ndarray:
        values = self.model_dump(by_alias=True)
        return laws.law_array(self.dist, *(values[k] for k in laws.PARAMETERS[self.dist]))

    def survival(self, t):
        return laws.survival(self.law(), t)

    def median(self) -> float:
        return laws.median(self.law())

    def mean(self) -> float:
        return laws.mean(self.law())


class _ScaleShape(_DistBase):
    """A law of a scale in seconds and a shape (Weibull, Pareto): one domain for both."""

    dist: str
    scale: float = Field(gt=0, le=MAX_SECONDS)
    shape: float = Field(ge=MIN_SHAPE, le=MAX_SHAPE)


class Weibull(_ScaleShape):
    """S(t) = exp(-(t / scale)^shape) for t >= 0."""

    dist: Literal["weibull"]


class LogNormal(_DistBase):
    """S(t) = 1 - Phi((log t - mu) / sigma) for t > 0 (mu, sigma of log seconds)."""

    dist: Literal["lognormal"]
    mu: float = Field(ge=-MAX_LOG_MU, le=MAX_LOG_MU)
    sigma: float = Field(gt=0, le=MAX_LOG_SIGMA)


class Pareto(_ScaleShape):
    """S(t) = 1 for t < scale and (scale / t)^shape otherwise."""

    dist: Literal["pareto"]


class Exponential(_DistBase):
    """S(t) = exp(-t / mean) for t >= 0."""

    dist: Literal["exponential"]
    mean_: float = Field(gt=0, le=MAX_SECONDS, alias="mean")

    model_config = ConfigDict(**_STRICT, serialize_by_alias=True)


class Never(_DistBase):
    """The state never ends: S(t) = 1 for every t, so the mean and the median are infinite.

    ``availability.online: {dist: never}`` keeps users online for the whole run,
    ``requests.patience: {dist: never}`` means no request is abandoned. A law with no end
    is not a duration the paper fits (section 2.2); it gives the limiting cases a check
    against queueing theory needs (always-online users, unbounded patience).
    """

    dist: Literal["never"]


Dist = Annotated[Union[Weibull, LogNormal, Pareto, Exponential, Never], Field(discriminator="dist")]
DIST_NAMES = laws.NAMES


# Round-trip times between a dedicated server and a user (docs/model.md D35), seconds.
MAX_RTT = network.MAX_RTT


class _RoundTripBase(BaseModel):
    model_config = _STRICT


class FixedRoundTrip(_RoundTripBase):
    """Every user at the same round-trip time."""

    dist: Literal["fixed"]
    seconds: float = Field(ge=0, le=MAX_RTT)

    def law(self) -> np.ndarray:
        return network.rtt_law("fixed", self.seconds)


class UniformRoundTrip(_RoundTripBase):
    """A user's round-trip time uniform in [low, high]."""

    dist: Literal["uniform"]
    low: float = Field(ge=0, le=MAX_RTT)
    high: float = Field(ge=0, le=MAX_RTT)

    _high_above_low = not_below("high", "low")

    def law(self) -> np.ndarray:
        return network.rtt_law("uniform", self.low, self.high)


def _rtt_shorthand(v):
    """A bare number of seconds stands for ``{dist: fixed, seconds: <number>}``."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return {"dist": "fixed", "seconds": float(v)}
    return v


RoundTrip = Annotated[Union[FixedRoundTrip, UniformRoundTrip, LogNormal, Exponential],
                      Field(discriminator="dist"), BeforeValidator(_rtt_shorthand)]
