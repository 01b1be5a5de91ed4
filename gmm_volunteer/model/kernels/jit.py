"""`kernel`: the decorator of the simulator's jitted functions (numba's njit, cached).

numba compiles a jitted function once per tuple of argument types it is called with
from other jitted code, and a constant argument (an event code, a stream number, node 0)
types as a literal of its value: `abort_batch(S, P, b, EV_RESET, t)` and
`abort_batch(S, P, b, EV_ABORT, t)` became two compilations, and so did every call with
an int32 id (read from an index array) against one with an int64: the demo's first run
compiled 172 versions of 103 functions, 134 with `kernel`. `kernel` resolves calls from
jitted code with literals replaced by their type and integers widened to int64 (uint64
stays), so one version serves them all. Values are unchanged: a widened integer holds
the same number, and the arithmetic on floats is the same.
"""

from __future__ import annotations

from numba import njit, types


def _widened(t):
    t = types.unliteral(t)
    if isinstance(t, types.Integer) and not (t.signed is False and t.bitwidth == 64):
        return types.int64
    return t


def kernel(func=None, **options):
    """``@kernel`` or ``@kernel(inline="always", ...)``: ``njit(cache=True, ...)`` with
    one compiled version per argument types up to literal values and integer width."""

    def wrap(f):
        dispatcher = njit(cache=True, **options)(f)
        resolve = dispatcher.get_call_template

        def get_call_template(args, kws):
            return resolve(tuple(_widened(a) for a in args), {k: _widened(v) for k, v in kws.items()})

        dispatcher.get_call_template = get_call_template
        return dispatcher

    return wrap(func) if func is not None else wrap
