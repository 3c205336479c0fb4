"""Switch buffers in the fluid model: columns that fill, hold their senders and drain.

With ``buffer_packets`` > 0 (none unless a run asks, see
:data:`~ibqos.sim.senders.BUFFER_PACKETS`; the commands ask for
:data:`~ibqos.sim.senders.AUTO_BUFFER_PACKETS` where the senders are per host,
:func:`~ibqos.sim.senders.auto_buffers`) each switch input has that many MTU packets of
buffer per lane.  A *column* (one lane of one link) whose inputs' buffers have room limits
no one: what comes in above the lane's share fills them.  Once full it limits its senders
to the share as without buffers, until they bring less than it; then it drains, its lane
asking for the whole link while it holds a backlog (or, where the switch input its link
feeds is held, below, only for what that input lets through: the other lanes get the
rest).  "Full" and "empty" are events, and a column that no sender feeds any more is
empty (what it held counts as delivered, see :mod:`ibqos.sim.drains`), so every phase
fills the buffers afresh.  A full column holds the switch inputs that feed it
(:mod:`ibqos.sim.inputs`): the senders get caps and the rates are solved again.

What it leaves out: the lower rate downstream of a filling column (later links see the
senders' own rate), and, for the jobs other than the sender's, the bytes a buffer holds
when its input's senders stop (dropped from the count at once, though the job that sent
them waits for them).

Units: bytes, bytes per second, seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ibqos.sim.allocator import Allocator
from ibqos.sim.drains import MIN_BYTES, Drains, job_paths
from ibqos.sim.inputs import TOL
from ibqos.sim.workload import SimJob

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: with buffers, a full one holds its input's other traffic of the lane too (head of line)
HEAD_OF_LINE = True
#: with head of line, a full column holds only the inputs whose buffers its backlog fills
#: (Little's law), not every input that feeds it
HOLD_FILLED_ONLY = True
#: with head of line, a backlog whose link's next input is held asks its lane only for
#: what that input lets through, not for the whole link (the other lanes take the rest)
BACKLOG_HELD_BELOW = True
#: solves of one event when a column at its room comes out above its share: it is full
#: then (else what comes in above what leaves would be lost)
_SETTLE_ROUNDS = 3
#: with buffers, a job's last packets also wait at each hop for the other lanes' turns
#: (:meth:`SwitchBuffers.drain_s`)
ARBITRATION_WAIT = True
#: with buffers, the bytes ahead of a sender's last ones drain at each column's rate as it
#: changes after the sender is done, not at the rate of that moment
#: (:meth:`SwitchBuffers.keep_drains`)
TRACK_DRAIN = True
_MIN_FLOW = 1.0  # bytes per second: a column's buffers fill or drain no slower than this


class SwitchBuffers:
    """The lanes' switch buffers under one QoS setup, per column of its allocator.

    Args:
        alloc: the setup's allocator.
        jobs: the mix.
        buffer_bytes: bytes of buffer per lane per switch input (0: none).
        latency_s: per sender, its last packet's trip after the queues (s,
            :func:`ibqos.sim.drains.last_packet_s`).

    Attributes:
        held: bytes each column's buffers hold.
    """

    def __init__(
        self,
        alloc: Allocator,
        jobs: Sequence[SimJob],
        buffer_bytes: float,
        latency_s: FloatArray,
    ) -> None:
        self._alloc = alloc
        self._jobs = jobs
        self.buffer_bytes = buffer_bytes
        # per column: bytes held, full or not, room, and how fast its fill changes at the
        # current rates (bytes per second)
        n = alloc.columns
        self.held = np.zeros(n)
        self._full = np.zeros(n, dtype=bool)
        self._room = np.zeros(n)
        self._inflow = np.zeros(n)
        self._out = np.zeros(n)  # what each column sends on (B/s)
        self._into = np.zeros(n)  # what comes into it (B/s)
        self._paths: dict[int, tuple[IntArray, IntArray]] = {}  # per job (job_paths)
        # the paths of senders whose last bytes are still in the buffers, and how fast
        # each column sends them on (B/s)
        self._drains = Drains.empty()
        self._drain_rate = np.zeros(n)
        self._last_out = np.zeros(n)
        self._latency_s = latency_s
        self._solves = 0  # rates solved for the last call of rates()

    def rates(self, active: npt.NDArray[np.bool_]) -> tuple[FloatArray, int]:
        """The *active* senders' rates with the switch buffers, and the solves it took.

        A column (one lane of one link) whose buffers have room limits no one, the excess
        of what comes in over its lane's share filling them; once full it limits its
        senders to that share as without buffers, until they bring less than it, and then
        it drains (a lane with a backlog asks for the whole link).  With
        :data:`HEAD_OF_LINE`, the senders are then capped at the pace of the full buffers
        they pass through (:meth:`ibqos.sim.inputs.InputBuffers.paces`) and solved once
        more; with :data:`BACKLOG_HELD_BELOW`, first solved again with the backlogs held
        below asking for what the input below lets through, and the caps taken at those
        rates.  A column at its room that still comes out above its share is full, and
        the event is solved again (:data:`_SETTLE_ROUNDS`).  Solving again until the caps
        settle (up to 4 times) changed no total of the 36 validation mixes by 1 ns and the
        2,048-node one-vl contention by 0.8 %, for 40 % more time
        (docs/simulate-validation.md).  Sets each column's net inflow (bytes per second
        into its buffers)."""
        alloc = self._alloc
        self._solves = 0
        self._room = alloc.inputs.feeding(active) * self.buffer_bytes
        self._full &= self._room > 0  # no one feeds it: nothing held, nothing full
        over = self.held > self._room  # fewer inputs than the bytes held had
        self.held[over] = self._room[over]
        self._full |= over & (self._room > 0)
        for _ in range(_SETTLE_ROUNDS):
            alpha, into, out = self._solve(active)
            release = self._full & (into < out * (1 - TOL))
            if release.any():  # held elsewhere now: a column drains if, open, it still would
                self._full &= ~release
                alpha, into, out = self._solve(active)
                back = release & (into > out * (1 + TOL))
                if back.any():
                    self._full |= back
                    alpha, into, out = self._solve(active)
            if HEAD_OF_LINE and self._full.any():
                caps, below = self._paces(alpha, active, out)
                held_back = (self.held > 0) & (below < alloc.column_capacity)
                if BACKLOG_HELD_BELOW and held_back.any():
                    # the other lanes take what a held-back backlog cannot use
                    alpha, into, out = self._solve(active, below=below)
                    caps, below = self._paces(alpha, active, out)
                    alpha, into, out = self._solve(active, caps, below)
                elif (caps < 1).any():
                    alpha, into, out = self._solve(active, caps)
            stuck = (
                ~self._full
                & (self._room > 0)
                & (self.held >= self._room - MIN_BYTES)
                & (into > out * (1 + TOL))
            )
            if not stuck.any():
                break
            self._full |= stuck
        self._out = out
        self._into = into
        self._inflow = np.where(self._full, 0.0, into - out)
        self._inflow[(self.held <= 0) & (self._inflow < 0)] = 0.0
        # The solver can leave a held column a few bytes it no longer fills (see
        # ibqos.sim.maxmin), so a column the last solve opened may still come out above
        # its share with full buffers: it holds at full until the next event.
        self._inflow[(self.held >= self._room - MIN_BYTES) & (self._inflow > 0)] = 0.0
        if TRACK_DRAIN:
            # a column nothing feeds any more still sends what it held: at least as fast as
            # when it was last fed, or what the link's other lanes leave (work conserving)
            live = self._room > 0
            self._last_out = np.where(live, out, self._last_out)
            link = alloc.column_link
            others = np.bincount(link, weights=out, minlength=len(alloc.capacity))[link] - out
            spare = np.maximum(alloc.column_capacity - others, 0.0)
            self._drain_rate = np.where(live, out, np.maximum(self._last_out, spare))
        return alpha, self._solves

    def _paces(
        self, alpha: FloatArray, active: npt.NDArray[np.bool_], out: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """InputBuffers.paces at *alpha*, the columns sending *out* (bytes per second)."""
        wait_s = self._queue_s(out) if HOLD_FILLED_ONLY else None
        return self._alloc.inputs.paces(alpha, active, self._full, wait_s, self.buffer_bytes)

    def _queue_s(self, out: FloatArray) -> FloatArray:
        """Seconds each column's buffers take to send what they hold at *out* (bytes per
        second; 0 where it sends nothing)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            queue: FloatArray = np.where(out > 0, self.held / out, 0.0)
        return queue

    def _solve(
        self,
        active: npt.NDArray[np.bool_],
        caps: FloatArray | None = None,
        below: FloatArray | None = None,
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The rates in the buffers' present state, and each column's inflow and output."""
        alloc = self._alloc
        # a backlog asks for the whole link, or, given *below*, where the input below holds
        # it back (head of line, InputBuffers.paces), for what that input lets through
        whole = alloc.column_capacity
        ask = np.where(self.held > 0, whole if below is None else np.minimum(whole, below), 0.0)
        slot = 0 if caps is None else 1  # see Allocator._firsts
        alpha = alloc.rates(active, ~self._full & (self._room > 0), ask, caps, slot)
        self._solves += 1
        into, out = alloc.flows(alpha, ask)
        return alpha, into, out

    def event_s(self) -> float:
        """Simulated seconds until a column's buffers fill up or run empty."""
        filling = self._inflow > _MIN_FLOW
        draining = self._inflow < -_MIN_FLOW
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(filling, (self._room - self.held) / self._inflow, math.inf)
            t = np.minimum(t, np.where(draining, self.held / -self._inflow, math.inf))
        return float(t.min(initial=math.inf))

    def move(self, dt: float) -> int:
        """Fill and drain the buffers for *dt* seconds; the columns that filled up or ran
        empty (the rates are to be solved again if any)."""
        if TRACK_DRAIN:
            self._drains = self._drains.advance(self._drain_rate, dt)
        held = self.held + self._inflow * dt
        full = (self._inflow > 0) & (held >= self._room * (1 - TOL) - MIN_BYTES)
        empty = (self._inflow < 0) & (held <= MIN_BYTES)
        self.held = np.clip(np.where(full, self._room, held), 0.0, None)
        self.held[empty] = 0.0
        self._full |= full
        return int(full.sum() + empty.sum())

    def drain_s(self, rows: IntArray) -> FloatArray:
        """Seconds until the last bytes of each of *rows* (senders that just sent them) are
        out of the switch buffers, at the rates of the moment (without
        :data:`TRACK_DRAIN`; with it, :meth:`keep_drains` keeps their paths instead, and
        each event moves the job's end to the columns' new rates: a low-weight lane's
        backlog that a busy lane held to its share was charged at that share after the
        busy lane stopped).

        At each column (one lane of one link) of a path they wait behind what its buffers
        hold, at the rate it sends on (FIFOs), and with :data:`ARBITRATION_WAIT` for the
        turns of the link's other lanes: each sends for a fraction of the time (its
        throughput over the link's rate), and a packet that comes in during one of its
        turns (one VLArb entry's packets) waits half of it on average.  Along a path the
        turn waits add up, and of the queues the longest counts
        (:data:`~ibqos.sim.drains.QUEUE_WAIT`): they drain together, so by the time the
        last bytes reach a queue no longer than the one they left, it has gone (the sum
        charged an in-cast's last bytes twice).  The slowest of the sender's paths decides.
        Left out: columns stand for the links these senders could overload, so links with
        room for everyone add nothing; a column that holds bytes but sends nothing (a low
        lane under strict high priority) adds nothing either, as its bytes go only once
        the high lanes stop; and high and low lanes wait alike (a high packet waits at most
        one low packet, a low one up to the high limit).  After the queues and the turns,
        the last packet's trip (:func:`~ibqos.sim.drains.last_packet_s`), counted from the
        host even where it waited in a queue further on: a queue busy since its phase began
        started late by the same hops.  Measured against the packet model:
        docs/simulate-validation.md."""
        new = self._new_drains(rows)
        path_s = new.queue_s(self._out) + new.wait_s
        out = np.zeros(len(rows))
        if path_s.size:
            np.maximum.at(out, np.searchsorted(rows, new.row), path_s)
        return out

    def keep_drains(self, rows: IntArray) -> None:
        """Keep the paths of *rows* (senders that just sent their last bytes) until those
        bytes are out, in place of what they kept from an earlier phase."""
        d = self._drains
        keep = ~np.isin(d.row, rows)
        self._drains = Drains.join([d.take(keep), self._new_drains(rows)])

    def _new_drains(self, rows: IntArray) -> Drains:
        """The paths of *rows* from now: the bytes each column on them holds ahead of their
        last ones, the other lanes' turns along them and the last packet's trip (s)."""
        alloc = self._alloc
        wait = np.zeros(alloc.columns)
        if ARBITRATION_WAIT:  # the other lanes' turns at each link, as far as they send
            link = alloc.column_link
            cap = alloc.column_capacity
            moving = np.where(self.held > 0, self._out, np.minimum(self._into, self._out))
            turn_s = moving / cap * alloc.lane_turn_bytes[alloc.column_lane] / cap / 2
            at_link = np.bincount(link, weights=turn_s, minlength=len(alloc.capacity))
            wait += at_link[link] - turn_s
        parts = []
        lat = self._latency_s
        job_of = alloc.senders.job[rows]
        for i in np.unique(job_of).tolist():  # a job's paths at once, not a row's
            mine = rows[job_of == i]
            paths, path_row = self._job_paths(int(i))
            on = np.isin(path_row, mine)
            cols, row = paths[on], path_row[on]
            if row.size:
                hops = cols >= 0
                at = np.maximum(cols, 0)
                left = np.where(hops, self.held[at], 0.0)
                turns = np.where(hops, wait[at], 0.0).sum(axis=1) + lat[row]
                parts.append(Drains(row, cols, left, turns))
            bare = mine[~np.isin(mine, row)]
            bare = bare[lat[bare] > 0]  # no queue on the way, but the last packet's trip
            if bare.size:
                n = len(bare)
                none = -np.ones((n, 1), np.int64)
                parts.append(Drains(bare, none, np.zeros((n, 1)), lat[bare]))
        return Drains.join(parts)

    def _job_paths(self, i: int) -> tuple[IntArray, IntArray]:
        """:func:`~ibqos.sim.drains.job_paths` of job *i*, kept until the setup changes."""
        got = self._paths.get(i)
        if got is None:
            got = self._paths[i] = job_paths(self._alloc, i, self._jobs[i])
        return got

    def out_s(self, jobs: IntArray) -> FloatArray:
        """Seconds until the last bytes of each of *jobs* are out, at the present rates (0:
        they are)."""
        d = self._drains
        out = np.zeros(len(self._jobs))
        if d.row.size:
            job = self._alloc.senders.job
            path_s = d.out_s(self._drain_rate, np.isin(job, jobs))
            np.maximum.at(out, job[d.row], path_s)
        got: FloatArray = out[jobs]
        return got
