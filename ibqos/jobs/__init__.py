"""Jobs: which jobs run on which hosts, and how they communicate.

:class:`Job` is what every job source produces; job files (YAML or JSON) are read by
:func:`load_jobs` and validated against the models of :mod:`ibqos.jobs.schema`, which also
give their JSON Schema; host lists are expanded by :func:`expand_hosts`.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.jobs.hosts import expand_hosts
    from ibqos.jobs.jobfile import (
        check_hosts,
        dump_jobs,
        job_files,
        json_schema,
        load_jobs,
        parse_jobs,
    )
    from ibqos.jobs.model import PATTERNS, TRAFFIC_KEYS, Job, shared_nodes
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            ".hosts": ("expand_hosts",),
            ".jobfile": (
                "check_hosts",
                "dump_jobs",
                "job_files",
                "json_schema",
                "load_jobs",
                "parse_jobs",
            ),
            ".model": ("PATTERNS", "TRAFFIC_KEYS", "Job", "shared_nodes"),
        },
    )

__all__ = [
    "PATTERNS",
    "TRAFFIC_KEYS",
    "Job",
    "check_hosts",
    "dump_jobs",
    "expand_hosts",
    "job_files",
    "json_schema",
    "load_jobs",
    "parse_jobs",
    "shared_nodes",
]
