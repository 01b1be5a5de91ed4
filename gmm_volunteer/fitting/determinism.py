"""Fits that give the same bundle run to run: one thread for the linear algebra.

The ARMA and hazard fits are maximum-likelihood searches on flat surfaces: a multi-
threaded BLAS sums in an order that depends on thread timing, and those last-bit
differences move the optimiser to another point (two fits of the same traces differed
in a selected coefficient by 1 %). With one thread every sum has one order. The
optimisers' starts are deterministic already (statsmodels' and scipy's own rules, and
`arma.SEGMENT_ORDER_SEED`), and every collection of names or levels is sorted.
"""

from __future__ import annotations

import contextlib
import os
import sys

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def pin_threads_before_numpy() -> bool:
    """Ask the BLAS libraries for one thread; effective only before numpy is imported
    (they read the variables when they load). Returns whether it was in time."""
    if "numpy" in sys.modules:
        return False
    for name in THREAD_VARIABLES:
        os.environ[name] = "1"
    return True


@contextlib.contextmanager
def single_threaded():
    """One BLAS/OpenMP thread inside the block, when threadpoolctl is installed (the
    libraries are loaded already); without it, only `pin_threads_before_numpy` helps."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=1):
        yield
