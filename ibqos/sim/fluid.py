"""Fluid contention model: jobs' communication as rates that share links, event-driven.

A *sender* is one host of one job while the job communicates (:mod:`ibqos.sim.senders`).
Between two events (a sender finishing its bytes of the phase, a job entering or leaving a
communication phase, with switch buffers a column's buffers filling up or running empty)
every sender *s* sends at a fraction ``alpha_s`` (0..1] of its declared rate, spread over
its flows in proportion to their declared rates.  That is what an HCA paced at the job's
rate does when it serves its flows by weighted fair queueing over one send queue per VL:
the host's flows progress together, a flow that the fabric holds back holds its host
back, and the host never bursts above its declared rate to catch up.  A sender that has
sent its bytes stops; a job's phase ends when its last sender has.  So a local slowdown
costs a job only if it hits the host that is, or becomes, the job's slowest.

The pieces: who the senders are and the links they cross (:mod:`ibqos.sim.senders`); how
the links share their bandwidth between them, per lane under VLArb
(:mod:`ibqos.sim.allocator`, solved by :mod:`ibqos.sim.maxmin`); the switch buffers, if
any (:mod:`ibqos.sim.buffers`), their head of line (:mod:`ibqos.sim.inputs`) and the wait
for a phase's last bytes (:mod:`ibqos.sim.drains`).  This module advances time:
:class:`FluidSim` moves the jobs from event to event (the bookkeeping of a step compiled
in :mod:`ibqos.sim.fluidstep`), and :func:`simulate_fluid` runs a mix for N iterations.

What it leaves out, by design: packets and credits (so bursts a buffer would absorb slow
senders here unless the run has switch buffers), latency (but for a phase's last packet,
with buffers), and transients inside a phase.  :mod:`ibqos.sim.packet` models those;
``docs/simulate-validation.md`` compares the two.

Units: seconds, bytes, bytes per second; ``alpha`` a share (0..1] of a declared rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ibqos.errors import SimError
from ibqos.sim.allocator import Allocator
from ibqos.sim.buffers import TRACK_DRAIN, SwitchBuffers
from ibqos.sim.drains import last_packet_s
from ibqos.sim.network import Network
from ibqos.sim.qos import Arbitration
from ibqos.sim.senders import (
    BUFFER_PACKETS,
    Granularity,
    senders_of,
)
from ibqos.sim.workload import JobRun, RunResult, SimJob

__all__ = [
    "FluidSim",
    "JobPhase",
    "simulate_fluid",
]

FloatArray = npt.NDArray[np.float64]

_EPS = 1e-12  # relative and absolute tolerance on the simulated time (s)


@dataclass
class JobPhase:
    """Where a job is in its iteration, to carry it into another simulator.

    Attributes:
        comm: communicating (else computing).
        compute_left_s: seconds of compute left (computing; with switch buffers it
            includes the wait for the last iteration's bytes to be out of them).
        bytes_left: share of each sender's bytes left (communicating), in row order.
    """

    comm: bool
    compute_left_s: float
    bytes_left: FloatArray


class FluidSim:
    """A mix of bulk-synchronous jobs advanced through time (event-driven).

    Args:
        net: the network.
        jobs: the mix (:func:`ibqos.sim.workload.prepare`).
        arb: the QoS setup; :meth:`set_arbitration` changes it mid-run.
        per: who gets a rate of its own (:data:`~ibqos.sim.senders.Granularity`).
        buffer_packets: MTU packets of buffer per lane per switch input (0: none; None:
            :data:`~ibqos.sim.senders.BUFFER_PACKETS`).

    Attributes:
        time: simulated seconds so far.
        iterations: iterations each job finished.
        ends: end time of each finished iteration, per job.
        link_bytes: bytes each link carried so far.
        sent: per job, bytes sent so far over the job's declared bytes per second
            (full-rate seconds of communication).
        events: phase changes processed (a sender done, a phase begun or ended).
        buffer_events: buffers of a column that filled up or ran empty.
        allocations: times the rates were solved.
    """

    def __init__(
        self,
        net: Network,
        jobs: Sequence[SimJob],
        arb: Arbitration,
        per: Granularity = "auto",
        buffer_packets: int | None = None,
    ) -> None:
        if buffer_packets is None:
            buffer_packets = BUFFER_PACKETS
        if buffer_packets < 0:
            raise SimError(f"buffer_packets: expected 0 or more, got {buffer_packets}")
        self.buffer_packets = buffer_packets
        self.net = net
        self.jobs = list(jobs)
        self.senders = senders_of(net, self.jobs, per)
        s = self.senders
        self.comm_s = np.array([j.comm_s for j in self.jobs])
        self.compute_s = np.array([j.compute_s for j in self.jobs])
        self.job_rate = np.bincount(s.job, weights=s.rate, minlength=len(self.jobs)).astype(
            np.float64, copy=False
        )
        self.time = 0.0
        self.comm = np.zeros(len(self.jobs), dtype=bool)  # in the communication phase
        self.compute_left = self.compute_s.copy()  # seconds of compute left
        self.bytes_left = np.zeros(s.rows)  # share of each sender's bytes left
        self.iterations = np.zeros(len(self.jobs), dtype=np.int64)
        self.ends: list[list[float]] = [[] for _ in self.jobs]
        self._moved = np.zeros(s.rows)  # full-rate seconds each sender has sent so far
        # with buffers, when each sender's last bytes of its phase are out of them (s)
        self._out_at = np.zeros(s.rows)
        # when each job's last iteration ended or will end (s; moves while its bytes drain)
        self._done_at = np.zeros(len(self.jobs))
        self._sent_at = np.zeros(len(self.jobs))  # when its senders were done (s)
        self.sent = np.zeros(len(self.jobs))
        self.events = 0
        self.buffer_events = 0
        self.allocations = 0
        self.set_arbitration(arb)
        self._start_phases()

    def set_arbitration(self, arb: Arbitration) -> None:
        """Use another QoS setup from now on (SLs and tables reprogrammed)."""
        self.allocator = Allocator(self.net, self.jobs, arb, self.senders)
        self._alpha: FloatArray | None = None
        # The switch buffers start empty, and the bytes of earlier phases on their way out
        # are forgotten; a new setup keeps the ends predicted so far.
        buffer_bytes = float(self.buffer_packets * arb.mtu)
        # only a buffered run counts the last packet's trip (the model without buffers
        # leaves latency out)
        latency_s = (
            last_packet_s(self.net, self.jobs, self.senders, arb.mtu)
            if buffer_bytes > 0
            else np.zeros(self.senders.rows)
        )
        self._buffers = SwitchBuffers(self.allocator, self.jobs, buffer_bytes, latency_s)

    @property
    def _buffered(self) -> bool:
        """Whether the run has switch buffers."""
        return self._buffers.buffer_bytes > 0

    def phase(self, i: int) -> JobPhase:
        """Job *i*'s place in its iteration."""
        lo, hi = self.senders.first[i], self.senders.first[i + 1]
        return JobPhase(
            bool(self.comm[i]), float(self.compute_left[i]), self.bytes_left[lo:hi].copy()
        )

    def set_phase(self, i: int, phase: JobPhase) -> None:
        """Put job *i* where *phase* says (the same job's phase from another simulator)."""
        lo, hi = self.senders.first[i], self.senders.first[i + 1]
        if len(phase.bytes_left) != hi - lo:
            raise SimError(
                f"job {self.jobs[i].id}: phase of {len(phase.bytes_left)} senders, not {hi - lo}"
            )
        self.comm[i] = phase.comm
        self.compute_left[i] = phase.compute_left_s
        self.bytes_left[lo:hi] = phase.bytes_left
        self._alpha = None

    @property
    def link_bytes(self) -> FloatArray:
        """Bytes each link carried so far (a sender's flows keep their proportions)."""
        s = self.senders
        got = np.bincount(
            s.e_link, weights=s.e_load * self._moved[s.e_row], minlength=self.net.links
        )
        return got.astype(np.float64, copy=False)

    @property
    def buffered_bytes(self) -> float:
        """Bytes waiting in the lanes' switch buffers now (0 without buffers)."""
        return float(self._buffers.held.sum())

    @property
    def sender_alpha(self) -> FloatArray:
        """Current rate of every sender as a share of its declared rate (0 when idle)."""
        if self._alpha is None:
            if self._buffered:
                self._alpha, solves = self._buffers.rates(self._sending())
                self.allocations += solves
                if TRACK_DRAIN:
                    self._drain_ends()
            else:
                self._alpha = self.allocator.rates(self._sending())
                self.allocations += 1
        return self._alpha

    def _drain_ends(self) -> None:
        """Move the end of each job's last iteration to when its last bytes are out at the
        columns' present rates (while it is still to come)."""
        pending = np.flatnonzero(~self.comm & (self._done_at > self.time))
        if not pending.size:
            return
        out = self.time + self._buffers.out_s(pending)
        for i, o in zip(pending.tolist(), out.tolist(), strict=True):
            end = max(self._sent_at[i], o)
            self.compute_left[i] = max(self.compute_left[i] + end - self._done_at[i], 0.0)
            self._done_at[i] = end
            self.ends[i][-1] = end

    @property
    def alpha(self) -> FloatArray:
        """Current rate of every job as a share of its declared rate (0 when computing)."""
        s = self.senders
        moving = np.bincount(s.job, weights=self.sender_alpha * s.rate, minlength=len(self.jobs))
        with np.errstate(divide="ignore", invalid="ignore"):
            share: FloatArray = np.where(self.job_rate > 0, moving / self.job_rate, self.comm * 1.0)
        return np.where(self.comm, share, 0.0)

    def _sending(self) -> npt.NDArray[np.bool_]:
        return self.comm[self.senders.job] & (self.bytes_left > 0)

    def next_event_s(self) -> float:
        """Simulated seconds to the next phase change at the current rates (inf: none)."""
        return float(self._to_go()[0].min(initial=math.inf))

    def _to_go(self) -> tuple[FloatArray, FloatArray]:
        """Seconds until each sender is done, and until each computing job is."""
        ra = self.sender_alpha
        sending = self._sending()
        with np.errstate(divide="ignore", invalid="ignore"):
            rows = np.where(sending, self.bytes_left * self.comm_s[self.senders.job] / ra, math.inf)
        jobs = np.where(self.comm, math.inf, self.compute_left)
        both: FloatArray = np.concatenate([rows, jobs])
        return both, rows

    def run(self, iterations: int) -> None:
        """Advance until every job has finished *iterations* iterations."""
        while (self.iterations < iterations).any():
            self._step(math.inf)
        if TRACK_DRAIN and self._buffered:
            _ = self.sender_alpha  # the last event's rates: bytes still draining go at them

    def advance(self, dt: float) -> None:
        """Advance *dt* simulated seconds."""
        end = self.time + dt
        while self.time < end * (1 - _EPS) and end - self.time > _EPS:
            self._step(end)

    def _step(self, until: float) -> None:
        # compiled (ibqos.sim.fluidstep): imported here for the reason rates() gives
        from ibqos.sim.fluidstep import advance

        s = self.senders
        ra = self.sender_alpha
        buffers = self._buffered
        stop = min(until, self.time + self._buffers.event_s()) if buffers else until
        done_comm = np.zeros(len(self.jobs), dtype=bool)
        was_sending = self._sending() if buffers else None
        dt, changed = advance(
            stop,
            self.time,
            ra,
            s.job,
            s.rate,
            self.comm_s,
            self.compute_s,
            self.job_rate,
            self.comm,
            self.compute_left,
            self.bytes_left,
            self._moved,
            self.sent,
            done_comm,
        )
        if math.isinf(dt):
            stuck = sorted({self.jobs[int(j)].id for j in s.job[self._sending() & (ra <= 0)]})
            raise SimError(f"jobs {', '.join(stuck)} get no bandwidth: the run cannot end")
        self.time += dt
        if was_sending is not None:
            filled_or_emptied = self._buffers.move(dt)
            if filled_or_emptied:
                self.buffer_events += filled_or_emptied
                self._alpha = None
            sent = np.flatnonzero(was_sending & (self.bytes_left <= 0))
            if len(sent) and TRACK_DRAIN:
                self._buffers.keep_drains(sent)
            elif len(sent):
                self._out_at[sent] = self.time + self._buffers.drain_s(sent)
        if changed or done_comm.any():
            for i in np.flatnonzero(done_comm):
                self.iterations[i] += 1
                end = self.time
                if TRACK_DRAIN and was_sending is not None:  # once its bytes are out
                    end = self.time + float(self._buffers.out_s(np.array([i]))[0])
                    self._sent_at[i], self._done_at[i] = self.time, end
                elif was_sending is not None:  # the iteration ends once its bytes are out
                    end = max(end, float(self._out_at[s.first[i] : s.first[i + 1]].max()))
                self.compute_left[i] += end - self.time
                self.ends[i].append(end)
            self.events += changed
            self._start_phases()
            self._alpha = None

    def _start_phases(self) -> None:
        """Jobs with no compute phase go straight back to communicating."""
        instant = ~self.comm & (self.compute_left <= _EPS)
        if instant.any():
            self.comm = self.comm | instant
            self.bytes_left = np.where(instant[self.senders.job], 1.0, self.bytes_left)
            self._alpha = None

    def result(self, iterations: int) -> RunResult:
        """The run so far, each job's time being its *iterations*-th iteration's end."""
        runs = {}
        for job, ends in zip(self.jobs, self.ends, strict=True):
            t = ends[iterations - 1] if len(ends) >= iterations else math.nan
            runs[job.id] = JobRun(job.id, len(job.job.nodes), tuple(ends), t)
        # with buffers the last iteration can end after the last event, its bytes in them
        last = max([self.time, *(ends[-1] for ends in self.ends if ends)])
        return RunResult("fluid", runs, last, self.link_bytes, self.events)


def simulate_fluid(
    net: Network,
    jobs: Sequence[SimJob],
    arb: Arbitration,
    iterations: int,
    per: Granularity = "auto",
    buffer_packets: int | None = None,
) -> RunResult:
    """Run the mix until every job has *iterations* iterations (workload.py's semantics)."""
    if iterations < 1:
        raise SimError(f"iterations: expected at least 1, got {iterations}")
    sim = FluidSim(net, jobs, arb, per, buffer_packets)
    sim.run(iterations)
    return sim.result(iterations)
