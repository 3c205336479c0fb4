"""The ``ibqos`` command: the root group over one module per command group, and the one
place errors become messages and exit codes.

Known errors print ``ibqos: <category>: <message>`` and exit 1; usage errors exit 2
(click's own); Ctrl-C prints ``ibqos: interrupted`` and exits 130; a closed pipe is
silent; anything else prints ``ibqos: unexpected error: ...`` and exits 1, with the
traceback only under ``--debug``.  ``--debug`` and ``-v`` go before or after the command
(:mod:`ibqos.cli.verbosity`).
"""

from __future__ import annotations

import os
from typing import Any

import click

from ibqos import __version__
from ibqos.cli.characterize import characterize as characterize_group
from ibqos.cli.check import check_config_command, check_opensm_command
from ibqos.cli.collect import collect as collect_command
from ibqos.cli.config import show_config
from ibqos.cli.deploy import install_command, restore_command
from ibqos.cli.jobsl import job_sl_command
from ibqos.cli.lab import lab as lab_group
from ibqos.cli.plan import plan_command
from ibqos.cli.run import run_command
from ibqos.cli.simulate import simulate_command
from ibqos.cli.status import status_command
from ibqos.cli.verbosity import DEBUG, DEBUG_HELP, VERBOSE_HELP, add_global_options, start
from ibqos.errors import IbqosError

__all__ = ["cli", "main"]


class _Cli(click.Group):
    """Maps ibqos errors to one line on stderr and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except IbqosError as err:
            click.echo(f"ibqos: {err.category}: {err}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("ibqos: interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            ctx.exit(0)
        except Exception as err:
            if ctx.obj and ctx.obj.get(DEBUG):
                raise
            click.echo(
                f"ibqos: unexpected error: {type(err).__name__}: {err} "
                "(run with --debug for a traceback)",
                err=True,
            )
            ctx.exit(1)


@click.group(cls=_Cli)
@click.version_option(__version__, prog_name="ibqos")
@click.option("--debug", is_flag=True, help=DEBUG_HELP)
@click.option("-v", "--verbose", is_flag=True, help=VERBOSE_HELP)
@click.pass_context
def cli(ctx: click.Context, debug: bool, verbose: bool) -> None:
    """InfiniBand QoS companion agent for OpenSM."""
    start(ctx, debug, verbose)


for _command in (
    show_config,
    collect_command,
    plan_command,
    run_command,
    job_sl_command,
    status_command,
    simulate_command,
    check_opensm_command,
    check_config_command,
    lab_group,
    install_command,
    restore_command,
    characterize_group,
):
    add_global_options(_command)
    cli.add_command(_command)


def main() -> None:
    """Console-script entry point."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    cli()
