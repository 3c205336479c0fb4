"""``ibqos plan``: one collection and plan cycle, printed; nothing changes."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import click

from ibqos.agent.lanes import resolve_lanes
from ibqos.attribute.jobmap import FileJobSource
from ibqos.cli.options import (
    config_option,
    format_option,
    interval_option,
    jobs_option,
    load_or_defaults,
    replay_option,
    sweeping_text,
    topology_option,
)
from ibqos.collect.discover import fabric_from_config
from ibqos.collect.loop import Collector
from ibqos.collect.routes import route_source
from ibqos.fabric.model import fabric_from_file
from ibqos.plan.decide import Decider
from ibqos.plan.output import FORMATS, render
from ibqos.slurm.jobsource import make_job_source

log = logging.getLogger(__name__)


@click.command("plan")
@config_option()
@replay_option("Plan on this recording's first two sweeps instead of the live fabric.")
@topology_option()
@jobs_option("Job file or directory instead of jobs.path.")
@interval_option("Seconds between the two sweeps (default: collect.interval_s).")
@format_option(FORMATS)
def plan_command(
    path: Path | None,
    replay_dir: Path | None,
    topology: Path | None,
    jobs_path: Path | None,
    interval: float | None,
    fmt: str,
) -> None:
    """Run one collection + plan cycle and print jobs and lanes; change nothing.

    Two sweeps one interval apart give the rates; each job's traffic per fat-tree level
    (through OpenSM's routes when fabric.lft_dump or ibroute gives them), utilization,
    class, SL and VL follow, then the lanes (VL, weight, SLs, jobs).  The JSON layout is
    documented in docs/plan.md.
    """
    config = load_or_defaults(path)
    cfg = config.collect
    if replay_dir is not None:
        cfg = replace(cfg, backend="replay", replay_path=replay_dir)
    roots = config.fabric.root_guids or None
    if topology is not None:
        fabric = fabric_from_file(topology, root_guids=roots)
    elif cfg.backend == "replay" and config.fabric.source == "ibnetdiscover":
        raise click.UsageError(
            "a replay needs the fabric it was recorded on: --topology FILE or fabric.source"
        )
    else:
        fabric = fabric_from_config(config)
    # a bad job file (or a Slurm that does not answer) fails first
    jobs = (FileJobSource(jobs_path) if jobs_path else make_job_source(config)).jobs()
    lanes, notes = resolve_lanes(config, fabric, read_ports=cfg.backend != "replay")
    for note in notes:
        log.info("%s", note)
    decider = Decider.from_config(config, fabric, lanes)
    pause = interval if interval is not None else cfg.interval_s
    # OpenSM's routes, as the agent attributes by them (ibroute reads run meanwhile)
    routes = route_source(config.fabric, replay=cfg.backend == "replay")
    try:
        routes.poll(fabric)
        with Collector(cfg, fabric) as collector:
            if cfg.backend != "replay":
                click.echo(sweeping_text(pause), err=True)
            collector.step()  # rates need two sweeps: the first is the baseline
            if cfg.backend != "replay":
                time.sleep(pause)
            rates = collector.step()
        routes.wait(config.fabric.discover_timeout_s)
        routes.poll(fabric)
    finally:
        routes.close()
    decider.set_routes(routes.tables)
    decision = decider.decide(rates, jobs, time.time(), sl_rates=collector.sl_rates)
    click.echo(render(decision, fmt, from_scratch=True), nl=False)
