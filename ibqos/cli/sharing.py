"""``ibqos characterize sharing``: which running jobs share leaf switches and subtrees."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ibqos.attribute.jobmap import FileJobSource, JobMapper
from ibqos.attribute.sharing import SharingTables
from ibqos.cli.options import (
    CHARACTERIZE_CONFIG_HELP,
    config_option,
    format_option,
    jobs_option,
    load_or_defaults,
    topology_option,
)
from ibqos.collect.discover import fabric_from_config
from ibqos.fabric.hostnames import HostMatcher
from ibqos.fabric.model import fabric_from_file
from ibqos.plan.output import align
from ibqos.slurm.jobsource import make_job_source


@click.command("sharing")
@config_option(CHARACTERIZE_CONFIG_HELP)
@jobs_option("Job file or directory instead of the job source.")
@topology_option("The fabric from this ibnetdiscover file instead of fabric.source.")
@format_option(("table", "json"))
def sharing_command(
    path: Path | None, jobs_path: Path | None, topology: Path | None, fmt: str
) -> None:
    """Per running job: other jobs sharing its leaf switches and upper subtrees, and its
    fragmentation (advice for placing network-intensive jobs in subtrees of their own)."""
    config = load_or_defaults(path)
    roots = config.fabric.root_guids or None
    fabric = (
        fabric_from_file(topology, root_guids=roots) if topology else fabric_from_config(config)
    )
    jobs = (FileJobSource(jobs_path) if jobs_path else make_job_source(config)).jobs()
    matcher = HostMatcher(config.jobs.host_pattern)
    mapped, warnings = JobMapper(fabric, matcher).map(jobs)
    sharing = SharingTables(fabric, matcher, config.jobs.exclude_hosts).sharing(mapped)
    if fmt == "json":
        doc = [
            {
                "id": mj.id,
                "name": mj.job.name,
                "nodes": s.nodes,
                "subtrees": {str(k): v for k, v in s.subtrees.items()},
                "sharing_jobs": {str(k): v for k, v in s.sharing.items()},
                "fragmentation": round(s.fragmentation, 4),
            }
            for mj in mapped
            if (s := sharing[mj.id]) is not None
        ]
        click.echo(json.dumps({"jobs": doc, "warnings": warnings}, indent=1))
        return
    levels = list(range(1, fabric.height))
    header = [
        "JOB",
        "NAME",
        "NODES",
        *(f"L{lv} subtrees/sharing" for lv in levels),
        "FRAGMENTATION",
    ]
    rows = []
    for mj in mapped:
        s = sharing[mj.id]
        rows.append(
            [
                mj.id,
                mj.job.name or "-",
                str(s.nodes),
                *(f"{s.subtrees[lv]}/{s.sharing[lv]}" for lv in levels),
                f"{s.fragmentation:.2f}",
            ]
        )
    click.echo("\n".join(align(header, rows)))
    for w in warnings:
        click.echo(f"warning: {w}")
