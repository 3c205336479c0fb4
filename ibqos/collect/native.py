"""The native backend: PMA Gets through libibumad with many requests in flight.

One process, no fork per port: a sweep's requests go out through
:class:`~ibqos.collect.pipeline.Pipeline` (a sliding window of requests in flight) and its
replies are decoded in bulk into the sweep table (:mod:`ibqos.collect.native_table`).

Each node is probed once, on first sight, with ClassPortInfo (IBA 16.1.3.1): it says
whether PortCountersExtended (64-bit) is there, whether PortCounters has PortXmitWait and
whether PCE also carries it.

Per-SL data counters (PortXmitDataSL, PortRcvDataSL; :mod:`ibqos.collect.per_sl`) have no
capability bit, so with ``per_sl`` on, one port of each switch is asked for both, once,
on first sight, without retries: status 0x000C or no reply means not supported, and is
remembered, so a fabric without them (ibsim) pays one timeout per window of switches on
its first sweep and nothing after.  The switches that said no are asked again after a
fabric change (the set of swept ports changed).  Where both answer, every sweep reads both
for each port of the switch (two more Gets per port), and clears them when they pass
:func:`~ibqos.collect.per_sl.clear_words`.  Only switches are probed: a host port carries
one job, whose traffic its port counters already give exactly.

With ``vl_xmit_wait`` on, every node (switch or CA) is also asked once for
PortVLXmitWaitCounters (IBA 16.1.4, attribute 0x001C), which no capability bit announces
either.  A good reply adds one Get per port to every sweep, whose sixteen 16-bit counters
fill the ``vl_xmit_wait0..15`` columns.  An error status (0x000C on a PMA without it) means
not supported, for good; no reply is asked again after ``REPROBE_SWEEPS`` sweeps, since a
lost probe would otherwise hide a node's lanes until a restart.  Per-VL readings that fail
later leave only those columns empty: the row's data counters and ``error`` stand.

Bounds.  With *sweep_timeout_s*, a sweep (probes included) ends by then: requests still
unanswered fail their ports (``no reply before the sweep's time limit``; a probe cut short
counts as unanswered, so the node is asked again after ``REPROBE_SWEEPS`` sweeps).
Without it, a sweep where nothing answers takes about ``ceil(requests / window) x
(retries + 1) x timeout_s`` (up to twice that, see :mod:`ibqos.collect.pipeline`), plus
as much again for the probes of nodes seen for the first time.  Either way the sweep
calls the tool runner's waiter at least every half second, so a stop it requests ends
the sweep mid-way.  Per-port failures are logged at debug level; the collection loop
says in one line how many ports a sweep reached.
"""

from __future__ import annotations

import logging
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ibqos.collect.native_table import Plan, row_times, sweep_table
from ibqos.collect.per_sl import SlReadings, clear_words
from ibqos.collect.pipeline import (
    Pipeline,
    Request,
    Result,
    Transport,
    max_dgram_qlen,
    under_umad2sim,
)
from ibqos.collect.sweep import Sweep
from ibqos.fabric.targets import Target
from ibqos.mad import pma

log = logging.getLogger(__name__)

#: CounterSelect of a PortCounters Set that clears PortXmitData, PortRcvData, PortXmitPkts
#: and PortRcvPkts (bits 12-15, IBA 16.1.3.5), and none of the error counters
_PC_DATA = 0xF000

# Pipeline, Request, Result, Transport, max_dgram_qlen and under_umad2sim live in
# ibqos.collect.pipeline; this module's path keeps naming them
__all__ = [
    "REPROBE_SWEEPS",
    "NativeBackend",
    "NodeCaps",
]

#: sweeps between two tries of a node whose ClassPortInfo (or PortVLXmitWaitCounters
#: probe) did not answer
REPROBE_SWEEPS = 10


@dataclass(frozen=True)
class NodeCaps:
    """What a node's PMA supports (from ClassPortInfo, and probing per-SL counters).

    Attributes:
        cap_mask: PerfMgt ClassPortInfo.CapabilityMask.
        cap_mask2: CapabilityMask2 (27 bits).
        per_sl: PortXmitDataSL and PortRcvDataSL both answered (switches only are probed,
            and only with ``NativeBackend(per_sl=True)``).
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
        sweep_timeout_s: seconds a sweep may take, probes included (see the module
            docstring); None: no limit but the one the timeouts and retries make.
        per_sl: probe the switches for per-SL data counters and read them where found
            (``Sweep.per_sl``).
        interval_s: seconds between sweeps, for the level at which per-SL counters are
            cleared (:func:`~ibqos.collect.per_sl.clear_words`).
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
        sweep_timeout_s: float | None = None,
        per_sl: bool = True,
        interval_s: float = 10.0,
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
        self.sweep_timeout_s = sweep_timeout_s
        self.per_sl = per_sl
        self.interval_s = interval_s
        self._sl_due: set[int] = set()  # switch GUIDs to ask for per-SL counters again
        self._swept: Sequence[Target] | None = None  # the last targets swept
        self._swept_keys: frozenset[tuple[int, int]] = frozenset()
        self._deadline: float | None = None  # of the sweep under way (monotonic seconds)
        self.caps: dict[int, NodeCaps | None] = {}  # None: ClassPortInfo failed
        self._warned_32bit: set[int] = set()
        self._caps_gen = 0  # bumped when caps change: cached request plans go stale
        self._cached: Plan | None = None
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
        sl_again: dict[int, Target] = {}
        for tg in targets:
            if tg.node_guid in self._sl_due:
                sl_again.setdefault(tg.node_guid, tg)
            if tg.node_guid not in self.caps:
                first.setdefault(tg.node_guid, tg)
            elif self.caps[tg.node_guid] is None:
                if self._sweeps - self._failed_at.get(tg.node_guid, 0) >= REPROBE_SWEEPS:
                    first.setdefault(tg.node_guid, tg)
            elif self._vl_due and self._vl_due.get(tg.node_guid, self._sweeps + 1) <= self._sweeps:
                vl_again.setdefault(tg.node_guid, tg)
        self._sl_due.clear()
        if not first and not vl_again and not sl_again:
            return
        caps = self._probe_classes(list(first.values())) if first else {}
        if self.per_sl:
            answered = [tg for tg in first.values() if tg.node_guid in caps]
            self._probe_sl([*answered, *sl_again.values()], caps)
        if self.vl_xmit_wait:
            answered = [tg for tg in first.values() if tg.node_guid in caps]
            self._probe_vl([*answered, *vl_again.values()], caps)
        if caps:  # the request plan changes only when a node gains capabilities
            self.caps.update(caps)
            self._caps_gen += 1

    def _probe_classes(self, nodes: list[Target]) -> dict[int, NodeCaps]:
        """ClassPortInfo of *nodes*: the caps of those that answered (those that did not
        are recorded as failed)."""
        caps: dict[int, NodeCaps] = {}
        res = self.pipeline.run(
            [Request(tg.lid, pma.ATTR_CLASS_PORT_INFO, 0) for tg in nodes], self._deadline
        )
        recs = pma.decode(res.mads.tobytes(), pma.ATTR_CLASS_PORT_INFO)
        bad = pma.check_replies(recs, pma.ATTR_CLASS_PORT_INFO)
        for tg, rec, err, rerr in zip(nodes, recs, bad, res.error, strict=True):
            why = rerr or err
            if why:  # each of the node's ports says so in its row, summed up by the loop
                log.debug("%s: ClassPortInfo: %s", _where(tg), why)
                self.caps[tg.node_guid] = None
                self._failed_at[tg.node_guid] = self._sweeps
                continue
            caps[tg.node_guid] = NodeCaps(
                int(rec["cap_mask"]), int(rec["cap_mask2_resp_time"]) >> 5
            )
        return caps

    def _probe_sl(self, nodes: list[Target], caps: dict[int, NodeCaps]) -> None:
        """Ask one port of each switch among *nodes* for PortXmitDataSL and PortRcvDataSL,
        one try each; record in *caps* whether both answered (caps of nodes not in *caps*
        come from ``self.caps``).  Silence is an answer here (ibsim has no handler and
        never replies), so retries would only make the first sweep longer."""
        switches = [tg for tg in nodes if tg.is_switch]
        if not switches:
            return
        attrs = (pma.ATTR_PORT_XMIT_DATA_SL, pma.ATTR_PORT_RCV_DATA_SL)
        reqs = [Request(tg.lid, attr, tg.port) for attr in attrs for tg in switches]
        res = self.pipeline.run(reqs, self._deadline, retries=0)
        n = len(switches)
        ok = np.ones(n, dtype=bool)
        for k, attr in enumerate(attrs):
            part = slice(k * n, (k + 1) * n)
            bad = pma.check_replies(pma.decode(res.mads[part].tobytes(), attr), attr)
            ok &= (bad == "") & (np.array(res.error[part], dtype=object) == "")
        found = 0
        for tg, yes in zip(switches, ok.tolist(), strict=True):
            known = caps.get(tg.node_guid) or self.caps.get(tg.node_guid)
            if known is not None and known.per_sl != yes:
                caps[tg.node_guid] = replace(known, per_sl=yes)
            found += yes
        log.info(
            "per-SL data counters: %d of %d switches probed have them%s",
            found,
            n,
            "" if found else " (PortXmitDataSL/PortRcvDataSL unsupported or unanswered)",
        )

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
        res = self.pipeline.run([Request(tg.lid, attr, tg.port) for tg in nodes], self._deadline)
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
        supported, within *sweep_timeout_s* if set.

        Raises:
            CollectError: the MAD device refuses every send.
            BaseException: whatever the tool runner's waiter raises (StopRequested).
        """
        started, t0 = time.time(), time.monotonic()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        stats0 = dict(self.pipeline.stats)
        limit = self.sweep_timeout_s
        self._deadline = None if limit is None else t0 + limit
        try:
            self._note_fabric(targets)
            self.probe(targets)
            plan = self._plan(targets)
            res = self.pipeline.run_arrays(plan.lids, plan.attrs, plan.ports, self._deadline)
            per_sl = self._per_sl(plan, res) if len(plan.sl_rows) else None
            table = sweep_table(plan, res, self.vl_xmit_wait)
            cleared = self._clear_narrow(plan, table)  # within the sweep's time limit too
        finally:
            self._deadline = None  # a probe outside a sweep has no deadline
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        stats = {k: v - stats0.get(k, 0) for k, v in self.pipeline.stats.items()}
        stats["failed"] = int((table["error"] != "").sum())
        if log.isEnabledFor(logging.DEBUG):
            for tg, err in zip(targets, table["error"], strict=True):
                if err:
                    log.debug("%s: %s", _where(tg), err)
        return Sweep(
            targets=list(targets),
            table=table,
            backend=self.name,
            started_s=started,
            duration_s=time.monotonic() - t0,
            cpu_s=(cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
            stats=stats,
            per_sl=per_sl,
            mono_s=row_times(plan, res.mono_s),
            cleared_s=cleared,
        )

    def _note_fabric(self, targets: Sequence[Target]) -> None:
        """After a fabric change (the swept ports changed), ask the switches that had no
        per-SL counters again at the next probe."""
        if targets is self._swept:
            return  # the collection loop passes the same list until the fabric changes
        keys = frozenset((t.node_guid, t.port) for t in targets)
        if self._swept is not None and keys != self._swept_keys and self.per_sl:
            nodes = {t.node_guid for t in targets if t.is_switch}
            self._sl_due = {
                g for g, c in self.caps.items() if c is not None and not c.per_sl and g in nodes
            }
        self._swept, self._swept_keys = targets, keys

    def _per_sl(self, plan: Plan, res: Result) -> SlReadings:
        """The sweep's per-SL readings from its replies; then clear the counters that
        passed their level (:func:`~ibqos.collect.per_sl.clear_words`), one Set per port
        and direction, and note when each clear was answered."""
        rows, x, r = plan.sl_rows, plan.sl_xmit, plan.sl_rcv
        readings, whys = SlReadings.decode(
            plan.node_guid[rows],
            plan.port[rows].astype(np.int64),
            res.mads[x],
            [res.error[i] for i in x.tolist()],
            res.mono_s[x],
            res.mads[r],
            [res.error[i] for i in r.tolist()],
            res.mono_s[r],
        )
        lost = [w for w in whys if w]
        if lost:
            log.warning(
                "per-SL data counters of %d port(s) not read this sweep, their SLs have no "
                "rate (first: %s)",
                len(lost),
                lost[0],
            )
        capacity = np.array([plan.targets[i].capacity_bytes_per_s for i in rows.tolist()])
        clear_x, clear_r = readings.to_clear(clear_words(capacity, self.interval_s))
        reqs: list[Request] = []
        where: list[tuple[np.ndarray, int]] = []
        for attr, mask, cleared in (
            (pma.ATTR_PORT_XMIT_DATA_SL, clear_x, readings.xmit_cleared_s),
            (pma.ATTR_PORT_RCV_DATA_SL, clear_r, readings.rcv_cleared_s),
        ):
            for k in np.flatnonzero(mask).tolist():
                tg = plan.targets[int(rows[k])]
                reqs.append(Request(tg.lid, attr, tg.port, pma.DATA_SL_ALL))
                where.append((cleared, k))
        if reqs:
            done = self.pipeline.run(reqs, self._deadline)
            self.pipeline.stats["sl_clears"] = self.pipeline.stats.get("sl_clears", 0) + len(reqs)
            for j, attr in enumerate(req.attr for req in reqs):
                bad = pma.check_replies(pma.decode(done.mads[j].tobytes(), attr), attr)[0]
                cleared, k = where[j]
                if not (bad or done.error[j]):
                    cleared[k] = done.mono_s[j]  # the next delta counts from 0 from here
                else:  # not cleared: the next delta counts from the reading, as usual
                    log.debug(
                        "per-SL clear of %s failed: %s",
                        _where(plan.targets[int(rows[k])]),
                        done.error[j] or bad,
                    )
        return readings

    def _clear_narrow(self, plan: Plan, table: pd.DataFrame) -> np.ndarray | None:
        """Clear the 32-bit data and packet counters of the ports read through
        PortCounters (no PortCountersExtended) that passed their level
        (:func:`~ibqos.collect.per_sl.clear_words`, as for the per-SL counters), one Set
        per port, so that they never stick at their top.

        Returns:
            Per row, the monotonic time the Set's reply came (the next delta counts from
            0 from there); NaN where not cleared.  None when no port was due.
        """
        narrow = (table["counter_bits"] == 32).to_numpy(bool) & (table["error"] == "").to_numpy(
            bool
        )
        if not narrow.any():
            return None
        rows = np.flatnonzero(narrow)
        capacity = np.array([plan.targets[i].capacity_bytes_per_s for i in rows.tolist()])
        # bytes are words x 4; packets per second never exceed words per second
        limit = clear_words(capacity, self.interval_s)
        words = [
            table[col].to_numpy(np.uint64, na_value=0)[rows] // np.uint64(div)
            for col, div in (("xmit_bytes", 4), ("rcv_bytes", 4), ("xmit_pkts", 1), ("rcv_pkts", 1))
        ]
        due = rows[np.logical_or.reduce([w > limit for w in words])]
        if not len(due):
            return None
        reqs = [
            Request(plan.targets[i].lid, pma.ATTR_PORT_COUNTERS, plan.targets[i].port, _PC_DATA)
            for i in due.tolist()
        ]
        done = self.pipeline.run(reqs, self._deadline)
        stats = self.pipeline.stats
        stats["pc_clears"] = stats.get("pc_clears", 0) + len(reqs)
        cleared = np.full(len(table), np.nan)
        for j, i in enumerate(due.tolist()):
            attr = pma.ATTR_PORT_COUNTERS
            bad = pma.check_replies(pma.decode(done.mads[j].tobytes(), attr), attr)[0]
            if not (bad or done.error[j]):
                cleared[i] = done.mono_s[j]
            else:  # not cleared: the next delta counts from the reading, as usual
                log.debug(
                    "PortCounters clear of %s failed: %s",
                    _where(plan.targets[i]),
                    done.error[j] or bad,
                )
        return cleared

    def _plan(self, targets: Sequence[Target]) -> Plan:
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
        sl_rows: list[int] = []  # targets with per-SL counters, and their two requests
        sl_x: list[int] = []
        sl_r: list[int] = []
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
            if self.per_sl and c.per_sl:
                sl_rows.append(k)
                for attr, into in (
                    (pma.ATTR_PORT_XMIT_DATA_SL, sl_x),
                    (pma.ATTR_PORT_RCV_DATA_SL, sl_r),
                ):
                    into.append(len(lids))
                    lids.append(tg.lid)
                    ports.append(tg.port)
                    attrs.append(attr)
        self._cached = Plan(
            key=key,
            targets=targets,
            lids=np.array(lids, dtype=np.int64),
            attrs=np.array(attrs, dtype=np.int64),
            ports=np.array(ports, dtype=np.int64),
            main=main,
            wait=wait,
            vl=vl,
            sl_rows=np.array(sl_rows, dtype=np.int64),
            sl_xmit=np.array(sl_x, dtype=np.int64),
            sl_rcv=np.array(sl_r, dtype=np.int64),
            node_guid=np.array([t.node_guid for t in targets], dtype=np.uint64),
            port=np.array([t.port for t in targets], dtype=np.uint8),
            lid=np.array([t.lid for t in targets], dtype=np.uint16),
            has_wait=np.array([c is not None and c.xmit_wait for c in caps], dtype=np.bool_),
            pce_wait=np.array([c is not None and c.pce_xmit_wait for c in caps], dtype=np.bool_),
        )
        return self._cached


def _where(tg: Target) -> str:
    return f"{tg.node_desc or f'0x{tg.node_guid:016x}'} port {tg.port} (lid {tg.lid})"
