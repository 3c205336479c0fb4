"""``ibqos check-config`` and ``ibqos check-opensm``: validate files without running.

The checkers are imported when a command runs: its ``--help`` needs none of them.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command("check-opensm")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--data-vls", type=click.IntRange(1, 15), help="Data VLs of the fabric (OperVLs).")
@click.option("--vlarb-cap", type=click.IntRange(1, 64), help="VLArbLowCap/HighCap of the ports.")
@click.option(
    "--partitions",
    type=click.Path(path_type=Path, dir_okay=False),
    help="OpenSM's partitions.conf (default: the one an opensm.conf among FILES names, else"
    " /etc/opensm/partitions.conf; a missing file means OpenSM's Default partition only).",
)
def check_opensm_command(
    files: tuple[Path, ...], data_vls: int | None, vlarb_cap: int | None, partitions: Path | None
) -> None:
    """Check opensm.conf and qos-policy.conf files against OpenSM's grammar and its traps.

    One line per finding (FILE:LINE: message); exit 1 if any is an error, i.e. something
    OpenSM would drop or misread.
    """
    from ibqos.opensm.check import check_file, partitions_file
    from ibqos.opensm.partitions import read_partitions

    parts = read_partitions(partitions or partitions_file(files))
    errors = 0
    for file in files:
        findings = check_file(
            file,
            data_vls=data_vls,
            vlarb_low_cap=vlarb_cap,
            vlarb_high_cap=vlarb_cap,
            partitions=parts,
        )
        for finding in findings:
            click.echo(f"{finding.severity}: {finding}")
        errors += sum(f.severity == "error" for f in findings)
        if not findings:
            click.echo(f"{file}: ok")
    if errors:
        click.get_current_context().exit(1)


@click.command("check-config")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--syntax-only",
    is_flag=True,
    help="Only validate the file; do not look at what it points at.",
)
def check_config_command(file: Path, syntax_only: bool) -> None:
    """Validate an ibqos config file, then check what it points at: OpenSM's files and
    process, the job source, the state directory, the metrics port and the SL socket.

    One line per problem (error, warning or note); exit 1 if any is an error.
    """
    from ibqos.config.load import load_config
    from ibqos.deploy.preflight import preflight

    config = load_config(file)
    errors = 0
    if not syntax_only:
        for finding in preflight(config):
            click.echo(str(finding))
            errors += finding.severity == "error"
    if errors:
        click.get_current_context().exit(1)
    click.echo(f"{file}: ok")
