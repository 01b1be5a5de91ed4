"""Run configuration: YAML file -> validated, typed models (docs/usage.md).

A run config names everything one trajectory of the generative model needs: the
population (paper section 2.1), the capacity multipliers applied to the base resource
profile (section 3.1), the policies (section 2.3), the model bundle with the fitted
components (section 2.2) and the parametric availability and request laws of
section 2.2. Every model forbids unknown keys and refuses strings where numbers are
expected; any problem raises `ConfigError` naming the file and the dotted key.

`--set a.b=c` overrides are applied to the raw YAML mapping before validation, so
they are checked exactly like keys written in the file.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Mapping, Union, get_args, get_origin

import numpy as np
import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
    model_serializer,
)

__all__ = [
    "ConfigError",
    "RunConfig",
    "Dist",
    "Weibull",
    "LogNormal",
    "Pareto",
    "Exponential",
    "Never",
    "load_config",
    "config_from_dict",
    "apply_overrides",
    "parse_override",
    "default_output_path",
    "schema_keys",
]

from gmm_volunteer.model import laws  # noqa: E402
from gmm_volunteer.model.constants import RESOURCE_UNITS, RESOURCES  # noqa: E402
from gmm_volunteer.model.demand import Demand  # noqa: E402  (a section defined in its own module)
from gmm_volunteer.model.suggest import did_you_mean, known_keys, quoted_choices  # noqa: E402
from gmm_volunteer.model.events import ScriptedEvent  # noqa: E402  (a section defined in its own module)
from gmm_volunteer.model.errors import ConfigError  # noqa: E402  (the model's own checks raise it too)

DEFAULT_MODEL = "models/default"


# ---------------------------------------------------------------------------------
# Duration laws (paper section 2.2: availability and requests)
# ---------------------------------------------------------------------------------

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


class Weibull(_DistBase):
    """S(t) = exp(-(t / scale)^shape) for t >= 0."""

    dist: Literal["weibull"]
    scale: float = Field(gt=0, le=MAX_SECONDS)
    shape: float = Field(ge=MIN_SHAPE, le=MAX_SHAPE)


class LogNormal(_DistBase):
    """S(t) = 1 - Phi((log t - mu) / sigma) for t > 0 (mu, sigma of log seconds)."""

    dist: Literal["lognormal"]
    mu: float = Field(ge=-MAX_LOG_MU, le=MAX_LOG_MU)
    sigma: float = Field(gt=0, le=MAX_LOG_SIGMA)


class Pareto(_DistBase):
    """S(t) = 1 for t < scale and (scale / t)^shape otherwise."""

    dist: Literal["pareto"]
    scale: float = Field(gt=0, le=MAX_SECONDS)
    shape: float = Field(ge=MIN_SHAPE, le=MAX_SHAPE)


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


# ---------------------------------------------------------------------------------
# Config sections
# ---------------------------------------------------------------------------------


class _Section(BaseModel):
    model_config = _STRICT


# Allocation fractions (paper 2.2, "Allocated resources": node-specific mean and sd;
# paper 3.1). A node's allocation is clip(mean + sd * YJ^-1(...), 0, 1) x its maximum.
ALLOCATION_RESOURCES = RESOURCES
ALLOCATION_BASES = ("dedicated", "fitted")


class _Fractions(_Section):
    """Per-resource values; a resource left out keeps the value of the law's base."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_null(cls, v: Any) -> Any:
        # null would silently mean "the base's value"; leaving the key out says that.
        if v is None:
            raise ValueError("must be a number (got null; leave the resource out to keep the base's value)")
        return v

    @model_serializer(mode="wrap")
    def _set_only(self, handler):
        return {k: v for k, v in handler(self).items() if v is not None}

    def values(self) -> dict[str, float]:
        """The resources given, by name."""
        return {r: getattr(self, r) for r in ALLOCATION_RESOURCES if getattr(self, r) is not None}


class AllocationMeans(_Fractions):
    """Mean allocation fraction per resource, of the node's maximum allocation."""

    band_in: float | None = Field(None, ge=0, le=1)
    band_out: float | None = Field(None, ge=0, le=1)
    cpu: float | None = Field(None, ge=0, le=1)
    memory: float | None = Field(None, ge=0, le=1)
    storage: float | None = Field(None, ge=0, le=1)


class AllocationSds(_Fractions):
    """Standard deviation of the allocation fraction per resource."""

    band_in: float | None = Field(None, ge=0, le=MAX_ALLOCATION_SD)
    band_out: float | None = Field(None, ge=0, le=MAX_ALLOCATION_SD)
    cpu: float | None = Field(None, ge=0, le=MAX_ALLOCATION_SD)
    memory: float | None = Field(None, ge=0, le=MAX_ALLOCATION_SD)
    storage: float | None = Field(None, ge=0, le=MAX_ALLOCATION_SD)


class _AllocationLaw(_Section):
    """Mean and sd of a node class's allocation fraction (paper 2.2), per resource.

    ``base: dedicated`` is mean 1, sd 0 for every resource (the node offers its maximum
    allocation every step); ``base: fitted`` takes the model bundle's fitted fraction
    statistics. ``mean`` and ``sd`` override chosen resources on top of the base.
    Written as the bare base name when nothing is overridden.
    """

    base: Literal["dedicated", "fitted"]
    mean: AllocationMeans = Field(default_factory=AllocationMeans)
    sd: AllocationSds = Field(default_factory=AllocationSds)

    @model_serializer(mode="wrap")
    def _compact(self, handler):
        d = handler(self)
        if not d.get("mean") and not d.get("sd"):
            return self.base
        return {k: v for k, v in d.items() if k == "base" or v}

    def fractions(self, fitted: Mapping[str, tuple[float, float]] | None) -> tuple[np.ndarray, np.ndarray]:
        """(mean, sd) per resource in `ALLOCATION_RESOURCES` order. `fitted` maps each
        resource to the bundle's fitted (mean, sd); without it, values that would come
        from the bundle are NaN."""
        if self.base == "dedicated":
            mean, sd = np.ones(len(ALLOCATION_RESOURCES)), np.zeros(len(ALLOCATION_RESOURCES))
        elif fitted is None:
            mean = sd = np.full(len(ALLOCATION_RESOURCES), np.nan)
        else:
            mean = np.array([float(fitted[r][0]) for r in ALLOCATION_RESOURCES])
            sd = np.array([float(fitted[r][1]) for r in ALLOCATION_RESOURCES])
        mean, sd = mean.copy(), sd.copy()
        for r, x in self.mean.values().items():
            mean[ALLOCATION_RESOURCES.index(r)] = x
        for r, x in self.sd.values().items():
            sd[ALLOCATION_RESOURCES.index(r)] = x
        return mean, sd

    @classmethod
    def from_shorthand(cls, name: str) -> dict:
        """The mapping a bare base name stands for."""
        return {"base": name}


class ServerAllocation(_AllocationLaw):
    base: Literal["dedicated", "fitted"] = "dedicated"


class UserAllocation(_AllocationLaw):
    base: Literal["dedicated", "fitted"] = "fitted"


def _allocation_shorthand(v: Any) -> Any:
    """`dedicated` / `fitted` stand for ``{base: <name>}``; anything else but a mapping
    is refused here, so that the error names the key once and lists what it accepts."""
    if isinstance(v, str):
        if v not in ALLOCATION_BASES:
            raise ValueError(f"must be 'dedicated', 'fitted' or a mapping {{base, mean, sd}} (got {v!r})"
                             + did_you_mean(v, ALLOCATION_BASES))
        return {"base": v}
    if isinstance(v, (dict, _AllocationLaw)):
        return v
    raise ValueError(f"must be 'dedicated', 'fitted' or a mapping {{base, mean, sd}} (got {_got(v)})")


ServerAllocationLaw = Annotated[ServerAllocation, BeforeValidator(_allocation_shorthand)]
UserAllocationLaw = Annotated[UserAllocation, BeforeValidator(_allocation_shorthand)]


class Users(_Section):
    count: int = Field(ge=1, le=MAX_USERS)
    capacity: float = Field(1.0, gt=0, le=MAX_CAPACITY)
    allocation: UserAllocationLaw = Field(default_factory=UserAllocation)
    # Subtask data the users hold at t = 0 (docs/model.md D2): "filled", what the
    # distributed schedulers' download rule leaves after a long history; "empty", none
    # (the behaviour before 0.6.0).
    initial_data: Literal["filled", "empty"] = "filled"


class ResourceCapacity(_Fractions):
    """Capacity multiplier of the server per resource (x ``base_profile``), replacing
    ``server.capacity`` for the resources given (paper 2.4, eq. 3: the vector a†)."""

    band_in: float | None = Field(None, gt=0, le=MAX_CAPACITY)
    band_out: float | None = Field(None, gt=0, le=MAX_CAPACITY)
    cpu: float | None = Field(None, gt=0, le=MAX_CAPACITY)
    memory: float | None = Field(None, gt=0, le=MAX_CAPACITY)
    storage: float | None = Field(None, gt=0, le=MAX_CAPACITY)


class MaxAllocation(_Fractions):
    """Maximum allocation of the server per resource in the resource's unit (Mbit/s, %,
    MB), replacing ``server.capacity`` x ``base_profile`` for the resources given."""

    band_in: float | None = Field(None, gt=0, le=MAX_PROFILE * MAX_CAPACITY)
    band_out: float | None = Field(None, gt=0, le=MAX_PROFILE * MAX_CAPACITY)
    cpu: float | None = Field(None, gt=0, le=MAX_PROFILE * MAX_CAPACITY)
    memory: float | None = Field(None, gt=0, le=MAX_PROFILE * MAX_CAPACITY)
    storage: float | None = Field(None, gt=0, le=MAX_PROFILE * MAX_CAPACITY)


class CostWeights(_Fractions):
    """Cost of one base profile's worth of each resource on the server: the weights w of
    eq. 3's norm ||a||_w (paper 2.4), read by `gmmv capacity` only (docs/model.md D20)."""

    band_in: float | None = Field(None, ge=0, le=MAX_PROFILE)
    band_out: float | None = Field(None, ge=0, le=MAX_PROFILE)
    cpu: float | None = Field(None, ge=0, le=MAX_PROFILE)
    memory: float | None = Field(None, ge=0, le=MAX_PROFILE)
    storage: float | None = Field(None, ge=0, le=MAX_PROFILE)


class Server(_Section):
    """The dedicated server v0. Its maximum allocation per resource r is, in order of
    precedence, ``max_allocation.r``, ``resource_capacity.r`` x ``base_profile.r``, or
    ``capacity`` x ``base_profile.r`` (docs/model.md D20)."""

    capacity: float = Field(gt=0, le=MAX_CAPACITY)
    allocation: ServerAllocationLaw = Field(default_factory=ServerAllocation)
    resource_capacity: ResourceCapacity = Field(default_factory=ResourceCapacity)
    max_allocation: MaxAllocation = Field(default_factory=MaxAllocation)
    cost_weights: CostWeights = Field(default_factory=CostWeights)

    @field_validator("max_allocation")
    @classmethod
    def _one_setting_per_resource(cls, v: MaxAllocation, info: ValidationInfo) -> MaxAllocation:
        given = info.data.get("resource_capacity")
        both = sorted(set(v.values()) & set(given.values())) if given is not None else []
        if both:
            raise ValueError(f"{', '.join(both)} also given in server.resource_capacity; "
                             "give each resource one setting (a multiplier or an absolute value)")
        return v

    @model_serializer(mode="wrap")
    def _compact(self, handler):
        # Left out when not set, so that a config without them dumps (and is stored in
        # every result's attrs) exactly as before they existed.
        d = handler(self)
        return {k: v for k, v in d.items() if k not in ("resource_capacity", "max_allocation", "cost_weights") or v}

    def per_resource(self) -> bool:
        """Whether any resource departs from the scalar ``capacity``."""
        return bool(self.resource_capacity.values() or self.max_allocation.values())

    def maximum(self, base_vec: np.ndarray) -> np.ndarray:
        """Maximum allocation per resource (`ALLOCATION_RESOURCES` order) given the base
        profile's values; ``base_vec * capacity`` when nothing per resource is set."""
        out = np.asarray(base_vec, dtype=np.float64) * self.capacity
        for r, m in self.resource_capacity.values().items():
            i = ALLOCATION_RESOURCES.index(r)
            out[i] = base_vec[i] * m
        for r, a in self.max_allocation.values().items():
            out[ALLOCATION_RESOURCES.index(r)] = a
        return out

    def multipliers(self, base_vec: np.ndarray) -> np.ndarray:
        """Capacity multiplier per resource (maximum allocation / base profile)."""
        return self.maximum(base_vec) / np.asarray(base_vec, dtype=np.float64)


class BaseProfile(_Section):
    """Maximum allocation of a node at capacity multiplier 1 (paper section 3.1)."""

    band_in: float = Field(100.0, gt=0, le=MAX_PROFILE)  # Mbit/s
    band_out: float = Field(100.0, gt=0, le=MAX_PROFILE)  # Mbit/s
    cpu: float = Field(200.0, gt=0, le=MAX_PROFILE)  # %, 100 = one core
    memory: float = Field(2500.0, gt=0, le=MAX_PROFILE)  # MB
    storage: float = Field(3000.0, gt=0, le=MAX_PROFILE)  # MB

    def as_array(self) -> np.ndarray:
        """Values in the order of `constants.RESOURCES`."""
        return np.array([getattr(self, r) for r in RESOURCES], dtype=np.float64)


class Availability(_Section):
    """The alternating online/offline renewal process of a user (paper section 2.2).

    A run starts from its stationary law (docs/model.md, D2), which needs both mean
    durations finite, or exactly one law `never` (then every user starts, and stays, in
    that state).
    """

    online: Dist = Field(default_factory=lambda: Weibull(dist="weibull", scale=1133.1, shape=0.5764))
    offline: Dist = Field(
        default_factory=lambda: LogNormal(dist="lognormal", mu=math.log(5259.0), sigma=1.5)
    )

    @field_validator("online", "offline")
    @classmethod
    def _finite_mean(cls, v):
        # An infinite mean that is not `never` (a Pareto with shape <= 1) leaves the
        # length-biased law of the current period undefined: no stationary start.
        if isinstance(v, Pareto) and v.shape <= 1.0:
            raise ValueError(
                f"a pareto availability law needs shape > 1 (got {_num(v.shape)}): with an "
                "infinite mean the process has no stationary state to start from"
            )
        return v

    @model_validator(mode="after")
    def _not_both_never(self):
        if isinstance(self.online, Never) and isinstance(self.offline, Never):
            raise ValueError(
                "online and offline cannot both be {dist: never}: the process has no "
                "stationary state to start from"
            )
        return self


class Requests(_Section):
    think_time: Dist = Field(default_factory=lambda: Pareto(dist="pareto", scale=30.0, shape=1.5))
    patience: Dist = Field(default_factory=lambda: Pareto(dist="pareto", scale=30.0, shape=1.5))
    type_probabilities: list[float] = Field(default_factory=lambda: [0.4, 0.3, 0.2, 0.1])

    @field_validator("think_time")
    @classmethod
    def _think_time_ends(cls, v):
        if isinstance(v, Never):
            raise ValueError("cannot be {dist: never}: no request would ever arrive")
        return v

    @field_validator("type_probabilities")
    @classmethod
    def _probabilities(cls, v: list[float]) -> list[float]:
        if not v:
            raise ValueError("must list at least one probability")
        if len(v) > MAX_REQUEST_TYPES:
            raise ValueError(f"at most {MAX_REQUEST_TYPES} request types (got {len(v)})")
        for i, p in enumerate(v):
            if not (p >= 0.0) or not math.isfinite(p):
                raise ValueError(f"entry {i} must be >= 0 (got {p!r})")
        total = math.fsum(v)
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"must sum to 1 (sum is {total!r})")
        return v


class Allocation(_Section):
    restart: Literal["burn_in", "freeze"] = "burn_in"
    burn_in_steps: int = Field(100, ge=0, le=MAX_BURN_IN)


class Execution(_Section):
    """How subtasks execute (paper 2.2, "Execution"; docs/model.md)."""

    # Subtasks of one type entering a phase on one node in the same step form one batch
    # (paper 2.2). Off: every placement is its own batch (the queueing checks use it).
    batching: bool = True
    # What a node's subtask data (readiness, storage) and batches are keyed by
    # (docs/model.md D7): "model", one copy per subtask type, shared by every slot and
    # task type that runs it, and same-model subtasks batch together; "slot", one per
    # (task type, slot) as paper 2.2 indexes readiness, for catalogues whose every slot
    # is its own model (and the behaviour before 0.6.0).
    subtask_data: Literal["model", "slot"] = "model"
    # When a batch's phase ends inside a step (docs/model.md D26): "step", its next phase
    # begins with the next step (paper 2.2's discrete phases: a subtask on a volunteer
    # takes at least three steps: input, execution, result); "carry_over", the next
    # phase begins at once and uses the rest of the step (sub-second phases, as a real
    # deployment runs them; docs/validation.md section 6).
    phase_changes: Literal["step", "carry_over"] = "step"
    # What ends a phase (docs/model.md D27): "work", the work the phase needs is done with
    # the resources granted (D10, since 0.3.0); "paper", a draw from the bundle's fitted
    # discrete-time hazard each step, every active batch charged its sampled consumption
    # for the whole step and CPU overcommit scaling it down (paper 2.2 as written).
    progress: Literal["work", "paper"] = "work"
    # The batch size the fitted hazards are evaluated at under progress: paper (D27):
    # "extrapolate", the batch's own size, also beyond the sizes the traces measured (the
    # fitted polynomial as written); "clamp", clamped to the measured range, as the
    # consumption statistics are (D9). `gmmv hazards` shows what each does.
    hazard_batch_size: Literal["extrapolate", "clamp"] = "extrapolate"
    # The order executing batches run on a node (docs/model.md D28): "shared", every
    # executing batch at once, the node's CPU shared among them (processor sharing, D10);
    # "fifo", `concurrency` batches at a time in the order they entered execution, the
    # others waiting, granted no CPU and holding their memory, as an inference runtime's
    # queue does (the testbed's devices; docs/validation.md section 6).
    discipline: Literal["shared", "fifo"] = "shared"
    # How many batches a node executes at once under discipline: fifo.
    concurrency: int = Field(1, ge=1, le=MAX_CONCURRENCY)
    # The machine's speed against the one the bundle's work was measured on (docs/model.md
    # D30): every batch's execution work is the table's times this, on the server and the
    # volunteers alike; 1 = as measured. A comparison with a run on a slower or faster
    # CPU sets it to that run's measured cost over the bundle's (testbed.compare
    # --speed-reference); the testbed itself runs on whatever CPU it has.
    work_scale: float = Field(1.0, gt=0.0, le=1000.0)
    # CPU a volunteer's own process takes outside its executions, % of a core (docs/model.md
    # D31): the runtime around its batches (fetching inputs, posting results, polling,
    # trimming its heap), taken from each user's CPU allocation while it executes; 0 = none,
    # the paper's model. Measured on a testbed's runs (testbed.compare's mechanisms table).
    volunteer_overhead_cpu: float = Field(0.0, ge=0.0, le=MAX_PROFILE)

    @model_validator(mode="after")
    def _paper_steps(self):
        if self.progress == "paper" and self.phase_changes != "step":
            raise ValueError("phase_changes: carry_over needs progress: work (under progress: "
                             "paper a phase ends only at a step boundary, by its hazard draw; "
                             "docs/model.md D27)")
        if self.progress == "paper" and self.discipline != "shared":
            raise ValueError("discipline: fifo needs progress: work (under progress: paper a "
                             "phase ends by its hazard draw whatever CPU it is granted, so a "
                             "waiting batch would still finish; docs/model.md D28)")
        if self.progress == "paper" and self.work_scale != 1.0:
            raise ValueError(f"work_scale: {self.work_scale} needs progress: work (under progress: paper a "
                             "phase ends by its hazard draw and its work is not read; docs/model.md D30)")
        if self.progress == "paper" and self.volunteer_overhead_cpu != 0.0:
            raise ValueError(f"volunteer_overhead_cpu: {self.volunteer_overhead_cpu} needs progress: work "
                             "(under progress: paper a phase ends by its hazard draw whatever CPU it is "
                             "granted; docs/model.md D31)")
        if self.concurrency != 1 and self.discipline != "fifo":
            raise ValueError(f"concurrency: {self.concurrency} needs discipline: fifo (under "
                             "discipline: shared every executing batch runs at once; docs/model.md D28)")
        return self
    # Model variants (docs/model.md D24): slots whose subtask type shares a `function`
    # with other types in the bundle may be served by those types too, for the schedulers
    # that choose a variant (asrb). Off: every slot runs its requested type, bit for bit
    # as before variants existed.
    variants: bool = False


class Output(_Section):
    path: str | None = None


class RunConfig(_Section):
    """One run of the simulator; see docs/usage.md for every key."""

    seed: int | None = Field(None, ge=0, lt=2**128)
    steps: int = Field(ge=1, le=MAX_STEPS)
    users: Users
    server: Server
    base_profile: BaseProfile = Field(default_factory=BaseProfile)
    scheduler: str = Field("uniform", validate_default=True)
    scheduler_options: dict[str, Any] = Field(default_factory=dict)
    executor: str = Field("default", validate_default=True)
    executor_options: dict[str, Any] = Field(default_factory=dict)
    autoscaler: str = Field("fixed", validate_default=True)  # dedicated capacity over time (D17)
    autoscaler_options: dict[str, Any] = Field(default_factory=dict)
    model: str = DEFAULT_MODEL
    availability: Availability = Field(default_factory=Availability)
    requests: Requests = Field(default_factory=Requests)
    allocation: Allocation = Field(default_factory=Allocation)
    execution: Execution = Field(default_factory=Execution)
    demand: Demand = Field(default_factory=Demand)  # time-varying demand (D18)
    events: list[ScriptedEvent] = Field(default_factory=list)  # scripted perturbations (D25)
    output: Output = Field(default_factory=Output)

    @field_validator("scheduler", "executor", "autoscaler")
    @classmethod
    def _known_policy(cls, v: str, info: ValidationInfo) -> str:
        from gmm_volunteer.policies.registry import policy_class, resolve

        resolve(info.field_name, v)  # raises UnknownPolicyError, a ValueError
        server = info.data.get("server")
        if info.field_name == "autoscaler" and server is not None and server.per_resource():
            policy = policy_class("autoscaler", v)
            if policy is not None and getattr(policy, "scales", False):
                # A scaling autoscaler adds replicas of base_profile (D17); a server
                # sized per resource is not a whole number of them (D20).
                raise ValueError(
                    f"{v!r} scales the server in units of base_profile; it cannot be combined "
                    "with server.resource_capacity or server.max_allocation (use autoscaler: fixed)")
        return v

    @field_validator("scheduler_options", "executor_options", "autoscaler_options")
    @classmethod
    def _policy_options(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        # Checked against the named policy's own Options model now, so that a typo fails
        # when the config loads (naming the key), not mid-run or on a Dask worker.
        from gmm_volunteer.policies.registry import policy_class

        kind = info.field_name.removesuffix("_options")
        name = info.data.get(kind)
        if name is None:  # the name itself was invalid: reported already
            return v
        policy = policy_class(kind, name)
        if policy is not None:
            try:
                validated = policy.validate_options(v)
            except ValidationError as exc:
                raise _OptionsError(exc, v, policy.Options) from None
            from gmm_volunteer.policies.bounds import option_bound_problems

            problems = option_bound_problems(validated.model_dump(mode="python"))
            if problems:
                raise ValueError("; ".join(problems))
        return v

    @model_validator(mode="after")
    def _events_fit_users(self):
        from gmm_volunteer.model.events import check_events

        check_events(self.events, self.users.count)  # names events.<i>.<key>
        return self

    @field_validator("model")
    @classmethod
    def _bundle_dir(cls, v: str) -> str:
        path = Path(v)
        if not path.is_absolute():
            # config_from_dict resolves relative paths first; this only guards direct use.
            path = Path.cwd() / path
        if not path.is_dir():
            raise ValueError(f"model bundle directory does not exist: {path}")
        if not (path / "bundle.yaml").is_file():
            raise ValueError(f"model bundle directory has no bundle.yaml: {path}")
        return str(path)

    def to_yaml(self) -> str:
        """The resolved config (every default filled in) as YAML text."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    def output_path(self, config_path: str | Path | None = None) -> Path:
        """Where the result store goes: ``output.path`` or the default for the file."""
        if self.output.path is not None:
            return Path(self.output.path)
        return default_output_path(config_path)


class _OptionsError(ValueError):
    """A policy's options failed its Options model; `_format_errors` reports each
    problem under its own dotted key (e.g. ``scheduler_options.bogus``)."""

    def __init__(self, exc: ValidationError, data: Any, model: Any = None):
        super().__init__(str(exc))
        self.errors = exc.errors(include_url=False)
        self.data = data
        self.model = model  # the policy's Options model, for close-name suggestions


def default_output_path(config_path: str | Path | None) -> Path:
    """``results/<config file stem>.zarr``, relative to the current directory."""
    stem = Path(config_path).stem if config_path is not None else "run"
    return Path("results") / f"{stem}.zarr"


# ---------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> RunConfig:
    """Read a YAML run config, apply ``key=value`` overrides, validate.

    Relative ``model`` paths written in the file (or the default) resolve against the
    file's directory; relative ``model`` paths given as overrides resolve against the
    current directory.
    """
    from gmm_volunteer.io.yamlio import YAMLInputError, load_yaml

    source = str(path)
    try:
        path = Path(path)
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{source}: file not found") from None
    except (OSError, ValueError) as exc:  # a directory, no permission, a NUL byte in the name
        raise ConfigError(f"{source}: cannot read: {exc}") from None
    try:
        data = load_yaml(raw, source)
    except YAMLInputError as exc:
        raise ConfigError(str(exc)) from None
    if data is None:
        raise ConfigError(f"{source}: file is empty (expected a mapping of config keys)")
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: top level must be a mapping of config keys, got {_kind(data)}")

    overrides = list(overrides)
    parsed = dict(parse_override(o, source) for o in overrides)
    # the live testbed's own section, read by `gmmv testbed` only; checked here with its
    # overrides, so that a typo (in the file or in a --set) fails for `gmmv run` too
    # (its keys are flat: `testbed.KEY=VALUE`, as `testbed.config.load_testbed` reads them)
    on_section = {k: v for k, v in parsed.items() if k.startswith("testbed.")}
    if "testbed" in data or on_section:
        data = dict(data)
        section = data.pop("testbed", None) or {}
        if isinstance(section, Mapping):
            section = {**section, **{k.removeprefix("testbed."): v for k, v in on_section.items()}}
        try:
            validate_testbed_section(section, source)
        except ConfigError as exc:
            raise ConfigError(_blame_overrides(str(exc), source, overrides)) from None
        parsed = {k: v for k, v in parsed.items() if k not in on_section}
    try:
        if isinstance(parsed.get("model"), str):
            parsed["model"] = _absolute(parsed["model"], Path.cwd(), source)
        data = apply_overrides(data, parsed, source)
        return config_from_dict(data, source=source, base_dir=path.resolve().parent)
    except ConfigError as exc:
        raise ConfigError(_blame_overrides(str(exc), source, overrides)) from None


def _blame_overrides(text: str, source: str, overrides: list[str]) -> str:
    """`text` (lines ``<source>: <key>: <problem>``) with each problem at a key an
    override set (or inside it) attributed to that override first:
    ``--set steps=1e5 on run.yaml: steps: ...``, since the file is not where the bad
    value is (the rest of the line keeps its form)."""
    by_key = {}
    for o in overrides:
        by_key[o.partition("=")[0].strip()] = o
    lines = []
    for line in text.splitlines():
        rest = line.removeprefix(f"{source}: ")
        key = rest.split(": ", 1)[0]
        blamed = next((o for k, o in by_key.items() if key == k or key.startswith(k + ".")), None)
        lines.append(f"--set {blamed} on {line}" if blamed is not None and rest != line else line)
    return "\n".join(lines)


def validate_testbed_section(section: Any, source: str = "<config>"):
    """The `testbed:` section (docs/testbed.md) as a `testbed.section.Testbed`; a
    ConfigError names ``testbed.<key>``."""
    from gmm_volunteer.run.testbed_section import SECTION, Testbed

    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{source}: {SECTION}: must be a mapping of testbed keys, got {_kind(section)}")
    try:
        return Testbed.model_validate(dict(section))
    except ValidationError as exc:
        text = _format_errors(exc, dict(section), source)
        raise ConfigError(text.replace(f"{source}: ", f"{source}: {SECTION}.")) from None


def config_from_dict(
    d: Mapping[str, Any], source: str = "<dict>", base_dir: str | Path | None = None
) -> RunConfig:
    """Validate a config mapping; ``source`` names it in errors.

    A relative ``model`` path (or the default) resolves against ``base_dir``, the
    current directory when not given.
    """
    if not isinstance(d, Mapping):
        raise ConfigError(f"{source}: top level must be a mapping of config keys, got {_kind(d)}")
    data = dict(d)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    from gmm_volunteer.policies.plugin_path import unresolved  # module:Class beside the config

    problems = unresolved(data, Path(base_dir) if base_dir is not None else None)
    if problems:
        raise ConfigError("\n".join(f"{source}: {kind}: cannot import {name!r}: {why}" for kind, name, why in problems))
    model = data.get("model", DEFAULT_MODEL)
    if isinstance(model, str):
        data["model"] = _absolute(model, base, source)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, data, source)) from None


def _absolute(p: str, base: Path, source: str = "<config>") -> str:
    if "\0" in p:
        raise ConfigError(f"{source}: model: path contains a NUL byte ({p!r})")
    try:
        path = Path(p).expanduser()
    except RuntimeError as exc:  # ~nosuchuser
        raise ConfigError(f"{source}: model: cannot expand {p!r}: {exc}") from None
    if not path.is_absolute():
        path = base / path
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError) as exc:  # e.g. a symlink loop
        raise ConfigError(f"{source}: model: cannot resolve {p!r}: {exc}") from None
    if not resolved.is_dir():
        # Nothing there: a bare name (or the key left out) names a bundle shipped with the
        # package, so that a config outside the repository runs (docs/usage.md, "model").
        from gmm_volunteer.io.bundlefiles import packaged_bundle

        packaged = packaged_bundle("default" if p == DEFAULT_MODEL else p)
        if packaged is not None:
            return str(packaged)
    return str(resolved)


def _kind(x: Any) -> str:
    names = {list: "a list", dict: "a mapping", str: "a string", int: "a number",
             float: "a number", bool: "a boolean", type(None): "null"}
    return names.get(type(x), type(x).__name__)


# ---------------------------------------------------------------------------------
# Overrides
# ---------------------------------------------------------------------------------


def parse_override(text: str, source: str = "<overrides>") -> tuple[str, Any]:
    """``"a.b.c=value"`` -> ``("a.b.c", value)`` with value parsed as YAML."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{source}: --set {text!r}: malformed override, expected KEY=VALUE")
    from gmm_volunteer.io.yamlio import YAMLInputError, load_yaml

    try:
        value = load_yaml(raw, "") if raw.strip() else None
    except YAMLInputError as exc:
        problem = str(exc).removeprefix(": ")
        raise ConfigError(f"{source}: {key}: cannot parse override value {raw!r}: {problem}") from None
    return key, value


def apply_overrides(
    d: Mapping[str, Any], overrides: Mapping[str, Any], source: str = "<overrides>"
) -> dict:
    """Return a deep copy of ``d`` with each dotted key of ``overrides`` set.

    Every key path must exist in the run-config schema (free-form option mappings such
    as ``scheduler_options`` accept any sub-key); otherwise `ConfigError` names it. A
    section missing from ``d`` starts from its default, so ``availability.online.scale``
    changes one parameter of the default law instead of replacing the law.
    """
    out = copy.deepcopy(dict(d))
    for key, value in overrides.items():
        parts = key.split(".")
        if any(not p for p in parts):
            raise ConfigError(f"{source}: {key}: malformed key (empty component)")
        defaults, types = _key_path_defaults(parts, source)
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = copy.deepcopy(defaults[i])
            elif isinstance(child, str) and _shorthand_of(types[i]) is not None:
                # e.g. users.allocation: fitted, then --set users.allocation.mean.cpu=0.5
                child = node[part] = _shorthand_of(types[i])(child)
            elif not isinstance(child, dict):
                raise ConfigError(
                    f"{source}: {'.'.join(parts[: i + 1])}: cannot set {key}: "
                    f"{'.'.join(parts[: i + 1])} is {_kind(child)}, not a mapping"
                )
            node = child
        node[parts[-1]] = copy.deepcopy(value)
    return out


def _key_path_defaults(parts: list[str], source: str) -> tuple[list[dict], list[Any]]:
    """Check a key path against the schema; return each section's default mapping and
    type (None below a free-form mapping)."""
    tp: Any = RunConfig
    defaults: list[dict] = []
    types: list[Any] = []
    for i, part in enumerate(parts):
        here = ".".join(parts[: i + 1])
        fields = _fields_of(tp)
        if fields is None:
            if _is_free_mapping(tp):  # e.g. scheduler_options.x.y
                pad = len(parts) - len(defaults)
                return defaults + [{}] * pad, types + [None] * pad
            parent = ".".join(parts[:i])
            raise ConfigError(f"{source}: {here}: unknown config key ({parent} is a value, not a section)")
        if part not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"{source}: {here}: unknown config key{did_you_mean(part, fields)} "
                              f"(expected one of: {known})")
        defaults.append(_section_default(tp, part))
        tp = fields[part]
        types.append(tp)
    return defaults, types


def _shorthand_of(tp: Any):
    """The expansion of a section written as a bare string (e.g. ``fitted`` for an
    allocation law), or None when the section has no such form."""
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return getattr(tp, "from_shorthand", None) if isinstance(tp, type) else None


def _section_default(tp: Any, key: str) -> dict:
    """The default of section ``key`` of model ``tp`` as plain data, {} when required."""
    if not (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return {}
    for name, f in tp.model_fields.items():
        if (f.alias or name) == key:
            value = f.get_default(call_default_factory=True)
            if isinstance(value, BaseModel):
                value = value.model_dump(mode="json")  # a bare string for a shorthand
            return value if isinstance(value, dict) else {}
    return {}


def _fields_of(tp: Any) -> dict[str, Any] | None:
    """Sub-keys of a section type (the union of all variants for a `Dist`)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {(f.alias or name): f.annotation for name, f in tp.model_fields.items()}
    if get_origin(tp) is Annotated:
        return _fields_of(get_args(tp)[0])
    if get_origin(tp) is Union:
        merged: dict[str, Any] = {}
        for arg in get_args(tp):
            sub = _fields_of(arg)
            if sub is not None:
                merged.update(sub)
        return merged or None
    return None


def _is_free_mapping(tp: Any) -> bool:
    return tp is dict or get_origin(tp) is dict


def schema_keys() -> list[str]:
    """Every dotted key of the schema, down to sections; a `Dist` and an allocation law
    (`server.allocation`, `users.allocation`) count as one key each."""
    out: list[str] = []

    def walk(tp: Any, prefix: str) -> None:
        section = isinstance(tp, type) and issubclass(tp, BaseModel) and _shorthand_of(tp) is None
        fields = _fields_of(tp) if section else None
        if fields is None:
            out.append(prefix)
            return
        for name, sub in fields.items():
            walk(sub, f"{prefix}.{name}" if prefix else name)

    walk(RunConfig, "")
    return out


# ---------------------------------------------------------------------------------
# Error messages
# ---------------------------------------------------------------------------------


def _format_errors(exc: ValidationError, data: Any, source: str) -> str:
    lines = []
    for err in exc.errors(include_url=False):
        key = _dotted(err["loc"], data)
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, _OptionsError):
            for sub in inner.errors:
                known = known_keys(inner.model, sub["loc"]) if inner.model is not None else []
                lines.append(f"{source}: {key}.{_dotted(sub['loc'], inner.data)}: {_describe(sub, known)}")
            continue
        known = known_keys(RunConfig, err["loc"]) if err["type"] == "extra_forbidden" else []
        lines.append(f"{source}: {key or '<top level>'}: {_describe(err, known)}")
    return "\n".join(lines)


def _dotted(loc: tuple, data: Any) -> str:
    """Dotted key of an error location, without the union tags pydantic inserts."""
    parts: list[str] = []
    node = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, dict) and part in node:
            parts.append(str(part))
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            parts.append(str(part))
            node = node[part]
        elif last:
            parts.append(str(part))
        # otherwise it is a tagged-union branch name (e.g. "weibull"): not a key
    return ".".join(parts)


def _got(x: Any) -> str:
    return "null" if x is None else f"{_kind(x)} {x!r}"


def _num(x: Any) -> Any:
    return int(x) if isinstance(x, float) and x.is_integer() else x


# Units a value may be written with by mistake (a config's numbers carry none), as
# (the key's unit, factor): "2.5 GB" for a key in MB is 2500.
_UNIT_FACTORS = {
    "MB": {"kB": 1e-3, "KB": 1e-3, "MB": 1.0, "GB": 1e3, "TB": 1e6},
    "Mbit/s": {"kbit/s": 1e-3, "Kbit/s": 1e-3, "Mbit/s": 1.0, "Gbit/s": 1e3, "kbps": 1e-3,
               "Mbps": 1.0, "Gbps": 1e3},
    "%": {"%": 1.0},
    "s": {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0},
}


def _unit_of_key(loc: tuple) -> str | None:
    """The unit a config key's number is in, where the key says it (docs/usage.md,
    "Keys"): a base profile resource, or a duration law's scale (seconds)."""
    keys = [str(p) for p in loc]
    if keys and keys[0] == "base_profile" and keys[-1] in RESOURCE_UNITS:
        return RESOURCE_UNITS[keys[-1]]
    if keys and keys[-1] == "scale" and _is_duration_law(loc[:-2]):
        return "s"
    return None


def _unit_hint(text: str, loc: tuple) -> str:
    """The hint for a number written with a unit (``2.5 GB``): numbers carry no unit, and
    the value in the key's unit when the written unit converts."""
    m = re.fullmatch(r"\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z%/]+)\s*", text)
    if not m:
        return ""
    unit = _unit_of_key(loc)
    if unit is None:
        return f"; numbers in a config carry no unit: write the number alone, in the key's unit (docs/usage.md, \"Keys\")"
    factor = _UNIT_FACTORS.get(unit, {}).get(m.group(2))
    if factor is None:
        return f"; numbers in a config carry no unit: write the number alone, in {unit}"
    return f"; numbers in a config carry no unit: this key is in {unit}, so write {float(m.group(1)) * factor:g}"


def _is_duration_law(loc: tuple) -> bool:
    """Whether the config key at `loc` holds a duration law (`Dist`, a mapping with a
    ``dist`` key), found from the RunConfig model's fields."""
    node: Any = RunConfig
    field = None
    for part in loc:
        fields = getattr(node, "model_fields", None)
        if not isinstance(fields, dict) or part not in fields:
            return False
        field = fields[part]
        node = field.annotation
    return field is not None and field.discriminator == "dist"


def _describe(err: dict, known: Iterable[str] = ()) -> str:
    """One problem in words; `known` lists the keys accepted where an unknown key was
    found, for a close-name suggestion."""
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = err.get("input")
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        loc = err.get("loc") or ("",)
        return "unknown key" + did_you_mean(loc[-1], known)
    if kind == "greater_than_equal":
        return f"must be >= {_num(ctx['ge'])} (got {got!r})"
    if kind == "greater_than":
        return f"must be > {_num(ctx['gt'])} (got {got!r})"
    if kind == "less_than_equal":
        return f"must be <= {_num(ctx['le']):,} (got {got!r})" if isinstance(_num(ctx['le']), int) \
            else f"must be <= {_num(ctx['le']):g} (got {got!r})"
    if kind == "less_than":
        return f"must be < {_num(ctx['lt'])} (got {got!r})"
    if kind in ("int_type", "int_from_float"):
        hint = ""
        if isinstance(got, float) and math.isfinite(got) and got.is_integer():
            # 1e3 and 1.0 read as real numbers; an integer key wants 1000.
            hint = f"; write {int(got)}: a number with a decimal point or an exponent is a real number"
        elif isinstance(got, str) and re.fullmatch(r"\s*[-+]?[0-9]+\s*", got):
            hint = "; remove the quotes to make it a number"
        return f"must be an integer (got {_got(got)}{hint})"
    if kind == "float_type":
        hint = ""
        if isinstance(got, str):
            try:
                float(got)
                hint = "; remove the quotes to make it a number"
            except ValueError:
                hint = _unit_hint(got, err.get("loc") or ())
        return f"must be a number (got {_got(got)}{hint})"
    if kind == "finite_number":
        return f"must be a finite number (got {got!r})"
    if kind == "string_type":
        return f"must be a string (got {_got(got)})"
    if kind == "list_type":
        return f"must be a list (got {_got(got)})"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        if _is_duration_law(err.get("loc") or ()):
            return (f"must be a mapping (got {_got(got)}): a duration law, in seconds, e.g. "
                    f"{{dist: pareto, scale: 30.0, shape: 1.5}} or {{dist: exponential, scale: 30.0}} "
                    f"(docs/usage.md, \"Durations\")")
        return f"must be a mapping (got {_got(got)})"
    if kind == "literal_error":
        expected = ctx.get("expected")
        return f"must be one of {expected} (got {got!r}){did_you_mean(got, quoted_choices(expected))}"
    if kind == "union_tag_invalid":
        # The tag key is `dist` for a duration law, `kind` for demand.daily.
        tag_key = "".join(quoted_choices(ctx.get("discriminator", "'dist'"))) or "dist"
        tags = quoted_choices(ctx.get("expected_tags", "")) or list(DIST_NAMES)
        return (f"unknown {tag_key} {ctx.get('tag')!r}{did_you_mean(ctx.get('tag'), tags)} "
                f"(expected one of: {', '.join(tags)})")
    if kind == "union_tag_not_found":
        return f"needs a 'dist' key (one of: {', '.join(DIST_NAMES)})"
    if kind == "value_error":
        msg = err["msg"]
        return msg.removeprefix("Value error, ")
    return f"{err['msg']} (got {got!r})"
