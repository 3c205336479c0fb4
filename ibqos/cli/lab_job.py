"""``ibqos lab job``: add jobs to a running lab and remove them."""

from __future__ import annotations

from pathlib import Path

import click

from ibqos.cli.options import root_option
from ibqos.jobs.jobfile import parse_jobs
from ibqos.jobs.model import PATTERNS
from ibqos.lab import manage
from ibqos.lab.files import default_root


@click.group("job")
def lab_job() -> None:
    """Add or remove jobs of a running lab (edits its job file; applied at the next tick)."""


@lab_job.command("add")
@click.argument("name")
@click.option("--id", "job_id", required=True, help="Job id.")
@click.option("--nodes", required=True, help="Host list, e.g. cn[0001-0008].")
@click.option("--pattern", type=click.Choice(PATTERNS), required=True)
@click.option(
    "--rate",
    "rate",
    type=float,
    required=True,
    help="Bytes per second per node while communicating.",
)
@click.option(
    "--duty",
    type=float,
    default=1.0,
    show_default=True,
    help="Share of each iteration spent communicating.",
)
@click.option(
    "--period", type=float, default=0.1, show_default=True, help="Iteration length in seconds."
)
@click.option("--app", "app", default="", help="Application name.")
@click.option("--user", default=None)
@root_option
def lab_job_add(
    name: str,
    job_id: str,
    nodes: str,
    pattern: str,
    rate: float,
    duty: float,
    period: float,
    app: str,
    user: str | None,
    root: Path | None,
) -> None:
    """Add a job to a lab."""
    item: dict[str, object] = {
        "id": job_id,
        "nodes": nodes,
        "pattern": pattern,
        "rate_bytes_per_s": rate,
        "duty": duty,
        "period_s": period,
    }
    if app:
        item["name"] = app
    if user:
        item["user"] = user
    new = parse_jobs({"jobs": [item]}, "command line", traffic=True)
    jobs = manage.edit_jobs(name, root=root or default_root(), add=new)
    click.echo(f"lab {name}: job {job_id} added ({len(jobs)} jobs)")


@lab_job.command("remove")
@click.argument("name")
@click.argument("job_ids", nargs=-1, required=True)
@root_option
def lab_job_remove(name: str, job_ids: tuple[str, ...], root: Path | None) -> None:
    """Remove jobs from a lab."""
    jobs = manage.edit_jobs(name, root=root or default_root(), remove=job_ids)
    click.echo(f"lab {name}: removed {', '.join(job_ids)} ({len(jobs)} jobs left)")
