"""OpenSM's unicast routes, read from its LFT dump, and flows walked over them.

With the ROUTING log flag active for its dump module, OpenSM writes
``opensm-lfts.dump`` into ``dump_files_dir`` after every heavy sweep: for each switch, the
output port of every destination LID, i.e. the tables it programmed.  (``saquery LFTR``
would give the same records through the SA, but under umad2sim only the first segment of
an RMPP reply arrives, so it returns two records.)  Flows routed here take the fabric's
real paths.
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from ibqos.errors import LabError
from ibqos.fabric.topology import Port, Topology

_HEADER = re.compile(r"^Unicast lids \[0-(\d+)\] of switch Lid (\d+) guid (0x[0-9a-fA-F]+)")
_ENTRY = re.compile(r"^0x([0-9a-fA-F]+)\s+(\d+)\b")
_FOOTER = re.compile(r"^\d+ lids dumped$")

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def parse_lft_dump(text: str, source: str = "opensm-lfts.dump") -> dict[int, dict[int, int]]:
    """Parse OpenSM's ``opensm-lfts.dump`` into ``{switch LID: {destination LID: port}}``.

    Destinations without a route are absent (OpenSM leaves them out of the dump).
    """
    tables: dict[int, dict[int, int]] = {}
    current: dict[int, int] | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if m := _HEADER.match(line):
            current = tables.setdefault(int(m.group(2)), {})
        elif m := _ENTRY.match(line):
            if current is None:
                raise LabError(f"{source}:{lineno}: LFT entry before any switch header")
            current[int(m.group(1), 16)] = int(m.group(2))
        elif line.strip() and not _FOOTER.match(line):
            raise LabError(f"{source}:{lineno}: cannot parse {line.strip()[:60]!r}")
    return tables


class Router:
    """Walks flows hop by hop over the LFTs, all flows of a job at once (numpy).

    Every connected port of the fabric gets a dense index (``port_index``); loads are
    arrays over those indices.

    Args:
        topo: the fabric, with LIDs of switches (port 0) and CA ports.
        lfts: ``{switch LID: {destination LID: out port}}``.
    """

    def __init__(self, topo: Topology, lfts: dict[int, dict[int, int]]) -> None:
        self.topo = topo
        self.ports: list[Port] = [p for nid in topo.nodes for p in topo.ports(nid)]
        self.port_index = {p: i for i, p in enumerate(self.ports)}
        switches = topo.switches()
        self._sw_index = {s.id: i for i, s in enumerate(switches)}
        max_lid = max(topo.lids.values(), default=0)
        max_port = max((s.nports for s in switches), default=0)
        # lft[switch, dlid] -> out port (0 = none); hop[switch, port] -> dense port index.
        self._lft = np.zeros((len(switches), max_lid + 1), dtype=np.int64)
        self._hop = np.full((len(switches), max_port + 1), -1, dtype=np.int64)
        for sw in switches:
            i = self._sw_index[sw.id]
            lid = topo.lids.get(Port(sw.id, 0))
            if lid is None or lid not in lfts:
                raise LabError(f"no forwarding table for switch {sw.id} ({sw.desc})")
            for dlid, port in lfts[lid].items():
                if dlid <= max_lid:
                    self._lft[i, dlid] = port
            for p in topo.ports(sw.id):
                self._hop[i, p.num] = self.port_index[p]
        n = len(self.ports)
        self._peer = np.array([self.port_index[topo.peer(p) or p] for p in self.ports])
        # switch index of each port's node, -1 for CA ports
        self._node_sw = np.array([self._sw_index.get(p.node, -1) for p in self.ports])
        self._n = n

    def route(
        self, src: IntArray, dlid: IntArray, dst: IntArray, weight: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """Load that flows put on every port, per direction.

        Args:
            src: dense index of each flow's source CA port.
            dlid: LID of each flow's destination port.
            dst: dense index of each flow's destination CA port (checked on arrival).
            weight: bytes per second of each flow.

        Returns:
            (xmit, rcv): bytes per second leaving and entering each port.

        Raises:
            LabError: a flow has no route or loops.
        """
        xmit: FloatArray = np.bincount(src, weights=weight, minlength=self._n).astype(float)
        at = self._peer[src]  # ingress port of the first switch
        rcv: FloatArray = np.bincount(at, weights=weight, minlength=self._n).astype(float)
        live = np.arange(len(src))
        for _ in range(64):
            sw = self._node_sw[at[live]]
            arrived = self._arrived(sw, live, at, src, dlid, dst)
            if arrived.any():
                live = live[~arrived]
                sw = sw[~arrived]
            if live.size == 0:
                return xmit, rcv
            out = self._lft[sw, dlid[live]]
            if (out == 0).any():
                k = int(live[np.argmax(out == 0)])
                self._fail(int(src[k]), int(dlid[k]), "has no route")
            egress = self._hop[sw, out]
            if (egress < 0).any():
                k = int(live[np.argmax(egress < 0)])
                self._fail(int(src[k]), int(dlid[k]), "leaves by an unconnected port")
            xmit += np.bincount(egress, weights=weight[live], minlength=self._n)
            at[live] = self._peer[egress]
            rcv += np.bincount(at[live], weights=weight[live], minlength=self._n)
        k = int(live[0])
        self._fail(int(src[k]), int(dlid[k]), "loops (more than 64 hops)")
        raise AssertionError("unreachable")

    def paths(self, src: IntArray, dlid: IntArray, dst: IntArray) -> list[list[int]]:
        """The links each flow crosses, in order: dense indices of the transmitting ports,
        the source CA port first.

        Raises:
            LabError: a flow has no route or loops.
        """
        return [[int(x) for x in row if x >= 0] for row in self.hops(src, dlid, dst)]

    def hops(self, src: IntArray, dlid: IntArray, dst: IntArray) -> IntArray:
        """:meth:`paths` as a table: row *f* holds flow *f*'s links in order, then -1s.

        Raises:
            LabError: a flow has no route or loops.
        """
        hops: list[IntArray] = [src.copy()]
        at = self._peer[src]
        live = np.arange(len(src))
        for _ in range(64):
            sw = self._node_sw[at[live]]
            arrived = self._arrived(sw, live, at, src, dlid, dst)
            if arrived.all():
                break
            out = self._lft[np.maximum(sw, 0), dlid[live]]
            egress = np.where(sw < 0, -1, self._hop[np.maximum(sw, 0), out])
            missing = (sw >= 0) & ((out == 0) | (egress < 0))
            if missing.any():
                k = int(live[np.argmax(missing)])
                self._fail(int(src[k]), int(dlid[k]), "has no route")
            step = np.full(len(src), -1, dtype=np.int64)
            step[live] = egress
            hops.append(step)
            moving = live[egress >= 0]
            at[moving] = self._peer[egress[egress >= 0]]
            live = moving
        else:
            self._fail(int(src[int(live[0])]), int(dlid[int(live[0])]), "loops (more than 64 hops)")
        table: IntArray = np.stack(hops, axis=1)
        return table

    def _arrived(
        self,
        sw: IntArray,
        live: IntArray,
        at: IntArray,
        src: IntArray,
        dlid: IntArray,
        dst: IntArray,
    ) -> npt.NDArray[np.bool_]:
        """Which live flows reached a CA (*sw* < 0), checking it is their destination."""
        arrived = sw < 0
        bad = live[arrived][at[live][arrived] != dst[live][arrived]]
        if bad.size:
            self._fail(int(src[bad[0]]), int(dlid[bad[0]]), "ends at the wrong port")
        return arrived

    def _fail(self, src: int, dlid: int, what: str) -> None:
        raise LabError(f"flow from {self.ports[src]} to LID {dlid} {what} in OpenSM's tables")
