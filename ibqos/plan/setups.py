"""QoS setups of the running jobs' SLs: the favour-light law and the candidates beside it.

A :class:`Setup` says how the active job SLs share the lanes (groups of SLs, one lane each)
and the weight each lane gets relative to the others.  The planner turns a setup into
SL2VL and VLArb tables (:func:`ibqos.plan.planner.plan`, its *setup* argument); jobs keep
their SLs whatever the setup, so a setup changes only what OpenSM reprograms in the
switches, never what a client cached.

The planner's own setup is the **favour-light law** (:func:`ibqos.plan.planner.law_setup`):
one lane per SL as far as lanes go, contiguous groups by intensity, geometric weights that
favour the light lanes.  It is the starting point and the tie-breaker, but measurements
(``docs/simulate-evaluation.md``) show it is not the best for every mix: with millisecond
bursts equal weights, or weights favouring the heavy job, can do better, and the best
grouping is sometimes not contiguous in intensity.  :func:`candidates` lists the setups
worth trying next to it, in the order they are worth trying when nothing predicts better:

1. ``favour-light``: the law itself;
2. ``equal``: the law's lanes, equal weights (ratio 1);
3. ``favour-heavy``: the law's lanes, geometric ratio 1/2 (the heaviest lane weighs most);
4. ``ratio-4``: the law's lanes, geometric ratio 4 (favour light more);
5. ``heavy+moderate``: the heaviest group shares a lane with the next one, equal weights;
6. ``moderate+light``: the two lightest groups share a lane, equal weights;
7. ``halves`` (four groups or more): two lanes, the more intense half of the groups on one
   and the lighter half on the other, which weighs the law's ratio more;
8. ``one-lane``: every job SL on one lane (the fabric as OpenSM leaves it, but off the
   default lane);
9. ``heavy+light``: the heaviest group shares with the lightest (not contiguous);
10. ``ratio-2``, ``ratio-8``: the law's lanes at those ratios, when the law's is another.

Setups that would program the same tables as one listed before them are left out (the law
at ratio 2 and ``ratio-2``; with one group every weight law is the same), and the list is
cut at *limit*.  Names are metric-label and log friendly: ``[a-z0-9+.-]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["LAW", "Setup", "candidates"]

#: the name of the planner's own setup
LAW = "favour-light"


@dataclass(frozen=True)
class Setup:
    """How the active job SLs share lanes, and the lanes' weights.

    Attributes:
        name: what to call it in logs, metrics and status (``[a-z0-9+.-]``).
        groups: SLs sharing a lane, one tuple per lane, the most intense group first.
        targets: each group's weight relative to the others (> 0; only ratios count).
    """

    name: str
    groups: tuple[tuple[int, ...], ...]
    targets: tuple[float, ...]

    @property
    def sls(self) -> frozenset[int]:
        """Every SL the setup places."""
        return frozenset(sl for group in self.groups for sl in group)

    def fits(self, sls: Sequence[int] | frozenset[int]) -> bool:
        """It places exactly *sls* (the active job SLs), each once."""
        placed = [sl for group in self.groups for sl in group]
        return len(placed) == len(set(placed)) and set(placed) == set(sls)


def _merged(
    groups: Sequence[tuple[int, ...]], first: int, second: int
) -> tuple[tuple[int, ...], ...]:
    """*groups* with group *second* merged into group *first* (indices, first < second)."""
    out = [tuple(g) for g in groups]
    out[first] = tuple(sorted((*out[first], *out[second])))
    del out[second]
    return tuple(out)


def candidates(law: Setup, limit: int, ratio: float = 2.0) -> list[Setup]:
    """The setups to consider for the jobs of *law* (the planner's favour-light setup, made
    with weight ratio *ratio*), in the order of the module docstring, at most *limit*
    (>= 1), without two that program the same tables.

    Ratios of the law's own lanes keep its ranks: lanes of equal intensity keep equal
    weights, as the law gives them (``law.targets``: equal targets are equal ranks).
    """
    groups = law.groups
    # the law's rank of each lane: equal targets, equal rank (as the planner ranked them)
    distinct = sorted(set(law.targets))
    ranks = [distinct.index(t) for t in law.targets]

    def at_ratio(name: str, r: float) -> Setup:
        return Setup(name, groups, tuple(float(r**k) for k in ranks))

    n = len(groups)
    out: list[Setup] = [law, at_ratio("equal", 1.0), at_ratio("favour-heavy", 0.5)]
    out.append(at_ratio("ratio-4", 4.0))
    if n >= 2:
        out.append(Setup("heavy+moderate", _merged(groups, 0, 1), (1.0,) * (n - 1)))
    if n >= 3:
        out.append(Setup("moderate+light", _merged(groups, n - 2, n - 1), (1.0,) * (n - 1)))
    if n >= 4:  # two lanes: the more intense half of the groups and the lighter half
        half = n // 2
        heavy = tuple(sorted(sl for g in groups[:half] for sl in g))
        light = tuple(sorted(sl for g in groups[half:] for sl in g))
        out.append(Setup("halves", (heavy, light), (1.0, float(ratio))))
    if n >= 2:
        everything = tuple(sorted(sl for g in groups for sl in g))
        out.append(Setup("one-lane", (everything,), (1.0,)))
    if n >= 3:
        out.append(Setup("heavy+light", _merged(groups, 0, n - 1), (1.0,) * (n - 1)))
    out += [at_ratio(f"ratio-{r}", float(r)) for r in (2, 8) if r != ratio]
    unique: list[Setup] = []
    seen: set[tuple[object, ...]] = set()
    for setup in out:
        key = (setup.groups, _shape(setup.targets))
        if key not in seen:
            seen.add(key)
            unique.append(setup)
    return unique[: max(1, limit)]


def _shape(targets: Sequence[float]) -> tuple[float, ...]:
    """*targets* up to a common factor (rounded: ratios that encode alike are alike)."""
    low = min(targets, default=1.0)
    return tuple(round(t / low, 6) for t in targets)
