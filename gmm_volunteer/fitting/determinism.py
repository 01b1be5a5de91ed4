"""Fits that give the same bundle run to run: one thread for the linear algebra.

The ARMA and hazard fits are maximum-likelihood searches on flat surfaces: a multi-
threaded BLAS sums in an order that depends on the number of threads, and those last-bit
differences move the optimiser to another point (two fits of the same traces differed
in a selected coefficient by 1 %). With one thread every sum has one order. The
optimisers' starts are deterministic already (statsmodels' and scipy's own rules, and
`arma.SEGMENT_ORDER_SEED`), no limit is one of wall time (iteration counts only:
`arma.MAXITER`, the Logit's ``maxiter``), and every collection of names or levels is
sorted.

The environment variables are read by the BLAS libraries when they load, which in `gmmv`
happens before a command runs (the CLI imports numpy), so `single_threaded` sets the
thread count of the loaded libraries through threadpoolctl (a dependency after 0.7.0:
without it the limit silently did nothing, and a fit took the machine's cores).
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
def one_thread_in_children():
    """The thread variables set to 1 in this process's environment for the block, so that
    processes started in it load their BLAS libraries with one thread. threadpoolctl in
    a child (`single_threaded`) is not enough: with the variables unset (`gmmv` imports
    numpy before a command runs, so `pin_threads_before_numpy` is too late there), the
    ARMA candidates of the shipped traces fitted in two spawned workers took 96 s of the
    workers' CPU and 156 s wall, against 10 s and 22 s with them set."""
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    os.environ.update({name: "1" for name in THREAD_VARIABLES})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def single_threaded():
    """One BLAS/OpenMP thread inside the block, in numpy's and scipy's BLAS (scipy ships
    its own, which statsmodels' Kalman filter calls). threadpoolctl limits the libraries
    loaded when the block starts, so the fits' libraries are loaded first."""
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401  (loads scipy's BLAS and LAPACK)
    import scipy.optimize  # noqa: F401
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield
