"""Intervals over seeds need three seeds or more (docs/experiments.md, section 4).

Seeds are the independent replicates of an experiment (paired comparisons and the
capacity search of paper eq. 3 use common random numbers across seeds). An interval
over two seeds says little: a bootstrap of two values has only three distinct
resampled means, so its interval is the range of the two values, and a Student-t bound
has one degree of freedom (t_0.95 = 6.31). Over one seed there is no interval over
seeds at all. Where the analysis, the report or the capacity search forms such an
interval over fewer than `MIN_SEEDS` seeds, `warn_few_seeds` issues a `FewSeedsWarning`
naming the number of seeds; the `gmmv` commands print it once, as
``gmmv COMMAND: warning: ...``.
"""

from __future__ import annotations

import warnings

__all__ = ["MIN_SEEDS", "FewSeedsWarning", "few_seeds_message", "warn_few_seeds", "BOOTSTRAP_TWO_SEEDS",
           "NO_INTERVAL"]

MIN_SEEDS = 3
BOOTSTRAP_TWO_SEEDS = ("resampling two per-seed values gives only three distinct means, so the "
                       "interval is just the range of the two values")
NO_INTERVAL = "no interval over seeds can be formed"


class FewSeedsWarning(UserWarning):
    """An interval over seeds formed from fewer than `MIN_SEEDS` seeds."""


def few_seeds_message(n: int, interval: str, why: str, hint: str = "run 3 or more seeds") -> str:
    return f"{interval} over {n} seed{'' if n == 1 else 's'}: {why}; {hint}"


def warn_few_seeds(n: int, interval: str, why: str, hint: str = "run 3 or more seeds",
                   stacklevel: int = 3) -> bool:
    """Warn (`FewSeedsWarning`) when `n` < `MIN_SEEDS`; return whether it warned."""
    if n >= MIN_SEEDS:
        return False
    warnings.warn(few_seeds_message(n, interval, why, hint), FewSeedsWarning, stacklevel=stacklevel)
    return True
