"""What one simulation run hands to the result writer (docs/formats.md, section 2).

Plain NumPy arrays named like the variables of the result store, so that the engine
never imports xarray or zarr and the writer never touches simulator state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gmm_volunteer.model.constants import EVENTS, MONITOR_OPS, NODE_CLASSES, OUTCOMES, RESOURCES  # noqa: F401



def real_or_int(end) -> type:
    """The type of request ends and latencies: float64 when the ends are times inside a
    step (execution.latency: substep, docs/model.md D34), else int64 (whole steps)."""
    return np.float64 if np.issubdtype(np.asarray(end).dtype, np.floating) else np.int64


@dataclass
class RunRecord:
    """Per-request records, per-step series and metadata of one run.

    Request arrays have one entry per ended request (shape ``(n_requests,)``); series
    have ``steps`` rows. ``request_type_names`` names the codes in ``request_type``.
    """

    request_user: np.ndarray  # int32
    request_type: np.ndarray  # int8
    request_start: np.ndarray  # int64
    request_end: np.ndarray  # int64: the last active step; float64 under latency: substep, the time (D34)
    request_outcome: np.ndarray  # int8, index into OUTCOMES
    online_users: np.ndarray  # int32 (steps,)
    active_requests: np.ndarray  # int32 (steps,)
    server_allocation: np.ndarray  # float32 (steps, 5)
    server_consumption: np.ndarray  # float32 (steps, 5)
    user_consumption: np.ndarray  # float32 (steps, 5)
    subtask_events: np.ndarray  # int32 (steps, 2, 5)
    completed_work: np.ndarray  # float32 (steps, 2): CPU-seconds of executions finished
    request_type_names: tuple[str, ...]
    attrs: dict = field(default_factory=dict)
    # The dedicated server's maximum allocation in effect per step (steps, 5), set by the
    # autoscaler's control plane, and its actions (n, 4): step ordered, step effective
    # (-1: cancelled), units from, units to (docs/model.md D17). None in records made
    # before autoscalers existed.
    dedicated_capacity: np.ndarray | None = None  # float32 (steps, 5)
    scaling_actions: np.ndarray | None = None  # int64 (n_actions, 4)
    scaling_action_cost: np.ndarray | None = None  # float64 (n_actions,): capacity x h
    # Variables a policy records beside these (docs/routing.md: the monitor's cost, the
    # routers' decisions): name -> (dims, array, attrs); the first dim "time" has
    # ``steps`` rows. Coordinates they need: name -> values (a dimension coordinate), or
    # name -> (dim, values) for one along another dimension (a unit per field, e.g.).
    policy_series: dict = field(default_factory=dict)
    policy_coords: dict = field(default_factory=dict)

    @property
    def request_latency(self) -> np.ndarray:
        """end - start: whole seconds (int64), or real ones under latency: substep (D34)."""
        return (self.request_end - self.request_start).astype(real_or_int(self.request_end))

    @property
    def steps(self) -> int:
        return int(self.online_users.shape[0])
