"""``ibqos status``: the plan in force and the last apply, from the agent's state."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ibqos.agent.state import load_state
from ibqos.agent.status import render_status
from ibqos.cli.options import config_option, format_option
from ibqos.config.load import find_config, load_config
from ibqos.plan.output import FORMATS


@click.command("status")
@config_option()
@format_option(FORMATS)
def status_command(path: Path | None, fmt: str) -> None:
    """Show the plan in force and the last apply result, from the agent's state directory."""
    config = load_config(find_config(path))
    state = load_state(config.agent.state_dir)
    if fmt == "json":
        doc = {
            "updated_s": state.updated_s,
            "mode": state.mode,
            "last_apply": state.last_apply,
            "plan": state.plan,
        }
        click.echo(json.dumps(doc, indent=1))
        return
    click.echo(render_status(state, config.agent.state_dir), nl=False)
