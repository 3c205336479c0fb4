"""Jobs on the fabric: which CA ports each running job's hosts own.

(Interface fixed here; the job sources and the mapping are filled in by issue 4, part 1.)
"""

from __future__ import annotations

from dataclasses import dataclass

from ibqos.fabric import PortKey
from ibqos.jobs import Job


@dataclass(frozen=True)
class MappedJob:
    """A running job and the fabric ports of its hosts.

    Attributes:
        job: the job as its source gave it.
        ports: (node GUID, port) of the CA ports of its hosts that the fabric has, in host
            order (a host with two linked HCA ports contributes both).
        hosts: the job's hosts that were found on the fabric, in job order.
        missing: the job's hosts that match no CA on the fabric.
    """

    job: Job
    ports: tuple[PortKey, ...]
    hosts: tuple[str, ...]
    missing: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """The job's id."""
        return self.job.id
