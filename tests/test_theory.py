"""Exact queueing results (gmm_volunteer/model/theory.py) against independent computations.

MVA is compared with the birth-death chain of the number of jobs at the server, with
closed forms (one user, the machine-repairman server, a server that never saturates) and
with the asymptotic bounds of saturation. `discrete_mean` is compared with explicit
summation and with a Monte Carlo of the simulator's own sampler; the Monte Carlo
tolerance comes from the sample size (stated at the test).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

from gmm_volunteer.run.config import Exponential, LogNormal, Never, Pareto, Weibull
from gmm_volunteer.model.kernels.people import keyed_duration
from gmm_volunteer.model.params import dist_law
from gmm_volunteer.model.theory import (birth_death_marginal, discrete_mean, fifo_mixture_delay, mva_delay_ld,
                                        ps_server_rate)

# (N users, think mean Z, capacity C, demand d, mean work w)
CASES = [
    pytest.param(1, 5.0, 4.0, 1.0, 1.0, id="one_user"),
    pytest.param(1, 0.7, 0.5, 2.0, 3.0, id="one_user_demand_above_capacity"),
    pytest.param(5, 10.0, 2.0, 1.0, 1.0, id="light"),
    pytest.param(20, 3.0, 1.0, 1.0, 1.0, id="single_server_ps"),
    pytest.param(20, 30.0, 1.0, 4.0, 2.0, id="repairman_d_above_C"),
    pytest.param(50, 10.0, 4.0, 1.0, 1.0, id="four_servers"),
    pytest.param(60, 7.5, 2.5, 0.4, 0.8, id="fractional_capacity"),
    pytest.param(400, 5.0, 40.0, 1.0, 1.0, id="deep_saturation_many_slots"),
    pytest.param(30, 0.0, 3.0, 1.0, 1.0, id="no_think_time"),
]

RTOL = 1e-10  # both routes are exact; this leaves room for rounding over a few hundred levels


def bd_means(n, z, mu):
    """(X, Q, R, p) of population n from the birth-death chain."""
    p = birth_death_marginal(n, z, mu)
    rates = mu(np.arange(1, n + 1))
    x = float(np.dot(rates, p[1:]))
    q = float(np.dot(np.arange(n + 1), p))
    return x, q, q / x, p


@pytest.mark.parametrize("n_users, z, c, d, w", CASES)
def test_mva_matches_birth_death_chain(n_users, z, c, d, w):
    mu = ps_server_rate(c, d, w)
    res = mva_delay_ld(n_users, z, mu)
    assert np.array_equal(res.population, np.arange(1, n_users + 1))
    for n in sorted(k for k in {1, 2, n_users // 2, n_users - 1, n_users} if 1 <= k <= n_users):
        x, q, r, p = bd_means(n, z, mu)
        assert res.throughput[n - 1] == pytest.approx(x, rel=RTOL)
        assert res.queue[n - 1] == pytest.approx(q, rel=RTOL)
        assert res.response[n - 1] == pytest.approx(r, rel=RTOL)
    _, _, _, p = bd_means(n_users, z, mu)
    np.testing.assert_allclose(res.marginal, p, rtol=RTOL, atol=1e-14)


@pytest.mark.parametrize("n_users, z, c, d, w", CASES)
def test_mva_little_laws_and_marginal(n_users, z, c, d, w):
    res = mva_delay_ld(n_users, z, ps_server_rate(c, d, w))
    n = res.population
    # whole network: N = X (Z + R); the server: Q = X R; and Q = sum j p(j | N)
    np.testing.assert_allclose(res.throughput * (z + res.response), n, rtol=1e-12)
    np.testing.assert_allclose(res.queue, res.throughput * res.response, rtol=1e-12)
    p = res.marginal
    assert p.shape == (n_users + 1,) and (p >= 0).all()
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert res.queue[-1] == pytest.approx(np.dot(np.arange(n_users + 1), p), rel=1e-12)
    # throughput = rate-weighted occupancy
    assert res.throughput[-1] == pytest.approx(np.dot(ps_server_rate(c, d, w)(n[:]), p[1:]), rel=1e-12)


@pytest.mark.parametrize("z, c, d, w", [(5.0, 4.0, 1.0, 1.0), (0.7, 0.5, 2.0, 3.0), (0.0, 1.0, 1.0, 2.0)])
def test_one_user_closed_form(z, c, d, w):
    res = mva_delay_ld(1, z, ps_server_rate(c, d, w))
    r = w / min(d, c)
    assert res.response[0] == pytest.approx(r, rel=1e-14)
    assert res.throughput[0] == pytest.approx(1.0 / (z + r), rel=1e-14)
    np.testing.assert_allclose(res.marginal, [z / (z + r), r / (z + r)], rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("n_users, z, c, d, w", [(10, 20.0, 1.0, 1.0, 1.0), (25, 8.0, 2.0, 5.0, 3.0)])
def test_single_server_ps_is_machine_repairman(n_users, z, c, d, w):
    """d >= C: one processor shared by all, mu = C / w for every n >= 1 (M/M/1//N):
    p(0) = 1 / sum_k N!/(N-k)! rho^k with rho = (w / C) / Z, X = (1 - p(0)) C / w."""
    res = mva_delay_ld(n_users, z, ps_server_rate(c, d, w))
    rho = (w / c) / z
    p0 = 1.0 / math.fsum(math.perm(n_users, k) * rho**k for k in range(n_users + 1))
    x = (1.0 - p0) * c / w
    assert res.marginal[0] == pytest.approx(p0, rel=1e-12)
    assert res.throughput[-1] == pytest.approx(x, rel=1e-12)
    assert res.response[-1] == pytest.approx(n_users / x - z, rel=1e-12)


def test_server_that_never_saturates_is_infinite_server():
    """C >= N d: every job runs at its demand, R = w / d at every population, and each
    user is independently at the server with probability R / (Z + R)."""
    n_users, z, c, d, w = 12, 4.0, 12.0, 1.0, 3.0
    res = mva_delay_ld(n_users, z, ps_server_rate(c, d, w))
    np.testing.assert_allclose(res.response, w / d, rtol=1e-13)
    q = (w / d) / (z + w / d)
    binom = [math.comb(n_users, j) * q**j * (1 - q) ** (n_users - j) for j in range(n_users + 1)]
    np.testing.assert_allclose(res.marginal, binom, rtol=1e-12)


def test_deep_saturation_reaches_capacity():
    """N w / Z far above C: X(N) -> C / w and R(N) -> N w / C - Z; at every population X
    stays within the asymptotic bounds min(n / (Z + w / min(d, C)), C / w) and grows."""
    n_users, z, c, d, w = 1000, 10.0, 4.0, 1.0, 1.0
    res = mva_delay_ld(n_users, z, ps_server_rate(c, d, w))
    assert res.throughput[-1] == pytest.approx(c / w, rel=1e-12)
    assert res.response[-1] == pytest.approx(n_users * w / c - z, rel=1e-12)
    n = res.population
    bound = np.minimum(n / (z + w / min(d, c)), c / w)
    assert (res.throughput <= bound * (1 + 1e-12)).all()
    assert (np.diff(res.throughput) >= -1e-12).all()
    # about X Z = 40 users think; 200 or more thinking has probability below 1e-70
    assert res.marginal[: n_users - 199].sum() < 1e-60


def test_subtraction_closure_fails_where_product_closure_holds():
    """Why `mva_delay_ld` closes with p(0|n) = (Z X(n)/n) p(0|n-1): the textbook
    p(0|n) = 1 - sum p(j|n) loses the deep-saturation case entirely (this test fails if
    that closure were good enough, i.e. if the case did not exercise it)."""
    n_users, z, mu = 400, 5.0, ps_server_rate(40.0, 1.0, 1.0)
    rates = mu(np.arange(1, n_users + 1))
    p = np.zeros(n_users + 1)
    p[0] = 1.0
    for n in range(1, n_users + 1):
        prev = p[:n].copy()
        x = n / (z + np.dot(np.arange(1, n + 1) / rates[:n], prev))
        p[1 : n + 1] = x / rates[:n] * prev
        p[0] = 1.0 - p[1 : n + 1].sum()
    exact = birth_death_marginal(n_users, z, mu)
    assert np.abs(p - exact).max() > 1e-3
    assert np.abs(mva_delay_ld(n_users, z, mu).marginal - exact).max() < 1e-12


def test_rate_as_array_or_callable():
    mu = ps_server_rate(2.5, 1.0, 2.0)
    n_users = 8
    a = mva_delay_ld(n_users, 3.0, mu)
    b = mva_delay_ld(n_users, 3.0, mu(np.arange(1, n_users + 1)))
    c = mva_delay_ld(n_users, 3.0, lambda n: min(n * 1.0, 2.5) / 2.0)
    for x, y in ((a, b), (a, c)):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize(
    "args, match",
    [
        ((4, 1.0, np.ones(5)), "4 entries"),  # mu(0..N): the wrong indexing is refused
        ((4, 1.0, np.array([1.0, 0.0, 1.0, 1.0])), "finite and > 0"),
        ((4, 1.0, lambda n: math.inf), "finite and > 0"),
        ((0, 1.0, np.ones(0)), "n_users"),
        ((2.5, 1.0, np.ones(2)), "n_users"),
        ((3, -1.0, np.ones(3)), "think_mean"),
        ((3, math.inf, np.ones(3)), "think_mean"),
    ],
)
def test_mva_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        mva_delay_ld(*args)


def test_ps_server_rate():
    mu = ps_server_rate(2.5, 1.0, 2.0)
    np.testing.assert_array_equal(mu(np.arange(1, 6)), [0.5, 1.0, 1.25, 1.25, 1.25])
    assert mu(2) == 1.0 and np.ndim(mu(2)) == 0
    for bad in [(0.0, 1.0, 1.0), (1.0, -1.0, 1.0), (1.0, 1.0, math.inf), (math.nan, 1.0, 1.0)]:
        with pytest.raises(ValueError):
            ps_server_rate(*bad)


# ---------------------------------------------------------------------------------
# discrete_mean
# ---------------------------------------------------------------------------------

PAPER_ONLINE = Weibull(dist="weibull", scale=1133.1, shape=0.5764)
PAPER_OFFLINE = LogNormal(dist="lognormal", mu=math.log(5259.0), sigma=1.5)
PAPER_THINK = Pareto(dist="pareto", scale=30.0, shape=1.5)


def brute(law, terms):
    """1 + sum_{n=1..terms} S(n), summed exactly (fsum)."""
    return 1.0 + math.fsum(law.survival(np.arange(1, terms + 1, dtype=float)))


@pytest.mark.parametrize("mean", [0.05, 0.3, 1.0, 2.5, 50.0, 1000.0])
def test_exponential_closed_form(mean):
    law = Exponential(dist="exponential", mean=mean)
    closed = 1.0 / (1.0 - math.exp(-1.0 / mean))
    # 1 - exp(-1/m) written this way cancels: its relative rounding error is about eps m
    assert discrete_mean(law) == pytest.approx(closed, rel=1e-15 * (4 + 2 * mean))
    # the geometric series itself; terms beyond 60 means are below 1e-26 of the sum
    assert discrete_mean(law) == pytest.approx(brute(law, int(60 * mean) + 60), rel=1e-13)


@pytest.mark.parametrize(
    "law",
    [
        PAPER_ONLINE,
        Weibull(dist="weibull", scale=3.7, shape=0.6),
        Weibull(dist="weibull", scale=5.0, shape=2.0),
        Weibull(dist="weibull", scale=0.4, shape=1.0),
        LogNormal(dist="lognormal", mu=1.0, sigma=0.5),
        LogNormal(dist="lognormal", mu=-0.5, sigma=1.0),
        LogNormal(dist="lognormal", mu=4.0, sigma=0.8),
    ],
    ids=lambda law: f"{law.dist}",
)
def test_numeric_laws_against_explicit_sum(law):
    """Each law's survival beyond 2e6 steps is below 1e-30, so 2e6 terms are the sum."""
    assert float(law.survival(2e6)) < 1e-30
    assert discrete_mean(law) == pytest.approx(brute(law, 2_000_000), rel=1e-11)


def test_wide_lognormal_is_continuous_mean_plus_half():
    """For the paper's offline law an explicit sum would need ~1e9 terms. The trapezoid
    rule from 0 gives E[D] = 1 + int_0^inf S - S(0)/2 + e = E[T] + 1/2 + e with
    |e| <= TV(f) / 8 = f(mode) / 4 (f(0) = 0 for a lognormal)."""
    law = PAPER_OFFLINE
    mode = math.exp(law.mu - law.sigma**2)
    f_mode = math.exp(-0.5 * law.sigma**2) / (law.sigma * mode * math.sqrt(2 * math.pi))
    assert abs(discrete_mean(law) - (law.mean() + 0.5)) <= f_mode / 4


@pytest.mark.parametrize(
    "scale, shape", [(30.0, 1.5), (2.5, 3.5), (1.0, 4.0), (0.4, 2.5), (7.0, 1.2)]
)
def test_pareto_against_sum_with_bracketed_tail(scale, shape):
    """Sum to M = 1e6 explicitly; the rest lies between I(M + 1) and I(M), I(x) =
    scale^a x^(1-a) / (a - 1); the midpoint is off by at most S(M) / 2."""
    law = Pareto(dist="pareto", scale=scale, shape=shape)
    m = 1_000_000
    tail = lambda x: scale**shape * x ** (1.0 - shape) / (shape - 1.0)  # noqa: E731
    ref = brute(law, m) + 0.5 * (tail(m) + tail(m + 1))
    tol = 0.5 * float(law.survival(float(m))) + 1e-13 * ref
    assert abs(discrete_mean(law) - ref) <= tol


def test_infinite_means():
    assert discrete_mean(Never(dist="never")) == math.inf
    assert discrete_mean(Pareto(dist="pareto", scale=30.0, shape=1.0)) == math.inf
    assert discrete_mean(Pareto(dist="pareto", scale=30.0, shape=0.7)) == math.inf


@njit(cache=False)
def _draws(key, law, n):
    out = np.empty(n, np.int64)
    for i in range(n):
        out[i] = keyed_duration(key, 9, law, i, 0)
    return out


def sd_of(law) -> float:
    """Standard deviation of the continuous law T (closed forms)."""
    if law.dist == "exponential":
        return law.mean()
    if law.dist == "weibull":
        g1, g2 = math.gamma(1 + 1 / law.shape), math.gamma(1 + 2 / law.shape)
        return law.scale * math.sqrt(g2 - g1 * g1)
    if law.dist == "lognormal":
        return math.sqrt(math.expm1(law.sigma**2)) * math.exp(law.mu + law.sigma**2 / 2)
    a = law.shape
    return law.scale * math.sqrt(a / ((a - 1) ** 2 * (a - 2)))


MC_LAWS = [
    Exponential(dist="exponential", mean=2.5),
    Exponential(dist="exponential", mean=0.4),
    Weibull(dist="weibull", scale=3.7, shape=0.6),
    Weibull(dist="weibull", scale=5.0, shape=2.0),
    LogNormal(dist="lognormal", mu=1.0, sigma=0.5),
    LogNormal(dist="lognormal", mu=-0.5, sigma=1.0),
    Pareto(dist="pareto", scale=2.5, shape=3.5),
    Pareto(dist="pareto", scale=1.0, shape=4.0),
]


@pytest.mark.parametrize("law", MC_LAWS, ids=lambda law: law.dist)
def test_discrete_mean_matches_simulator_sampler(law):
    """Monte Carlo of the simulator's sampler (`people.keyed_duration`, a fixed key, no
    global random state). D - T lies in [0, 1), so sd(D) <= sd(T) + 1/2 (Minkowski); with
    n = 400,000 draws the mean is accepted within 5 (sd(T) + 1/2) / sqrt(n): a false
    alarm has probability below 6e-7 (normal approximation). The tolerance is also
    required to be well below |E[D] - E[T]|, so the test tells the discretised mean from
    the continuous one."""
    n = 400_000
    d = _draws(np.uint64(20250911), dist_law(law), n)
    tol = 5.0 * (sd_of(law) + 0.5) / math.sqrt(n)
    expected = discrete_mean(law)
    assert abs(expected - law.mean()) > 4 * tol
    assert abs(d.mean() - expected) < tol, (d.mean(), expected, tol)


@pytest.mark.parametrize("n_users, z, w", [(1, 10.0, 5.0), (5, 30.0, 4.0), (20, 600.0, 25.0), (40, 100.0, 10.0)])
def test_fifo_chain_with_one_class_is_the_product_form(n_users, z, w):
    # Exponential work of one mean: FCFS is product form (BCMP), the same as processor sharing.
    x, r, q = fifo_mixture_delay(n_users, z, [w], [1.0])
    mva = mva_delay_ld(n_users, z, ps_server_rate(1.0, 1.0, w))
    assert x == pytest.approx(mva.throughput[-1], rel=1e-9)
    assert r == pytest.approx(mva.response[-1], rel=1e-9)
    assert q == pytest.approx(x * r, rel=1e-12)
    # Classes of equal means are one class.
    assert fifo_mixture_delay(n_users, z, [w, w], [0.3, 0.7])[1] == pytest.approx(r, rel=1e-9)


def test_fifo_chain_one_user_and_variable_work():
    # One user never queues: R = E[S], X = 1 / (Z + E[S]).
    x, r, _ = fifo_mixture_delay(1, 50.0, [5.0, 45.0], [0.5, 0.5])
    assert r == pytest.approx(25.0, rel=1e-12) and x == pytest.approx(1 / 75.0, rel=1e-12)
    # Work more variable than exponential waits longer under FIFO than under sharing.
    for n in (5, 20, 40):
        r_fifo = fifo_mixture_delay(n, 600.0, [5.0, 45.0], [0.5, 0.5])[1]
        assert r_fifo > mva_delay_ld(n, 600.0, ps_server_rate(1.0, 1.0, 25.0)).response[-1]
    with pytest.raises(ValueError):
        fifo_mixture_delay(3, 10.0, [1.0, 2.0], [0.5, 0.6])


@pytest.mark.parametrize("n_users, z, w, c", [(5, 30.0, 4.0, 2), (20, 300.0, 25.0, 2), (12, 50.0, 10.0, 3)])
def test_fifo_chain_with_c_servers_and_one_class_is_the_product_form(n_users, z, w, c):
    # c servers of one job each, one exponential law: the load-dependent rate min(n, c) / w.
    x, r, _ = fifo_mixture_delay(n_users, z, [w], [1.0], servers=c)
    mva = mva_delay_ld(n_users, z, ps_server_rate(float(c), 1.0, w))
    assert x == pytest.approx(mva.throughput[-1], rel=1e-9)
    assert r == pytest.approx(mva.response[-1], rel=1e-9)
    # As many servers as users: nobody waits, R = E[S] whatever the mix.
    assert fifo_mixture_delay(4, 20.0, [5.0, 45.0], [0.5, 0.5], servers=4)[1] == pytest.approx(25.0, rel=1e-9)
