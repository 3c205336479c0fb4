"""What a decision cycle hands out: the :class:`Decision` and a :class:`JobReport` per job.

The cycle's figures are arrays (one row per job, one column per level), and a cycle of
thousands of jobs must not turn them into a dict of figures per job (see :class:`_Levels`):
:func:`build_decision` lays them out by level once, and each report reads its row.

Units: bytes per second for rates and capacities, fractions for utilization, seconds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ibqos.attribute.attribution import Attribution
from ibqos.attribute.jobmap import MappedJob
from ibqos.attribute.sharing import JobSharing, SharingTables
from ibqos.classify.classifier import JobClass, Utilizations
from ibqos.classify.predict import Prior
from ibqos.classify.prior import FinishedJob
from ibqos.config.classes import Class
from ibqos.plan.planner import Plan, PlanResult

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class LevelFigures:
    """One job at one fat-tree level.

    Attributes:
        bytes_per_s: what the job sends across the level; NaN when a port it needs did not
            answer.
        avail_bytes_per_s: uplink capacity of the level's subtrees holding the job (level
            0: its hosts' ports); 0.0 at the top level, which has no uplinks.
        util: ``bytes_per_s / avail_bytes_per_s``; None where either is missing or zero.
    """

    bytes_per_s: float
    avail_bytes_per_s: float
    util: float | None


@dataclass(frozen=True, slots=True)
class JobReport:
    """One running job after a cycle.

    Attributes:
        id, name, user: from the job source.
        nodes: its hosts found on the fabric, in job order.
        missing: its hosts not on the fabric.
        ports: how many CA ports those hosts have.
        levels: figures by level, 0 (injection) up to the top.
        intensity: smoothed intensity (max util over levels >= 1, EWMA); None before the
            job's first measured cycle.
        level: the level that gave the latest intensity.
        cls: the class the plan uses for it (held changes included: ``Plan.job_cls``).
        measured_class: the classifier's class now (None before a measurement).
        expected: the class expected when it started (its application's last class, else
            ``LaneConfig.default_class``).
        sl: its SL.
        vl: its SL's lane; None when the routing engine owns SL2VL.
        measured_share: share of its traffic measured rather than estimated
            (:attr:`~ibqos.attribute.attribution.JobTraffic.measured_share`: 1.0 when it is
            alone on its hosts and in every subtree it uses).
        profile: "pattern <name>" when a declared pattern was the attribution prior, else
            "gravity".
        prior: the job profile that gave its expected class (and pattern, if it declared
            none): ``file: class (how, confidence c)``; None when no profile matched.
        shared: its hosts that other running jobs have too (their ports' traffic is
            split among the jobs: estimated).
    """

    id: str
    name: str
    user: str | None
    nodes: tuple[str, ...]
    missing: tuple[str, ...]
    ports: int
    levels: Mapping[int, LevelFigures]
    intensity: float | None
    level: int | None
    cls: Class
    measured_class: Class | None
    expected: Class
    sl: int
    vl: int | None
    measured_share: float
    profile: str
    prior: str | None = None
    shared: tuple[str, ...] = ()


class LazySharing:
    """The jobs' sharing of the fat tree (:mod:`ibqos.attribute.sharing`), computed
    on first use: the exporter and ``ibqos characterize sharing`` want it, a cycle does not."""

    def __init__(self, tables: SharingTables | None, jobs: Sequence[MappedJob]) -> None:
        self._tables = tables
        self._jobs = tuple(jobs)
        self._value: dict[str, JobSharing] | None = None

    def get(self) -> dict[str, JobSharing]:
        """Per job id."""
        if self._value is None:
            self._value = self._tables.sharing(self._jobs) if self._tables else {}
        return self._value


@dataclass(frozen=True)
class Decision:
    """What one cycle decided.

    Attributes:
        now_s: the cycle's time (seconds, the caller's clock).
        jobs: the planned jobs, in job source order.
        result: the planner's result (plan in force, whether to apply it, reasons).
        unattributed: per level >= 1, uplink bytes/s no running job could take (traffic of
            nodes outside any job, or of management).
        warnings: job mapping and planning warnings of this cycle.
        finished: jobs that ended since the previous cycle and had been measured.
        sharing: how the jobs share the fat tree (computed when first asked).
        residual: per level >= 1, how far the jobs' flows fitted through OpenSM's routes
            are from the level's link counters (sum of |fitted - counted| over what they
            counted); empty when attribution split subtree totals (no routes).
    """

    now_s: float
    jobs: tuple[JobReport, ...]
    result: PlanResult
    unattributed: Mapping[int, float]
    warnings: tuple[str, ...]
    finished: tuple[FinishedJob, ...] = ()
    sharing: LazySharing = field(default_factory=lambda: LazySharing(None, ()))
    residual: Mapping[int, float] = field(default_factory=dict)

    @property
    def plan(self) -> Plan:
        """The plan now in force."""
        return self.result.plan


@dataclass(frozen=True, slots=True)
class CycleOutputs:
    """What the stages of one decision cycle produced: what :func:`build_decision` reads.

    Every sequence, and every array's rows, are in job source order (row i is job i of
    *mapped*).

    Attributes:
        now_s: the cycle's time, seconds.
        mapped: the planned jobs.
        attribution: their attributed rates, bytes/s.
        figures: their utilization (fractions) and the capacities it is of (bytes/s).
        samples: their classifications (None: never sampled).
        expected: their expected classes.
        result: the planner's result.
        priors: by job id, the profile predictions that gave expected classes.
        warnings: job mapping and planning warnings of the cycle.
        finished: jobs that ended since the previous cycle and had been measured.
        sharing: the fabric's sharing tables (the sharing is computed when first asked).
    """

    now_s: float
    mapped: Sequence[MappedJob]
    attribution: Attribution
    figures: Utilizations
    samples: Sequence[JobClass | None]
    expected: Sequence[Class]
    result: PlanResult
    priors: Mapping[str, Prior]
    warnings: Sequence[str]
    finished: tuple[FinishedJob, ...]
    sharing: SharingTables


def build_decision(cycle: CycleOutputs) -> Decision:
    """The decision of one cycle, from what its stages produced."""
    figures, result = cycle.figures, cycle.result
    columns = _columns(figures.rate, figures.avail, figures.util, figures.known)
    shares = cycle.attribution.measured_share.tolist()
    reports = tuple(
        _report(mj, share, _Levels(columns, i), sample, exp, result.plan, cycle.priors)
        for i, (mj, share, sample, exp) in enumerate(
            zip(cycle.mapped, shares, cycle.samples, cycle.expected, strict=True)
        )
    )
    return Decision(
        cycle.now_s,
        reports,
        result,
        cycle.attribution.unattributed,
        tuple(cycle.warnings),
        cycle.finished,
        LazySharing(cycle.sharing, cycle.mapped),
        cycle.attribution.residual,
    )


#: one cycle's figures by level: per level, every job's rate, avail and util (None where
#: not known), each a list indexed by the job's row
_Columns = tuple[tuple[list[float], list[float], list[float | None]], ...]


def _columns(rate: FloatArray, avail: FloatArray, util: FloatArray, known: BoolArray) -> _Columns:
    """The cycle's figures as lists of floats by level (columns 0..height of the arrays)."""
    out = []
    for lvl in range(avail.shape[1]):
        u = util[:, lvl].tolist()
        k = known[:, lvl].tolist()
        utils: list[float | None] = [x if ok else None for x, ok in zip(u, k, strict=True)]
        out.append((rate[:, lvl].tolist(), avail[:, lvl].tolist(), utils))
    return tuple(out)


class _Levels(Mapping[int, LevelFigures]):
    """One job's :class:`LevelFigures` by level 0..height, read from the cycle's columns.

    A dict of figures per job would make a cycle of thousands of jobs allocate a dict and
    a figure per job and level; the garbage collector walks every such object that lives
    through the cycle, and its full passes then stall cycles on a large fabric.  The
    figures are made when read instead.
    """

    __slots__ = ("_columns", "_row")

    def __init__(self, columns: _Columns, row: int) -> None:
        self._columns = columns
        self._row = row

    def __getitem__(self, level: int) -> LevelFigures:
        if not (isinstance(level, int) and 0 <= level < len(self._columns)):
            raise KeyError(level)
        rate, avail, util = self._columns[level]
        i = self._row
        return LevelFigures(rate[i], avail[i], util[i])

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self._columns)))

    def __len__(self) -> int:
        return len(self._columns)

    def __repr__(self) -> str:
        return repr(dict(self))


def _report(
    mj: MappedJob,
    measured_share: float,
    levels: Mapping[int, LevelFigures],
    sample: JobClass | None,
    expected: Class,
    current: Plan,
    priors: Mapping[str, Prior],
) -> JobReport:
    sl = current.job_sl[mj.id]
    tables = current.tables
    return JobReport(
        id=mj.id,
        name=mj.job.name,
        user=mj.job.user,
        nodes=mj.hosts,
        missing=mj.missing,
        ports=len(mj.ports),
        levels=levels,
        intensity=None if sample is None else sample.smoothed,
        level=None if sample is None else sample.level,
        cls=current.job_cls[mj.id],
        measured_class=None if sample is None else sample.cls,
        expected=expected,
        sl=sl,
        vl=None if tables is None else tables.sl_to_vl[sl],
        measured_share=measured_share,
        profile=f"pattern {mj.job.pattern}" if mj.job.pattern else "gravity",
        prior=prior.describe() if (prior := priors.get(mj.id)) is not None else None,
        shared=mj.shared,
    )
