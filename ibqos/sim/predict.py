"""Candidate QoS setups for the running jobs, predicted in the steady state they live in.

The tuner keeps a shortlist of setups to try on the fabric; this module predicts them with
the fluid model (:mod:`ibqos.sim.fluid`).  The jobs come from what the agent measured
(:func:`ibqos.sim.estimate.estimate_jobs`, then :func:`calibrate` to what they measured
under the setup in force), the routes from OpenSM's dump when there is one
(:func:`network_for`).

**The steady state, not a start.**  ``ibqos simulate`` runs N iterations of jobs that all
start computing at time 0, so their first communication phases line up as they never do
on a fabric where jobs started minutes apart, and the first iterations weigh as much as
the others.  Here (:class:`Steady`) each job starts at its own point of its iteration (a
share of its period from the golden-ratio sequence: spread, deterministic), its first
:attr:`Steady.warmup` iterations are thrown away, and its time per iteration is the mean
over the rest (at least :attr:`Steady.measure` of them; the run goes on until every job has
as many, so fast jobs are measured over more).  The switch buffers default to none and the
senders to ``auto``: what the closed-loop lab's fluid contention runs
(``docs/simulate-validation.md``, "The simulator against the closed-loop lab").

Per setup and job: the time per iteration sharing, and alone (one job, the same lane and
senders, :func:`alone_times`); the slowdown is their ratio.  A setup's **score**
(:func:`scores`) is the node-weighted mean of the jobs' times relative to each job's best
over the setups predicted (1.0 when every job is at its best; the observation side scores
measured times the same way), or, against their times alone, S, the node-weighted mean
slowdown, which does not depend on what else is predicted: tuning's prediction and its
search (:mod:`ibqos.sim.search`) score so.

A cycle of the tuner, from the agent's decision::

    net = network_for(fabric.topo, lft_dump)
    est = estimate_jobs(net, jobs, decision, priors)
    mix = calibrate(net, est.jobs, injected(decision), in_force)
    pred = predict(net, prepare(net, mix), candidates, notes=est.notes)
    to_try = pred.shortlist(3, keep="law")

Units: seconds; slowdowns and scores are ratios.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ibqos.config.tuning import Objective
from ibqos.errors import SimError
from ibqos.jobs.model import Job
from ibqos.plan.tuner import score as measured_score
from ibqos.sim.estimate import (
    ASSUMED_PHASES,
    Estimate,
    Phases,
    estimate_jobs,
    injected,
    network_for,
)
from ibqos.sim.fluid import FluidSim
from ibqos.sim.network import Network
from ibqos.sim.qos import Arbitration
from ibqos.sim.senders import Granularity, granularity
from ibqos.sim.workload import SimJob, prepare

__all__ = [
    "ASSUMED_PHASES",
    "Estimate",
    "JobPrediction",
    "Phases",
    "Prediction",
    "SetupPrediction",
    "Steady",
    "alone_times",
    "calibrate",
    "estimate_jobs",
    "injected",
    "network_for",
    "predict",
    "render_prediction",
    "scores",
    "steady_times",
]

log = logging.getLogger(__name__)

#: the golden ratio's fractional part: job i starts ``i x GOLDEN mod 1`` of a period late,
#: so any number of jobs gets offsets spread over the period, none two alike
GOLDEN = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class Steady:
    """How the steady state is measured (see the module docstring).

    Attributes:
        warmup: iterations of each job thrown away (its start, the others' start).
        measure: iterations of each job measured, at least.
        per: the fluid model's senders (:data:`~ibqos.sim.senders.Granularity`).
        buffer_packets: switch input buffers per lane, MTU packets (0: none, as the lab).
        stagger: start each job at its own point of its iteration (False: all computing
            from time 0, as ``ibqos simulate``).
    """

    warmup: int = 4
    measure: int = 16
    per: Granularity = "auto"
    buffer_packets: int = 0
    stagger: bool = True

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.measure < 1 or self.buffer_packets < 0:
            raise SimError(f"steady state: warmup >= 0, measure >= 1, buffers >= 0: {self}")

    def describe(self, jobs: Sequence[SimJob]) -> str:
        """One line: what the runs were."""
        per = granularity(jobs) if self.per == "auto" else self.per
        buf = f"{self.buffer_packets} packets of buffer" if self.buffer_packets else "no buffers"
        start = "staggered starts" if self.stagger else "common start"
        return (
            f"fluid model, senders per {per}, {buf}, {start}, first {self.warmup}"
            f" iterations dropped, mean of at least {self.measure} more"
        )


@dataclass(frozen=True)
class JobPrediction:
    """One job under one setup: seconds per iteration sharing and alone."""

    id: str
    nodes: int
    t_alone_s: float
    t_s: float

    @property
    def slowdown(self) -> float:
        """Time sharing over time alone (1.0: no contention)."""
        return self.t_s / self.t_alone_s if self.t_alone_s > 0 else math.inf

    @property
    def contention_s(self) -> float:
        """Seconds per iteration lost to sharing."""
        return self.t_s - self.t_alone_s


@dataclass(frozen=True)
class SetupPrediction:
    """One setup predicted.

    Attributes:
        name: the setup's name.
        setup: the setup.
        jobs: per job, in mix order.
        score: node-weighted mean of the jobs' times over their best (:func:`scores`).
    """

    name: str
    setup: Arbitration
    jobs: tuple[JobPrediction, ...]
    score: float

    @property
    def total_contention_s(self) -> float:
        """Sum over the jobs of the seconds per iteration lost to sharing."""
        return math.fsum(j.contention_s for j in self.jobs)


@dataclass(frozen=True)
class Prediction:
    """Every setup predicted, in the order given.

    Attributes:
        setups: per setup.
        how: what the runs were (:meth:`Steady.describe`).
        notes: how the jobs were estimated, one line each.
        against_alone: the scores are S, against each job's time alone (else against
            each job's best over these setups: :func:`scores`).
    """

    setups: tuple[SetupPrediction, ...]
    how: str
    notes: tuple[str, ...] = ()
    against_alone: bool = False

    def get(self, name: str) -> SetupPrediction:
        """The setup of that name.

        Raises:
            SimError: no such setup.
        """
        for s in self.setups:
            if s.name == name:
                return s
        raise SimError(f"no setup {name!r} was predicted")

    @property
    def best(self) -> SetupPrediction:
        """The setup of the lowest score (the first of equals)."""
        return min(self.setups, key=lambda s: s.score)

    def shortlist(self, n: int, keep: str | None = None) -> list[str]:
        """The names of the *n* best setups by score, best first; *keep* (the
        favour-light law's) always among them, in place of the last when it is not.

        Raises:
            SimError: *n* below 1, or *keep* not predicted.
        """
        if n < 1:
            raise SimError(f"shortlist of {n}: expected at least 1")
        ranked = [s.name for s in sorted(self.setups, key=lambda s: s.score)]
        out = ranked[:n]
        if keep is not None:
            self.get(keep)
            if keep not in out:
                out[-1] = keep
        return out


def scores(
    times: Sequence[Mapping[str, float]],
    nodes: Mapping[str, int],
    alone: Mapping[str, float] | None = None,
    objective: Objective = "node-time",
) -> list[float]:
    """Each setup's score from its jobs' times per iteration (predicted or measured):
    ``sum_j nodes_j * t_j(setup) / ref_j / sum_j nodes_j``, where ``ref_j`` is the job's
    best time over these setups (1.0: every job at its best over them) or, given *alone*
    (job -> seconds per iteration alone), its time alone: then the score is S, the
    node-weighted mean slowdown, whatever other setups are scored with it (a setup
    faster than alone counts as alone).  Jobs are those of *nodes*; each setup's times
    must cover them.  With *objective* ``worst-job`` the score is the largest of those
    ratios instead of their node-weighted mean (``tuning.objective``).

    Raises:
        SimError: a setup (or *alone*) without a time for a job, or a time not above 0.
    """
    for k, t in enumerate([*times, *([] if alone is None else [alone])]):
        for jid in nodes:
            if jid not in t or not t[jid] > 0:
                raise SimError(f"setup #{k}: no time per iteration for job {jid}")
    # the observation side's score: a job's rate is its bytes per iteration over its time
    rates = {str(k): {j: 1.0 / t[j] for j in nodes} for k, t in enumerate(times)}
    if alone is not None:  # the reference: each job's rate alone
        rates["alone"] = {j: 1.0 / alone[j] for j in nodes}
    got = measured_score(rates, nodes, objective)
    return [got[str(k)] for k in range(len(times))]


def steady_times(
    net: Network, jobs: Sequence[SimJob], arb: Arbitration, steady: Steady = Steady()
) -> dict[str, float]:
    """Each job's mean seconds per iteration in the steady state under *arb*."""
    sim = FluidSim(net, jobs, arb, steady.per, steady.buffer_packets)
    if steady.stagger:
        for i, job in enumerate(jobs):
            if job.compute_s <= 0:
                continue  # always communicating: no phase to shift
            phase = sim.phase(i)
            phase.compute_left_s += (i * GOLDEN % 1.0) * (job.compute_s + job.comm_s)
            sim.set_phase(i, phase)
    sim.run(steady.warmup + steady.measure)
    out = {}
    for job, ends in zip(jobs, sim.ends, strict=True):
        first = ends[steady.warmup - 1] if steady.warmup else 0.0
        out[job.id] = (ends[-1] - first) / (len(ends) - steady.warmup)
    return out


def alone_times(
    net: Network, jobs: Sequence[SimJob], arb: Arbitration, steady: Steady = Steady()
) -> dict[str, float]:
    """Each job's seconds per iteration alone: the same senders and buffers as in the mix
    (alone, a job's iterations repeat from the first: two suffice)."""
    per = granularity(jobs) if steady.per == "auto" else steady.per
    out = {}
    for job in jobs:
        sim = FluidSim(net, [job], arb, per, steady.buffer_packets)
        sim.run(2)
        out[job.id] = sim.ends[0][1] - sim.ends[0][0]
    return out


def calibrate(
    net: Network,
    jobs: Sequence[Job],
    measured: Mapping[str, float],
    in_force: Arbitration,
    steady: Steady = Steady(warmup=2, measure=6),
    rounds: int = 3,
) -> list[Job]:
    """*jobs* (:func:`estimate_jobs`) with their bytes per iteration set so that, under the
    setup they were measured in, the model gives each the mean injection measured.

    A job slowed by the setup in force iterates less often and measures a lower mean than
    its bytes per iteration would give alone, so the estimate's bursts come out low by as
    much as it was slowed.  Each round runs *in_force* in the steady state and scales every
    job's bytes per iteration by measured over predicted mean (a fixed point: a job's time
    grows with its bytes); its rate, capped at its slowest host link, then its duty take
    the change (a capped job communicates longer, up to always).

    Args:
        net: the fabric and its routes.
        jobs: the estimated jobs.
        measured: each job's hosts' injected bytes per second (the decision's level 0,
            :func:`~ibqos.sim.estimate.injected`).
        in_force: the setup the measurement was made under.
        steady: how the steady state is measured: by default shorter than
            :func:`predict`'s, as a mean over all of a run's iterations needs fewer (and
            the setup in force is often the slowest, everything on one lane).
        rounds: runs of *in_force* (0: *jobs* unchanged).
    """
    out = list(jobs)
    for _ in range(rounds):
        sim_jobs = prepare(net, out)
        times = steady_times(net, sim_jobs, in_force, steady)
        scaled = []
        for job, sim_job in zip(out, sim_jobs, strict=True):
            mean = sim_job.bytes_per_iteration / times[job.id]
            want = measured.get(job.id, mean)
            scaled.append(_with_bytes(net, job, want / mean if mean > 0 else 1.0))
        out = scaled
    return out


def _with_bytes(net: Network, job: Job, factor: float) -> Job:
    """*job* moving *factor* times its bytes per iteration (rate first, then duty)."""
    link = min(float(net.capacity[net.router.port_index[net.hosts[h]]]) for h in job.nodes)
    rate = job.rate_bytes_per_s * factor
    if rate <= link:
        return replace(job, rate_bytes_per_s=rate)
    return replace(job, rate_bytes_per_s=link, duty=min(job.duty * rate / link, 1.0))


def predict(
    net: Network,
    jobs: Sequence[SimJob],
    setups: Sequence[Arbitration],
    steady: Steady = Steady(),
    notes: Sequence[str] = (),
) -> Prediction:
    """Each setup run in the fluid model, in the steady state (see the module docstring).

    Args:
        net: the fabric and its routes (:func:`network_for`).
        jobs: the mix (:func:`ibqos.sim.workload.prepare` of :func:`estimate_jobs`).
        setups: the candidates, each named (:attr:`Arbitration.name`) uniquely.
        steady: how the steady state is measured.
        notes: carried into the prediction (how the jobs were estimated).

    Raises:
        SimError: no job or no setup, two setups of one name, a setup that leaves a job's
            lane without arbitration entries, or a mix the model cannot run.
    """
    if not jobs or not setups:
        raise SimError("predict: needs at least one job and one setup")
    names = [s.name for s in setups]
    if len(set(names)) != len(names):
        raise SimError(f"predict: setup names must differ, got {names}")
    ids = [j.id for j in jobs]
    for arb in setups:
        arb.check_jobs(ids)
    alone = alone_times(net, jobs, setups[0], steady)
    times = [steady_times(net, jobs, arb, steady) for arb in setups]
    nodes = {j.id: len(j.job.nodes) for j in jobs}
    out = []
    for arb, t, score in zip(setups, times, scores(times, nodes), strict=True):
        per_job = tuple(JobPrediction(j.id, nodes[j.id], alone[j.id], t[j.id]) for j in jobs)
        out.append(SetupPrediction(arb.name, arb, per_job, score))
    log.debug("predicted %d setups of %d jobs", len(setups), len(jobs))
    return Prediction(tuple(out), steady.describe(jobs), tuple(notes))


_SCORED = {
    False: "1.000 = every job at its\n  best over these setups, node-weighted; * lowest score)",
    True: "S, the node-weighted mean\n  slowdown; * lowest score)",
}


def render_prediction(pred: Prediction) -> str:
    """A table for ``ibqos run --dry-run``: one row per setup, per job its predicted time
    per iteration (ms) and slowdown, the total contention per iteration (ms) and the
    score; ``*`` marks the best."""
    if not pred.setups:
        return "predicted: no setup\n"
    jobs = [j.id for j in pred.setups[0].jobs]
    name_w = max(len("setup"), *(len(s.name) for s in pred.setups))
    cell_w = max(14, *(len(f"job {j} ms") for j in jobs))
    head = [f"  {'setup':<{name_w}}", *(f"{'job ' + j + ' ms':>{cell_w}}" for j in jobs)]
    head += [f"{'contention ms':>14}", f"{'score':>7}"]
    lines = [f"predicted steady state ({pred.how}):", " ".join(head)]
    best = pred.best.name
    for s in pred.setups:
        mark = "*" if s.name == best else " "
        cells = [f"{j.t_s * 1e3:.2f} x{j.slowdown:.2f}" for j in s.jobs]
        row = [f"{mark} {s.name:<{name_w}}", *(f"{c:>{cell_w}}" for c in cells)]
        row += [f"{s.total_contention_s * 1e3:>14.2f}", f"{s.score:>7.3f}"]
        lines.append(" ".join(row))
    lines.append("  (x: slowdown, time sharing / time alone; score: " + _SCORED[pred.against_alone])
    lines += [f"  {n}" for n in pred.notes]
    return "\n".join(lines) + "\n"
