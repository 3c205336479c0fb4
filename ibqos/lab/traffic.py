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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ibqos.jobs import Job
from ibqos.lab.routes import FloatArray, IntArray, Router
from ibqos.patterns import traffic_matrix
from ibqos.topology import Port, Topology

MTU_BYTES = 2048  # ibsim ports report an MTU of 2048 (reference C.5)


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

    def tick(self, dt: float) -> None:
        """Advance model time by *dt* seconds and add the traffic of that window."""
        t0, t1 = self.time, self.time + dt
        self.time = t1
        if dt <= 0 or not self.jobs:
            return
        loads = list(self.jobs.values())
        busy = np.array([comm_seconds(j.job, j.start, t0, t1) for j in loads])
        xmit = np.stack([j.xmit for j in loads])
        offered = busy @ xmit / dt
        with np.errstate(divide="ignore", invalid="ignore"):
            port_factor = np.where(offered > self.capacity, self.capacity / offered, 1.0)
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


def _counters(xmit: float, rcv: float) -> tuple[int, int, int, int]:
    return (
        int(xmit // 4),
        int(rcv // 4),
        math.ceil(xmit / MTU_BYTES),
        math.ceil(rcv / MTU_BYTES),
    )


def _ints(values: list[int]) -> IntArray:
    return np.array(values, dtype=np.int64)
