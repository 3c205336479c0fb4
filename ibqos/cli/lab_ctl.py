"""``ibqos lab opensm`` and ``ibqos lab link``: faults to inject into a running lab."""

from __future__ import annotations

from pathlib import Path

import click

from ibqos.cli.options import root_option
from ibqos.lab import control, manage
from ibqos.lab.files import default_root


@click.command("opensm")
@click.argument("action", type=click.Choice(control.OPENSM_ACTIONS))
@click.argument("name")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="Seconds to wait for SUBNET UP (start, restart).",
)
@root_option
def lab_opensm(action: str, name: str, timeout: float, root: Path | None) -> None:
    """Stop, start or restart the lab's OpenSM.

    The lab's supervisor does it between two ticks: stop ends OpenSM (ibsim, the traffic
    and the diags go on; SA queries fail); start runs it again with the same opensm.conf,
    pid file and log (appended to) and returns once the log says SUBNET UP; restart is
    both.
    """
    info = manage.opensm(name, action, root=root or default_root(), timeout=timeout)
    state = f"runs, pid {info['pid']}" if info["running"] else "is not running"
    click.echo(f"lab {name}: OpenSM {state} ({info['note']})")


@click.command("link")
@click.argument("action", type=click.Choice(control.LINK_ACTIONS))
@click.argument("name")
@click.argument("targets", nargs=-1, required=True, metavar="NODE[PORT]...")
@root_option
def lab_link(action: str, name: str, targets: tuple[str, ...], root: Path | None) -> None:
    """Take links down or up in ibsim (Unlink / ReLink).

    NODE is a host name (cn0001), a switch name (sw-L1-0001) or a net-file id; with
    [PORT] one port's link, without it every link of the node.  Returns once ibsim has
    acknowledged; OpenSM notices through the trap ibsim sends, or its next sweep.
    """
    done = manage.link(name, action, list(targets), root=root or default_root())
    for line in done:
        click.echo(f"lab {name}: {line}")
