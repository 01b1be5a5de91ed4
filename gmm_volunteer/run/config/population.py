"""The users of a run config (docs/usage.md, "users"): how many, their devices and, with
``users.classes``, a population of device classes (docs/model.md D36).

The paper assumes homogeneous users (section 3.3 names per-user context as what a real
deployment needs first). A class has a share of the population, its device's maximum
allocation (a multiplier of ``base_profile`` and per-resource values), its own
availability and allocation laws, its speed against the bundle and its power model;
what a class leaves out it takes from ``users`` and the top-level ``availability``.
Without ``classes`` the users are one class, ``users``, exactly as before classes
existed.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_serializer

from gmm_volunteer.run.config.laws import MAX_CAPACITY, MAX_USERS
from gmm_volunteer.run.config.messages import number
from gmm_volunteer.run.config.sections import (
    ALLOCATION_RESOURCES, Availability, MaxAllocation, UserAllocation, UserAllocationLaw, UserPower,
    _Section,
)

MAX_CLASSES = 64  # classes are stored as int8 codes; a population needs a handful
DEFAULT_CLASS = "users"  # the one class of a config without `classes`


class UserClass(_Section):
    """One class of devices (docs/model.md D36). Keys left out take the value of
    ``users`` (capacity, allocation, power) or of the top-level ``availability``."""

    name: str = Field(min_length=1, max_length=64)
    share: float = Field(gt=0, le=1)
    capacity: float | None = Field(None, gt=0, le=MAX_CAPACITY)
    # per-resource maximum allocation (Mbit/s, %, MB), replacing capacity x base_profile
    max_allocation: MaxAllocation = Field(default_factory=MaxAllocation)
    availability: Availability | None = None
    allocation: UserAllocationLaw | None = None
    # the device's execution work against the bundle's volunteer work (D29, D30)
    work_scale: float = Field(1.0, gt=0.0, le=1000.0)
    power: UserPower | None = None

    @model_serializer(mode="wrap")
    def _set_only(self, handler):
        d = handler(self)
        return {k: v for k, v in d.items() if v is not None and not (k == "max_allocation" and not v)}

    def maximum(self, base_vec: np.ndarray) -> np.ndarray:
        """The device's maximum allocation per resource (`ALLOCATION_RESOURCES` order);
        its capacity must be resolved (`Users.class_list`)."""
        out = np.asarray(base_vec, dtype=np.float64) * self.capacity
        for r, a in self.max_allocation.values().items():
            out[ALLOCATION_RESOURCES.index(r)] = a
        return out


class Users(_Section):
    count: int = Field(ge=1, le=MAX_USERS)
    capacity: float = Field(1.0, gt=0, le=MAX_CAPACITY)
    allocation: UserAllocationLaw = Field(default_factory=UserAllocation)
    # Subtask data the users hold at t = 0 (docs/model.md D2): "filled", what the
    # distributed schedulers' download rule leaves after a long history; "empty", none
    # (the behaviour before 0.6.0).
    initial_data: Literal["filled", "empty"] = "filled"
    # A volunteer device's power model (D37)
    power: UserPower = Field(default_factory=UserPower)
    # Device classes (D36); None: one class, `users`, of every key above.
    classes: list[UserClass] | None = Field(None, min_length=1, max_length=MAX_CLASSES)

    @model_serializer(mode="wrap")
    def _compact(self, handler):
        # Left out when not set, so that a config without them dumps (and is stored in
        # every result's attrs) exactly as before they existed.
        return {k: v for k, v in handler(self).items()
                if not (k == "classes" and v is None or k == "power" and v == UserPower().model_dump())}

    @field_validator("classes")
    @classmethod
    def _population(cls, v: list[UserClass] | None) -> list[UserClass] | None:
        if v is None:
            return v
        names = [c.name for c in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"class names must differ (given twice: {', '.join(dup)})")
        total = math.fsum(c.share for c in v)
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"the shares must sum to 1 (they sum to {number(total)}: "
                             + ", ".join(f"{c.name} {number(c.share)}" for c in v) + ")")
        return v

    def class_list(self, availability: Availability) -> list[UserClass]:
        """Every class with each key resolved: what it leaves out comes from `users`
        and `availability`. One class named `DEFAULT_CLASS` without `classes`."""
        given = self.classes if self.classes is not None else [UserClass(name=DEFAULT_CLASS, share=1.0)]
        return [c.model_copy(update={
            "capacity": c.capacity if c.capacity is not None else self.capacity,
            "availability": c.availability if c.availability is not None else availability,
            "allocation": c.allocation if c.allocation is not None else self.allocation,
            "power": c.power if c.power is not None else self.power,
        }) for c in given]

    def class_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.classes) if self.classes is not None else (DEFAULT_CLASS,)
