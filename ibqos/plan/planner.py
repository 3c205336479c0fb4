"""The plan: job -> SL, SL -> VL and VL arbitration weights (the "assign" stage).

docs/design.md §1 and §4: an SL identifies a job (or a few jobs of the same class); the SL->VL
map groups SLs onto the fabric's data VLs so that the most intense ones get lanes of their
own and light ones share; VL arbitration weights favour the *light* lanes.  Everything here
is pure: no I/O, no clock (``now_s`` is passed in), and :func:`plan` returns a new
:class:`Plan` that the caller keeps and passes back as *previous* on the next cycle.

**job -> SL.**  A job gets an SL when it first appears and keeps it while it runs (clients
cache paths; MPI stacks take a static SL).  A free SL if any (not reserved, not used by a
running job), lowest number first, with new jobs of a higher expected class served first;
otherwise the SL whose jobs' classes are closest to the new job's expected class (mean rank
distance, then fewer jobs, then lower SL).  Never a reserved SL.

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

**Stability.**  Job starts and ends go through at once: the policy must name a new job's SL
before its first PathRecord query, and the SIGHUP that carries the policy reprograms
SL2VL/VLArb in the same heavy sweep, so regrouping then costs nothing more.  A job's class
change counts only after it has lasted ``min_hold_s``, and then only once ``min_interval_s``
has passed since the last change of the plan; until then the plan uses the job's last
accepted class and intensity.  Intensity noise alone never regroups.  ``replace`` is True
only when what OpenSM sees differs: job -> SL, SL2VL, the VLArb tables or the high limit.

**Routing engines that own SLs** (lash, dfsssp, torus-2QoS, nue; docs/design.md §6.4): any of them
in ``routing_engine`` (a list is tried in order, so any counts) makes :attr:`Plan.tables`
None, with a warning: nothing of SL2VL/VLArb may be rendered, while job -> SL (the policy
file side) still works.  This is a plan, not an error, so the daemon keeps running there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ibqos.config.classes import CLASSES, Class
from ibqos.config.lanes import (
    NUM_SLS,
    Entry,
    LaneConfig,
)
from ibqos.errors import PlanError
from ibqos.plan.checks import check_jobs, check_lanes
from ibqos.plan.grouping import lane_cost, optimal_grouping
from ibqos.plan.setups import LAW, Setup
from ibqos.plan.weights import interleave, lane_entries, quantize, weight_target

__all__ = [
    "JobState",
    "Lane",
    "Plan",
    "PlanResult",
    "Tables",
    "law_setup",
    "plan",
    "setup_tables",
]


@dataclass(frozen=True)
class JobState:
    """One running job as the planner sees it.

    Attributes:
        job_id: the job.
        intensity: smoothed utilization (a fraction, >= 0); None when not measured yet,
            and then the prior of its class from :attr:`LaneConfig.class_intensity`.
        cls: its current class from the classifier; None when not classified yet.
        expected: the class expected for a new job (from its profile or name history);
            None: :attr:`LaneConfig.default_class`.  Read only when the job first appears.
        since_s: when *cls* began (the classifier's ``JobClass.since_s``); None: when the
            planner first saw it.
        sl: the SL the job already has, for a job the planner has not seen but that runs
            with an SL (ibqos restarted: read back from the policy or the job's
            environment); None: assign one.  Ignored for jobs in the previous plan.
    """

    job_id: str
    intensity: float | None = None
    cls: Class | None = None
    expected: Class | None = None
    since_s: float | None = None
    sl: int | None = None


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


@dataclass(frozen=True)
class Plan:
    """The plan in force.  Keep it and pass it back as *previous*; do not mutate its dicts.

    Attributes:
        job_sl: SL of every running job.
        tables: SL2VL and VLArb; None when the routing engine owns SLs (nothing to render).
        job_cls: each job's class as the plan last accepted it.
        job_intensity: each job's intensity as the plan last accepted it.
        pending: class changes not accepted yet: job -> (class, since, seconds).
        changed_s: when the plan last changed in substance (seconds, the caller's clock).
        cfg: the configuration it was made with.
        setup: the setup its tables follow when the tuner chose one; None: the law.
    """

    job_sl: dict[str, int]
    tables: Tables | None
    job_cls: dict[str, Class]
    job_intensity: dict[str, float]
    pending: dict[str, tuple[Class, float]]
    changed_s: float
    cfg: LaneConfig
    setup: Setup | None = None

    def substance(self) -> tuple[object, ...]:
        """What OpenSM sees: job -> SL, and the tables."""
        tables = None if self.tables is None else self.tables.substance()
        return (sorted(self.job_sl.items()), tables)


@dataclass(frozen=True)
class PlanResult:
    """The outcome of one planning cycle.

    Attributes:
        plan: the plan now in force (the previous one, updated, when *replace* is False).
        replace: the plan differs in substance from the previous one: render and apply it.
        reasons: why it was (or was not) replanned, one short phrase each.
        warnings: things an admin should know (one line each).
    """

    plan: Plan
    replace: bool
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


# -- job -> SL ----------------------------------------------------------------------------


def _rank(cls: Class) -> int:
    return CLASSES.index(cls)


def _assign_sl(expected: Class, counts: Mapping[int, Sequence[int]], cfg: LaneConfig) -> int:
    """A free SL, else the shared SL whose jobs' classes are closest to *expected*.

    *counts*: for every SL in use, how many of its jobs are of each class (by rank); kept
    by the caller as jobs are given SLs, so that each new job costs O(SLs), not O(jobs).
    """
    reserved = set(cfg.reserved_sls)
    for sl in range(NUM_SLS):
        if sl not in reserved and sl not in counts:
            return sl
    # every unreserved SL is in use (none is free), and _check_cfg leaves one unreserved
    want = _rank(expected)
    shared = [sl for sl in counts if sl not in reserved]

    def closeness(sl: int) -> tuple[float, int, int]:
        c = counts[sl]
        n = sum(c)
        return (sum(k * abs(r - want) for r, k in enumerate(c)) / n, n, sl)

    return min(shared, key=closeness)


# -- SL -> VL and weights -----------------------------------------------------------------


def _sl_intensity(
    job_sl: Mapping[str, int], job_int: Mapping[str, float], cfg: LaneConfig
) -> dict[int, float]:
    """SL -> summed intensity of its jobs, for the SLs jobs may have (not reserved)."""
    reserved = set(cfg.reserved_sls)
    out: dict[int, float] = {}
    for j, sl in sorted(job_sl.items()):
        if sl not in reserved:
            out[sl] = out.get(sl, 0.0) + job_int[j]
    return out


def _job_lanes(cfg: LaneConfig) -> tuple[list[int], list[int], list[int], bool]:
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


def _law(sl_intensity: Mapping[int, float], cfg: LaneConfig, lanes: int) -> tuple[float, Setup]:
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


def law_setup(current: Plan) -> Setup:
    """The favour-light law's setup for the jobs of *current* (whatever setup it is in),
    from their intensities as the plan last accepted them.

    Raises:
        PlanError: the lane configuration leaves no entry for jobs.
    """
    cfg = current.cfg
    lanes = len(_job_lanes(cfg)[1])
    return _law(_sl_intensity(current.job_sl, current.job_intensity, cfg), cfg, lanes)[1]


def setup_tables(current: Plan, setup: Setup) -> Tables:
    """The tables *setup* gives the jobs of *current* (their intensities as the plan last
    accepted them), lanes placed as near *current*'s as they go: what the plan would
    program under it, for predicting it.

    Raises:
        PlanError: the lane configuration leaves no entry for jobs.
        ValueError: *setup* does not place exactly the plan's job SLs.
    """
    sl_intensity = _sl_intensity(current.job_sl, current.job_intensity, current.cfg)
    if not setup.fits(frozenset(sl_intensity)):
        raise ValueError(f"setup {setup.name} does not place the plan's job SLs")
    return _tables(sl_intensity, current.cfg, current.tables, setup)


def _tables(
    sl_intensity: Mapping[int, float],
    cfg: LaneConfig,
    prev: Tables | None,
    setup: Setup | None = None,
) -> Tables:
    """SL2VL and VLArb for the active job SLs (*sl_intensity*: SL -> summed intensity), by
    *setup* (None: the favour-light law; else one that places exactly those SLs)."""
    fixed, lanes, others, default_free = _job_lanes(cfg)
    if setup is None:
        cost, setup = _law(sl_intensity, cfg, len(lanes))
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


# -- the plan -----------------------------------------------------------------------------


def plan(
    jobs: Sequence[JobState],
    cfg: LaneConfig,
    previous: Plan | None,
    now_s: float,
    setup: Setup | None = None,
) -> PlanResult:
    """Plan job -> SL, SL -> VL and VL weights for the running *jobs*.

    Args:
        jobs: the running jobs (jobs of *previous* not listed have ended).
        cfg: the lanes allowed.
        previous: the plan in force (None at start).
        now_s: the current time, seconds (any clock, the same one every call).
        setup: the tuner's setup to program instead of the favour-light law; used only
            while it places exactly the active job SLs (a job that starts or ends brings
            the law back, with a reason saying so).

    Returns:
        The plan now in force, whether it differs in substance from *previous*, why, and
        warnings.

    Raises:
        PlanError: *cfg* or *jobs* are invalid, or *cfg* does not fit the fabric.
    """
    check_lanes(cfg)
    check_jobs(jobs)
    warnings: list[str] = []
    reasons: list[str] = []
    running = {job.job_id: job for job in jobs}
    job_sl = {j: sl for j, sl in (previous.job_sl if previous else {}).items() if j in running}
    job_cls = {j: previous.job_cls[j] for j in job_sl} if previous else {}
    job_int = {j: previous.job_intensity[j] for j in job_sl} if previous else {}
    ended = sorted(set(previous.job_sl) - set(running)) if previous else []
    new = [job for job in jobs if job.job_id not in job_sl]
    for job in new:
        cls = job.expected or job.cls or cfg.default_class
        job_cls[job.job_id] = cls
        prior = cfg.class_intensity[_rank(cls)]
        job_int[job.job_id] = prior if job.intensity is None else job.intensity
    counts: dict[int, list[int]] = {}  # SL -> its jobs per class rank
    for j, sl in job_sl.items():
        counts.setdefault(sl, [0] * len(CLASSES))[_rank(job_cls[j])] += 1
    # jobs that hold an SL first, then the heaviest expected: they get the free SLs
    for job in sorted(new, key=lambda j: (j.sl is None, -_rank(job_cls[j.job_id]), j.job_id)):
        if job.sl is not None:  # it already has one (e.g. ibqos restarted): keep it
            job_sl[job.job_id] = job.sl
        else:
            job_sl[job.job_id] = _assign_sl(job_cls[job.job_id], counts, cfg)
        counts.setdefault(job_sl[job.job_id], [0] * len(CLASSES))[_rank(job_cls[job.job_id])] += 1

    pending: dict[str, tuple[Class, float]] = {}
    for job in jobs:
        if job.cls is None or job.cls == job_cls[job.job_id]:
            continue
        old = previous.pending.get(job.job_id) if previous else None
        since = now_s if old is None or old[0] != job.cls else old[1]
        pending[job.job_id] = (job.cls, since if job.since_s is None else job.since_s)
    mature = sorted(j for j, (_, since) in pending.items() if now_s - since >= cfg.min_hold_s)

    if previous is None:
        reasons.append("first plan")
    elif previous.cfg != cfg:
        reasons.append("lane configuration changed")
    if new:
        reasons.append("jobs started: " + ", ".join(sorted(job.job_id for job in new)))
    if ended:
        reasons.append("jobs ended: " + ", ".join(ended))
    regroup = bool(reasons)
    if mature:
        changes = ", ".join(f"{j} {job_cls[j]}->{pending[j][0]}" for j in mature)
        if regroup or previous is None or now_s - previous.changed_s >= cfg.min_interval_s:
            regroup = True
            reasons.append(f"class changes held {cfg.min_hold_s:g} s: {changes}")
        else:
            wait = previous.changed_s + cfg.min_interval_s - now_s
            reasons.append(f"class changes wait {wait:g} s for min_interval_s: {changes}")
    if regroup:
        for j in mature:
            job_cls[j] = pending.pop(j)[0]
        for job in jobs:
            if job.intensity is not None and job.job_id not in pending:
                job_int[job.job_id] = job.intensity

    sl_intensity = _sl_intensity(job_sl, job_int, cfg)
    for j, sl in sorted(job_sl.items()):
        if sl in cfg.reserved_sls:
            warnings.append(f"job {j} keeps SL {sl} while it runs, but SL {sl} is now reserved")
    if setup is not None and not setup.fits(frozenset(sl_intensity)):
        reasons.append(f"setup {setup.name} does not place the running jobs' SLs: {LAW}")
        setup = None
    prev_setup = previous.setup if previous is not None else None
    # a plan restored from the state file knows its setup by the tables' name only
    prev_name = LAW if previous is None or previous.tables is None else previous.tables.setup
    if setup != prev_setup or (LAW if setup is None else setup.name) != prev_name:
        regroup = True
        reasons.append(f"setup {LAW if setup is None else setup.name}")

    tables: Tables | None
    engines = cfg.sl_owning_engines
    if engines:
        tables = None
        warnings.append(
            f"routing engine {'/'.join(engines)} owns SLs and SL2VL (docs/design.md §6.4): ibqos"
            " leaves qos_*_sl2vl and VLArb alone and only writes the policy; the engine's"
            " path SL may override a job's SL"
        )
    elif regroup or previous is None or previous.tables is None:
        tables = _tables(sl_intensity, cfg, previous.tables if previous else None, setup)
    else:
        tables = previous.tables

    new_plan = Plan(job_sl, tables, job_cls, job_int, pending, now_s, cfg, setup)
    changed = previous is None or new_plan.substance() != previous.substance()
    if not changed:
        assert previous is not None
        new_plan = replace(new_plan, changed_s=previous.changed_s)
        if not reasons:
            reasons.append("no change in substance")
    return PlanResult(new_plan, changed, tuple(reasons), tuple(warnings))
