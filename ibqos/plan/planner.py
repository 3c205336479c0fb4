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

**SL -> VL, lanes and weights** are :mod:`ibqos.plan.tables`' (:class:`Tables`): the most
intense job SLs get lanes of their own, light ones share, and the light lanes get more weight.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ibqos.config.classes import CLASSES, Class
from ibqos.config.lanes import NUM_SLS, LaneConfig
from ibqos.plan.checks import check_jobs, check_lanes
from ibqos.plan.setups import LAW, Setup
from ibqos.plan.tables import Lane, Tables, lane_pool, law, make_tables, sl_intensities

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


# -- the tables of a plan -----------------------------------------------------------------


def law_setup(current: Plan) -> Setup:
    """The favour-light law's setup for the jobs of *current* (whatever setup it is in),
    from their intensities as the plan last accepted them.

    Raises:
        PlanError: the lane configuration leaves no entry for jobs.
    """
    cfg = current.cfg
    lanes = len(lane_pool(cfg)[1])
    return law(sl_intensities(current.job_sl, current.job_intensity, cfg), cfg, lanes)[1]


def setup_tables(current: Plan, setup: Setup) -> Tables:
    """The tables *setup* gives the jobs of *current* (their intensities as the plan last
    accepted them), lanes placed as near *current*'s as they go: what the plan would
    program under it, for predicting it.

    Raises:
        PlanError: the lane configuration leaves no entry for jobs.
        ValueError: *setup* does not place exactly the plan's job SLs.
    """
    sl_intensity = sl_intensities(current.job_sl, current.job_intensity, current.cfg)
    if not setup.fits(frozenset(sl_intensity)):
        raise ValueError(f"setup {setup.name} does not place the plan's job SLs")
    return make_tables(sl_intensity, current.cfg, current.tables, setup)


# -- the plan -----------------------------------------------------------------------------


def plan(
    jobs: Sequence[JobState],
    cfg: LaneConfig,
    previous: Plan | None,
    now_s: float,
    setup: Setup | None = None,
) -> PlanResult:
    """Plan job -> SL, SL -> VL and VL weights for the running *jobs*.

    Five phases, each a function below: the jobs' SLs (:func:`_job_sls`), their pending
    class changes (:func:`_class_changes`), whether to regroup (:func:`_regroup`), the
    setup (:func:`_setup`) and the tables (:func:`_plan_tables`).

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
    draft = _job_sls(jobs, cfg, previous)
    mature = _class_changes(draft, jobs, cfg, previous, now_s)
    regroup = _regroup(draft, jobs, cfg, previous, now_s, mature)
    sl_intensity = sl_intensities(draft.job_sl, draft.job_int, cfg)
    setup, new_setup = _setup(draft, setup, sl_intensity, previous)
    tables = _plan_tables(draft, cfg, previous, regroup or new_setup, sl_intensity, setup)

    new_plan = Plan(
        draft.job_sl, tables, draft.job_cls, draft.job_int, draft.pending, now_s, cfg, setup
    )
    changed = previous is None or new_plan.substance() != previous.substance()
    if not changed:
        assert previous is not None
        new_plan = replace(new_plan, changed_s=previous.changed_s)
        if not draft.reasons:
            draft.reasons.append("no change in substance")
    return PlanResult(new_plan, changed, tuple(draft.reasons), tuple(draft.warnings))


@dataclass
class _Draft:
    """The plan :func:`plan` is making, as its phases fill it in.

    Attributes:
        job_sl, job_cls, job_int: as :class:`Plan`'s ``job_sl``, ``job_cls`` and
            ``job_intensity``, for the running jobs.
        new: the running jobs *previous* did not have, in job order.
        ended: the jobs of *previous* that no longer run, sorted.
        pending: as :attr:`Plan.pending`.
        reasons, warnings: as :class:`PlanResult`'s, in the order they were found.
    """

    job_sl: dict[str, int]
    job_cls: dict[str, Class]
    job_int: dict[str, float]
    new: list[JobState]
    ended: list[str]
    pending: dict[str, tuple[Class, float]] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _job_sls(jobs: Sequence[JobState], cfg: LaneConfig, previous: Plan | None) -> _Draft:
    """Phase 1, job -> SL: jobs of *previous* keep their SL, class and intensity; a new
    job gets its expected class, that class's prior intensity unless it was measured, and
    an SL (the one it holds, else :func:`_assign_sl`).  A job that keeps an SL that is now
    reserved is warned about."""
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
    draft = _Draft(job_sl, job_cls, job_int, new, ended)
    for j, sl in sorted(job_sl.items()):
        if sl in cfg.reserved_sls:
            draft.warnings.append(
                f"job {j} keeps SL {sl} while it runs, but SL {sl} is now reserved"
            )
    return draft


def _class_changes(
    draft: _Draft,
    jobs: Sequence[JobState],
    cfg: LaneConfig,
    previous: Plan | None,
    now_s: float,
) -> list[str]:
    """Phase 2, class changes: fill in *draft*'s pending changes (a job whose class
    differs from the plan's, since when it does) and return the jobs whose change has
    lasted ``min_hold_s`` (seconds), sorted."""
    for job in jobs:
        if job.cls is None or job.cls == draft.job_cls[job.job_id]:
            continue
        old = previous.pending.get(job.job_id) if previous else None
        since = now_s if old is None or old[0] != job.cls else old[1]
        draft.pending[job.job_id] = (job.cls, since if job.since_s is None else job.since_s)
    return sorted(j for j, (_, since) in draft.pending.items() if now_s - since >= cfg.min_hold_s)


def _regroup(
    draft: _Draft,
    jobs: Sequence[JobState],
    cfg: LaneConfig,
    previous: Plan | None,
    now_s: float,
    mature: Sequence[str],
) -> bool:
    """Phase 3, whether to regroup: at the first plan, a lane configuration change, a job
    start or end, or *mature* class changes once ``min_interval_s`` (seconds) has passed
    since the plan last changed.  Each is a reason in *draft*.  On a regroup the mature
    changes are accepted, and the intensities of jobs without a pending change."""
    reasons = draft.reasons
    if previous is None:
        reasons.append("first plan")
    elif previous.cfg != cfg:
        reasons.append("lane configuration changed")
    if draft.new:
        reasons.append("jobs started: " + ", ".join(sorted(job.job_id for job in draft.new)))
    if draft.ended:
        reasons.append("jobs ended: " + ", ".join(draft.ended))
    regroup = bool(reasons)
    pending = draft.pending
    if mature:
        changes = ", ".join(f"{j} {draft.job_cls[j]}->{pending[j][0]}" for j in mature)
        if regroup or previous is None or now_s - previous.changed_s >= cfg.min_interval_s:
            regroup = True
            reasons.append(f"class changes held {cfg.min_hold_s:g} s: {changes}")
        else:
            wait = previous.changed_s + cfg.min_interval_s - now_s
            reasons.append(f"class changes wait {wait:g} s for min_interval_s: {changes}")
    if regroup:
        for j in mature:
            draft.job_cls[j] = pending.pop(j)[0]
        for job in jobs:
            if job.intensity is not None and job.job_id not in pending:
                draft.job_int[job.job_id] = job.intensity
    return regroup


def _setup(
    draft: _Draft, setup: Setup | None, sl_intensity: Mapping[int, float], previous: Plan | None
) -> tuple[Setup | None, bool]:
    """Phase 4, the setup: the tuner's *setup* while it places exactly the active job SLs
    (*sl_intensity*'s), else the law (None); and whether it differs from *previous*'s,
    which regroups.  Each is a reason in *draft*."""
    if setup is not None and not setup.fits(frozenset(sl_intensity)):
        draft.reasons.append(f"setup {setup.name} does not place the running jobs' SLs: {LAW}")
        setup = None
    prev_setup = previous.setup if previous is not None else None
    # a plan restored from the state file knows its setup by the tables' name only
    prev_name = LAW if previous is None or previous.tables is None else previous.tables.setup
    if setup != prev_setup or (LAW if setup is None else setup.name) != prev_name:
        draft.reasons.append(f"setup {LAW if setup is None else setup.name}")
        return setup, True
    return setup, False


def _plan_tables(
    draft: _Draft,
    cfg: LaneConfig,
    previous: Plan | None,
    regroup: bool,
    sl_intensity: Mapping[int, float],
    setup: Setup | None,
) -> Tables | None:
    """Phase 5, the tables: none under a routing engine that owns SLs (a warning in
    *draft*), new ones on a regroup (or when *previous* has none), else *previous*'s."""
    engines = cfg.sl_owning_engines
    if engines:
        draft.warnings.append(
            f"routing engine {'/'.join(engines)} owns SLs and SL2VL (docs/design.md §6.4): ibqos"
            " leaves qos_*_sl2vl and VLArb alone and only writes the policy; the engine's"
            " path SL may override a job's SL"
        )
        return None
    if regroup or previous is None or previous.tables is None:
        return make_tables(sl_intensity, cfg, previous.tables if previous else None, setup)
    return previous.tables
