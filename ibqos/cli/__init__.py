"""The ``ibqos`` command: the root group over one module per command group, and the one
place errors become messages and exit codes.

Known errors print ``ibqos: <category>: <message>`` and exit 1; usage errors exit 2
(click's own); Ctrl-C prints ``ibqos: interrupted`` and exits 130; a closed pipe is
silent; anything else prints ``ibqos: unexpected error: ...`` and exits 1, with the
traceback only under ``--debug``.  ``--debug`` and ``-v`` go before or after the command
(:mod:`ibqos.cli.verbosity`).

A command's module is imported when the command runs or shows its help, not before:
:data:`COMMANDS` names each command's module and the first sentence of its help, which
``ibqos --help`` lists.  ``ibqos job-sl`` (Slurm's prolog runs it for every job) thus does
not import the planner, pandas or the simulator that other commands use.  A command's
module, in turn, imports at its top what its options need, and the modules of its work
(pydantic's config models, numpy, the checkers) where it runs them: its ``--help`` then
costs about what Python takes to import click (``python -m bench.cli.startup``).
"""

from __future__ import annotations

import importlib
import os
from gettext import gettext
from typing import Any, NamedTuple

import click

from ibqos import __version__
from ibqos.cli.verbosity import DEBUG, DEBUG_HELP, VERBOSE_HELP, add_global_options, start
from ibqos.errors import IbqosError

__all__ = ["COMMANDS", "Entry", "cli", "main"]


class Entry(NamedTuple):
    """Where a command of the root group is, and what ``ibqos --help`` says of it.

    Attributes:
        module: the module that defines it.
        name: its name in that module.
        summary: the first sentence of its help, as ``ibqos --help`` shortens it.
    """

    module: str
    name: str
    summary: str


#: the root group's commands, in the order of ``ibqos --help`` (by name); a test checks
#: that each summary is the short help its command gives
COMMANDS: dict[str, Entry] = {
    "characterize": Entry(
        "ibqos.cli.characterize",
        "characterize",
        "Characterize applications offline and keep their job profiles (docs/characterize.md).",
    ),
    "check-config": Entry(
        "ibqos.cli.check",
        "check_config_command",
        "Validate an ibqos config file, then check what it points at: OpenSM's files and"
        " process, the job source, the state directory, the metrics port and the SL socket.",
    ),
    "check-opensm": Entry(
        "ibqos.cli.check",
        "check_opensm_command",
        "Check opensm.conf and qos-policy.conf files against OpenSM's grammar and its traps.",
    ),
    "collect": Entry(
        "ibqos.cli.collect",
        "collect",
        "Read every port's counters and print per-port rates, like an exporter's debug mode.",
    ),
    "config": Entry(
        "ibqos.cli.config",
        "show_config",
        "Validate the ibqos configuration and print it as loaded.",
    ),
    "install": Entry(
        "ibqos.cli.deploy",
        "install_command",
        "Install the systemd unit, its environment file, the example config and the Slurm"
        " scripts; an admin's existing files are kept (the shipped ones go beside as .new).",
    ),
    "job-sl": Entry(
        "ibqos.cli.jobsl",
        "job_sl_command",
        "Print the SL ibqos gave job JOB_ID and OpenSM serves (asking the running agent; a job"
        " it does not know yet gets one at once if its job source runs it).",
    ),
    "lab": Entry(
        "ibqos.cli.lab",
        "lab",
        "A simulated fabric: real ibsim + real OpenSM + a traffic model of running jobs.",
    ),
    "plan": Entry(
        "ibqos.cli.plan",
        "plan_command",
        "Run one collection + plan cycle and print jobs and lanes; change nothing.",
    ),
    "restore": Entry(
        "ibqos.cli.deploy",
        "restore_command",
        "Take ibqos's blocks and keys out of OpenSM's files, keeping every other line as it"
        " is now, signal OpenSM, check its log and verify through the SA; on an error the"
        " files of before the restore go back.",
    ),
    "run": Entry(
        "ibqos.cli.run",
        "run_command",
        "Run the agent: sweep, plan, and rewrite OpenSM's QoS files every collect.interval_s.",
    ),
    "simulate": Entry(
        "ibqos.cli.simulate",
        "simulate_command",
        "Predict what a QoS policy does to a job mix: each job's time alone and sharing.",
    ),
    "status": Entry(
        "ibqos.cli.status",
        "status_command",
        "Show the plan in force and the last apply result, from the agent's state directory.",
    ),
}


class _Cli(click.Group):
    """Loads a command from :data:`COMMANDS` when it is asked for, and maps ibqos errors to
    one line on stderr and exit status 1."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if cmd_name not in self.commands and entry is not None:
            command = getattr(importlib.import_module(entry.module), entry.name)
            add_global_options(command)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands and their short help, as click's own lists them, without importing
        the commands not loaded yet: a stand-in with the summary as its help is shortened
        as the command's help would be."""
        commands = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name) or click.Command(name, help=COMMANDS[name].summary)
            if not command.hidden:
                commands.append((name, command))
        if commands:
            limit = formatter.width - 6 - max(len(name) for name, _ in commands)
            rows = [(name, command.get_short_help_str(limit)) for name, command in commands]
            with formatter.section(gettext("Commands")):
                formatter.write_dl(rows)

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


def main() -> None:
    """Console-script entry point."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    cli()
