"""Old home of the fused runners; every policy pair now has one (policies.runner).
Kept for one release."""

from gmm_volunteer.policies.runner import fused_runner  # noqa: F401
