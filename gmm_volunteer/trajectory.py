"""The trajectory version: which simulator made a trajectory (docs/results/README.md).

The package version changes with every release, most of which leave every run's numbers
as they were (new commands, docs, speed). `TRAJECTORY_VERSION` changes only when a change
alters trajectories: the same config, seed and bundle give another result store (the
engine, a policy, a sampler, a default of the config). It is the package version of the
release that made that change, so it reads as "trajectories as of version X".

Result stores record it (`trajectory_version` in their attributes), and so do the
committed result tables under docs/results/; `make test` fails when a committed table
claims to describe the current model but was made by another trajectory version.

Bump it in the same commit as the change that alters trajectories, set to the new
package version (pyproject.toml and `gmm_volunteer.__version__`).
"""

TRAJECTORY_VERSION = "0.6.0"
