"""gmm-volunteer: a generative Markov model simulator for user-assisted AI inference.

The model follows Lapkovskis et al. (2026), "User-Assisted Collaborative Distributed
Inference for Efficient QoS-Aware Autoscaling", section 2. See docs/model.md.
"""

__version__ = "0.3.0"
