"""argparse types with finite bounds, so that a numeric option outside what the program
can represent or use is refused with exit 2 (argparse's usage error) before any work:
integers at or above 2^63 overflow the int64 arrays they end up in, NaN passes every
``<`` comparison, and 0 workers or seeds would do nothing silently."""

from __future__ import annotations

import argparse
import math

SEED_MAX = 2**63 - 1  # seeds become int64 entropy words (and must stay distinct)
COUNT_MAX = 1_000_000  # seeds, workers, trials, evaluations: far above any real use


def count(lo: int = 1, hi: int = COUNT_MAX):
    """An integer in [lo, hi]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo:,} and {hi:,}, got {text}")
        return value

    parse.__name__ = "integer"
    return parse


def seed(text: str) -> int:
    """A seed: an integer in [0, 2^63)."""
    return count(0, SEED_MAX)(text)


def real(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False):
    """A finite float in [lo, hi] (or the open ends asked for)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if lo is not None and (value < lo or (lo_open and value == lo)):
            raise argparse.ArgumentTypeError(f"must be {'>' if lo_open else '>='} {lo:g}, got {text}")
        if hi is not None and (value > hi or (hi_open and value == hi)):
            raise argparse.ArgumentTypeError(f"must be {'<' if hi_open else '<='} {hi:g}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


def distinct_seeds(seeds: list[int], option: str) -> list[int]:
    """`seeds` if no value repeats; a repeated seed is the same replicate twice (zero
    variance, a falsely tight interval), so it raises ValueError naming `option`."""
    from collections import Counter

    repeated = sorted(s for s, n in Counter(seeds).items() if n > 1)
    if repeated:
        raise ValueError(f"{option}: seeds repeat ({', '.join(map(str, repeated))}); "
                         f"replicates need distinct seeds")
    if not seeds:
        raise ValueError(f"{option}: need at least one seed")
    return list(seeds)
