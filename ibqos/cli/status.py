"""``ibqos status``: the plan in force and the last apply, from the agent's state.

No state at all (no agent has run with this state directory) is an error, exit 1: a
health check that runs ``ibqos status`` must not pass on a host where ibqos never ran.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ibqos.agent.state import load_state
from ibqos.agent.status import render_status
from ibqos.cli.options import config_option, format_option
from ibqos.errors import StateError
from ibqos.plan.output import FORMATS


@click.command("status")
@config_option()
@format_option(FORMATS)
def status_command(path: Path | None, fmt: str) -> None:
    """Show the plan in force and the last apply result, from the agent's state directory.

    Exits 1 when the state directory holds no agent state (ibqos run never ran with it).
    """
    from ibqos.config.load import find_config, load_config  # pydantic: not for --help

    config = load_config(find_config(path))
    state_dir = config.agent.state_dir
    state = load_state(state_dir)
    if not state.updated_s:
        raise StateError(f"{state_dir}: no agent state: ibqos run has not run with this directory")
    if fmt == "json":
        doc = {
            "updated_s": state.updated_s,
            "mode": state.mode,
            "last_apply": state.last_apply,
            "plan": state.plan,
        }
        click.echo(json.dumps(doc, indent=1))
        return
    click.echo(render_status(state, state_dir), nl=False)
