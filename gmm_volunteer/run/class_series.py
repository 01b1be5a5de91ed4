"""What a run records per user class and the energy it spends (docs/model.md D36, D37):
the variables a run's record carries beside the core ones (docs/formats.md).

Always: the joules per step of the server and of each user class (`model.energy`), on a
``user_class`` dimension named by the classes. With several classes also each class's
online users, CPU-seconds given, Mbit moved and subtask events per step, and each
request's class (the class of the user who sent it).
"""

from __future__ import annotations

import numpy as np

from gmm_volunteer.io.conventions import REQUEST, flag_attrs
from gmm_volunteer.model.constants import BAND_IN, BAND_OUT, CPU
from gmm_volunteer.model.energy import server_energy, user_energy
from gmm_volunteer.run.server_series import server_capacities, server_energies

CLASS_DIM = "user_class"


def user_events(ser_ev: np.ndarray) -> np.ndarray:
    """Subtask events per step for (server, users) from per-node-class counts: the
    users' classes summed (the array itself with one class)."""
    if ser_ev.shape[1] == 2:
        return ser_ev
    return np.stack([ser_ev[:, 0], ser_ev[:, 1:].sum(axis=1)], axis=1)


def class_series(cfg, params, arrays, steps: int, n_requests: int, capacity: np.ndarray | None,
                 scaled: int = 0):
    """(series, coords) of the record (`RunRecord.policy_series` layout) for the first
    `steps` steps and `n_requests` logged requests; `capacity` is the maximum allocation
    in effect per step (steps, resources) of server `scaled` (the one an autoscaler
    scales), None for the configured one. With several servers `server_energy` is the
    sum of theirs (`server_series`, D35)."""
    classes = cfg.users.class_list(cfg.availability)
    names = [c.name for c in classes]
    base_cpu = float(cfg.base_profile.cpu)
    srv_cpu = (np.asarray(capacity)[:steps, CPU] if capacity is not None
               else np.full(steps, params.amax[0, CPU]))
    scons = arrays.ser_scons[:steps].astype(np.float64)
    if params.n_srv > 1:  # each server with its own capacity and power model (D35)
        srv = server_energies(cfg, arrays, steps, server_capacities(params, steps, scaled, capacity)).sum(axis=1)
    else:  # the server moves what the users download and upload (its band_out and band_in)
        srv = server_energy(cfg.server.power, srv_cpu / base_cpu, scons[:, CPU],
                            scons[:, BAND_IN] + scons[:, BAND_OUT], base_cpu)
    if len(classes) == 1:
        ucons = arrays.ser_ucons[:steps, None, :].astype(np.float64)
    else:
        ucons = arrays.ser_ccons[:steps].astype(np.float64)
    mbit = ucons[:, :, BAND_IN] + ucons[:, :, BAND_OUT]
    users = np.stack([user_energy(c.power, ucons[:, k, CPU], mbit[:, k], params.amax[1 + k, CPU])
                      for k, c in enumerate(classes)], axis=1)
    series = {
        "server_energy": (("time",), srv, {
            "long_name": "energy the dedicated server spent in the step (docs/model.md D37)",
            "units": "J"}),
        "user_energy": (("time", CLASS_DIM), users, {
            "long_name": "energy the service added on each user class's devices in the step "
                         "(docs/model.md D37)", "units": "J"}),
    }
    if len(classes) > 1:
        per_node = arrays.ser_ev[:steps]
        series.update({
            "class_online_users": (("time", CLASS_DIM), arrays.ser_conline[:steps].copy(), {
                "long_name": "users of each class online after the availability update", "units": "1"}),
            "class_cpu_given": (("time", CLASS_DIM), (ucons[:, :, CPU] / 100.0).astype(np.float32), {
                "long_name": "CPU-seconds each user class's devices gave in the step", "units": "s"}),
            "class_transfer": (("time", CLASS_DIM), mbit.astype(np.float32), {
                "long_name": "data each user class's devices moved in the step (in and out)",
                "units": "Mbit"}),
            "class_subtask_events": (("time", CLASS_DIM, "event"), per_node[:, 1:].copy(), {
                "long_name": "subtask events per step on each user class's devices", "units": "1"}),
            "request_user_class": ((REQUEST,),
                                   (arrays.node_class[arrays.lg_user[:n_requests]] - 1).astype(np.int8),
                                   {"long_name": "class of the user who sent the request",
                                    **flag_attrs(names)}),
        })
    return series, {CLASS_DIM: names}


def class_names(ds) -> list[str]:
    """The user classes of a result store (one, the default, for stores made before
    classes existed)."""
    if CLASS_DIM in ds.coords:
        return [str(x) for x in ds[CLASS_DIM].values]
    return ["users"]

