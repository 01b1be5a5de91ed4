"""Rounding of fitted numbers before they enter a bundle.

Six significant digits keep `bundle.yaml` readable and make re-fits byte-identical
even when the optimizer's last bits would differ.
"""

from __future__ import annotations

import math

SIG_DIGITS = 6
# Below this magnitude a fitted number is numerical noise around zero (e.g. 1e-17).
ZERO = 1e-12


def sig(x: float, digits: int = SIG_DIGITS) -> float:
    """`x` rounded to `digits` significant digits, as a plain Python float."""
    x = float(x)
    if abs(x) < ZERO:
        return 0.0
    if not math.isfinite(x):
        return x
    return float(f"{x:.{digits - 1}e}")


def sig_list(xs, digits: int = SIG_DIGITS) -> list[float]:
    return [sig(x, digits) for x in xs]


def sig_matrix(rows, digits: int = SIG_DIGITS) -> list[list[float]]:
    return [sig_list(r, digits) for r in rows]
