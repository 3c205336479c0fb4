"""The job source the configuration's ``jobs`` section names: a job file, or Slurm.

Here, in the lowest layer that knows both kinds: :class:`~ibqos.attribute.jobmap.
FileJobSource` below, :class:`~ibqos.slurm.source.SlurmJobSource` beside.
"""

from __future__ import annotations

from ibqos.attribute.jobmap import FileJobSource, JobSource
from ibqos.config.models import Config
from ibqos.slurm.source import SlurmJobSource


def make_job_source(config: Config) -> JobSource:
    """The job source the ``jobs`` section names: a job file/directory, or Slurm
    (``jobs.source: slurm``, with the ``slurm`` section)."""
    if config.jobs.source == "slurm":
        return SlurmJobSource(config.slurm)
    return FileJobSource(config.jobs.path)
