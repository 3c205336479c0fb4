"""Fluid contention model: jobs' communication as rates that share links, event-driven.

A *sender* is one host of one job while the job communicates.  Between two events (a
sender finishing its bytes of the phase, a job entering or leaving a communication
phase) every sender *s* sends at a fraction ``alpha_s`` (0..1] of its declared rate,
spread over its flows in proportion to their declared rates.  That is what an HCA paced
at the job's rate does when it serves its flows by weighted fair queueing over one send
queue per VL: the host's flows progress together, a flow that the fabric holds back holds
its host back, and the host never bursts above its declared rate to catch up.  A sender
that has sent its bytes stops; a job's phase ends when its last sender has.  So a local
slowdown costs a job only if it hits the host that is, or becomes, the job's slowest.

Sharing rule, per link (by transmitting port), all links at once:

- Between lanes: the high-priority VLs are served first, but while low-priority data waits
  they get at most ``H / (H + MTU)`` of the link (*H* = :meth:`Arbitration.high_bytes`; the
  high limit, no bound at 255).  Within each priority the capacity is split by weighted
  max-min between the busy lanes, a lane's weight being its MTU packets per arbitration
  round: a lane gets ``lambda x weight`` unless it needs less, and what it does not use goes
  to the others (work-conserving, as the arbiter skips an empty VL).
- Within a lane, between its *inputs*: the links its traffic comes in over (each one a
  switch input buffer of that lane), or, at a host's own port, each sender.  A backlogged
  FIFO takes packets as each input's credits come back, so it serves its inputs in turn:
  max-min in bytes between inputs, not in proportion to demand.  A host whose job sends
  one concentrated flow through an uplink gets one input's share there, however much the
  other hosts offer.
- Within an input: max-min in bytes between its senders, a per-job sender weighing as
  many as the hosts it stands for there (upstream each host came in over an input of its
  own, served in turn alike).
- A sender's rate is the smallest its links grant it, and no more than its declared rate.

The grants depend on each other (what a sender offers one link is what the others let
through), so they are solved by progressive freezing (:mod:`ibqos.sim.maxmin`): every
sender not yet fixed asks for its full rate and the fixed ones offer their rate; a sender
is fixed at its grant once nothing can raise it (it gets its full rate, or it is held back
at a link where every sender not yet fixed is held back too, so no one there will give
bytes back); repeat.  What the others give back as they are fixed only raises what the
links grant.  When a round finds no such link, the senders granted the least (in alpha)
are fixed: that can leave a link some bytes it no longer uses, since shares are in bytes.
Only links the communicating senders could overload (*hot* links) are looked
at: a link with room for every sender at full rate limits no one.  Senders linked by no
hot link do not affect each other: they are solved in separate groups, and a group's
rates are kept until one of its senders starts or stops.

What it leaves out, by design: packets, buffers and credits (so bursts a buffer would
absorb slow senders here, and head-of-line blocking, where one output's backlog holds a
shared input buffer for the others, is not charged), latency, and transients inside a
phase.  :mod:`ibqos.sim.packet` models those;
``docs/simulate-validation.md`` compares the two.

Switch buffers (``buffer_packets`` > 0; none unless a run asks, see :data:`BUFFER_PACKETS`;
the commands ask for :data:`AUTO_BUFFER_PACKETS` where the senders are per host,
:func:`auto_buffers`): each switch input has that many MTU packets of buffer per lane.
A *column* (one lane of one link) whose inputs' buffers have room limits no one: what
comes in above the lane's share fills them.  Once full it limits its senders to the
share as without buffers, until they bring less than it; then it drains, its lane asking
for the whole link while it holds a backlog (or, where the switch input its link feeds
is held, below, only for what that input lets through: the other lanes get the rest).
"Full" and "empty" are events, and a column that no sender feeds any more is empty (what
it held counts as delivered, see below), so every phase fills the buffers afresh.  A
full column holds the switch inputs that feed it whose buffers its backlog fills (head of
line; by Little's law, an input's packets waiting for the column are what it brings
times their wait there): the packets of the lane behind its own in such a buffer, for
any output, come in no faster than the held ones, so no host's traffic through the input
moves more bytes than the fastest held host's; the buffers up the links that feed it
back up in turn (the senders get caps and the rates are solved again).  A job's
communication phase ends when its last bytes are out of the buffers, not when its hosts
have sent them: on each of its paths they wait behind what the columns on it held then,
which drains at the rate each column sends on from then on, event by event (the queues
drain together, so the longest counts), then for the other lanes' arbitration turns at
each hop and for the last packet's trip, store and forward, over the links after the
host's (:meth:`FluidSim._drain_s`).
What it still leaves out: that an input's one buffer is counted whole in every column it
feeds, the lower rate downstream of a filling column (later links see the senders' own
rate), and, for the others, the bytes a buffer holds when its input's senders stop
(dropped from the count at once, though the job that sent them waits for them).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from ibqos.errors import (
    SimError,
)
from ibqos.sim.network import Network
from ibqos.sim.qos import (
    SWITCH_LATENCY_S,
    Arbitration,
)
from ibqos.sim.workload import JobRun, RunResult, SimJob

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MEMO_SIZE = 4096  # groups' rates kept per setup
#: who gets a rate of its own: each (job, host), each job (all its hosts at one rate), or
#: auto: per host up to :data:`AUTO_HOSTS` sending hosts, per job beyond
Granularity = Literal["host", "job", "auto"]
GRANULARITIES: tuple[Granularity, ...] = ("auto", "host", "job")
#: the most sending hosts "auto" simulates per host.  Per host, a phase ends in as many
#: events as the job has hosts that finish apart, each one a new solve of the rates: at
#: 2,048 hosts that is 50 times slower than per job (docs/simulate-benchmark.md).
AUTO_HOSTS = 512
#: MTU packets of buffer per lane per switch input of a :class:`FluidSim` (and
#: :func:`simulate_fluid`) not given any: none, the model without buffers.  The commands
#: choose with :func:`auto_buffers` instead.
BUFFER_PACKETS = 0
#: buffers of the commands' fluid runs with senders per host (:func:`auto_buffers`): with
#: buffers, head of line and the drain, the fluid model ranks the policies as the packet
#: model does far better (mean rho 0.86 in session 19; 0.41 without, in session 8:
#: docs/simulate-validation.md), at up to thirty times the cost of a run without
#: (docs/simulate-benchmark.md)
AUTO_BUFFER_PACKETS = 8
#: with buffers, a full one holds its input's other traffic of the lane too (head of line)
HEAD_OF_LINE = True
#: with head of line, a full column holds only the inputs whose buffers its backlog fills
#: (Little's law), not every input that feeds it
HOLD_FILLED_ONLY = True
#: with head of line, a backlog whose link's next input is held asks its lane only for
#: what that input lets through, not for the whole link (the other lanes take the rest)
BACKLOG_HELD_BELOW = True
#: how a job's last bytes wait behind the queues on a path: "max", the longest (the queues
#: drain together), or "sum", all of them in turn (sessions 14 to 16)
QUEUE_WAIT: Literal["max", "sum"] = "max"
#: solves of one event when a column at its room comes out above its share: it is full
#: then (else what comes in above what leaves would be lost)
_SETTLE_ROUNDS = 3
#: with buffers, a job's last packets also wait at each hop for the other lanes' turns
#: (FluidSim._drain_s)
ARBITRATION_WAIT = True
#: with buffers, the bytes ahead of a sender's last ones drain at each column's rate as it
#: changes after the sender is done, not at the rate of that moment (FluidSim._drains)
TRACK_DRAIN = True
#: with buffers, a phase also ends no sooner than its last packet has crossed the links
#: after its host's (store and forward, as the packet model; FluidSim._pipeline_s)
LAST_PACKET_TRIP = True
_TOL = 1e-7
_EPS = 1e-12
_MIN_FLOW = 1.0  # bytes per second: a column's buffers fill or drain no slower than this
_MIN_BYTES = 1e-3  # bytes: buffers this close to full or to empty are full or empty


def granularity(jobs: Sequence[SimJob]) -> Granularity:
    """What "auto" means for this mix: "host" up to :data:`AUTO_HOSTS` sending hosts."""
    sending = sum(len(np.unique(j.flows.src_host)) for j in jobs)
    return "host" if sending <= AUTO_HOSTS else "job"


def auto_buffers(
    jobs: Sequence[SimJob], per: Granularity = "auto", given: int | None = None
) -> int:
    """The switch buffers (MTU packets per lane per input) the commands' fluid runs of
    this mix get: *given*, else :data:`AUTO_BUFFER_PACKETS` with senders per host and none
    per job.  Per job, a buffered run is still too slow for a what-if (over 20 s at 2,048
    nodes against a 10 s target, docs/simulate-validation.md); the runs of one mix (its
    jobs alone too) must share the value, so it follows the whole mix's granularity."""
    if given is not None:
        return given
    per = granularity(jobs) if per == "auto" else per
    return AUTO_BUFFER_PACKETS if per == "host" else 0


@dataclass(frozen=True)
class Senders:
    """The senders of a mix: one row per (job, source host) with traffic.

    Attributes:
        job: index of each row's job in the mix.
        rate: bytes per second each row sends at its job's declared rate.
        first: index of each job's first row (rows of a job are contiguous), then the
            row count.
        e_row, e_link, e_in, e_load: the (row, link, input) triples the rows' flows
            cross, sorted by row, link, then input, with the bytes per second the row puts
            there at full rate.  The input is the link the flows arrive on (the switch
            port whose buffer they wait in), -1 at the first hop (the host's own queue).
        e_hosts: the source hosts behind each entry (1 per host; a per-job row stands for
            all its hosts that come in over that input, each served in turn upstream).
        hops: per job, the links each of its flows crosses (:meth:`Network.hops`), kept
            so the buffered model's paths need no second routing.
    """

    job: IntArray
    rate: FloatArray
    first: IntArray
    e_row: IntArray
    e_link: IntArray
    e_in: IntArray
    e_load: FloatArray
    e_hosts: FloatArray
    hops: tuple[IntArray, ...]

    @classmethod
    def of(cls, net: Network, jobs: Sequence[SimJob], per: Granularity = "auto") -> Senders:
        """Route every flow of *jobs* and group them by (job, source host), or by job.

        A job with no flows gets one row with no links, so its communication phase
        lasts its declared length as for any job that meets no one.
        """
        n = net.links
        per = granularity(jobs) if per == "auto" else per
        rows_max = sum(max(len(np.unique(j.flows.src_host)), 1) for j in jobs)
        if rows_max * (n + 1) * n >= 2**62:  # the packed keys below
            raise SimError(f"{rows_max} senders on {n} links: too large for the fluid model")
        job_of, rates, firsts = [], [], []
        keys, loads, srcs = [], [], []
        tables: list[IntArray] = []
        row0 = 0
        for j, sim_job in enumerate(jobs):
            firsts.append(row0)
            flows = sim_job.flows
            hosts, host_row = np.unique(flows.src_host, return_inverse=True)
            if per == "job":  # one row: the job's hosts move together
                hosts, host_row = hosts[:1], np.zeros_like(host_row)
            count = max(len(hosts), 1)
            job_of.append(np.full(count, j, dtype=np.int64))
            rate = np.bincount(host_row, weights=flows.rate, minlength=count)
            rates.append(rate.astype(float))
            table = net.hops(flows) if len(hosts) else np.zeros((0, 0), dtype=np.int64)
            tables.append(table)
            if len(hosts):
                row = row0 + host_row.astype(np.int64)
                for h in range(table.shape[1]):
                    on = table[:, h] >= 0
                    came = table[on, h - 1] if h else -1
                    keys.append(_entry_key(row[on], table[on, h], came, n))
                    loads.append(flows.rate[on])
                    srcs.append(flows.src_host[on].astype(np.int64))
            row0 += count
        firsts.append(row0)
        key: IntArray = np.zeros(0, dtype=np.int64)
        load: FloatArray = np.zeros(0)
        hosts_of: FloatArray = np.zeros(0)
        if keys:
            key, inv = np.unique(np.concatenate(keys), return_inverse=True)
            load = np.bincount(inv, weights=np.concatenate(loads)).astype(float)
            src = np.concatenate(srcs)
            width = int(src.max()) + 1
            pairs = np.unique(inv * width + src)  # each (entry, source host) once
            hosts_of = np.bincount(pairs // width, minlength=len(key)).astype(float)
        e_row, e_link, e_in = _entry_parts(key, n)
        return cls(
            job=np.concatenate(job_of) if job_of else np.zeros(0, dtype=np.int64),
            rate=np.concatenate(rates) if rates else np.zeros(0),
            first=np.array(firsts, dtype=np.int64),
            e_row=e_row,
            e_link=e_link,
            e_in=e_in,
            e_load=load.astype(float),
            e_hosts=hosts_of,
            hops=tuple(tables),
        )

    @property
    def rows(self) -> int:
        return len(self.job)

    def alone(self, j: int) -> Senders:
        """Job *j*'s senders as :meth:`of` builds them for that job alone (the same
        granularity): its rows and their entries, numbered from 0.  The same to the bit:
        each entry sums the same flows in the same order."""
        lo, hi = int(self.first[j]), int(self.first[j + 1])
        a, b = np.searchsorted(self.e_row, [lo, hi])
        return Senders(
            job=np.zeros(hi - lo, dtype=np.int64),
            rate=self.rate[lo:hi].copy(),
            first=np.array([0, hi - lo], dtype=np.int64),
            e_row=self.e_row[a:b] - lo,
            e_link=self.e_link[a:b].copy(),
            e_in=self.e_in[a:b].copy(),
            e_load=self.e_load[a:b].copy(),
            e_hosts=self.e_hosts[a:b].copy(),
            hops=(self.hops[j],),
        )


#: a mix by identity: its network, its jobs, and the granularity of its senders
_MixKey = tuple[int, tuple[int, ...], Granularity]


class _LastMix:
    """The senders of the last mix of several jobs simulated, to reuse.

    ``ibqos simulate`` runs one mix under several setups and each job of it alone, and
    routing and grouping a mix's flows is about 0.5 s at 2,048 nodes: the runs of one
    invocation (and the baseline and the plan of a what-if) share them.  Keyed by
    identity: a :class:`SimJob` and a :class:`Network` are not changed once built, and the
    objects are held here so that their ids are not reused.
    """

    def __init__(self) -> None:
        # the mix's key, the objects the key's ids stand for, and its senders
        self._last: tuple[_MixKey, tuple[Network, list[SimJob]], Senders] | None = None

    def senders(self, net: Network, jobs: Sequence[SimJob], per: Granularity) -> Senders:
        """:meth:`Senders.of` *jobs*, reused when they are the last mix or one of its jobs."""
        per = granularity(jobs) if per == "auto" else per
        key: _MixKey = (id(net), tuple(id(j) for j in jobs), per)
        if self._last is not None:
            mix_key, _, mix = self._last
            if key == mix_key:
                return mix
            net_id, job_ids, mix_per = mix_key
            if len(jobs) == 1 and (net_id, mix_per) == (id(net), per) and id(jobs[0]) in job_ids:
                return mix.alone(job_ids.index(id(jobs[0])))
        built = Senders.of(net, jobs, per)
        if len(jobs) > 1:  # a job alone does not replace the mix it came from
            self._last = (key, (net, list(jobs)), built)
        return built

    def forget(self) -> None:
        self._last = None


_last_mix = _LastMix()


def forget_mix() -> None:
    """Drop the senders kept for reuse, so that the next run builds its own (a benchmark
    timing a run from scratch)."""
    _last_mix.forget()


def _entry_key(row: IntArray, link: IntArray, came: IntArray | int, n: int) -> IntArray:
    """(row, link, input) packed in one integer that sorts by row, link, then input."""
    key: IntArray = (row * n + link) * (n + 1) + np.asarray(came, dtype=np.int64) + 1
    return key


def _entry_parts(key: IntArray, n: int) -> tuple[IntArray, IntArray, IntArray]:
    """The (row, link, input) of packed keys (:func:`_entry_key`)."""
    row_link = key // (n + 1)
    return row_link // n, row_link % n, key % (n + 1) - 1


class Allocator:
    """Rates of the communicating senders under one QoS setup (the sharing rule above).

    Args:
        net: the network.
        jobs: every job of the mix.
        arb: their SLs and the port tables.
        senders: the mix's senders (:meth:`Senders.of`), if already built.

    Attributes:
        lane_turn_bytes: per lane in use, the bytes one of its VLArb entries sends per
            turn, on average over its entries in its table.
    """

    def __init__(
        self,
        net: Network,
        jobs: Sequence[SimJob],
        arb: Arbitration,
        senders: Senders | None = None,
    ) -> None:
        arb.check_jobs([j.id for j in jobs])
        self.capacity = net.capacity
        self.senders = senders if senders is not None else Senders.of(net, jobs)
        job_vl = np.array([arb.vl_of(j.id) for j in jobs], dtype=np.int64)
        self.vl = job_vl[self.senders.job] if len(jobs) else np.zeros(0, dtype=np.int64)
        low, high = arb.low_packets(), arb.high_packets()
        high_bytes = arb.high_bytes()
        self.high_share = 1.0 if math.isinf(high_bytes) else high_bytes / (high_bytes + arb.mtu)
        self.rounds = 0  # rounds of the last solve (senders fixed one level at a time)
        # Only links that all senders at full rate would overload can ever be hot: keep
        # their entries once.
        s = self.senders
        n = len(self.capacity)
        full = np.bincount(s.e_link, weights=s.e_load, minlength=n)
        ever = full > self.capacity * (1 + _EPS)
        keep = np.flatnonzero(ever[s.e_link])
        # lanes in use, and each one's priority and weight
        self._lanes = np.unique(self.vl) if len(self.vl) else np.zeros(0, dtype=np.int64)
        self._lane_of = np.searchsorted(self._lanes, self.vl)
        self._lane_high = np.array([int(v) in high for v in self._lanes], dtype=bool)
        self._lane_weight = np.array(
            [float(high[int(v)] if int(v) in high else low.get(int(v), 0)) for v in self._lanes]
        )
        # bytes one VLArb entry of each lane sends per turn, on average: what a packet of
        # another lane that comes in during the turn waits for (FluidSim._drain_s)
        turns = np.ones(len(self._lanes))  # entries in the table its weight comes from
        for k, v in enumerate(self._lanes.tolist()):
            table = arb.vlarb_high if v in high else arb.vlarb_low
            turns[k] = max(sum(1 for vl, w in table if vl == v and arb.packets(w) > 0), 1)
        self.lane_turn_bytes: FloatArray = self._lane_weight * arb.mtu / turns
        # The kept entries in the order the solver walks them: by lane, link, input
        # (at a host's own port each sender is an input of its own), then sender.
        row, came = s.e_row[keep], s.e_in[keep]
        inlet = np.where(came >= 0, came + 1, -1 - row)
        lane = self._lane_of[row] if len(row) else np.zeros(0, dtype=np.int64)
        order = np.lexsort((row, inlet, s.e_link[keep], lane))
        row, lane, inlet, keep = row[order], lane[order], inlet[order], keep[order]
        self._row, self._link = row, s.e_link[keep]
        self._load, self._hosts = s.e_load[keep], s.e_hosts[keep]
        self._lay_out(lane, inlet, n, s.rows)
        # each sender's load per kept link, over all its inputs (what finds the hot links)
        pair, pair_of = np.unique(row * n + self._link, return_inverse=True)
        self._pair_load = np.bincount(pair_of, weights=self._load).astype(np.float64)
        self._pair_link = pair % n
        self._pair_ptr = np.searchsorted(pair // n, np.arange(s.rows + 1))
        # rates of groups of senders already solved, by the buffers' state and the group's
        # rows (oldest first)
        self._memo: dict[bytes, FloatArray] = {}

    def rates(
        self,
        active: npt.NDArray[np.bool_],
        col_open: npt.NDArray[np.bool_] | None = None,
        col_ask: FloatArray | None = None,
        row_cap: FloatArray | None = None,
        slot: int = 0,
    ) -> FloatArray:
        """``alpha`` of every sender (0 for the ones not in *active*).

        Senders that share no hot link do not affect each other, so the rates are solved
        per group of senders linked through hot links, and a group's rates are kept: when
        one job changes phase, only its group is solved again (in the same state of the
        buffers and caps).  *col_open* and
        *col_ask* (per column, :attr:`columns`) are the switch buffers' state
        (:class:`FluidSim`): whether a column's buffers have room, and what its backlog
        asks its lane for (bytes per second; 0: no backlog); without them every column
        limits its lane and none has a backlog.  *row_cap*: the most (0..1] of its rate
        each sender may send (head of line, :class:`FluidSim`; default 1).  *slot* (0 or
        1): which kept first round the solver starts from (speed only: the rates are the
        same).
        """
        # numba loads in about 0.5 s: only a run that solves rates pays it, not every
        # ibqos command that imports this module
        from ibqos.sim.maxmin import hot_groups

        alpha = np.where(active, 1.0 if row_cap is None else row_cap, 0.0)
        if not len(self._row):
            return alpha
        self._open = self._no_buffers if col_open is None else col_open
        self._ask = self._no_ask if col_ask is None else col_ask
        self._cap = self._no_cap if row_cap is None else row_cap
        self._slot = slot
        # A group's rates hold for one state of the buffers and caps: the key has both.
        # A buffered run comes back to earlier states often (a third of the solves of the
        # 2,048-node one-vl run), so the rates of every state are kept, not only the last.
        # Without buffers or caps there is one state: no digest to take.
        tag = b""
        if col_open is not None or col_ask is not None or row_cap is not None:
            state = hashlib.blake2b(digest_size=16)
            for part in (self._open, self._ask, self._cap):
                state.update(part.tobytes())
            tag = state.digest()
        hot, label, order, bounds = hot_groups(
            active, self._pair_ptr, self._pair_link, self._pair_load, self.capacity
        )
        if not len(order):
            return alpha
        todo = np.zeros(len(alpha), dtype=bool)
        missed = []
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            rows = order[a:b]
            key = tag + rows.tobytes()
            got = self._memo.get(key)
            if got is None:
                todo[rows] = True
                missed.append((key, rows))
            else:
                alpha[rows] = got
        if missed:
            solved = self._solve(todo, hot, label)
            for key, rows in missed:
                if len(self._memo) >= MEMO_SIZE:
                    self._memo.pop(next(iter(self._memo)))  # the oldest
                self._memo[key] = solved[rows]
                alpha[rows] = solved[rows]
        return alpha

    def _lay_out(self, lane: IntArray, inlet: IntArray, n_links: int, n_rows: int) -> None:
        """Index the kept entries (sorted by lane, link, input, sender) for the solver:
        inputs (runs of one lane, link and input), columns (runs of one lane and link) and
        each link's columns, each sender's entries; and the solver's kept first round."""
        row, link = self._row, self._link
        n_e = len(row)
        new_col = np.ones(n_e, dtype=bool)
        new_col[1:] = (lane[1:] != lane[:-1]) | (link[1:] != link[:-1])
        new_sub = new_col.copy()
        new_sub[1:] |= inlet[1:] != inlet[:-1]
        self._sub_ptr = np.append(np.flatnonzero(new_sub), n_e)
        sub_of_col = np.flatnonzero(new_col[new_sub])  # each column's first input
        self._col_ptr = np.append(sub_of_col, len(self._sub_ptr) - 1)
        first_entry = np.flatnonzero(new_col)
        self._col_lane = lane[first_entry]
        col_link = link[first_entry]
        self._link_col = np.argsort(col_link, kind="stable")
        self._link_col_ptr = np.searchsorted(col_link[self._link_col], np.arange(n_links + 1))
        # Each input's buffer (one per lane per switch input) serves every output the
        # lane's traffic through it goes to (head of line): key (input link, lane) of each
        # kept input, and the senders of every entry at a switch input, kept or not.
        n_lanes = max(len(self._lane_weight), 1)
        sub_in = inlet[self._sub_ptr[:-1]] - 1
        self._sub_switch = sub_in >= 0  # a switch's input, not a host's
        self._sub_key = np.where(self._sub_switch, sub_in * n_lanes + lane[self._sub_ptr[:-1]], 0)
        self._n_keys = n_links * n_lanes
        self._entry_sub = np.repeat(np.arange(len(self._sub_ptr) - 1), np.diff(self._sub_ptr))
        self._index_inputs(n_lanes)
        self._col_start = self._sub_ptr[self._col_ptr[:-1]]  # each column's first entry
        self._sub_col = np.repeat(np.arange(len(self._col_ptr) - 1), np.diff(self._col_ptr))
        #: the link of each column
        self.column_link: IntArray = self._link[self._col_start]
        # the column of each (link, lane) kept, by the key of an input that comes over it
        col_key = self.column_link * n_lanes + self._col_lane
        self._col_of_key = np.full(self._n_keys, -1, dtype=np.int64)
        self._col_of_key[col_key] = np.arange(len(col_key))
        self._col_key = col_key
        #: the capacity of each column's link (bytes per second)
        self.column_capacity: FloatArray = self.capacity[self.column_link]
        self._row_entries = np.argsort(row, kind="stable")
        self._row_ptr = np.searchsorted(row[self._row_entries], np.arange(n_rows + 1))
        n_cols = self.columns = len(self._col_ptr) - 1  # one lane of one kept link each
        self._no_buffers = np.zeros(n_cols, dtype=bool)
        # the buffers' state for the solver (open columns, backlogs, senders' caps; rates())
        self._no_ask = np.zeros(n_cols)
        self._open, self._ask = self._no_buffers, self._no_ask
        self._no_cap = np.ones(n_rows)
        self._cap = self._no_cap
        # The first round of the last solve in each slot (see solve_kept), filled for no
        # entry yet.  A buffered run alternates solves without and with head-of-line caps;
        # each kind kept apart, the next one of the kind differs from it in a few links.
        self._firsts = [
            (
                np.zeros((3, max(n_e, 1))),
                np.zeros(n_e, dtype=bool),
                np.zeros((2, n_cols)),
                self._no_cap.copy(),
            )
            for _ in range(2)
        ]
        self._slot = 0

    @property
    def n_lanes(self) -> int:
        """Lanes in use (at least 1): the width of a column's key (link x lanes + lane)."""
        return max(len(self._lane_weight), 1)

    def lane_of_row(self, row: int) -> int:
        """The lane (index among the lanes in use) of a sender."""
        return int(self._lane_of[row]) if len(self._lane_of) else 0

    @property
    def column_lane(self) -> IntArray:
        """The lane (index among the lanes in use) of each column."""
        return self._col_lane

    def column_of_key(self, key: IntArray) -> IntArray:
        """The column of each (link x :attr:`n_lanes` + lane) key; -1 for a lane of a link
        no column stands for (one that no mix of these senders can overload)."""
        got: IntArray = self._col_of_key[key]
        return got

    def _index_inputs(self, n_lanes: int) -> None:
        """Per (sender, switch input buffer), kept or not, the bytes per second per host
        the sender puts through it at full rate, over every output it goes to; and the
        same for each kept entry's sender at the entry's input (0 at a host's port).  A
        per-job sender's hosts there are counted as the most behind one output."""
        s = self.senders
        at_switch = np.flatnonzero(s.e_in >= 0)
        in_row = s.e_row[at_switch]
        in_key = s.e_in[at_switch] * n_lanes + self._lane_of[in_row]
        pair, pair_of = np.unique(in_row * self._n_keys + in_key, return_inverse=True)
        self._in_pair = pair
        self._in_row, self._in_key = pair // self._n_keys, pair % self._n_keys
        in_hosts = np.zeros(len(pair))
        np.maximum.at(in_hosts, pair_of, s.e_hosts[at_switch])
        self._in_per_host = np.bincount(pair_of, weights=s.e_load[at_switch]) / in_hosts
        self._in_hosts = in_hosts
        code = self._row * self._n_keys + self._sub_key[self._entry_sub]
        at = np.minimum(np.searchsorted(pair, code), max(len(pair) - 1, 0))
        switch = self._sub_switch[self._entry_sub]
        self._through = np.where(switch, self._in_per_host[at] if len(pair) else 0.0, 0.0)

    def _solve(
        self, todo: npt.NDArray[np.bool_], hot: npt.NDArray[np.bool_], label: IntArray
    ) -> FloatArray:
        """``alpha`` of the *todo* senders, over the *hot* links (1 for the others)."""
        from ibqos.sim.maxmin import solve_kept

        solved, self.rounds = solve_kept(
            todo,
            hot,
            label,
            self._row,
            self._link,
            self._load,
            self._hosts,
            self._sub_ptr,
            self._col_ptr,
            self._col_lane,
            self._link_col_ptr,
            self._link_col,
            self._row_ptr,
            self._row_entries,
            self._open,
            self._ask,
            self._cap,
            self._lane_weight,
            self._lane_high,
            self.capacity,
            self.high_share,
            *self._firsts[self._slot],
        )
        return solved

    def inputs(self, active: npt.NDArray[np.bool_]) -> FloatArray:
        """Per column, the switch inputs that bring it traffic of *active* senders.  Each
        one's buffer for the lane can fill with the column's packets whole, as a FIFO
        takes packets for any output until it is full; a column that fills it then holds
        the input's other outputs too (:meth:`paces`), so counting it in every column it
        feeds does not let two of them use it for long."""
        if not len(self._row):
            return np.zeros(self.columns)
        offered = np.add.reduceat(self._load * active[self._row], self._sub_ptr[:-1])
        bringing = (self._sub_switch & (offered > 0)).astype(np.float64)
        return np.add.reduceat(bringing, self._col_ptr[:-1])

    def paces(
        self,
        alpha: FloatArray,
        active: npt.NDArray[np.bool_],
        full: npt.NDArray[np.bool_],
        wait_s: FloatArray | None = None,
        buffer_bytes: float = 0.0,
    ) -> tuple[FloatArray, FloatArray]:
        """Per sender, the most (0..1] of its rate the input buffers it passes through let
        it send (head of line); and per column, the most bytes per second the input its
        link feeds lets through (inf: not held), which its backlog cannot leave faster
        than.  A switch input whose buffer for a lane feeds a *full*
        column holds packets for that column that leave only as fast as the column lets
        its senders through (at *alpha*).  Upstream, the link the input comes over serves
        its own inputs in turn, so the packets of the others come in no faster than the
        held ones: no host's traffic of the lane through the input, to any output, moves
        more bytes per second than the fastest held host's does (a host that sends less
        is not slowed: the in-cast of ``test_an_in_cast_downstream_...`` leaves M alone,
        as the packet model nearly does).  With *wait_s* (per column, how long its packets
        wait in its buffers), only the inputs whose packets waiting at the full columns
        fill their *buffer_bytes* are held (Little's law: what an input brings a column
        times that wait); an input that brings a column less has its packets taken as
        they come.  The link it comes over then backs up too (its
        receiver's buffer gives no credits), so the buffers feeding that link's lane are
        held to the bytes its senders get through the input below, and so on up to the
        hosts (:func:`ibqos.sim.headofline.input_paces`).

        Measured against the packet model (docs/simulate-validation.md): this rule ranks
        the policies closer to it than holding every sender to the fastest held sender's
        *share* of its rate (mean rho 0.71 against 0.68), or to the larger of the two
        (0.66); remeasured in session 17 with the rules above, 0.77 against 0.71.  Holding
        only the inputs that bring a full column its max-min share or more ranked worse
        (0.60): the packet model's buffers also fill from inputs under their share."""
        from ibqos.sim.headofline import input_paces  # compiled: see rates()

        if not len(self._row):
            return np.ones(len(alpha)), np.full(self.columns, np.inf)
        row = self._row
        on = active[row]
        # Little's law: an input's packets in the switch are what it sends to each output
        # times their wait there; it is held once they fill its buffer
        filled = np.ones(self._n_keys, dtype=bool)
        if wait_s is not None:
            offered = np.add.reduceat(self._load * alpha[row] * on, self._sub_ptr[:-1])
            waiting = offered * wait_s[self._sub_col]
            sw = self._sub_switch
            occupied = np.bincount(self._sub_key[sw], weights=waiting[sw], minlength=self._n_keys)
            filled = occupied >= buffer_bytes * (1 - _TOL)
        held = np.zeros(len(self._sub_ptr) - 1)  # per input of a column: fastest host's
        np.maximum.at(held, self._entry_sub[on], self._through[on] * alpha[row[on]])
        pace = input_paces(
            np.flatnonzero(full),
            held,
            alpha,
            active,
            self._col_ptr,
            self._sub_ptr,
            self._sub_switch,
            self._sub_key,
            self._col_of_key,
            row,
            self._through,
            self._in_pair,
            self._in_per_host,
            filled,
        )
        cap = np.ones(len(alpha))
        sending = active[self._in_row]
        hosts = np.bincount(
            self._in_key[sending], weights=self._in_hosts[sending], minlength=self._n_keys
        )[self._col_key]
        with np.errstate(invalid="ignore"):  # inf x 0 hosts: not held
            below = np.where(hosts > 0, pace[self._col_key] * hosts, np.inf)
        through = sending & np.isfinite(pace[self._in_key])
        np.minimum.at(
            cap,
            self._in_row[through],
            pace[self._in_key[through]] / self._in_per_host[through],
        )
        return cap, below

    def flows(self, alpha: FloatArray, ask: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Per column, the bytes per second its senders bring at *alpha*, and what its
        lane's share of the link lets on, a column with a backlog asking its lane for at
        least *ask* (bytes per second)."""
        from ibqos.sim.maxmin import lane_outputs

        if not len(self._row):
            return np.zeros(0), np.zeros(0)
        into = np.add.reduceat(self._load * alpha[self._row], self._col_start)
        out = lane_outputs(
            into,
            ask,
            self._col_lane,
            self._link_col_ptr,
            self._link_col,
            self._lane_weight,
            self._lane_high,
            self.capacity,
            self.high_share,
        )
        return into, out


@dataclass
class _Drains:
    """Senders' last bytes of a phase on their way out of the switch buffers, one row per
    path (:meth:`FluidSim._new_drains`)."""

    row: IntArray  # the sender
    col: IntArray  # (paths, hops): the columns on the path, -1 where none stands for a hop
    left: FloatArray  # (paths, hops): bytes ahead of the last bytes in each column
    wait_s: FloatArray  # the other lanes' turns still to wait along the path (s)

    @classmethod
    def empty(cls) -> _Drains:
        none = np.zeros((0, 0))
        return cls(np.zeros(0, dtype=np.int64), none.astype(np.int64), none, np.zeros(0))

    def take(self, on: npt.NDArray[np.bool_]) -> _Drains:
        """The paths *on* marks."""
        return _Drains(self.row[on], self.col[on], self.left[on], self.wait_s[on])

    @staticmethod
    def join(parts: Sequence[_Drains]) -> _Drains:
        """The paths of all *parts*, padded to the longest."""
        parts = [d for d in parts if d.row.size]
        if not parts:
            return _Drains.empty()
        width = max(d.col.shape[1] for d in parts)
        parts = [_widen(d, width) for d in parts]
        return _Drains(
            np.concatenate([d.row for d in parts]),
            np.concatenate([d.col for d in parts]),
            np.concatenate([d.left for d in parts]),
            np.concatenate([d.wait_s for d in parts]),
        )

    def _at(self, rate: FloatArray) -> FloatArray:
        """*rate* (per column) at each hop of each path, 0 where no column stands."""
        if not rate.size:
            return np.zeros(self.col.shape)
        got: FloatArray = np.where(self.col >= 0, rate[np.maximum(self.col, 0)], 0.0)
        return got

    def queue_s(self, rate: FloatArray) -> FloatArray:
        """Seconds until each path's last bytes are through its queues at the columns'
        *rate* (bytes per second; a column that sends nothing holds no one up)."""
        if not self.row.size:
            return np.zeros(0)
        r = self._at(rate)
        with np.errstate(divide="ignore", invalid="ignore"):
            q: FloatArray = np.where(r > 0, self.left / r, 0.0)
        out: FloatArray = q.max(axis=1) if QUEUE_WAIT == "max" else q.sum(axis=1)
        return out

    def advance(self, rate: FloatArray, dt: float) -> _Drains:
        """The paths still on their way after *dt* seconds at *rate*: the queues drain,
        then the turns pass."""
        if not self.row.size:
            return self
        beyond = np.maximum(dt - self.queue_s(rate), 0.0)
        left = np.maximum(self.left - self._at(rate) * dt, 0.0)
        wait_s = np.maximum(self.wait_s - beyond, 0.0)
        on = (left > _MIN_BYTES).any(axis=1) | (wait_s > 0)
        return _Drains(self.row, self.col, left, wait_s).take(on)

    def out_s(self, rate: FloatArray, rows: npt.NDArray[np.bool_]) -> FloatArray:
        """Seconds until the last bytes of each path of the senders *rows* marks are at
        their end, at *rate*; the other paths' entries 0."""
        out = np.zeros(len(self.row))
        mine = rows[self.row]
        if mine.any():
            sub = self.take(mine)
            out[mine] = sub.queue_s(rate) + sub.wait_s
        return out


def _widen(d: _Drains, width: int) -> _Drains:
    """*d* with its paths padded to *width* hops."""
    pad = width - d.col.shape[1]
    if not pad:
        return d
    col = np.pad(d.col, ((0, 0), (0, pad)), constant_values=-1)
    return _Drains(d.row, col, np.pad(d.left, ((0, 0), (0, pad))), d.wait_s)


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
        per: who gets a rate of its own (:data:`Granularity`).
        buffer_packets: MTU packets of buffer per lane per switch input (0: none; None:
            :data:`BUFFER_PACKETS`).

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
        self.senders = _last_mix.senders(net, self.jobs, per)
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
        # the lanes' switch buffers, per column of the allocator (bytes held, full or not),
        # and how fast each column's fill changes at the current rates (bytes per second)
        self._buffer_bytes = float(self.buffer_packets * arb.mtu)
        self._held = np.zeros(self.allocator.columns)
        self._full = np.zeros(self.allocator.columns, dtype=bool)
        self._room = np.zeros(self.allocator.columns)
        self._inflow = np.zeros(self.allocator.columns)
        self._out = np.zeros(self.allocator.columns)  # what each column sends on (B/s)
        self._into = np.zeros(self.allocator.columns)  # what comes into it (B/s)
        self._paths: dict[int, tuple[IntArray, IntArray]] = {}  # per job (_job_paths)
        # the paths of senders whose last bytes are still in the buffers: sender, columns
        # (-1: none), bytes ahead of those last bytes in each, fixed turn wait (s); and how
        # fast each column sends them on (B/s).  A new setup keeps the ends predicted so far.
        self._drains = _Drains.empty()
        self._drain_rate = np.zeros(self.allocator.columns)
        self._last_out = np.zeros(self.allocator.columns)
        # only buffered runs count it: runs without buffers keep their model as it was
        self._latency_s = (
            self._pipeline_s(arb.mtu) if self._buffer_bytes > 0 else np.zeros(self.senders.rows)
        )

    def _pipeline_s(self, mtu: int) -> FloatArray:
        """Seconds from when each sender is done to when its last packet (of *mtu* bytes)
        is at the end of its longest path, queues aside: store and forward, its time on
        each link after the first and :data:`SWITCH_LATENCY_S` in each switch.  Less what
        it gained on the first link: the packet model's host sends its packets at most
        its pace apart, so its last one starts a packet at that pace before the fluid
        model's host is done and is on the wire at the link's rate (0 at the link's
        pace).  Measured against the packet model: docs/simulate-validation.md, session
        18."""
        s = self.senders
        out = np.zeros(s.rows)
        if not LAST_PACKET_TRIP:
            return out
        for i, job in enumerate(self.jobs):
            lo, hi = int(s.first[i]), int(s.first[i + 1])
            flows = job.flows
            if hi == lo or not len(flows.src):
                continue
            hops = s.hops[i]
            cap = self.net.capacity[hops[:, 0]]
            host = np.unique(flows.src_host, return_inverse=True)[1].astype(np.int64)
            pace = np.bincount(host, weights=flows.rate)[host]  # the flow's host's, B/s
            with np.errstate(divide="ignore"):
                gained = np.maximum(mtu / pace - mtu / cap, 0.0)
            trip = ((hops >= 0).sum(axis=1) - 1) * (mtu / cap + SWITCH_LATENCY_S)
            row = host if hi - lo > 1 else np.zeros(len(hops), dtype=np.int64)
            np.maximum.at(out, lo + row, np.maximum(trip - gained, 0.0))
        return out

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
        return float(self._held.sum())

    @property
    def sender_alpha(self) -> FloatArray:
        """Current rate of every sender as a share of its declared rate (0 when idle)."""
        if self._alpha is None:
            if self._buffer_bytes > 0:
                self._alpha = self._buffered_rates()
            else:
                self._alpha = self.allocator.rates(self._sending())
                self.allocations += 1
        return self._alpha

    def _buffered_rates(self) -> FloatArray:
        """The senders' rates with the switch buffers: a column (one lane of one link)
        whose buffers have room limits no one, the excess of what comes in over its lane's
        share filling them; once full it limits its senders to that share as without
        buffers, until they bring less than it, and then it drains (a lane with a backlog
        asks for the whole link).  With :data:`HEAD_OF_LINE`, the senders are then capped
        at the pace of the full buffers they pass through (:meth:`Allocator.paces`) and
        solved once more; with :data:`BACKLOG_HELD_BELOW`, first solved again with the
        backlogs held below asking for what the input below lets through, and the caps
        taken at those rates.  A column at its room that still comes out above its share
        is full, and the event is solved again (:data:`_SETTLE_ROUNDS`).  Solving again
        until the caps settle (up to 4 times) changed no total of the 36 validation mixes
        by 1 ns and the 2,048-node one-vl contention by 0.8 %, for 40 % more time
        (docs/simulate-validation.md, session 13).  Sets each column's net
        inflow (bytes per second into its buffers)."""
        alloc = self.allocator
        active = self._sending()
        self._room = alloc.inputs(active) * self._buffer_bytes
        self._full &= self._room > 0  # no one feeds it: nothing held, nothing full
        over = self._held > self._room  # fewer inputs than the bytes held had
        self._held[over] = self._room[over]
        self._full |= over & (self._room > 0)
        for _ in range(_SETTLE_ROUNDS):
            alpha, into, out = self._solve_buffered(active)
            release = self._full & (into < out * (1 - _TOL))
            if release.any():  # held elsewhere now: a column drains if, open, it still would
                self._full &= ~release
                alpha, into, out = self._solve_buffered(active)
                back = release & (into > out * (1 + _TOL))
                if back.any():
                    self._full |= back
                    alpha, into, out = self._solve_buffered(active)
            if HEAD_OF_LINE and self._full.any():
                caps, below = self._paces(alpha, active, out)
                held_back = (self._held > 0) & (below < self.allocator.column_capacity)
                if BACKLOG_HELD_BELOW and held_back.any():
                    # the other lanes take what a held-back backlog cannot use
                    alpha, into, out = self._solve_buffered(active, below=below)
                    caps, below = self._paces(alpha, active, out)
                    alpha, into, out = self._solve_buffered(active, caps, below)
                elif (caps < 1).any():
                    alpha, into, out = self._solve_buffered(active, caps)
            stuck = (
                ~self._full
                & (self._room > 0)
                & (self._held >= self._room - _MIN_BYTES)
                & (into > out * (1 + _TOL))
            )
            if not stuck.any():
                break
            self._full |= stuck
        self._out = out
        self._into = into
        self._inflow = np.where(self._full, 0.0, into - out)
        self._inflow[(self._held <= 0) & (self._inflow < 0)] = 0.0
        # The solver can leave a held column a few bytes it no longer fills (see
        # ibqos.sim.maxmin), so a column the last solve opened may still come out above
        # its share with full buffers: it holds at full until the next event.
        self._inflow[(self._held >= self._room - _MIN_BYTES) & (self._inflow > 0)] = 0.0
        if TRACK_DRAIN:
            # a column nothing feeds any more still sends what it held: at least as fast as
            # when it was last fed, or what the link's other lanes leave (work conserving)
            live = self._room > 0
            self._last_out = np.where(live, out, self._last_out)
            link = alloc.column_link
            others = np.bincount(link, weights=out, minlength=len(alloc.capacity))[link] - out
            spare = np.maximum(alloc.column_capacity - others, 0.0)
            self._drain_rate = np.where(live, out, np.maximum(self._last_out, spare))
            self._drain_ends()
        return alpha

    def _paces(
        self, alpha: FloatArray, active: npt.NDArray[np.bool_], out: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """Allocator.paces at *alpha*, the columns sending *out* (bytes per second)."""
        wait_s = self._queue_s(out) if HOLD_FILLED_ONLY else None
        return self.allocator.paces(alpha, active, self._full, wait_s, self._buffer_bytes)

    def _queue_s(self, out: FloatArray) -> FloatArray:
        """Seconds each column's buffers take to send what they hold at *out* (bytes per
        second; 0 where it sends nothing)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            queue: FloatArray = np.where(out > 0, self._held / out, 0.0)
        return queue

    def _solve_buffered(
        self,
        active: npt.NDArray[np.bool_],
        caps: FloatArray | None = None,
        below: FloatArray | None = None,
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The rates in the buffers' present state, and each column's inflow and output."""
        alloc = self.allocator
        # a backlog asks for the whole link, or, given *below*, where the input below holds
        # it back (head of line, Allocator.paces), for what that input lets through
        whole = alloc.column_capacity
        ask = np.where(self._held > 0, whole if below is None else np.minimum(whole, below), 0.0)
        slot = 0 if caps is None else 1  # see Allocator._firsts
        alpha = alloc.rates(active, ~self._full & (self._room > 0), ask, caps, slot)
        self.allocations += 1
        into, out = alloc.flows(alpha, ask)
        return alpha, into, out

    def _buffer_event_s(self) -> float:
        """Simulated seconds until a column's buffers fill up or run empty."""
        filling = self._inflow > _MIN_FLOW
        draining = self._inflow < -_MIN_FLOW
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(filling, (self._room - self._held) / self._inflow, math.inf)
            t = np.minimum(t, np.where(draining, self._held / -self._inflow, math.inf))
        return float(t.min(initial=math.inf))

    def _move_buffers(self, dt: float) -> None:
        """Fill and drain the buffers for *dt* seconds; solve again where one filled up or
        ran empty."""
        if TRACK_DRAIN:
            self._drains = self._drains.advance(self._drain_rate, dt)
        held = self._held + self._inflow * dt
        full = (self._inflow > 0) & (held >= self._room * (1 - _TOL) - _MIN_BYTES)
        empty = (self._inflow < 0) & (held <= _MIN_BYTES)
        self._held = np.clip(np.where(full, self._room, held), 0.0, None)
        self._held[empty] = 0.0
        self._full |= full
        changed = int(full.sum() + empty.sum())
        if changed:
            self.buffer_events += changed
            self._alpha = None

    def _drain_s(self, rows: IntArray) -> FloatArray:
        """Seconds until the last bytes of each of *rows* (senders that just sent them) are
        out of the switch buffers, at the rates of the moment (without
        :data:`TRACK_DRAIN`; with it, :meth:`_keep_drains` keeps their paths instead, and
        each event moves the job's end to the columns' new rates, :meth:`_drain_ends`:
        session 18, a low-weight lane's backlog that a busy lane held to its share was
        charged at that share after the busy lane stopped).

        At each column (one lane of one link) of a path they wait behind what its buffers
        hold, at the rate it sends on (FIFOs), and with :data:`ARBITRATION_WAIT` for the
        turns of the link's other lanes: each sends for a fraction of the time (its
        throughput over the link's rate), and a packet that comes in during one of its
        turns (one VLArb entry's packets) waits half of it on average.  Along a path the
        turn waits add up, and of the queues the longest counts (:data:`QUEUE_WAIT`):
        they drain together, so by the time the last bytes reach a queue no longer than
        the one they left, it has gone (session 17; the sum charged an in-cast's last
        bytes twice).  The slowest of the sender's paths decides.  Left out: columns stand
        for the links these senders could overload, so links with room for everyone add
        nothing; a column that holds bytes but sends nothing (a low lane under strict high
        priority) adds nothing either, as its bytes go only once the high lanes stop; and
        high and low lanes wait alike (a high packet waits at most one low packet, a low
        one up to the high limit).  After the queues and the turns, the last packet's trip
        (:meth:`_pipeline_s`, with :data:`LAST_PACKET_TRIP`), counted from the host even
        where it waited in a queue further on: a queue busy since its phase began started
        late by the same hops (session 19).  Measured against the packet
        model: docs/simulate-validation.md, sessions 14 and 18."""
        new = self._new_drains(rows)
        path_s = new.queue_s(self._out) + new.wait_s
        out = np.zeros(len(rows))
        if path_s.size:
            np.maximum.at(out, np.searchsorted(rows, new.row), path_s)
        return out

    def _keep_drains(self, rows: IntArray) -> None:
        """Keep the paths of *rows* (senders that just sent their last bytes) until those
        bytes are out, in place of what they kept from an earlier phase."""
        d = self._drains
        keep = ~np.isin(d.row, rows)
        self._drains = _Drains.join(
            [
                d.take(keep),
                self._new_drains(rows),
            ]
        )

    def _new_drains(self, rows: IntArray) -> _Drains:
        """The paths of *rows* from now: the bytes each column on them holds ahead of their
        last ones, the other lanes' turns along them and the last packet's trip (s)."""
        alloc = self.allocator
        wait = np.zeros(alloc.columns)
        if ARBITRATION_WAIT:  # the other lanes' turns at each link, as far as they send
            link = alloc.column_link
            cap = alloc.column_capacity
            moving = np.where(self._held > 0, self._out, np.minimum(self._into, self._out))
            turn_s = moving / cap * alloc.lane_turn_bytes[alloc.column_lane] / cap / 2
            at_link = np.bincount(link, weights=turn_s, minlength=len(alloc.capacity))
            wait += at_link[link] - turn_s
        parts = []
        lat = self._latency_s
        job_of = self.senders.job[rows]
        for i in np.unique(job_of).tolist():  # a job's paths at once, not a row's
            mine = rows[job_of == i]
            paths, path_row = self._job_paths(int(i))
            on = np.isin(path_row, mine)
            cols, row = paths[on], path_row[on]
            if row.size:
                hops = cols >= 0
                at = np.maximum(cols, 0)
                left = np.where(hops, self._held[at], 0.0)
                turns = np.where(hops, wait[at], 0.0).sum(axis=1) + lat[row]
                parts.append(_Drains(row, cols, left, turns))
            bare = mine[~np.isin(mine, row)]
            bare = bare[lat[bare] > 0]  # no queue on the way, but the last packet's trip
            if bare.size:
                n = len(bare)
                none = -np.ones((n, 1), np.int64)
                parts.append(_Drains(bare, none, np.zeros((n, 1)), lat[bare]))
        return _Drains.join(parts)

    def _drain_ends(self) -> None:
        """Move the end of each job's last iteration to when its last bytes are out at the
        columns' present rates (while it is still to come)."""
        pending = np.flatnonzero(~self.comm & (self._done_at > self.time))
        if not pending.size:
            return
        out = self.time + self._out_s(pending)
        for i, o in zip(pending.tolist(), out.tolist(), strict=True):
            end = max(self._sent_at[i], o)
            self.compute_left[i] = max(self.compute_left[i] + end - self._done_at[i], 0.0)
            self._done_at[i] = end
            self.ends[i][-1] = end

    def _out_s(self, jobs: IntArray) -> FloatArray:
        """Seconds until the last bytes of each of *jobs* are out, at the present rates (0:
        they are)."""
        d = self._drains
        out = np.zeros(len(self.jobs))
        if d.row.size:
            job = self.senders.job
            path_s = d.out_s(self._drain_rate, np.isin(job, jobs))
            np.maximum.at(out, job[d.row], path_s)
        got: FloatArray = out[jobs]
        return got

    def _job_paths(self, i: int) -> tuple[IntArray, IntArray]:
        """Job *i*'s distinct paths as columns (-1: a hop no column stands for), and the
        sender of each; kept until the setup changes."""
        got = self._paths.get(i)
        if got is None:
            alloc = self.allocator
            lo, hi = int(self.senders.first[i]), int(self.senders.first[i + 1])
            flows = self.jobs[i].flows
            hops = self.senders.hops[i]
            paths, path_row = np.zeros((0, 0), dtype=np.int64), np.zeros(0, dtype=np.int64)
            if hops.size and alloc.columns:
                # the rows of Senders.of: one per source host, or one for the whole job
                row = np.zeros(len(hops), dtype=np.int64)
                if hi - lo > 1:
                    row = np.unique(flows.src_host, return_inverse=True)[1].astype(np.int64)
                key = np.where(hops >= 0, hops * alloc.n_lanes + alloc.lane_of_row(lo), -1)
                cols = np.where(key >= 0, alloc.column_of_key(np.maximum(key, 0)), -1)
                both = np.unique(np.column_stack([lo + row, cols])[(cols >= 0).any(axis=1)], axis=0)
                paths, path_row = both[:, 1:], both[:, 0]
            got = self._paths[i] = (paths, path_row)
        return got

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
        if TRACK_DRAIN and self._buffer_bytes > 0:
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
        buffers = self._buffer_bytes > 0
        stop = min(until, self.time + self._buffer_event_s()) if buffers else until
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
            self._move_buffers(dt)
            sent = np.flatnonzero(was_sending & (self.bytes_left <= 0))
            if len(sent) and TRACK_DRAIN:
                self._keep_drains(sent)
            elif len(sent):
                self._out_at[sent] = self.time + self._drain_s(sent)
        if changed or done_comm.any():
            for i in np.flatnonzero(done_comm):
                self.iterations[i] += 1
                end = self.time
                if TRACK_DRAIN and was_sending is not None:  # once its bytes are out
                    end = self.time + float(self._out_s(np.array([i]))[0])
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
