"""Base classes of the decision-making policies (paper 2.3).

A policy is one class in one file: a pydantic ``Options`` model and one or two
``@njit`` hooks. The base class runs the duties every policy of its kind has, in a fixed
order, and calls the hooks in between, so a policy cannot forget one:

* `Scheduler`, each step after the executor: ``downloads`` (u^{x,pi}: start subtask-data
  downloads; default none), cancel the placements of requests that ended (u^{y,pi} =
  cancel, which also drains the state's list of obsolete requests), finish the requests
  whose subtasks are all done (u^{y,pi} = finish), then ``place`` (u^{y,pi} = execute:
  assign pending (user, subtask) pairs to nodes).
* `Executor`, each step before the scheduler: ``act`` (enforce the per-node limits).
  The executor acts first, so its actions take precedence (paper 2.3).

Hooks are ``@njit`` functions ``hook(S, P, t, args)`` on the state and parameter
structs; ``args`` is the tuple of the option values in the order the ``Options`` model
declares them (`Policy.kernel_args`). Hooks act through `gmm_volunteer.model.actions`, which
keep every index of the state consistent, and draw random numbers from the state's
streams (``rng.uniform(S.rng, rng.STREAM_SCHEDULER)``), never from a global generator.

Because the hooks are plain jitted functions, every policy, a subclass or one defined
outside the package alike, runs on the fused fast path (`policies.runner`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import numpy as np
from numba.core.registry import CPUDispatcher
from pydantic import BaseModel, ConfigDict

from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.actions import cancel_obsolete, finish_ready_requests


class Policy(Protocol):
    """What the engine calls: ``reset`` once before a run, ``act`` every step."""

    name: str

    def reset(self, P, rng: np.random.Generator) -> None: ...

    def act(self, S, P, t: int) -> None: ...


CheckpointState = dict[str, Any]
"""What a policy's ``checkpoint_state`` returns and ``restore_checkpoint`` takes back: a
dict with str keys whose values are of the types a checkpoint holds
(`gmm_volunteer.model.checkpoint_values.VALUE_TYPES`: None, bool, int, float, str,
NumPy arrays and scalars of numbers, ``numpy.random.Generator``, and lists, tuples and
str-keyed dicts of these). A checkpoint is plain data, never a pickle, so it can hold
nothing else (docs/policies.md, "Checkpoints")."""

CHECKPOINT_HOOKS = ("checkpoint_state", "restore_checkpoint")


def checkpoint_refusal(cls) -> str | None:
    """Why runs of policy class `cls` cannot be checkpointed, or None when they can.

    A class of this package can (its base classes say it keeps no state; those that
    keep some say what). A class from outside must define both hooks itself, in its
    own body or a base of its own: one inherited from a class of this package does not
    know the state the subclass adds, and a checkpoint would silently drop it."""
    if not isinstance(cls, type):
        return f"{cls!r} is a factory, not a policy class with checkpoint hooks"
    ours = cls.__module__.split(".")[0] == "gmm_volunteer"
    for hook in CHECKPOINT_HOOKS:
        owner = next((k for k in cls.__mro__ if hook in vars(k)), None)
        if owner is None:
            return f"{cls.__module__}.{cls.__qualname__} has no {hook}() method"
        if not ours and owner.__module__.split(".")[0] == "gmm_volunteer":
            return (f"{cls.__module__}.{cls.__qualname__} does not define {hook}() (it inherits "
                    f"{owner.__qualname__}'s, which does not know the state the class adds)")
    return None


def several_servers_refusal(kind: str, name: str, policy, servers: list[str]) -> str | None:
    """Why `policy` (the config's `kind` named `name`) cannot run a config with these
    servers, or None: one server suits every policy; several only one that says it
    chooses among them (`several_servers`, docs/model.md D40)."""
    if len(servers) <= 1 or getattr(policy, "several_servers", False):
        return None
    reason = getattr(policy, "several_servers_reason", None)
    if reason:
        return f"{kind}: {name!r} {reason} (servers: {', '.join(servers)}; docs/model.md D40)"
    return (f"{kind}: {name!r} chooses between one dedicated server and the volunteers; it does not "
            f"run a config with several servers (servers: {', '.join(servers)}; docs/model.md D40). Use "
            f"one server, or a {kind} that handles several (docs/policies.md)")


class NoOptions(BaseModel):
    """Options of a policy that has none: any key is an error."""

    model_config = ConfigDict(extra="forbid", strict=True)


OPTIONS_CONFIG = ConfigDict(extra="forbid", strict=True, frozen=True)
"""The model config policies' ``Options`` use: unknown keys and wrong types are errors
when the run config loads (exit 2 naming the key), not tracebacks mid-run."""


@kernel
def no_downloads(S, P, t, args):
    """The ``downloads`` hook of a scheduler that starts none (e.g. centralized)."""
    return


@kernel
def no_action(S, P, t, args):
    """The ``act`` hook of an executor that enforces nothing (tests only)."""
    return


class _KernelPolicy:
    """Shared machinery: options, hooks as static functions, per-run stream."""

    name: ClassVar[str] = "policy"
    Options: ClassVar[type[BaseModel]] = NoOptions
    _HOOKS: ClassVar[tuple[str, ...]] = ()
    # Whether it runs a config with several dedicated servers (docs/model.md D35): a
    # policy that says so chooses among all of them (its docstring gives the rule);
    # any other is refused such a config before the run (`run.preflight`).
    several_servers: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # A dispatcher stored on a class binds like a method (numba dispatchers are
        # descriptors); hooks take (S, P, t, args), so store them unbound.
        for hook in cls._HOOKS:
            value = cls.__dict__.get(hook)
            if isinstance(value, CPUDispatcher):
                setattr(cls, hook, staticmethod(value))
            elif value is not None and not isinstance(value, staticmethod):
                raise TypeError(f"{cls.__qualname__}.{hook} must be an @njit function (got {value!r})")

    def __init__(self, **options: Any):
        self.options = self.Options.model_validate(options)

    @classmethod
    def validate_options(cls, options: dict | None) -> BaseModel:
        """The validated ``Options``; raises pydantic's ValidationError."""
        return cls.Options.model_validate(options or {})

    def kernel_args(self) -> tuple:
        """The ``args`` tuple the hooks receive: option values in declaration order."""
        return tuple(getattr(self.options, f) for f in type(self.options).model_fields)

    def set_options(self, **changes: Any) -> None:
        """Change option values between steps (validated like the config's). Hooks
        read the new values from the next step on; values of the same types keep the
        compiled kernels (numba specialises on the ``args`` types, not their values)."""
        self.options = self.Options.model_validate({**self.options.model_dump(), **changes})
        self._args = self.kernel_args()

    def hooks(self) -> dict[str, CPUDispatcher]:
        return {h: getattr(self, h) for h in self._HOOKS}

    def reset(self, P, rng: np.random.Generator) -> None:
        """Called once before a run with the policy's own Generator (Python-side work
        only: jitted hooks draw from the state's streams, rng.py)."""
        self.rng = rng
        self._args = self.kernel_args()

    def prepare(self, params, steps: int) -> None:
        """Called once after `reset` with the run's parameters (the `Params` namedtuple)
        and length; a policy that keeps arrays of its own (the routers,
        policies.routing) allocates them here."""

    def record_series(self, steps: int) -> tuple[dict, dict]:
        """Variables this policy adds to the run record, (series, coords) as in
        `RunRecord.policy_series` / `policy_coords`; none by default."""
        return {}, {}

    # -- checkpoints (docs/policies.md, "Checkpoints") ----------------------------------

    def checkpoint_state(self) -> CheckpointState:
        """What this policy changes during a run beyond its Generator ``rng`` (which the
        checkpoint saves itself) and what `reset` and `prepare` rebuild from the config:
        nothing for the package's stateless policies. Subclasses with state return it
        here and take it back in `restore_checkpoint`."""
        return {}

    def restore_checkpoint(self, state: CheckpointState) -> None:
        """Take back what `checkpoint_state` returned, after `reset` and `prepare`."""
        if state:
            raise ValueError(f"holds {', '.join(sorted(state))}, which {type(self).__qualname__} does not keep")


class Scheduler(_KernelPolicy):
    """A scheduler (paper 2.3): subclasses set ``name``, ``Options`` and the ``place``
    hook, and ``downloads`` if they start subtask-data downloads. ``act`` is the base
    class's: subclasses must not override it (their duties would be skipped)."""

    _HOOKS = ("downloads", "place")
    downloads = staticmethod(no_downloads)
    place: ClassVar[CPUDispatcher]

    def __init_subclass__(cls, **kwargs):
        if "act" in cls.__dict__:
            raise TypeError(
                f"{cls.__qualname__} overrides Scheduler.act; implement the place/downloads "
                "hooks instead (the base class runs cancel and finish around them)"
            )
        super().__init_subclass__(**kwargs)

    def act(self, S, P, t: int) -> None:
        # Same order as the fused runner (policies.runner): trajectories are equal.
        args = self._args
        self.downloads(S, P, t, args)
        cancel_obsolete(S, P, t)
        finish_ready_requests(S, P, t)
        self.place(S, P, t, args)


class Executor(_KernelPolicy):
    """An executor (paper 2.3): subclasses set ``name``, ``Options`` and the ``act_kernel``
    hook, which must leave every online node's memory and storage use within its
    allocation (the conformance checker verifies it)."""

    _HOOKS = ("act_kernel",)
    act_kernel: ClassVar[CPUDispatcher]

    def __init_subclass__(cls, **kwargs):
        if "act" in cls.__dict__:
            raise TypeError(f"{cls.__qualname__} overrides Executor.act; implement act_kernel instead")
        super().__init_subclass__(**kwargs)

    def act(self, S, P, t: int) -> None:
        self.act_kernel(S, P, t, self._args)


class KernelPolicy:
    """Old base of the built-in policies (before `Scheduler`/`Executor`); kept for one
    release so that outside policies written against it still run (stepped from
    Python, without option validation)."""

    name = "policy"

    def reset(self, P, rng: np.random.Generator) -> None:
        self.rng = rng
