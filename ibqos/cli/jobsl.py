"""``ibqos job-sl``: the SL the running agent gave a job (for Slurm's TaskProlog)."""

from __future__ import annotations

from pathlib import Path

import click

from ibqos.agent.handoff import ask_sl, check_job_id
from ibqos.cli.options import config_option, load_or_defaults


@click.command("job-sl")
@click.argument("job_id")
@config_option()
@click.option(
    "--socket",
    "socket_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The agent's socket (default: agent.socket of the config).",
)
@click.option("--server", metavar="HOST:PORT", help="Ask over TCP (agent.sl_listen) instead.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1, max=60),
    default=5.0,
    show_default=True,
    help="Seconds to wait for the answer.",
)
def job_sl_command(
    job_id: str, path: Path | None, socket_path: Path | None, server: str | None, timeout: float
) -> None:
    """Print the SL ibqos gave job JOB_ID and OpenSM serves (asking the running agent;
    a job it does not know yet gets one at once if its job source runs it).

    Exit 1 with one line on stderr if ibqos is not running, the job is unknown, its SL is
    not in force yet (OpenSM has not taken the plan) or the answer takes longer than
    --timeout: the job then runs on the default SL.  The Prolog and TaskProlog in
    contrib/slurm use this (docs/slurm.md).
    """
    check_job_id(job_id, "JOB_ID")
    address: tuple[str, int] | None = None
    if server is not None:
        if socket_path is not None:
            raise click.UsageError("give at most one of --socket and --server")
        address = _host_port(server)
    elif socket_path is None:
        socket_path = load_or_defaults(path).agent.socket
        if socket_path is None:
            raise click.UsageError("agent.socket is off in the config: give --socket or --server")
    sl = ask_sl(job_id, timeout, socket_path=socket_path, server=address)
    click.echo(str(sl))


def _host_port(server: str) -> tuple[str, int]:
    """``--server HOST:PORT`` as an address (brackets around an IPv6 host dropped)."""
    host, sep, port = server.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"expected HOST:PORT, got {server!r}", param_hint="--server")
    return host.strip("[]"), int(port)
