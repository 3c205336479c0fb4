"""One decision cycle: a rates table and the running jobs in, a lane plan out.

The stages, in the order docs/design.md §5 draws them, each entered once a cycle::

    jobs --JobProfiles--> jobs with their profiles' patterns (classify.prior)
         --JobMapper--> ports --Attributor--> bytes/s per level (attribute)
         --Expectations--> expected class --JobUtilization--> util, intensity
         --Classifier (EWMA, hysteresis)--> class (classify)
         --plan--> job->SL, SL->VL, VLArb (plan.planner) --build_decision--> Decision

:class:`Decider` keeps what lives across cycles (the stages' per-fabric tables, each job's
smoothed intensity, the plan in force, the classes of finished jobs by application name)
and :meth:`Decider.decide` runs one cycle.  Nothing here reads the fabric or the clock: the
caller passes the rates (``ibqos.collect``) and the time, so the cycle runs the same on a
live fabric, a replayed recording or a benchmark's synthetic tables.  (Only a performance
counter is read, to time the stages: :attr:`Decider.timings`, and the wall clock once when
jobs end, to stamp them: :attr:`~ibqos.classify.prior.FinishedJob.end_s`.)

A cycle whose plan fails (:class:`~ibqos.errors.PlanError`) leaves the plan in force and
what the decider knows of the planned jobs as they were.

Units: bytes per second for rates and capacities, fractions for utilization, seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING

import pandas as pd

from ibqos.attribute.attribution import Attributor
from ibqos.attribute.jobmap import JobMapper, MappedJob, log_warnings
from ibqos.attribute.sharing import SharingTables
from ibqos.classify.classifier import Capacities, Classifier, JobUtilization
from ibqos.classify.expected import Expectations, Running
from ibqos.classify.prior import FinishedJob, JobProfiles, Priors, make_priors
from ibqos.config.classes import Class, Thresholds
from ibqos.config.lanes import LaneConfig
from ibqos.fabric.hostnames import HostMatcher
from ibqos.fabric.lfts import Tables
from ibqos.fabric.model import Fabric
from ibqos.jobs.model import Job
from ibqos.plan.planner import JobState, Plan, plan
from ibqos.plan.report import CycleOutputs, Decision, build_decision
from ibqos.plan.setups import Setup

if TYPE_CHECKING:
    from ibqos.config.models import Config

# the cycle's result, where its callers have always found it
__all__ = [
    "Decider",
]

log = logging.getLogger(__name__)


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
        known_sl: SLs of jobs that ran before a restart (the saved state): such a job,
            still running, keeps its SL instead of being replanned.
        setup: the setup the tuner wants programmed instead of the favour-light law
            (:mod:`ibqos.plan.tuner`); None: the law.
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
        self.profiles = JobProfiles()
        self.classifier = Classifier(thresholds)
        self.expectations = Expectations(fabric, self.matcher, self.exclude_hosts)
        self.previous: Plan | None = None
        self._running = Running()  # what the cycle that made the plan in force knew
        self._warned: frozenset[str] = frozenset()
        self.timings: dict[str, float] = {}
        self.known_sl: dict[str, int] = {}
        self.setup: Setup | None = None
        self.mapped: tuple[MappedJob, ...] = ()
        self.lfts: Tables | None = None
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

    @property
    def history(self) -> dict[str, Class]:
        """Application name -> class of its last finished job
        (:attr:`~ibqos.classify.expected.Expectations.history`)."""
        return self.expectations.history

    @property
    def last_finished(self) -> dict[str, FinishedJob]:
        """Application name -> its last finished job that was measured
        (:attr:`~ibqos.classify.expected.Expectations.last_finished`)."""
        return self.expectations.last_finished

    def restore(
        self,
        job_sl: Mapping[str, int],
        job_cls: Mapping[str, Class],
        history: Mapping[str, Class],
        finished: Mapping[str, FinishedJob],
        in_force: Plan | None = None,
    ) -> None:
        """Continue from a saved state (the agent's, before a restart): jobs still running
        keep their SLs and start in their classes, and what ended jobs left is kept.

        With *in_force* (the plan whose files OpenSM took, :func:`ibqos.plan.saved.
        plan_from_doc`), planning goes on from it: its lanes stay where they are, so a
        restart alone costs OpenSM no reload."""
        if in_force is not None:
            self.previous = in_force
        self.known_sl = dict(job_sl)
        self.expectations.known_cls = dict(job_cls)
        self.expectations.history = dict(history)
        self.expectations.last_finished = dict(finished)

    def set_fabric(self, fabric: Fabric) -> None:
        """Use a new topology (after a fabric change): rebuild the per-fabric tables."""
        self.fabric = fabric
        self.attributor = Attributor(fabric, self.lfts)
        self.capacities = Capacities.from_fabric(fabric)
        self.utilization = JobUtilization(self.capacities)
        self.mapper = JobMapper(fabric, self.matcher)
        self.sharing_tables = SharingTables(fabric, self.matcher, self.exclude_hosts)
        self.expectations.set_fabric(fabric)

    def set_routes(self, lfts: Tables | None) -> None:
        """Use OpenSM's forwarding tables (switch LID -> destination LID -> port) for
        attribution, or none (the subtree split); kept across fabric changes until set
        again."""
        self.lfts = lfts
        self.attributor = Attributor(self.fabric, lfts)

    def decide(
        self,
        rates: pd.DataFrame,
        jobs: Sequence[Job],
        now_s: float,
        *,
        fresh: bool = True,
        sl_rates: pd.DataFrame | None = None,
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
            sl_rates: per-SL rates of the ports that have per-SL data counters
                (:meth:`Attributor.attribute`), or None.

        Raises:
            PlanError: the lane configuration does not fit (the daemon keeps its plan).
            ValueError: a rate is negative (a utilization must be >= 0).
        """
        clock = time.perf_counter
        t0 = clock()
        jobs = self.profiles.lookup(jobs, self.priors)
        mapped, warnings = self.mapper.map(jobs)
        new_warnings = [w for w in warnings if w not in self._warned]
        if new_warnings:  # the same bad job is not reported every cycle
            log_warnings(new_warnings)
        t1 = clock()
        # SLs as the plan in force has them (a job new to it has none yet)
        in_force_sl = {**self.known_sl, **(self.previous.job_sl if self.previous else {})}
        attribution = self.attributor.attribute(rates, mapped, sl_rates, in_force_sl)
        t2 = clock()
        previous = self.previous
        ids = [mj.id for mj in mapped]
        finished = self.expectations.ended(
            previous.job_cls if previous is not None else {},
            set(ids),
            self._running,
            self.classifier,
            self.wall_clock,
        )
        expected = self.expectations.expected(
            mapped,
            self._running,
            self.profiles.matched,
            self.priors,
            self.classifier.thresholds,
            self.lanes.default_class,
        )
        planned = None if fresh else (previous.job_sl if previous is not None else {})
        figures = self.utilization.utilizations(mapped, attribution, planned)
        samples = self.classifier.classify(ids, figures, now_s, expected.classes)
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
            for job_id, sample, exp in zip(ids, samples, expected.classes, strict=True)
        ]
        t3 = clock()
        result = plan(states, self.lanes, previous, now_s, self.setup)
        t4 = clock()
        # the plan holds: keep what this cycle knew of its jobs
        self.previous = result.plan
        self.mapped = tuple(mapped)
        self._running = expected.running
        # the saved state served its purpose once the plan holds these jobs
        self.known_sl = {j: sl for j, sl in self.known_sl.items() if j not in result.plan.job_sl}
        for w in result.warnings:
            if w not in self._warned:
                log.warning("%s", w)
        self._warned = frozenset(warnings) | frozenset(result.warnings)
        decision = build_decision(
            CycleOutputs(
                now_s=now_s,
                mapped=mapped,
                attribution=attribution,
                figures=figures,
                samples=samples,
                expected=expected.classes,
                result=result,
                priors=expected.running.priors,
                warnings=(*warnings, *result.warnings),
                finished=finished,
                sharing=self.sharing_tables,
            )
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
        PathRecord checks (a path from the first LID to the last must carry the job's SL).

        A port that several jobs share is in each job's port-group, and OpenSM's first
        matching rule decides its paths to the other ports they share (osm_qos_policy.c
        walks the rules in file order and stops at the first match): the SA cannot serve
        two jobs two SLs on one path.  So a job's own ports come first: a path from a port
        only its port-group has can match only its rule.  A job on shared hosts only is
        left without LIDs (no PathRecord of it is sure to carry its SL)."""
        ports = self.fabric.ports
        out = []
        for mj in self.mapped:
            keys = list(mj.ports)
            if mj.share:
                own = [k for k, part in zip(mj.ports, mj.share, strict=True) if part >= 1.0]
                rest = [k for k, part in zip(mj.ports, mj.share, strict=True) if part < 1.0]
                keys = own + rest if own else []
            lids = (ports[key].lid for key in keys if key in ports)
            out.append((mj.id, [lid for lid in lids if lid is not None]))
        return out
