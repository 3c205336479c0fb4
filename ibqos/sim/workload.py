"""Jobs as bulk-synchronous iterations, as both contention models run them.

A job of the lab's job format (``docs/jobs.md``) iterates: a compute phase of
``(1 - duty) x period_s`` seconds, then a communication phase in which every flow of its
pattern's traffic matrix moves ``rate x duty x period_s`` bytes (so, alone on an
uncontended fabric, an iteration lasts ``period_s`` and the hosts send at their declared
rate while communicating).  The next iteration starts when the job's last byte of the
phase has arrived.  Every job starts at time 0 with its compute phase; jobs that finished
the iterations asked for keep iterating until the last job has, so the mix stays the same
for everyone (what a job sees is the others' traffic, not their absence).

Results: seconds; ``t_s`` is when a job's N-th iteration ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ibqos.errors import SimError
from ibqos.jobs.model import Job
from ibqos.sim.network import Flows, Network

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SimJob:
    """A job ready to simulate.

    Attributes:
        job: the job as declared.
        compute_s: compute phase per iteration (s).
        comm_s: communication phase per iteration at the declared rate (s).
        flows: its flows at the declared rate.
        load: bytes per second it puts on each link while communicating at that rate.
    """

    job: Job
    compute_s: float
    comm_s: float
    flows: Flows
    load: FloatArray

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def bytes_per_iteration(self) -> float:
        """Bytes the job's hosts inject per iteration."""
        return float(self.flows.rate.sum()) * self.comm_s


def prepare(net: Network, jobs: Sequence[Job]) -> list[SimJob]:
    """Route every job's flows.

    Raises:
        SimError: a job without traffic keys, a job id twice, or a host shared by two jobs.
    """
    seen: dict[str, str] = {}
    out = []
    ids: set[str] = set()
    for job in jobs:
        if job.id in ids:
            raise SimError(f"job {job.id}: listed twice")
        ids.add(job.id)
        if not job.has_rates or not job.pattern:
            raise SimError(
                f"job {job.id}: needs pattern, rate_bytes_per_s, duty and period_s to simulate"
            )
        for host in job.nodes:
            other = seen.setdefault(host, job.id)
            if other != job.id:
                raise SimError(f"job {job.id}: host {host} is also in job {other}")
        flows = net.flows(job)
        comm = job.duty * job.period_s
        out.append(SimJob(job, job.period_s - comm, comm, flows, net.load(flows)))
    return out


@dataclass(frozen=True)
class JobRun:
    """One job's part of a run.

    Attributes:
        id: the job.
        nodes: its host count.
        iteration_ends_s: when each of its iterations ended (s from the start).
        t_s: when its N-th iteration ended (s).
    """

    id: str
    nodes: int
    iteration_ends_s: tuple[float, ...]
    t_s: float


@dataclass(frozen=True)
class RunResult:
    """What a model computed for one mix under one QoS setup.

    Attributes:
        model: "fluid" or "packet".
        jobs: per job, in mix order.
        sim_time_s: simulated seconds covered.
        link_bytes: bytes each link transmitted over the run (by transmitting port).
        events: events processed (phase changes for the fluid model, packet events for
            the packet model): a measure of the work done.
    """

    model: str
    jobs: dict[str, JobRun]
    sim_time_s: float
    link_bytes: FloatArray = field(repr=False)
    events: int
