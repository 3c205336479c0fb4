"""A job as ibqos knows it: its hosts and, if declared, how it communicates.

Every job source (job files, Slurm) produces :class:`Job` records; the file format is in
:mod:`ibqos.jobs.schema` and ``docs/jobs.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

PATTERNS: tuple[str, ...] = ("all-to-all", "ring", "halo", "random-pairs", "matrix")
"""Communication patterns a job may declare."""

#: what the lab's traffic model needs of every job; optional for the agent
TRAFFIC_KEYS = ("pattern", "rate_bytes_per_s", "duty", "period_s")


@dataclass(frozen=True)
class Job:
    """One job as declared in a job file.

    Attributes:
        id: scheduler job id, unique within a file (or directory).
        nodes: host names in NodeSet (sorted) order, without repeats.
        pattern: one of :data:`PATTERNS`; "" when the job declares none.
        rate_bytes_per_s: bytes per second each node sends while communicating; 0.0 when
            not declared (then *duty* and *period_s* are their defaults too).
        duty: share of each iteration spent communicating, in (0, 1].
        period_s: iteration length in seconds.
        name: application name.
        user: user name, if known.
        start_time: seconds since the epoch (UTC), if known.
        halo_dims: halo grid dimensions (product == node count); None means one dimension.
        seed: seed for the random-pairs pairing; None lets the model derive one from the id.
        matrix: matrix pattern weights, rows = senders, columns = receivers, in node order.
        host_cpus: (host, CPUs the job holds there) as the scheduler allocated them, for
            hosts it may share with other jobs (Slurm's ``job_resources``); empty when the
            source does not say.  Not a job file key.
    """

    id: str
    nodes: tuple[str, ...]
    pattern: str = ""
    rate_bytes_per_s: float = 0.0
    duty: float = 1.0
    period_s: float = 1.0
    name: str = ""
    user: str | None = None
    start_time: float | None = None
    halo_dims: tuple[int, ...] | None = None
    seed: int | None = None
    matrix: tuple[tuple[float, ...], ...] | None = None
    host_cpus: tuple[tuple[str, int], ...] = ()

    @property
    def has_rates(self) -> bool:
        """The job declares how much it sends (rate, duty, period), as the lab needs."""
        return self.rate_bytes_per_s > 0

    def to_dict(self) -> dict[str, object]:
        """Return a plain mapping in job file form; optional keys are left out when unset."""
        out = {
            "id": self.id,
            "name": self.name or None,
            "user": self.user,
            "nodes": str(NodeSet.fromlist(self.nodes, resolver=RESOLVER_NOGROUP)),
            "pattern": self.pattern or None,
            **(
                {"rate_bytes_per_s": self.rate_bytes_per_s, "duty": self.duty}
                | {"period_s": self.period_s}
                if self.has_rates
                else {}
            ),
            "start_time": self.start_time,
            "halo_dims": None if self.halo_dims is None else list(self.halo_dims),
            "seed": self.seed,
            "matrix": None if self.matrix is None else [list(row) for row in self.matrix],
        }
        return {key: value for key, value in out.items() if value is not None}


def shared_nodes(jobs: Sequence[Job]) -> dict[str, tuple[str, ...]]:
    """Map each host used by more than one job to those jobs' ids, in job order."""
    users: dict[str, list[str]] = {}
    for job in jobs:
        for node in job.nodes:
            users.setdefault(node, []).append(job.id)
    return {node: tuple(ids) for node, ids in users.items() if len(ids) > 1}
