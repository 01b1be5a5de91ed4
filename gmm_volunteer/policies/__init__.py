"""Decision-making policies (paper section 2.3): executor and schedulers."""

from gmm_volunteer.policies.registry import (  # noqa: F401
    executor_names,
    make_executor,
    make_scheduler,
    register_executor,
    register_scheduler,
    scheduler_names,
)
