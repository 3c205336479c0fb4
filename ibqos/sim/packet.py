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
  host progress together and finish together.

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
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ibqos.sim.network import Network
from ibqos.sim.qos import VL_COUNT, Arbitration, SimError
from ibqos.sim.workload import JobRun, RunResult, SimJob

# Event kinds: a link finished sending its packet; a packet is ready to leave a switch;
# a source may inject again; a job's compute phase ended.
_DONE, _READY, _WAKE, _COMPUTED = range(4)

# Fields of a packet (a list, mutated hop by hop): flow, hop index on its path, bytes,
# VL on the current link, VL on the link it came in on.
_FLOW, _HOP, _SIZE, _VL, _VL_IN = range(5)
Packet = list[int]


class _Port:
    """The transmitting side of one link: per-VL FIFOs, the receiver's credits, arbiter state.

    Attributes:
        cap: capacity (bytes/s).
        fifo: packets waiting to leave, by VL.
        queued: packets in all FIFOs.
        credits: free slots of the receiver's input buffer, by VL.
        busy: a packet is on the wire.
        hi_idx, hi_left: current entry of the high table and packets left in its turn.
        lo_idx, lo_left: the same for the low table.
        hi_sent: high-priority bytes sent since a low packet last went or waited.
        sent: bytes sent over the run.
        packets: packets sent over the run.
    """

    __slots__ = (
        "busy",
        "cap",
        "credits",
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
        self.fifo: list[deque[Packet]] = [deque() for _ in range(VL_COUNT)]
        self.queued = 0
        self.credits = [buffer_packets] * VL_COUNT
        self.busy = False
        self.hi_idx, self.hi_left = 0, high.packets[0] if high.packets else 0
        self.lo_idx, self.lo_left = 0, low.packets[0] if low.packets else 0
        self.hi_sent = 0
        self.sent = 0
        self.packets = 0

    def can_send(self, vl: int) -> bool:
        """VL *vl* has a packet waiting and a free slot at the receiver."""
        return bool(self.fifo[vl]) and self.credits[vl] > 0


@dataclass(frozen=True)
class _Table:
    """One VLArb table with weight-0 entries dropped: VLs and packets per turn."""

    vls: tuple[int, ...]
    packets: tuple[int, ...]

    @classmethod
    def of(cls, arb: Arbitration, entries: Sequence[tuple[int, int]]) -> _Table:
        kept = [(vl, arb.packets(w)) for vl, w in entries if arb.packets(w) > 0]
        return cls(tuple(vl for vl, _ in kept), tuple(n for _, n in kept))

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
        idx = idx + 1 if idx + 1 < len(self.vls) else 0
        return idx, self.packets[idx]


@dataclass
class _Arbiter:
    """VL arbitration of every port (the same tables everywhere)."""

    high: _Table
    low: _Table
    high_bytes: float

    def pick(self, port: _Port) -> int:
        """Choose the VL that sends next on an idle port and update its state; -1: none."""
        if self.high.vls:
            vl, idx, left = self.high.scan(port, port.hi_idx, port.hi_left)
            if vl >= 0:
                size = port.fifo[vl][0][_SIZE]
                low_waits = self.high_bytes != math.inf and any(
                    port.can_send(v) for v in self.low.vls
                )
                if not low_waits or port.hi_sent + size <= self.high_bytes:
                    port.hi_idx, port.hi_left = self.high.advance(idx, left)
                    port.hi_sent = port.hi_sent + size if low_waits else 0
                    return vl
        port.hi_sent = 0
        vl, idx, left = self.low.scan(port, port.lo_idx, port.lo_left)
        if vl >= 0:
            port.lo_idx, port.lo_left = self.low.advance(idx, left)
        else:
            port.lo_idx, port.lo_left = idx, left
        return vl


@dataclass
class _Host:
    """One sending host of a job: its CA port, pacing and flows' progress.

    Attributes:
        port: dense index of its CA port (the first link of its flows).
        rate: bytes per second it may offer (sum of its flows' rates).
        flows: global indices of its flows with bytes to send.
        queue: (finish tag s, flow) of flows with bytes left this iteration (a heap).
        next_ok: earliest time of its next injection (s).
        wake_at: time of its pending wake-up event, if later than now (s).
        waiting: one of its packets waits in the CA port's FIFO.
    """

    job: int
    port: int
    rate: float
    flows: list[int]
    queue: list[tuple[float, int]] = field(default_factory=list)
    next_ok: float = 0.0
    wake_at: float = -1.0
    waiting: bool = False


@dataclass
class _JobState:
    """A job's progress: iteration ends so far and packets still to deliver this phase."""

    sim: SimJob
    hosts: list[int]
    packets: int
    outstanding: int = 0
    ends: list[float] = field(default_factory=list)
    idle: bool = False  # sends nothing and computes for 0 s: its iterations take no time


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
        high, low = _Table.of(arb, arb.vlarb_high), _Table.of(arb, arb.vlarb_low)
        self.arbiter = _Arbiter(high, low, arb.high_bytes())
        self.ports = [_Port(float(c), buffer_packets, high, low) for c in net.capacity]
        self.sl_to_vl = arb.sl_to_vl
        self.paths: list[list[int]] = []
        self.flow_sl: list[int] = []
        self.flow_job: list[int] = []
        self.flow_host: list[int] = []
        self.flow_rate: list[float] = []
        self.flow_bytes: list[int] = []
        self.left: list[int] = []  # bytes each flow has still to inject this iteration
        self.hosts: list[_Host] = []
        self.jobs = [self._add_job(net, j, sim, arb) for j, sim in enumerate(jobs)]
        self.heap: list[tuple[float, int, int, int, Packet | None]] = []
        self.seq = itertools.count()
        self.now = 0.0
        self.iterations = 0
        self.unfinished = 0  # jobs that have not ended self.iterations iterations yet

    def _add_job(self, net: Network, j: int, sim: SimJob, arb: Arbitration) -> _JobState:
        """Register a job's flows and sending hosts (flows of 0 bytes are left out)."""
        flows = sim.flows
        sl = arb.job_sl.get(sim.id, 0)
        by_host: dict[int, _Host] = {}
        packets = 0
        for k, path in enumerate(net.paths(flows)):
            size = round(float(flows.rate[k]) * sim.comm_s)
            if size <= 0:
                continue
            src = int(flows.src_host[k])
            host = by_host.get(src)
            if host is None:
                host = by_host[src] = _Host(j, path[0], 0.0, [])
            f = len(self.paths)
            host.rate += float(flows.rate[k])
            host.flows.append(f)
            self.paths.append(path)
            self.flow_sl.append(sl)
            self.flow_job.append(j)
            self.flow_host.append(-1)  # numbered below, once the job's hosts are known
            self.flow_rate.append(float(flows.rate[k]))
            self.flow_bytes.append(size)
            self.left.append(0)
            packets += -(-size // self.mtu)
        order = sorted(by_host)
        first = len(self.hosts)
        for i, src in enumerate(order):
            for f in by_host[src].flows:
                self.flow_host[f] = first + i
        self.hosts.extend(by_host[src] for src in order)
        idle = packets == 0 and sim.compute_s <= 0
        return _JobState(sim, list(range(first, len(self.hosts))), packets, idle=idle)

    # -- events --------------------------------------------------------------------------

    def _push(self, t: float, kind: int, arg: int, pkt: Packet | None = None) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), kind, arg, pkt))

    def run(self, iterations: int, max_events: int) -> RunResult:
        """Run until every job has ended *iterations* iterations."""
        self.iterations = iterations
        self.unfinished = sum(not job.idle for job in self.jobs)
        for j, job in enumerate(self.jobs):
            if job.idle:
                job.ends.extend([0.0] * iterations)
            else:
                self._start_iteration(j)
        events = 0
        heap = self.heap
        pop = heapq.heappop
        while self.unfinished:
            if not heap:
                raise SimError("packet model: no event left before the jobs finished (deadlock)")
            events += 1
            if events > max_events:
                raise SimError(
                    f"packet model: more than {max_events} events; shrink the iterations, the"
                    " jobs' bytes per iteration (rate x duty x period_s) or the fabric"
                )
            self.now, _, kind, arg, pkt = pop(heap)
            if kind == _DONE:
                assert pkt is not None
                self._done(arg, pkt)
            elif kind == _READY:
                assert pkt is not None
                self._enqueue(arg, pkt)
            elif kind == _WAKE:
                self._inject(arg)
            else:
                self._start_comm(arg)
        return self._result(events, iterations)

    def _result(self, events: int, iterations: int) -> RunResult:
        runs = {
            job.sim.id: JobRun(
                job.sim.id, len(job.sim.job.nodes), tuple(job.ends), job.ends[iterations - 1]
            )
            for job in self.jobs
        }
        link_bytes = np.array([p.sent for p in self.ports], dtype=np.float64)
        sim_time = max((run.t_s for run in runs.values()), default=0.0)
        return RunResult("packet", runs, sim_time, link_bytes, events)

    # -- jobs ----------------------------------------------------------------------------

    def _start_iteration(self, j: int) -> None:
        """Compute phase of job *j*, then its communication phase."""
        compute = self.jobs[j].sim.compute_s
        if compute > 0:
            self._push(self.now + compute, _COMPUTED, j)
        else:
            self._start_comm(j)

    def _start_comm(self, j: int) -> None:
        job = self.jobs[j]
        if job.packets == 0:
            self._end_comm(j)
            return
        job.outstanding = job.packets
        mtu = self.mtu
        for h in job.hosts:
            host = self.hosts[h]
            for f in host.flows:
                self.left[f] = self.flow_bytes[f]
            # finish tag of each flow's first packet; the flow index breaks ties
            host.queue = [(min(mtu, self.flow_bytes[f]) / self.flow_rate[f], f) for f in host.flows]
            heapq.heapify(host.queue)
            host.next_ok = self.now
            self._inject(h)

    def _end_comm(self, j: int) -> None:
        ends = self.jobs[j].ends
        ends.append(self.now)
        if len(ends) == self.iterations:
            self.unfinished -= 1
        self._start_iteration(j)

    # -- sources -------------------------------------------------------------------------

    def _inject(self, h: int) -> None:
        """Host *h* puts its next packet into its CA port's FIFO, if pacing lets it."""
        host = self.hosts[h]
        if host.waiting or not host.queue:
            return
        now = self.now
        if now < host.next_ok:
            if not now < host.wake_at <= host.next_ok:
                host.wake_at = host.next_ok
                self._push(host.next_ok, _WAKE, h)
            return
        tag, f = heapq.heappop(host.queue)
        size = min(self.mtu, self.left[f])
        self.left[f] -= size
        if self.left[f] > 0:
            heapq.heappush(host.queue, (tag + min(self.mtu, self.left[f]) / self.flow_rate[f], f))
        host.next_ok = now + size / host.rate
        host.waiting = True
        vl = self.sl_to_vl[self.flow_sl[f]]
        self._enqueue(host.port, [f, 0, size, vl, vl])

    # -- ports ---------------------------------------------------------------------------

    def _enqueue(self, link: int, pkt: Packet) -> None:
        """A packet joins the FIFO of its VL at the port of *link*."""
        port = self.ports[link]
        port.fifo[pkt[_VL]].append(pkt)
        port.queued += 1
        if not port.busy:
            self._try_start(link)

    def _try_start(self, link: int) -> None:
        """An idle port sends the packet its arbiter picks, if any VL may send."""
        port = self.ports[link]
        vl = self.arbiter.pick(port)
        if vl < 0:
            return
        pkt = port.fifo[vl].popleft()
        port.queued -= 1
        port.credits[vl] -= 1
        port.busy = True
        size = pkt[_SIZE]
        port.sent += size
        port.packets += 1
        self._push(self.now + size / port.cap, _DONE, link, pkt)
        hop = pkt[_HOP]
        if hop:
            # it left the switch's input buffer: its slot there is free again
            prev = self.paths[pkt[_FLOW]][hop - 1]
            up = self.ports[prev]
            vl_in = pkt[_VL_IN]
            up.credits[vl_in] += 1
            if not up.busy and up.fifo[vl_in]:  # nothing else changed for that port
                self._try_start(prev)
        else:
            h = self.flow_host[pkt[_FLOW]]
            self.hosts[h].waiting = False
            self._inject(h)

    def _done(self, link: int, pkt: Packet) -> None:
        """The last byte of *pkt* arrived over *link*: deliver or forward it."""
        port = self.ports[link]
        port.busy = False
        f = pkt[_FLOW]
        path = self.paths[f]
        hop = pkt[_HOP] + 1
        if hop == len(path):
            port.credits[pkt[_VL]] += 1  # the destination CA consumes it at once
            self._deliver(f)
        else:
            pkt[_HOP] = hop
            pkt[_VL_IN] = pkt[_VL]
            pkt[_VL] = self.sl_to_vl[self.flow_sl[f]]
            if self.latency > 0:
                self._push(self.now + self.latency, _READY, path[hop], pkt)
            else:
                self._enqueue(path[hop], pkt)
        # forwarding or delivering may have started this port already (zero latency)
        if not port.busy and port.queued:
            self._try_start(link)

    def _deliver(self, f: int) -> None:
        j = self.flow_job[f]
        job = self.jobs[j]
        job.outstanding -= 1
        if job.outstanding == 0:
            self._end_comm(j)


def simulate_packets(
    net: Network,
    jobs: Sequence[SimJob],
    arb: Arbitration,
    iterations: int,
    *,
    buffer_packets: int = 8,
    switch_latency_s: float = 100e-9,
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
