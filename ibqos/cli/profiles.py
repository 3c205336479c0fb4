"""``ibqos characterize learn`` and ``profiles``: the job profiles, and what the commands
that record into them share (the profile directory, the names that key a profile)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from ibqos.agent.state import load_state
from ibqos.classify.prior import learn
from ibqos.classify.profiles import Profile, ProfileStore, check_name
from ibqos.cli.options import (
    CHARACTERIZE_CONFIG_HELP,
    config_option,
    load_or_defaults,
    profiles_option,
)
from ibqos.config.models import Config
from ibqos.errors import ProfileError
from ibqos.plan.output import align


def profile_store(config: Config, profiles_dir: Path | None) -> ProfileStore:
    """The profiles in ``--profiles`` or else ``profiles.dir`` (ProfileError if neither)."""
    directory = profiles_dir or config.profiles.dir
    if directory is None:
        raise ProfileError("no profile directory: give --profiles DIR or set profiles.dir")
    return ProfileStore(directory)


def check_names(application: str | None, user: str | None) -> None:
    """--save APP and --user must be able to key a profile (ProfileError otherwise)."""
    if application is not None:
        check_name(application, "--save")
    if user is not None:
        check_name(user, "--user")


def saved_line(profile: Profile) -> str:
    """The line that tells where a profile was saved and what it now expects."""
    return f"profile {profile.path}: {profile.expected_class}, confidence {profile.confidence:g}"


@click.command("learn")
@click.option(
    "--state",
    "state_dir",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="The agent's state directory (agent.state_dir).",
)
@config_option(CHARACTERIZE_CONFIG_HELP)
@profiles_option
def learn_command(state_dir: Path, path: Path | None, profiles_dir: Path | None) -> None:
    """Add the measured classes of finished applications the agent recorded (its
    state.json: each application's last finished job) to their profiles; a job already
    in its profile (by id and end time) is not added again."""
    config = load_or_defaults(path)
    store = profile_store(config, profiles_dir)
    state = load_state(state_dir)
    added = learn(store, state.finished.values(), time.time(), strict=True)
    click.echo(f"{added} profiles updated in {store.directory}")


@click.command("profiles")
@config_option(CHARACTERIZE_CONFIG_HELP)
@profiles_option
def profiles_command(path: Path | None, profiles_dir: Path | None) -> None:
    """List the profiles (checking every file)."""
    store = profile_store(load_or_defaults(path), profiles_dir)
    header = ["APPLICATION", "USER", "NODES", "CLASS", "CONFIDENCE", "MODEL", "OBSERVATIONS"]
    header.append("FILE")
    rows = []
    for p in sorted(store.profiles, key=lambda p: p.key[0]):
        model = "-" if p.model is None else p.model.pattern
        rows.append(
            [
                p.application,
                p.user or "-",
                "-" if p.nodes is None else str(p.nodes),
                p.expected_class,
                f"{p.confidence:.2f}",
                model,
                str(len(p.observations)),
                p.path.name if p.path else "-",
            ]
        )
    click.echo("\n".join(align(header, rows)))
