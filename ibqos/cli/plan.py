"""``ibqos plan``: one collection and plan cycle, printed; nothing changes."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import click

from ibqos.agent.pipeline import Pipeline
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
from ibqos.fabric.model import fabric_from_file
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
    source = FileJobSource(jobs_path) if jobs_path else make_job_source(config)
    jobs = source.jobs()
    pause = interval if interval is not None else cfg.interval_s
    # the agent's pipeline; OpenSM's routes are read (ibroute runs) while it sweeps
    built = Pipeline.build(config, fabric=fabric, source=source, collect=cfg, logger=log)
    with built as pipeline:
        collector = pipeline.collector
        if cfg.backend != "replay":
            click.echo(sweeping_text(pause), err=True)
        collector.step()  # rates need two sweeps: the first is the baseline
        if cfg.backend != "replay":
            time.sleep(pause)
        rates = collector.step()
        pipeline.routes.wait(config.fabric.discover_timeout_s)
        pipeline.refresh_routes()
    decision = pipeline.decider.decide(rates, jobs, time.time(), sl_rates=collector.sl_rates)
    click.echo(render(decision, fmt, from_scratch=True), nl=False)
