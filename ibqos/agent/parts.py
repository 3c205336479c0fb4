"""The daemon's parts, built as the config says, and their setup and teardown.

:class:`AgentParts` is the ground floor of :class:`ibqos.agent.daemon.Agent`: it reads
the saved state and the fabric, resolves the lanes, and builds the decider (continuing
from the saved state), the job source, the SL board, the apply path, the counter
collector and the metrics.  :mod:`ibqos.agent.cycle` runs cycles on these parts,
:mod:`ibqos.agent.reload` re-reads the config into them, and :mod:`ibqos.agent.daemon`
loops.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ibqos.agent.handoff import SlBoard, SlServer
from ibqos.agent.lanes import resolve_lanes
from ibqos.agent.lock import AgentLock
from ibqos.agent.predictor import make_predictor
from ibqos.agent.sdnotify import Notifier
from ibqos.agent.sinks import DryRunSink
from ibqos.agent.state import load_state
from ibqos.attribute.jobmap import FileJobSource
from ibqos.collect.discover import fabric_from_config
from ibqos.collect.loop import Collector
from ibqos.collect.routes import RouteSource, route_source
from ibqos.config.lanes import LaneConfig
from ibqos.config.models import Config
from ibqos.errors import IbqosError
from ibqos.fabric.model import Fabric
from ibqos.jobs.model import Job
from ibqos.metrics import AgentMetrics, Counters, level_capacities
from ibqos.metrics.server import Exporter, metrics_app
from ibqos.opensm.apply import Applier, make_signaller, read_file
from ibqos.opensm.budget import ReloadBudget
from ibqos.opensm.hold import HOLD_FILE
from ibqos.opensm.observe import Observer
from ibqos.plan.decide import Decider
from ibqos.plan.planner import Plan
from ibqos.plan.report import Decision
from ibqos.plan.saved import plan_from_doc
from ibqos.plan.tuning import TuningDriver
from ibqos.slurm.jobsource import make_job_source
from ibqos.slurm.source import SlurmJobSource

log = logging.getLogger(__name__)


class AgentParts:
    """The parts of one ibqos daemon, built from its config (the arguments are
    :class:`~ibqos.agent.daemon.Agent`'s)."""

    def __init__(
        self,
        config: Config,
        config_path: Path | None = None,
        *,
        dry_run: bool = False,
        simulate: bool = False,
        echo: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
        notifier: Notifier | None = None,
    ) -> None:
        self.config = config
        self.config_path = config_path
        self.dry_run = dry_run
        self.simulate = simulate
        self._dry_run_sink = DryRunSink(simulate)
        self.echo = echo
        self.clock = clock
        self.notifier = notifier or Notifier(None)
        self.lock: AgentLock | None = None
        self._sl_wanted = False
        self.counters = Counters()
        self._wake = threading.Event()
        self._stop = False
        self._applying = False  # an apply is under way (a stop waits for it)
        self._reload = False
        self._config_text = read_file(config_path) if config_path else None
        self._last_error = ""
        self._file_warnings: frozenset[str] = frozenset()  # the checker's, logged once each
        self.state = load_state(config.agent.state_dir)
        self.fabric: Fabric = fabric_from_config(config)
        self.lanes = self._lanes(config, self.fabric)
        # the plan OpenSM serves, and its job -> SL (what ``job-sl`` hands out)
        self.in_force_plan: Plan | None = plan_from_doc(self.state.in_force, self.lanes)
        # an observing agent's plan was only shown: OpenSM may serve other SLs
        trusted = self.in_force_plan is not None and self.state.mode == "enforce"
        self.in_force: dict[str, int] = (
            dict(self.in_force_plan.job_sl) if trusted and self.in_force_plan else {}
        )
        self.decider = self._decider(config, self.fabric, self.lanes)
        # OpenSM's forwarding tables: read now from the dump, or ibroute starts reading
        self.routes = self._route_source(config)
        self.refresh_routes()
        self.source = make_job_source(config)
        self.board = SlBoard(wake=self._wake.set)
        self.sl_server: SlServer | None = None
        self.applier = self._applier(config)
        self.observer = Observer(config.agent.state_dir)
        refresh = config.fabric.refresh_s
        self.collector = Collector(
            config.collect,
            self.fabric,
            discover=(lambda: fabric_from_config(self.config)) if refresh > 0 else None,
            refresh_s=refresh,
        )
        self.metrics = AgentMetrics(
            self.counters,
            fabric=config.metrics.fabric,
            routing_engine=self.lanes.routing_engine,
            dry_run=self.observing,
        )
        self.tuning = self._tuning(config)
        # OpenSM reloaded since the last sweep: the next sweep's interval holds a reload
        self.reloaded_since_sweep = False
        self.metrics.tuning.status = lambda: self.tuning.status(self.clock())
        self.metrics.health.sl_answers = self.board.counts
        self.metrics.health.job_source_up = self._source_up
        self.metrics.health.routes = lambda: self.routes.status()
        self.capacity = level_capacities(self.fabric)
        self.exporter: Exporter | None = None
        self.rates: pd.DataFrame | None = None
        self.jobs_seen: tuple[Job, ...] | None = None
        self.last: Decision | None = None
        freeze_heap()

    @property
    def observing(self) -> bool:
        """Whether OpenSM is left alone: ``--dry-run``, or ``mode: observe``."""
        return self.dry_run or self.config.mode == "observe"

    # -- setup --------------------------------------------------------------------------

    @staticmethod
    def _lanes(config: Config, fabric: Fabric) -> LaneConfig:
        lanes, notes = resolve_lanes(config, fabric, read_ports=config.collect.backend != "replay")
        for note in notes:
            log.info("%s", note)
        return lanes

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
            heartbeat=self.notifier.ping_if_due,
            should_stop=lambda: self._stop,
            budget=budget,
            hold_file=config.agent.state_dir / HOLD_FILE,
        )

    def _tuning(self, config: Config) -> TuningDriver:
        """The tuning of *config* (built anew when its ``tuning`` section changes)."""
        predictor = make_predictor(
            config.tuning,
            lambda: self.fabric,
            lambda: self.jobs_seen or (),
            lambda: self.decider.priors,
            lambda: self.routes.tables,
        )
        return TuningDriver(
            config.tuning,
            enforce=not (self.dry_run or config.mode == "observe"),
            predictor=predictor,
            ratio=self.lanes.weight_ratio,
        )

    @staticmethod
    def _route_source(config: Config) -> RouteSource:
        """The forwarding tables' source of *config*'s ``fabric`` section."""
        return route_source(config.fabric, replay=config.collect.backend == "replay")

    def refresh_routes(self) -> None:
        """Hand the decider OpenSM's forwarding tables when they changed (cheap when not:
        a stat of the dump, or a look at the background ibroute read)."""
        if self.routes.poll(self.fabric):
            self.decider.set_routes(self.routes.tables)

    def _decider(self, config: Config, fabric: Fabric, lanes: LaneConfig) -> Decider:
        decider = Decider.from_config(config, fabric, lanes)
        # continue from the saved state: running jobs keep their SLs and classes
        state = self.state
        decider.restore(
            state.job_sl, state.job_cls, state.history, state.finished, self.in_force_plan
        )
        return decider

    def serve_metrics(self) -> None:
        """Start the Prometheus endpoint (``metrics.listen``; nothing when it is off).

        Raises:
            ExporterError: the address is taken or the TLS files do not load.
        """
        cfg = self.config.metrics
        if cfg.listen is not None and self.exporter is None:
            if cfg.basic_auth is not None and cfg.tls is None:
                log.warning("metrics: basic auth without TLS sends the password in clear text")
            self.exporter = Exporter(metrics_app(self.metrics), cfg)

    def serve_sl(self) -> None:
        """Answer job SL questions on ``agent.socket`` / ``agent.sl_listen`` (if set).

        Not while observing: it would hand out SLs that are not in force (a SIGHUP into
        enforce mode starts it, one back into observe mode stops it).  A socket that
        cannot be served (another agent answers there, /run/ibqos not writable for this
        user) is one logged error, not the end of the daemon: the QoS work goes on, and
        ``ibqos job-sl`` then fails as for an agent that is not running.
        """
        self._sl_wanted = True
        cfg = self.config.agent
        if self.observing:
            return
        if self.sl_server is None and (cfg.socket is not None or cfg.sl_listen is not None):
            try:
                self.sl_server = SlServer(self.board, cfg.socket, cfg.sl_listen)
            except IbqosError as err:
                log.error("job SLs are not served: %s", err)

    def _source_up(self) -> bool | None:
        """Whether the job source answers (Slurm: squeue; a job file: its current version
        is valid); None before it was read."""
        source = self.source
        if isinstance(source, (SlurmJobSource, FileJobSource)):
            return source.up
        return None

    def close(self) -> None:
        """Stop serving metrics and SLs, release the collector's MAD device and the lock."""
        if self.lock is not None:
            self.lock.close()
            self.lock = None
        if self.sl_server is not None:
            self.sl_server.close()
            self.sl_server = None
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
        self.collector.close()
        self.routes.close()

    def _mode_name(self) -> str:
        return "dry run" if self.dry_run else self.config.mode


def freeze_heap() -> None:
    """Move what exists now (the fabric model and its tables: ~330k objects at 50k ports)
    out of the garbage collector's sight: full passes over it took 150-220 ms a cycle
    (docs/plan-benchmark.md)."""
    gc.collect()
    gc.freeze()
