"""A mix under a QoS setup: each job's time alone and sharing, its slowdown, the measure.

For a job, ``T_alone`` is its time for N iterations alone on the fabric (same placement,
routes and lane; its own traffic may still contend with itself), ``T_sharing`` the same
with the whole mix running, its slowdown ``s = T_sharing / T_alone`` and its contention
``T_sharing - T_alone`` (seconds).

**The measure** of a mix under a setup is ``S``, the node-weighted mean slowdown
``sum_j nodes_j * s_j / sum_j nodes_j``: the machine time lost per unit of time, what the
tuner scores on the fabric.  A second objective, chosen explicitly
(:data:`OBJECTIVES`), is the worst job's slowdown.  Total contention (the sum of the jobs'
contention seconds) weighs each job by the length of its iterations, so it is reported
beside S, never instead of it.  A policy's **gain** over a baseline is the share of the
baseline's excess slowdown ``S - 1`` it removes: ``1 - (S - 1) / (S_baseline - 1)``.

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
#: what a setup is judged by: ``node-time`` (S, the node-weighted mean slowdown) or
#: ``worst-job`` (the largest slowdown of any job)
OBJECTIVES = ("node-time", "worst-job")


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

    @property
    def slowdown(self) -> float:
        """``T_sharing / T_alone`` (1.0: no contention; inf when alone took no time)."""
        return self.t_sharing_s / self.t_alone_s if self.t_alone_s > 0 else math.inf


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
        bound: the setup is the best a search knew when a limit stopped it (optimal):
            its measure bounds the optimum's from above, it is not the optimum.
    """

    policy: str
    model: str
    iterations: int
    jobs: tuple[JobOutcome, ...]
    setup: Arbitration
    sim_time_s: float
    buffer_packets: int
    plan_buffer_packets: int | None = None
    bound: bool = False

    @property
    def total_contention_s(self) -> float:
        return math.fsum(j.contention_s for j in self.jobs)

    @property
    def node_time_wasted_s(self) -> float:
        """Node-seconds lost to contention: each job's contention times its hosts."""
        return math.fsum(j.contention_s * j.nodes for j in self.jobs)

    @property
    def slowdown(self) -> float:
        """S: the node-weighted mean of the jobs' slowdowns (1.0: nobody slowed)."""
        nodes = math.fsum(j.nodes for j in self.jobs)
        if nodes <= 0:
            return 1.0
        return math.fsum(j.nodes * j.slowdown for j in self.jobs) / nodes

    @property
    def worst_slowdown(self) -> float:
        """The largest slowdown of any job (1.0 with no job)."""
        return max((j.slowdown for j in self.jobs), default=1.0)

    def measure(self, objective: str = "node-time") -> float:
        """The value *objective* (:data:`OBJECTIVES`) judges this outcome by; lower is
        better.

        Raises:
            SimError: an unknown objective.
        """
        return objective_of(objective, self.slowdown, self.worst_slowdown)

    def gain(self, baseline: Outcome, objective: str = "node-time") -> float:
        """The share of *baseline*'s excess (``measure - 1``) this outcome removes: 1.0
        removes it all, 0 none, below 0 adds to it; 0 when the baseline has none (no
        gain to make), whatever this outcome does."""
        return gain(self.measure(objective), baseline.measure(objective))

    def efficiency(self, baseline: Outcome) -> float:
        """``total(baseline) / total(this)`` of contention seconds (reported beside S);
        1.0 when neither contends, inf when only the baseline does."""
        mine = self.total_contention_s
        if mine <= 0:
            return math.inf if baseline.total_contention_s > 0 else 1.0
        return baseline.total_contention_s / mine


def objective_of(objective: str, slowdown: float, worst: float) -> float:
    """The value of *objective* for a mix of node-weighted mean slowdown *slowdown* (S)
    and largest slowdown *worst*.

    Raises:
        SimError: an unknown objective.
    """
    if objective == "node-time":
        return slowdown
    if objective == "worst-job":
        return worst
    raise SimError(f"objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")


def gain(value: float, baseline: float) -> float:
    """``1 - (value - 1) / (baseline - 1)``: the share of *baseline*'s excess slowdown
    that a policy measuring *value* removes; 0.0 when the baseline has no excess."""
    excess = baseline - 1.0
    if excess <= 1e-12:
        return 0.0
    return 1.0 - (value - 1.0) / excess


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
        self,
        setups: Sequence[Arbitration],
        t_alone: Mapping[str, float],
        objective: str = "node-time",
    ) -> tuple[Outcome, list[float]]:
        """Each of *setups* run: the outcome of the one *objective* judges best (the least
        S by default; the first of equals), and every setup's value of it, in order.

        Raises:
            SimError: no setup to try, or an unknown objective.
        """
        best: Outcome | None = None
        values: list[float] = []
        for arb in setups:
            out = self.evaluate(arb, t_alone)
            values.append(out.measure(objective))
            if best is None or values[-1] < best.measure(objective):
                best = out
        if best is None:
            raise SimError("the search has no setup to try")
        return best, values


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
