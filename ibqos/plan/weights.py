"""VL arbitration weights: the weight laws, and their encoding into VLArb entries.

**Weights.**  Job lanes are ranked by intensity (their most intense SL's, equal intensities equal
rank, 0 = most intense); the target weight of rank *r* is ``ratio ** r`` ("geometric", the
default, ratio 2), ``1 + r * (ratio - 1)`` ("linear") or 1 ("equal").  A VLArb weight is in
64-byte credits and an entry sends whole packets until its credit is spent, so a weight
below one MTU still sends one packet (docs/design.md §6.2): weights are whole MTUs
(``k * mtu / 64``), at most ``255 // (mtu / 64)`` packets per entry, larger weights split
over several entries of the same VL.  Packet counts are the whole numbers closest to the
targets in worst-case log ratio among all that fit in ``vlarb_low_cap`` entries, or once
within 0.5 %, those with the fewest packets for the smallest target;
:attr:`ibqos.plan.planner.Tables.achieved_ratio` and
:attr:`ibqos.plan.planner.Tables.weight_error` say what was reached.

**Precision.**  If the lanes with the smallest target can have *b* packets, and every
other lane *b* times its target over the smallest rounded up, within the entries, the
worst log error is at most
``max(0.005, ln(1 + 1/b) / 2)``: 0.5 % from b = 100, 4.9 % at b = 10, 41 % at b = 1 (the
counts have the least error possible, so usually much less).  When even b = 1 does not
fit (the targets' range exceeds what the entries carry), the counts still have the least
error that fits, in the targets' order.  Ratios of integers are exact when their counts
fit, unless fewer packets already come within 0.5 % (never for integers up to 9).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

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


#: Worst log error at which :func:`quantize` stops adding packets (0.5 %): below measurement
#: noise, and each packet more lengthens the arbitration round.
_GOOD_ENOUGH = 0.005


def quantize(targets: Sequence[float], per_entry: int, budget: int) -> tuple[list[int], float]:
    """Whole packets per lane closest to *targets* in ratio, within *budget* VLArb entries.

    Error: the worst ``|log(count / target)|`` at the best common scale, that is half the
    spread of ``log(count / target)`` over the lanes.  Search: from one packet a lane, give
    one more packet at a time to the lanes with the fewest packets for their target (least
    ``count / target``), until the next packet needs more than *budget* entries.  Each step
    holds the fewest packets that keep every lane's ``count / target`` at or above its
    least one, and some best answer is such a step (lowering each lane of a best answer to
    that floor still fits and cannot widen the spread), so the result has the least error
    any counts that fit can have; ties go to the smaller sum of squared log errors, then to
    fewer packets.  Once a step is within 0.5 %, the search ends with the packets of the
    smallest targets at that step (the base), keeping the closest step of that base: no
    more packets than that precision needs, and exact ratios such as 1:2:...:128 are not
    cut one packet short.  Counts follow the order of the targets, equal targets get equal
    counts, and only the targets' ratios matter.

    Precision: when ``ceil(b * target / min(targets))`` packets a lane fit in *budget*, the
    worst log error is at most ``max(0.005, ln(1 + 1/b) / 2)``, about ``1 / (2 b)``: those
    counts are such a step, each lane within one packet above ``b * target / min(targets)``.

    Args:
        targets: relative weights (> 0), usually the smallest 1.0.
        per_entry: most packets in one entry.
        budget: entries available (>= ``len(targets)``).

    Returns:
        Packets per lane and the worst relative error ``exp(err) - 1``.
    """
    if not targets:
        return [], 0.0
    low = min(targets)
    shares = [t / low for t in targets]
    counts = [1] * len(shares)
    entries = len(counts)  # one entry a lane
    below = [(1 / s, i) for i, s in enumerate(shares)]  # (packets per share, lane)
    heapq.heapify(below)
    top = 1.0  # the largest packets per share, at the lanes with share 1
    best: tuple[float, float, list[int]] = (math.inf, math.inf, list(counts))
    close = False  # a step within 0.5 % was seen
    while True:  # ends: the budget or the base within 0.5 % is spent
        floor = below[0][0]
        worst = round(math.log(top / floor) / 2, 9)
        if worst <= best[0]:
            logs = [math.log(c / s) for c, s in zip(counts, shares, strict=True)]
            mean = math.fsum(logs) / len(logs)
            squares = round(math.fsum((x - mean) ** 2 for x in logs), 9)
            if (worst, squares) < best[:2]:
                best = (worst, squares, list(counts))
        close = close or worst <= _GOOD_ENOUGH
        while below[0][0] == floor:  # equal shares move together
            _, i = heapq.heappop(below)
            if close and shares[i] == 1.0:
                # the base is done: more packets for the smallest targets are not needed
                return best[2], math.expm1(best[0])
            entries += counts[i] % per_entry == 0  # the next packet opens an entry
            if entries > budget:
                return best[2], math.expm1(best[0])
            counts[i] += 1
            ratio = counts[i] / shares[i]
            top = max(top, ratio)
            heapq.heappush(below, (ratio, i))


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
