"""One decision cycle: a rates table and the running jobs in, a lane plan out.

The stages, in the order DESIGN.md section 3 draws them::

    jobs --JobMapper--> ports --Attributor--> bytes/s per level --utilization--> util
         --Classifier (EWMA, hysteresis)--> class --plan--> job->SL, SL->VL, VLArb

:class:`Decider` keeps what lives across cycles (the per-fabric tables, each job's smoothed
intensity, the plan in force, the classes of finished jobs by application name) and
:meth:`Decider.decide` runs one cycle.  Nothing here reads the fabric or the clock: the
caller passes the rates (``ibqos.collect``) and the time, so the cycle runs the same on a
live fabric, a replayed recording or a benchmark's synthetic tables.  (Only a performance
counter is read, to time the stages: :attr:`Decider.timings`, and the wall clock once when
jobs end, to stamp them: :attr:`FinishedJob.end_s`.)

Speed.  A cycle must stay well under a second with 50k ports and thousands of jobs
(``docs/plan-benchmark.md``), so utilization and intensity are computed for all jobs at
once on arrays (one row per job, one column per level), what depends only on a job's
ports is kept while it runs, and per-job Python work is left to the records the cycle
hands out (:class:`JobReport`, the planner's ``JobState``).

Units: bytes per second for rates and capacities, fractions for utilization, seconds.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pandas as pd

from ibqos.attribute.attribution import Attributor
from ibqos.attribute.jobmap import JobMapper, MappedJob, log_warnings
from ibqos.attribute.sharing import JobSharing, SharingTables
from ibqos.classify.classifier import (
    Capacities,
    Classifier,
    JobClass,
    class_of,
)
from ibqos.classify.levels import Characterizer
from ibqos.classify.prior import (
    FinishedJob,
    Prior,
    Priors,
    make_priors,
)
from ibqos.classify.profiles import Profile
from ibqos.config.classes import (
    Class,
    Thresholds,
)
from ibqos.config.lanes import (
    LaneConfig,
)
from ibqos.fabric.hostnames import HostMatcher
from ibqos.fabric.model import Fabric
from ibqos.jobs.jobfile import Job
from ibqos.plan.planner import (
    JobState,
    Plan,
    PlanResult,
    plan,
)

if TYPE_CHECKING:
    from ibqos.config.schema import Config

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
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
        measured_share: share of its upper-level traffic measured rather than estimated
            (1.0 when it is alone in every subtree it uses).
        profile: "pattern <name>" when a declared pattern was the attribution prior, else
            "gravity".
        prior: the job profile that gave its expected class (and pattern, if it declared
            none): ``file: class (how, confidence c)``; None when no profile matched.
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
    """

    now_s: float
    jobs: tuple[JobReport, ...]
    result: PlanResult
    unattributed: Mapping[int, float]
    warnings: tuple[str, ...]
    finished: tuple[FinishedJob, ...] = ()
    sharing: LazySharing = field(default_factory=lambda: LazySharing(None, ()))

    @property
    def plan(self) -> Plan:
        """The plan now in force."""
        return self.result.plan


class Decider:
    """Runs decision cycles on one fabric and keeps their state.

    Args:
        fabric: the topology the rates are read on.
        lanes: what the planner may use (resolved: no ``auto`` values left).
        thresholds: class bounds and smoothing.
        matcher: how host names are read from NodeDescriptions.
        priors: job profiles (``profiles.dir``): a matching one gives a new job its
            expected class and, if it declares none, its pattern.
        exclude_hosts: hosts on the fabric that run no jobs (``jobs.exclude_hosts``): not
            leaf capacity for fragmentation, never a profile model's placement.
        wall_clock: seconds since the epoch, to stamp finished jobs (tests inject one).

    Attributes:
        timings: seconds each stage of the last cycle took: ``map``, ``attribute``,
            ``classify`` (capacities, utilization, classifier), ``plan`` and ``report``
            (building the :class:`Decision`); for benchmarks and self-health metrics.
    """

    def __init__(
        self,
        fabric: Fabric,
        lanes: LaneConfig,
        thresholds: Thresholds | None = None,
        matcher: HostMatcher | None = None,
        priors: Priors | None = None,
        exclude_hosts: Collection[str] = (),
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.lanes = lanes
        self.matcher = matcher or HostMatcher()
        self.exclude_hosts = frozenset(exclude_hosts)
        #: seconds since the epoch; read only to stamp when a job was seen to end
        self.wall_clock = wall_clock
        self.priors = priors
        # id() of a job as its source gave it -> (that job, the job used, its profile)
        self._profiled: dict[int, tuple[Job, Job, Profile | None]] = {}
        self._prior_of: dict[str, Prior] = {}  # running job id -> the prior it started with
        self.classifier = Classifier(thresholds)
        self.previous: Plan | None = None
        #: application name -> class of its last finished job (the expected class of the
        #: next job of that name; profiles will refine it)
        self.history: dict[str, Class] = {}
        #: application name -> its last finished job that was measured (kept in the state
        #: file for ``ibqos characterize learn``, which counts each job once by id and end)
        self.last_finished: dict[str, FinishedJob] = {}
        self._names: dict[str, str] = {}  # running job id -> application name
        self._ran: dict[str, tuple[str | None, int]] = {}  # running job id -> (user, hosts)
        self._expected_of: dict[str, Class] = {}  # running job id -> expected class
        self._warned: frozenset[str] = frozenset()
        self.timings: dict[str, float] = {}
        #: SLs and classes of jobs that ran before a restart (the saved state): such a job,
        #: still running, keeps its SL and starts in its class instead of being replanned
        self.known_sl: dict[str, int] = {}
        self.known_cls: dict[str, Class] = {}
        self.mapped: tuple[MappedJob, ...] = ()
        self.set_fabric(fabric)

    @classmethod
    def from_config(cls, config: Config, fabric: Fabric, lanes: LaneConfig) -> Decider:
        """A decider as the config says: thresholds, host pattern, job profiles.

        Raises:
            ProfileError: a profile file is bad.
        """
        return cls(
            fabric,
            lanes,
            config.classify,
            HostMatcher(config.jobs.host_pattern),
            priors=make_priors(config.profiles),
            exclude_hosts=config.jobs.exclude_hosts,
        )

    def set_fabric(self, fabric: Fabric) -> None:
        """Use a new topology (after a fabric change): rebuild the per-fabric tables."""
        self.fabric = fabric
        self.attributor = Attributor(fabric)
        self.capacities = Capacities.from_fabric(fabric)
        self.mapper = JobMapper(fabric, self.matcher)
        self.sharing_tables = SharingTables(fabric, self.matcher, self.exclude_hosts)
        self._characterizer: Characterizer | None = None  # built when a profile needs it
        self._avail: tuple[tuple[MappedJob, ...], FloatArray] | None = None
        self._avail_of: dict[int, tuple[MappedJob, list[float]]] = {}  # by id() of the job

    def decide(
        self, rates: pd.DataFrame, jobs: Sequence[Job], now_s: float, *, fresh: bool = True
    ) -> Decision:
        """Run one cycle.

        Args:
            rates: a rates table (``ibqos.collect.rates``; ``node_guid``, ``port`` and
                ``xmit_bytes_per_s`` are read, NaN where a port did not answer).
            jobs: the running jobs.
            now_s: the cycle's time, seconds (any clock, the same every call).
            fresh: *rates* were swept for this cycle.  False (a job started or ended between
                sweeps, the last rates reused): jobs new to the plan are not classified
                from them, since their nodes were not running them yet; they start in
                their expected class.

        Raises:
            PlanError: the lane configuration does not fit (the daemon keeps its plan).
            ValueError: a rate is negative (a utilization must be >= 0).
        """
        clock = time.perf_counter
        t0 = clock()
        jobs = self._with_profiles(jobs)
        mapped, warnings = self.mapper.map(jobs)
        self._log_new(warnings)
        t1 = clock()
        attribution = self.attributor.attribute(rates, mapped)
        t2 = clock()
        finished = self._remember_ended({mj.id for mj in mapped})
        # every job at once: rate, avail and util per job (row) and level 0..height (column)
        avail = self._available(tuple(mapped))
        rate = np.full(avail.shape, math.nan)
        rate[:, list(attribution.levels)] = attribution.bytes_per_s
        known = (avail > 0) & np.isfinite(rate)
        util = np.divide(rate, avail, out=np.full(avail.shape, math.nan), where=known)
        measure, value, level = self._intensities(mapped, util, known)
        if not fresh:
            seen = self.previous.job_sl if self.previous is not None else {}
            measure &= np.array([mj.id in seen for mj in mapped], dtype=np.bool_)
        ids = [mj.id for mj in mapped]
        expected = [self._expected(mj) for mj in mapped]
        samples: list[JobClass | None] = [self.classifier.get(job_id) for job_id in ids]
        now = np.flatnonzero(measure).tolist()
        updated = self.classifier.update_many(
            [ids[i] for i in now],
            value[now].tolist(),
            level[now].tolist(),
            now_s,
            [expected[i] for i in now],
        )
        for i, sample in zip(now, updated, strict=True):
            samples[i] = sample
        # jobs with nothing measured now keep their last sample
        states = [
            JobState(
                job_id,
                intensity=None if sample is None else sample.smoothed,
                cls=None if sample is None else sample.cls,
                # read only when the job is new: what is measured beats a guess
                expected=exp if sample is None else sample.cls,
                since_s=None if sample is None else sample.since_s,
                sl=self.known_sl.get(job_id),
            )
            for job_id, sample, exp in zip(ids, samples, expected, strict=True)
        ]
        self.classifier.prune(ids)
        t3 = clock()
        result = plan(states, self.lanes, self.previous, now_s)
        t4 = clock()
        self.previous = result.plan
        self.mapped = tuple(mapped)
        # the saved state served its purpose once the plan holds these jobs
        self.known_sl = {j: sl for j, sl in self.known_sl.items() if j not in result.plan.job_sl}
        self._names = {mj.id: mj.job.name for mj in mapped}
        self._ran = {mj.id: (mj.job.user, len(mj.hosts)) for mj in mapped}
        self._expected_of = dict(zip(ids, expected, strict=True))
        self._prior_of = {j: p for j, p in self._prior_of.items() if j in self._expected_of}
        new_warnings = [w for w in result.warnings if w not in self._warned]
        for w in new_warnings:
            log.warning("%s", w)
        self._warned = frozenset(warnings) | frozenset(result.warnings)
        columns = _columns(rate, avail, util, known)
        reports = tuple(
            _report(mj, share, _Levels(columns, i), sample, exp, result.plan, self._prior_of)
            for i, (mj, share, sample, exp) in enumerate(
                zip(mapped, attribution.measured_share.tolist(), samples, expected, strict=True)
            )
        )
        decision = Decision(
            now_s,
            reports,
            result,
            attribution.unattributed,
            (*warnings, *result.warnings),
            finished,
            LazySharing(self.sharing_tables, mapped),
        )
        t5 = clock()
        self.timings = {
            "map": t1 - t0,
            "attribute": t2 - t1,
            "classify": t3 - t2,
            "plan": t4 - t3,
            "report": t5 - t4,
        }
        return decision

    def _available(self, mapped: tuple[MappedJob, ...]) -> FloatArray:
        """``avail[j, l]`` of every job, computed when a job first appears and kept while
        it runs (a job's avail depends only on its ports)."""
        if self._avail is not None and self._avail[0] == mapped:
            return self._avail[1]
        # by identity: the job mapper hands back the same MappedJob while a job runs
        known = self._avail_of
        new = [mj for mj in mapped if (hit := known.get(id(mj))) is None or hit[0] is not mj]
        rows = self.capacities.available_many([mj.ports for mj in new]).tolist()
        fresh = {id(mj): (mj, row) for mj, row in zip(new, rows, strict=True)}
        self._avail_of = {id(mj): fresh.get(id(mj)) or known[id(mj)] for mj in mapped}
        width = self.fabric.height + 1
        avail = np.array([self._avail_of[id(mj)][1] for mj in mapped]).reshape(-1, width)
        self._avail = (mapped, avail)
        return avail

    def _intensities(
        self, mapped: Sequence[MappedJob], util: FloatArray, known: BoolArray
    ) -> tuple[BoolArray, FloatArray, IntArray]:
        """Which jobs have a sample this cycle, and their intensity and its level
        (:func:`~ibqos.classify.classifier.intensity` of every job at once).

        A job has a sample when some level >= 1 (where jobs share links) is known, or, on a
        single-switch fabric, when level 0 is.  The intensity is the largest known
        utilization over the levels >= 1 (else level 0), ties to the lowest level.

        Raises:
            ValueError: a known utilization is negative or not finite.
        """
        height = self.fabric.height
        shared = known & (np.arange(util.shape[1]) >= 1)
        has_shared = np.asarray(shared.any(axis=1), dtype=np.bool_)
        measure = has_shared | (np.asarray(known.any(axis=1), dtype=np.bool_) & (height <= 1))
        wrong = known & ~(np.isfinite(util) & (util >= 0))
        bad = np.flatnonzero(measure & wrong.any(axis=1))
        if len(bad):
            j = int(bad[0])
            lvl = int(np.flatnonzero(wrong[j])[0])
            raise ValueError(
                f"job {mapped[j].id}: level {lvl}: utilization {float(util[j, lvl])!r}"
                " is not a finite value >= 0"
            )
        pool = np.where(has_shared[:, None], shared, known)
        candidates = np.where(pool, util, -math.inf)
        level = np.asarray(candidates.argmax(axis=1), dtype=np.int64)  # ties: the lowest level
        value = np.asarray(candidates[np.arange(len(level)), level], dtype=np.float64)
        return measure, value, level

    def port_guids(self) -> list[tuple[str, tuple[int, ...], str]]:
        """(job id, port GUIDs of its CA ports, application name) of the jobs mapped in
        the last cycle: what the policy's port-groups list."""
        ports = self.fabric.ports
        out = []
        for mj in self.mapped:
            guids = (ports[key].port_guid for key in mj.ports if key in ports)
            out.append((mj.id, tuple(g for g in guids if g is not None), mj.job.name))
        return out

    def job_lids(self) -> list[tuple[str, list[int]]]:
        """(job id, LIDs of its CA ports) of the jobs mapped in the last cycle, for
        PathRecord checks."""
        ports = self.fabric.ports
        out = []
        for mj in self.mapped:
            lids = (ports[key].lid for key in mj.ports if key in ports)
            out.append((mj.id, [lid for lid in lids if lid is not None]))
        return out

    def _expected(self, mj: MappedJob) -> Class:
        """Expected class of a job, fixed when first seen: its class before a restart,
        else what its profile predicts, else its application's last class, else the
        configured default."""
        cls = self._expected_of.get(mj.id) or self.known_cls.get(mj.id)
        if cls is None:
            hit = self._profiled.get(id(mj.job))
            profile = hit[2] if hit is not None and hit[1] is mj.job else None
            if profile is not None and self.priors is not None:
                if self._characterizer is None and profile.model is not None:
                    self._characterizer = Characterizer(
                        self.fabric, matcher=self.matcher, exclude=self.exclude_hosts
                    )
                if self._characterizer is not None:
                    # the classifier's thresholds, as a config reload last set them
                    self._characterizer.thresholds = self.classifier.thresholds
                prior = self.priors.prior(mj.job, profile, mj.hosts, self._characterizer)
                self._prior_of[mj.id] = prior
                return prior.cls
            known = self.history.get(mj.job.name) if mj.job.name else None
            cls = known or self.lanes.default_class
        return cls

    def _with_profiles(self, jobs: Sequence[Job]) -> Sequence[Job]:
        """The jobs, each with its profile's pattern when it declares none.  Matched once
        per job object (a job source hands back the same objects while nothing changes),
        so the job mapper's and attributor's caches still hold."""
        if self.priors is None:
            return jobs
        seen: dict[int, tuple[Job, Job, Profile | None]] = {}
        out = []
        for job in jobs:
            hit = self._profiled.get(id(job))
            if hit is None or hit[0] is not job:
                profile = self.priors.profile(job)
                used = job if profile is None else self.priors.with_pattern(job, profile)
                hit = (job, used, profile)
            seen[id(job)] = seen[id(hit[1])] = hit
            out.append(hit[1])
        self._profiled = seen
        return out

    def _remember_ended(self, running: set[str]) -> tuple[FinishedJob, ...]:
        """Record the class of every job that ended; return those that were measured."""
        if self.previous is None:
            return ()
        finished = []
        end_s: float | None = None
        for job_id, cls in self.previous.job_cls.items():
            if job_id in running:
                continue
            if end_s is None:
                end_s = round(self.wall_clock(), 3)  # ms: as profiles keep it
            name = self._names.get(job_id, "")
            if name:
                self.history[name] = cls
            sample = self.classifier.get(job_id)
            job = self._ran.get(job_id)
            if sample is not None and job is not None:
                # the band of its measured (smoothed) intensity: the class it kept may
                # still be its prior's, held by hysteresis, and learning that would only
                # confirm the prior
                measured = class_of(sample.smoothed, self.classifier.thresholds)
                done = FinishedJob(job_id, name, job[0], job[1], measured, sample.smoothed, end_s)
                finished.append(done)
                if name:
                    self.last_finished[name] = done
        return tuple(finished)

    def _log_new(self, warnings: Sequence[str]) -> None:
        """Log mapping warnings once: the same bad job is not reported every cycle."""
        fresh = [w for w in warnings if w not in self._warned]
        if fresh:
            log_warnings(fresh)


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
    )
