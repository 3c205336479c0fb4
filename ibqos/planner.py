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

**SL -> VL: the cost.**  When SLs *i* and *j* share a lane, the lighter one queues behind
the heavier one's congestion (DESIGN.md section 1), so the pair costs the intensity of the
heavier one.  A grouping costs the sum over lanes of the sum over pairs of SLs sharing it of
``max(x_i, x_j)``; a lane holding intensities ``y_0 >= y_1 >= ... >= y_(m-1)`` costs
``sum_k y_k * (m - 1 - k)``.  Lanes alone cost 0, so with no more active SLs than lanes each
SL gets a lane of its own; otherwise :func:`optimal_grouping` finds the minimum exactly by
dynamic programming over SLs sorted by intensity, cut into contiguous runs.

Why contiguous runs suffice (for any pair cost ``phi(max(x_i, x_j))`` with ``phi >= 0``
nondecreasing): write ``phi(x) = integral over s >= 0 of [phi(x) > s] ds``.  For a level *s*
let *T* be the SLs with ``phi(x) > s`` (the heaviest ones) and *B* the rest; the pairs whose
heavier member is in *T* are all sharing pairs minus the sharing pairs inside *B*.  For fixed
lane sizes ``m_1 >= m_2 >= ...`` the number of sharing pairs is fixed, and the sharing pairs
inside a set of ``|B|`` members are at most what filling the largest lanes first gives
(``sum C(c_g, 2)`` is Schur-convex and that filling majorizes every other).  The contiguous
grouping that puts the lightest ``m_1`` SLs in one lane, the next ``m_2`` in the next, and so
on, reaches that bound for every *s* at once, so it is optimal for those sizes; the DP tries
every size.  ``tests/unit/test_planner.py`` checks the DP against all set partitions.

**Lanes.**  Data VLs are ``0 .. data_vls - 1`` (PortInfo OperVLs), never VL 15.  Reserved VLs
carry only reserved SLs.  Each used lane needs at least one VLArbLow entry, so the lanes for
jobs are also limited by ``vlarb_low_cap``.  Unused SLs map to ``default_vl``; when that lane
is free for jobs, jobs use it last (it hosts the lightest group only when every lane is
needed), and it keeps one entry so stray traffic on an unused SL is not starved.

**Weights.**  Job lanes are ranked by intensity (sum of their SLs', equal intensities equal
rank, 0 = most intense); the target weight of rank *r* is ``ratio ** r`` ("geometric", the
default, ratio 2), ``1 + r * (ratio - 1)`` ("linear") or 1 ("equal").  A VLArb weight is in
64-byte credits and an entry sends whole packets until its credit is spent, so a weight
below one MTU still sends one packet (reference A.2): weights are whole MTUs
(``k * mtu / 64``), at most ``255 // (mtu / 64)`` packets per entry, larger weights split
over several entries of the same VL.  Packet counts are the rounding of the targets that is
closest in worst-case log ratio among those that fit in ``vlarb_low_cap`` entries;
:attr:`Tables.achieved_ratio` and :attr:`Tables.weight_error` say what was reached.

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
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from ibqos.classify import CLASSES, Class
from ibqos.errors import IbqosError

#: SLs in an SL2VL table (IBA: 4-bit SL).
NUM_SLS = 16
#: VL 15 is the management lane: never in VLArb (OpenSM turns it into VL 0) nor for data.
VL15 = 15
#: OpenSM parses at most this many entries per VLArb table (2 blocks of 32).
MAX_VLARB_ENTRIES = 64
#: VLArb weights count 64-byte credits.
CREDIT_BYTES = 64
MTUS = (256, 512, 1024, 2048, 4096)
WEIGHT_LAWS = ("geometric", "linear", "equal")
#: Routing engines whose ``path_sl`` or ``update_sl2vl`` hooks own the SLs (reference A.4).
SL_OWNING_ENGINES = ("lash", "dfsssp", "torus-2qos", "nue")

WeightLaw = Literal["geometric", "linear", "equal"]
Entry = tuple[int, int]  # (vl, weight in 64-byte credits)


class PlanError(IbqosError):
    """The lane configuration cannot be planned on this fabric (bad or conflicting values)."""

    category = "plan"


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
class LaneConfig:
    """What the fabric and the admin allow the planner.

    Attributes:
        data_vls: data VLs of the fabric's ports (PortInfo OperVLs as a count: 1, 2, 4, 8
            or 15); the data VLs are ``0 .. data_vls - 1``.
        reserved_sls: SLs the admin keeps (storage, management, unmanaged traffic); never
            given to a job.
        reserved_vls: VLs the admin keeps; no job's SL maps there.
        reserved_sl2vl: ``(sl, vl)`` lanes of reserved SLs; a reserved SL not listed maps
            to *default_vl*.
        default_vl: lane of every SL no job uses.
        weight_law: "geometric", "linear" or "equal" (see the module docstring).
        weight_ratio: weight of a lane over the next more intense lane's (>= 1).
        other_vl_packets: MTU packets per arbitration round for lanes that carry no
            planned job: reserved VLs not in *vlarb_high*, and the default lane when idle.
        vlarb_high: the high-priority table, ``(vl, weight)`` entries, passed through;
            empty: no lane has high priority.
        high_limit: VLHighLimit (0-255, 4 KiB units), passed through.
        vlarb_low_cap: VLArbLowCap of the ports (entries used; ibsim: 8).
        vlarb_high_cap: VLArbHighCap of the ports.
        mtu: path MTU in bytes (256-4096).
        min_hold_s: seconds a job's class change must last before the plan follows it.
        min_interval_s: seconds at least between two plan changes driven by class changes.
        routing_engine: OpenSM's ``routing_engine`` option (a comma-separated list).
        default_class: the expected class of a new job with none given.
        class_intensity: prior intensity of each class (low, moderate, high) for jobs not
            measured yet.
    """

    data_vls: int = 8
    reserved_sls: tuple[int, ...] = ()
    reserved_vls: tuple[int, ...] = ()
    reserved_sl2vl: tuple[tuple[int, int], ...] = ()
    default_vl: int = 0
    weight_law: WeightLaw = "geometric"
    weight_ratio: float = 2.0
    other_vl_packets: int = 1
    vlarb_high: tuple[Entry, ...] = ()
    high_limit: int = 0
    vlarb_low_cap: int = MAX_VLARB_ENTRIES
    vlarb_high_cap: int = MAX_VLARB_ENTRIES
    mtu: int = 2048
    min_hold_s: float = 60.0
    min_interval_s: float = 300.0
    routing_engine: str = ""
    default_class: Class = "moderate"
    class_intensity: tuple[float, float, float] = (0.05, 0.25, 0.6)

    @property
    def credits_per_packet(self) -> int:
        """VLArb weight of one MTU-sized packet, in 64-byte credits."""
        return self.mtu // CREDIT_BYTES

    @property
    def packets_per_entry(self) -> int:
        """Most whole MTU packets one VLArb entry (weight <= 255) can carry."""
        return 255 // self.credits_per_packet

    @property
    def sl_owning_engines(self) -> tuple[str, ...]:
        """The engines in *routing_engine* that own SLs (reference A.4)."""
        names = re.split(r"[,\s]+", self.routing_engine.strip().lower())
        return tuple(name for name in names if name in SL_OWNING_ENGINES)


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
        cost: the grouping's cost (module docstring); 0.0 when every SL has a lane.
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


# -- the grouping ------------------------------------------------------------------------


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


# -- weights ------------------------------------------------------------------------------


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


def _entries(vl: int, packets: int, cfg: LaneConfig) -> list[Entry]:
    """*packets* MTU packets of *vl* as VLArb entries of at most 255 credits, split evenly."""
    n = -(-packets // cfg.packets_per_entry)
    base, extra = divmod(packets, n)
    return [(vl, (base + (i < extra)) * cfg.credits_per_packet) for i in range(n)]


def _interleave(per_vl: Sequence[list[Entry]]) -> tuple[Entry, ...]:
    """One entry of each VL in turn, so no lane waits a whole run of another's entries."""
    out: list[Entry] = []
    for i in range(max((len(e) for e in per_vl), default=0)):
        out.extend(e[i] for e in per_vl if i < len(e))
    return tuple(out)


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


def _assign_sl(
    expected: Class, job_sl: Mapping[str, int], job_cls: Mapping[str, Class], cfg: LaneConfig
) -> int:
    """A free SL, else the shared SL whose jobs' classes are closest to *expected*."""
    reserved = set(cfg.reserved_sls)
    used = set(job_sl.values())
    for sl in range(NUM_SLS):
        if sl not in reserved and sl not in used:
            return sl
    members: dict[int, list[int]] = {}
    for job_id, sl in job_sl.items():
        if sl not in reserved:
            members.setdefault(sl, []).append(_rank(job_cls[job_id]))
    # every unreserved SL is in use (none is free), and _check_cfg leaves one unreserved
    want = _rank(expected)
    return min(
        members,
        key=lambda sl: (
            sum(abs(r - want) for r in members[sl]) / len(members[sl]),
            len(members[sl]),
            sl,
        ),
    )


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
    low = _interleave([_entries(lane.vl, lane.packets, cfg) for lane in order])
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
    # jobs that hold an SL first, then the heaviest expected: they get the free SLs
    for job in sorted(new, key=lambda j: (j.sl is None, -_rank(job_cls[j.job_id]), j.job_id)):
        if job.sl is not None:  # it already has one (e.g. ibqos restarted): keep it
            job_sl[job.job_id] = job.sl
        else:
            job_sl[job.job_id] = _assign_sl(job_cls[job.job_id], job_sl, job_cls, cfg)

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
