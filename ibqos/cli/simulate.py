"""``ibqos simulate``: what a QoS policy does to a job mix, predicted offline."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from ibqos.cli.options import (
    config_option,
    format_option,
    jobs_option,
    speed_option,
    topology_option,
    width_option,
    xgft_option,
)
from ibqos.config.load import find_config, load_config
from ibqos.sim.command import network, simulate
from ibqos.sim.evaluate import MODELS
from ibqos.sim.policies import DEFAULT_LANES, POLICIES
from ibqos.sim.report import FORMATS
from ibqos.sim.senders import GRANULARITIES, Granularity


@click.command("simulate")
@xgft_option('Fat tree, "H;m1,..,mH;w1,..,wH" (D-mod-K routes, as ftree spreads).')
@width_option()
@speed_option()
@topology_option()
@click.option(
    "--lfts",
    type=click.Path(path_type=Path, dir_okay=False),
    help="OpenSM's opensm-lfts.dump: the routes of --topology.",
)
@jobs_option(
    "Job file in the lab's format (docs/jobs.md), with pattern, rate, duty, period.",
    required=True,
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    type=click.Choice([*POLICIES, "all"]),
    help="Policy to simulate (repeat, or 'all'); default ibqos.",
)
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Simulate the plan in this `ibqos plan --format json` output.",
)
@click.option("--model", type=click.Choice(MODELS), default="fluid", show_default=True)
@click.option(
    "--senders",
    type=click.Choice(GRANULARITIES),
    default="auto",
    show_default=True,
    help="Fluid model: a rate per (job, host), per job, or auto (per host up to 512 hosts).",
)
@click.option(
    "--buffers",
    type=click.IntRange(min=0),
    help="Switch input buffers per VL, in MTU packets, of --model: the packet model's"
    " (default 8), or the fluid model's (default 8 with senders per host, none per job;"
    " buffers, head-of-line blocking and the drain, docs/simulate.md).",
)
@click.option(
    "--fluid-buffers",
    type=click.IntRange(min=0),
    help="With --model packet: the fluid model's buffers (as --buffers) where ibqos and"
    " optimal plan by simulating it (default as for --model fluid; refused when neither"
    " policy is asked for).",
)
@click.option("--iterations", type=click.IntRange(min=1), default=10, show_default=True)
@config_option()
@format_option(FORMATS)
def simulate_command(
    xgft: str | None,
    width: str,
    speed: str,
    topology: Path | None,
    lfts: Path | None,
    jobs_path: Path,
    policies: tuple[str, ...],
    plan_file: Path | None,
    model: str,
    senders: Granularity,
    buffers: int | None,
    fluid_buffers: int | None,
    iterations: int,
    path: Path | None,
    fmt: str,
) -> None:
    """Predict what a QoS policy does to a job mix: each job's time alone and sharing.

    Jobs iterate (compute, then communicate under their pattern); the contention of a job
    is its time for N iterations with the mix minus alone.  E is the one-vl total over the
    policy's.  Lanes come from --config's lanes section (default: ibqos's defaults).
    See docs/simulate.md.
    """
    lanes = DEFAULT_LANES
    if path is not None:
        lanes = replace(load_config(find_config(path)).lanes.base, min_hold_s=0, min_interval_s=0)
    net = network(xgft, int(width), speed, topology, lfts)
    report = simulate(
        net,
        jobs_path,
        policies,
        plan_file,
        model,
        iterations,
        lanes,
        fmt,
        senders,
        buffers,
        fluid_buffers,
    )
    for note in report.notes:
        click.echo(f"ibqos: simulate: {note}", err=True)
    click.echo(report.text, nl=False)
