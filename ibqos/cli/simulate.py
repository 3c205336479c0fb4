"""``ibqos simulate``: what a QoS policy does to a job mix, predicted offline."""

from __future__ import annotations

import os
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
from ibqos.sim.command import Search, network, simulate
from ibqos.sim.evaluate import MODELS, OBJECTIVES
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
    help="Policy to simulate (repeat, or 'all'); default ibqos: the agent's search and"
    " tuning run on the simulated counters (ibqos-fixed: its law without tuning).",
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
    help="With --model packet: the fluid model's buffers (as --buffers) where ibqos-fixed"
    " and optimal plan by simulating it (default as for --model fluid; refused when no"
    " such policy is asked for).",
)
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    help="N, for every policy (default 10; with --policy ibqos enough for 4 rounds of its"
    " tuning, see docs/simulate.md).",
)
@click.option(
    "--sweep-s",
    type=click.FloatRange(min=0, min_open=True),
    help="ibqos: simulated seconds between two counter sweeps (default 4 of the longest"
    " period_s of the jobs).",
)
@click.option(
    "--predict/--no-predict",
    default=True,
    show_default=True,
    help="ibqos: rank the candidate setups with the fluid model before trying them (else"
    " in their pool's order).",
)
@click.option(
    "--objective",
    type=click.Choice(OBJECTIVES),
    help="What judges a setup: node-time (S, the node-weighted mean slowdown) or worst-job"
    " (the largest slowdown); optimal searches by it, the gain is by it, and ibqos tunes"
    " by it (default: the config's tuning.objective, node-time).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="optimal: processes to run its setups in (default: the CPUs this process may use).",
)
@click.option(
    "--optimal-limit-s",
    type=click.FloatRange(min=0, min_open=True),
    help="optimal: start no setup after this many wall seconds (the runs under way finish)"
    " and answer with the best setup known, marked as a bound (default: search to the end).",
)
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
    iterations: int | None,
    sweep_s: float | None,
    predict: bool,
    objective: str | None,
    workers: int | None,
    optimal_limit_s: float | None,
    path: Path | None,
    fmt: str,
) -> None:
    """Predict what a QoS policy does to a job mix: each job's time alone and sharing.

    Jobs iterate (compute, then communicate under their pattern); a job's slowdown is its
    time for N iterations with the mix over alone, S their node-weighted mean, the gain
    the share of one-vl's excess slowdown (S - 1) a policy removes.  Total contention
    (sharing minus alone) and E (the one-vl total over the policy's) are shown beside it.
    Lanes come from --config's lanes section (default: ibqos's defaults).  See
    docs/simulate.md.
    """
    lanes = DEFAULT_LANES
    tuning = None
    if path is not None:
        config = load_config(find_config(path))
        lanes = replace(config.lanes.base, min_hold_s=0, min_interval_s=0)
        tuning = config.tuning
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
        tuning,
        sweep_s,
        predict,
        Search(objective, workers or len(os.sched_getaffinity(0)), optimal_limit_s),
    )
    for note in report.notes:
        click.echo(f"ibqos: simulate: {note}", err=True)
    click.echo(report.text, nl=False)
