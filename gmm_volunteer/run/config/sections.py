"""The sections of a run config (docs/usage.md, "Keys"): the users and the server with
their allocation laws and capacities (paper 2.1-2.2, 3.1), the base resource profile,
availability and requests (paper 2.2), allocation restarts, execution (docs/model.md)
and output. The demand, burst and scripted-event sections are model concepts, in
`gmm_volunteer.model` (`demand`, `bursts`, `events`)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Mapping

import numpy as np
from pydantic import BaseModel, BeforeValidator, Field, ValidationInfo, field_validator, model_serializer, model_validator

from gmm_volunteer.model.constants import RESOURCES
from gmm_volunteer.model.suggest import did_you_mean
from gmm_volunteer.run.config.laws import (
    _STRICT, MAX_ALLOCATION_SD, MAX_BURN_IN, MAX_CAPACITY, MAX_CONCURRENCY, MAX_PROFILE,
    MAX_REQUEST_TYPES, MAX_USERS, Dist, LogNormal, Never, Pareto, RoundTrip, Weibull,
)
from gmm_volunteer.run.config.messages import number, value_words


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
    raise ValueError(f"must be 'dedicated', 'fitted' or a mapping {{base, mean, sd}} (got {value_words(v)})")


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


SERVER_NAME = "server"  # the name of a server written without one (the single `server:`)
SERVER_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"


class Server(_Section):
    """A dedicated server (paper 2.1: v0; several of them, docs/model.md D35). Its maximum
    allocation per resource r is, in order of precedence, ``max_allocation.r``,
    ``resource_capacity.r`` x ``base_profile.r``, or ``capacity`` x ``base_profile.r``
    (docs/model.md D20). ``rtt`` is the network round-trip time between it and a user,
    a law drawn once per user (D35); left out, the users are at no distance from it (the
    paper's model)."""

    name: str = Field(SERVER_NAME, pattern=SERVER_NAME_PATTERN)
    capacity: float = Field(gt=0, le=MAX_CAPACITY)
    rtt: RoundTrip | None = None
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
        # The same for a default name and no distance: a one-server config dumps as
        # before several servers existed (docs/model.md D35).
        d = handler(self)
        d = {k: v for k, v in d.items() if k not in ("resource_capacity", "max_allocation", "cost_weights") or v}
        if d.get("name") == SERVER_NAME:
            del d["name"]
        if d.get("rtt") is None:
            d.pop("rtt", None)
        return d

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
                f"a pareto availability law needs shape > 1 (got {number(v.shape)}): with an "
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
    # When a request and each of its subtasks end (docs/model.md D34): "whole_step", at the
    # end of the step in which their last phase finished (paper 2.1's 1 s steps: latencies
    # are whole seconds, every result before 0.10.0); "substep", at the moment inside that
    # step at which the phase's work ran out (progress: work knows it, D26), so latencies
    # are real numbers. With phase_changes: carry_over the next phase also starts there.
    latency: Literal["whole_step", "substep"] = "whole_step"
    # What ends a phase (docs/model.md D27): "work", the work the phase needs is done with
    # the resources granted (D10, since 0.3.0); "paper", a draw from the bundle's fitted
    # discrete-time hazard each step, every active batch charged its sampled consumption
    # for the whole step and CPU overcommit scaling it down (paper 2.2 as written).
    progress: Literal["work", "paper"] = "work"
    # The batch size the fitted hazards are evaluated at under progress: paper (D27):
    # "extrapolate", the batch's own size, also beyond the sizes the traces measured (the
    # work-fraction hazard through the work table's linear extrapolation, D32; a paper-form
    # hazard's polynomial as written); "clamp", clamped to the measured range, as the
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
        if self.progress == "paper" and self.latency != "whole_step":
            raise ValueError(f"latency: {self.latency} needs progress: work (under progress: paper a "
                             "phase ends by its hazard draw at a step boundary, so no time inside the "
                             "step is known; docs/model.md D34)")
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
        if self.progress != "paper" and self.hazard_batch_size != "extrapolate":
            raise ValueError(f"hazard_batch_size: {self.hazard_batch_size} needs progress: paper (under "
                             "progress: work no hazard is evaluated, so the setting would change nothing; "
                             "docs/model.md D27)")
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
