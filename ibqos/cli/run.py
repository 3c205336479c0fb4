"""``ibqos run``: the agent, as a daemon, for one cycle, or as a dry run."""

from __future__ import annotations

from pathlib import Path

import click

from ibqos.agent.daemon import Agent
from ibqos.agent.lock import claim
from ibqos.agent.sdnotify import Notifier
from ibqos.cli.options import config_option, sweeping_text
from ibqos.cli.verbosity import serving
from ibqos.config.load import find_config, load_config


@click.command("run")
@config_option()
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the plan, tuning's candidates as predicted and diffs of OpenSM's files;"
    " write nothing.",
)
@click.option("--once", is_flag=True, help="One full cycle (two sweeps), then exit.")
@click.option(
    "--simulate",
    is_flag=True,
    help="With --dry-run: also show the simulated effect on the jobs (in force vs proposed).",
)
def run_command(path: Path | None, dry_run: bool, once: bool, simulate: bool) -> None:
    """Run the agent: sweep, plan, and rewrite OpenSM's QoS files every collect.interval_s.

    SIGTERM ends it after the current cycle (exit 0); SIGHUP re-reads the config.  With
    mode: observe (the default) or --dry-run nothing is written and OpenSM is never
    signalled.  Prometheus metrics are served on metrics.listen (not with --once).  Under
    systemd (ibqos.service) it notifies READY, STATUS and the watchdog.
    """
    if not once:
        serving()  # the daemon's log is its output: one line per state change
    found = find_config(path)
    config = load_config(found)
    if simulate and not dry_run:
        raise click.UsageError("--simulate needs --dry-run")
    # one writer per state directory and per OpenSM: a --once cycle writes OpenSM's files
    # (enforce) and state.json like the daemon, and restore must not run meanwhile.  Taken
    # first: a second agent stops before it touches the fabric or OpenSM's files.
    lock = None if dry_run else claim(config)
    try:
        agent = Agent(
            config,
            found,
            dry_run=dry_run,
            simulate=simulate,
            echo=lambda text: click.echo(text, nl=False),
            notifier=None if once else Notifier.from_env(),  # Type=notify (ibqos.service)
        )
    except BaseException:
        if lock is not None:
            lock.close()
        raise
    agent.lock = lock
    try:
        if not once:
            agent.serve_metrics()
            if not dry_run:
                agent.serve_sl()
        agent.install_signal_handlers()
        if once:  # one-shot commands log warnings only: say what the wait is for
            click.echo(sweeping_text(config.collect.interval_s), err=True)
        ctx = click.get_current_context()
        ctx.exit(agent.run(cycles=1 if once else None))
    finally:
        agent.close()
