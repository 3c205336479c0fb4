"""Fluid contention model: jobs' communication as rates that share links, event-driven.

Between two events (a job entering or leaving a communication phase) every communicating
job *j* progresses at one rate: a fraction ``alpha_j`` (0..1] of its declared rate, applied
to all of its flows at once.  A bulk-synchronous phase ends with its slowest flow, so a job
gains nothing from one flow running ahead of the others: pacing them together is what the
job's iteration time depends on.  At ``alpha_j`` the job puts ``alpha_j x load_j[l]`` bytes/s
on link *l* (:attr:`~ibqos.sim.workload.SimJob.load`).

Sharing rule, per link (by transmitting port), all links at once:

- Between lanes: the high-priority VLs are served first, but while low-priority data waits
  they get at most ``H / (H + MTU)`` of the link (*H* = :meth:`Arbitration.high_bytes`; the
  high limit, no bound at 255).  Within each priority the capacity is split by weighted
  max-min between the busy lanes, a lane's weight being its MTU packets per arbitration
  round: a lane gets ``lambda x weight`` unless it needs less, and what it does not use goes
  to the others (work-conserving, as the arbiter skips an empty VL).
- Within a lane: max-min fairness on ``alpha``: jobs held back elsewhere keep their rate and
  the others share what is left at a common ``alpha``, i.e. in proportion to their demands
  (a FIFO lane serves its backlogged senders in proportion to what they offer).
- A job's rate is the smallest its links grant it, and no more than its declared rate.

These grants depend on each other (what a job may offer a link is what the other links
grant it), so they are solved by fixed-point iteration from everyone at full rate, each
link's grants computed exactly by water-filling.  The iteration stops when no grant moves
by more than 1e-7 (or after :data:`MAX_ROUNDS`, where the last grants are used).  Only
links the communicating jobs could overload are looked at.

What it leaves out, by design: packets, buffers and credits (a full lane's back-pressure
upstream shows only as the held-back job's lower rate), latency, and transients inside a
phase.  :mod:`ibqos.sim.packet` models those; ``docs/simulate.md`` compares the two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ibqos.sim.network import Network
from ibqos.sim.qos import Arbitration, SimError
from ibqos.sim.workload import JobRun, RunResult, SimJob

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MAX_ROUNDS = 200
_TOL = 1e-7
_EPS = 1e-12


def waterfill(demand: FloatArray, weight: FloatArray, cap: FloatArray) -> FloatArray:
    """Weighted max-min shares of capacity, column by column.

    Column *b* has capacity ``cap[b]`` shared by rows *k* that each want ``demand[k, b]``
    (>= 0) with weight ``weight[k, b]`` (> 0 where the demand is): each row gets
    ``min(demand, level x weight)``, the level the highest that fits the capacity.

    Returns:
        The shares, the shape of *demand*.
    """
    total = demand.sum(axis=0)
    fits = total <= cap * (1 + _EPS)
    if fits.all():
        return demand.copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(weight > 0, demand / weight, np.inf)
    ratio = np.where(demand > 0, ratio, 0.0)
    order = np.argsort(ratio, axis=0, kind="stable")
    r = np.take_along_axis(ratio, order, axis=0)
    d = np.take_along_axis(demand, order, axis=0)
    w = np.take_along_axis(np.where(demand > 0, weight, 0.0), order, axis=0)
    # at breakpoint k (level r[k]) rows < k are satisfied and rows >= k get r[k] x weight
    done = np.cumsum(d, axis=0) - d
    rest = np.cumsum(w[::-1], axis=0)[::-1]
    used = done + np.where(np.isfinite(r), r, 0.0) * rest
    over = used >= cap[None, :]
    k = np.where(over.any(axis=0), over.argmax(axis=0), d.shape[0])
    cols = np.arange(d.shape[1])
    kk = np.minimum(k, d.shape[0] - 1)
    base = np.where(k < d.shape[0], done[kk, cols], d.sum(axis=0))
    rest_w = np.where(k < d.shape[0], rest[kk, cols], 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        level = np.where(rest_w > 0, (cap - base) / rest_w, np.inf)
    with np.errstate(invalid="ignore"):  # inf x 0 where a row wants nothing
        share = np.where(weight > 0, np.minimum(demand, level[None, :] * weight), 0.0)
    return np.where(fits[None, :], demand, np.maximum(share, 0.0))


class Allocator:
    """Rates of the communicating jobs under one QoS setup (the sharing rule above).

    Args:
        net: the network.
        jobs: every job of the mix.
        arb: their SLs and the port tables.
    """

    def __init__(self, net: Network, jobs: Sequence[SimJob], arb: Arbitration) -> None:
        arb.check_jobs([j.id for j in jobs])
        self.capacity = net.capacity
        self.load = np.stack([j.load for j in jobs]) if jobs else np.zeros((0, net.links))
        self.vl = np.array([arb.vl_of(j.id) for j in jobs], dtype=np.int64)
        low, high = arb.low_packets(), arb.high_packets()
        self.high = np.array([vl in high for vl in self.vl])
        self.lane_weight = np.array(
            [float(high.get(vl, 0) if vl in high else low.get(vl, 0)) for vl in self.vl]
        )
        high_bytes = arb.high_bytes()
        self.high_share = 1.0 if math.isinf(high_bytes) else high_bytes / (high_bytes + arb.mtu)
        self.rounds = 0  # fixed-point rounds of the last solve
        # the rates depend only on who communicates: a periodic mix repeats few sets
        self._memo: dict[bytes, FloatArray] = {}

    def rates(self, active: npt.NDArray[np.bool_]) -> FloatArray:
        """``alpha`` of every job (0 for the ones not in *active*)."""
        key = active.tobytes()
        if key not in self._memo:
            self._memo[key] = self._solve(active)
        return self._memo[key].copy()

    def _solve(self, active: npt.NDArray[np.bool_]) -> FloatArray:
        alpha = np.zeros(len(self.vl))
        rows = np.flatnonzero(active)
        if rows.size == 0:
            return alpha
        load = self.load[rows]
        hot = np.flatnonzero(load.sum(axis=0) > self.capacity * (1 + _EPS))
        if hot.size == 0:
            alpha[rows] = 1.0
            self.rounds = 0
            return alpha
        a = load[:, hot]
        cap = self.capacity[hot]
        on = a > 0
        vl = self.vl[rows]
        lanes = np.unique(vl)
        lane_of = np.searchsorted(lanes, vl)
        weight = np.array([self.lane_weight[rows][vl == lane][0] for lane in lanes])
        high = np.array([bool(self.high[rows][vl == lane][0]) for lane in lanes])
        grant = np.ones_like(a)
        before: FloatArray | None = None
        for self.rounds in range(1, MAX_ROUNDS + 1):
            offer = _offers(grant, on)
            delta = np.where(on, self._grants(a, offer, cap, lane_of, weight, high) - grant, 0.0)
            if float(np.abs(delta).max()) < _TOL:
                break
            # Jacobi can swing in a 2-cycle (a grant up, the next round down): meet halfway
            swings = before is not None and float((delta * before).sum()) < 0
            grant = grant + (0.5 if swings else 1.0) * delta
            before = delta
        got = np.where(on, grant, np.inf).min(axis=1)
        alpha[rows] = np.minimum(got, 1.0)
        return alpha

    def _grants(
        self,
        a: FloatArray,
        offer: FloatArray,
        cap: FloatArray,
        lane_of: IntArray,
        weight: FloatArray,
        high: npt.NDArray[np.bool_],
    ) -> FloatArray:
        """Each job's grant (in alpha) at each hot link, given what it offers there."""
        n_lanes = len(weight)
        onehot = np.zeros((n_lanes, len(lane_of)))
        onehot[lane_of, np.arange(len(lane_of))] = 1.0
        demand = onehot @ (a * offer)  # (lane, link) bytes/s
        lane_w = np.broadcast_to(weight[:, None], demand.shape)
        share = np.zeros_like(demand)
        if high.any():
            d_high, d_low = demand[high], demand[~high]
            low_waits = d_low.sum(axis=0) > 0
            room = np.where(
                low_waits, np.maximum(cap * self.high_share, cap - d_low.sum(axis=0)), cap
            )
            share[high] = waterfill(d_high, lane_w[high], np.minimum(room, cap))
            left = cap - share[high].sum(axis=0)
            share[~high] = waterfill(d_low, lane_w[~high], np.maximum(left, 0.0))
        else:
            share = waterfill(demand, lane_w, cap)
        # within each lane, max-min on alpha; every lane at once: a job's row is zero
        # outside its own lane's block of (lane, link) columns
        n_jobs, n_links = a.shape
        rows = np.arange(n_jobs)
        blocks = np.zeros((n_jobs, n_lanes, n_links))
        blocks[rows, lane_of] = a
        flat = blocks.reshape(n_jobs, -1)
        wants = np.zeros_like(blocks)
        wants[rows, lane_of] = a * offer
        got = waterfill(wants.reshape(n_jobs, -1), flat, share.reshape(-1))
        mine = got.reshape(blocks.shape)[rows, lane_of]
        with np.errstate(divide="ignore", invalid="ignore"):
            grant: FloatArray = np.where(a > 0, mine / a, offer)
        return grant


def _offers(grant: FloatArray, on: npt.NDArray[np.bool_]) -> FloatArray:
    """What each job can offer each link: the least the *other* links grant it (max 1)."""
    g = np.where(on, grant, np.inf)
    if g.shape[1] == 1:
        return np.ones_like(g)
    first = g.argmin(axis=1)
    rows = np.arange(g.shape[0])
    m1 = g[rows, first]
    g2 = g.copy()
    g2[rows, first] = np.inf
    m2 = g2.min(axis=1)
    cols = np.arange(g.shape[1])
    other: FloatArray = np.where(cols[None, :] == first[:, None], m2[:, None], m1[:, None])
    return np.minimum(other, 1.0)


class FluidSim:
    """A mix of bulk-synchronous jobs advanced through time (event-driven).

    Args:
        net: the network.
        jobs: the mix (:func:`ibqos.sim.workload.prepare`).
        arb: the QoS setup; :meth:`set_arbitration` changes it mid-run.

    Attributes:
        time: simulated seconds so far.
        iterations: iterations each job finished.
        ends: end time of each finished iteration, per job.
        link_bytes: bytes each link carried so far.
        events: phase changes processed.
        allocations: times the rates were solved.
    """

    def __init__(self, net: Network, jobs: Sequence[SimJob], arb: Arbitration) -> None:
        self.net = net
        self.jobs = list(jobs)
        self.comm_s = np.array([j.comm_s for j in self.jobs])
        self.compute_s = np.array([j.compute_s for j in self.jobs])
        self.time = 0.0
        self.comm = np.zeros(len(self.jobs), dtype=bool)  # in the communication phase
        self.left = self.compute_s.copy()  # compute: seconds left; comm: share of bytes left
        self.iterations = np.zeros(len(self.jobs), dtype=np.int64)
        self.ends: list[list[float]] = [[] for _ in self.jobs]
        self.link_bytes = np.zeros(net.links)
        self.sent = np.zeros(len(self.jobs))  # full-rate seconds of communication done
        self.events = 0
        self.allocations = 0
        self.set_arbitration(arb)
        self._start_phases()

    def set_arbitration(self, arb: Arbitration) -> None:
        """Use another QoS setup from now on (SLs and tables reprogrammed)."""
        self.allocator = Allocator(self.net, self.jobs, arb)
        self._alpha: FloatArray | None = None

    @property
    def alpha(self) -> FloatArray:
        """Current rate of every job as a share of its declared rate (0 when computing)."""
        if self._alpha is None:
            self._alpha = self.allocator.rates(self.comm)
            self.allocations += 1
        return self._alpha

    def run(self, iterations: int) -> None:
        """Advance until every job has finished *iterations* iterations."""
        while (self.iterations < iterations).any():
            self._step(math.inf)

    def advance(self, dt: float) -> None:
        """Advance *dt* simulated seconds."""
        end = self.time + dt
        while self.time < end * (1 - _EPS) and end - self.time > _EPS:
            self._step(end)

    def _step(self, until: float) -> None:
        alpha = self.alpha
        with np.errstate(divide="ignore", invalid="ignore"):
            to_go = np.where(self.comm, self.left * self.comm_s / alpha, self.left)
        dt = float(to_go.min(initial=math.inf))
        if math.isinf(dt) and math.isinf(until):
            stuck = [self.jobs[i].id for i in np.flatnonzero(self.comm & (alpha <= 0))]
            raise SimError(f"jobs {', '.join(stuck)} get no bandwidth: the run cannot end")
        dt = min(dt, until - self.time)
        moving = self.comm * alpha
        self.link_bytes += (moving * dt) @ self.allocator.load
        self.sent += moving * dt
        self.time += dt
        done_comm = self.comm & (to_go <= dt * (1 + 1e-9) + _EPS)
        done_compute = ~self.comm & (to_go <= dt * (1 + 1e-9) + _EPS)
        with np.errstate(invalid="ignore"):
            self.left = np.where(self.comm, self.left - alpha * dt / self.comm_s, self.left - dt)
        if done_comm.any() or done_compute.any():
            for i in np.flatnonzero(done_comm):
                self.iterations[i] += 1
                self.ends[i].append(self.time)
            self.comm = np.where(done_comm, False, np.where(done_compute, True, self.comm))
            self.left = np.where(done_comm, self.compute_s, np.where(done_compute, 1.0, self.left))
            self.events += int(done_comm.sum() + done_compute.sum())
            self._start_phases()
            self._alpha = None

    def _start_phases(self) -> None:
        """Jobs with no compute phase go straight back to communicating."""
        instant = ~self.comm & (self.left <= _EPS)
        if instant.any():
            self.comm = self.comm | instant
            self.left = np.where(instant, 1.0, self.left)
            self._alpha = None

    def result(self, iterations: int) -> RunResult:
        """The run so far, each job's time being its *iterations*-th iteration's end."""
        runs = {}
        for job, ends in zip(self.jobs, self.ends, strict=True):
            t = ends[iterations - 1] if len(ends) >= iterations else math.nan
            runs[job.id] = JobRun(job.id, len(job.job.nodes), tuple(ends), t)
        return RunResult("fluid", runs, self.time, self.link_bytes.copy(), self.events)


def simulate_fluid(
    net: Network, jobs: Sequence[SimJob], arb: Arbitration, iterations: int
) -> RunResult:
    """Run the mix until every job has *iterations* iterations (workload.py's semantics)."""
    if iterations < 1:
        raise SimError(f"iterations: expected at least 1, got {iterations}")
    sim = FluidSim(net, jobs, arb)
    sim.run(iterations)
    return sim.result(iterations)
