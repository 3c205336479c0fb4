"""One decision cycle: a rates table and the running jobs in, a lane plan out.

The stages, in the order DESIGN.md section 3 draws them::

    jobs --map_jobs--> ports --Attributor--> bytes/s per level --utilization--> util
         --Classifier (EWMA, hysteresis)--> class --plan--> job->SL, SL->VL, VLArb

:class:`Decider` keeps what lives across cycles (the per-fabric tables, each job's smoothed
intensity, the plan in force, the classes of finished jobs by application name) and
:meth:`Decider.decide` runs one cycle.  Nothing here reads the fabric or the clock: the
caller passes the rates (``ibqos.collect``) and the time, so the cycle runs the same on a
live fabric, a replayed recording or a benchmark's synthetic tables.  (Only a performance
counter is read, to time the stages: :attr:`Decider.timings`.)

Units: bytes per second for rates and capacities, fractions for utilization, seconds.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from ibqos.attribution import Attributor
from ibqos.classify import Capacities, Class, Classifier, JobClass, Thresholds, utilization
from ibqos.fabric import Fabric
from ibqos.hostnames import HostMatcher
from ibqos.jobmap import MappedJob, host_ports, log_warnings, map_jobs
from ibqos.jobs import Job
from ibqos.planner import JobState, LaneConfig, Plan, PlanResult, plan

log = logging.getLogger("ibqos.plan")


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
    """

    now_s: float
    jobs: tuple[JobReport, ...]
    result: PlanResult
    unattributed: Mapping[int, float]
    warnings: tuple[str, ...]

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
    ) -> None:
        self.lanes = lanes
        self.matcher = matcher or HostMatcher()
        self.classifier = Classifier(thresholds)
        self.previous: Plan | None = None
        #: application name -> class of its last finished job (the expected class of the
        #: next job of that name; profiles will refine it)
        self.history: dict[str, Class] = {}
        self._names: dict[str, str] = {}  # running job id -> application name
        self._expected_of: dict[str, Class] = {}  # running job id -> expected class
        self._warned: frozenset[str] = frozenset()
        self.timings: dict[str, float] = {}
        self.set_fabric(fabric)

    def set_fabric(self, fabric: Fabric) -> None:
        """Use a new topology (after a fabric change): rebuild the per-fabric tables."""
        self.fabric = fabric
        self.attributor = Attributor(fabric)
        self.capacities = Capacities.from_fabric(fabric)
        self.index = host_ports(fabric, self.matcher)

    def decide(self, rates: pd.DataFrame, jobs: Sequence[Job], now_s: float) -> Decision:
        """Run one cycle.

        Args:
            rates: a rates table (``ibqos.collect.rates``; ``node_guid``, ``port`` and
                ``xmit_bytes_per_s`` are read, NaN where a port did not answer).
            jobs: the running jobs.
            now_s: the cycle's time, seconds (any clock, the same every call).

        Raises:
            PlanError: the lane configuration does not fit (the daemon keeps its plan).
        """
        clock = time.perf_counter
        t0 = clock()
        mapped, warnings = map_jobs(jobs, self.fabric, index=self.index, log=False)
        self._log_new(warnings)
        t1 = clock()
        attribution = self.attributor.attribute(rates, mapped)
        t2 = clock()
        self._remember_ended({mj.id for mj in mapped})
        states: list[JobState] = []
        figures: dict[str, tuple[dict[int, LevelFigures], JobClass | None, Class]] = {}
        for mj in mapped:
            traffic = attribution.jobs[mj.id]
            avail = self.capacities.available(mj.ports)
            levels = _levels(traffic.bytes_per_s, avail)
            known = {lvl: f.bytes_per_s for lvl, f in levels.items() if f.util is not None}
            expected = self._expected(mj)
            sample: JobClass | None = None
            if any(lvl >= 1 for lvl in known) or (known and self.fabric.height <= 1):
                sample = self.classifier.update(
                    mj.id, utilization(known, avail), now_s, prior=expected
                )
            else:
                sample = self.classifier.get(mj.id)  # nothing measured now: keep the last
            figures[mj.id] = (levels, sample, expected)
            states.append(
                JobState(
                    mj.id,
                    intensity=None if sample is None else sample.smoothed,
                    cls=None if sample is None else sample.cls,
                    # read only when the job is new: what is measured beats a guess
                    expected=expected if sample is None else sample.cls,
                    since_s=None if sample is None else sample.since_s,
                )
            )
        self.classifier.prune(figures)
        t3 = clock()
        result = plan(states, self.lanes, self.previous, now_s)
        t4 = clock()
        self.previous = result.plan
        self._names = {mj.id: mj.job.name for mj in mapped}
        self._expected_of = {job_id: f[2] for job_id, f in figures.items()}
        new_warnings = [w for w in result.warnings if w not in self._warned]
        for w in new_warnings:
            log.warning("%s", w)
        self._warned = frozenset(warnings) | frozenset(result.warnings)
        reports = tuple(
            _report(mj, attribution.jobs[mj.id].measured_share, *figures[mj.id], result.plan)
            for mj in mapped
        )
        decision = Decision(
            now_s, reports, result, attribution.unattributed, (*warnings, *result.warnings)
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

    def _expected(self, mj: MappedJob) -> Class:
        """Expected class of a job, fixed when first seen: its application's last class,
        else the configured default."""
        cls = self._expected_of.get(mj.id)
        if cls is None:
            known = self.history.get(mj.job.name) if mj.job.name else None
            cls = known or self.lanes.default_class
        return cls

    def _remember_ended(self, running: set[str]) -> None:
        if self.previous is None:
            return
        for job_id, cls in self.previous.job_cls.items():
            name = self._names.get(job_id, "")
            if job_id not in running and name:
                self.history[name] = cls

    def _log_new(self, warnings: Sequence[str]) -> None:
        """Log mapping warnings once: the same bad job is not reported every cycle."""
        fresh = [w for w in warnings if w not in self._warned]
        if fresh:
            log_warnings(fresh)


def _levels(rate: Mapping[int, float], avail: Mapping[int, float]) -> dict[int, LevelFigures]:
    out: dict[int, LevelFigures] = {}
    for level in sorted(avail):
        r = rate.get(level, math.nan)
        a = avail[level]
        util = r / a if a > 0 and math.isfinite(r) else None
        out[level] = LevelFigures(r, a, util)
    return out


def _report(
    mj: MappedJob,
    measured_share: float,
    levels: dict[int, LevelFigures],
    sample: JobClass | None,
    expected: Class,
    current: Plan,
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
    )
