"""Finite bounds on every number in a policy's options, whatever its Options model says.

Option values end up in int64 and float64 arrays the kernels read (`kernel_args`) and in
sizes of arrays a policy allocates: an integer at or above 2^63 overflows (a traceback
at best), NaN passes every comparison, and 1e300 overflows the results to inf. Values
beyond `OPTION_MAX` are far outside any meaningful setting, so they are refused at load.
"""

from __future__ import annotations

import math
from typing import Any

OPTION_MAX = 1e12


def option_bound_problems(values: Any, prefix: str = "") -> list[str]:
    """Dotted keys of numbers outside [-OPTION_MAX, OPTION_MAX] or not finite, with the
    reason, in `values` (a validated options model's dump, nested models included)."""
    out: list[str] = []
    if isinstance(values, dict):
        for k, v in values.items():
            out += option_bound_problems(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(values, (list, tuple)):
        for i, v in enumerate(values):
            out += option_bound_problems(v, f"{prefix}.{i}")
    elif isinstance(values, bool) or values is None:
        pass
    elif isinstance(values, (int, float)):
        if isinstance(values, float) and not math.isfinite(values):
            out.append(f"{prefix}: must be a finite number (got {values!r})")
        elif abs(values) > OPTION_MAX:
            out.append(f"{prefix}: must be within +-{OPTION_MAX:g} (got {values!r})")
    return out
