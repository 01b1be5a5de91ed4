"""Binary min-heaps of timed events keyed by step, for O(events log n) timers.

Availability transitions and request timers (think time, patience) are drawn as whole
durations when a state is entered (laws.discrete_duration), so a step only touches the
users whose timer fires, not every user.
"""

import numpy as np

from gmm_volunteer.model.kernels.jit import kernel


@kernel
def heap_push(ht, hv, htok, hn, t, v, tok):
    """Push (t, v, tok); `htok` may be the same array as `ht` when unused."""
    i = hn[0]
    hn[0] += 1
    while i > 0:
        parent = (i - 1) >> 1
        if ht[parent] <= t:
            break
        ht[i] = ht[parent]
        hv[i] = hv[parent]
        htok[i] = htok[parent]
        i = parent
    ht[i] = t
    hv[i] = v
    htok[i] = tok


@kernel
def heap_pop(ht, hv, htok, hn):
    """Remove the minimum; returns (t, v, tok)."""
    t0, v0, k0 = ht[0], hv[0], htok[0]
    n = hn[0] - 1
    hn[0] = n
    if n > 0:
        t, v, k = ht[n], hv[n], htok[n]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and ht[c + 1] < ht[c]:
                c += 1
            if ht[c] >= t:
                break
            ht[i] = ht[c]
            hv[i] = hv[c]
            htok[i] = htok[c]
            i = c
        ht[i] = t
        hv[i] = v
        htok[i] = k
    return t0, v0, k0


@kernel
def heap_count_due(ht, hn, t):
    """How many entries have time <= t, visiting only those and their children.

    A node later than t roots a subtree later than t (heap order), so a depth-first walk
    that stops there costs O(due entries). The stack holds at most one pending sibling
    per level plus two children: 130 entries cover any heap an int64 count can index."""
    n = hn[0]
    if n == 0 or ht[0] > t:
        return 0
    stack = np.empty(130, np.int64)
    stack[0] = 0
    top = 1
    count = 0
    while top > 0:
        top -= 1
        i = stack[top]
        if ht[i] > t:
            continue
        count += 1
        c = 2 * i + 1
        if c + 1 < n:
            stack[top] = c + 1
            top += 1
        if c < n:
            stack[top] = c
            top += 1
    return count
