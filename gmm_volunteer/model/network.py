"""Network distance between the dedicated servers and the users (docs/model.md D35).

Paper 2.1 places one dedicated server and the users' devices in one network with no
distance between them; its section 3.3 leaves several servers, and the network between
them and the users, to future work. Here each server has a round-trip-time law, and
each user draws its round-trip time to each server once, at the start of the run, from
a counter-based draw keyed by (seed, server, user) (`rng.KEY_RTT`): a user keeps its
distance for the whole run, and a user's distance does not depend on how many users,
servers or other draws the run has. The time is added to every transfer of subtask
data between that server and that user.

A law travels as ``[code, a, b]`` (float64), like the duration laws (`model.laws`),
whose codes it reuses for the lognormal and the exponential; ``fixed`` (a = seconds)
and ``uniform`` (a = low, b = high) are the network's own.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from gmm_volunteer.model import laws
from gmm_volunteer.model.rng import KEY_RTT, keyed_uniform

FIXED, UNIFORM = 10, 11  # beyond the duration laws' codes (laws.NAMES)
CODES = {"fixed": FIXED, "uniform": UNIFORM, "lognormal": laws.LOGNORMAL, "exponential": laws.EXPONENTIAL}
MAX_RTT = 3600.0  # seconds; a draw of a law's tail is clipped here (no network is an hour away)


def rtt_law(name: str, a: float, b: float = 0.0) -> np.ndarray:
    """``[code, a, b]`` of the round-trip-time law `name`."""
    if name not in CODES:
        raise ValueError(f"unknown round-trip-time law {name!r} (known: {', '.join(CODES)})")
    return np.array([CODES[name], float(a), float(b)], dtype=np.float64)


@njit(cache=True)
def _draw(key, rtt_laws, n_users):
    """(S, n_users + 1) float64 round-trip times from `rtt_laws` (S, 3) float64, one row
    per server; column 0 is left zero. `key` is the run's uint64 hash key."""
    out = np.zeros((rtt_laws.shape[0], n_users + 1))
    for s in range(rtt_laws.shape[0]):
        kind, a, b = int(rtt_laws[s, 0]), rtt_laws[s, 1], rtt_laws[s, 2]
        for i in range(1, n_users + 1):
            u1 = keyed_uniform(key, KEY_RTT, i, s, 0)
            u2 = keyed_uniform(key, KEY_RTT, i, s, 1)
            if kind == FIXED:
                x = a
            elif kind == UNIFORM:
                x = a + (b - a) * u1
            else:
                x = laws.continuous_duration(kind, a, b, u1, u2)
            out[s, i] = min(max(x, 0.0), MAX_RTT)
    return out


def user_rtts(rtt_laws: np.ndarray, n_users: int, key) -> np.ndarray:
    """Round-trip time in seconds of each user i = 1..n_users to each server s: an
    (S, n_users + 1) array, column 0 unused (zero). `rtt_laws` is (S, 3), one law per
    server (`rtt_law`); `key` the run's hash key (`rng.hash_key`)."""
    rtt_laws = np.ascontiguousarray(rtt_laws, dtype=np.float64).reshape(-1, 3)
    return _draw(np.uint64(key), rtt_laws, int(n_users))


def node_network(cfg, n_users: int, key=None):
    """The network of a run config (docs/model.md D35): (whether any server has a
    distance, each node's round-trip time to its home server, each node's home server,
    each node's round-trip time to each server). Nodes 0..S-1 are the servers (their
    times zero, each its own home), node S - 1 + i is user i. A user's home server is
    the nearest (the least round-trip time; ties to the first in config order): the
    server its volunteer transfers go through. Without `key` (a check before the run)
    the times are left zero and every home is the first server. ValueError, naming the
    key, for a distance with phases that end by a hazard draw."""
    servers = getattr(cfg, "servers", None) or [cfg.server]
    n_srv = len(servers)
    n_nodes = n_users + n_srv
    sv_rtt = np.zeros((n_srv, n_nodes))
    home = np.concatenate([np.arange(n_srv), np.zeros(n_users)]).astype(np.int64)
    timed = [k for k, s in enumerate(servers) if s.rtt is not None]
    if not timed:
        return 0, np.zeros(n_nodes), home, sv_rtt
    ex = cfg.execution
    if ex.progress != "work":
        where = "server.rtt" if n_srv == 1 else f"servers.{timed[0]}.rtt"
        raise ValueError(f"{where}: a network distance needs execution.progress: work (docs/model.md "
                         "D35: the round-trip time delays a transfer's data from when its phase "
                         "began, which a phase that ends by a hazard draw does not know)")
    if key is None:
        return 1, np.zeros(n_nodes), home, sv_rtt
    laws = np.stack([s.rtt.law() if s.rtt is not None else rtt_law("fixed", 0.0) for s in servers])
    sv_rtt[:, n_srv:] = user_rtts(laws, n_users, key)[:, 1:]
    home[n_srv:] = np.argmin(sv_rtt[:, n_srv:], axis=0)  # the first of equal times
    return 1, sv_rtt[home, np.arange(n_nodes)], home, sv_rtt
