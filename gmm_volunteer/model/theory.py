"""Exact results of queueing theory that the simulator is checked against (DESIGN.md
section 6, "an exact check against queueing theory").

The reference system is a closed network of N users who are always online (config law
`never` for `availability.online`, docs/usage.md) and never abandon (`requests.patience:
never`). A user thinks for a time of mean Z (the delay, or infinite-server, station), then
sends a request whose single subtask runs on the dedicated server, and thinks again when
it is done (paper section 2.2, requests; the server is node 0 of section 2.1). The server
shares its capacity C among the jobs present by processor sharing, each job using at most
its own demand d, so with n jobs the work of mean w is done at rate
mu(n) = min(n d, C) / w (`ps_server_rate`). The number of jobs at the server is then a
birth-death process and the network has a product-form solution; its means follow from
exact mean-value analysis (`mva_delay_ld`).

Both stations are insensitive: an infinite-server station and a processor-sharing
station with a load-dependent rate keep the product form for any distribution of think
time and work with the same means (Baskett, Chandy, Muntz and Palacios, "Open, closed,
and mixed networks of queues with different classes of customers", J. ACM 22(2), 1975).
The simulator's think time is a whole number of steps D = max(1, ceil(T))
(`laws.discrete_duration`), so the Z to compare with is E[D], not E[T]: `discrete_mean`.

References:

- M. Reiser and S. S. Lavenberg, "Mean-value analysis of closed multichain queuing
  networks", J. ACM 27(2), 1980 (MVA, including load-dependent stations).
- E. D. Lazowska, J. Zahorjan, G. S. Graham and K. C. Sevcik, "Quantitative System
  Performance", Prentice-Hall, 1984 (load-dependent service centres in MVA).
- G. Bolch, S. Greiner, H. de Meer and K. S. Trivedi, "Queueing Networks and Markov
  Chains", 2nd ed., Wiley, 2006, ch. 8 (mean value analysis).
- L. Kleinrock, "Queueing Systems, Vol. 1: Theory", Wiley, 1975, ch. 3 (birth-death
  queues, finite populations).

Open multi-server queues (the routers' delay estimates, docs/routing.md): Erlang's C
formula for M/M/c (`erlang_c`, `mmc_wait`) and the Allen-Cunneen approximation of the
mean wait in G/G/c (`allen_cunneen_wait`), which the queue-aware router of seed 002
uses. They are `@njit` so that policy kernels call this one definition.

- A. O. Allen, "Probability, Statistics, and Queueing Theory", 2nd ed., Academic Press,
  1990, section 6.4 (the Allen-Cunneen approximation).
- L. Kleinrock, "Queueing Systems, Vol. 1", section 3.5 (M/M/m, Erlang's C formula).

Pure NumPy (SciPy for the Hurwitz zeta and the normal / incomplete-gamma tails); nothing
here is random, and only the open-queue formulas are compiled.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence, Union

import numpy as np
from numba import njit

__all__ = [
    "erlang_c",
    "mmc_wait",
    "allen_cunneen_wait",
    "MVAResult",
    "mva_delay_ld",
    "birth_death_marginal",
    "ps_server_rate",
    "fifo_mixture_delay",
    "discrete_mean",
]

Rate = Union[Callable[[int], float], Sequence[float], np.ndarray]


class MVAResult(NamedTuple):
    """Exact means of the delay + load-dependent network for populations n = 1..N.

    Entry ``n - 1`` of each array belongs to population n; ``marginal`` is for the full
    population N only.
    """

    population: np.ndarray  # n = 1..N (int64)
    throughput: np.ndarray  # X(n): completions per unit time at the load-dependent station
    response: np.ndarray  # R(n): mean time a job spends there per visit (queue + service)
    queue: np.ndarray  # Q(n): mean number of jobs there, = X(n) R(n)
    marginal: np.ndarray  # p(j | N), j = 0..N: probability of j jobs there


def _rates(rate: Rate, n_users: int) -> np.ndarray:
    """mu(1..N) as a float array (entry n - 1 is mu(n)), checked finite and > 0."""
    if callable(rate):
        mu = np.array([float(rate(n)) for n in range(1, n_users + 1)])
    else:
        mu = np.asarray(rate, dtype=float)
        if mu.shape != (n_users,):
            raise ValueError(
                f"rate must be a callable or an array of mu(1..N) with N = {n_users} entries "
                f"(entry n - 1 is mu(n)); got shape {mu.shape}"
            )
    if not np.all(np.isfinite(mu) & (mu > 0)):
        raise ValueError("every rate mu(n), n = 1..N, must be finite and > 0")
    return mu


def _check_population(n_users: int, think_mean: float) -> None:
    if int(n_users) != n_users or n_users < 1:
        raise ValueError(f"n_users must be an integer >= 1 (got {n_users!r})")
    if not (math.isfinite(think_mean) and think_mean >= 0):
        raise ValueError(f"think_mean must be finite and >= 0 (got {think_mean!r})")


def mva_delay_ld(n_users: int, think_mean: float, rate: Rate) -> MVAResult:
    """Exact MVA of N jobs cycling between a delay station (mean time Z) and one
    load-dependent station that completes jobs at rate ``rate(n)`` when it holds n.

    ``rate`` is a callable n -> mu(n) (called for n = 1..N) or an array of N values with
    entry n - 1 = mu(n). Returns `MVAResult` for every population n = 1..N.

    The load-dependent recursion on the marginal probabilities (Reiser and Lavenberg
    1980), for n = 1..N, starting from p(0 | 0) = 1:

        R(n)     = sum_{j=1..n} j / mu(j) * p(j-1 | n-1)   (arrival theorem)
        X(n)     = n / (Z + R(n))                            (Little, whole network)
        p(j | n) = X(n) / mu(j) * p(j-1 | n-1),  j = 1..n
        Q(n)     = X(n) R(n)                                 (Little, the station)

    The textbook form closes with p(0 | n) = 1 - sum_{j>=1} p(j | n). Near saturation
    p(0 | n) is far below the rounding error of that difference, and the error is
    multiplied by X(n) / mu(j) > 1 at every level it climbs, so the marginals lose all
    accuracy for large N. Here the other station is a delay station, and the load-
    dependent station is empty exactly when all n jobs are at the delay station; the same
    recursion applied to the delay station (rate k / Z with k jobs) gives

        p(0 | n) = (Z X(n) / n) * p(0 | n-1),

    a product of positive numbers, exact and free of cancellation (0 when Z = 0). The
    marginals then sum to 1 up to rounding, which the tests check.

    Cost O(N^2) time, O(N) memory.
    """
    _check_population(n_users, think_mean)
    n_users = int(n_users)
    z = float(think_mean)
    mu = _rates(rate, n_users)
    j = np.arange(1, n_users + 1, dtype=float)
    X = np.empty(n_users)
    R = np.empty(n_users)
    p = np.zeros(n_users + 1)
    p[0] = 1.0  # p(. | 0)
    for n in range(1, n_users + 1):
        prev = p[:n]  # p(j-1 | n-1), j = 1..n
        r = float(np.dot(j[:n] / mu[:n], prev))
        x = n / (z + r)
        new = np.empty(n + 1)
        new[1:] = x / mu[:n] * prev
        new[0] = z * x / n * p[0]
        p[: n + 1] = new
        X[n - 1], R[n - 1] = x, r
    return MVAResult(
        population=np.arange(1, n_users + 1, dtype=np.int64),
        throughput=X,
        response=R,
        queue=X * R,
        marginal=p,
    )


def birth_death_marginal(n_users: int, think_mean: float, rate: Rate) -> np.ndarray:
    """p(n), n = 0..N: stationary law of the number of jobs at the load-dependent station,
    from its birth-death chain (Kleinrock 1975, ch. 3): with n there, the N - n thinking
    jobs arrive at rate (N - n) / Z and jobs leave at rate mu(n), so

        p(n) proportional to  N! / (N - n)!  *  Z^(-n)  /  prod_{k=1..n} mu(k).

    Computed in logarithms and normalised with the largest term factored out, so it does
    not overflow for large N. With Z = 0 every job is at the station: p(N) = 1. An
    independent route to what `mva_delay_ld` computes: X = sum_n mu(n) p(n),
    Q = sum_n n p(n), R = Q / X.
    """
    _check_population(n_users, think_mean)
    n_users = int(n_users)
    mu = _rates(rate, n_users)
    p = np.zeros(n_users + 1)
    if think_mean == 0:
        p[n_users] = 1.0
        return p
    n = np.arange(n_users + 1)
    log_falling = np.array([math.lgamma(n_users + 1) - math.lgamma(n_users - k + 1) for k in n])
    log_w = log_falling - n * math.log(think_mean) - np.concatenate(([0.0], np.cumsum(np.log(mu))))
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


def ps_server_rate(capacity: float, demand: float, mean_work: float) -> Callable:
    """Completion rate of a processor-sharing server: mu(n) = min(n * demand, capacity) /
    mean_work.

    Each of the n jobs present uses at most its own demand d (a job cannot run faster
    than its own CPU need), and together they use at most the capacity C; work of mean
    ``mean_work`` then completes at that total rate. ``capacity`` and ``demand`` are in
    the same unit of processing rate (e.g. cores), ``mean_work`` in that unit times
    seconds (e.g. core-seconds), so mu is per second. d >= C is a single processor
    shared by all (the machine-repairman server, mu = C / w for every n >= 1); C >= N d
    never saturates (an infinite-server station with mean time w / d).

    Returns a function of n (an integer or an integer array, n >= 1), vectorised.
    """
    for name, v in (("capacity", capacity), ("demand", demand), ("mean_work", mean_work)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be finite and > 0 (got {v!r})")
    c, d, w = float(capacity), float(demand), float(mean_work)

    def mu(n):
        return np.minimum(np.asarray(n, dtype=float) * d, c) / w

    mu.__doc__ = f"mu(n) = min(n * {d:g}, {c:g}) / {w:g}"
    return mu


def fifo_mixture_delay(n_users: int, think_mean: float, mean_work: Sequence[float],
                       probs: Sequence[float], servers: int = 1) -> tuple[float, float, float]:
    """Throughput X, mean response time R and mean number Q at a first-come first-served
    station of ``servers`` (c) identical servers that N users (delay station of mean Z,
    exponential) visit in turn, each job's work exponential of mean ``mean_work[k]`` with
    probability ``probs[k]`` (drawn per job): the finite-source M/H/c//N queue, the
    reference of `execution.discipline: fifo` with `concurrency` c (docs/model.md D28).

    FIFO with class-dependent work is not product form (the BCMP theorem asks a FCFS
    station for one exponential law for all classes), so this solves the Markov chain
    exactly: a state is the number n of jobs present and how many of each class are in
    service (min(n, c) in all); a user ends thinking at rate (N - n) / Z, a job of class
    k in service ends at rate 1 / mean_work[k], and a job that enters service (on arrival
    to a free server, or from the queue when one ends) has its class drawn. Stationary
    law by a dense linear solve, X by the completion flow, R = Q / X (Little). Processor
    sharing with the same jobs is insensitive: `mva_delay_ld` with `ps_server_rate`.
    """
    _check_population(n_users, think_mean)
    w = np.asarray(mean_work, dtype=float)
    p = np.asarray(probs, dtype=float)
    if w.ndim != 1 or w.shape != p.shape or not np.all(np.isfinite(w) & (w > 0)):
        raise ValueError("mean_work must be finite and > 0, one per class, as many as probs")
    if not (np.all(p >= 0) and abs(p.sum() - 1.0) < 1e-9):
        raise ValueError("probs must be >= 0 and sum to 1")
    if not think_mean > 0:
        raise ValueError("think_mean must be > 0")
    if int(servers) != servers or servers < 1:
        raise ValueError(f"servers must be an integer >= 1 (got {servers!r})")
    n_users, k, c = int(n_users), w.size, int(servers)

    def enter(comp):  # a job enters service: its class drawn
        for c2 in range(k):
            if p[c2] > 0:
                yield tuple(x + (i == c2) for i, x in enumerate(comp)), p[c2]

    index: dict = {}
    edges: list = []  # (from state, to state, rate)
    todo = [(0, (0,) * k)]
    index[todo[0]] = 0
    while todo:
        n, comp = state = todo.pop()
        out = []
        if n < n_users:
            lam = (n_users - n) / think_mean
            if n < c:
                out += [((n + 1, nxt), lam * q) for nxt, q in enter(comp)]
            else:
                out.append(((n + 1, comp), lam))
        for c1 in range(k):
            if comp[c1]:
                mu = comp[c1] / w[c1]
                left = tuple(x - (i == c1) for i, x in enumerate(comp))
                if n > c:
                    out += [((n - 1, nxt), mu * q) for nxt, q in enter(left)]
                else:
                    out.append(((n - 1, left), mu))
        for to, rate in out:
            if to not in index:
                index[to] = len(index)
                todo.append(to)
            edges.append((index[state], index[to], rate))
    m = len(index)
    q = np.zeros((m, m))  # generator
    for a, b, rate in edges:
        q[a, b] += rate
    np.fill_diagonal(q, -q.sum(axis=1))
    a = np.vstack([q.T, np.ones(m)])
    rhs = np.zeros(m + 1)
    rhs[-1] = 1.0
    pi = np.linalg.lstsq(a, rhs, rcond=None)[0]
    x = sum(pi[i] * sum(comp[c1] / w[c1] for c1 in range(k)) for (n, comp), i in index.items())
    qn = sum(pi[i] * n for (n, _), i in index.items())
    return float(x), float(qn / x), float(qn)


# ---------------------------------------------------------------------------------
# Mean of the discretised duration D = max(1, ceil(T)) (paper 2.2; docs/model.md D1)
# ---------------------------------------------------------------------------------

_MAX_TERMS = 1 << 23  # largest partial sum taken explicitly by the numeric route


def discrete_mean(law, rtol: float = 1e-12) -> float:
    """E[D] for the simulator's duration D = max(1, ceil(T)), T from a config `Dist` law.

    P(D > 0) = 1 and, for n >= 1, D > n exactly when T > n, so

        E[D] = sum_{n>=0} P(D > n) = 1 + sum_{n>=1} S(n).

    - ``exponential`` (mean m): a geometric series, E[D] = 1 / (1 - exp(-1/m)) (about
      m + 1/2 for large m); exact to rounding.
    - ``pareto`` (scale s, shape a): S(n) = 1 for n < s and (s/n)^a from
      n0 = max(1, ceil(s)) on, so E[D] = n0 + s^a zeta(a, n0) with the Hurwitz zeta;
      exact to rounding; infinite for a <= 1.
    - ``never``: infinite.
    - ``weibull``, ``lognormal``: no closed form. The first K terms are summed and the
      rest is the trapezoid rule on the tail integral I(K) = int_K^inf S(t) dt (closed
      form for both laws): sum_{n>K} S(n) = I(K) - S(K)/2 + e. On each unit interval the
      trapezoid error of S is at most 1/8 of the oscillation of the density f there, so
      |e| <= TV(f on [K, inf)) / 8, which for a unimodal f (both laws) is f(K) / 8 beyond
      the mode and (2 f(mode) - f(K)) / 8 before it. K = 0, 1, 2, 4, ... doubles until
      that bound is <= rtol * E[D]. The result is then within rtol * E[D] (a bound, not
      an estimate) plus floating-point rounding (about 1e-15 relative). ValueError if
      2^23 terms do not reach rtol (only for very narrow laws centred far out).

    The continuous mean E[T] = ``law.mean()`` differs from E[D] by up to one step (about
    1/2 for laws that are wide compared with a step).
    """
    kind = law.dist
    if kind == "never":
        return math.inf
    if kind == "exponential":
        return -1.0 / math.expm1(-1.0 / law.mean())
    if kind == "pareto":
        return _pareto_discrete_mean(law.scale, law.shape)
    if kind in ("weibull", "lognormal"):
        return _numeric_discrete_mean(law, rtol)
    raise ValueError(f"no discrete mean for law {kind!r}")


def _pareto_discrete_mean(scale: float, shape: float) -> float:
    if shape <= 1.0:
        return math.inf
    from scipy.special import zeta

    n0 = max(1, math.ceil(scale))
    # s^a zeta(a, n0) in logarithms: s^a alone overflows for large scales
    return n0 + math.exp(shape * math.log(scale) + math.log(zeta(shape, n0)))


def _numeric_discrete_mean(law, rtol: float) -> float:
    if law.dist == "weibull":
        lam, k = law.scale, law.shape
        mode = lam * ((k - 1.0) / k) ** (1.0 / k) if k > 1.0 else 0.0
    else:
        mode = math.exp(law.mu - law.sigma**2)
    f_mode = _density(law, mode)
    head = 0.0  # sum_{n=1..K} S(n)
    K = 0
    while True:
        f_k = _density(law, K)
        variation = f_k if K >= mode else 2.0 * f_mode - f_k
        estimate = 1.0 + head + _tail_integral(law, K) - float(law.survival(float(K))) / 2.0
        if variation / 8.0 <= rtol * estimate:
            return estimate
        if K >= _MAX_TERMS:
            raise ValueError(
                f"discrete_mean: {law!r} needs more than {_MAX_TERMS} terms for rtol={rtol:g} "
                f"(bound reached: {variation / 8.0 / estimate:.2g})"
            )
        K_next = max(1, 2 * K)
        head += float(np.sum(law.survival(np.arange(K + 1, K_next + 1, dtype=float))))
        K = K_next


def _density(law, t: float) -> float:
    """f(t) of a weibull or lognormal law (f(0) = inf for a weibull with shape < 1)."""
    if law.dist == "weibull":
        lam, k = law.scale, law.shape
        if t == 0.0:
            return math.inf if k < 1.0 else (1.0 / lam if k == 1.0 else 0.0)
        x = t / lam
        return k / lam * x ** (k - 1.0) * math.exp(-(x**k))
    if t <= 0.0:
        return 0.0
    z = (math.log(t) - law.mu) / law.sigma
    return math.exp(-0.5 * z * z) / (law.sigma * t * math.sqrt(2.0 * math.pi))


def _tail_integral(law, x: float) -> float:
    """I(x) = int_x^inf S(t) dt = E[(T - x)^+] of a weibull or lognormal law."""
    from scipy.special import gammaincc, ndtr

    if law.dist == "weibull":
        lam, k = law.scale, law.shape
        # substituting u = (t / lam)^k: lam Gamma(1 + 1/k) Q(1/k, (x / lam)^k)
        return lam * math.gamma(1.0 + 1.0 / k) * float(gammaincc(1.0 / k, (x / lam) ** k))
    mu, s = law.mu, law.sigma
    if x <= 0.0:
        return math.exp(mu + 0.5 * s * s)
    lx = math.log(x)
    return math.exp(mu + 0.5 * s * s) * float(ndtr((mu + s * s - lx) / s)) - x * float(ndtr((mu - lx) / s))


# -- open multi-server queues (docs/routing.md) -------------------------------------------


@njit(cache=True)
def erlang_c(c, a):
    """Erlang's C formula: probability that an arrival waits in M/M/c with offered load
    a = lambda / mu (Kleinrock vol. 1, eq. 3.40). 1.0 when a >= c (unstable).

    Computed through the Erlang-B recursion B(k) = a B(k-1) / (k + a B(k-1)), which
    never forms a^c / c! (it overflows for c of a few hundred), and then
    C = B / (1 - (a / c)(1 - B))."""
    if c < 1:
        return 1.0
    if a <= 0.0:
        return 0.0
    if a >= c:
        return 1.0
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    rho = a / c
    return b / (1.0 - rho * (1.0 - b))


@njit(cache=True)
def mmc_wait(c, lam, mu):
    """Mean waiting time (before service) in M/M/c: C(c, a) / (c mu - lambda); +inf
    when lambda >= c mu."""
    if lam <= 0.0:
        return 0.0
    if lam >= c * mu:
        return np.inf
    return erlang_c(c, lam / mu) / (c * mu - lam)


@njit(cache=True)
def allen_cunneen_wait(c, lam, mu, ca2, cs2):
    """Allen-Cunneen approximation of the mean wait in G/G/c: the M/M/c wait times
    (C_a^2 + C_s^2) / 2, with C_a^2 and C_s^2 the squared coefficients of variation of
    the interarrival and service times (Allen 1990, section 6.4). Exact for M/M/c
    (both 1) and for M/G/1 (Pollaczek-Khinchine); +inf when unstable."""
    w = mmc_wait(c, lam, mu)
    return w * 0.5 * (ca2 + cs2)
