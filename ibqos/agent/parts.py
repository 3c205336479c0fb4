"""The agent's parts that the config builds, its metrics, and the SL service.

:class:`AgentParts` holds the config in force and what is built from it: the decision
cycle's :class:`~ibqos.agent.pipeline.Pipeline` (fabric, lanes, decider, route source,
job source, collector), the apply path, observe mode's :class:`~ibqos.opensm.observe.
Observer`, tuning's driver, and the gate that makes the enforcing cycles stand by beside
a standby OpenSM (:mod:`ibqos.agent.standby`).  A SIGHUP hands it a new config
(:meth:`AgentParts.take`, from :mod:`ibqos.agent.reload`), and it rebuilds what depends on
the sections that changed.  :class:`MetricsService` holds what the agent counts, its
metrics and their endpoint; :class:`SlService` the SL board the cycles publish to and the
server that answers from it while OpenSM is enforced.  :class:`ibqos.agent.daemon.Agent`
puts them together with the cycles' runner (:mod:`ibqos.agent.cycle`) and the SIGHUP
re-read (:mod:`ibqos.agent.reload`).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from ibqos.agent.handoff import SlBoard, SlServer
from ibqos.agent.pipeline import Pipeline
from ibqos.agent.predictor import make_predictor, make_refiner
from ibqos.agent.slserve import Limits
from ibqos.agent.standby import SmGate
from ibqos.attribute.jobmap import FileJobSource
from ibqos.classify.prior import Priors
from ibqos.collect.discover import fabric_from_config
from ibqos.config.lanes import LaneConfig
from ibqos.config.models import AgentConfig, Config, MetricsConfig
from ibqos.errors import IbqosError
from ibqos.jobs.model import Job
from ibqos.metrics import AgentMetrics, Counters
from ibqos.metrics.server import Exporter, metrics_app
from ibqos.metrics.slserver import SlServerHealth
from ibqos.opensm.apply import Applier, make_signaller
from ibqos.opensm.budget import ReloadBudget
from ibqos.opensm.hold import HOLD_FILE, WRITTEN_FILE
from ibqos.opensm.observe import Observer
from ibqos.opensm.signallers import Probed
from ibqos.opensm.smstate import SmStateReader
from ibqos.plan.tuning import TuningDriver
from ibqos.slurm.source import SlurmJobSource

log = logging.getLogger(__name__)


class AgentParts:
    """The config in force and the parts built from it.

    Args:
        config: the configuration.
        dry_run: ``--dry-run``: OpenSM is left alone whatever the mode.
        running: the jobs the last cycle saw (tuning predicts for them).
        heartbeat: called while an apply waits for OpenSM (the systemd watchdog ping).
        should_stop: True once a stop is asked for: an apply's waits end soon after.

    Attributes:
        config: the config in force.
        dry_run: as given.
        pipeline: what a decision cycle runs on.
        applier: the apply path of the ``opensm`` section (rebuilt by every SIGHUP).
        observer: where observe mode keeps the files it would write.
        tuning: tuning's driver (rebuilt when its terms change).
        sm_gate: reads the SM state of OpenSM for the enforcing cycles, which stand by
            beside a standby (:mod:`ibqos.agent.standby`); None until :meth:`watch_sm`,
            and in a dry run.
    """

    def __init__(
        self,
        config: Config,
        *,
        dry_run: bool,
        running: Callable[[], Sequence[Job]],
        heartbeat: Callable[[], None],
        should_stop: Callable[[], bool],
    ) -> None:
        self.config = config
        self.dry_run = dry_run
        self._running = running
        self._heartbeat = heartbeat
        self._should_stop = should_stop
        refresh = config.fabric.refresh_s
        self.pipeline = Pipeline.build(
            config,
            # the fabric section in force when the re-read is due (SIGHUP may change it)
            discover=(lambda: fabric_from_config(self.config)) if refresh > 0 else None,
            logger=log,
        )
        self.applier = self._applier(config)
        self.observer = Observer(config.agent.state_dir)
        self.tuning = self._tuning(config)
        self.sm_gate: SmGate | None = None

    @property
    def observing(self) -> bool:
        """Whether OpenSM is left alone: ``--dry-run``, or ``mode: observe``."""
        return self.dry_run or self.config.mode == "observe"

    def mode_name(self) -> str:
        """The mode as logs and systemd's status line name it."""
        return "dry run" if self.dry_run else self.config.mode

    def lanes_for(self, config: Config) -> LaneConfig:
        """*config*'s lanes on the fabric in use (:meth:`Pipeline.lanes_for`)."""
        return Pipeline.lanes_for(config, self.pipeline.fabric, logger=log)

    def take(self, config: Config, lanes: LaneConfig, priors: Priors | None) -> None:
        """Run on a new *config* from now on (SIGHUP), with its *lanes* and *priors*
        (resolved and read by the caller, which refuses a config whose lanes or profiles
        are bad before anything changes).

        Every ``opensm`` key (log, sweep_timeout_s, how to signal) takes effect at the next
        apply: the applier holds nothing but them, so it is rebuilt; conf and policy_file
        follow because each cycle renders for :attr:`config`.
        """
        old = self.config
        self.config = config
        self.pipeline.reconfigure(old, config, lanes, priors)
        self.applier = self._applier(config)
        if self.sm_gate is not None and _sm_terms(config) != _sm_terms(old):
            self.sm_gate.reader = self._sm_reader(config)  # standing by or not, it goes on
        if (config.tuning, config.mode, lanes.weight_ratio) != (
            old.tuning,
            old.mode,
            self.tuning.ratio,
        ):
            self.tuning = self._tuning(config)  # a new round, from the law, in the new terms

    def watch_sm(self, counters: Counters) -> None:
        """Read the SM state of OpenSM from now on (not in a dry run, which enforces
        nothing); *counters* get the state and the takeovers."""
        if not self.dry_run:
            self.sm_gate = SmGate(self._sm_reader(self.config), counters)

    def _sm_reader(self, config: Config) -> SmStateReader:
        """The SM state of *config*'s OpenSM: SMInfo on the port ibqos sends its MADs
        from (``collect.ca``/``collect.port``), else OpenSM's log."""
        osm = config.opensm
        return SmStateReader(
            osm.log, osm.conf, ca=config.collect.ca, port=config.collect.port, alive=self._alive
        )

    def _alive(self) -> bool | None:
        """Whether OpenSM runs, as the apply path's signaller tells (None: cannot tell)."""
        signaller = self.applier.signaller
        return signaller.alive().up if isinstance(signaller, Probed) else None

    def source_up(self) -> bool | None:
        """Whether the job source answers (Slurm: squeue; a job file: its current version
        is valid); None before it was read."""
        source = self.pipeline.source
        if isinstance(source, (SlurmJobSource, FileJobSource)):
            return source.up
        return None

    def source_rejected(self) -> int | None:
        """The jobs a job file source left out as invalid (a directory's); None: another
        source, or not read yet."""
        source = self.pipeline.source
        if isinstance(source, FileJobSource) and source.up is not None:
            return source.rejected
        return None

    def close(self) -> None:
        """Release the collector's MAD device and stop the route source's reads."""
        self.pipeline.close()

    def _applier(self, config: Config) -> Applier:
        """The apply path for *config*'s ``opensm`` section (built anew on SIGHUP: the
        reload budget carries over, the hold is re-read from the state directory)."""
        osm = config.opensm
        budget = ReloadBudget(osm.reload_budget.burst, osm.reload_budget.per_minute)
        previous: Applier | None = getattr(self, "applier", None)
        if previous is not None and previous.budget is not None:
            budget.carry(previous.budget)
        return Applier(
            config.agent.state_dir,
            make_signaller(osm),
            osm.log,
            sweep_timeout_s=osm.sweep_timeout_s,
            heartbeat=self._heartbeat,
            should_stop=self._should_stop,
            budget=budget,
            hold_file=config.agent.state_dir / HOLD_FILE,
            written_file=config.agent.state_dir / WRITTEN_FILE,
            outside_quiet_s=osm.outside_quiet_s,
        )

    def _tuning(self, config: Config) -> TuningDriver:
        """The tuning of *config* (built anew when its ``tuning`` section changes)."""
        pipeline = self.pipeline
        agent = (
            config.tuning,
            lambda: pipeline.fabric,
            self._running,
            lambda: pipeline.decider.priors,
            lambda: pipeline.routes.tables,
        )
        return TuningDriver(
            config.tuning,
            enforce=not (self.dry_run or config.mode == "observe"),
            predictor=make_predictor(*agent),
            ratio=pipeline.lanes.weight_ratio,
            refiner=make_refiner(*agent),
        )


class MetricsService:
    """What the agent counts, every metric of it, and the Prometheus endpoint.

    Args:
        config: the configuration (its ``metrics`` section names the fabric).
        routing_engine: OpenSM's routing engine, as the lanes name it.
        observing: OpenSM is left alone (observe mode, or a dry run).

    Attributes:
        counters: what the agent counts since it started.
        metrics: every metric, the counters' among them.
        exporter: the endpoint while it serves (None: not serving).
    """

    def __init__(self, config: Config, *, routing_engine: str, observing: bool) -> None:
        self.counters = Counters()
        self.metrics = AgentMetrics(
            self.counters,
            fabric=config.metrics.fabric,
            routing_engine=routing_engine,
            dry_run=observing,
        )
        self.exporter: Exporter | None = None

    def serve(self, cfg: MetricsConfig) -> None:
        """Start the endpoint on ``metrics.listen`` (nothing when it is off).

        Raises:
            ExporterError: the address is taken or the TLS files do not load.
        """
        if cfg.listen is not None and self.exporter is None:
            if cfg.basic_auth is not None and cfg.tls is None:
                log.warning("metrics: basic auth without TLS sends the password in clear text")
            self.exporter = Exporter(metrics_app(self.metrics), cfg)

    def close(self) -> None:
        """Stop serving."""
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None


class SlService:
    """The SL board the cycles publish to, and the server that answers job SL questions
    from it on ``agent.socket`` / ``agent.sl_listen``.

    Args:
        wake: called when a question is for a job not planned yet (wakes the loop).

    Attributes:
        board: the SLs in force and planned, and the questions waiting.
        server: the server while it serves (None: not serving).
        wanted: :meth:`serve` was asked for (a SIGHUP into enforce mode then starts it).
    """

    def __init__(self, wake: Callable[[], None]) -> None:
        self.board = SlBoard(wake=wake)
        self.server: SlServer | None = None
        self.wanted = False
        self._meant = False  # serving is meant: enforcing, with a socket or sl_listen

    def serve(self, cfg: AgentConfig, *, observing: bool) -> None:
        """Answer job SL questions on ``agent.socket`` / ``agent.sl_listen`` (if set).

        Not while observing: it would hand out SLs that are not in force (a SIGHUP into
        enforce mode starts it, one back into observe mode stops it).  A socket that
        cannot be served (another agent answers there, /run/ibqos not writable for this
        user) is one logged error, not the end of the daemon: the QoS work goes on, and
        ``ibqos job-sl`` then fails as for an agent that is not running.
        """
        self.wanted = True
        if observing:
            self._meant = False
            return
        self._meant = cfg.socket is not None or cfg.sl_listen is not None
        if self.server is None and self._meant:
            limits = Limits(cfg.sl_max_connections, cfg.sl_max_per_peer, cfg.sl_idle_s)
            try:
                self.server = SlServer(self.board, cfg.socket, cfg.sl_listen, limits)
            except IbqosError as err:
                log.error("job SLs are not served: %s", err)

    def health(self) -> SlServerHealth | None:
        """The server's health for the metrics; None while it is not meant to serve
        (observe mode, no socket configured)."""
        if not self._meant:
            return None
        if self.server is None:
            return SlServerHealth(up=False)  # its socket could not be bound
        stats = self.server.stats
        return replace(stats, refused=dict(stats.refused))  # a copy: the server goes on

    def close(self) -> None:
        """Stop serving (questions then fail as for an agent that is not running)."""
        self._meant = False
        if self.server is not None:
            self.server.close()
            self.server = None


def _sm_terms(config: Config) -> tuple[object, ...]:
    """What the SM state is read from: OpenSM's log and conf, the MAD port."""
    osm = config.opensm
    return (osm.log, osm.conf, config.collect.ca, config.collect.port)


def freeze_heap() -> None:
    """Move what exists now (the fabric model and its tables: ~330k objects at 50k ports)
    out of the garbage collector's sight: full passes over it took 150-220 ms a cycle
    (docs/plan-benchmark.md)."""
    gc.collect()
    gc.freeze()
