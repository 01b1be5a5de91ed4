"""Optimising with the model (paper section 2.4).

* `env`: the Gymnasium environment ``gmm_volunteer/Scheduling-v0`` (eq. 2: a learning
  agent sets the weighted scheduler between steps), registered when this package is
  imported (Gymnasium is needed then: ``pip install gmm-volunteer[test]`` or
  ``[optimise]``);
* `search`: policy search over the weighted scheduler's weights with common random
  numbers, and the paired comparison with other schedulers on held-out seeds.

docs/optimisation.md has the commands and measured results.
"""

from __future__ import annotations

ENV_ID = "gmm_volunteer/Scheduling-v0"


def _register() -> None:
    try:
        import gymnasium
    except ImportError:  # the search works without Gymnasium
        return
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point="gmm_volunteer.optimisation.env:SchedulingEnv")


_register()
