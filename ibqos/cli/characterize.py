"""``ibqos characterize``: offline characterization of applications, and job profiles
(docs/characterize.md).

This module holds the group and the placement commands (``trace``, ``jobs``); the others
come from :mod:`ibqos.cli.history`, :mod:`ibqos.cli.profiles` and :mod:`ibqos.cli.sharing`.
The work is in :mod:`ibqos.characterize`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import click

from ibqos.characterize import command, report
from ibqos.characterize.otf2trace import load_otf2
from ibqos.characterize.trace import load_csv_trace
from ibqos.classify.levels import Characterizer
from ibqos.classify.profiles import check_name
from ibqos.classify.traffic import NodeTraffic
from ibqos.cli.history import history_command
from ibqos.cli.options import (
    CHARACTERIZE_CONFIG_HELP,
    FC,
    config_option,
    format_option,
    jobs_option,
    load_or_defaults,
    profiles_option,
    save_options,
    speed_option,
    topology_option,
    width_option,
    xgft_option,
)
from ibqos.cli.profiles import (
    check_names,
    learn_command,
    profile_store,
    profiles_command,
    saved_line,
)
from ibqos.cli.sharing import sharing_command
from ibqos.errors import JobsError
from ibqos.fabric.hostnames import HostMatcher
from ibqos.jobs.jobfile import load_jobs


def _fabric_options(f: FC) -> FC:
    """The fabric, the placements on it, and where and how the results go."""
    for option in reversed(
        (
            xgft_option('Fat tree "H;m1,..,mH;w1,..,wH" (as ibqos lab).'),
            topology_option("A recorded fabric (ibnetdiscover output) instead of --xgft."),
            width_option(),
            speed_option(),
            click.option(
                "--placement",
                "placements",
                multiple=True,
                help="contiguous, F<n> (n nodes per leaf switch), random[:seed]; repeat it"
                " (default: contiguous, every F<n>, random).",
            ),
            click.option(
                "--out",
                type=click.Path(path_type=Path, file_okay=False),
                help="Write levels.csv, levels.json and the plots into this directory.",
            ),
            click.option(
                "--plot-format",
                type=click.Choice(report.PLOT_FORMATS),
                default="png",
                show_default=True,
            ),
            format_option(("table", "json")),
            config_option(CHARACTERIZE_CONFIG_HELP),
        )
    ):
        f = option(f)
    return f


def _emit(runs: Sequence[command.Run], fmt: str, out: Path | None, plot_format: str) -> None:
    files: dict[str, bytes] = {}
    plots = plot_format if out is not None else None  # plots are for files only
    for run in runs:
        prefix = "" if len(runs) == 1 else f"{run.title.split()[-1]}-"
        files |= {prefix + name: data for name, data in command.outputs(run, plots).items()}
    if fmt == "json":
        docs = [json.loads(files[name]) for name in files if name.endswith("levels.json")]
        click.echo(json.dumps(docs[0] if len(docs) == 1 else docs, indent=1))
    else:
        for run in runs:
            click.echo(f"{run.title} on {run.fabric_name}")
            click.echo(report.text_table(run.placements), nl=False)
            click.echo("available bandwidth by spread:")
            click.echo(report.text_table(run.spread), nl=False)
    if out is not None:
        paths = report.write_outputs(out, files)
        click.echo(f"wrote {', '.join(str(p) for p in paths)}", err=True)


@click.group("characterize")
def characterize() -> None:
    """Characterize applications offline and keep their job profiles (docs/characterize.md)."""


@characterize.command("trace")
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@click.option(
    "--trace-format",
    type=click.Choice(("auto", "csv", "otf2")),
    default="auto",
    show_default=True,
    help="auto: OTF2 for a directory or *.otf2, else the ibqos CSV format.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=1e-6),
    default=1.0,
    show_default=True,
    help="OTF2: seconds per interval.",
)
@click.option("--ranks-per-node", type=click.IntRange(min=1), default=1, show_default=True)
@_fabric_options
@save_options
@profiles_option
def trace_command(
    trace_path: Path,
    trace_format: str,
    interval: float,
    ranks_per_node: int,
    xgft: str | None,
    topology: Path | None,
    width: str,
    speed: str,
    placements: tuple[str, ...],
    out: Path | None,
    plot_format: str,
    fmt: str,
    path: Path | None,
    application: str | None,
    user: str | None,
    profiles_dir: Path | None,
) -> None:
    """Per-level injection, available bandwidth, utilization and class of a traced
    application on placements of a fat tree."""
    check_names(application, user)  # before anything is printed or written
    config = load_or_defaults(path)
    store = profile_store(config, profiles_dir) if application else None
    otf2 = trace_format == "otf2" or (
        trace_format == "auto" and (trace_path.is_dir() or trace_path.suffix == ".otf2")
    )
    if otf2:
        imported = load_otf2(trace_path, interval)
        trace = imported.trace
        click.echo(
            f"{trace_path}: {trace.ranks} ranks, {imported.sends} sends,"
            f" {imported.collective_bytes:.0f} collective bytes spread, {trace.span_s:g} s",
            err=True,
        )
    else:
        trace = load_csv_trace(trace_path)
    traffic = trace.node_traffic(ranks_per_node)
    fabric, name, exclude = command.fabric_of(
        xgft, topology, int(width), speed, config.jobs.exclude_hosts
    )
    ch = Characterizer(fabric, config.classify, HostMatcher(config.jobs.host_pattern), exclude)
    run = command.characterize(
        ch, traffic, placements, title=f"trace {trace_path.name}", fabric_name=name
    )
    _emit([run], fmt, out, plot_format)
    if store is not None and application is not None:
        profile = command.save_profile(
            store, application, run, command.model_of_trace(traffic), user=user, now_s=time.time()
        )
        click.echo(saved_line(profile), err=True)


@characterize.command("jobs")
@jobs_option(required=True)
@_fabric_options
@click.option("--save", is_flag=True, help="Record each job in its application's (name's) profile.")
@profiles_option
def jobs_command(
    jobs_path: Path,
    xgft: str | None,
    topology: Path | None,
    width: str,
    speed: str,
    placements: tuple[str, ...],
    out: Path | None,
    plot_format: str,
    fmt: str,
    path: Path | None,
    save: bool,
    profiles_dir: Path | None,
) -> None:
    """Characterize the jobs of a lab job file (docs/jobs.md) on their own placement
    (``job``) and on the others."""
    config = load_or_defaults(path)
    store = profile_store(config, profiles_dir) if save else None
    jobs = load_jobs(jobs_path, traffic=True)
    fabric, name, exclude = command.fabric_of(
        xgft, topology, int(width), speed, config.jobs.exclude_hosts
    )
    ch = Characterizer(fabric, config.classify, HostMatcher(config.jobs.host_pattern), exclude)
    runs = []
    for job in jobs:
        if save and not job.name:
            raise JobsError(f"{jobs_path}: job {job.id}: --save needs a name (the application)")
        if save:
            check_name(job.name, f"{jobs_path}: job {job.id}: --save: name")
        traffic = NodeTraffic.from_job(job)
        asked = placements or ("job", *command.DEFAULT_PLACEMENTS)
        runs.append(
            command.characterize(
                ch, traffic, asked, title=f"job {job.id}", fabric_name=name, job_hosts=job.nodes
            )
        )
    _emit(runs, fmt, out, plot_format)
    if store is not None:
        for job, run in zip(jobs, runs, strict=True):
            profile = command.save_profile(
                store, job.name, run, command.model_of_job(job), now_s=time.time()
            )
            click.echo(saved_line(profile), err=True)


for _command in (history_command, learn_command, profiles_command, sharing_command):
    characterize.add_command(_command)
