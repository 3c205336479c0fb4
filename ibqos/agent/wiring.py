"""The pipeline's parts built as the config says."""

from __future__ import annotations

from collections.abc import Mapping

from ibqos.attribute.jobmap import FileJobSource, JobSource
from ibqos.config.models import Config
from ibqos.fabric.model import Fabric, fabric_from_file, fabric_from_ibnetdiscover
from ibqos.slurm.source import SlurmJobSource


def fabric_from_config(cfg: Config, env: Mapping[str, str] | None = None) -> Fabric:
    """The fabric as the config's ``fabric`` section says: run ibnetdiscover, read a file,
    or read the lab's discovery (``ibnetdiscover.txt`` recorded when the lab came up)."""
    fc = cfg.fabric
    roots = fc.root_guids or None
    if fc.source == "file":
        assert fc.path is not None  # checked by the config
        return fabric_from_file(fc.path, root_guids=roots)
    if fc.source == "lab":
        assert cfg.lab is not None  # checked by the config
        return fabric_from_file(cfg.lab.discovered, root_guids=roots)
    return fabric_from_ibnetdiscover(env=env, timeout=fc.discover_timeout_s, root_guids=roots)


def make_job_source(config: Config) -> JobSource:
    """The job source the ``jobs`` section names: a job file/directory, or Slurm."""
    if config.jobs.source == "slurm":
        return SlurmJobSource(config.slurm)
    return FileJobSource(config.jobs.path)
