"""The plan: job -> SL, SL -> VL and VL arbitration weights (the "assign" stage).

DESIGN.md sections 1-2: an SL identifies a job (or a few jobs of the same class); the SL->VL
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

**Routing engines that own SLs** (lash, dfsssp, torus-2QoS, nue; reference A.4): any of them
in ``routing_engine`` (a list is tried in order, so any counts) makes :attr:`Plan.tables`
None, with a warning: nothing of SL2VL/VLArb may be rendered, while job -> SL (the policy
file side) still works.  This is a plan, not an error, so the daemon keeps running there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ibqos.config.classes import CLASSES, Class
from ibqos.config.lanes import MAX_VLARB_ENTRIES, MTUS, NUM_SLS, WEIGHT_LAWS, Entry, LaneConfig
from ibqos.errors import PlanError
from ibqos.plan.grouping import optimal_grouping
from ibqos.plan.weights import interleave, lane_entries, quantize, weight_target

__all__ = [
    "JobState",
    "Lane",
    "Plan",
    "PlanResult",
    "Tables",
    "plan",
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
    """

    job_sl: dict[str, int]
    tables: Tables | None
    job_cls: dict[str, Class]
    job_intensity: dict[str, float]
    pending: dict[str, tuple[Class, float]]
    changed_s: float
    cfg: LaneConfig

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


# -- validation ---------------------------------------------------------------------------


def _check_cfg(cfg: LaneConfig) -> None:
    def bad(what: str) -> PlanError:
        return PlanError(f"lanes: {what}")

    if not 1 <= cfg.data_vls <= 15:
        raise bad(f"data_vls: expected 1-15, got {cfg.data_vls!r}")
    vls = range(cfg.data_vls)
    if cfg.mtu not in MTUS:
        raise bad(f"mtu: expected one of {MTUS}, got {cfg.mtu!r}")
    for sl in cfg.reserved_sls:
        if not 0 <= sl < NUM_SLS:
            raise bad(f"reserved_sls: SL {sl} is not 0-15")
    for vl in (*cfg.reserved_vls, cfg.default_vl):
        if vl not in vls:
            raise bad(f"VL {vl} is not a data VL of this fabric (0-{cfg.data_vls - 1})")
    for sl, vl in cfg.reserved_sl2vl:
        if sl not in cfg.reserved_sls:
            raise bad(f"reserved_sl2vl: SL {sl} is not reserved")
        if vl not in vls:
            raise bad(f"reserved_sl2vl: VL {vl} of SL {sl} is not a data VL (0-{vls[-1]})")
    if len(set(cfg.reserved_sls)) >= NUM_SLS:
        raise bad("every SL is reserved: none left for jobs")
    if all(vl in cfg.reserved_vls for vl in vls):
        raise bad("every data VL is reserved: none left for jobs")
    if cfg.weight_law not in WEIGHT_LAWS:
        raise bad(f"weight_law: expected one of {WEIGHT_LAWS}, got {cfg.weight_law!r}")
    if not (math.isfinite(cfg.weight_ratio) and cfg.weight_ratio >= 1.0):
        raise bad(f"weight_ratio: expected a number >= 1, got {cfg.weight_ratio!r}")
    if not 1 <= cfg.other_vl_packets <= cfg.packets_per_entry:
        raise bad(f"other_vl_packets: expected 1-{cfg.packets_per_entry} at MTU {cfg.mtu}")
    for name in ("vlarb_low_cap", "vlarb_high_cap"):
        if not 1 <= getattr(cfg, name) <= MAX_VLARB_ENTRIES:
            raise bad(f"{name}: expected 1-{MAX_VLARB_ENTRIES}, got {getattr(cfg, name)!r}")
    if len(cfg.vlarb_high) > cfg.vlarb_high_cap:
        raise bad(
            f"vlarb_high: {len(cfg.vlarb_high)} entries, VLArbHighCap is {cfg.vlarb_high_cap}"
        )
    for vl, weight in cfg.vlarb_high:
        if vl not in vls or not 0 <= weight <= 255:
            raise bad(f"vlarb_high: entry {vl}:{weight} needs a data VL and a weight 0-255")
    if not 0 <= cfg.high_limit <= 255:
        raise bad(f"high_limit: expected 0-255, got {cfg.high_limit!r}")
    for name in ("min_hold_s", "min_interval_s"):
        value = getattr(cfg, name)
        if not (math.isfinite(value) and value >= 0):
            raise bad(f"{name}: expected seconds >= 0, got {value!r}")
    if cfg.default_class not in CLASSES:
        raise bad(f"default_class: expected one of {CLASSES}, got {cfg.default_class!r}")
    if len(cfg.class_intensity) != len(CLASSES) or not all(
        math.isfinite(x) and x >= 0 for x in cfg.class_intensity
    ):
        raise bad(f"class_intensity: expected {len(CLASSES)} numbers >= 0")


def _check_jobs(jobs: Sequence[JobState]) -> None:
    seen: set[str] = set()
    for job in jobs:
        if job.job_id in seen:
            raise PlanError(f"job {job.job_id}: listed twice")
        seen.add(job.job_id)
        for cls in (job.cls, job.expected):
            if cls is not None and cls not in CLASSES:
                raise PlanError(f"job {job.job_id}: class {cls!r} is not one of {CLASSES}")
        if job.intensity is not None and not (math.isfinite(job.intensity) and job.intensity >= 0):
            raise PlanError(f"job {job.job_id}: intensity {job.intensity!r} is not a number >= 0")
        if job.sl is not None and not 0 <= job.sl < NUM_SLS:
            raise PlanError(f"job {job.job_id}: SL {job.sl!r} is not 0-15")


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


def _tables(sl_intensity: Mapping[int, float], cfg: LaneConfig, prev: Tables | None) -> Tables:
    """SL2VL and VLArb for the active job SLs (*sl_intensity*: SL -> summed intensity)."""
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

    sls = sorted(sl_intensity)
    cost, groups = optimal_grouping([sl_intensity[sl] for sl in sls], len(lanes))
    group_sls = [tuple(sls[i] for i in group) for group in groups]  # most intense first
    avail = lanes
    if default_free and len(groups) < len(lanes):
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
    targets = [weight_target(r, cfg.weight_law, cfg.weight_ratio) for r in ranks]
    idle_default = default_free and cfg.default_vl not in group_vl
    other_vls = [*fixed, *([cfg.default_vl] if idle_default else [])]
    job_budget = cfg.vlarb_low_cap - len(other_vls)  # other lanes: one entry each
    packets, error = quantize(targets, cfg.packets_per_entry, job_budget) if targets else ([], 0.0)

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
    low = interleave(
        [
            lane_entries(lane.vl, lane.packets, cfg.credits_per_packet, cfg.packets_per_entry)
            for lane in order
        ]
    )
    return Tables(
        sl_to_vl=tuple(sl_to_vl),
        vlarb_low=low,
        vlarb_high=cfg.vlarb_high,
        high_limit=cfg.high_limit,
        lanes=(*job_lanes, *other_lanes),
        cost=cost,
        target_ratio=max(targets, default=1.0) / min(targets, default=1.0),
        achieved_ratio=max(packets, default=1) / min(packets, default=1),
        weight_error=error,
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
    jobs: Sequence[JobState], cfg: LaneConfig, previous: Plan | None, now_s: float
) -> PlanResult:
    """Plan job -> SL, SL -> VL and VL weights for the running *jobs*.

    Args:
        jobs: the running jobs (jobs of *previous* not listed have ended).
        cfg: the lanes allowed.
        previous: the plan in force (None at start).
        now_s: the current time, seconds (any clock, the same one every call).

    Returns:
        The plan now in force, whether it differs in substance from *previous*, why, and
        warnings.

    Raises:
        PlanError: *cfg* or *jobs* are invalid, or *cfg* does not fit the fabric.
    """
    _check_cfg(cfg)
    _check_jobs(jobs)
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

    reserved = set(cfg.reserved_sls)
    sl_intensity: dict[int, float] = {}
    for j, sl in sorted(job_sl.items()):
        if sl in reserved:
            warnings.append(f"job {j} keeps SL {sl} while it runs, but SL {sl} is now reserved")
        else:
            sl_intensity[sl] = sl_intensity.get(sl, 0.0) + job_int[j]

    tables: Tables | None
    engines = cfg.sl_owning_engines
    if engines:
        tables = None
        warnings.append(
            f"routing engine {'/'.join(engines)} owns SLs and SL2VL (reference A.4): ibqos"
            " leaves qos_*_sl2vl and VLArb alone and only writes the policy; the engine's"
            " path SL may override a job's SL"
        )
    elif regroup or previous is None or previous.tables is None:
        tables = _tables(sl_intensity, cfg, previous.tables if previous else None)
    else:
        tables = previous.tables

    new_plan = Plan(job_sl, tables, job_cls, job_int, pending, now_s, cfg)
    changed = previous is None or new_plan.substance() != previous.substance()
    if not changed:
        assert previous is not None
        new_plan = replace(new_plan, changed_s=previous.changed_s)
        if not reasons:
            reasons.append("no change in substance")
    return PlanResult(new_plan, changed, tuple(reasons), tuple(warnings))
