"""The deployment commands of ``ibqos``: ``install`` and ``restore`` (docs/deploy.md).

Click commands only; :mod:`ibqos.cli` adds them to its group, which turns errors into
one line and exit status 1.
"""

from __future__ import annotations

from pathlib import Path

import click

from ibqos.cli.options import config_option
from ibqos.config.load import find_config, load_config
from ibqos.deploy.install import UNIT, UNIT_DIR, install, plan, sandbox_problem
from ibqos.deploy.restore import restore
from ibqos.errors import ApplyError


@click.command("install")
@click.option(
    "--prefix",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("/"),
    show_default=True,
    help="Root to install under (a package build's staging directory).",
)
@click.option(
    "--unit-dir",
    type=click.Path(path_type=Path),
    default=UNIT_DIR,
    show_default=True,
    help="Where the units go, relative to --prefix (packages: usr/lib/systemd/system).",
)
@click.option(
    "--opensm-unit",
    metavar="NAME",
    help="The site's OpenSM unit (Debian: opensm@<GUID>.service; default opensm.service).",
)
@click.option(
    "--bin",
    "bin_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The ibqos executable the unit runs (default: this one).",
)
@click.option("--dry-run", is_flag=True, help="List what would be installed; write nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Install even when the unit's sandbox (ProtectHome=, PrivateTmp=) hides the"
    " executable: for a drop-in that relaxes it.",
)
def install_command(
    prefix: Path,
    unit_dir: Path,
    opensm_unit: str | None,
    bin_path: Path | None,
    dry_run: bool,
    force: bool,
) -> None:
    """Install the systemd unit, its environment file, the example config and the Slurm
    scripts; an admin's existing files are kept (the shipped ones go beside as .new).

    Refuses (unless --force) an executable the unit's sandbox hides: one under /home,
    /root or /run/user (ProtectHome=yes) or /tmp, /var/tmp (PrivateTmp=yes).
    """
    steps = plan(prefix, unit_dir=unit_dir, opensm_unit=opensm_unit, bin_path=bin_path, force=force)
    hidden = sandbox_problem(steps[0].text) if force else None
    if hidden is not None:
        click.echo(f"warning: {hidden} (--force: a drop-in must relax the sandbox)", err=True)
    if dry_run:
        for step in steps:
            click.echo(f"would install {step.target} (mode {step.mode:o})")
        return
    for line in install(steps):
        click.echo(line)
    unit = opensm_unit or "opensm.service"
    click.echo(
        f"next: edit {prefix / 'etc/ibqos/ibqos.yaml'} (mode: observe to start), then\n"
        f"  systemctl daemon-reload && systemctl enable --now {UNIT}\n"
        f"  systemctl add-wants {unit} {UNIT}   # back up with OpenSM after its restarts"
    )


@click.command("restore")
@config_option()
def restore_command(path: Path | None) -> None:
    """Take ibqos's blocks and keys out of OpenSM's files, keeping every other line as it
    is now, signal OpenSM, check its log and verify through the SA; on an error the files
    of before the restore go back.

    Refuses while an ibqos agent runs on the state directory (in either mode it would
    overwrite the restore): stop it first.  Exit 1 if OpenSM did not take the files (its
    log, or the SA serving the jobs' paths otherwise than the restored files give).
    """
    config = load_config(find_config(path))
    done = restore(config)
    for note in done.notes:
        click.echo(f"note: {note}", err=True)
    if not done.files:
        backups = config.agent.state_dir / "backup"
        click.echo(f"nothing to restore: ibqos never wrote OpenSM's files (no {backups}/*.orig)")
        return
    result = done.result
    if not result.ok:
        raise ApplyError(f"restore failed, {result.summary()}")
    if not result.changed:
        click.echo("nothing to restore: OpenSM's files hold no ibqos lines")
        return
    for file, text in done.files.items():
        click.echo(f"restored {file}" if text is not None else f"removed {file} (none at first)")
    click.echo(f"OpenSM: {result.summary()}")
    for line in done.verified:
        click.echo(f"verified: {line}")
