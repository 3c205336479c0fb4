"""SL -> VL and VL arbitration weights: the tables OpenSM programs for the active job SLs.

:func:`make_tables` is the SL2VL and VLArb half of :func:`ibqos.plan.planner.plan`, which
gives the jobs their SLs; like it, everything here is pure.

**SL -> VL.**  Active job SLs are grouped onto the lanes for jobs at least cost: the most
intense SLs get lanes of their own and light ones share.  :mod:`ibqos.plan.grouping` defines the
cost and finds the grouping exactly.

**Lanes.**  Data VLs are ``0 .. data_vls - 1`` (PortInfo OperVLs), never VL 15.  Reserved VLs
carry only reserved SLs.  Each used lane needs at least one VLArbLow entry, so the lanes for
jobs are also limited by ``vlarb_low_cap``.  Unused SLs map to ``default_vl``; when that lane
is free for jobs, jobs use it last (it hosts the lightest group only when every lane is
needed), and it keeps one entry so stray traffic on an unused SL is not starved.

**Weights.**  Job lanes are ranked by intensity and weighted so that light lanes get more;
:mod:`ibqos.plan.weights` holds the weight laws and their encoding into whole-MTU VLArb entries.
A tuner's :class:`~ibqos.plan.setups.Setup` may stand for the favour-light law's grouping
and weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ibqos.config.lanes import NUM_SLS, Entry, LaneConfig
from ibqos.errors import PlanError
from ibqos.plan.grouping import lane_cost, optimal_grouping
from ibqos.plan.setups import LAW, Setup
from ibqos.plan.weights import interleave, lane_entries, quantize, weight_target

__all__ = [
    "Lane",
    "Tables",
    "lane_pool",
    "law",
    "make_tables",
    "sl_intensities",
]


@dataclass(frozen=True)
class Lane:
    """One data VL in a plan.

    Attributes:
        vl: the VL.
        sls: the SLs mapped to it (job SLs, or reserved ones on a reserved lane).
        intensity: its most intense job SL's intensity (0.0 on lanes without jobs): a lane
            of many light jobs is still a light lane, which the weights favour.
        load: sum of its job SLs' intensities.
        rank: intensity rank among job lanes (0 = most intense); None for other lanes.
        target: target weight relative to the most intense job lane; None for other lanes.
        packets: MTU packets per arbitration round (sum of its VLArbLow entries).
    """

    vl: int
    sls: tuple[int, ...]
    intensity: float
    load: float
    rank: int | None
    target: float | None
    packets: int


@dataclass(frozen=True)
class Tables:
    """What OpenSM programs: the ``qos_*_sl2vl``, ``_vlarb_low/high``, ``_high_limit`` values.

    Attributes:
        sl_to_vl: VL of SL 0..15.
        vlarb_low: low-priority ``(vl, weight)`` entries, at most VLArbLowCap.
        vlarb_high: high-priority entries (from the configuration).
        high_limit: VLHighLimit.
        lanes: every lane with an entry, job lanes first, most intense first.
        cost: the grouping's cost (:mod:`ibqos.plan.grouping`); 0.0 when every SL has a lane.
        target_ratio: target weight of the lightest job lane over the most intense one's.
        achieved_ratio: the same ratio in packets actually encoded.
        weight_error: worst relative error of any job lane's encoded weight ratio.
        setup: the name of the :class:`~ibqos.plan.setups.Setup` the tables follow
            (``favour-light``: the planner's own law).
    """

    sl_to_vl: tuple[int, ...]
    vlarb_low: tuple[Entry, ...]
    vlarb_high: tuple[Entry, ...]
    high_limit: int
    lanes: tuple[Lane, ...]
    cost: float
    target_ratio: float
    achieved_ratio: float
    weight_error: float
    setup: str = LAW

    def substance(self) -> tuple[object, ...]:
        """What OpenSM sees; two tables with the same substance render the same."""
        return (self.sl_to_vl, self.vlarb_low, self.vlarb_high, self.high_limit)


def sl_intensities(
    job_sl: Mapping[str, int], job_int: Mapping[str, float], cfg: LaneConfig
) -> dict[int, float]:
    """SL -> summed intensity of its jobs, for the SLs jobs may have (not reserved)."""
    reserved = set(cfg.reserved_sls)
    out: dict[int, float] = {}
    for j, sl in sorted(job_sl.items()):
        if sl not in reserved:
            out[sl] = out.get(sl, 0.0) + job_int[j]
    return out


def lane_pool(cfg: LaneConfig) -> tuple[list[int], list[int], list[int], bool]:
    """The lanes jobs may have: (reserved lanes needing a low entry, job lanes, job lanes
    other than the default one, whether the default lane is free for jobs)."""
    reserved_vls = sorted(set(cfg.reserved_vls))
    high_vls = {vl for vl, weight in cfg.vlarb_high if weight > 0}
    fixed = [vl for vl in reserved_vls if vl not in high_vls]  # reserved lanes needing a low entry
    budget = cfg.vlarb_low_cap - len(fixed)
    if budget < 1:
        raise PlanError(
            f"lanes: VLArbLowCap {cfg.vlarb_low_cap} leaves no entry for jobs after"
            f" {len(fixed)} reserved VLs"
        )
    pool = [vl for vl in range(cfg.data_vls) if vl not in reserved_vls]
    default_free = cfg.default_vl in pool
    others = [vl for vl in pool if vl != cfg.default_vl]
    lanes = [*others[: budget - 1], cfg.default_vl] if default_free else others[:budget]
    return fixed, lanes, others, default_free


def law(sl_intensity: Mapping[int, float], cfg: LaneConfig, lanes: int) -> tuple[float, Setup]:
    """The favour-light law's setup of the active job SLs on *lanes* job lanes, and its
    grouping's cost."""
    sls = sorted(sl_intensity)
    cost, groups = optimal_grouping([sl_intensity[sl] for sl in sls], lanes)
    group_sls = tuple(tuple(sls[i] for i in group) for group in groups)  # most intense first
    peaks = [max(sl_intensity[sl] for sl in g) for g in group_sls]
    distinct = sorted(set(peaks), reverse=True)
    targets = tuple(
        weight_target(distinct.index(p), cfg.weight_law, cfg.weight_ratio) for p in peaks
    )
    return cost, Setup(LAW, group_sls, targets)


def make_tables(
    sl_intensity: Mapping[int, float],
    cfg: LaneConfig,
    prev: Tables | None,
    setup: Setup | None = None,
) -> Tables:
    """SL2VL and VLArb for the active job SLs (*sl_intensity*: SL -> summed intensity), by
    *setup* (None: the favour-light law; else one that places exactly those SLs)."""
    fixed, lanes, others, default_free = lane_pool(cfg)
    if setup is None:
        cost, setup = law(sl_intensity, cfg, len(lanes))
    else:
        cost = math.fsum(lane_cost(sl_intensity[sl] for sl in g) for g in setup.groups)
    group_sls = [tuple(sorted(g, key=lambda sl: (-sl_intensity[sl], sl))) for g in setup.groups]
    avail = lanes
    if default_free and len(group_sls) < len(lanes):
        avail = others[: len(lanes) - 1]  # the default lane stays for unused SLs
    group_vl = _place(group_sls, avail, prev)

    sl_to_vl = [cfg.default_vl] * NUM_SLS
    for sl in cfg.reserved_sls:
        sl_to_vl[sl] = dict(cfg.reserved_sl2vl).get(sl, cfg.default_vl)
    for sls_, vl in zip(group_sls, group_vl, strict=True):
        for sl in sls_:
            sl_to_vl[sl] = vl

    peaks = [max(sl_intensity[sl] for sl in g) for g in group_sls]
    distinct = sorted(set(peaks), reverse=True)
    ranks = [distinct.index(p) for p in peaks]
    # relative to the most intense lane's, as Lane.target says; quantize wants the least 1
    top = setup.targets[0] if setup.targets else 1.0
    targets = [t / top for t in setup.targets]
    low = min(targets, default=1.0)
    idle_default = default_free and cfg.default_vl not in group_vl
    other_vls = [*fixed, *([cfg.default_vl] if idle_default else [])]
    job_budget = cfg.vlarb_low_cap - len(other_vls)  # other lanes: one entry each
    packets, error = (
        quantize([t / low for t in targets], cfg.packets_per_entry, job_budget)
        if targets
        else ([], 0.0)
    )

    job_lanes = [
        Lane(
            vl, tuple(sorted(g)), peak, math.fsum(sl_intensity[sl] for sl in g), rank, target, count
        )
        for g, vl, peak, rank, target, count in zip(
            group_sls, group_vl, peaks, ranks, targets, packets, strict=True
        )
    ]
    other_lanes = [
        Lane(
            vl,
            tuple(sl for sl in range(NUM_SLS) if sl_to_vl[sl] == vl and sl not in sl_intensity),
            0.0,
            0.0,
            None,
            None,
            cfg.other_vl_packets,
        )
        for vl in other_vls
    ]
    # reserved lanes first, then job lanes from the lightest: light lanes go first each round
    order = [*other_lanes, *reversed(job_lanes)]
    low_entries = interleave(
        [
            lane_entries(lane.vl, lane.packets, cfg.credits_per_packet, cfg.packets_per_entry)
            for lane in order
        ]
    )
    return Tables(
        sl_to_vl=tuple(sl_to_vl),
        vlarb_low=low_entries,
        vlarb_high=cfg.vlarb_high,
        high_limit=cfg.high_limit,
        lanes=(*job_lanes, *other_lanes),
        cost=cost,
        # the lightest job lane's over the most intense one's (below 1: favour heavy)
        target_ratio=targets[-1] if targets else 1.0,
        achieved_ratio=packets[-1] / packets[0] if packets else 1.0,
        weight_error=error,
        setup=setup.name,
    )


def _place(
    groups: Sequence[tuple[int, ...]], avail: Sequence[int], prev: Tables | None
) -> list[int]:
    """A VL for each group: where most of its SLs were (so a same grouping keeps its VLs)."""
    chosen: list[int | None] = [None] * len(groups)
    taken: set[int] = set()
    if prev is not None:
        for i, group in enumerate(groups):
            votes = [prev.sl_to_vl[sl] for sl in group if prev.sl_to_vl[sl] in avail]
            votes = [vl for vl in votes if vl not in taken]
            if votes:
                vl = max(votes, key=lambda v: (votes.count(v), -votes.index(v)))
                chosen[i] = vl
                taken.add(vl)
    rest = iter(vl for vl in avail if vl not in taken)
    return [vl if vl is not None else next(rest) for vl in chosen]
