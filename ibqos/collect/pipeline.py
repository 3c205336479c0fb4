"""Sending PMA Gets through a MAD port with many requests in flight.

A batch is a list of requests (LID, attribute, PortSelect) that a sliding window keeps in
flight: send until *window* requests are out, then take a reply, match it to its request
on the low 32 bits of the transaction id (the kernel owns the upper 32), copy its 256
bytes into one buffer, and send the next.  Requests that get no reply within *timeout_s*
are sent again up to *retries* times, then reported for their port.  (The clock is read
once per 64 replies, or when none came for *timeout_s*, so a lost request is declared
lost between one and two timeouts after it was sent.)  When every request is settled the
buffer is decoded in bulk with numpy (``ibqos.mad.pma``).

Bounds.  A batch where nothing answers ends after about ``ceil(n / window) x (retries + 1)
x timeout_s`` (up to twice that, as the clock is read as said above), so it grows with the
number of requests.  A batch may be given a *deadline* (a :func:`time.monotonic` time): at
the first look at the clock past it, every request not settled yet fails
(``no reply before the sweep's time limit``; ``Result.cut`` marks them), and the batch
ends.  Replies that come after that are ignored by the next batch (transaction ids are
never reused soon).  While it waits, the batch calls the tool runner's waiter at least
every :data:`~ibqos.tools.SLICE_S` seconds (``recv`` waits no longer than that), so a
daemon's watchdog is pinged and a stop requested by the waiter ends the batch at once.

Window under the lab: umad2sim holds one lock while it writes a request to ibsim's datagram
socket, and its receiver thread needs that lock to queue a reply.  With more requests out
than a unix datagram queue holds (``net.unix.max_dgram_qlen``, 10 by default) both sides can
block for good, so under umad2sim the window is capped below that length.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from ibqos.errors import CollectError
from ibqos.mad import pma
from ibqos.tools import SLICE_S, poll_waiter

log = logging.getLogger(__name__)

__all__ = ["Pipeline", "Request", "Result", "Transport", "max_dgram_qlen", "under_umad2sim"]


_CUT = "no reply before the sweep's time limit"


class Transport(Protocol):
    """What the collector needs from a MAD port (``ibqos.mad.umad.UmadPort``): request
    buffers are a header of ``hdr`` bytes then the 256-byte MAD."""

    hdr: int
    mad_in: memoryview

    def address(self, bufs: np.ndarray, lids: np.ndarray) -> None: ...

    def send_at(self, addr: int, timeout_ms: int) -> None: ...

    def recv(self, timeout_ms: int) -> int: ...

    def recv_status(self) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Request:
    """One PMA Get: to *lid*, for *attr*, with *port_select* in data byte 1; with a
    *counter_select*, a Set that clears those counters instead."""

    lid: int
    attr: int
    port_select: int
    counter_select: int = 0


@dataclass
class Result:
    """Replies of one batch of requests, row *i* for request *i*.

    Attributes:
        mads: (n, 256) uint8, the reply MADs (zeros where none came).
        time_s: UNIX time each reply arrived, seconds; NaN where none did.
        mono_s: :func:`time.monotonic` time each reply arrived, seconds; NaN where none
            did.  Intervals are measured on it: a step of the wall clock changes none.
        error: "" where a good reply came, else why not (one line).
        cut: True where the request was still unsettled at the batch's deadline.
    """

    mads: np.ndarray
    time_s: np.ndarray
    error: list[str]
    cut: np.ndarray
    mono_s: np.ndarray


def max_dgram_qlen(path: Path = Path("/proc/sys/net/unix/max_dgram_qlen")) -> int:
    """The kernel's unix datagram queue length (10 when it cannot be read)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 10


def under_umad2sim() -> bool:
    """This process talks to ibsim through umad2sim (LD_PRELOAD), not to a kernel."""
    return "umad2sim" in os.environ.get("LD_PRELOAD", "")


class Pipeline:
    """Sends requests with up to *window* in flight and collects their replies.

    Args:
        transport: an open MAD port.
        window: requests in flight at most.
        timeout_s: seconds to wait for each reply before sending again.
        retries: extra tries per request after a timeout or a busy reply.
    """

    def __init__(self, transport: Transport, window: int, timeout_s: float, retries: int) -> None:
        self.transport = transport
        self.window = max(1, window)
        self.timeout_s = timeout_s
        self.retries = retries
        self._tid = int.from_bytes(os.urandom(4), "big")  # start anywhere: stale replies miss
        self.stats: dict[str, int] = {
            "sent": 0,
            "answered": 0,
            "retries": 0,
            "timeouts": 0,
            "cut": 0,
        }

    def run(
        self,
        requests: Sequence[Request],
        deadline: float | None = None,
        *,
        retries: int | None = None,
    ) -> Result:
        """Send every request and wait until each has a reply or has used up its tries,
        or until *deadline* (monotonic seconds; None: none).  *retries* overrides the
        pipeline's for this batch (a probe whose silence is its answer needs none)."""
        selects = [r.counter_select for r in requests]
        return self.run_arrays(
            np.array([r.lid for r in requests], dtype=np.int64),
            np.array([r.attr for r in requests], dtype=np.int64),
            np.array([r.port_select for r in requests], dtype=np.int64),
            deadline,
            counter_select=np.array(selects, dtype=np.int64) if any(selects) else None,
            retries=retries,
        )

    def run_arrays(
        self,
        lids: np.ndarray,
        attrs: np.ndarray,
        ports: np.ndarray,
        deadline: float | None = None,
        *,
        counter_select: np.ndarray | None = None,
        retries: int | None = None,
    ) -> Result:
        """``run`` for requests given as arrays: request *i* is a Get of ``attrs[i]`` to
        ``lids[i]`` with PortSelect ``ports[i]`` (a Set clearing ``counter_select[i]``
        where that is non-zero).

        Raises:
            CollectError: the device refuses every send (module docstring).
            BaseException: whatever the tool runner's waiter raises (StopRequested).

        Each try of a request has its own transaction id, ``base + (try - 1) * n + i``: a
        kernel refuses a Get whose id matches one it still waits on, and a late reply or a
        late "timed out" must be told apart from the copy sent after it.
        """
        n = len(lids)
        t = self.transport
        retries = self.retries if retries is None else retries
        tries_max = retries + 1
        base = self._tid
        self._tid = (self._tid + n * tries_max + 1) & 0xFFFFFFFF
        # every request buffer is built at once with numpy; the loop only sends addresses
        size = t.hdr + pma.MAD_SIZE
        bufs = np.zeros((n, size), dtype=np.uint8)
        for attr in np.unique(attrs):
            bufs[attrs == attr, t.hdr :] = np.frombuffer(pma.get_request(int(attr)), np.uint8)
        bufs[:, t.hdr + pma.DATA_OFFSET + 1] = ports
        if counter_select is not None:  # Sets: method and CounterSelect, big-endian
            sets = counter_select > 0
            bufs[sets, t.hdr + 3] = pma.METHOD_SET
            bufs[sets, t.hdr + pma.DATA_OFFSET + 2] = counter_select[sets] >> 8
            bufs[sets, t.hdr + pma.DATA_OFFSET + 3] = counter_select[sets] & 0xFF
        at = t.hdr + pma.TID_LOW_OFFSET
        tids = ((base + np.arange(n, dtype=np.uint64)) & 0xFFFFFFFF).astype(">u4")
        bufs[:, at : at + 4] = tids.view(np.uint8).reshape(n, 4)
        t.address(bufs, lids)
        first = bufs.ctypes.data
        view = bufs.reshape(-1).data  # to give a resent copy its own id

        replies = bytearray(n * pma.MAD_SIZE)
        times = [float("nan")] * n
        monos = [float("nan")] * n
        errors = [""] * n
        why = ["no reply"] * n  # what a request's last try got, for its error
        done = [False] * n
        tries = [0] * n
        pending: deque[int] = deque(range(n))
        # (due, index, try number) in send order; due times grow, so the oldest is first
        flying: deque[tuple[float, int, int]] = deque()
        live: dict[int, int] = {}  # index -> try number of the copy in flight
        inp = t.mad_in
        send_at, recv, monotonic, now_s = t.send_at, t.recv, time.monotonic, time.time
        timeout_s, window = self.timeout_s, self.window
        timeout_ms = max(1, int(timeout_s * 1000))
        # recv() returns at least every slice, so the clock, the deadline and the waiter
        # are looked at even when nothing answers
        recv_ms = max(1, min(timeout_ms, int(SLICE_S * 1000)))
        cut = np.zeros(n, dtype=np.bool_)
        waited = monotonic()
        unpack_tid = struct.Struct(">I").unpack_from
        pack_tid = struct.Struct(">I").pack_into
        sent = answered = timeouts = settled = turns = refused = 0
        while settled < n:
            if pending and len(live) < window:
                due = monotonic() + timeout_s
                while pending and len(live) < window:
                    i = pending.popleft()
                    k = tries[i] = tries[i] + 1
                    if k > 1:
                        pack_tid(view, i * size + at, (base + (k - 1) * n + i) & 0xFFFFFFFF)
                    try:
                        send_at(first + i * size, timeout_ms)
                    except CollectError as err:  # this request only, unless the device is gone
                        refused += 1
                        if refused > 16 and not answered:
                            raise
                        errors[i], done[i] = f"not sent: {err}", True
                        settled += 1
                        continue
                    live[i] = k
                    flying.append((due, i, k))
                    sent += 1
            length = recv(recv_ms)
            if length >= 0:
                off = (unpack_tid(inp, pma.TID_LOW_OFFSET)[0] - base) & 0xFFFFFFFF
                i, k = off % n if n else 0, off // n + 1 if n else 0
                if length < pma.TID_LOW_OFFSET + 4 or k > tries_max or done[i]:
                    log.debug("stray or late MAD (%d bytes) ignored", length)
                elif t.recv_status() != 0:
                    # the kernel (or umad2sim) hands a request back when it timed out
                    if live.get(i) == k:
                        del live[i]
                        settled += self._again(i, pending, tries, errors, done, why[i], retries)
                elif length < pma.MAD_SIZE:
                    self._settle(i, live, pending)
                    errors[i] = f"truncated reply ({length} of {pma.MAD_SIZE} bytes)"
                    done[i] = True
                    settled += 1
                elif inp[5] & pma.STATUS_BUSY:
                    why[i] = "busy"  # its deadline sends it again, not at once: back off
                else:
                    self._settle(i, live, pending)  # a late reply of an earlier try is good too
                    replies[i * pma.MAD_SIZE : (i + 1) * pma.MAD_SIZE] = inp
                    times[i] = now_s()
                    monos[i] = monotonic()
                    done[i] = True
                    settled += 1
                    answered += 1
                turns += 1
                if turns & 63:  # look at the clock every 64 replies, or when none came
                    continue
            now = monotonic()
            if deadline is not None and now >= deadline:
                for i in range(n):
                    if not done[i]:
                        errors[i], done[i], cut[i] = _CUT, True, True
                self.stats["cut"] += int(cut.sum())
                break
            if now - waited >= SLICE_S:
                waited = now
                poll_waiter()
            if flying:
                while flying and flying[0][0] <= now:
                    _, i, k = flying.popleft()
                    if live.get(i) == k:  # this copy is still unanswered: it timed out
                        del live[i]
                        timeouts += 1
                        settled += self._again(i, pending, tries, errors, done, why[i], retries)
        self.stats["sent"] += sent
        self.stats["answered"] += answered
        self.stats["timeouts"] += timeouts
        mads = np.frombuffer(replies, dtype=np.uint8).reshape(n, pma.MAD_SIZE)
        return Result(
            mads, np.array(times, dtype=np.float64), errors, cut, np.array(monos, np.float64)
        )

    @staticmethod
    def _settle(i: int, live: dict[int, int], pending: deque[int]) -> None:
        """Take request *i* out of flight, or out of the queue if it was waiting for a retry."""
        if live.pop(i, None) is None and i in pending:
            pending.remove(i)

    def _again(
        self,
        i: int,
        pending: deque[int],
        tries: list[int],
        errors: list[str],
        done: list[bool],
        why: str,
        retries: int,
    ) -> int:
        """Queue request *i* again if it has tries left; else fail it.  Returns 1 if settled."""
        if tries[i] <= retries:
            pending.appendleft(i)
            self.stats["retries"] += 1
            return 0
        errors[i] = f"{why} after {tries[i]} tries ({self.timeout_s:g} s each)"
        done[i] = True
        return 1
