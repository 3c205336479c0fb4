"""Packet-level reference model of the contention simulator, for small fabrics (~64 hosts).

A discrete-event simulation of every MTU packet of the bulk-synchronous workload of
:mod:`ibqos.sim.workload`, slow but close to what a switch does; the fluid model is checked
against it.  Times are seconds, sizes bytes, capacities bytes per second.

What is modelled:

- Packets: a flow's bytes of one iteration (``rate x comm_s``, rounded to whole bytes) go
  as MTU packets, the last one shorter.  A packet takes ``bytes / capacity`` to cross a link.
- Output ports: one FIFO per VL; the VL of a packet is looked up at every hop from its
  job's SL through ``sl_to_vl``.  VL arbitration as :mod:`ibqos.sim.qos` describes it:
  the high table first, then the low table, each a weighted round robin over its entries
  (an entry sends up to ``arb.packets(weight)`` packets in its turn; a VL with nothing it
  may send loses its turn at once, so the link never idles while some VL could send).
  High-priority VLs may send ``arb.high_bytes()`` bytes while a low-priority packet is
  waiting; the next packet is then a low one.  The high counter only counts while a low
  packet waits: it restarts after every low packet and whenever high goes alone.
- Credit-based flow control per VL per link: the receiving end of every link has
  ``buffer_packets`` packet slots per VL; a packet starts on a link only if its VL has a
  free slot there.  The slot frees when the packet starts on the next link (a destination
  CA consumes packets on arrival), and the credit is back upstream at once (no credit
  latency).  A full lane therefore backs up on its own lane, hop by hop to the sources.
- Store-and-forward: a packet is in a switch once its last byte arrived and may leave
  ``switch_latency_s`` later (no cut-through, no propagation delay on cables).
- Sources: a host injects its flows' packets into its CA port's VL FIFO, at most one
  waiting there, with packets at least ``bytes / rate`` apart (``rate`` = the host's
  declared bytes per second, the sum of its flows' rates): a token bucket one packet deep,
  so a host that the fabric held back does not burst to catch up.  Which flow goes next is
  weighted fair queueing on the flows' rates (equal rates: round robin), so all flows of a
  host progress together and finish together; ties go to the peers in the job's node order
  from the host's successor on (as MPICH's pairwise all-to-all sends to rank + i at step
  i), so hosts do not all send to the same peer at once.  The pacer starts afresh every phase.
- Jobs: as :mod:`ibqos.sim.workload` says.  A communication phase ends when the job's last
  packet of the iteration is delivered.  ``iteration_ends_s`` lists every iteration a job
  ended by the time the last job ended its N-th (jobs done early keep iterating), and
  ``link_bytes`` counts packets whose last byte crossed the link by then.  A job that
  sends nothing and has no compute phase ends all N iterations at t = 0.

Not modelled: packet loss or corruption (IB is lossless), adaptive routing (one
deterministic path per flow), congestion control (FECN/BECN), credits in 64-byte blocks
(slots hold one packet of any size), link-level retransmission, packet headers (sizes are
payload), VL15 and management traffic, and the HCA's own arbitration between the queue
pairs of a host (one pacer per host does it).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ibqos.errors import SimError
from ibqos.sim.network import Network
from ibqos.sim.qos import SWITCH_LATENCY_S, VL_COUNT, Arbitration
from ibqos.sim.workload import JobRun, RunResult, SimJob

#: packet slots per VL at the receiving end of a link, by default
PACKET_BUFFER = 8

# An event: (time s, sequence number, handler, its argument).  The sequence number makes
# simultaneous events run in the order they were scheduled, so runs are deterministic.
_Event = tuple[float, int, Callable[[Any], None], Any]


class _Table:
    """One VLArb table with weight-0 entries dropped: VLs and packets per turn."""

    __slots__ = ("packets", "vls")

    def __init__(self, arb: Arbitration, entries: Sequence[tuple[int, int]]) -> None:
        kept = [(vl, arb.packets(w)) for vl, w in entries if arb.packets(w) > 0]
        self.vls = tuple(vl for vl, _ in kept)
        self.packets = tuple(n for _, n in kept)

    def first(self) -> int:
        """Packets of the first entry's turn (0 for an empty table)."""
        return self.packets[0] if self.packets else 0

    def scan(self, port: _Port, idx: int, left: int) -> tuple[int, int, int]:
        """The entry that sends next from (idx, left): (VL or -1, its idx, packets left).

        Entries whose VL cannot send lose their turn (work conservation).
        """
        vls = self.vls
        fifo, credits = port.fifo, port.credits
        for _ in range(len(vls)):
            vl = vls[idx]
            if fifo[vl] and credits[vl] > 0:  # port.can_send(vl), inlined: the hot path
                return vl, idx, left
            idx += 1
            if idx == len(vls):
                idx = 0
            left = self.packets[idx]
        return -1, idx, left

    def advance(self, idx: int, left: int) -> tuple[int, int]:
        """(idx, left) after the entry at idx sent one packet."""
        if left > 1:
            return idx, left - 1
        idx += 1
        if idx == len(self.vls):
            idx = 0
        return idx, self.packets[idx]


class _Port:
    """The transmitting side of one link: per-VL FIFOs, the receiver's credits, arbiter state.

    Attributes:
        cap: capacity (bytes/s).
        fifo: packets waiting to leave, by VL.
        queued: packets in all FIFOs.
        credits: free slots of the receiver's input buffer, by VL.
        current: the packet on the wire, if any.
        hi_idx, hi_left: current entry of the high table and packets left in its turn.
        lo_idx, lo_left: the same for the low table.
        hi_sent: high-priority bytes sent while a low packet waited, since one last went.
        sent: bytes sent over the run (packets on the wire at the end are not counted).
        packets: packets sent over the run.
    """

    __slots__ = (
        "cap",
        "credits",
        "current",
        "fifo",
        "hi_idx",
        "hi_left",
        "hi_sent",
        "lo_idx",
        "lo_left",
        "packets",
        "queued",
        "sent",
    )

    def __init__(self, cap: float, buffer_packets: int, high: _Table, low: _Table) -> None:
        self.cap = cap
        self.fifo: list[deque[_Packet]] = [deque() for _ in range(VL_COUNT)]
        self.queued = 0
        self.credits = [buffer_packets] * VL_COUNT
        self.current: _Packet | None = None
        self.hi_idx, self.hi_left = 0, high.first()
        self.lo_idx, self.lo_left = 0, low.first()
        self.hi_sent = 0
        self.sent = 0
        self.packets = 0

    def can_send(self, vl: int) -> bool:
        """VL *vl* has a packet waiting and a free slot at the receiver."""
        return bool(self.fifo[vl]) and self.credits[vl] > 0


class _Arbiter:
    """VL arbitration of every port (the same tables everywhere, state in the port)."""

    def __init__(self, arb: Arbitration) -> None:
        self.high = _Table(arb, arb.vlarb_high)
        self.low = _Table(arb, arb.vlarb_low)
        self.high_bytes = arb.high_bytes()

    def pick(self, port: _Port) -> int:
        """Choose the VL that sends next on an idle port and update its state; -1: none."""
        high = self.high
        if high.vls:
            vl, idx, left = high.scan(port, port.hi_idx, port.hi_left)
            if vl >= 0 and self._within_limit(port, vl):
                port.hi_idx, port.hi_left = high.advance(idx, left)
                return vl
        port.hi_sent = 0  # a low packet goes (or nothing does): the limit starts over
        vl, idx, left = self.low.scan(port, port.lo_idx, port.lo_left)
        if vl < 0:
            port.lo_idx, port.lo_left = idx, left
        else:
            port.lo_idx, port.lo_left = self.low.advance(idx, left)
        return vl

    def _within_limit(self, port: _Port, vl: int) -> bool:
        """High VL *vl* may send its head packet: no low packet waits, or the high limit
        leaves room for it (which it then uses up)."""
        if self.high_bytes == math.inf or not any(port.can_send(v) for v in self.low.vls):
            port.hi_sent = 0  # the limit only counts while a low packet waits
            return True
        size = port.fifo[vl][0].size
        if port.hi_sent + size > self.high_bytes:
            return False
        port.hi_sent += size
        return True


class _Packet:
    """One packet: its flow, where it is on the flow's path, its size and lanes.

    Attributes:
        hop: index of the link it is on or waiting for, in its flow's path.
        vl: its VL on that link; vl_in: its VL on the link it came in on.
    """

    __slots__ = ("flow", "hop", "size", "vl", "vl_in")

    def __init__(self, flow: _Flow, size: int, vl: int) -> None:
        self.flow = flow
        self.hop = 0
        self.size = size
        self.vl = vl
        self.vl_in = vl


class _Flow:
    """One flow of a job: its path, its rate and its bytes per iteration.

    Attributes:
        path: the ports it leaves by, its source's CA port first.
        rate: bytes per second at the job's declared rate.
        size: bytes per iteration; left: bytes still to inject this iteration.
    """

    __slots__ = ("host", "job", "left", "path", "rate", "size", "sl")

    def __init__(
        self, path: list[_Port], sl: int, job: _JobState, host: _Host, rate: float, size: int
    ) -> None:
        self.path = path
        self.sl = sl
        self.job = job
        self.host = host
        self.rate = rate
        self.size = size
        self.left = 0


@dataclass(eq=False)
class _Host:
    """One sending host of a job: its CA port, pacing and its flows' progress.

    Attributes:
        port: its CA port (the first link of its flows).
        rate: bytes per second it may offer (the sum of its flows' rates).
        flows: its flows with bytes to send.
        queue: (finish tag s, flow number, flow) of its flows with bytes left this
            iteration, a heap: weighted fair queueing picks the smallest tag.
        next_ok: earliest time of its next injection (s).
        wake_at: time of its latest wake-up event (s).
        waiting: one of its packets waits in the CA port's FIFO.
    """

    port: _Port
    rate: float = 0.0
    flows: list[_Flow] = field(default_factory=list)
    queue: list[tuple[float, int, _Flow]] = field(default_factory=list)
    next_ok: float = 0.0
    wake_at: float = -1.0
    waiting: bool = False


@dataclass(eq=False)
class _JobState:
    """A job's progress.

    Attributes:
        packets: packets per iteration.
        outstanding: packets of this iteration not delivered yet.
        ends: when its iterations ended (s).
        idle: it sends nothing and computes for 0 s, so its iterations take no time.
    """

    sim: SimJob
    hosts: list[_Host] = field(default_factory=list)
    packets: int = 0
    outstanding: int = 0
    ends: list[float] = field(default_factory=list)
    idle: bool = False


class _PacketSim:
    """The event loop and the state of one run (see the module docstring)."""

    def __init__(
        self,
        net: Network,
        jobs: Sequence[SimJob],
        arb: Arbitration,
        buffer_packets: int,
        switch_latency_s: float,
    ) -> None:
        self.mtu = arb.mtu
        self.latency = switch_latency_s
        self.sl_to_vl = arb.sl_to_vl
        self.arbiter = _Arbiter(arb)
        high, low = self.arbiter.high, self.arbiter.low
        self.ports = [_Port(float(c), buffer_packets, high, low) for c in net.capacity]
        self.jobs = [self._job(net, sim, arb) for sim in jobs]
        self.heap: list[_Event] = []
        self.seq = itertools.count()
        self.now = 0.0
        self.iterations = 0
        self.unfinished = 0  # jobs that have not ended self.iterations iterations yet

    def _job(self, net: Network, sim: SimJob, arb: Arbitration) -> _JobState:
        """A job's flows and sending hosts (flows of 0 bytes are left out)."""
        job = _JobState(sim)
        flows = sim.flows
        sl = arb.job_sl.get(sim.id, 0)
        hosts: dict[int, _Host] = {}
        paths = net.paths(flows)
        # Each host takes its peers from the next one in the job's node order on (MPICH's
        # pairwise all-to-all: rank + i at step i), so every round of the round robin is a
        # permutation; in node order all hosts but the first started at peer 0, in-casts.
        n = max(len(sim.job.nodes), 1)
        shift = (flows.dst_host - flows.src_host) % n
        for k in np.lexsort((shift, flows.src_host)).tolist():
            path = paths[k]
            size = round(float(flows.rate[k]) * sim.comm_s)
            if size <= 0:
                continue
            src = int(flows.src_host[k])
            host = hosts.get(src)
            if host is None:
                host = hosts[src] = _Host(self.ports[path[0]])
            rate = float(flows.rate[k])
            host.rate += rate
            host.flows.append(_Flow([self.ports[i] for i in path], sl, job, host, rate, size))
            job.packets += -(-size // self.mtu)
        job.hosts = [hosts[src] for src in sorted(hosts)]
        job.idle = job.packets == 0 and sim.compute_s <= 0
        return job

    def _at(self, t: float, handler: Callable[[Any], None], arg: object) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), handler, arg))

    def run(self, iterations: int, max_events: int) -> RunResult:
        """Run until every job has ended *iterations* iterations."""
        self.iterations = iterations
        self.unfinished = sum(not job.idle for job in self.jobs)
        for job in self.jobs:
            if job.idle:
                job.ends.extend([0.0] * iterations)
            else:
                self._start_iteration(job)
        events = 0
        heap = self.heap
        pop = heapq.heappop
        while self.unfinished:
            if not heap:
                raise SimError("packet model: no event left before the jobs finished (deadlock)")
            events += 1
            if events > max_events:
                raise SimError(
                    f"packet model: more than {max_events} events ({self.now:.6g} s simulated);"
                    " shrink the iterations, the jobs' bytes per iteration"
                    " (rate x duty x period_s) or the fabric"
                )
            self.now, _, handler, arg = pop(heap)
            handler(arg)
        return self._result(events)

    def _result(self, events: int) -> RunResult:
        n = self.iterations
        runs = {
            job.sim.id: JobRun(job.sim.id, len(job.sim.job.nodes), tuple(job.ends), job.ends[n - 1])
            for job in self.jobs
        }
        link_bytes = np.array([p.sent for p in self.ports], dtype=np.float64)
        sim_time = max((run.t_s for run in runs.values()), default=0.0)
        return RunResult("packet", runs, sim_time, link_bytes, events)

    # -- jobs ----------------------------------------------------------------------------

    def _start_iteration(self, job: _JobState) -> None:
        """The job's compute phase, then its communication phase."""
        if job.sim.compute_s > 0:
            self._at(self.now + job.sim.compute_s, self._start_comm, job)
        else:
            self._start_comm(job)

    def _start_comm(self, job: _JobState) -> None:
        if job.packets == 0:
            self._end_comm(job)
            return
        job.outstanding = job.packets
        mtu = self.mtu
        for host in job.hosts:
            for f in host.flows:
                f.left = f.size
            # finish tag of each flow's first packet; the flow number breaks ties
            host.queue = [(min(mtu, f.size) / f.rate, k, f) for k, f in enumerate(host.flows)]
            heapq.heapify(host.queue)
            host.next_ok = self.now
            self._inject(host)

    def _end_comm(self, job: _JobState) -> None:
        job.ends.append(self.now)
        if len(job.ends) == self.iterations:
            self.unfinished -= 1
        self._start_iteration(job)

    # -- sources -------------------------------------------------------------------------

    def _inject(self, host: _Host) -> None:
        """The host puts its next packet into its CA port's FIFO, if pacing lets it."""
        if host.waiting or not host.queue:
            return
        now = self.now
        if now < host.next_ok:
            if not now < host.wake_at <= host.next_ok:
                host.wake_at = host.next_ok
                self._at(host.next_ok, self._inject, host)
            return
        tag, k, f = heapq.heappop(host.queue)
        size = min(self.mtu, f.left)
        f.left -= size
        if f.left > 0:
            heapq.heappush(host.queue, (tag + min(self.mtu, f.left) / f.rate, k, f))
        host.next_ok = now + size / host.rate
        host.waiting = True
        self._enqueue(host.port, _Packet(f, size, self.sl_to_vl[f.sl]))

    # -- ports ---------------------------------------------------------------------------

    def _arrive(self, pkt: _Packet) -> None:
        """The switch is done with the packet: it joins its next port's FIFO."""
        self._enqueue(pkt.flow.path[pkt.hop], pkt)

    def _enqueue(self, port: _Port, pkt: _Packet) -> None:
        """A packet joins the FIFO of its VL at *port*."""
        port.fifo[pkt.vl].append(pkt)
        port.queued += 1
        if port.current is None:
            self._try_start(port)

    def _try_start(self, port: _Port) -> None:
        """An idle port sends the packet its arbiter picks, if any VL may send."""
        vl = self.arbiter.pick(port)
        if vl < 0:
            return
        pkt = port.fifo[vl].popleft()
        port.queued -= 1
        port.credits[vl] -= 1
        port.current = pkt
        # self._at(..., self._done, port), inlined: this runs once per packet and hop
        heapq.heappush(
            self.heap, (self.now + pkt.size / port.cap, next(self.seq), self._done, port)
        )
        if pkt.hop:
            # it left the switch's input buffer: its slot there is free again
            up = pkt.flow.path[pkt.hop - 1]
            up.credits[pkt.vl_in] += 1
            if up.current is None and up.fifo[pkt.vl_in]:  # nothing else changed up there
                self._try_start(up)
        else:
            host = pkt.flow.host
            host.waiting = False
            self._inject(host)

    def _done(self, port: _Port) -> None:
        """The last byte of the port's packet arrived at the other end: deliver or forward."""
        pkt = port.current
        assert pkt is not None
        port.current = None
        port.sent += pkt.size
        port.packets += 1
        flow = pkt.flow
        pkt.hop += 1
        if pkt.hop == len(flow.path):
            port.credits[pkt.vl] += 1  # the destination CA consumes it at once
            job = flow.job
            job.outstanding -= 1
            if job.outstanding == 0:
                self._end_comm(job)
        else:
            pkt.vl_in = pkt.vl
            pkt.vl = self.sl_to_vl[flow.sl]  # the same map on every port, looked up anyway
            if self.latency > 0:
                self._at(self.now + self.latency, self._arrive, pkt)
            else:
                self._enqueue(flow.path[pkt.hop], pkt)
        # forwarding or delivering may have started this port already (zero latency)
        if port.current is None and port.queued:
            self._try_start(port)


def simulate_packets(
    net: Network,
    jobs: Sequence[SimJob],
    arb: Arbitration,
    iterations: int,
    *,
    buffer_packets: int = PACKET_BUFFER,
    switch_latency_s: float = SWITCH_LATENCY_S,
    max_events: int = 50_000_000,
) -> RunResult:
    """Run the jobs packet by packet until each has ended *iterations* iterations.

    Args:
        net: the fabric and its routes.
        jobs: the jobs, from :func:`ibqos.sim.workload.prepare` on the same network.
        arb: SLs, SL2VL and the VLArb tables (the same on every port).
        iterations: iterations every job must end.
        buffer_packets: input buffer of every port, per VL, in packets (credits).
        switch_latency_s: time from a packet's arrival in a switch to when it may leave (s).
        max_events: bound on the events processed.

    Returns:
        ``model="packet"``; ``sim_time_s`` is when the last job ended its N-th iteration,
        ``iteration_ends_s`` holds every iteration a job ended by then (jobs done early
        keep iterating), ``events`` the events processed.

    Raises:
        SimError: bad arguments, a job whose VL has no arbitration entry, or more than
            *max_events* events.
    """
    if iterations < 1:
        raise SimError(f"iterations {iterations}: expected at least 1")
    if buffer_packets < 1:
        raise SimError(f"buffer_packets {buffer_packets}: expected at least 1")
    if not switch_latency_s >= 0:
        raise SimError(f"switch_latency_s {switch_latency_s}: expected >= 0")
    if arb.mtu < 1:
        raise SimError(f"policy {arb.name or '?'}: MTU {arb.mtu} bytes")
    arb.check_jobs([job.id for job in jobs])
    sim = _PacketSim(net, jobs, arb, buffer_packets, switch_latency_s)
    return sim.run(iterations, max_events)
