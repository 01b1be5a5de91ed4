"""The time change of a duration under a time-varying rate multiplier (docs/model.md
D18; gmm_volunteer.model.demand)."""


from gmm_volunteer.model.kernels.jit import kernel
from gmm_volunteer.model.laws import MAX_DURATION


@kernel
def warp(cum, t, d):
    """Steps until a duration d (drawn at rate 1) entered at step t ends when the rate is
    multiplied by m: the first e > t with cum[e] - cum[t] >= d, cum[k] = sum_{u<k} m(u).
    Beyond the run (the end of `cum`) the rate is taken as 1; a duration that never ends
    stays so."""
    if d >= MAX_DURATION:
        return d
    n = cum.shape[0] - 1
    if t >= n:
        return d
    target = cum[t] + d - 1e-9  # tolerance: sums of m = 1 are exact, others round
    if cum[n] < target:
        return n - t + int(target - cum[n]) + 1
    lo, hi = t + 1, n
    while lo < hi:
        mid = (lo + hi) // 2
        if cum[mid] >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo - t
