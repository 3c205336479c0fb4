"""The options several ``ibqos`` commands share, each defined once as a decorator, and the
config that ``--config`` names.

Where commands word an option's help differently, the decorator takes the help text; the
name, destination and type stay the same everywhere.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ibqos.fabric.topology import LANE_DATA_BITS_PER_S, WIDTHS

if TYPE_CHECKING:
    from ibqos.config.models import Config

log = logging.getLogger(__name__)

FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)

CONFIG_HELP = "Config file (default: $IBQOS_CONFIG, then /etc/ibqos/ibqos.yaml)."
CHARACTERIZE_CONFIG_HELP = (
    "Config file (thresholds, profiles.dir; default: $IBQOS_CONFIG, /etc/ibqos/ibqos.yaml)."
)
TOPOLOGY_HELP = "Read the fabric from this ibnetdiscover file instead of fabric.source."


def config_option(help: str = CONFIG_HELP) -> Callable[[FC], FC]:
    """``--config FILE`` (destination ``path``): the ibqos config file."""
    return click.option("--config", "path", type=click.Path(path_type=Path), help=help)


def load_or_defaults(path: Path | None) -> Config:
    """The config, or the defaults when none was named and the default file is absent:
    ``ibqos collect`` and the offline commands also serve on hosts where ibqos is not set up.

    Args:
        path: the ``--config`` value, if given.
    """
    from ibqos.config.load import find_config, load_config, parse_config  # pydantic: slow

    found = find_config(path)
    if path is None and "IBQOS_CONFIG" not in os.environ and not found.exists():
        log.debug("no %s: using the default configuration", found)
        return parse_config({}, "defaults")
    return load_config(found)


def format_option(choices: Sequence[str], default: str = "table") -> Callable[[FC], FC]:
    """``--format`` (destination ``fmt``): the output format."""
    return click.option(
        "--format", "fmt", type=click.Choice(choices), default=default, show_default=True
    )


# -- the fabric ------------------------------------------------------------------------
def topology_option(help: str = TOPOLOGY_HELP, *, file_only: bool = True) -> Callable[[FC], FC]:
    """``--topology``: a fabric in ibnetdiscover format (``file_only``: not a directory)."""
    path_type = (
        click.Path(path_type=Path, dir_okay=False) if file_only else click.Path(path_type=Path)
    )
    return click.option("--topology", type=path_type, help=help)


def xgft_option(help: str) -> Callable[[FC], FC]:
    """``--xgft "H;m1,..,mH;w1,..,wH"``: a fat tree to build."""
    return click.option("--xgft", help=help)


def width_option(help: str | None = None) -> Callable[[FC], FC]:
    """``--width``: the link width (lanes) of an ``--xgft`` fabric."""
    return click.option(
        "--width",
        type=click.Choice([str(w) for w in WIDTHS]),
        default="4",
        show_default=True,
        help=help,
    )


def speed_option(help: str | None = None) -> Callable[[FC], FC]:
    """``--speed``: the lane speed of an ``--xgft`` fabric."""
    return click.option(
        "--speed",
        type=click.Choice(list(LANE_DATA_BITS_PER_S)),
        default="EDR",
        show_default=True,
        help=help,
    )


# -- jobs and sweeps -------------------------------------------------------------------
def jobs_option(
    help: str | None = None, *, required: bool = False, dest: str = "jobs_path"
) -> Callable[[FC], FC]:
    """``--jobs``: a job file (or directory, where the command reads one)."""
    return click.option(
        "--jobs", dest, required=required, type=click.Path(path_type=Path), help=help
    )


def replay_option(help: str) -> Callable[[FC], FC]:
    """``--replay DIR`` (destination ``replay_dir``): a recording of sweeps."""
    return click.option(
        "--replay", "replay_dir", type=click.Path(path_type=Path, file_okay=False), help=help
    )


def sweeping_text(interval_s: float) -> str:
    """What a command that needs rates says while it waits for them (rates take two
    sweeps of the counters, *interval_s* seconds apart)."""
    return f"sweeping counters (2 sweeps, {interval_s:g} s apart)..."


def interval_option(help: str) -> Callable[[FC], FC]:
    """``--interval``: seconds between two sweeps."""
    return click.option("--interval", type=click.FloatRange(min=0.01), help=help)


# -- profiles --------------------------------------------------------------------------
profiles_option = click.option(
    "--profiles",
    "profiles_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Profile directory (default: profiles.dir of the config).",
)


def save_options(f: FC) -> FC:
    """``--save APP`` (destination ``application``) and ``--user``: record in a profile."""
    f = click.option("--user", help="With --save: the profile is this user's only.")(f)
    return click.option("--save", "application", metavar="APP", help="Record it in APP's profile.")(
        f
    )


# -- labs ------------------------------------------------------------------------------
root_option = click.option(
    "--root",
    type=click.Path(path_type=Path),
    default=None,
    help="Directory holding labs (default: $IBQOS_LAB_ROOT, else $XDG_STATE_HOME/ibqos/labs).",
)
