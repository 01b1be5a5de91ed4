"""gmm-volunteer: a generative Markov model simulator for user-assisted AI inference.

The model follows Lapkovskis et al. (2026), "User-Assisted Collaborative Distributed
Inference for Efficient QoS-Aware Autoscaling", section 2. See docs/model.md; the
layers (model, policies, io, experiments, cli, fitting, testing): docs/api.md.
"""

__version__ = "0.6.0"

from gmm_volunteer import _moved  # noqa: E402

_moved.install()  # 0.3's module paths, for one release
