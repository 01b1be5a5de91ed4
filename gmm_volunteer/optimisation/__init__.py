"""Optimising with the model (paper section 2.4).

* `env`: the Gymnasium environment ``gmm_volunteer/Scheduling-v0`` (eq. 2: a learning
  agent sets the weighted scheduler between steps), registered when this package is
  imported (Gymnasium is needed then: ``pip install gmm-volunteer[optimise]``), so
  ``gym.make("gmm_volunteer.optimisation:gmm_volunteer/Scheduling-v0")`` works without
  an import of ours; `register_envs` is also the package's ``gymnasium.envs`` entry
  point;
* `search`: policy search over the weighted scheduler's weights with common random
  numbers, and the paired comparison with other schedulers on held-out seeds.

docs/optimisation.md has the commands and measured results.
"""

from __future__ import annotations

ENV_ID = "gmm_volunteer/Scheduling-v0"


def register_envs() -> None:
    """Register ``gmm_volunteer/Scheduling-v0`` with Gymnasium (once; nothing when
    Gymnasium is not installed: the search works without it)."""
    try:
        import gymnasium
    except ImportError:
        return
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point="gmm_volunteer.optimisation.env:SchedulingEnv")


register_envs()
