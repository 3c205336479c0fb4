"""Attribution: which running job sent the traffic the counters saw, per fat-tree level.

Pipeline stage 2 of ibqos (docs/design.md §5.1, "Per-job per-level attribution")::

    jobs ──► JobMapper.map() ──► MappedJob (hosts, CA ports) ──► Attributor.attribute()
         ──► Attribution (bytes/s per job and level, the share measured)

- :mod:`~ibqos.attribute.jobmap`: job sources, and the jobs' hosts on the fabric's ports;
- :mod:`~ibqos.attribute.patterns`: communication patterns as traffic matrices (a job's
  declared pattern is its attribution prior);
- :mod:`~ibqos.attribute.attribution`: the split of each subtree's uplink traffic among
  the jobs with nodes there;
- :mod:`~ibqos.attribute.sharing`: how the running jobs share the tree.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.attribute.attribution import Attribution, Attributor, JobTraffic
    from ibqos.attribute.jobmap import (
        FileJobSource,
        JobMapper,
        JobSource,
        MappedJob,
        host_ports,
        log_warnings,
        map_jobs,
        natural_key,
    )
    from ibqos.attribute.patterns import traffic_matrix
    from ibqos.attribute.sharing import JobSharing, SharingTables
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            ".attribution": ("Attribution", "Attributor", "JobTraffic"),
            ".jobmap": (
                "FileJobSource",
                "JobMapper",
                "JobSource",
                "MappedJob",
                "host_ports",
                "log_warnings",
                "map_jobs",
                "natural_key",
            ),
            ".patterns": ("traffic_matrix",),
            ".sharing": ("JobSharing", "SharingTables"),
        },
    )

__all__ = [
    "Attribution",
    "Attributor",
    "FileJobSource",
    "JobMapper",
    "JobSharing",
    "JobSource",
    "JobTraffic",
    "MappedJob",
    "SharingTables",
    "host_ports",
    "log_warnings",
    "map_jobs",
    "natural_key",
    "traffic_matrix",
]
