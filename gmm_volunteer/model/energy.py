"""The energy the service spends (docs/model.md D37; paper section 1 and 3.3: the case for
volunteers rests on the energy and cost of data centres).

Each node class has a power model: ``idle_w`` watts at no CPU use, ``full_w`` at its
whole CPU maximum, linear in the CPU used in between (the linear model of Fan, Weber
and Barroso, ISCA 2007), plus ``mbit_j`` joules per Mbit it moves. Steps are 1 s, so a
step's energy in J is its mean power in W.

* The server is always on for the service: its power is per base profile of capacity,
  so a server of capacity k draws k x idle_w at rest, and its CPU term is
  (full_w - idle_w) x CPU used / the base profile's CPU (the same slope at any k).
* A volunteer's device is on for its owner whether or not it serves (paper 2.2: its
  availability is the owner's), so the service is charged only what its work adds:
  (full_w - idle_w) x CPU used / the device's CPU maximum, plus its transfers.
"""

from __future__ import annotations

import numpy as np

# Default power models, (idle_w, full_w, mbit_j); docs/model.md D37 gives each figure's
# source. The server's are per base profile (2 cores at the default profile): a
# SPECpower_ssj2008 result of a 12-core server (58.4 W idle, 222 W full) times 2/12.
DEFAULT_POWER = {
    "server": (9.7, 37.0, 0.0),
    "user": (15.0, 26.0, 0.0),
}
MAX_POWER_W = 1.0e6  # a bound on any config figure (W, or J per Mbit)


def server_energy(power, capacity: np.ndarray, cpu_used: np.ndarray, mbit: np.ndarray,
                  base_cpu: float) -> np.ndarray:
    """Joules per step of the server: `capacity` its CPU capacity multiplier per step
    (maximum CPU / base profile's), `cpu_used` its CPU consumption (%), `mbit` the Mbit
    it moved (both directions); `power` has idle_w, full_w, mbit_j."""
    cap = np.asarray(capacity, np.float64)
    cpu = np.asarray(cpu_used, np.float64)
    return (power.idle_w * cap + (power.full_w - power.idle_w) * cpu / base_cpu
            + power.mbit_j * np.asarray(mbit, np.float64))


def user_energy(power, cpu_used: np.ndarray, mbit: np.ndarray, cpu_max: float) -> np.ndarray:
    """Joules per step the service adds on a user class's devices: `cpu_used` their CPU
    consumption (%, summed over the class), `mbit` what they moved, `cpu_max` one
    device's CPU maximum (%)."""
    return ((power.full_w - power.idle_w) * np.asarray(cpu_used, np.float64) / cpu_max
            + power.mbit_j * np.asarray(mbit, np.float64))
