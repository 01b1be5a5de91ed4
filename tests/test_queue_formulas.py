"""Open-queue formulas of gmm_volunteer/model/theory.py (Erlang C, M/M/c wait, Allen-Cunneen)
against their closed forms (docs/routing.md, queue-aware routing)."""

from __future__ import annotations

import math

import pytest

from gmm_volunteer.model.theory import allen_cunneen_wait, erlang_c, mmc_wait


def erlang_c_direct(c: int, a: float) -> float:
    """Textbook form: (a^c / c!) (c / (c - a)) / (sum_{k<c} a^k / k! + (a^c / c!) c / (c - a))."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


@pytest.mark.parametrize("c,a", [(1, 0.5), (2, 1.5), (5, 3.0), (10, 9.5), (30, 20.0)])
def test_erlang_c_matches_closed_form(c, a):
    assert erlang_c(c, a) == pytest.approx(erlang_c_direct(c, a), rel=1e-12)


def test_erlang_c_edges_and_large_c():
    assert erlang_c(1, 0.25) == pytest.approx(0.25)  # M/M/1: P(wait) = rho
    assert erlang_c(3, 0.0) == 0.0
    assert erlang_c(3, 3.0) == 1.0  # unstable
    # the recursion stays finite where a^c / c! would overflow
    val = erlang_c(400, 380.0)
    assert 0.0 < val < 1.0


def test_mmc_wait_mm1_and_unstable():
    lam, mu = 0.6, 1.0
    assert mmc_wait(1, lam, mu) == pytest.approx(lam / (mu * (mu - lam)))  # rho / (mu - lam)
    assert mmc_wait(2, 2.5, 1.0) == math.inf
    assert mmc_wait(2, 0.0, 1.0) == 0.0


def test_allen_cunneen_is_exact_where_it_should_be():
    # M/M/c: both SCVs 1 -> Erlang C.
    assert allen_cunneen_wait(4, 3.0, 1.0, 1.0, 1.0) == pytest.approx(mmc_wait(4, 3.0, 1.0))
    # M/G/1 (Pollaczek-Khinchine): W = rho (1 + cs2) / (2 mu (1 - rho)).
    lam, mu, cs2 = 0.7, 1.0, 0.0  # M/D/1
    rho = lam / mu
    pk = rho * (1 + cs2) / (2 * mu * (1 - rho))
    assert allen_cunneen_wait(1, lam, mu, 1.0, cs2) == pytest.approx(pk)
    cs2 = 4.0
    assert allen_cunneen_wait(1, lam, mu, 1.0, cs2) == pytest.approx(rho * (1 + cs2) / (2 * mu * (1 - rho)))
    # G/G/c scales the M/M/c wait by (ca2 + cs2) / 2.
    assert allen_cunneen_wait(3, 2.0, 1.0, 0.5, 2.5) == pytest.approx(1.5 * mmc_wait(3, 2.0, 1.0))
