"""The policy protocol (paper 2.3).

A policy is a Python object with two methods:

* ``reset(P, rng)``: called once before a run with the run's parameters and the
  policy's own numpy Generator (for Python-side work); allocate any per-node state here
  (estimates, labels...). Jitted policy kernels draw instead from the state's streams,
  e.g. ``rng.uniform(S.rng, rng.STREAM_SCHEDULER)``: passing a Generator into a jitted
  function on every step is slow (rng.py).
* ``act(S, P, t)``: called in every step t after the state update; observes s_t and acts
  through the functions in `gmm_volunteer.actions`, normally from its own ``@njit``
  kernel.

The executor acts before the scheduler, so the scheduler sees the executor's result and
executor actions take precedence (paper 2.3). Register a new policy with
``@register_scheduler("name")`` (or ``register_executor``) on a factory taking the
config's ``scheduler_options`` as keyword arguments; the engine needs no change.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Policy(Protocol):
    name: str

    def reset(self, P, rng: np.random.Generator) -> None: ...

    def act(self, S, P, t: int) -> None: ...


class KernelPolicy:
    """Convenience base: keeps the stream; subclasses implement `act` with a kernel."""

    name = "policy"

    def reset(self, P, rng: np.random.Generator) -> None:
        self.rng = rng
