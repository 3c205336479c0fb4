"""A job's communication: who sends how many bytes to whom, interval by interval.

The input of a characterization (:mod:`ibqos.classify.levels`): from a lab job's declared
pattern and rates (``docs/jobs.md``), from a steady matrix of bytes per second (a profile's
traffic model, :meth:`ibqos.classify.profiles.Model.traffic`), or from a trace
(``ibqos.characterize.trace``).  Units: bytes, seconds, bytes per second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ibqos.attribute.patterns import traffic_matrix
from ibqos.errors import JobsError
from ibqos.jobs.model import Job

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class NodeTraffic:
    """Bytes sent between a job's nodes (0 .. nodes - 1, in node order), per interval.

    Attributes:
        nodes: the job's node count.
        interval_s: length of each interval, seconds.
        span_s: seconds the traffic covers (at least the sum of the intervals: time
            between intervals has no traffic).
        interval, src, dst: per record, its interval and the two nodes (never the same).
        bytes: per record, bytes sent in the interval.
    """

    nodes: int
    interval_s: FloatArray
    span_s: float
    interval: IntArray
    src: IntArray
    dst: IntArray
    bytes: FloatArray

    @classmethod
    def from_job(cls, job: Job) -> NodeTraffic:
        """A lab job's declared traffic (``docs/jobs.md``): one period of *period_s*
        seconds whose first ``duty * period_s`` seconds send its pattern at full rate.

        Raises:
            JobsError: the job does not declare pattern, rate, duty and period.
        """
        if not (job.pattern and job.has_rates):
            raise JobsError(
                f"job {job.id}: needs pattern, rate_bytes_per_s, duty and period_s"
                " to be characterized"
            )
        m = traffic_matrix(job)
        s, d = np.nonzero(m)
        comm_s = job.duty * job.period_s
        return cls(
            nodes=len(job.nodes),
            interval_s=np.array([comm_s]),
            span_s=job.period_s,
            interval=np.zeros(len(s), dtype=np.int64),
            src=s.astype(np.int64),
            dst=d.astype(np.int64),
            bytes=m[s, d] * comm_s,
        )

    @classmethod
    def from_matrix(cls, bytes_per_s: FloatArray) -> NodeTraffic:
        """Steady traffic: node i sends ``bytes_per_s[i, j]`` bytes per second to node j
        (one interval of one second, so mean and peak are the same)."""
        s, d = np.nonzero(bytes_per_s)
        return cls(
            nodes=len(bytes_per_s),
            interval_s=np.array([1.0]),
            span_s=1.0,
            interval=np.zeros(len(s), dtype=np.int64),
            src=s.astype(np.int64),
            dst=d.astype(np.int64),
            bytes=bytes_per_s[s, d].astype(np.float64),
        )

    def matrix(self) -> FloatArray:
        """Mean bytes per second from node i to node j over the span."""
        m = np.zeros((self.nodes, self.nodes))
        np.add.at(m, (self.src, self.dst), self.bytes)
        return m / self.span_s

    def mean_injection_bytes_per_s(self) -> float:
        """Mean bytes per second one node sends (all nodes' traffic over the node count)."""
        return float(self.bytes.sum()) / self.span_s / max(self.nodes, 1)
