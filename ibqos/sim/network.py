"""The simulated network: a fat tree's ports, their capacities, and the routes flows take.

Routes come from forwarding tables, either OpenSM's (read from a lab, see
:mod:`ibqos.fabric.routes`) or computed here for an XGFT the way OpenSM's ftree/updn engines
spread destinations over the uplinks: D-mod-K (Zahavi), where a level-*i* switch sends
traffic for destination host *d* (0-based, in host order) up through its uplink number
``(d // (u_1 x .. x u_{i-1})) mod u_i``, *u_k* being the number of uplinks of a level-*k*
switch; traffic goes down as soon as the destination is in the switch's subtree.  Every
destination then has one root switch per up-path, and flows to different destinations
spread evenly over the uplinks.

A link is named by its transmitting port: the dense port index of
:class:`~ibqos.fabric.routes.Router`.  Capacities are bytes per second per direction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ibqos.attribute.patterns import traffic_matrix
from ibqos.errors import TopologyError
from ibqos.fabric.routes import Router
from ibqos.fabric.topology import Port, Topology
from ibqos.fabric.xgft import XgftSpec, build_xgft
from ibqos.jobs.model import Job

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Flows:
    """A job's flows while it communicates, one entry per (source, destination) pair.

    Attributes:
        src, dst: dense port index of each flow's source and destination CA port.
        dlid: the destination's LID (what the forwarding tables are indexed by).
        rate: bytes per second of each flow at the job's declared rate.
        src_host, dst_host: position of the two hosts in the job's node list.
    """

    src: IntArray
    dst: IntArray
    dlid: IntArray
    rate: FloatArray
    src_host: IntArray
    dst_host: IntArray


@dataclass
class Network:
    """A fabric with routes: what both contention models run on.

    Args:
        topo: the fabric, with LIDs of CA ports and of switches' port 0.
        lfts: forwarding tables, ``{switch LID: {destination LID: out port}}``.

    Attributes:
        router: walks flows over the tables; its ``ports`` order is the link order.
        capacity: bytes per second of each link (by transmitting port).
        level: fat-tree level of each link's transmitting node (0: a CA, 1: a leaf switch..).
        up: the link goes up the tree (towards a higher level).
        hosts: host name -> its CA port (the first rail: the sim models one rail per host).
    """

    topo: Topology
    lfts: dict[int, dict[int, int]]
    router: Router = field(init=False)
    capacity: FloatArray = field(init=False)
    level: IntArray = field(init=False)
    up: npt.NDArray[np.bool_] = field(init=False)
    hosts: dict[str, Port] = field(init=False)

    def __post_init__(self) -> None:
        self.router = Router(self.topo, self.lfts)
        ports = self.router.ports
        links = [self.topo.link_at(p) for p in ports]
        self.capacity = np.array([link.rate_bytes_per_s if link else 0.0 for link in links])
        levels = self.topo.switch_levels()
        self.level = np.array([levels.get(p.node, 0) for p in ports], dtype=np.int64)
        peer_level = []
        for p in ports:
            peer = self.topo.peer(p)
            peer_level.append(levels.get(peer.node, 0) if peer else 0)
        self.up = np.array(peer_level) > self.level
        self.hosts = {}
        for ca in self.topo.cas():
            first = next(self.topo.ports(ca.id), None)
            if first is not None:
                self.hosts.setdefault(ca.hostname, first)

    @property
    def links(self) -> int:
        """Number of links (directed, by transmitting port)."""
        return len(self.router.ports)

    def flows(self, job: Job) -> Flows:
        """The job's flows at its declared rate (its pattern's traffic matrix).

        Raises:
            TopologyError: a host of the job is not on the fabric.
        """
        missing = [h for h in job.nodes if h not in self.hosts]
        if missing:
            raise TopologyError(f"job {job.id}: host {missing[0]} is not on the fabric")
        m = traffic_matrix(job)
        s, d = np.nonzero(m)
        ports = [self.hosts[h] for h in job.nodes]
        index = np.array([self.router.port_index[p] for p in ports], dtype=np.int64)
        lids = np.array([self.topo.lids[p] for p in ports], dtype=np.int64)
        return Flows(index[s], index[d], lids[d], m[s, d], s.astype(np.int64), d.astype(np.int64))

    def load(self, flows: Flows) -> FloatArray:
        """Bytes per second the flows put on every link (by transmitting port)."""
        xmit, _ = self.router.route(flows.src, flows.dlid, flows.dst, flows.rate)
        return xmit

    def hops(self, flows: Flows) -> IntArray:
        """The links each flow crosses, in order, as a table padded with -1
        (:meth:`~ibqos.fabric.routes.Router.hops`)."""
        return self.router.hops(flows.src, flows.dlid, flows.dst)

    def paths(self, flows: Flows) -> list[list[int]]:
        """The links each flow crosses, in order (source CA port first)."""
        return self.router.paths(flows.src, flows.dlid, flows.dst)


def xgft_network(spec: XgftSpec, width: int = 4, speed: str = "EDR") -> Network:
    """An XGFT (as the lab builds it) with LIDs and D-mod-K routes computed here.

    LIDs: hosts 1..N in host order, then the OpenSM host, then the switches.
    """
    topo = build_xgft(spec, width, speed)
    cas = topo.cas()
    lid = 1
    for ca in cas:
        for p in topo.ports(ca.id):
            topo.lids[p] = lid
            lid += 1
    for sw in topo.switches():
        topo.lids[Port(sw.id, 0)] = lid
        lid += 1
    return Network(topo, dmodk_lfts(topo))


def dmodk_lfts(topo: Topology) -> dict[int, dict[int, int]]:
    """D-mod-K forwarding tables of a fat tree (see the module docstring).

    Destinations are the CA ports with LIDs, numbered in that order for the modulo.

    Raises:
        TopologyError: the switches' uplink counts differ within a level (not a fat tree
            this rule applies to), or a destination is unreachable downward.
    """
    levels = topo.switch_levels()
    top = max(levels.values(), default=0)
    comps = {lvl: topo.components(lvl, levels) for lvl in range(1, top + 1)}
    dests = [(p, lid) for p, lid in topo.lids.items() if topo.nodes[p.node].kind != "switch"]
    dests.sort(key=lambda item: item[1])
    # uplink count per level, and each switch's uplinks and downlinks (port, peer)
    uplinks: dict[str, list[int]] = {}
    downlinks: dict[str, list[tuple[int, Port]]] = {}
    counts: dict[int, set[int]] = {}
    for sw in topo.switches():
        lvl = levels[sw.id]
        ups, downs = [], []
        for p in topo.ports(sw.id):
            peer = topo.peer(p)
            assert peer is not None  # ports() yields connected ports only
            if levels.get(peer.node, 0) > lvl:
                ups.append(p.num)
            else:
                downs.append((p.num, peer))
        uplinks[sw.id], downlinks[sw.id] = ups, downs
        counts.setdefault(lvl, set()).add(len(ups))
    uneven = {lvl: c for lvl, c in counts.items() if len(c) > 1}
    if uneven:
        lvl, c = min(uneven.items())
        raise TopologyError(f"level-{lvl} switches have {sorted(c)} uplinks: D-mod-K needs one")
    up_count = {lvl: next(iter(c)) for lvl, c in counts.items()}
    stride = {1: 1}
    for lvl in range(2, top + 1):
        stride[lvl] = stride[lvl - 1] * max(up_count[lvl - 1], 1)
    tables: dict[int, dict[int, int]] = {}
    for sw in topo.switches():
        lvl = levels[sw.id]
        comp = comps[lvl]
        below = comps.get(lvl - 1)
        # the downlink towards each CA (leaves) or each lower subtree (upper switches)
        down: dict[object, int] = {}
        for num, peer in downlinks[sw.id]:
            down[peer if below is None else below[peer.node]] = num
        table: dict[int, int] = {}
        for d, (dport, dlid) in enumerate(dests):
            if comp[dport.node] == comp[sw.id]:
                out = down.get(dport if below is None else below[dport.node])
                if out is None:
                    raise TopologyError(f"switch {sw.desc}: no way down to LID {dlid}")
                table[dlid] = out
            elif uplinks[sw.id]:
                ups = uplinks[sw.id]
                table[dlid] = ups[(d // stride[lvl]) % len(ups)]
        tables[topo.lids[Port(sw.id, 0)]] = table
    return tables
