"""Fabric topology: nodes, ports and links, read from and written as ibnetdiscover text.

The ibnetdiscover format is what ``ibnetdiscover`` prints and what ibsim loads as its net
file (docs/design.md §7.5 and §8.2), so one parser serves recorded real fabrics, files an
admin hands us and the fabrics the lab generates.  A record looks like::

    switchguid=0x200003(200003)
    Switch	4 "S-0000000000200003"		# "leaf-2" base port 0 lid 7 lmc 0
    [1]	"H-0000000000100004"[1](100005) 		# "cn0003 mlx5_0" lid 8 4xEDR

    caguid=0x100004
    Ca	1 "H-0000000000100004"		# "cn0003 mlx5_0"
    [1](100005) 	"S-0000000000200003"[1]		# lid 8 lmc 0 "leaf-2" lid 7 4xEDR

Levels follow the design: leaf switches (those with CA ports) are switch level 1, the
switches above them level 2, and so on; link level 0 is a host link, link level *l* >= 1 the
uplinks of level-*l* switches.

What the parser accepts besides the plain records: the ``-g`` port suffix ``[ext N]`` and its
chassis lines, the ``-f`` suffix ``s=.. w=.. v=..``, the port labels ibdiagnet writes in its
``ibdiagnet2.ibnetdiscover`` (``[1](1/1/1)`` on a switch, ``[1](B9D0F0/0/0/1)(guid)`` on a
CA: a parenthesised label holding a ``/``), records whose tabs were lost (``Switch41
"S-..."#``, as a terminal log gives them), the link types infiniband-diags prints (widths 1x,
2x, 4x, 8x, 12x; speeds SDR ... NDR, FDR10, and XDR), and its unknown-value marks ``??``
(width) and ``???`` (speed).  ``ibnetdiscover -p`` (a ports list) is another layout, read by
:mod:`ibqos.fabric.portlist`.

SHARP aggregation nodes.  NVIDIA Quantum switches carry a CA on an internal port (the port
past the front-panel ones: 41 on a 40-port Quantum, 65 on a 64-port Quantum-2) that runs the
switch's SHARP reductions.  It is no host: :meth:`Topology.cas` leaves it out, so it makes
no switch a leaf and belongs to no job.  A CA is taken for an aggregation node when its
NodeDescription holds "Aggregation Node" (the firmware's ``Mellanox Technologies Aggregation
Node``), or its device id is 0xcf09 (the aggregation node's ``devid``), or its system image
GUID is that of the switch it is cabled to (a CA inside the switch's own system).  The port
count in the dump includes the internal port (``Switch 41``), so the port number alone
cannot tell it.

Strict or tolerant.  By default a line it cannot read raises.  With ``strict=False`` (what
:mod:`ibqos.fabric.model` uses on discovered fabrics) such a line (say, an ``ibwarn:`` line from
stderr saved into the file), a port line it cannot read, or a link type it has no rate for
is logged as a warning naming the file, line and node record, and skipped; the link type is
then taken from the far end's line.  In both modes what breaks the structure raises: a node
header it cannot read, a port line outside a record, a link to an unknown node or port, a
port cabled twice, and a file of which most port lines cannot be read (a layout this parser
does not know: skipping them would leave a fabric without links).
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from ibqos.errors import TopologyError
from ibqos.fabric.hostnames import is_vendor_default

log = logging.getLogger(__name__)

NodeKind = Literal["switch", "ca", "router"]

#: Data rate of one lane in bits per second, after line encoding (8b/10b up to QDR,
#: 64b/66b from FDR; FDR10 is 10.3125 Gb/s 64b/66b).  Source: IBA vol. 2, ch. 5-6.
LANE_DATA_BITS_PER_S: dict[str, float] = {
    "SDR": 2.0e9,
    "DDR": 4.0e9,
    "QDR": 8.0e9,
    "FDR10": 10.0e9,
    "FDR": 14.0625e9 * 64 / 66,
    "EDR": 25.0e9,
    "HDR": 50.0e9,
    "NDR": 100.0e9,
    "XDR": 200.0e9,
}
WIDTHS = (1, 2, 4, 8, 12)

_KIND_BY_WORD: dict[str, NodeKind] = {
    "switch": "switch",
    "ca": "ca",
    "hca": "ca",
    "rt": "router",
}
_WORD_BY_KIND = {"switch": "Switch", "ca": "Ca", "router": "Rt"}
_PREFIX_BY_KIND = {"switch": "S", "ca": "H", "router": "R"}

_GUID_LINE = re.compile(r"^(switchguid|caguid|hcaguids?|rtguid)\s*=\s*(0x[0-9a-fA-F]+|\d+)")
_ID_LINE = re.compile(r"^(devid|sysimgguid)\s*=\s*(0x[0-9a-fA-F]+|\d+)")
# The description is matched greedily up to the last quote: a NodeDescription may itself
# hold a quote, and nothing after it in the header does.  No space is needed after the
# word: a terminal log of ibnetdiscover loses its tabs ("Switch41").
_NODE_LINE = re.compile(
    r'^(Switch|Ca|Hca|Rt)\s*(\d+)\s*"([^"]+)"\s*(?:#\s*"(.*)"(.*))?$', re.IGNORECASE
)
_NODE_WORD = re.compile(r"^(Switch|Ca|Hca|Rt)(\s|\d)", re.IGNORECASE)
# ibnetdiscover -g: chassis headers and the like, which start no node record
_GROUP_LINE = re.compile(r"^(Non-Chassis Nodes|Chassis \d+|Hostname:)", re.IGNORECASE)
# ibdiagnet's port label after a port number: "(1/1/1)", "(B9D0F0/0/0/1)"
_LABEL = r"(?:\([^()\s\"]*/[^()\s\"]*\))?"
# [port][ext N](label)(port guid) "remote id"[port][ext N](label) (remote guid) # comment
_PORT_LINE = re.compile(
    rf"^\[(\d+)\](?:\[ext \d+\])?{_LABEL}(?:\(([0-9a-fA-F]+)\))?\s*"
    rf'"([^"]+)"\[(\d+)\](?:\[ext \d+\])?{_LABEL}(?:\s*\(([0-9a-fA-F]+)\))?\s*(?:#(.*))?$'
)
# infiniband-diags prints "??" for a width and "???" for a speed it has no name for.
_LINK_TYPE = re.compile(r"(?<!\S)(\d+x|\?\?)([A-Z][A-Z0-9]*|\?\?\?)(?!\S)")
_OWN_LID = re.compile(r"^\s*lid\s+(\d+)")
_SWITCH_LID = re.compile(r"\blid\s+(\d+)")
#: Link type of a port line without one: what ibsim assumes (4x, SDR).
DEFAULT_LINK_TYPE = (4, "SDR")
_MAX_LOGGED = 10  # unreadable lines logged one by one; the rest are counted
#: NodeInfo DeviceID of a SHARP aggregation node (the CA inside a Quantum switch)
AGGREGATION_DEVID = 0xCF09
_AGGREGATION_DESC = re.compile(r"\bAggregation\s+Node\b", re.IGNORECASE)


def link_rate_bytes_per_s(width: int, speed: str) -> float:
    """Data capacity of one direction of a link, in bytes per second.

    Args:
        width: number of lanes (1, 2, 4, 8 or 12).
        speed: lane speed name ("SDR" ... "NDR").
    """
    return width * LANE_DATA_BITS_PER_S[speed] / 8


@dataclass(frozen=True, order=True)
class Port:
    """One port of a node, by net-file node id and port number."""

    node: str
    num: int

    def __str__(self) -> str:
        return f'"{self.node}"[{self.num}]'


@dataclass(frozen=True)
class Node:
    """A switch, channel adapter or router.

    Attributes:
        id: the net-file node id (ibnetdiscover's quoted id); ibsim commands use it.
        kind: "switch", "ca" or "router".
        nports: number of external ports.
        desc: NodeDescription.
        guid: node GUID, if known.
        sysimgguid: system image GUID (``sysimgguid=``), if known: the nodes of one
            system (a switch and its aggregation node) share it.
        devid: NodeInfo DeviceID (``devid=``), if known.
    """

    id: str
    kind: NodeKind
    nports: int
    desc: str
    guid: int | None = None
    sysimgguid: int | None = None
    devid: int | None = None

    @property
    def hostname(self) -> str:
        """The host name a scheduler uses for this node: the first word of its description
        (the node id when the description is a vendor default, which names no host)."""
        words = self.desc.split()
        return words[0] if words and not is_vendor_default(self.desc) else self.id


@dataclass(frozen=True)
class Link:
    """A cable between two ports, with its negotiated width (lanes) and lane speed."""

    a: Port
    b: Port
    width: int = 4
    speed: str = "EDR"

    @property
    def rate_bytes_per_s(self) -> float:
        """Capacity of each direction in bytes per second."""
        return link_rate_bytes_per_s(self.width, self.speed)


@dataclass
class Topology:
    """Nodes and links of one fabric; build it, then treat it as read-only.

    Attributes:
        nodes: by node id, in file order.
        links: every link once.
        lids: LID of each CA port and of each switch's port 0, where known.
        port_guids: GUID of each CA port (switch ports share the node GUID).
        warnings: what the parser skipped, one line each (also logged).
    """

    nodes: dict[str, Node] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    lids: dict[Port, int] = field(default_factory=dict)
    port_guids: dict[Port, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    _peer: dict[Port, tuple[Port, Link]] = field(default_factory=dict, repr=False)

    def add_node(self, node: Node) -> None:
        if node.id in self.nodes:
            raise TopologyError(f"node {node.id!r} is defined twice")
        self.nodes[node.id] = node

    def add_link(self, link: Link) -> None:
        for end in (link.a, link.b):
            if end.node not in self.nodes:
                raise TopologyError(f"link {link.a} - {link.b} names unknown node {end.node!r}")
            if not 1 <= end.num <= self.nodes[end.node].nports:
                raise TopologyError(f"link {link.a} - {link.b}: no port {end.num} on {end.node}")
            if end in self._peer:
                raise TopologyError(f"port {end} is cabled twice")
        self.links.append(link)
        self._peer[link.a] = (link.b, link)
        self._peer[link.b] = (link.a, link)

    def peer(self, port: Port) -> Port | None:
        """The port at the other end of the cable, or None for an unconnected port."""
        hit = self._peer.get(port)
        return hit[0] if hit else None

    def link_at(self, port: Port) -> Link | None:
        hit = self._peer.get(port)
        return hit[1] if hit else None

    def switches(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind == "switch"]

    def cas(self) -> list[Node]:
        """The channel adapters of hosts: every CA but the SHARP aggregation nodes."""
        return [n for n in self.nodes.values() if n.kind == "ca" and not self.is_aggregation(n)]

    def aggregation_nodes(self) -> list[Node]:
        """The SHARP aggregation nodes (CAs inside switches; see the module docstring)."""
        return [n for n in self.nodes.values() if self.is_aggregation(n)]

    def is_aggregation(self, node: Node) -> bool:
        """True for a SHARP aggregation node: a switch-internal CA, not a host."""
        if node.kind != "ca":
            return False
        if node.devid == AGGREGATION_DEVID or _AGGREGATION_DESC.search(node.desc):
            return True
        if node.sysimgguid is None:
            return False
        return any(
            self.nodes[p.node].kind == "switch" and self.nodes[p.node].sysimgguid == node.sysimgguid
            for p in self._peers_of(node.id)
        )

    def is_endpoint(self, node_id: str) -> bool:
        """True for a host CA or a router: what makes a switch a leaf."""
        node = self.nodes[node_id]
        return node.kind != "switch" and not self.is_aggregation(node)

    def ports(self, node_id: str) -> Iterator[Port]:
        """Connected ports of a node, in port order."""
        for num in range(1, self.nodes[node_id].nports + 1):
            p = Port(node_id, num)
            if p in self._peer:
                yield p

    def port_guid(self, port: Port) -> int | None:
        node = self.nodes[port.node]
        if node.kind == "switch":
            return node.guid
        return self.port_guids.get(port)

    def switch_levels(self) -> dict[str, int]:
        """Fat-tree level of every switch: 1 for leaves (switches with host CA or router
        ports; an aggregation node makes no leaf), then upward.

        Raises:
            TopologyError: a switch is reachable from no leaf.
        """
        level: dict[str, int] = {}
        queue: deque[str] = deque()
        for sw in self.switches():
            if any(self.is_endpoint(p.node) for p in self._peers_of(sw.id)):
                level[sw.id] = 1
                queue.append(sw.id)
        while queue:
            sid = queue.popleft()
            for p in self._peers_of(sid):
                if self.nodes[p.node].kind == "switch" and p.node not in level:
                    level[p.node] = level[sid] + 1
                    queue.append(p.node)
        lost = [s.id for s in self.switches() if s.id not in level]
        if lost:
            raise TopologyError(f"switch {lost[0]} is connected to no leaf switch")
        return level

    def subtrees(self, level: int, levels: dict[str, int] | None = None) -> dict[str, int]:
        """Level-*level* subtree of every CA: an id shared by the CAs that reach each
        other through switches of level <= *level* only.  Traffic between CAs in different
        subtrees crosses the uplinks of level *level*.
        """
        comp = self.components(level, levels)
        return {c.id: comp[c.id] for c in self.cas()}

    def components(self, level: int, levels: dict[str, int] | None = None) -> dict[str, int]:
        """Level-*level* subtree id of every node except the switches above *level*: the
        ids :meth:`subtrees` gives the CAs, also given to the switches of levels 1..*level*
        (so a level-*level* switch's uplinks can be summed per subtree).
        """
        levels = self.switch_levels() if levels is None else levels
        comp: dict[str, int] = {}
        next_id = 0
        for start in self.nodes:
            if start in comp or (start in levels and levels[start] > level):
                continue
            comp[start] = next_id
            queue = deque([start])
            while queue:
                nid = queue.popleft()
                for p in self._peers_of(nid):
                    if p.node in comp or levels.get(p.node, 0) > level:
                        continue
                    comp[p.node] = next_id
                    queue.append(p.node)
            next_id += 1
        return comp

    def _peers_of(self, node_id: str) -> Iterator[Port]:
        for p in self.ports(node_id):
            yield self._peer[p][0]


def parse_ibnetdiscover(text: str, source: str, *, strict: bool = True) -> Topology:
    """Read ibnetdiscover output (or an ibsim net file in that format).

    Args:
        text: the file contents.
        source: name of the input, used in messages.
        strict: raise on a line it cannot read.  If False, skip it with a warning (logged,
            and kept in ``Topology.warnings``) naming ``source:line`` and its node record.

    Raises:
        TopologyError: naming ``source:line`` and what is wrong (see the module docstring
            for what raises even when not *strict*).
    """
    parser = _Parser(source, strict)
    for lineno, raw in enumerate(text.splitlines(), 1):
        parser.line(lineno, raw.strip())
    topo = parser.topo
    if not topo.nodes:
        raise TopologyError(f"{source}: no nodes found")
    check_port_lines(source, parser.port_lines, parser.bad_ports)
    link_port_lines(topo, parser.ends, source)
    if len(topo.warnings) > _MAX_LOGGED:
        log.warning("%s: %d more lines skipped", source, len(topo.warnings) - _MAX_LOGGED)
    return topo


def check_port_lines(source: str, total: int, bad: list[tuple[int, str]]) -> None:
    """Refuse a file of which more than half the *total* port lines are *bad* (line number,
    text): skipping suits a stray line, but then the layout is one the parser does not know,
    and what is left would be a fabric without links.

    Raises:
        TopologyError: naming *source*, the count and the first bad line.
    """
    if bad and 2 * len(bad) > total:
        lineno, line = bad[0]
        raise TopologyError(
            f"{source}: parsing failed: {len(bad)} of {total} port lines cannot be read "
            f"(first at line {lineno}: {line[:60]!r}); not an ibnetdiscover layout ibqos reads"
        )


@dataclass
class PortLine:
    """One port line: a link as seen from its *local* end.

    ``link_type`` is (width, speed), None when the line names none, or the text of a type
    the line names but that is unknown (then the far end's line must tell).
    """

    lineno: int
    local: Port
    remote: Port
    link_type: tuple[int, str] | str | None


class _Parser:
    """Line-by-line state of :func:`parse_ibnetdiscover`."""

    def __init__(self, source: str, strict: bool) -> None:
        self.source = source
        self.strict = strict
        self.topo = Topology()
        self.ends: list[PortLine] = []
        self.pending_guid: int | None = None
        self.pending_ids: dict[str, int] = {}  # devid, sysimgguid of the next node
        self.current: Node | None = None
        self.port_lines = 0
        self.bad_ports: list[tuple[int, str]] = []

    def line(self, lineno: int, line: str) -> None:
        where = f"{self.source}:{lineno}"
        if not line or line.startswith("#"):
            self.current = None if not line else self.current
        elif m := _GUID_LINE.match(line):
            self.pending_guid = int(m.group(2), 0)
        elif m := _ID_LINE.match(line):
            self.pending_ids[m.group(1)] = int(m.group(2), 0)
        elif _GROUP_LINE.match(line):
            self.current = None  # ibnetdiscover -g: a chassis header ends the record
        elif m := _NODE_LINE.match(line):
            self._node(m, where)
        elif _NODE_WORD.match(line):
            raise TopologyError(f"{where}: cannot parse node header: {line[:60]!r}")
        elif line.startswith("["):
            self._port(line, lineno, where)
        elif "=" in line.split()[0]:
            pass  # vendid=, devid=, sysimgguid=, width= and other global settings
        else:
            self._skip(where, "cannot parse line", line)

    def _node(self, m: re.Match[str], where: str) -> None:
        kind = _KIND_BY_WORD[m.group(1).lower()]
        nid = m.group(3)
        guid = self.pending_guid if self.pending_guid is not None else _guid_from_id(nid)
        desc = m.group(4) if m.group(4) is not None else nid
        ids = self.pending_ids
        self.current = Node(
            nid, kind, int(m.group(2)), desc, guid, ids.get("sysimgguid"), ids.get("devid")
        )
        try:
            self.topo.add_node(self.current)
        except TopologyError as err:
            raise TopologyError(f"{where}: {err}") from None
        rest = m.group(5) or ""
        if kind == "switch" and (lm := _SWITCH_LID.search(rest)):
            self.topo.lids[Port(nid, 0)] = int(lm.group(1))
        self.pending_guid = None
        self.pending_ids = {}

    def _port(self, line: str, lineno: int, where: str) -> None:
        m = _PORT_LINE.match(line)
        current = self.current
        if current is None:
            what = "port line outside a node record" if m else "cannot parse port line"
            raise TopologyError(f"{where}: {what}: {line[:60]!r}")
        self.port_lines += 1
        if m is None:
            # Only this port is lost; the far end's line may still describe the link.
            self.bad_ports.append((lineno, line))
            self._skip(where, "cannot parse port line", line)
            return
        local = Port(current.id, int(m.group(1)))
        if not 1 <= local.num <= current.nports:
            raise TopologyError(f"{where}: {current.id} has no port {local.num}")
        comment = m.group(6) or ""
        if current.kind != "switch":
            if m.group(2) is not None:
                self.topo.port_guids[local] = int(m.group(2), 16)
            elif current.guid is not None:
                self.topo.port_guids[local] = current.guid + local.num
            if lm := _OWN_LID.match(comment):
                self.topo.lids[local] = int(lm.group(1))
        link_type = _link_type(comment)
        if isinstance(link_type, str):
            self._skip(where, f"unknown link type {link_type!r} of {local}", "")
        self.ends.append(PortLine(lineno, local, Port(m.group(3), int(m.group(4))), link_type))

    def _skip(self, where: str, what: str, line: str) -> None:
        if self.strict:
            raise TopologyError(f"{where}: {what}" + (f": {line[:60]!r}" if line else ""))
        node = self.current
        msg = f"{where}: {what}"
        if node is not None:
            msg += f" in the record of {node.id} ({node.desc!r})"
        msg += f", skipped: {line[:80]!r}" if line else ""
        self.topo.warnings.append(msg)
        if len(self.topo.warnings) <= _MAX_LOGGED:
            log.warning("%s", msg)


def _link_type(comment: str) -> tuple[int, str] | str | None:
    """Width and speed named in a port line's comment, after the remote description.

    Returns (width, speed), None if the comment names no link type, or the type's text if
    the width or speed is one this module has no rate for.
    """
    tail = comment.rsplit('"', 1)[-1]  # the remote NodeDescription may hold anything
    m = _LINK_TYPE.search(tail)
    if m is None:
        return None
    width, speed = m.group(1).removesuffix("x"), m.group(2)
    if not width.isdigit() or int(width) not in WIDTHS or speed not in LANE_DATA_BITS_PER_S:
        return m.group(0)
    return int(width), speed


def link_port_lines(topo: Topology, ends: list[PortLine], source: str) -> None:
    """Make one link of the one or two port lines that describe it.

    Each link usually appears twice, once from each end; its type is the first one either
    end names, else :data:`DEFAULT_LINK_TYPE`.
    """
    seen: dict[Port, Port] = {}
    first: dict[Port, PortLine] = {}  # by the port of the line that described the link first
    for end in ends:
        where = f"{source}:{end.lineno}"
        if end.remote.node not in topo.nodes:
            raise TopologyError(f"{where}: {end.local} links to unknown node {end.remote.node!r}")
        back = seen.get(end.remote)
        if back is not None:
            if back != end.local:
                raise TopologyError(
                    f"{where}: {end.local} links to {end.remote}, which links to {back}"
                )
            known = first[end.remote]
            if not isinstance(known.link_type, tuple) and isinstance(end.link_type, tuple):
                known.link_type = end.link_type
            continue  # the far end already described this link
        if end.local in seen:
            raise TopologyError(f"{where}: port {end.local} is described twice")
        seen[end.local] = end.remote
        first[end.local] = end
    for end in first.values():
        if isinstance(end.link_type, str):
            raise TopologyError(
                f"{source}:{end.lineno}: unknown link type {end.link_type!r} of "
                f"{end.local} - {end.remote}, and the far end names no known one"
            )
        width, speed = end.link_type or DEFAULT_LINK_TYPE
        try:
            topo.add_link(Link(end.local, end.remote, width, speed))
        except TopologyError as err:
            raise TopologyError(f"{source}:{end.lineno}: {err}") from None


def _guid_from_id(nid: str) -> int | None:
    """ibnetdiscover ids are ``S-``/``H-``/``R-`` followed by the node GUID in hex."""
    if len(nid) > 2 and nid[1] == "-" and nid[0] in "SHR":
        try:
            return int(nid[2:], 16)
        except ValueError:
            return None
    return None


def format_ibnetdiscover(topo: Topology) -> str:
    """Write the topology as ibnetdiscover text, which ibsim loads as a net file.

    Unknown LIDs are written as 0 (unassigned: OpenSM assigns them).
    """
    out: list[str] = []
    for node in topo.nodes.values():
        if node.devid is not None:
            out.append(f"devid=0x{node.devid:x}")
        if node.sysimgguid is not None:
            out.append(f"sysimgguid=0x{node.sysimgguid:x}")
        if node.guid is not None:
            word = (
                "switchguid" if node.kind == "switch" else f"{_WORD_BY_KIND[node.kind].lower()}guid"
            )
            out.append(f"{word}=0x{node.guid:x}")
        head = f'{_WORD_BY_KIND[node.kind]}\t{node.nports} "{node.id}"\t\t# "{node.desc}"'
        if node.kind == "switch":
            head += f" base port 0 lid {topo.lids.get(Port(node.id, 0), 0)} lmc 0"
        out.append(head)
        for port in topo.ports(node.id):
            out.append(_format_port(topo, port))
        out.append("")
    return "\n".join(out)


def _format_port(topo: Topology, port: Port) -> str:
    remote = topo.peer(port)
    link = topo.link_at(port)
    assert remote is not None and link is not None  # ports() yields connected ports only
    rnode = topo.nodes[remote.node]
    rguid = topo.port_guids.get(remote) if rnode.kind != "switch" else None
    rtext = f'"{remote.node}"[{remote.num}]' + (f"({rguid:x})" if rguid is not None else "")
    rlid = topo.lids.get(remote if rnode.kind != "switch" else Port(remote.node, 0), 0)
    kind = f"{link.width}x{link.speed}"
    if topo.nodes[port.node].kind == "switch":
        return f'[{port.num}]\t{rtext}\t\t# "{rnode.desc}" lid {rlid} {kind}'
    own = topo.port_guids.get(port)
    own_text = f"({own:x})" if own is not None else ""
    lid = topo.lids.get(port, 0)
    return f'[{port.num}]{own_text} \t{rtext}\t\t# lid {lid} lmc 0 "{rnode.desc}" lid {rlid} {kind}'


def default_node_id(kind: NodeKind, guid: int) -> str:
    """The id ibnetdiscover gives a node: ``S-``/``H-``/``R-`` and 16 hex digits of its GUID."""
    return f"{_PREFIX_BY_KIND[kind]}-{guid:016x}"
