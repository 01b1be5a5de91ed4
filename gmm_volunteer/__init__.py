"""gmm-volunteer: a generative Markov model simulator for user-assisted AI inference.

The model follows Lapkovskis et al. (2026), "User-Assisted Collaborative Distributed
Inference for Efficient QoS-Aware Autoscaling", section 2. See docs/model.md; the
layers (model; io and policies; the run layer; experiments, optimisation, CLI, fitting,
testbed and testing on top): docs/api.md.
"""

from gmm_volunteer._version import __version__  # noqa: F401
from gmm_volunteer import _hooks  # noqa: E402

_hooks.install()  # ds.gmmv on every xarray Dataset
