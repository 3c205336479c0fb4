"""Traffic model: what the port counters of a real fabric would show for a job mix.

ibsim moves no data, so the lab computes it.  For each job the pattern gives a traffic
matrix between its hosts (bytes per second while communicating); the flows are walked over
OpenSM's forwarding tables once (:class:`~ibqos.fabric.routes.Router`), giving the job's load
on every port.  A tick of *dt* seconds then adds, per job, its load times the time it spent
communicating in that window (bulk-synchronous iterations: the first ``duty * period_s`` of
every period), and the lab writes the resulting 64-bit counters into ibsim.

Link capacity is respected crudely by default (the ``crude`` contention model; the
``fluid`` one is described below): when the jobs' average load on a port exceeds the
link's capacity within a tick, every job crossing that port is slowed by the port's
over-subscription factor (its worst one).  No max-min redistribution: the contention
simulator models sharing properly; the lab only has to stay physically possible.

Ground truth is kept per job and per fat-tree level: level 0 is every byte the job's hosts
inject; level *l* >= 1 the bytes whose destination lies outside the source's level-*l*
subtree, i.e. that cross the uplinks of level-*l* switches (docs/design.md §1).

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
the lab's tick (:meth:`ibqos.lab.lab.Lab.tick`) writes them for every port that ever waited.

Two contention models (the lab's ``contention``, in lab.json):

``crude`` (the default): the rule above.  Time alone drives the jobs: a job's iterations
end every ``period_s`` whatever the load, contention only trims the bytes it moves, and
the lanes play no part.  Its iteration rate is ``1 / period_s``.

``fluid``: the contention simulator (:class:`ibqos.sim.fluid.FluidSim`) drives the jobs,
over the same routes (its :class:`~ibqos.sim.network.Network` is built from the lab's
topology and OpenSM's LFTs) and under the QoS setup programmed on the switches
(:meth:`TrafficModel.set_arbitration`, read back from the fabric by
:mod:`ibqos.lab.readback`).  A job iterates bulk-synchronously: it computes for
``(1 - duty) x period_s``, then communicates ``rate x duty x period_s`` bytes per flow at
up to its declared rate, sharing the links with the other jobs by the lanes' weights; the
next iteration starts when the last byte is through.  A tick of *dt* advances the
simulator by *dt*; a job's bytes on a port in that window are its full-rate-equivalent
seconds of communication in it (the simulator's ``sent`` delta) times its load there, and
its ground truth per level grows the same way, so counters and truth stay consistent as
in the crude path.  (The simulator paces each host of a job on its own; spreading the
job's bytes over its ports in the proportions of its declared load is exact while its
hosts keep pace and close otherwise.)  Iterations are the simulator's.

- XmitWait keeps the rule above, with *L* the declared-rate load of the jobs
  communicating, taken interval by interval between two phase changes (the simulator is
  stepped from event to event within a tick) rather than averaged over the tick: a port
  waits while the jobs that want it offer more than it carries.  Per-VL wait is split by
  the VLs the read-back tables give the jobs.
- A new mix (:meth:`TrafficModel.set_jobs`) or a setup that starts or stops serving some
  job's VL builds a new simulator; jobs that stay keep their phase (computing or
  communicating, and how much of it is left) and their iteration count.  A job that
  joins starts with its compute phase; a job whose parameters change keeps its count
  and starts a new iteration.  A new setup that serves the same jobs only changes the
  simulator's arbitration.
- A job on a VL that no VLArb entry serves (or on VL 15) never transmits on a real port:
  here it stalls, frozen in its phase, until a setup serves its VL again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ibqos.attribute.patterns import traffic_matrix
from ibqos.fabric.routes import FloatArray, IntArray, Router
from ibqos.fabric.topology import Port, Topology
from ibqos.jobs.model import Job
from ibqos.lab.progress import WINDOW_S, Window
from ibqos.sim.qos import Arbitration

if TYPE_CHECKING:  # at run time imported where used: ibqos.sim.network imports ibqos.lab
    from ibqos.sim.fluid import FluidSim, JobPhase
    from ibqos.sim.network import Network

log = logging.getLogger(__name__)

CONTENTION_MODELS = ("crude", "fluid")

MTU_BYTES = 2048  # ibsim ports report an MTU of 2048 (docs/design.md §8.5)
#: PortXmitWait ticks per second of full stall, in this model (see the module docstring):
#: one tick per 10 ns, the order of magnitude real PMAs count in.
XMIT_WAIT_TICKS_PER_S = 1e8
#: PortCounters.PortXmitWait is 32 bits wide and sticks at its top (IBA 16.1.3.5).
XMIT_WAIT_MAX = 2**32 - 1
#: PortVLXmitWaitCounters.PortVLXmitWait<n> are 16 bits wide (IBA 16.1.4).
VL_XMIT_WAIT_MAX = 2**16 - 1
VL_COUNT = 16
#: ibsim PerformanceSet names (docs/design.md §8.4) of the wait counters the model drives
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
        iterations: iterations finished so far (kept when the job's parameters change).
        progress: the iteration counts over recent ticks (iterations per second).
        phase: fluid mode, while the job is out of the simulator: where it was in its
            iteration; None for a job that has not run yet.
    """

    job: Job
    start: float
    xmit: FloatArray
    rcv: FloatArray
    level_rate: FloatArray
    truth: FloatArray = field(init=False)
    last_rate: FloatArray = field(init=False)
    iterations: int = 0
    iter_base: int = 0
    progress: Window = field(init=False)
    phase: JobPhase | None = None

    def __post_init__(self) -> None:
        self.truth = np.zeros_like(self.level_rate)
        self.last_rate = np.zeros_like(self.level_rate)
        self.progress = Window(WINDOW_S, self.start)


class TrafficModel:
    """Cumulative per-port counters of a fabric under a changing job mix.

    Args:
        topo: fabric with LIDs.
        router: routes over OpenSM's tables.
        hosts: host name -> its CA ports (one per rail).
        network: the fluid contention model's network (its router must be *router*);
            None: crude contention.
        arbitration: the QoS setup the fluid model starts with (required with *network*).
        window_s: seconds of model time the iteration rate is averaged over.

    Raises:
        ValueError: *network* without *arbitration*, or over other routes than *router*.
    """

    def __init__(
        self,
        topo: Topology,
        router: Router,
        hosts: dict[str, list[Port]],
        *,
        network: Network | None = None,
        arbitration: Arbitration | None = None,
        window_s: float = WINDOW_S,
    ) -> None:
        if network is not None and (arbitration is None or network.router.ports != router.ports):
            raise ValueError("fluid contention needs an arbitration and the network's router")
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
        self.window_s = window_s
        self.network = network
        self.arbitration = arbitration
        self._sim: FluidSim | None = None
        self._sim_jobs: list[JobLoad] = []  # the jobs in the simulator, in its order
        self._hot = np.zeros(0, dtype=np.int64)  # ports the simulated jobs can overload
        self._stalled: set[str] = set()  # jobs on a VL no VLArb entry serves (warned)

    @property
    def contention(self) -> str:
        """ "crude" or "fluid" (see the module docstring)."""
        return "crude" if self.network is None else "fluid"

    def set_jobs(self, jobs: tuple[Job, ...]) -> None:
        """Switch to a new job mix; unchanged jobs keep their phase and history."""
        self._save_phases()
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
                    load.iterations = load.iter_base = old.iterations
                    load.progress = old.progress
                self.jobs[job.id] = load
        self._sim = None  # rebuilt at the next tick

    def set_arbitration(self, arbitration: Arbitration) -> None:
        """Fluid mode: the QoS setup now programmed on the fabric (SLs, SL2VL, VLArb).

        Raises:
            ValueError: the model runs crude contention.
        """
        if self.network is None:
            raise ValueError("crude contention has no arbitration")
        if arbitration == self.arbitration:
            return
        self.arbitration = arbitration
        if self._sim is not None and self._served() == [j.job.id for j in self._sim_jobs]:
            self._sim.set_arbitration(arbitration)
        else:
            self._save_phases()
            self._sim = None

    def vls(self) -> dict[str, int]:
        """Fluid mode: each running job's VL under the setup in force (empty when crude)."""
        if self.arbitration is None or self.network is None:
            return {}
        return {jid: self.arbitration.vl_of(jid) for jid in self.jobs}

    def iterations_per_second(self, job_id: str) -> float:
        """A job's iterations per second over the last *window_s* seconds of model time."""
        load = self.jobs.get(job_id) or self.finished[job_id]
        return load.progress.rate()

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
        if self.network is not None:
            self._tick_fluid(dt, vls)
        else:
            self._tick_crude(t0, t1, vls)
        for j in self.jobs.values():
            j.progress.add(t1, j.iterations)

    def _tick_crude(self, t0: float, t1: float, vls: Mapping[str, int] | None) -> None:
        dt = t1 - t0
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
        self._add_bytes(loads, busy * factor, dt)
        for j in loads:  # crude: iterations follow the clock, every period_s
            j.iterations = j.iter_base + int((t1 - j.start) / j.job.period_s + 1e-9)

    def _add_bytes(self, loads: list[JobLoad], scale: FloatArray, dt: float) -> None:
        """Add each job's load times its full-rate seconds *scale* to counters and truth."""
        self.xmit_bytes += scale @ np.stack([j.xmit for j in loads])
        self.rcv_bytes += scale @ np.stack([j.rcv for j in loads])
        for j, s in zip(loads, scale, strict=True):
            j.truth += j.level_rate * s
            j.last_rate = j.level_rate * s / dt

    # -- fluid contention ---------------------------------------------------------------
    def _served(self) -> list[str]:
        """Ids of the running jobs whose VL the setup in force serves, in mix order."""
        assert self.arbitration is not None
        arb = self.arbitration
        served = set(arb.low_packets()) | set(arb.high_packets())
        out = []
        for jid in self.jobs:
            vl = arb.vl_of(jid)
            if vl in served:
                out.append(jid)
                if jid in self._stalled:
                    self._stalled.discard(jid)
                    log.info("job %s: VL %d is served again, it runs", jid, vl)
            elif jid not in self._stalled:
                self._stalled.add(jid)
                log.warning(
                    "job %s: SL %d maps to VL %d, which no VLArb entry serves: it stalls",
                    jid,
                    arb.job_sl.get(jid, 0),
                    vl,
                )
        return out

    def _save_phases(self) -> None:
        """Keep the simulated jobs' phases and iteration counts before the simulator goes."""
        if self._sim is None:
            return
        sim = self._sim
        for i, j in enumerate(self._sim_jobs):
            j.phase = sim.phase(i)
            j.iterations = j.iter_base + int(sim.iterations[i])
        self._sim = None

    def _build_sim(self) -> FluidSim | None:
        """A simulator of the served jobs, each in the phase it was left in."""
        # imported here: ibqos.sim.network imports ibqos.lab (see the imports at the top)
        from ibqos.sim.fluid import FluidSim
        from ibqos.sim.workload import SimJob

        assert self.network is not None and self.arbitration is not None
        served = set(self._served())
        loads = [j for jid, j in self.jobs.items() if jid in served]
        self._sim_jobs = loads
        if not loads:
            return None
        sim_jobs = [
            SimJob(
                j.job,
                j.job.period_s * (1 - j.job.duty),
                j.job.period_s * j.job.duty,
                self.network.flows(j.job),
                j.xmit,
            )
            for j in loads
        ]
        sim = FluidSim(self.network, sim_jobs, self.arbitration)
        for i, j in enumerate(loads):
            j.iter_base = j.iterations  # the new simulator counts from 0
            if j.phase is not None:
                sim.set_phase(i, j.phase)
        sim.set_arbitration(self.arbitration)  # forget rates solved for the fresh phases
        total = np.stack([j.xmit for j in loads]).sum(axis=0)
        self._hot = np.flatnonzero(total > self.capacity * (1 + 1e-12))
        return sim

    def _tick_fluid(self, dt: float, vls: Mapping[str, int] | None) -> None:
        """Advance the simulator by *dt*, one phase change at a time (rates are constant
        in between), adding the bytes it moved and the wait its loads cause."""
        if self._sim is None:
            self._sim = self._build_sim()
        loads = list(self.jobs.values())
        sim = self._sim
        if sim is None:  # every job stalls
            self._add_bytes(loads, np.zeros(len(loads)), dt)
            return
        xmit = np.stack([j.xmit for j in self._sim_jobs])[:, self._hot]
        cap = self.capacity[self._hot]
        lane: FloatArray | None = None
        if vls is not None and self.vl_xmit_wait is not None and self._hot.size:
            lane = np.zeros((len(self._sim_jobs), VL_COUNT))
            lane[np.arange(len(self._sim_jobs)), [vls.get(j.job.id, 0) for j in self._sim_jobs]] = 1
        sent0 = sim.sent.copy()
        left = dt
        while left > 0:
            # FluidSim.advance ignores steps below its relative tolerance
            step = min(max(sim.next_event_s(), 1e-9 + 1e-11 * sim.time), left)
            comm = sim.comm.astype(float)
            before = sim.time
            sim.advance(step)
            took = sim.time - before
            if took <= 0:  # nothing moved: let the simulator take the rest its own way
                sim.advance(left)
                break
            left -= took
            if self._hot.size:
                offered = comm @ xmit  # declared-rate load of the communicating jobs
                with np.errstate(divide="ignore", invalid="ignore"):
                    over = np.where(offered > cap, 1.0 - cap / offered, 0.0)
                wait = over * XMIT_WAIT_TICKS_PER_S * took
                self.xmit_wait[self._hot] += wait
                if lane is not None and self.vl_xmit_wait is not None and wait.any():
                    by_vl = (comm[:, None] * xmit).T @ lane  # (hot port, VL) offered
                    total = by_vl.sum(axis=1, keepdims=True)
                    with np.errstate(divide="ignore", invalid="ignore"):
                        share = np.where(total > 0, by_vl / total, 0.0)
                    self.vl_xmit_wait[self._hot] += wait[:, None] * share
        for ends in sim.ends:  # iteration end times: unused here, and they only grow
            ends.clear()
        sent = dict(zip((j.job.id for j in self._sim_jobs), sim.sent - sent0, strict=True))
        self._add_bytes(loads, np.array([sent.get(j.job.id, 0.0) for j in loads]), dt)
        for i, j in enumerate(self._sim_jobs):
            j.iterations = j.iter_base + int(sim.iterations[i])

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
        load = JobLoad(job, self.time, xmit, rcv, levels)
        load.progress = Window(self.window_s, self.time)
        return load

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
