"""Seeding and random streams (DESIGN.md section 4).

One `SeedSequence` per run; every component gets its own stream so that runs differing
only in scheduler or capacity see the same users (common random numbers). Draws that
describe a user -- the n-th online/offline period, the n-th request's type, think time
and patience -- come from a counter-based hash keyed by (seed, component, user, counter),
so they do not depend on how many other draws a policy caused.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from gmm_volunteer.model.kernels.jit import kernel


# Components of the counter-based generator.
KEY_AVAILABILITY = 1
KEY_THINK = 2
KEY_PATIENCE = 3
KEY_REQUEST_TYPE = 4
KEY_DATA = 5  # subtask data users hold at t = 0 (model/initial_data.py)
KEY_RTT = 6  # a user's round-trip time to each dedicated server (model/network.py)

STREAMS = ("init", "allocation", "consumption", "hazard", "scheduler", "executor")


def seed_sequence(seed: int | None) -> np.random.SeedSequence:
    """The run's root SeedSequence; with `seed=None`, fresh entropy (kept in the output)."""
    return np.random.SeedSequence(seed)


def streams(ss: np.random.SeedSequence) -> dict[str, np.random.Generator]:
    """Independent Generators per component, spawned in a fixed order."""
    children = ss.spawn(len(STREAMS) + 1)
    gens = {name: np.random.Generator(np.random.PCG64(c)) for name, c in zip(STREAMS, children)}
    return gens


def hash_key(ss: np.random.SeedSequence) -> np.uint64:
    """64-bit key for the counter-based generator, derived from the root entropy."""
    return np.uint64(ss.generate_state(1, np.uint64)[0])


@njit(cache=True, inline="always")
def _splitmix64(x):
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    z = x
    z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    return z ^ (z >> np.uint64(31))


@kernel
def keyed_uniform(key, component, entity, counter, draw):
    """A uniform in (0, 1) that depends only on its five arguments."""
    h = _splitmix64(key ^ np.uint64(component))
    h = _splitmix64(h ^ np.uint64(entity))
    h = _splitmix64(h ^ np.uint64(counter))
    h = _splitmix64(h ^ np.uint64(draw))
    # 52 random bits, centred in their interval: strictly inside (0, 1).
    return ((h >> np.uint64(12)) + 0.5) * (1.0 / 4503599627370496.0)


_MASK = 0xFFFFFFFFFFFFFFFF


def _splitmix64_int(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def keyed_uniform_int(key: int, component: int, entity: int, counter: int, draw: int) -> float:
    """`keyed_uniform` in Python integers, for processes that must not compile kernels:
    the testbed's devices draw the simulator's users (testbed.draws: keyed) under a CPU
    quota of a few per cent. The same value for the same arguments
    (tests/test_testbed_draws.py checks it against the kernel)."""
    h = _splitmix64_int(int(key) ^ int(component))
    h = _splitmix64_int(h ^ int(entity))
    h = _splitmix64_int(h ^ int(counter))
    h = _splitmix64_int(h ^ int(draw))
    return ((h >> 12) + 0.5) * (1.0 / 4503599627370496.0)


# ---- Streams inside the state ------------------------------------------------------
# Kernels draw from SplitMix64 streams whose 64-bit states live in the simulator state
# (array `S.rng`, one entry per component). Passing a numpy Generator into a jitted
# function costs tens of microseconds per call, which at 100,000 steps and several
# calls per step would dominate a run; a counter in an array costs nothing to pass.
# Each stream starts from a state spawned from the run's SeedSequence.
STREAM_ALLOCATION = 0
STREAM_CONSUMPTION = 1
STREAM_WORK = 2  # execution work of batches (was the phase-hazard draws before 0.3.0)
STREAM_SCHEDULER = 3
STREAM_EXECUTOR = 4
# The dedicated server's allocation innovations (paper 2.2 allows it its own parameters):
# a stream of its own, so that its path does not depend on how many users are online.
STREAM_SERVER = 5
# Phase-end draws of execution.progress: paper (docs/model.md D27), one per batch and step;
# a stream of its own, untouched under progress: work, so its runs are as before.
STREAM_HAZARD = 6
N_STREAMS = 8


def stream_states(ss: np.random.SeedSequence) -> np.ndarray:
    """Initial SplitMix64 states, one per kernel stream, spawned from `ss`."""
    child = ss.spawn(1)[0]
    return child.generate_state(N_STREAMS, np.uint64)


@njit(cache=True, inline="always")
def _advance(x):
    """SplitMix64 step: the next state of a stream."""
    return x + np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, inline="always")
def _output(x):
    """SplitMix64 output of state x."""
    z = x
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def next_u64(st, k):
    x = _advance(st[k])
    st[k] = x
    return _output(x)


@njit(cache=True, inline="always")
def uniform(st, k):
    """Uniform in (0, 1) from stream k (52 bits, never 0 or 1)."""
    return ((next_u64(st, k) >> np.uint64(12)) + 0.5) * (1.0 / 4503599627370496.0)


# Standard normals: Marsaglia and Tsang's ziggurat ("The Ziggurat Method for Generating
# Random Variables", J. Stat. Softw. 5(8), 2000) with 256 layers, one 64-bit draw per
# value in about 99% of cases (8 bits choose the layer, 1 the sign, 52 the abscissa).
# It replaced Box-Muller, whose log, sqrt and sin/cos per pair dominated the allocation
# and consumption factors (docs/model.md, "Random numbers").
_ZIG_LAYERS = 256
_ZIG_R = 3.6541528853610088  # start of the tail
_ZIG_V = 0.00492867323399  # area of each layer (and of the base strip with the tail)
_ZIG_M = 2.0**52


def _ziggurat_tables():
    """ki (acceptance thresholds on the 52-bit abscissa), wi (its scale), fi = f(x_i)."""
    ki = np.zeros(_ZIG_LAYERS, np.uint64)
    wi = np.zeros(_ZIG_LAYERS)
    fi = np.zeros(_ZIG_LAYERS)
    dn = tn = _ZIG_R
    q = _ZIG_V / np.exp(-0.5 * dn * dn)
    ki[0] = np.uint64((dn / q) * _ZIG_M)
    ki[1] = 0
    wi[0] = q / _ZIG_M
    wi[_ZIG_LAYERS - 1] = dn / _ZIG_M
    fi[0] = 1.0
    fi[_ZIG_LAYERS - 1] = np.exp(-0.5 * dn * dn)
    for i in range(_ZIG_LAYERS - 2, 0, -1):
        dn = np.sqrt(-2.0 * np.log(_ZIG_V / dn + np.exp(-0.5 * dn * dn)))
        ki[i + 1] = np.uint64((dn / tn) * _ZIG_M)
        tn = dn
        fi[i] = np.exp(-0.5 * dn * dn)
        wi[i] = dn / _ZIG_M
    return ki, wi, fi


ZIG_KI, ZIG_WI, ZIG_FI = _ziggurat_tables()


@kernel
def _normal_slow(st, k, idx, x, negative):
    """The ziggurat's rare cases: the tail beyond R (layer 0) or a wedge."""
    if idx == 0:
        while True:
            xx = -np.log(uniform(st, k)) / _ZIG_R
            yy = -np.log(uniform(st, k))
            if yy + yy > xx * xx:
                return -(_ZIG_R + xx) if negative else _ZIG_R + xx
    if (ZIG_FI[idx - 1] - ZIG_FI[idx]) * uniform(st, k) + ZIG_FI[idx] < np.exp(-0.5 * x * x):
        return x
    return np.nan  # rejected: the caller draws again


@njit(cache=True, inline="always")
def _ziggurat(r):
    """The ziggurat's candidate from a 64-bit draw r: (x, layer, negative, accepted), where
    accepted means x lies inside its layer's rectangle (about 99% of draws)."""
    idx = np.int64(r & np.uint64(0xFF))
    negative = ((r >> np.uint64(8)) & np.uint64(1)) != 0
    rabs = (r >> np.uint64(9)) & np.uint64(0x000FFFFFFFFFFFFF)
    x = np.float64(np.int64(rabs)) * ZIG_WI[idx]  # exact: rabs < 2^52
    if negative:
        x = -x
    return x, idx, negative, rabs < ZIG_KI[idx]


@njit(cache=True, inline="always")
def normal(st, k):
    """Standard normal from stream k (ziggurat, 256 layers)."""
    while True:
        x, idx, negative, accepted = _ziggurat(next_u64(st, k))
        if accepted:
            return x
        x = _normal_slow(st, k, idx, x, negative)
        if x == x:
            return x


@kernel
def fill_normals(st, k, out, n):
    """out[:n] = the next n values of `normal(st, k)`, in order. The stream's state stays
    in a local across the loop (the per-value calls re-read it from memory), which makes
    a block about 1.4x as fast as n single draws (7.9 against 10.8 ns per value, measured)."""
    x = st[k]
    i = 0
    while i < n:
        x = _advance(x)
        v, idx, negative, accepted = _ziggurat(_output(x))
        if not accepted:
            st[k] = x
            v = _normal_slow(st, k, idx, v, negative)
            x = st[k]
            if v != v:
                continue
        out[i] = v
        i += 1
    st[k] = x


@njit(cache=True, inline="always")
def randint(st, k, n):
    """Uniform integer in [0, n)."""
    i = np.int64(uniform(st, k) * n)
    return i if i < n else n - 1


@kernel
def shuffle(st, k, a):
    """In-place Fisher-Yates shuffle of a 1-d array."""
    for i in range(a.size - 1, 0, -1):
        j = randint(st, k, i + 1)
        a[i], a[j] = a[j], a[i]


@kernel
def permutation(st, k, n):
    a = np.arange(n)
    shuffle(st, k, a)
    return a
