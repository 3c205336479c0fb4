"""VL arbitration weights: the weight laws, and their encoding into VLArb entries.

**Weights.**  Job lanes are ranked by intensity (their most intense SL's, equal intensities equal
rank, 0 = most intense); the target weight of rank *r* is ``ratio ** r`` ("geometric", the
default, ratio 2), ``1 + r * (ratio - 1)`` ("linear") or 1 ("equal").  A VLArb weight is in
64-byte credits and an entry sends whole packets until its credit is spent, so a weight
below one MTU still sends one packet (reference A.2): weights are whole MTUs
(``k * mtu / 64``), at most ``255 // (mtu / 64)`` packets per entry, larger weights split
over several entries of the same VL.  Packet counts are the rounding of the targets that is
closest in worst-case log ratio among those that fit in ``vlarb_low_cap`` entries;
:attr:`ibqos.plan.planner.Tables.achieved_ratio` and :attr:`ibqos.plan.planner.Tables.weight_error`
say what was reached.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ibqos.config.lanes import Entry, WeightLaw

__all__ = [
    "interleave",
    "lane_entries",
    "quantize",
    "weight_target",
]


def weight_target(rank: int, law: WeightLaw, ratio: float) -> float:
    """Target weight of the job lane of intensity rank *rank* (0 = most intense) over rank 0's."""
    if law == "geometric":
        return float(ratio**rank)
    if law == "linear":
        return 1.0 + rank * (ratio - 1.0)
    return 1.0


#: Ratio errors (log) below which :func:`quantize` stops looking: far below measurement noise.
_GOOD_ENOUGH = 0.05
#: Most packets tried for the most intense lanes: rounding the others is then within 0.4 %.
_MAX_BASE = 128


def quantize(targets: Sequence[float], per_entry: int, budget: int) -> tuple[list[int], float]:
    """Whole packets per lane closest to *targets* in ratio, within *budget* VLArb entries.

    Candidates: for every packet count *base* of the lanes with target 1, the others get
    ``round(target * base)``; when that needs more than *budget* entries the largest counts
    are cut to the highest common ceiling that fits.  When the targets' range cannot fit at
    all, the same is tried on targets compressed to ``target ** a`` (a = 0.9, 0.8, ...), so
    the lanes keep distinct weights in order instead of all hitting the ceiling.  Score: the
    worst ``|log(achieved / target)|`` at the best common scale (half the spread of
    ``log(count / target)``), then the sum of squares of those log errors, then fewer
    packets.  Rounding, cutting and compressing keep the counts in the order of the targets.
    The search stops at a worst error of 0.5 %, and compresses only above 5 %.

    Args:
        targets: relative weights, the smallest 1.0.
        per_entry: most packets in one entry.
        budget: entries available (>= ``len(targets)``).

    Returns:
        Packets per lane and the worst relative error ``exp(err) - 1``.
    """

    def entries(counts: Iterable[int]) -> int:
        return sum(-(-c // per_entry) for c in counts)

    best: tuple[float, float, int, list[int]] = (math.inf, math.inf, 0, [1] * len(targets))
    for tenths in range(10, 0, -1):
        shaped = [t ** (tenths / 10) for t in targets]
        for base in range(1, min(per_entry * budget, _MAX_BASE) + 1):
            counts = [max(1, round(t * base)) for t in shaped]
            if entries(counts) > budget:
                low, high = 1, max(counts)  # highest ceiling that fits: low fits, high not
                while high - low > 1:
                    mid = (low + high) // 2
                    fits = entries(min(c, mid) for c in counts) <= budget
                    low, high = (mid, high) if fits else (low, mid)
                if low < base:
                    break  # even the lanes with target 1 are cut: all counts would be equal
                counts = [min(c, low) for c in counts]
            logs = [math.log(c / t) for c, t in zip(counts, targets, strict=True)]
            mean = math.fsum(logs) / len(logs) if logs else 0.0
            score = (
                round((max(logs, default=0.0) - min(logs, default=0.0)) / 2, 9),
                round(math.fsum((x - mean) ** 2 for x in logs), 9),
                sum(counts),
            )
            if score < best[:3]:
                best = (*score, counts)
            if score[0] <= _GOOD_ENOUGH / 10:
                return counts, math.expm1(score[0])
        if best[0] <= _GOOD_ENOUGH:
            break  # no need to compress
    return best[3], math.expm1(best[0])


def lane_entries(
    vl: int, packets: int, credits_per_packet: int, packets_per_entry: int
) -> list[Entry]:
    """*packets* MTU packets of *vl* as VLArb entries of at most 255 credits, split evenly.

    Args:
        vl: the lane.
        packets: MTU packets per arbitration round (>= 1).
        credits_per_packet: VLArb weight of one MTU packet, in 64-byte credits.
        packets_per_entry: most packets one entry carries (``255 // credits_per_packet``).

    Returns:
        ``ceil(packets / packets_per_entry)`` entries of *vl*, their packet counts differing
        by at most one, larger first.
    """
    n = -(-packets // packets_per_entry)
    base, extra = divmod(packets, n)
    return [(vl, (base + (i < extra)) * credits_per_packet) for i in range(n)]


def interleave(per_vl: Sequence[list[Entry]]) -> tuple[Entry, ...]:
    """One entry of each VL in turn, so no lane waits a whole run of another's entries."""
    out: list[Entry] = []
    for i in range(max((len(e) for e in per_vl), default=0)):
        out.extend(e[i] for e in per_vl if i < len(e))
    return tuple(out)
