"""Traffic model: what the port counters of a real fabric would show for a job mix.

ibsim moves no data, so the lab computes it.  For each job the pattern gives a traffic
matrix between its hosts (bytes per second while communicating); the flows are walked over
OpenSM's forwarding tables once (:class:`~ibqos.lab.routes.Router`), giving the job's load
on every port.  A tick of *dt* seconds then adds, per job, its load times the time it spent
communicating in that window (bulk-synchronous iterations: the first ``duty * period_s`` of
every period), and the lab writes the resulting 64-bit counters into ibsim.

Link capacity is respected crudely: when the jobs' average load on a port exceeds the
link's capacity within a tick, every job crossing that port is slowed by the port's
over-subscription factor (its worst one).  No max-min redistribution: the contention
simulator models sharing properly; the lab only has to stay physically possible.

Ground truth is kept per job and per fat-tree level: level 0 is every byte the job's hosts
inject; level *l* >= 1 the bytes whose destination lies outside the source's level-*l*
subtree, i.e. that cross the uplinks of level-*l* switches (DESIGN.md section 1).

Transmit wait (PortCounters.PortXmitWait) is modelled too, by one rule: a port whose offered
load *L* over a tick (the same average the throttling uses) exceeds its capacity *C* adds

    ticks = (L - C) / L  x  XMIT_WAIT_TICKS_PER_S  x  dt

that is, the share of the offered bytes the link could not carry, taken as the share of
the tick its senders were held back, times a tick rate.  A port at or below capacity adds
0.  This is a model, not a measurement: a real PMA counts ticks in which the port had
data and no credit, in implementation-defined ticks (of the order of nanoseconds on
current hardware), and credits run out upstream of a bottleneck as well as at it.  The
counter is 32 bits and sticks at its top, as the real one does (about 43 s of full stall
at 1e8 ticks/s).

Told each job's VL (``tick(dt, vls={job id: VL})``), the model also splits every port's
new wait over the VLs in proportion to the bytes each VL offered there in the tick
(PortVLXmitWaitCounters: 16 bits, sticky at 65,535, which is 0.66 ms of full stall at this
tick rate).  Without VLs the per-VL counters are never written.
:meth:`TrafficModel.wait_counters` gives both as the PerformanceSet fields ibsim takes
(``PortCounters.PortXmitWait``, ``PortVLXmitWaitCounters.PortVLXmitWaitCounters<n>``);
the lab's tick (:meth:`ibqos.lab.lab.Lab.tick`) writes only the data counters so far.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ibqos.jobs import Job
from ibqos.lab.routes import FloatArray, IntArray, Router
from ibqos.patterns import traffic_matrix
from ibqos.topology import Port, Topology

MTU_BYTES = 2048  # ibsim ports report an MTU of 2048 (reference C.5)
#: PortXmitWait ticks per second of full stall, in this model (see the module docstring):
#: one tick per 10 ns, the order of magnitude real PMAs count in.
XMIT_WAIT_TICKS_PER_S = 1e8
#: PortCounters.PortXmitWait is 32 bits wide and sticks at its top (IBA 16.1.3.5).
XMIT_WAIT_MAX = 2**32 - 1
#: PortVLXmitWaitCounters.PortVLXmitWait<n> are 16 bits wide (IBA 16.1.4).
VL_XMIT_WAIT_MAX = 2**16 - 1
VL_COUNT = 16
#: ibsim PerformanceSet names (reference C.4) of the wait counters the model drives
XMIT_WAIT_FIELD = "PortCounters.PortXmitWait"
VL_XMIT_WAIT_FIELDS = tuple(
    f"PortVLXmitWaitCounters.PortVLXmitWaitCounters{vl}" for vl in range(VL_COUNT)
)


def comm_seconds(job: Job, start: float, t0: float, t1: float) -> float:
    """Seconds job spends communicating between model times t0 and t1 (s).

    Iterations start at *start*; each spends its first ``duty * period_s`` communicating.
    """

    def busy(t: float) -> float:
        t = max(0.0, t - start)
        k, r = divmod(t, job.period_s)
        return k * job.duty * job.period_s + min(r, job.duty * job.period_s)

    return busy(t1) - busy(t0)


@dataclass
class JobLoad:
    """A job routed over the fabric: its port loads and per-level rates while communicating.

    Attributes:
        job: the job.
        start: model time its iterations start (s).
        xmit, rcv: bytes per second per dense port index.
        level_rate: bytes per second across each fat-tree level (index 0 = injection).
        truth: bytes sent across each level so far.
    """

    job: Job
    start: float
    xmit: FloatArray
    rcv: FloatArray
    level_rate: FloatArray
    truth: FloatArray = field(init=False)
    last_rate: FloatArray = field(init=False)

    def __post_init__(self) -> None:
        self.truth = np.zeros_like(self.level_rate)
        self.last_rate = np.zeros_like(self.level_rate)


class TrafficModel:
    """Cumulative per-port counters of a fabric under a changing job mix.

    Args:
        topo: fabric with LIDs.
        router: routes over OpenSM's tables.
        hosts: host name -> its CA ports (one per rail).
    """

    def __init__(self, topo: Topology, router: Router, hosts: dict[str, list[Port]]) -> None:
        self.topo = topo
        self.router = router
        self.hosts = hosts
        levels = topo.switch_levels()
        self.uplink_levels = max(levels.values(), default=1) - 1
        subtrees = [topo.subtrees(lvl, levels) for lvl in range(1, self.uplink_levels + 1)]
        self._subtree = {c: tuple(s[c] for s in subtrees) for c in (n.id for n in topo.cas())}
        ports = router.ports
        links = [topo.link_at(p) for p in ports]  # router ports are all connected
        self.capacity = np.array([link.rate_bytes_per_s if link else 0.0 for link in links])
        self.xmit_bytes = np.zeros(len(ports))
        self.rcv_bytes = np.zeros(len(ports))
        #: PortXmitWait ticks per dense port index, not yet clamped to 32 bits
        self.xmit_wait = np.zeros(len(ports))
        #: per-VL wait ticks, (port, VL); None until a tick is told the jobs' VLs
        self.vl_xmit_wait: FloatArray | None = None
        self.jobs: dict[str, JobLoad] = {}
        self.finished: dict[str, JobLoad] = {}
        self.time = 0.0

    def set_jobs(self, jobs: tuple[Job, ...]) -> None:
        """Switch to a new job mix; unchanged jobs keep their phase and history."""
        current = {job.id: job for job in jobs}
        for jid in list(self.jobs):
            if current.get(jid) != self.jobs[jid].job:
                self.finished[jid] = self.jobs.pop(jid)
        for job in jobs:
            if job.id not in self.jobs:
                load = self._route(job)
                old = self.finished.pop(job.id, None)
                if old is not None:  # same job, new parameters: its bytes so far still count
                    load.truth += old.truth
                self.jobs[job.id] = load

    def tick(self, dt: float, vls: Mapping[str, int] | None = None) -> None:
        """Advance model time by *dt* seconds and add the traffic of that window.

        Args:
            dt: seconds.
            vls: VL (0-15) of each job, by job id, to split the transmit wait over the
                VLs; a job not in it is on VL 0 (the default lane).  None: the per-VL
                counters are left as they are.

        Raises:
            ValueError: a VL outside 0-15.
        """
        t0, t1 = self.time, self.time + dt
        self.time = t1
        if vls is not None:
            bad = {jid: vl for jid, vl in vls.items() if not 0 <= vl < VL_COUNT}
            if bad:
                raise ValueError(f"VLs must be 0-{VL_COUNT - 1}, got {bad}")
            if self.vl_xmit_wait is None:
                self.vl_xmit_wait = np.zeros((len(self.capacity), VL_COUNT))
        if dt <= 0 or not self.jobs:
            return
        loads = list(self.jobs.values())
        busy = np.array([comm_seconds(j.job, j.start, t0, t1) for j in loads])
        xmit = np.stack([j.xmit for j in loads])
        offered = busy @ xmit / dt
        with np.errstate(divide="ignore", invalid="ignore"):
            port_factor = np.where(offered > self.capacity, self.capacity / offered, 1.0)
            # the share of the offered bytes the link could not carry: 0 at or below capacity
            over = np.where(offered > self.capacity, 1.0 - port_factor, 0.0)
        wait = over * XMIT_WAIT_TICKS_PER_S * dt
        self.xmit_wait += wait
        if vls is not None and self.vl_xmit_wait is not None and wait.any():
            lane = np.zeros((len(loads), VL_COUNT))
            lane[np.arange(len(loads)), [vls.get(j.job.id, 0) for j in loads]] = 1.0
            by_vl = (busy[:, None] * xmit).T @ lane  # (port, VL): bytes offered in the tick
            total = by_vl.sum(axis=1, keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                share = np.where(total > 0, by_vl / total, 0.0)
            self.vl_xmit_wait += wait[:, None] * share
        factor = np.array([float(port_factor[j.xmit > 0].min(initial=1.0)) for j in loads])
        scale = busy * factor
        self.xmit_bytes += scale @ xmit
        self.rcv_bytes += scale @ np.stack([j.rcv for j in loads])
        for j, s in zip(loads, scale, strict=True):
            j.truth += j.level_rate * s
            j.last_rate = j.level_rate * s / dt

    def _route(self, job: Job) -> JobLoad:
        m = traffic_matrix(job)
        src_i, dst_i = np.nonzero(m)
        rates = m[src_i, dst_i]
        node_ports = [self.hosts[h] for h in job.nodes]
        nrails = np.array([len(p) for p in node_ports])
        xmit = np.zeros(len(self.router.ports))
        rcv = np.zeros(len(self.router.ports))
        levels = np.zeros(self.uplink_levels + 1)
        for k in range(int(nrails.max(initial=0))):
            # rail k of a host talks to rail k of its peer (modulo the peer's rails)
            rail = [p[k % len(p)] for p in node_ports]
            index = _ints([self.router.port_index[p] for p in rail])
            lid = _ints([self.topo.lids[p] for p in rail])
            sub = np.array([self._subtree[p.node] for p in rail], dtype=np.int64)
            keep = k < nrails[src_i]
            s, d = src_i[keep], dst_i[keep]
            w = rates[keep] / nrails[s]
            x, r = self.router.route(index[s], lid[d], index[d], w)
            xmit += x
            rcv += r
            levels[0] += w.sum()
            if self.uplink_levels:
                levels[1:] += w @ (sub.reshape(len(rail), -1)[s] != sub.reshape(len(rail), -1)[d])
        return JobLoad(job, self.time, xmit, rcv, levels)

    def totals(self, port: Port) -> tuple[int, int, int, int]:
        """(PortXmitData, PortRcvData, PortXmitPkts, PortRcvPkts) of a port as counters:
        data in 4-octet words, packets of at most :data:`MTU_BYTES`."""
        i = self.router.port_index[port]
        return _counters(float(self.xmit_bytes[i]), float(self.rcv_bytes[i]))

    def wait_counters(self, port: Port) -> dict[str, int]:
        """The modelled wait counters of a port, by ibsim PerformanceSet field name
        (``Attribute.Field``): PortCounters.PortXmitWait, and the sixteen
        PortVLXmitWaitCounters once a tick was told the jobs' VLs.  Whole ticks, stuck
        at the counters' maxima as real ones are."""
        i = self.router.port_index[port]
        out = {XMIT_WAIT_FIELD: min(int(self.xmit_wait[i]), XMIT_WAIT_MAX)}
        if self.vl_xmit_wait is not None:
            for name, ticks in zip(VL_XMIT_WAIT_FIELDS, self.vl_xmit_wait[i], strict=True):
                out[name] = min(int(ticks), VL_XMIT_WAIT_MAX)
        return out


def _counters(xmit: float, rcv: float) -> tuple[int, int, int, int]:
    return (
        int(xmit // 4),
        int(rcv // 4),
        math.ceil(xmit / MTU_BYTES),
        math.ceil(rcv / MTU_BYTES),
    )


def _ints(values: list[int]) -> IntArray:
    return np.array(values, dtype=np.int64)
