"""The agent's own metrics: what it counted, how long its cycles and sweeps take.

The daemon counts in a plain :class:`Counters` record (tests read it directly); the
:class:`HealthCollector` turns it into counter families at scrape time, so there is one
place that counts and no second set of instruments to keep in step.  Durations are real
histograms, observed as they happen.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ibqos import __version__
from ibqos.metrics.families import SnapshotCollector
from ibqos.metrics.slserver import SlServerHealth, sl_server_families
from ibqos.metrics.tuning import TuningCollector

__all__ = ["AgentMetrics", "Counters", "HealthCollector"]

#: seconds; a cycle on the lab takes ~0.05 s, a 50k-port sweep ~1 s, a reload ~0.1-30 s
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class Counters:
    """What the daemon counts since it started.

    Attributes:
        cycles: decision cycles run (sweeps and job events).
        failures: cycles that failed.
        job_events: job starts and ends acted on between sweeps.
        plan_changes: plans that changed in substance.
        applies: applies that changed OpenSM's files.
        reloads: times OpenSM was signalled.
        rollbacks: applies rolled back.
        verify_failures: applies OpenSM did not take as written.
        config_errors: config reloads rejected.
        config_error_now: the last config reload was rejected.
        last_success_s: UNIX time of the last good cycle, seconds; None before one.
        last_error: the last failure's message ("" after a good cycle).
        sweep_answered: ports that answered in the last sweep.
        sweep_failed: ports that did not.
        started_s: UNIX time the daemon started, seconds.
        plan_changed_s: UNIX time the plan last changed in substance; None: not yet.
        file_warnings: the checker's warnings about the files last rendered for OpenSM
            (lines OpenSM accepts but likely reads otherwise than meant).
        state_write_errors: writes to the state directory that failed (``state.json``,
            observe mode's proposal); the state on disk is the last one written.
        render_error_now: the files as they should be fail the checker (an admin's line
            OpenSM would reject, ibqos's markers edited by hand): nothing is written.
        invalid_samples: port samples dropped because their rate was above the link's
            capacity (counters reset and rewritten).
        sweep_coverage: share of the last sweep's ports (0..1) answered with a usable sample;
            None before the first sweep.
        sweep_per_sl_ports: ports whose per-SL data counters the last sweep read
            (``collect.per_sl``; 0 where no switch has them).
        reloads_deferred: applies not started because the reload budget was spent.
        write_errors: applies that failed because OpenSM's files (or their backups)
            could not be written.
        reload_tokens: reloads the budget holds now; None: no budget (not enforcing).
        opensm_up: OpenSM ran when last looked at; None: cannot tell (a reload command,
            not looked at yet).
        opensm_rejected: ibqos holds: OpenSM rejects its own files (the admin's part).
        outside_writes: rewrites of OpenSM's files by another writer seen (one per cycle
            that found one).
        outside_writer: ibqos holds: another writer rewrites OpenSM's files.
        opensm_log_missing: OpenSM's log could not be read at the last apply.
        log_rotations: rotations of OpenSM's log seen while following it.
        sm_state: SMInfo's SMState of the agent's OpenSM (0 not active, 1 discovering,
            2 standby, 3 master; :mod:`ibqos.opensm.smstate`); None: not read or not known.
        sm_takeovers: times the agent took over because its OpenSM became the master
            after it had stood by (:mod:`ibqos.agent.standby`).
        sl_rechecks: PathRecords asked to re-check the SLs in force (``ibqos.opensm.served``).
        sl_withdrawals: SLs taken back from jobs because the SA did not serve them.
        sl_unserved_jobs: jobs whose planned SL the SA does not serve now (withdrawn).
    """

    cycles: int = 0
    failures: int = 0
    job_events: int = 0
    plan_changes: int = 0
    applies: int = 0
    reloads: int = 0
    rollbacks: int = 0
    verify_failures: int = 0
    config_errors: int = 0
    config_error_now: bool = False
    last_success_s: float | None = None
    last_error: str = ""
    sweep_answered: int = 0
    sweep_failed: int = 0
    started_s: float = field(default_factory=time.time)
    plan_changed_s: float | None = None
    # the agent: OpenSM's files, and its own state
    file_warnings: int = 0
    state_write_errors: int = 0
    render_error_now: bool = False
    # collect: implausible samples and the share of ports a sweep reached
    invalid_samples: int = 0
    sweep_coverage: float | None = None
    sweep_per_sl_ports: int = 0
    # applying to OpenSM: the reload budget, write errors, OpenSM's state
    reloads_deferred: int = 0
    write_errors: int = 0
    reload_tokens: float | None = None
    opensm_up: bool | None = None
    # the SM state of the agent's OpenSM: a standby's agent stands by
    sm_state: int | None = None
    sm_takeovers: int = 0
    opensm_rejected: bool = False
    opensm_log_missing: bool = False
    log_rotations: int = 0
    outside_writes: int = 0
    outside_writer: bool = False
    # what is in force, re-checked through the SA
    sl_rechecks: int = 0
    sl_withdrawals: int = 0
    sl_unserved_jobs: int = 0


#: (attribute, metric name without _total, help)
_COUNTED = (
    ("cycles", "ibqos_cycles", "Decision cycles run (sweeps and job events)."),
    ("failures", "ibqos_cycle_failures", "Cycles that failed; the daemon went on."),
    ("job_events", "ibqos_job_events", "Job starts and ends acted on between sweeps."),
    ("plan_changes", "ibqos_plan_changes", "Plans that changed in substance (SLs, SL2VL, VLArb)."),
    ("applies", "ibqos_opensm_applies", "Applies that changed OpenSM's files."),
    ("reloads", "ibqos_opensm_reloads", "Times OpenSM was signalled to re-read its files."),
    ("rollbacks", "ibqos_rollbacks", "Applies rolled back to the previous files."),
    (
        "verify_failures",
        "ibqos_verification_failures",
        "Applies OpenSM did not take as written (log errors or SA read-back).",
    ),
    ("config_errors", "ibqos_config_load_errors", "Config reloads rejected (the old one runs)."),
    # collect
    (
        "invalid_samples",
        "ibqos_invalid_samples",
        "Port samples dropped because their rate was above the link's capacity plus"
        " collect.rate_margin (counters reset and rewritten).",
    ),
    # applying to OpenSM
    (
        "reloads_deferred",
        "ibqos_opensm_reloads_deferred",
        "Applies not started because the reload budget (opensm.reload_budget) was spent.",
    ),
    (
        "write_errors",
        "ibqos_opensm_write_errors",
        "Applies that failed because OpenSM's files or their backups could not be written.",
    ),
    (
        "log_rotations",
        "ibqos_opensm_log_rotations",
        "Rotations of OpenSM's log seen (renamed, or truncated in place); it is followed"
        " across them.",
    ),
    (
        "outside_writes",
        "ibqos_opensm_outside_writes",
        "Rewrites of OpenSM's files by another writer (ibqos's lines changed or gone) seen by"
        " an apply; ibqos holds instead of writing them back.",
    ),
    (
        "sm_takeovers",
        "ibqos_opensm_takeovers",
        "Times the agent's OpenSM became the master after the agent had stood by beside it"
        " (the agent then took over).",
    ),
    (
        "state_write_errors",
        "ibqos_state_write_errors",
        "Writes to the state directory that failed (state.json, observe mode's proposal).",
    ),
    # what is in force, re-checked through the SA
    (
        "sl_rechecks",
        "ibqos_sl_rechecks",
        "PathRecords asked to re-check that the SA serves the SLs job-sl hands out.",
    ),
    (
        "sl_withdrawals",
        "ibqos_sl_withdrawals",
        "SLs taken back from jobs because the SA did not serve them (job-sl answers PENDING).",
    ),
)


class HealthCollector(Collector):
    """Serves :class:`Counters` and the agent's info gauges at scrape time.

    Args:
        counters: the daemon's counters (read, never written, here).
        fabric: the fabric's name (``metrics.fabric``).
        routing_engine: OpenSM's routing engine, as configured.
        dry_run: the agent only shows what it would write (observe mode or --dry-run);
            the agent updates it when a reload switches the mode.

    Attributes:
        sl_answers: job SL questions answered, by result (``ibqos.agent.handoff.RESULTS``); the
            agent points it at its board's counts.
        job_source_up: whether the job source answers (Slurm's squeue; a job file whose
            current version is valid; a job directory that can be listed); None: not known
            yet, and no metric.
        job_source_rejected: the jobs of a job directory left out as invalid; None: not a
            job file source, or not read yet, and no metric.
        routes: the forwarding tables in use (``source``, ``switches``, ``read_s``,
            ``problem``: :meth:`ibqos.collect.routes.RouteSource.status`); None: no metric.
        sl_server: the job-SL server's health (:mod:`ibqos.metrics.slserver`); None: not
            meant to serve, and no metric.
    """

    def __init__(self, counters: Counters, fabric: str, routing_engine: str, dry_run: bool):
        self.counters = counters
        self.fabric = fabric
        self.routing_engine = routing_engine
        self.dry_run = dry_run
        self.sl_answers: Mapping[str, int] = {}
        self.job_source_up: Callable[[], bool | None] = lambda: None
        self.job_source_rejected: Callable[[], int | None] = lambda: None
        self.routes: Callable[[], Mapping[str, Any] | None] = lambda: None
        self.sl_server: Callable[[], SlServerHealth | None] = lambda: None

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        c = self.counters
        for attr, name, doc in _COUNTED:
            yield CounterMetricFamily(name, doc, value=getattr(c, attr))
        answers = CounterMetricFamily(
            "ibqos_job_sl_requests",
            "Questions for a job's SL (ibqos job-sl, TaskProlog) by answer; every result but"
            " ok is a miss: the job's tasks start on the default SL.",
            labels=["result"],
        )
        for result, count in sorted(dict(self.sl_answers).items()):
            answers.add_metric([result], count)
        yield answers
        yield from sl_server_families(self.sl_server())
        up = self.job_source_up()
        if up is not None:
            yield GaugeMetricFamily(
                "ibqos_job_source_up",
                "1 while the job source answers (Slurm: squeue; a job file: valid), 0 while"
                " the last known jobs are held (slurm.grace_s; a job file that turned invalid).",
                value=int(up),
            )
        rejected = self.job_source_rejected()
        if rejected is not None:
            yield GaugeMetricFamily(
                "ibqos_job_source_rejected",
                "Jobs of the job directory left out as invalid (a bad host list, a duplicate"
                " id, a file that never parsed); the others are taken.",
                value=rejected,
            )
        yield from _route_gauges(self.routes())
        build = GaugeMetricFamily(
            "ibqos_build_info", "The running ibqos (always 1).", labels=["version", "python"]
        )
        build.add_metric([__version__, platform.python_version()], 1)
        yield build
        fabric = GaugeMetricFamily(
            "ibqos_fabric_info",
            "The fabric this agent runs on (always 1).",
            labels=["fabric", "routing_engine"],
        )
        fabric.add_metric([self.fabric, self.routing_engine], 1)
        yield fabric
        ports = GaugeMetricFamily(
            "ibqos_sweep_ports", "Ports in the last counter sweep, by result.", labels=["result"]
        )
        ports.add_metric(["answered"], c.sweep_answered)
        ports.add_metric(["failed"], c.sweep_failed)
        yield ports
        if c.sweep_coverage is not None:
            yield GaugeMetricFamily(
                "ibqos_sweep_coverage_ratio",
                "Share of the last sweep's ports (0..1) answered with a usable sample; below"
                " collect.min_coverage the plan in force is kept.",
                value=c.sweep_coverage,
            )
        yield GaugeMetricFamily(
            "ibqos_sweep_per_sl_ports",
            "Ports whose per-SL data counters (PortXmitDataSL/PortRcvDataSL) the last sweep"
            " read; 0 when no switch has them or collect.per_sl is off.",
            value=c.sweep_per_sl_ports,
        )
        yield GaugeMetricFamily(
            "ibqos_config_load_error",
            "1 while the last config reload was rejected and the previous config runs.",
            value=int(c.config_error_now),
        )
        yield GaugeMetricFamily(
            "ibqos_opensm_file_warnings",
            "Checker warnings about the files last rendered for OpenSM (lines it accepts"
            " but likely reads otherwise than meant; each is logged once).",
            value=c.file_warnings,
        )
        yield GaugeMetricFamily(
            "ibqos_opensm_files_refused",
            "1 while OpenSM's files as they should be fail the checker (an admin's line OpenSM"
            " would reject, ibqos's markers edited): nothing is written until it is fixed.",
            value=int(c.render_error_now),
        )
        yield from _apply_gauges(c)
        yield GaugeMetricFamily(
            "ibqos_dry_run",
            "1 when the agent only shows what it would write (mode: observe, or --dry-run).",
            value=self.dry_run,
        )
        yield GaugeMetricFamily(
            "ibqos_start_time_seconds", "UNIX time the agent started.", value=c.started_s
        )
        if c.plan_changed_s is not None:
            yield GaugeMetricFamily(
                "ibqos_last_plan_change_timestamp_seconds",
                "UNIX time the plan last changed in substance (SLs, SL2VL, VLArb).",
                value=c.plan_changed_s,
            )
        if c.last_success_s is not None:
            yield GaugeMetricFamily(
                "ibqos_last_success_timestamp_seconds",
                "UNIX time of the last cycle that succeeded.",
                value=c.last_success_s,
            )


def _route_gauges(doc: Mapping[str, Any] | None) -> Iterator[Metric]:
    """Where the forwarding tables come from, how many switches they hold, their age."""
    if doc is None:
        return
    info = GaugeMetricFamily(
        "ibqos_routes_info",
        "OpenSM's forwarding tables attribution and tuning use (always 1), by source:"
        " dump, ibroute, or none.",
        labels=["source"],
    )
    info.add_metric([str(doc.get("source", "none"))], 1)
    yield info
    yield GaugeMetricFamily(
        "ibqos_routes_switches",
        "Switches in the forwarding tables in use (0: none).",
        value=int(doc.get("switches", 0)),
    )
    if doc.get("read_s"):
        yield GaugeMetricFamily(
            "ibqos_routes_age_seconds",
            "Seconds since the forwarding tables in use were last read (or found unchanged).",
            value=max(0.0, time.time() - float(doc["read_s"])),
        )
    yield GaugeMetricFamily(
        "ibqos_routes_error",
        "1 while newer forwarding tables are refused (a dump that does not parse or misses"
        " switches, ibroute failing); the last good ones stay in use.",
        value=int(bool(doc.get("problem"))),
    )


def _apply_gauges(c: Counters) -> Iterator[Metric]:
    """The state of the apply path: OpenSM up, rejecting its files, its log, the budget."""
    if c.opensm_up is not None:
        yield GaugeMetricFamily(
            "ibqos_opensm_up",
            "1 while OpenSM runs (its pid file's process, its unit active), 0 when it does"
            " not; absent when ibqos cannot tell (a reload command).",
            value=int(c.opensm_up),
        )
    if c.sm_state is not None:
        yield GaugeMetricFamily(
            "ibqos_opensm_sm_state",
            "SM state of the agent's OpenSM (SMInfo): 0 not active, 1 discovering, 2 standby,"
            " 3 master; below 3 the agent stands by (writes nothing, hands out no SL).",
            value=c.sm_state,
        )
    yield GaugeMetricFamily(
        "ibqos_opensm_rejected",
        "1 while ibqos holds because OpenSM rejects its own files (the admin's part):"
        " nothing is written until they change.",
        value=int(c.opensm_rejected),
    )
    yield GaugeMetricFamily(
        "ibqos_opensm_outside_writer",
        "1 while ibqos holds because another writer rewrites OpenSM's files (config"
        " management whose template lacks ibqos's blocks): nothing is written until the files"
        " carry the blocks again or stand unchanged for opensm.outside_quiet_s.",
        value=int(c.outside_writer),
    )
    yield GaugeMetricFamily(
        "ibqos_opensm_log_missing",
        "1 when OpenSM's log could not be read at the last apply (no sweep line seen).",
        value=int(c.opensm_log_missing),
    )
    yield GaugeMetricFamily(
        "ibqos_sl_unserved_jobs",
        "Jobs whose planned SL the SA does not serve now: withdrawn, job-sl answers PENDING"
        " for them until the SA serves it.",
        value=c.sl_unserved_jobs,
    )
    if c.reload_tokens is not None:
        yield GaugeMetricFamily(
            "ibqos_opensm_reload_tokens",
            "Reloads the budget (opensm.reload_budget) holds now; an apply needs 2.",
            value=c.reload_tokens,
        )


class AgentMetrics:
    """Every metric of one agent.

    Two registries hold them: :attr:`own` has the agent's counters, info and histograms
    (and prometheus-client's ``process_*`` and ``python_info``);
    :attr:`registry` has those and the snapshot's families, for anything that reads a
    registry (tests, OpenMetrics).  The endpoint serves :attr:`own` through
    prometheus-client and the snapshot from its cached text (``ibqos.metrics.families``).

    Args:
        counters: the daemon's counters.
        fabric, routing_engine, dry_run: see :class:`HealthCollector`.
        registry: the full registry to fill (tests pass their own); None: a new one.
    """

    def __init__(
        self,
        counters: Counters,
        *,
        fabric: str,
        routing_engine: str,
        dry_run: bool,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.own = CollectorRegistry()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.health = HealthCollector(counters, fabric, routing_engine, dry_run)
        self.snapshot = SnapshotCollector()
        self.tuning = TuningCollector()
        self.cycle_seconds = Histogram(
            "ibqos_cycle_duration_seconds",
            "Seconds one decision cycle took: sweep, decide, render, apply.",
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        self.sweep_seconds = Histogram(
            "ibqos_sweep_duration_seconds",
            "Seconds one counter sweep of the fabric took.",
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        # the process's CPU, memory, file descriptors and start time (process_*), and the
        # Python it runs on (python_info), as every Prometheus client exports them
        process = ProcessCollector(registry=None)
        platform_info = PlatformCollector(registry=None)
        for collector in (
            self.health,
            self.tuning,
            self.cycle_seconds,
            self.sweep_seconds,
            process,
            platform_info,
        ):
            self.own.register(collector)
            self.registry.register(collector)
        self.registry.register(self.snapshot)
