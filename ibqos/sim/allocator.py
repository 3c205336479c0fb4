"""Bandwidth sharing in the fluid model: each sender's rate under one QoS setup.

Between two events every communicating sender *s* sends at a fraction ``alpha_s`` (0..1]
of its declared rate.  The sharing rule, per link (by transmitting port), all links at
once:

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

With switch buffers (:mod:`ibqos.sim.buffers`) a column (one lane of one link) whose
buffers have room limits no one, a backlog asks its lane for more than its senders
bring, and head of line caps senders below their declared rate (:mod:`ibqos.sim.inputs`):
:meth:`Allocator.rates` takes that state as arguments.

Units: rates in bytes per second; ``alpha`` a sender's share (0..1] of its declared rate.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ibqos.sim.inputs import InputBuffers
from ibqos.sim.layout import Layout, lay_out
from ibqos.sim.network import Network
from ibqos.sim.qos import Arbitration
from ibqos.sim.senders import Senders
from ibqos.sim.workload import SimJob

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MEMO_SIZE = 4096  # groups' rates kept per setup
_EPS = 1e-12  # a link is overloaded when the demand is above its capacity by this fraction


class Allocator:
    """Rates of the communicating senders under one QoS setup (the sharing rule above).

    Args:
        net: the network.
        jobs: every job of the mix.
        arb: their SLs and the port tables.
        senders: the mix's senders (:meth:`Senders.of`), if already built.

    Attributes:
        layout: the kept entries (those of links some mix of the senders can overload),
            indexed by column and input.
        inputs: the switch input buffers behind the columns (head of line).
        lane_turn_bytes: per lane in use, the bytes one of its VLArb entries sends per
            turn, on average over its entries in its table.
        column_capacity: the capacity of each column's link (bytes per second).
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
        # another lane that comes in during the turn waits for (ibqos.sim.buffers)
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
        self.layout: Layout = lay_out(
            row,
            s.e_link[keep],
            s.e_load[keep],
            s.e_hosts[keep],
            lane,
            inlet,
            n,
            s.rows,
            self.n_lanes,
        )
        lay = self.layout
        self.inputs = InputBuffers(s, lay, self._lane_of, self.n_lanes)
        self.column_capacity: FloatArray = self.capacity[lay.col_link]
        # each sender's load per kept link, over all its inputs (what finds the hot links)
        pair, pair_of = np.unique(row * n + lay.link, return_inverse=True)
        self._pair_load = np.bincount(pair_of, weights=lay.load).astype(np.float64)
        self._pair_link = pair % n
        self._pair_ptr = np.searchsorted(pair // n, np.arange(s.rows + 1))
        # rates of groups of senders already solved, by the buffers' state and the group's
        # rows (oldest first)
        self._memo: dict[bytes, FloatArray] = {}
        # the buffers' state for the solver (open columns, backlogs, senders' caps; rates())
        n_cols = self.columns
        self._no_buffers = np.zeros(n_cols, dtype=bool)
        self._no_ask = np.zeros(n_cols)
        self._open, self._ask = self._no_buffers, self._no_ask
        self._no_cap = np.ones(s.rows)
        self._cap = self._no_cap
        # The first round of the last solve in each slot (see solve_kept), filled for no
        # entry yet.  A buffered run alternates solves without and with head-of-line caps;
        # each kind kept apart, the next one of the kind differs from it in a few links.
        n_e = len(row)
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
    def columns(self) -> int:
        """How many columns there are (one lane of one kept link each)."""
        return self.layout.columns

    @property
    def column_link(self) -> IntArray:
        """The link of each column."""
        return self.layout.col_link

    @property
    def column_lane(self) -> IntArray:
        """The lane (index among the lanes in use) of each column."""
        return self.layout.col_lane

    @property
    def n_lanes(self) -> int:
        """Lanes in use (at least 1): the width of a column's key (link x lanes + lane)."""
        return max(len(self._lane_weight), 1)

    def lane_of_row(self, row: int) -> int:
        """The lane (index among the lanes in use) of a sender."""
        return int(self._lane_of[row]) if len(self._lane_of) else 0

    def column_of_key(self, key: IntArray) -> IntArray:
        """The column of each (link x :attr:`n_lanes` + lane) key; -1 for a lane of a link
        no column stands for (one that no mix of these senders can overload)."""
        got: IntArray = self.layout.col_of_key[key]
        return got

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
        buffers and caps).  *col_open* and *col_ask* (per column, :attr:`columns`) are the
        switch buffers' state (:class:`ibqos.sim.buffers.SwitchBuffers`): whether a
        column's buffers have room, and what its backlog asks its lane for (bytes per
        second; 0: no backlog); without them every column limits its lane and none has a
        backlog.  *row_cap*: the most (0..1] of its rate each sender may send (head of
        line, :meth:`ibqos.sim.inputs.InputBuffers.paces`; default 1).  *slot* (0 or 1):
        which kept first round the solver starts from (speed only: the rates are the
        same).
        """
        # numba loads in about 0.5 s: only a run that solves rates pays it, not every
        # ibqos command that imports this module
        from ibqos.sim.maxmin import hot_groups

        alpha = np.where(active, 1.0 if row_cap is None else row_cap, 0.0)
        if not len(self.layout.row):
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

    def _solve(
        self, todo: npt.NDArray[np.bool_], hot: npt.NDArray[np.bool_], label: IntArray
    ) -> FloatArray:
        """``alpha`` of the *todo* senders, over the *hot* links (1 for the others)."""
        from ibqos.sim.maxmin import solve_kept

        lay = self.layout
        solved, self.rounds = solve_kept(
            todo,
            hot,
            label,
            lay.row,
            lay.link,
            lay.load,
            lay.hosts,
            lay.sub_ptr,
            lay.col_ptr,
            lay.col_lane,
            lay.link_col_ptr,
            lay.link_col,
            lay.row_ptr,
            lay.row_entries,
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

    def flows(self, alpha: FloatArray, ask: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Per column, the bytes per second its senders bring at *alpha*, and what its
        lane's share of the link lets on, a column with a backlog asking its lane for at
        least *ask* (bytes per second)."""
        from ibqos.sim.maxmin import lane_outputs

        lay = self.layout
        if not len(lay.row):
            return np.zeros(0), np.zeros(0)
        into = np.add.reduceat(lay.load * alpha[lay.row], lay.col_start)
        out = lane_outputs(
            into,
            ask,
            lay.col_lane,
            lay.link_col_ptr,
            lay.link_col,
            self._lane_weight,
            self._lane_high,
            self.capacity,
            self.high_share,
        )
        return into, out
