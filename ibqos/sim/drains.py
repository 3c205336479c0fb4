"""The fluid model's last bytes: when a sender's last bytes of a phase are out of the fabric.

With switch buffers (:mod:`ibqos.sim.buffers`) a job's communication phase ends when its
last bytes are out of the buffers, not when its hosts have sent them.  On each of its
paths they wait behind what the columns (one lane of one link each) on it held then, which
drains at the rate each column sends on from then on, event by event (the queues drain
together, so the longest counts: :data:`QUEUE_WAIT`); then for the other lanes'
arbitration turns at each hop, and for the last packet's trip, store and forward, over the
links after the host's (:func:`last_packet_s`).  :class:`Drains` holds those paths while
their bytes are on their way; :func:`job_paths` finds a job's paths as columns.

Units: seconds, bytes, bytes per second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from ibqos.sim.allocator import Allocator
from ibqos.sim.network import Network
from ibqos.sim.qos import SWITCH_LATENCY_S
from ibqos.sim.senders import Senders
from ibqos.sim.workload import SimJob

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: how a job's last bytes wait behind the queues on a path: "max", the longest (the queues
#: drain together), or "sum", all of them in turn (docs/simulate-validation.md)
QUEUE_WAIT: Literal["max", "sum"] = "max"
#: with buffers, a phase also ends no sooner than its last packet has crossed the links
#: after its host's (store and forward, as the packet model; :func:`last_packet_s`)
LAST_PACKET_TRIP = True
#: bytes: buffers this close to full or to empty are full or empty
MIN_BYTES = 1e-3


@dataclass
class Drains:
    """Senders' last bytes of a phase on their way out of the switch buffers, one row per
    path (:meth:`ibqos.sim.buffers.SwitchBuffers.new_drains`)."""

    row: IntArray  # the sender
    col: IntArray  # (paths, hops): the columns on the path, -1 where none stands for a hop
    left: FloatArray  # (paths, hops): bytes ahead of the last bytes in each column
    wait_s: FloatArray  # the other lanes' turns still to wait along the path (s)

    @classmethod
    def empty(cls) -> Drains:
        none = np.zeros((0, 0))
        return cls(np.zeros(0, dtype=np.int64), none.astype(np.int64), none, np.zeros(0))

    def take(self, on: npt.NDArray[np.bool_]) -> Drains:
        """The paths *on* marks."""
        return Drains(self.row[on], self.col[on], self.left[on], self.wait_s[on])

    @staticmethod
    def join(parts: Sequence[Drains]) -> Drains:
        """The paths of all *parts*, padded to the longest."""
        parts = [d for d in parts if d.row.size]
        if not parts:
            return Drains.empty()
        width = max(d.col.shape[1] for d in parts)
        parts = [d.widen(width) for d in parts]
        return Drains(
            np.concatenate([d.row for d in parts]),
            np.concatenate([d.col for d in parts]),
            np.concatenate([d.left for d in parts]),
            np.concatenate([d.wait_s for d in parts]),
        )

    def widen(self, width: int) -> Drains:
        """These paths padded to *width* hops."""
        pad = width - self.col.shape[1]
        if not pad:
            return self
        col = np.pad(self.col, ((0, 0), (0, pad)), constant_values=-1)
        return Drains(self.row, col, np.pad(self.left, ((0, 0), (0, pad))), self.wait_s)

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

    def advance(self, rate: FloatArray, dt: float) -> Drains:
        """The paths still on their way after *dt* seconds at *rate*: the queues drain,
        then the turns pass."""
        if not self.row.size:
            return self
        beyond = np.maximum(dt - self.queue_s(rate), 0.0)
        left = np.maximum(self.left - self._at(rate) * dt, 0.0)
        wait_s = np.maximum(self.wait_s - beyond, 0.0)
        on = (left > MIN_BYTES).any(axis=1) | (wait_s > 0)
        return Drains(self.row, self.col, left, wait_s).take(on)

    def out_s(self, rate: FloatArray, rows: npt.NDArray[np.bool_]) -> FloatArray:
        """Seconds until the last bytes of each path of the senders *rows* marks are at
        their end, at *rate*; the other paths' entries 0."""
        out = np.zeros(len(self.row))
        mine = rows[self.row]
        if mine.any():
            sub = self.take(mine)
            out[mine] = sub.queue_s(rate) + sub.wait_s
        return out


def job_paths(alloc: Allocator, i: int, job: SimJob) -> tuple[IntArray, IntArray]:
    """Job *i*'s distinct paths as *alloc*'s columns (-1: a hop no column stands for), and
    the sender of each."""
    senders = alloc.senders
    lo, hi = int(senders.first[i]), int(senders.first[i + 1])
    hops = senders.hops[i]
    if not (hops.size and alloc.columns):
        return np.zeros((0, 0), dtype=np.int64), np.zeros(0, dtype=np.int64)
    # the rows of Senders.of: one per source host, or one for the whole job
    row = np.zeros(len(hops), dtype=np.int64)
    if hi - lo > 1:
        row = np.unique(job.flows.src_host, return_inverse=True)[1].astype(np.int64)
    key = np.where(hops >= 0, hops * alloc.n_lanes + alloc.lane_of_row(lo), -1)
    cols = np.where(key >= 0, alloc.column_of_key(np.maximum(key, 0)), -1)
    both = np.unique(np.column_stack([lo + row, cols])[(cols >= 0).any(axis=1)], axis=0)
    return both[:, 1:], both[:, 0]


def last_packet_s(net: Network, jobs: Sequence[SimJob], senders: Senders, mtu: int) -> FloatArray:
    """Seconds from when each sender is done to when its last packet (of *mtu* bytes)
    is at the end of its longest path, queues aside: store and forward, its time on
    each link after the first and :data:`SWITCH_LATENCY_S` in each switch.  Less what
    it gained on the first link: the packet model's host sends its packets at most
    its pace apart, so its last one starts a packet at that pace before the fluid
    model's host is done and is on the wire at the link's rate (0 at the link's
    pace).  Measured against the packet model: docs/simulate-validation.md."""
    s = senders
    out = np.zeros(s.rows)
    if not LAST_PACKET_TRIP:
        return out
    for i, job in enumerate(jobs):
        lo, hi = int(s.first[i]), int(s.first[i + 1])
        flows = job.flows
        if hi == lo or not len(flows.src):
            continue
        hops = s.hops[i]
        cap = net.capacity[hops[:, 0]]
        host = np.unique(flows.src_host, return_inverse=True)[1].astype(np.int64)
        pace = np.bincount(host, weights=flows.rate)[host]  # the flow's host's, B/s
        with np.errstate(divide="ignore"):
            gained = np.maximum(mtu / pace - mtu / cap, 0.0)
        trip = ((hops >= 0).sum(axis=1) - 1) * (mtu / cap + SWITCH_LATENCY_S)
        row = host if hi - lo > 1 else np.zeros(len(hops), dtype=np.int64)
        np.maximum.at(out, lo + row, np.maximum(trip - gained, 0.0))
    return out
