"""The setup space the tuning's search walks (:mod:`ibqos.sim.search`): points and moves.

A **point** is a grouping of a plan's active job SLs onto lanes (any partition, at most
the job lanes the configuration allows) and each lane's MTU packets per arbitration
round, a whole number as VLArb encodes it; only the ratios count, so packets are kept
divided by their greatest common divisor, and lanes in a canonical order (by their most
intense SL, then SL), so that one setup is one point.

**The moves** from a point (:meth:`Space.moves`):

- a lane's packets one rung up or down :data:`LADDER` (1, 2, 3, 4, 6, 8, ...);
- two lanes swap their packets (the heavy job on the heaviest weight: not monotonic);
- one SL moves to another lane, or to a lane of its own (a split, one lane more: as
  heavy as its lane was, a rung heavier, or half as heavy as the others);
- two lanes merge (one lane fewer), keeping the larger of their packets.

Units: packets per arbitration round (MTU packets).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce

from ibqos.plan.planner import Plan
from ibqos.plan.setups import Setup
from ibqos.plan.tables import lane_pool, sl_intensities

__all__ = ["LADDER", "Point", "Space"]

#: packets per round a lane's weight moves along, one rung at a time (about x1.5)
LADDER = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)

#: a point: (SLs of a lane, its packets per round) per lane, in canonical order
Point = tuple[tuple[tuple[int, ...], int], ...]


@dataclass(frozen=True)
class Space:
    """The setup space of a plan's active job SLs.

    Attributes:
        intensity: SL -> its jobs' summed intensity (orders the lanes, most intense first).
        lanes: most job lanes.
    """

    intensity: Mapping[int, float]
    lanes: int

    @classmethod
    def of(cls, plan: Plan) -> Space:
        """The space of *plan*'s job SLs and lanes."""
        intensity = sl_intensities(plan.job_sl, plan.job_intensity, plan.cfg)
        return cls(intensity, len(lane_pool(plan.cfg)[1]))

    def point(self, groups: Sequence[Sequence[int]], packets: Sequence[int]) -> Point:
        """The canonical point: lanes by their most intense SL, then SL; packets over
        their greatest common divisor."""
        g = reduce(math.gcd, packets, 0) or 1
        lanes = [(tuple(sorted(sls)), p // g) for sls, p in zip(groups, packets, strict=True)]
        lanes.sort(key=lambda lane: (-max(self.intensity[sl] for sl in lane[0]), lane[0]))
        return tuple(lanes)

    def setup(self, point: Point, name: str) -> Setup:
        """The setup of *point*: its lanes as groups, its packets as targets."""
        return Setup(name, tuple(sls for sls, _ in point), tuple(float(p) for _, p in point))

    def moves(self, point: Point, rng: random.Random) -> Iterator[Point]:
        """The neighbours of *point* (module docstring), each kind shuffled by *rng*, the
        kinds taken in turn."""
        kinds = [self._weights(point), self._swaps(point), self._regroups(point)]
        for kind in kinds:
            rng.shuffle(kind)
        while any(kinds):
            for kind in kinds:
                if kind:
                    yield kind.pop()

    def _weights(self, point: Point) -> list[Point]:
        if len(point) < 2:
            return []  # one lane: its weight is nothing relative to another's
        out = []
        groups = [sls for sls, _ in point]
        for i, (_, p) in enumerate(point):
            for q in (_rung(p, +1), _rung(p, -1)):
                if q != p:
                    packets = [pp for _, pp in point]
                    packets[i] = q
                    out.append(self.point(groups, packets))
        return out

    def _swaps(self, point: Point) -> list[Point]:
        out = []
        groups = [sls for sls, _ in point]
        for i in range(len(point)):
            for j in range(i + 1, len(point)):
                if point[i][1] != point[j][1]:
                    packets = [p for _, p in point]
                    packets[i], packets[j] = packets[j], packets[i]
                    out.append(self.point(groups, packets))
        return out

    def _regroups(self, point: Point) -> list[Point]:
        out = []
        n = len(point)
        for i, (sls, p) in enumerate(point):
            for sl in sls:
                rest = tuple(s for s in sls if s != sl)
                for j in range(n):  # to another lane (the lane emptied goes)
                    if j == i:
                        continue
                    lanes = [(list(s), q) for s, q in point]
                    lanes[j][0].append(sl)
                    lanes[i] = (list(rest), p)
                    kept = [(s, q) for s, q in lanes if s]
                    out.append(self.point([s for s, _ in kept], [q for _, q in kept]))
                if not rest or n >= self.lanes:
                    continue
                # to a lane of its own: as heavy as its last, a rung heavier, or the
                # others twice as heavy (a split alone at equal weight may not gain)
                for mine, others in ((p, 1), (_rung(p, +1), 1), (p, 2)):
                    lanes = [(list(s), q * others) for s, q in point]
                    lanes[i] = (list(rest), p * others)
                    lanes.append(([sl], mine))
                    out.append(self.point([s for s, _ in lanes], [q for _, q in lanes]))
        for i in range(n):
            for j in range(i + 1, n):
                two: list[tuple[tuple[int, ...], int]] = [
                    lane for k, lane in enumerate(point) if k not in (i, j)
                ]
                two.append((point[i][0] + point[j][0], max(point[i][1], point[j][1])))
                out.append(self.point([s for s, _ in two], [q for _, q in two]))
        return list(dict.fromkeys(out))  # two ways to one point: once


def _rung(packets: int, step: int) -> int:
    """The next value of :data:`LADDER` above (*step* +1) or below (-1) *packets*."""
    if step > 0:
        return next((v for v in LADDER if v > packets), packets)
    return next((v for v in reversed(LADDER) if v < packets), packets)
