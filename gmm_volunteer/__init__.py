"""gmm-volunteer: a generative Markov model simulator for user-assisted AI inference.

The model follows Lapkovskis et al. (2026), "User-Assisted Collaborative Distributed
Inference for Efficient QoS-Aware Autoscaling", section 2. See docs/model.md; the
layers (model, policies, io, experiments, cli, fitting, testing): docs/api.md.
"""

from gmm_volunteer._version import __version__  # noqa: F401
from gmm_volunteer import _hooks, _moved  # noqa: E402

_moved.install()  # 0.3's module paths, for one release
_hooks.install()  # ds.gmmv on every xarray Dataset
