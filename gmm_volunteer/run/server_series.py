"""What a run with several dedicated servers records per server (docs/model.md D35;
docs/formats.md): the variables a run's record carries beside the core ones.

The core variables ``server_allocation``, ``server_consumption``, ``server_energy``,
``subtask_events`` and ``completed_work`` keep their layout and hold the servers'
totals (``dedicated_capacity`` stays the maximum allocation of the server the
autoscaler scales, the first when none does), so that every reader of a one-server
store reads a several-server store the same way; a one-server run adds nothing (its
store is what it always was). With
several servers these add each server's own, on a ``server`` dimension named by the
servers in config order: its allocation, its consumption (its links carry the
transfers of the users homed at it, D35), its maximum allocation in effect (the
scaled server's changes with the autoscaler, D17), the work of the executions it
finished and the energy it spent (D37, with its own power model).
"""

from __future__ import annotations

import numpy as np

from gmm_volunteer.model.constants import BAND_IN, BAND_OUT, CPU
from gmm_volunteer.model.energy import server_energy

SERVER_DIM = "server"


def server_capacities(params, steps: int, scaled: int, capacity: np.ndarray | None) -> np.ndarray:
    """(steps, servers, resources) float64: each server's maximum allocation in effect
    per step: its configured one, and for server `scaled` the control plane's `capacity`
    series (steps, resources) when given."""
    caps = np.broadcast_to(np.asarray(params.sv_amax, np.float64)[None], (steps,) + params.sv_amax.shape).copy()
    if capacity is not None:
        caps[:, scaled] = np.asarray(capacity, np.float64)[:steps]
    return caps


def server_energies(cfg, arrays, steps: int, caps: np.ndarray) -> np.ndarray:
    """(steps, servers) J: each server's energy per step (`model.energy.server_energy`
    with its own power model), from its own series (several servers only)."""
    base_cpu = float(cfg.base_profile.cpu)
    cons = arrays.ser_svcons[:steps].astype(np.float64)
    return np.stack([server_energy(s.power, caps[:, k, CPU] / base_cpu, cons[:, k, CPU],
                                   cons[:, k, BAND_IN] + cons[:, k, BAND_OUT], base_cpu)
                     for k, s in enumerate(cfg.servers)], axis=1)


def server_series(cfg, params, arrays, steps: int, scaled: int, capacity: np.ndarray | None):
    """(series, coords) of the record (`RunRecord.policy_series` layout): nothing for
    one server; each server's variables for several."""
    if params.n_srv == 1:
        return {}, {}
    caps = server_capacities(params, steps, scaled, capacity)
    per_resource = {"units_coordinate": "resource_unit"}
    dims = ("time", SERVER_DIM, "resource")
    series = {
        "allocation_per_server": (dims, arrays.ser_svalloc[:steps].copy(), {
            "long_name": "each dedicated server's allocation a_t", **per_resource}),
        "consumption_per_server": (dims, arrays.ser_svcons[:steps].copy(), {
            "long_name": "each dedicated server's consumption c_t before the executor acts "
                         "(band_in and band_out: the transfers of the users homed at it)", **per_resource}),
        "capacity_per_server": (dims, caps.astype(np.float32), {
            "long_name": "each dedicated server's maximum allocation in effect", **per_resource}),
        "work_per_server": (("time", SERVER_DIM), arrays.ser_svwork[:steps].copy(), {
            "long_name": "work (CPU-seconds) of the executions each server finished in the step",
            "units": "s"}),
        "energy_per_server": (("time", SERVER_DIM), server_energies(cfg, arrays, steps, caps), {
            "long_name": "energy each dedicated server spent in the step (docs/model.md D37)",
            "units": "J"}),
    }
    return series, {SERVER_DIM: list(cfg.server_names())}
