"""Autoscalers of the dedicated server (issue 11; DESIGN.md section 7; docs/model.md D17).

An autoscaler chooses how many capacity units the dedicated server (node 0) has. It is
the third policy kind next to the scheduler and the executor (paper 2.3 names the
server's capacity as what the operator sizes; paper 2.4 optimizes it as a constant;
here it may change during a run). It sees the system only through a `Monitor` (a
period and a lag) and acts only through the `ControlPlane` (units between a minimum and
a maximum, a provisioning delay for scale-out, a cooldown before scale-in). Built-ins:
``fixed`` (the default, the capacity of ``server.capacity`` for the whole run),
``reactive``, ``capacity_rule`` and ``la_imr``, one file each.
"""

from gmm_volunteer.policies.autoscalers.base import (  # noqa: F401
    Autoscaler,
    AutoscalerOptions,
    MonitorOptions,
)
