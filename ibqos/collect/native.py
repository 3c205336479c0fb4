"""The native backend: PMA Gets through libibumad with many requests in flight.

One process, no fork per port.  A sweep is a list of requests (LID, attribute, PortSelect)
that a sliding window keeps in flight: send until *window* requests are out, then take a
reply, match it to its request on the low 32 bits of the transaction id (the kernel owns the
upper 32), copy its 256 bytes into one buffer, and send the next.  Requests that get no reply
within *timeout_s* are sent again up to *retries* times, then reported for their port.
(The clock is read once per 64 replies, or when none came for *timeout_s*, so a lost
request is declared lost between one and two timeouts after it was sent.)  When
every request is settled the buffer is decoded in bulk with numpy (``ibqos.mad.pma``).

Each node is probed once, on first sight, with ClassPortInfo (IBA 16.1.3.1): it says
whether PortCountersExtended (64-bit) is there, whether PortCounters has PortXmitWait and
whether PCE also carries it.  Per-SL data counters have no capability bit, so switches are
probed for PortXmitDataSL by trying it (status 0x000C or no reply: not supported).

With ``vl_xmit_wait`` on, every node (switch or CA) is also asked once for
PortVLXmitWaitCounters (IBA 16.1.4, attribute 0x001C), which no capability bit announces
either.  A good reply adds one Get per port to every sweep, whose sixteen 16-bit counters
fill the ``vl_xmit_wait0..15`` columns.  An error status (0x000C on a PMA without it) means
not supported, for good; no reply is asked again after ``REPROBE_SWEEPS`` sweeps, since a
lost probe would otherwise hide a node's lanes until a restart.  Per-VL readings that fail
later leave only those columns empty: the row's data counters and ``error`` stand.

Window under the lab: umad2sim holds one lock while it writes a request to ibsim's datagram
socket, and its receiver thread needs that lock to queue a reply.  With more requests out
than a unix datagram queue holds (``net.unix.max_dgram_qlen``, 10 by default) both sides can
block for good, so under umad2sim the window is capped below that length.
"""

from __future__ import annotations

import logging
import os
import resource
import struct
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from ibqos.collect.sweep import (
    VL_COUNT,
    VL_WAIT_COLUMNS,
    Sweep,
)
from ibqos.errors import CollectError
from ibqos.fabric.targets import (
    Target,
)
from ibqos.mad import pma

log = logging.getLogger(__name__)

#: sweeps between two tries of a node whose ClassPortInfo (or PortVLXmitWaitCounters
#: probe) did not answer
REPROBE_SWEEPS = 10

_U64_MAX = np.uint64(2**64 - 1)


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
    """One PMA Get: to *lid*, for *attr*, with *port_select* in data byte 1."""

    lid: int
    attr: int
    port_select: int


@dataclass
class Result:
    """Replies of one batch of requests, row *i* for request *i*.

    Attributes:
        mads: (n, 256) uint8, the reply MADs (zeros where none came).
        time_s: UNIX time each reply arrived, seconds; NaN where none did.
        error: "" where a good reply came, else why not (one line).
    """

    mads: np.ndarray
    time_s: np.ndarray
    error: list[str]


@dataclass(frozen=True)
class NodeCaps:
    """What a node's PMA supports (from ClassPortInfo, and probing per-SL counters).

    Attributes:
        cap_mask: PerfMgt ClassPortInfo.CapabilityMask.
        cap_mask2: CapabilityMask2 (27 bits).
        per_sl: PortXmitDataSL answered (switches only are probed).
        vl_xmit_wait: PortVLXmitWaitCounters answered (probed only with
            ``NativeBackend(vl_xmit_wait=True)``).
    """

    cap_mask: int
    cap_mask2: int
    per_sl: bool = False
    vl_xmit_wait: bool = False

    @property
    def extended(self) -> bool:
        """PortCountersExtended has at least the four 64-bit data and packet counters."""
        return bool(self.cap_mask & (pma.CAP_EXT_WIDTH | pma.CAP_EXT_WIDTH_NOIETF))

    @property
    def all_port_select(self) -> bool:
        """PortSelect 0xFF sums all ports (switches; not used by sweeps, which need each port)."""
        return bool(self.cap_mask & pma.CAP_ALL_PORT_SELECT)

    @property
    def xmit_wait(self) -> bool:
        """PortCounters carries PortXmitWait."""
        return bool(self.cap_mask & pma.CAP_XMIT_WAIT)

    @property
    def pce_xmit_wait(self) -> bool:
        """PortCountersExtended carries PortXmitWait (no separate PortCounters needed)."""
        return bool(self.cap_mask2 & pma.CAP2_ADDL_PCE)


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
        self.stats: dict[str, int] = {"sent": 0, "answered": 0, "retries": 0, "timeouts": 0}

    def run(self, requests: Sequence[Request]) -> Result:
        """Send every request and wait until each has a reply or has used up its tries."""
        return self.run_arrays(
            np.array([r.lid for r in requests], dtype=np.int64),
            np.array([r.attr for r in requests], dtype=np.int64),
            np.array([r.port_select for r in requests], dtype=np.int64),
        )

    def run_arrays(self, lids: np.ndarray, attrs: np.ndarray, ports: np.ndarray) -> Result:
        """``run`` for requests given as arrays: request *i* is a Get of ``attrs[i]`` to
        ``lids[i]`` with PortSelect ``ports[i]``.

        Each try of a request has its own transaction id, ``base + (try - 1) * n + i``: a
        kernel refuses a Get whose id matches one it still waits on, and a late reply or a
        late "timed out" must be told apart from the copy sent after it.
        """
        n = len(lids)
        t = self.transport
        tries_max = self.retries + 1
        base = self._tid
        self._tid = (self._tid + n * tries_max + 1) & 0xFFFFFFFF
        # every request buffer is built at once with numpy; the loop only sends addresses
        size = t.hdr + pma.MAD_SIZE
        bufs = np.zeros((n, size), dtype=np.uint8)
        for attr in np.unique(attrs):
            bufs[attrs == attr, t.hdr :] = np.frombuffer(pma.get_request(int(attr)), np.uint8)
        bufs[:, t.hdr + pma.DATA_OFFSET + 1] = ports
        at = t.hdr + pma.TID_LOW_OFFSET
        tids = ((base + np.arange(n, dtype=np.uint64)) & 0xFFFFFFFF).astype(">u4")
        bufs[:, at : at + 4] = tids.view(np.uint8).reshape(n, 4)
        t.address(bufs, lids)
        first = bufs.ctypes.data
        view = bufs.reshape(-1).data  # to give a resent copy its own id

        replies = bytearray(n * pma.MAD_SIZE)
        times = [float("nan")] * n
        errors = [""] * n
        why = ["no reply"] * n  # what a request's last try got, for its error
        done = [False] * n
        tries = [0] * n
        pending: deque[int] = deque(range(n))
        # (deadline, index, try number) in send order; deadlines grow, so the oldest is first
        flying: deque[tuple[float, int, int]] = deque()
        live: dict[int, int] = {}  # index -> try number of the copy in flight
        inp = t.mad_in
        send_at, recv, monotonic, now_s = t.send_at, t.recv, time.monotonic, time.time
        timeout_s, window = self.timeout_s, self.window
        timeout_ms = max(1, int(timeout_s * 1000))
        unpack_tid = struct.Struct(">I").unpack_from
        pack_tid = struct.Struct(">I").pack_into
        sent = answered = timeouts = settled = turns = refused = 0
        while settled < n:
            if pending and len(live) < window:
                deadline = monotonic() + timeout_s
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
                    flying.append((deadline, i, k))
                    sent += 1
            length = recv(timeout_ms)
            if length >= 0:
                off = (unpack_tid(inp, pma.TID_LOW_OFFSET)[0] - base) & 0xFFFFFFFF
                i, k = off % n if n else 0, off // n + 1 if n else 0
                if length < pma.TID_LOW_OFFSET + 4 or k > tries_max or done[i]:
                    log.debug("stray or late MAD (%d bytes) ignored", length)
                elif t.recv_status() != 0:
                    # the kernel (or umad2sim) hands a request back when it timed out
                    if live.get(i) == k:
                        del live[i]
                        settled += self._again(i, pending, tries, errors, done, why[i])
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
                    done[i] = True
                    settled += 1
                    answered += 1
                turns += 1
                if turns & 63:  # look at the clock every 64 replies, or when none came
                    continue
            if flying:
                now = monotonic()
                while flying and flying[0][0] <= now:
                    _, i, k = flying.popleft()
                    if live.get(i) == k:  # this copy is still unanswered: it timed out
                        del live[i]
                        timeouts += 1
                        settled += self._again(i, pending, tries, errors, done, why[i])
        self.stats["sent"] += sent
        self.stats["answered"] += answered
        self.stats["timeouts"] += timeouts
        mads = np.frombuffer(replies, dtype=np.uint8).reshape(n, pma.MAD_SIZE)
        return Result(mads, np.array(times, dtype=np.float64), errors)

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
    ) -> int:
        """Queue request *i* again if it has tries left; else fail it.  Returns 1 if settled."""
        if tries[i] <= self.retries:
            pending.appendleft(i)
            self.stats["retries"] += 1
            return 0
        errors[i] = f"{why} after {tries[i]} tries ({self.timeout_s:g} s each)"
        done[i] = True
        return 1


class NativeBackend:
    """Reads PMA counters itself through libibumad (the default backend).

    Args:
        ca: CA name to send from (default: the first one).
        port: CA port number (default: the first active one).
        window: requests in flight at most (capped under umad2sim, see the module doc).
        timeout_s: seconds to wait for each reply before trying again.
        retries: extra tries after a timeout or a busy reply.
        xmit_wait: also read PortCounters for PortXmitWait where PCE does not carry it
            (one more Get per port).
        vl_xmit_wait: also read PortVLXmitWaitCounters of every port whose node answers
            it (one more Get per port); the sweep table then has the ``vl_xmit_wait0..15``
            columns.
        transport: an already open MAD port (tests); default opens ``UmadPort(ca, port)``.
    """

    name = "native"

    def __init__(
        self,
        ca: str | None = None,
        port: int = 0,
        *,
        window: int = 32,
        timeout_s: float = 0.5,
        retries: int = 2,
        xmit_wait: bool = True,
        vl_xmit_wait: bool = False,
        transport: Transport | None = None,
    ) -> None:
        if transport is None:
            from ibqos.mad.umad import UmadPort  # loads libibumad only when needed

            transport = UmadPort(ca, port)
        limit = max_dgram_qlen() - 2 if under_umad2sim() else window
        if window > limit:
            log.info("umad2sim: in-flight window %d capped at %d", window, limit)
        self.pipeline = Pipeline(transport, min(window, max(1, limit)), timeout_s, retries)
        self.xmit_wait = xmit_wait
        self.vl_xmit_wait = vl_xmit_wait
        self.caps: dict[int, NodeCaps | None] = {}  # None: ClassPortInfo failed
        self._warned_32bit: set[int] = set()
        self._caps_gen = 0  # bumped when caps change: cached request plans go stale
        self._cached: _Plan | None = None
        self._sweeps = 0
        self._failed_at: dict[int, int] = {}  # node GUID -> sweep its ClassPortInfo failed
        self._vl_due: dict[int, int] = {}  # node GUID -> sweep to ask again for VL counters

    def close(self) -> None:
        """Close the MAD port."""
        self.pipeline.transport.close()

    def __enter__(self) -> NativeBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- capabilities ---------------------------------------------------------------
    def probe(self, targets: Sequence[Target]) -> None:
        """Read ClassPortInfo of every node not probed yet, then try per-SL counters on
        the switches among them (and per-VL XmitWait on all of them, if asked for).  A
        node that does not answer is tried again after ``REPROBE_SWEEPS`` sweeps (each
        try costs it ``retries`` timeouts)."""
        self._sweeps += 1
        first: dict[int, Target] = {}
        vl_again: dict[int, Target] = {}
        for tg in targets:
            if tg.node_guid not in self.caps:
                first.setdefault(tg.node_guid, tg)
            elif self.caps[tg.node_guid] is None:
                if self._sweeps - self._failed_at.get(tg.node_guid, 0) >= REPROBE_SWEEPS:
                    first.setdefault(tg.node_guid, tg)
            elif self._vl_due and self._vl_due.get(tg.node_guid, self._sweeps + 1) <= self._sweeps:
                vl_again.setdefault(tg.node_guid, tg)
        if not first and not vl_again:
            return
        caps = self._probe_classes(list(first.values())) if first else {}
        if self.vl_xmit_wait:
            answered = [tg for tg in first.values() if tg.node_guid in caps]
            self._probe_vl([*answered, *vl_again.values()], caps)
        if caps:  # the request plan changes only when a node gains capabilities
            self.caps.update(caps)
            self._caps_gen += 1

    def _probe_classes(self, nodes: list[Target]) -> dict[int, NodeCaps]:
        """ClassPortInfo of *nodes*, then PortXmitDataSL of the switches among them: the
        caps of those that answered (those that did not are recorded as failed)."""
        caps: dict[int, NodeCaps] = {}
        res = self.pipeline.run([Request(tg.lid, pma.ATTR_CLASS_PORT_INFO, 0) for tg in nodes])
        recs = pma.decode(res.mads.tobytes(), pma.ATTR_CLASS_PORT_INFO)
        bad = pma.check_replies(recs, pma.ATTR_CLASS_PORT_INFO)
        for tg, rec, err, rerr in zip(nodes, recs, bad, res.error, strict=True):
            why = rerr or err
            if why:
                log.warning("%s: ClassPortInfo: %s", _where(tg), why)
                self.caps[tg.node_guid] = None
                self._failed_at[tg.node_guid] = self._sweeps
                continue
            caps[tg.node_guid] = NodeCaps(
                int(rec["cap_mask"]), int(rec["cap_mask2_resp_time"]) >> 5
            )
        switches = [tg for tg in nodes if tg.is_switch and tg.node_guid in caps]
        if switches:
            res = self.pipeline.run(
                [Request(tg.lid, pma.ATTR_PORT_XMIT_DATA_SL, tg.port) for tg in switches]
            )
            recs = pma.decode(res.mads.tobytes(), pma.ATTR_PORT_XMIT_DATA_SL)
            bad = pma.check_replies(recs, pma.ATTR_PORT_XMIT_DATA_SL)
            for tg, err, rerr in zip(switches, bad, res.error, strict=True):
                if not (err or rerr):
                    caps[tg.node_guid] = replace(caps[tg.node_guid], per_sl=True)
        return caps

    def _probe_vl(self, nodes: list[Target], caps: dict[int, NodeCaps]) -> None:
        """Ask one port of each of *nodes* for PortVLXmitWaitCounters; record in *caps*
        the nodes that answer (their caps are taken from *caps*, else from ``self.caps``).

        No capability bit announces the attribute.  An error status (0x000C: not
        implemented) is final; no reply (ibsim's answer to what it lacks, or a lost MAD)
        is asked again after ``REPROBE_SWEEPS`` sweeps.
        """
        if not nodes:
            return
        attr = pma.ATTR_PORT_VL_XMIT_WAIT
        res = self.pipeline.run([Request(tg.lid, attr, tg.port) for tg in nodes])
        bad = pma.check_replies(pma.decode(res.mads.tobytes(), attr), attr)
        for tg, err, rerr in zip(nodes, bad, res.error, strict=True):
            self._vl_due.pop(tg.node_guid, None)
            known = caps.get(tg.node_guid) or self.caps.get(tg.node_guid)
            if known is None:
                continue
            if not (err or rerr):
                caps[tg.node_guid] = replace(known, vl_xmit_wait=True)
                continue
            if rerr:  # nothing came back: maybe lost, so not final
                self._vl_due[tg.node_guid] = self._sweeps + REPROBE_SWEEPS
                later = f"; asked again in {REPROBE_SWEEPS} sweeps"
            else:
                later = ""
            log.info(
                "%s: no PortVLXmitWaitCounters (%s): its per-VL columns stay empty%s",
                _where(tg),
                rerr or err,
                later,
            )

    # -- sweep ----------------------------------------------------------------------
    def sweep(self, targets: Sequence[Target]) -> Sweep:
        """Read PortCountersExtended (or PortCounters) of every target once, plus
        PortCounters for XmitWait and PortVLXmitWaitCounters where configured and
        supported."""
        started, t0 = time.time(), time.monotonic()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        stats0 = dict(self.pipeline.stats)
        self.probe(targets)
        plan = self._plan(targets)
        res = self.pipeline.run_arrays(plan.lids, plan.attrs, plan.ports)
        table = self._table(plan, res)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        stats = {k: v - stats0.get(k, 0) for k, v in self.pipeline.stats.items()}
        stats["failed"] = int((table["error"] != "").sum())
        for tg, err in zip(targets, table["error"], strict=True):
            if err:
                log.warning("%s: %s", _where(tg), err)
        return Sweep(
            targets=list(targets),
            table=table,
            backend=self.name,
            started_s=started,
            duration_s=time.monotonic() - t0,
            cpu_s=(cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
            stats=stats,
        )

    def _plan(self, targets: Sequence[Target]) -> _Plan:
        """The requests of a sweep of *targets*, kept while the targets and what is known
        of the nodes stay the same (a sweep loop passes the same list every time)."""
        # the plan holds the list itself, so its id cannot be reused while cached; a list
        # changed in place must be passed as a new list (Collector does so)
        key = (id(targets), len(targets), self._caps_gen)
        if self._cached is not None and self._cached.key == key:
            return self._cached
        n = len(targets)
        lids: list[int] = []
        attrs: list[int] = []
        ports: list[int] = []
        main = np.full(n, -1, dtype=np.int64)  # request of each target's counters
        wait = np.full(n, -1, dtype=np.int64)  # its PortCounters, for XmitWait
        vl = np.full(n, -1, dtype=np.int64)  # its PortVLXmitWaitCounters
        caps = [self.caps.get(t.node_guid) for t in targets]
        for k, (tg, c) in enumerate(zip(targets, caps, strict=True)):
            if c is None:
                continue
            main[k] = len(lids)
            lids.append(tg.lid)
            ports.append(tg.port)
            if c.extended:
                attrs.append(pma.ATTR_PORT_COUNTERS_EXT)
                if self.xmit_wait and c.xmit_wait and not c.pce_xmit_wait:
                    wait[k] = len(lids)
                    lids.append(tg.lid)
                    ports.append(tg.port)
                    attrs.append(pma.ATTR_PORT_COUNTERS)
            else:
                attrs.append(pma.ATTR_PORT_COUNTERS)
                if tg.node_guid not in self._warned_32bit:
                    self._warned_32bit.add(tg.node_guid)
                    log.warning(
                        "%s: no PortCountersExtended; 32-bit PortCounters saturate quickly",
                        _where(tg),
                    )
            if self.vl_xmit_wait and c.vl_xmit_wait:
                vl[k] = len(lids)
                lids.append(tg.lid)
                ports.append(tg.port)
                attrs.append(pma.ATTR_PORT_VL_XMIT_WAIT)
        self._cached = _Plan(
            key=key,
            targets=targets,
            lids=np.array(lids, dtype=np.int64),
            attrs=np.array(attrs, dtype=np.int64),
            ports=np.array(ports, dtype=np.int64),
            main=main,
            wait=wait,
            vl=vl,
            node_guid=np.array([t.node_guid for t in targets], dtype=np.uint64),
            port=np.array([t.port for t in targets], dtype=np.uint8),
            lid=np.array([t.lid for t in targets], dtype=np.uint16),
            has_wait=np.array([c is not None and c.xmit_wait for c in caps], dtype=np.bool_),
            pce_wait=np.array([c is not None and c.pce_xmit_wait for c in caps], dtype=np.bool_),
        )
        return self._cached

    def _table(self, plan: _Plan, res: Result) -> pd.DataFrame:
        """Decode the replies in bulk into a sweep table, one row per target."""
        n = len(plan.main)
        main, wait, attrs = plan.main, plan.wait, plan.attrs
        errors = np.array(res.error, dtype=object)
        cols: dict[str, np.ndarray] = {
            c: np.zeros(n, dtype=np.uint64)
            for c in ("xmit_bytes", "rcv_bytes", "xmit_pkts", "rcv_pkts", "xmit_wait")
        }
        missing = {c: np.ones(n, dtype=bool) for c in cols}
        bits = np.zeros(n, dtype=np.uint8)
        error = np.full(n, "no ClassPortInfo from this node", dtype=object)
        time_s = np.full(n, np.nan)
        # rows with a data-counter request, and its attribute (none at all when no node
        # answered ClassPortInfo: then ``attrs`` is empty)
        asked = np.flatnonzero(main >= 0)
        asked_attr = attrs[main[asked]]
        for attr, width in ((pma.ATTR_PORT_COUNTERS_EXT, 64), (pma.ATTR_PORT_COUNTERS, 32)):
            rows = asked[asked_attr == attr]
            if not len(rows):
                continue
            idx = main[rows]
            recs = pma.decode(res.mads[idx].tobytes(), attr)
            why = pma.check_replies(recs, attr)
            why = np.where(errors[idx] != "", errors[idx], why)
            port_bad = recs["port_select"] != plan.port[rows]
            why = np.where((why == "") & port_bad, "reply for another port", why)
            good = why == ""
            error[rows] = why
            time_s[rows] = res.time_s[idx]
            bits[rows[good]] = width
            for col, field, scale in (
                ("xmit_bytes", "xmit_data", 4),
                ("rcv_bytes", "rcv_data", 4),
                ("xmit_pkts", "xmit_pkts", 1),
                ("rcv_pkts", "rcv_pkts", 1),
            ):
                v = recs[field].astype(np.uint64)
                if scale != 1:  # data counters count 4-octet words; keep saturation visible
                    v = np.where(v > _U64_MAX // np.uint64(scale), _U64_MAX, v * np.uint64(scale))
                cols[col][rows[good]] = v[good]
                missing[col][rows[good]] = False
            # a 32-bit fallback reply has XmitWait where CapMask bit 12 says so; PCE where
            # CapMask2 bit 1 does
            has = plan.has_wait if attr == pma.ATTR_PORT_COUNTERS else plan.pce_wait
            ok = good & has[rows]
            cols["xmit_wait"][rows[ok]] = recs["xmit_wait"][ok]
            missing["xmit_wait"][rows[ok]] = False
        rows = np.flatnonzero(wait >= 0)
        if len(rows):
            idx = wait[rows]
            recs = pma.decode(res.mads[idx].tobytes(), pma.ATTR_PORT_COUNTERS)
            why = np.where(
                errors[idx] != "", errors[idx], pma.check_replies(recs, pma.ATTR_PORT_COUNTERS)
            )
            good = (why == "") & (error[rows] == "")
            cols["xmit_wait"][rows[good]] = recs["xmit_wait"][good]
            missing["xmit_wait"][rows[good]] = False
            # the data counters of these rows stand; only XmitWait stays unknown
            lost = (why != "") & (error[rows] == "")
            for r, w in zip(rows[lost], why[lost], strict=True):
                log.warning(
                    "lid %d port %d: XmitWait (PortCounters): %s", plan.lid[r], plan.port[r], w
                )
        vl_cols = self._vl_columns(plan, res, errors, error) if self.vl_xmit_wait else {}
        # every column already has its sweep_dtypes() dtype: no astype copy of the frame
        return pd.DataFrame(
            {
                "node_guid": plan.node_guid,
                "port": plan.port,
                "lid": plan.lid,
                "time_s": time_s,
                **{c: pd.arrays.IntegerArray(v, missing[c]) for c, v in cols.items()},
                "counter_bits": bits,
                "error": pd.Series(error, dtype=object, copy=False),
                **vl_cols,
            },
            copy=False,
        )

    @staticmethod
    def _vl_columns(
        plan: _Plan, res: Result, errors: np.ndarray, error: np.ndarray
    ) -> dict[str, pd.arrays.IntegerArray]:
        """The ``vl_xmit_wait0..15`` columns, decoded in bulk: <NA> where the node has no
        such counters, the reply failed, or the row's data counters are in error.

        *errors* are the transport's per-request errors, *error* the rows' final errors.
        A failed VL reply leaves the row's ``error`` alone (one summary line is logged).
        """
        n = len(plan.vl)
        # one row per VL, so each column below is a contiguous slice
        values = np.zeros((VL_COUNT, n), dtype=np.uint64)
        missing = np.ones((VL_COUNT, n), dtype=bool)
        rows = np.flatnonzero(plan.vl >= 0)
        if len(rows):
            attr = pma.ATTR_PORT_VL_XMIT_WAIT
            idx = plan.vl[rows]
            recs = pma.decode(res.mads[idx].tobytes(), attr)
            why = np.where(errors[idx] != "", errors[idx], pma.check_replies(recs, attr))
            port_bad = recs["port_select"] != plan.port[rows]
            why = np.where((why == "") & port_bad, "reply for another port", why)
            data_ok = error[rows] == ""
            good = (why == "") & data_ok
            values[:, rows[good]] = recs["vl_xmit_wait"][good].T
            missing[:, rows[good]] = False
            lost = np.flatnonzero((why != "") & data_ok)
            if len(lost):
                r = rows[lost[0]]
                log.warning(
                    "PortVLXmitWaitCounters of %d ports not read, their per-VL columns are "
                    "empty (first: lid %d port %d: %s)",
                    len(lost),
                    plan.lid[r],
                    plan.port[r],
                    why[lost[0]],
                )
        return {
            c: pd.arrays.IntegerArray(values[v], missing[v]) for v, c in enumerate(VL_WAIT_COLUMNS)
        }


@dataclass(frozen=True)
class _Plan:
    """A sweep's requests (``lids``/``attrs``/``ports``), where each target's replies are
    (``main``, ``wait``, ``vl``: request index or -1), and per-target columns."""

    key: tuple[int, int, int]
    targets: Sequence[Target]
    lids: np.ndarray
    attrs: np.ndarray
    ports: np.ndarray
    main: np.ndarray
    wait: np.ndarray
    vl: np.ndarray
    node_guid: np.ndarray
    port: np.ndarray
    lid: np.ndarray
    has_wait: np.ndarray
    pce_wait: np.ndarray


def _where(tg: Target) -> str:
    return f"{tg.node_desc or f'0x{tg.node_guid:016x}'} port {tg.port} (lid {tg.lid})"


__all__ = ["NativeBackend", "NodeCaps", "Pipeline", "Request", "Result", "Transport"]
