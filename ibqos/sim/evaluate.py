"""A mix under a QoS setup: each job's time alone and sharing, its contention, the totals.

For a job, ``T_alone`` is its time for N iterations alone on the fabric (same placement,
routes and lane; its own traffic may still contend with itself), ``T_sharing`` the same
with the whole mix running, and ``contention = T_sharing - T_alone`` (seconds).  The total
is the sum over jobs; node-time wasted weighs each job's contention by its host count
(node-seconds).  ``E = total(baseline) / total(policy)``: above 1, the policy wastes less
than the baseline (everything on one VL, the fabric before ibqos).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ibqos.errors import (
    SimError,
)
from ibqos.sim.fluid import simulate_fluid
from ibqos.sim.network import Network
from ibqos.sim.packet import PACKET_BUFFER, simulate_packets
from ibqos.sim.qos import (
    Arbitration,
)
from ibqos.sim.senders import BUFFER_PACKETS, Granularity, granularity
from ibqos.sim.workload import RunResult, SimJob

MODELS = ("fluid", "packet")


@dataclass(frozen=True)
class JobOutcome:
    """One job: seconds for N iterations alone and sharing, and the difference."""

    id: str
    nodes: int
    sl: int
    vl: int
    t_alone_s: float
    t_sharing_s: float

    @property
    def contention_s(self) -> float:
        return self.t_sharing_s - self.t_alone_s


@dataclass(frozen=True)
class Outcome:
    """A mix under one policy.

    Attributes:
        policy: the policy's name.
        model: the model that computed it.
        iterations: N.
        jobs: per job, in mix order.
        setup: the QoS setup simulated.
        sim_time_s: simulated seconds of the sharing run.
        buffer_packets: the model's switch input buffers per VL, MTU packets (0: none).
        plan_buffer_packets: for a setup planned by simulating the fluid model (ibqos,
            optimal), that model's buffers (MTU packets per VL); None for the others.
    """

    policy: str
    model: str
    iterations: int
    jobs: tuple[JobOutcome, ...]
    setup: Arbitration
    sim_time_s: float
    buffer_packets: int
    plan_buffer_packets: int | None = None

    @property
    def total_contention_s(self) -> float:
        return math.fsum(j.contention_s for j in self.jobs)

    @property
    def node_time_wasted_s(self) -> float:
        """Node-seconds lost to contention: each job's contention times its hosts."""
        return math.fsum(j.contention_s * j.nodes for j in self.jobs)

    def efficiency(self, baseline: Outcome) -> float:
        """``E = total(baseline) / total(this)``; inf when this policy has no contention."""
        mine = self.total_contention_s
        if mine <= 0:
            return math.inf if baseline.total_contention_s > 0 else 1.0
        return baseline.total_contention_s / mine


def run(
    model: str,
    net: Network,
    jobs: Sequence[SimJob],
    arb: Arbitration,
    iterations: int,
    per: Granularity = "auto",
    buffer_packets: int | None = None,
) -> RunResult:
    """Run one model on a mix (*per*: the fluid model's senders, see :mod:`ibqos.sim.senders`;
    *buffer_packets*: the switch input buffers per VL, in packets; None: the model's own
    default, :data:`~ibqos.sim.packet.PACKET_BUFFER` or the fluid model's none).

    Raises:
        SimError: an unknown model, or a setup the model cannot run.
    """
    buffers = buffers_of(model, buffer_packets)  # what the outcome reports, too
    if model == "fluid":
        return simulate_fluid(net, jobs, arb, iterations, per, buffers)
    if model == "packet":
        return simulate_packets(net, jobs, arb, iterations, buffer_packets=buffers)
    raise SimError(f"--model {model!r}: expected one of {', '.join(MODELS)}")


def buffers_of(model: str, buffer_packets: int | None) -> int:
    """The switch input buffers per VL (MTU packets) a run of *model* has when given
    *buffer_packets* (None: the model's own default)."""
    if buffer_packets is not None:
        return buffer_packets
    return PACKET_BUFFER if model == "packet" else BUFFER_PACKETS


def alone(
    model: str,
    net: Network,
    jobs: Sequence[SimJob],
    arb: Arbitration,
    iterations: int,
    per: Granularity = "auto",
    buffer_packets: int | None = None,
) -> dict[str, float]:
    """Each job's ``T_alone`` (seconds for *iterations* iterations, alone)."""
    if model == "fluid" and per == "auto":
        per = granularity(jobs)  # alone as in the mix, or the two would not compare
    return {
        j.id: run(model, net, [j], arb, iterations, per, buffer_packets).jobs[j.id].t_s
        for j in jobs
    }


def evaluate(
    model: str,
    net: Network,
    jobs: Sequence[SimJob],
    arb: Arbitration,
    iterations: int,
    t_alone: Mapping[str, float] | None = None,
    per: Granularity = "auto",
    buffer_packets: int | None = None,
    result: RunResult | None = None,
) -> Outcome:
    """The mix under *arb*; *t_alone* reused when given (it does not depend on weights),
    and *result* too: the mix's run under *arb* in this model, if already made."""
    if t_alone is None:
        t_alone = alone(model, net, jobs, arb, iterations, per, buffer_packets)
    if result is None:
        result = run(model, net, jobs, arb, iterations, per, buffer_packets)
    out = tuple(
        JobOutcome(
            j.id,
            len(j.job.nodes),
            arb.job_sl.get(j.id, 0),
            arb.vl_of(j.id),
            t_alone[j.id],
            result.jobs[j.id].t_s,
        )
        for j in jobs
    )
    buffers = buffers_of(model, buffer_packets)
    return Outcome(arb.name, model, iterations, out, arb, result.sim_time_s, buffers)
