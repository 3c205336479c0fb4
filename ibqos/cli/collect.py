"""``ibqos collect``: per-port rates from repeated sweeps, like an exporter's debug mode."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from ibqos.cli.options import (
    config_option,
    format_option,
    interval_option,
    load_or_defaults,
    replay_option,
    topology_option,
)
from ibqos.collect.discover import fabric_from_config
from ibqos.collect.loop import Collector
from ibqos.collect.output import FORMATS, render
from ibqos.config.models import BACKENDS
from ibqos.fabric.model import Fabric, fabric_from_file


@click.command("collect")
@config_option()
@click.option("--backend", type=click.Choice(BACKENDS), help="Override collect.backend.")
@replay_option("Replay this recording (implies --backend replay).")
@topology_option()
@click.option("--once", is_flag=True, help="Two sweeps one interval apart, one table, exit.")
@interval_option("Seconds between sweeps (default: collect.interval_s; 1 with --once).")
@click.option("--count", type=click.IntRange(min=1), help="Print this many tables, then exit.")
@click.option("--window", type=click.IntRange(min=1), help="MADs in flight (native).")
@click.option(
    "--record",
    "record_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also record every sweep into this directory (for --replay).",
)
@format_option(FORMATS)
def collect(
    path: Path | None,
    backend: str | None,
    replay_dir: Path | None,
    topology: Path | None,
    once: bool,
    interval: float | None,
    count: int | None,
    window: int | None,
    record_dir: Path | None,
    fmt: str,
) -> None:
    """Read every port's counters and print per-port rates, like an exporter's debug mode.

    Rates need two sweeps, so the first table comes one interval after the start.  JSON
    output is a list of rows per table (one line each); docs/collect.md lists the keys.
    """
    config = load_or_defaults(path)
    cfg = config.collect
    if replay_dir is not None:
        cfg = replace(cfg, backend="replay", replay_path=replay_dir)
    elif backend == "replay" and cfg.replay_path is None:
        raise click.UsageError("--backend replay needs --replay DIR")
    elif backend is not None:
        cfg = replace(cfg, backend=backend)
    if window is not None:
        cfg = replace(cfg, window=window)
    roots = config.fabric.root_guids or None
    fabric: Fabric | None
    if topology is not None:
        fabric, discover = fabric_from_file(topology, root_guids=roots), None
    elif cfg.backend == "replay":
        fabric, discover = None, None  # the recording names its ports
    else:
        fabric = fabric_from_config(config)
        refresh = config.fabric.refresh_s
        discover = (lambda: fabric_from_config(config)) if refresh > 0 else None
    pause = interval if interval is not None else (1.0 if once else cfg.interval_s)
    with Collector(
        cfg, fabric, discover=discover, refresh_s=config.fabric.refresh_s, record=record_dir
    ) as collector:
        collector.run(1 if once else count, pause, lambda r: click.echo(render(r, fmt), nl=False))
