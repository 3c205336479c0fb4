"""The QoS setup programmed on a lab's fabric, read back through OpenSM's SA.

The lab's fluid traffic model (:mod:`ibqos.lab.traffic`) shares links the way the lanes
programmed on the switches say, so it must know them.  It reads them from the fabric, never
from ibqos's files: what ibqos wrote only counts once OpenSM has programmed it.

- ``saquery SL2VL LID/IN/OUT``: the SL2VL table of one switch port pair;
- ``saquery VLAR LID/PORT/1`` and ``LID/PORT/3``: the low and the high VLArb tables
  (blocks 1 and 3: entries 0-31; ibsim's ports take 8, docs/design.md §8.5) of one switch port;
- ``smpquery portinfo LID PORT``, from the switch itself (so the SMP crosses no link):
  VLHighLimit and NeighborMTU of that port.  (ibsim ignores a Set of VLHighLimit, so it
  reads 0 whatever opensm.conf says, docs/design.md §8.5: 0 is what the simulated port does.)
- ``saquery PR --slid A --dlid B`` between the first two hosts of each job: the SL its MPI
  gets from the SA.  The lab re-asks at every read, as a job opening new connections would;
  ibqos keeps a job's SL for the job's life, so this differs from a job that caches its
  first PathRecord only in the seconds before ibqos gave the job its SL.

The port read is a leaf switch's uplink, where jobs meet (docs/design.md §1): SL2VL from
one of its host ports to that uplink, VLArb of the uplink.  ibqos and OpenSM program one
table for all switch external ports (``qos_swe_*``), so one port stands for all of them.

A reply is parsed with :mod:`ibqos.opensm.verify`'s parsers.  Reads are spaced (:class:`ReadBack`,
every ``interval_s``, default 2 s); a read that fails keeps the last setup and is logged
once.  A setup that differs from the one in force is taken only when the next read (at the
next poll, not an interval later) gives it again: the SA answers from OpenSM's cached
tables, which OpenSM zeroes while it reprograms a port (docs/design.md §6.2, "Diff-based"), and
the policy is re-parsed from scratch, so a read in the middle of a heavy sweep can see
all-zero SL2VL or VLArb tables, or SL 0 for every path, for a moment.  (Seen in the demo: a
read of ``SL2VL 0,0,..,0`` between two plans.)  Before the first read, OpenSM's built-in
defaults as programmed on an 8-VL port (:data:`OPENSM_DEFAULT`) stand in; they are what a
fresh lab reads back anyway.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ibqos.collect.portinfo import parse_portinfo
from ibqos.config.lanes import NUM_SLS, Entry
from ibqos.errors import IbqosError, LabError
from ibqos.fabric.topology import Port, Topology
from ibqos.opensm.verify import parse_path_sl, parse_rows
from ibqos.sim.qos import Arbitration

log = logging.getLogger(__name__)

#: Runs a diag (argv) attached to a node (None: OpenSM's host) and returns its stdout;
#: raises IbqosError when it fails.
Runner = Callable[[Sequence[str], str | None], str]

#: VLArbitrationTableRecord blocks (IBA 15.2.5.9): 1-2 low entries 0-31/32-63, 3-4 high.
LOW_BLOCK = 1
HIGH_BLOCK = 3
_HIGH_LIMIT = re.compile(r"^VLHighLimit:\.*(\d+)\s*$", re.M)


@dataclass(frozen=True)
class QosSetup:
    """What the switches were programmed with, and the SL each job gets.

    Attributes:
        sl_to_vl: VL of SL 0..15.
        vlarb_low, vlarb_high: ``(vl, weight)`` entries with a weight (weight-0 entries,
            which arbitration skips, are left out), weight in 64-byte units.
        high_limit: VLHighLimit.
        mtu: the port's NeighborMTU, bytes.
        job_sl: ``(job id, SL)`` of each job, sorted by id.
    """

    sl_to_vl: tuple[int, ...]
    vlarb_low: tuple[Entry, ...]
    vlarb_high: tuple[Entry, ...]
    high_limit: int = 0
    mtu: int = 2048
    job_sl: tuple[tuple[str, int], ...] = ()

    def arbitration(self) -> Arbitration:
        """The setup as the contention simulator takes it."""
        return Arbitration(
            dict(self.job_sl),
            self.sl_to_vl,
            self.vlarb_low,
            self.vlarb_high,
            self.high_limit,
            self.mtu,
            "read back",
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data for truth.json."""
        return {
            "sl2vl": list(self.sl_to_vl),
            "vlarb_low": [list(e) for e in self.vlarb_low],
            "vlarb_high": [list(e) for e in self.vlarb_high],
            "high_limit": self.high_limit,
            "mtu": self.mtu,
            "job_sl": dict(self.job_sl),
        }

    def describe(self) -> str:
        """One line for the log."""

        def entries(table: Sequence[Entry]) -> str:
            return ",".join(f"{vl}:{w}" for vl, w in table) or "-"

        sls = " ".join(f"{j}:SL{sl}" for j, sl in self.job_sl) or "-"
        return (
            f"SL2VL {','.join(map(str, self.sl_to_vl))}; VLArb low {entries(self.vlarb_low)}"
            f" high {entries(self.vlarb_high)} limit {self.high_limit}; jobs {sls}"
        )


#: OpenSM's built-in tables (docs/design.md §6.2: sl2vl 0..14,7, vlarb_high 0:4, vlarb_low
#: 0:0,1:4..14:4, high_limit 0) as programmed on ibsim's VL0-7 ports (VLs masked with 7,
#: 8 VLArb entries), every job on SL 0.
OPENSM_DEFAULT = QosSetup(
    sl_to_vl=tuple(sl % 8 for sl in range(NUM_SLS)),
    vlarb_low=tuple((vl, 4) for vl in range(1, 8)),
    vlarb_high=((0, 4),),
)


@dataclass(frozen=True)
class Probe:
    """Where the tables are read.

    Attributes:
        switch: node id of the switch (smpquery attaches there).
        lid: its LID (port 0).
        in_port, out_port: the SL2VL port pair (a host port and an uplink).
    """

    switch: str
    lid: int
    in_port: int
    out_port: int


def pick_probe(topo: Topology) -> Probe:
    """A leaf switch's uplink and one of its host ports (any two linked switch ports when
    the fabric has a single level).

    Raises:
        LabError: no switch has two linked ports with a LID.
    """
    levels = topo.switch_levels()
    fallback: Probe | None = None
    for sw in sorted(topo.switches(), key=lambda s: (levels.get(s.id, 0), s.id)):
        lid = topo.lids.get(Port(sw.id, 0))
        ports = list(topo.ports(sw.id))
        if lid is None or len(ports) < 2:
            continue
        down: list[int] = []
        up: list[int] = []
        for p in ports:
            peer = topo.peer(p)
            if peer is not None:
                (up if levels.get(peer.node, 0) > levels.get(sw.id, 0) else down).append(p.num)
        if up and down:
            return Probe(sw.id, lid, down[0], up[0])
        if fallback is None:
            fallback = Probe(sw.id, lid, ports[0].num, ports[1].num)
    if fallback is None:
        raise LabError("no switch with two linked ports to read the QoS tables from")
    return fallback


def parse_sl2vl(text: str) -> tuple[int, ...]:
    """The 16 VLs of a ``saquery SL2VL`` reply.

    Raises:
        IbqosError: the reply has no table.
    """
    vls = parse_rows(text, "VL")[:NUM_SLS]
    if len(vls) != NUM_SLS:
        raise IbqosError(f"saquery SL2VL: expected {NUM_SLS} VLs, got {len(vls)}")
    return tuple(vls)


def parse_vlarb(text: str) -> tuple[Entry, ...]:
    """The entries with a weight of a ``saquery VLAR`` reply, in table order.

    Raises:
        IbqosError: the reply has no table.
    """
    vls, weights = parse_rows(text, "VL"), parse_rows(text, "Weight")
    if not vls or len(vls) != len(weights):
        raise IbqosError("saquery VLAR: no VLArbitration table in the reply")
    return tuple((vl, w) for vl, w in zip(vls, weights, strict=True) if w > 0)


def parse_high_limit(text: str) -> int:
    """VLHighLimit of a ``smpquery portinfo`` reply.

    Raises:
        IbqosError: the reply has no VLHighLimit line.
    """
    m = _HIGH_LIMIT.search(text)
    if m is None:
        raise IbqosError("smpquery portinfo: no VLHighLimit in the reply")
    return int(m.group(1))


def read_tables(run: Runner, probe: Probe) -> QosSetup:
    """The port tables (no job SLs) as the fabric serves them now.

    Raises:
        IbqosError: a query failed or its reply could not be parsed.
    """
    sl2vl = parse_sl2vl(
        run(["saquery", "SL2VL", f"{probe.lid}/{probe.in_port}/{probe.out_port}"], None)
    )
    low = parse_vlarb(run(["saquery", "VLAR", f"{probe.lid}/{probe.out_port}/{LOW_BLOCK}"], None))
    high = parse_vlarb(run(["saquery", "VLAR", f"{probe.lid}/{probe.out_port}/{HIGH_BLOCK}"], None))
    argv = ["smpquery", "portinfo", str(probe.lid), str(probe.out_port)]
    text = run(argv, probe.switch)
    mtu = parse_portinfo(text, " ".join(argv)).neighbor_mtu
    return QosSetup(sl2vl, low, high, parse_high_limit(text), mtu)


def read_job_sl(run: Runner, slid: int, dlid: int) -> int:
    """The SL the SA serves on the path from LID *slid* to *dlid*.

    Raises:
        IbqosError: the query failed or the SA has no path.
    """
    return parse_path_sl(run(["saquery", "PR", "--slid", str(slid), "--dlid", str(dlid)], None))


class ReadBack:
    """Re-reads the setup every *interval_s* seconds and says when it changed.

    Args:
        run: runs the diags attached to the lab.
        probe: where the port tables are read.
        interval_s: seconds between two reads.
        clock: monotonic seconds.

    Attributes:
        setup: the setup in force (the last read, :data:`OPENSM_DEFAULT` before any).
        reads, failures: queries made and failed so far (one per table read, one per job).
    """

    def __init__(
        self,
        run: Runner,
        probe: Probe,
        interval_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run = run
        self.probe = probe
        self.interval_s = interval_s
        self.clock = clock
        self.setup = OPENSM_DEFAULT
        self.reads = 0
        self.failures = 0
        self._next_at: float | None = None
        self._pending: QosSetup | None = None  # read once, not confirmed yet
        self._failing: dict[str, str] = {}  # what -> last error, to warn once

    def poll(self, jobs: Mapping[str, tuple[int, int] | None], *, force: bool = False) -> bool:
        """Read again if it is time (or *force*); True when the setup in force changed
        (a new setup must be read twice in a row, see the module docstring).

        Args:
            jobs: running jobs: id -> (LID of its first host, LID of its second), or None
                for a job with a single host (it sends nothing: no SL is asked).
            force: read now (the job mix changed).
        """
        now = self.clock()
        if not force and self._next_at is not None and now < self._next_at:
            return False
        self._next_at = now + self.interval_s
        new = self.setup
        self.reads += 1
        try:
            tables = read_tables(self.run, self.probe)
        except IbqosError as err:
            self._failed("tables", f"reading the QoS tables failed, keeping the last ones: {err}")
        else:
            self._ok("tables")
            new = replace(tables, job_sl=new.job_sl)
        old_sl = dict(new.job_sl)
        job_sl: dict[str, int] = {}
        for jid, pair in jobs.items():
            if pair is None:
                continue
            self.reads += 1
            try:
                job_sl[jid] = read_job_sl(self.run, *pair)
            except IbqosError as err:
                self._failed(
                    f"job {jid}",
                    f"job {jid}: reading its PathRecord SL failed, keeping SL"
                    f" {old_sl.get(jid, 0)}: {err}",
                )
                if jid in old_sl:
                    job_sl[jid] = old_sl[jid]
            else:
                self._ok(f"job {jid}")
        for what in [w for w in self._failing if w.startswith("job ") and w[4:] not in jobs]:
            del self._failing[what]
        new = replace(new, job_sl=tuple(sorted(job_sl.items())))
        if new == self.setup:
            self._pending = None
            return False
        if new != self._pending:  # confirm it at the next poll
            self._pending = new
            self._next_at = now
            return False
        self._pending = None
        self.setup = new
        log.info("QoS read back from the fabric: %s", new.describe())
        return True

    def _failed(self, what: str, message: str) -> None:
        self.failures += 1
        if what not in self._failing:
            log.warning("%s", message)
        self._failing[what] = message

    def _ok(self, what: str) -> None:
        if self._failing.pop(what, None) is not None:
            log.info("%s: read again", what)
