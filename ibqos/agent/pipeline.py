"""What one decision cycle runs on, built as the config says: the one way ``ibqos run`` and
``ibqos plan`` build it.

A cycle reads the running jobs (the job source), sweeps the ports' counters (the
collector), attributes each job's traffic through OpenSM's forwarding tables (the route
source) and decides classes, SLs and lanes (the decider), on the fabric and with the lanes
the config and the ports give (:func:`ibqos.agent.lanes.resolve_lanes`, which is why
this lives in the agent's layer).  :meth:`Pipeline.build` builds them in this order: the
fabric, the lanes, the decider, the route source (its first read started at once, so that
ibroute's reads run while the rest is built), the job source, the collector.

The agent keeps its pipeline for its whole life: a SIGHUP hands it the new config
(:meth:`Pipeline.reconfigure`), and the collector's re-read of the topology becomes the
pipeline's fabric (:meth:`Pipeline.follow_fabric`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ibqos.agent.lanes import resolve_lanes
from ibqos.attribute.jobmap import JobSource
from ibqos.classify.prior import Priors
from ibqos.collect.discover import fabric_from_config
from ibqos.collect.loop import Collector
from ibqos.collect.routes import RouteSource, route_source
from ibqos.config.lanes import LaneConfig
from ibqos.config.models import CollectConfig, Config
from ibqos.fabric.model import Fabric
from ibqos.plan.decide import Decider
from ibqos.slurm.jobsource import make_job_source

log = logging.getLogger(__name__)


@dataclass
class Pipeline:
    """The parts of one decision cycle (see the module docstring).

    Attributes:
        fabric: the topology planned on (a re-read replaces it: :meth:`follow_fabric`).
        lanes: the lanes the planner may use, with the config's ``auto`` values resolved.
        decider: classes, SLs and lanes from rates and jobs.
        routes: OpenSM's forwarding tables, for attribution.
        source: the running jobs.
        collector: the counter sweeps and their rates.
    """

    fabric: Fabric
    lanes: LaneConfig
    decider: Decider
    routes: RouteSource
    source: JobSource
    collector: Collector

    @classmethod
    def build(
        cls,
        config: Config,
        *,
        fabric: Fabric | None = None,
        source: JobSource | None = None,
        collect: CollectConfig | None = None,
        discover: Callable[[], Fabric] | None = None,
        logger: logging.Logger = log,
    ) -> Pipeline:
        """The pipeline of *config*.

        Args:
            config: the configuration.
            fabric: the topology (None: :func:`~ibqos.collect.discover.fabric_from_config`).
            source: the job source (None: :func:`~ibqos.slurm.jobsource.make_job_source`).
            collect: the ``collect`` section to sweep with (None: *config*'s), e.g. with a
                recording to replay given on the command line.
            discover: reads the topology again every ``fabric.refresh_s`` (None: never).
            logger: where the lanes' notes go (the caller's: the lines read as they did
                before one pipeline was built for both).

        Raises:
            IbqosError: the fabric cannot be read, a profile file is bad, the job source
                or the collector's backend cannot be opened.
        """
        collect = collect or config.collect
        if fabric is None:
            fabric = fabric_from_config(config)
        lanes = cls.lanes_for(config, fabric, collect, logger)
        decider = Decider.from_config(config, fabric, lanes)
        routes = cls.routes_for(config, collect)
        try:
            if routes.poll(fabric):  # a dump is read now; ibroute starts reading
                decider.set_routes(routes.tables)
            if source is None:
                source = make_job_source(config)
            collector = Collector(
                collect, fabric, discover=discover, refresh_s=config.fabric.refresh_s
            )
        except BaseException:
            routes.close()
            raise
        return cls(fabric, lanes, decider, routes, source, collector)

    @staticmethod
    def lanes_for(
        config: Config,
        fabric: Fabric,
        collect: CollectConfig | None = None,
        logger: logging.Logger = log,
    ) -> LaneConfig:
        """*config*'s lanes on *fabric*, each ``auto`` value read from the ports (not from a
        replay's) or OpenSM's opensm.conf; where each came from is logged to *logger*."""
        replay = (collect or config.collect).backend == "replay"
        lanes, notes = resolve_lanes(config, fabric, read_ports=not replay)
        for note in notes:
            logger.info("%s", note)
        return lanes

    @staticmethod
    def routes_for(config: Config, collect: CollectConfig | None = None) -> RouteSource:
        """The forwarding tables' source of *config*'s ``fabric`` section (none to ask on a
        replay's fabric)."""
        replay = (collect or config.collect).backend == "replay"
        return route_source(config.fabric, replay=replay)

    def refresh_routes(self) -> None:
        """Hand the decider OpenSM's forwarding tables when they changed (cheap when not:
        a stat of the dump, or a look at the background ibroute read)."""
        if self.routes.poll(self.fabric):
            self.decider.set_routes(self.routes.tables)

    def follow_fabric(self) -> bool:
        """Take the topology the collector read again, if it is a new one; True if so."""
        fabric = self.collector.fabric
        if fabric is None or fabric is self.fabric:
            return False
        self.fabric = fabric
        self.decider.set_fabric(fabric)
        return True

    def reconfigure(
        self, old: Config, config: Config, lanes: LaneConfig, priors: Priors | None
    ) -> None:
        """Take a new *config* (SIGHUP; *old* was in force): its lanes and profiles (both
        read already, so that a bad one was refused before anything changed), its
        thresholds, and a new job source or route source when their sections changed (else
        each keeps its state: a Slurm source's grace times and last jobs, the tables read)."""
        self.lanes = lanes
        self.decider.lanes = lanes
        self.decider.classifier.thresholds = config.classify
        self.decider.priors = priors
        if (config.jobs, config.slurm) != (old.jobs, old.slurm):
            self.source = make_job_source(config)
        fc, ofc = config.fabric, old.fabric
        if (fc.routes, fc.lft_dump, fc.refresh_s) != (ofc.routes, ofc.lft_dump, ofc.refresh_s):
            self.routes.close()
            self.routes = self.routes_for(config)
            self.decider.set_routes(None)  # until the new source has tables
            self.refresh_routes()

    def close(self) -> None:
        """Release the collector's MAD device and stop the route source's reads."""
        self.collector.close()
        self.routes.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
