"""Decision-making policies (paper section 2.3): executor and schedulers.

`base` has the classes a policy derives from, `registry` finds a policy by name, import
string or entry point, `runner` runs any scheduler/executor pair on the fused fast path
and `conformance` checks a policy against the duties of its kind.
"""

from gmm_volunteer.policies.registry import (  # noqa: F401
    autoscaler_names,
    executor_names,
    make_autoscaler,
    make_executor,
    make_scheduler,
    register_autoscaler,
    register_executor,
    register_scheduler,
    scheduler_names,
)
