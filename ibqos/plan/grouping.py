"""SL -> VL grouping: what sharing a lane costs, and the exact least-cost grouping.

**The cost.**  When SLs *i* and *j* share a lane, the lighter one queues behind the heavier
one's congestion (docs/design.md §1), so the pair costs the intensity of the heavier one.
A grouping costs the sum over lanes of the sum over pairs of SLs sharing it of
``max(x_i, x_j)``; a lane holding intensities ``y_0 >= y_1 >= ... >= y_(m-1)`` costs
``sum_k y_k * (m - 1 - k)`` (:func:`lane_cost`).  Lanes alone cost 0, so with no more active
SLs than lanes each SL gets a lane of its own; otherwise :func:`optimal_grouping` finds the
minimum exactly by dynamic programming over SLs sorted by intensity, cut into contiguous runs.

Why contiguous runs suffice (for any pair cost ``phi(max(x_i, x_j))`` with ``phi >= 0``
nondecreasing): write ``phi(x) = integral over s >= 0 of [phi(x) > s] ds``.  For a level *s*
let *T* be the SLs with ``phi(x) > s`` (the heaviest ones) and *B* the rest; the pairs whose
heavier member is in *T* are all sharing pairs minus the sharing pairs inside *B*.  For fixed
lane sizes ``m_1 >= m_2 >= ...`` the number of sharing pairs is fixed, and the sharing pairs
inside a set of ``|B|`` members are at most what filling the largest lanes first gives
(``sum C(c_g, 2)`` is Schur-convex and that filling majorizes every other).  The contiguous
grouping that puts the lightest ``m_1`` SLs in one lane, the next ``m_2`` in the next, and so
on, reaches that bound for every *s* at once, so it is optimal for those sizes; the DP tries
every size.  ``tests/unit/plan/test_grouping.py`` checks the DP against all set partitions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["lane_cost", "optimal_grouping"]


def lane_cost(intensities: Iterable[float]) -> float:
    """Cost of SLs sharing one lane: over each pair, the heavier one's intensity."""
    ys = sorted(intensities, reverse=True)
    return math.fsum(y * (len(ys) - 1 - k) for k, y in enumerate(ys))


def optimal_grouping(intensities: Sequence[float], lanes: int) -> tuple[float, list[list[int]]]:
    """Split SLs into at most *lanes* groups of least total :func:`lane_cost`.

    Args:
        intensities: one intensity per SL (>= 0).
        lanes: lanes available (>= 1).

    Returns:
        The cost and the groups as indices into *intensities*, most intense group first,
        each group most intense first; ``min(lanes, len(intensities))`` groups.
    """
    order = sorted(range(len(intensities)), key=lambda i: (-intensities[i], i))
    n = len(order)
    k = min(lanes, n)
    if k == 0:
        return 0.0, []
    xs = [intensities[i] for i in order]
    seg = [[0.0] * (n + 1) for _ in range(n + 1)]  # seg[a][b]: cost of xs[a:b] in one lane
    for a in range(n):
        for b in range(a + 1, n + 1):
            seg[a][b] = math.fsum(xs[t] * (b - 1 - t) for t in range(a, b))
    inf = math.inf
    # best[g][b]: least cost of xs[:b] in g groups; cut[g][b]: where the last group starts
    best = [[inf] * (n + 1) for _ in range(k + 1)]
    cut = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0.0
    for g in range(1, k + 1):
        for b in range(g, n + 1):
            for a in range(g - 1, b):
                cost = best[g - 1][a] + seg[a][b]
                if cost < best[g][b]:
                    best[g][b], cut[g][b] = cost, a
    groups: list[list[int]] = []
    b = n
    for g in range(k, 0, -1):
        a = cut[g][b]
        groups.append(order[a:b])
        b = a
    groups.reverse()
    return best[k][n], groups
