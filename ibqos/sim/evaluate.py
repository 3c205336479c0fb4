"""A mix under a QoS setup: each job's time alone and sharing, its contention, the totals.

For a job, ``T_alone`` is its time for N iterations alone on the fabric (same placement,
routes and lane; its own traffic may still contend with itself), ``T_sharing`` the same
with the whole mix running, and ``contention = T_sharing - T_alone`` (seconds).  The total
is the sum over jobs; node-time wasted weighs each job's contention by its host count
(node-seconds).  ``E = total(baseline) / total(policy)``: above 1, the policy wastes less
than the baseline (everything on one VL, the fabric before ibqos).

:class:`RunSettings` holds what the runs of one mix share (the model, the fabric, the
jobs, N and the model's options) and runs the mix under one setup after another.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ibqos.errors import SimError
from ibqos.sim.fluid import simulate_fluid
from ibqos.sim.network import Network
from ibqos.sim.packet import PACKET_BUFFER, simulate_packets
from ibqos.sim.qos import Arbitration
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


def buffers_of(model: str, buffer_packets: int | None) -> int:
    """The switch input buffers per VL (MTU packets) a run of *model* has when given
    *buffer_packets* (None: the model's own default)."""
    if buffer_packets is not None:
        return buffer_packets
    return PACKET_BUFFER if model == "packet" else BUFFER_PACKETS


@dataclass(frozen=True)
class RunSettings:
    """The runs of one mix in one model: all that stays while the QoS setup changes.

    Attributes:
        model: the model that runs it (:data:`MODELS`).
        net: the fabric and its routes.
        jobs: the mix (:func:`ibqos.sim.workload.prepare` on *net*).
        iterations: N, the iterations each job runs.
        per: the fluid model's senders (:data:`~ibqos.sim.senders.Granularity`).
        buffer_packets: the switch input buffers per VL, in MTU packets; None: the
            model's own default, :data:`~ibqos.sim.packet.PACKET_BUFFER` or the fluid
            model's none.
    """

    model: str
    net: Network
    jobs: Sequence[SimJob]
    iterations: int
    per: Granularity = "auto"
    buffer_packets: int | None = None

    @property
    def buffers(self) -> int:
        """The switch input buffers per VL (MTU packets) the runs have."""
        return buffers_of(self.model, self.buffer_packets)

    def run(self, arb: Arbitration) -> RunResult:
        """Run the mix under *arb*.

        Raises:
            SimError: an unknown model, or a setup the model cannot run.
        """
        buffers = self.buffers  # what the outcome reports, too
        if self.model == "fluid":
            return simulate_fluid(self.net, self.jobs, arb, self.iterations, self.per, buffers)
        if self.model == "packet":
            return simulate_packets(
                self.net, self.jobs, arb, self.iterations, buffer_packets=buffers
            )
        raise SimError(f"--model {self.model!r}: expected one of {', '.join(MODELS)}")

    def alone(self, arb: Arbitration) -> dict[str, float]:
        """Each job's ``T_alone`` under *arb* (seconds for N iterations, alone)."""
        each = self
        if self.model == "fluid" and self.per == "auto":
            # alone as in the mix, or the two would not compare
            each = replace(self, per=granularity(self.jobs))
        return {j.id: replace(each, jobs=[j]).run(arb).jobs[j.id].t_s for j in self.jobs}

    def evaluate(
        self,
        arb: Arbitration,
        t_alone: Mapping[str, float] | None = None,
        result: RunResult | None = None,
    ) -> Outcome:
        """The mix under *arb*; *t_alone* reused when given (it does not depend on
        weights), and *result* too: the mix's run under *arb*, if already made."""
        if t_alone is None:
            t_alone = self.alone(arb)
        if result is None:
            result = self.run(arb)
        out = tuple(
            JobOutcome(
                j.id,
                len(j.job.nodes),
                arb.job_sl.get(j.id, 0),
                arb.vl_of(j.id),
                t_alone[j.id],
                result.jobs[j.id].t_s,
            )
            for j in self.jobs
        )
        return Outcome(
            arb.name, self.model, self.iterations, out, arb, result.sim_time_s, self.buffers
        )

    def best_of(
        self, setups: Sequence[Arbitration], t_alone: Mapping[str, float]
    ) -> tuple[Outcome, list[float]]:
        """Each of *setups* run: the outcome of the one with the least total contention
        (the first of equals), and every setup's total (s), in order.

        Raises:
            SimError: no setup to try.
        """
        best: Outcome | None = None
        totals: list[float] = []
        for arb in setups:
            out = self.evaluate(arb, t_alone)
            totals.append(out.total_contention_s)
            if best is None or out.total_contention_s < best.total_contention_s:
                best = out
        if best is None:
            raise SimError("the search has no setup to try")
        return best, totals


def alone(
    model: str,
    net: Network,
    jobs: Sequence[SimJob],
    arb: Arbitration,
    iterations: int,
    per: Granularity = "auto",
    buffer_packets: int | None = None,
) -> dict[str, float]:
    """Each job's ``T_alone`` (seconds for *iterations* iterations, alone):
    :meth:`RunSettings.alone`."""
    return RunSettings(model, net, jobs, iterations, per, buffer_packets).alone(arb)


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
    """The mix under *arb*: :meth:`RunSettings.evaluate`."""
    runs = RunSettings(model, net, jobs, iterations, per, buffer_packets)
    return runs.evaluate(arb, t_alone, result)
