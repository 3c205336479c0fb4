"""``ibnetdiscover -p`` (the ports list) read as a topology, and the choice between layouts.

``ibnetdiscover -p`` prints one line per port instead of node records (``dump_ports_report``
in infiniband-diags)::

    SW     3  1 0xfc6a1c0300b00001 4x NDR - CA     6  1 0xa088c20300c00002 ( 'leaf' - 'cn1 mlx5_0' )
    SW     4  3 0xfc6a1c0300a00002 4x NDR                                    'spine'

that is: node type (``SW``, ``CA``, ``RT``), LID (a switch's port-0 LID), port number, port
GUID, width and speed, then for a linked port the same for the far end and both
NodeDescriptions, for an unlinked one the local NodeDescription alone.

What it lacks, and what ibqos does about it:

- a CA's node GUID: only port GUIDs are printed.  Each CA port becomes a node of its own,
  ``H-<port guid>`` with the port GUID as its GUID, so a two-port adapter is two CAs of the same
  host (host names come from the NodeDescription, so jobs still get all its ports);
- a switch's port count: the highest port number listed (every port of a switch is listed);
- the system image GUID and device id: aggregation nodes are recognised by their
  NodeDescription only.

A switch's port GUID is its node GUID, so switches keep their usual ``S-<guid>`` ids and keys.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from ibqos.errors import TopologyError
from ibqos.fabric.topology import (
    LANE_DATA_BITS_PER_S,
    WIDTHS,
    Node,
    NodeKind,
    Port,
    PortLine,
    Topology,
    check_port_lines,
    default_node_id,
    link_port_lines,
    parse_ibnetdiscover,
)

log = logging.getLogger(__name__)

_KIND: dict[str, NodeKind] = {"SW": "switch", "CA": "ca", "RT": "router"}
_END = r"(SW|CA|RT)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]{1,16})"
_PORT = re.compile(
    rf"^{_END}\s+(\S+)\s+(\S+)"
    rf"(?:\s+-\s+{_END}\s+\(\s?'(.*)'\s+-\s+'(.*)'\s?\)|\s+'(.*)')\s*$"
)
_ANY_PORT = re.compile(r"^(SW|CA|RT)\s+\d+\s+\d+\s+0x[0-9a-fA-F]+\s")
_MAX_LOGGED = 10


def is_ports_list(text: str) -> bool:
    """True if the first line that is not blank or a comment is an ``ibnetdiscover -p`` line."""
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            return _ANY_PORT.match(line) is not None
    return False


def parse_topology_text(text: str, source: str, *, strict: bool = True) -> Topology:
    """Read any layout ibqos knows: ``ibnetdiscover -p`` if the text is one, else
    ibnetdiscover records (:func:`~ibqos.fabric.topology.parse_ibnetdiscover`).

    Raises:
        TopologyError: as the parser of the layout does.
    """
    if is_ports_list(text):
        return parse_ports_list(text, source, strict=strict)
    return parse_ibnetdiscover(text, source, strict=strict)


@dataclass
class _Side:
    kind: NodeKind
    lid: int
    num: int
    guid: int
    desc: str

    @property
    def node_id(self) -> str:
        return default_node_id(self.kind, self.guid)


def parse_ports_list(text: str, source: str, *, strict: bool = True) -> Topology:
    """Read ``ibnetdiscover -p`` output (see the module docstring).

    Args:
        text: the file contents.
        source: name of the input, used in messages.
        strict: raise on a line it cannot read; if False, skip it with a warning (kept in
            ``Topology.warnings``), unless most lines cannot be read.

    Raises:
        TopologyError: naming ``source:line``: a line it cannot read (*strict*), most lines
            unreadable, a link to a port another line links elsewhere, or no ports at all.
    """
    sides: dict[str, list[_Side]] = {}  # node id -> every port seen of it, either end
    ends: list[PortLine] = []
    warnings: list[str] = []
    bad: list[tuple[int, str]] = []
    total = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        total += 1
        m = _PORT.match(line)
        link_type = _link_type(m.group(5), m.group(6)) if m else None
        if m is None or isinstance(link_type, str):
            what = "cannot parse port line" if m is None else f"unknown link type {link_type!r}"
            if strict:
                raise TopologyError(f"{source}:{lineno}: {what}: {line[:60]!r}")
            if m is None:
                bad.append((lineno, line))
            warnings.append(f"{source}:{lineno}: {what}, skipped: {line[:80]!r}")
            if m is None:
                continue
            link_type = None
        local = _side(m.group(1), m.group(2), m.group(3), m.group(4), m.group(11) or m.group(13))
        sides.setdefault(local.node_id, []).append(local)
        if m.group(7) is None:
            continue  # an unlinked port: it only tells the switch's port count
        remote = _side(m.group(7), m.group(8), m.group(9), m.group(10), m.group(12))
        sides.setdefault(remote.node_id, []).append(remote)
        ends.append(
            PortLine(
                lineno,
                Port(local.node_id, local.num),
                Port(remote.node_id, remote.num),
                link_type if isinstance(link_type, tuple) else None,
            )
        )
    if not sides:
        raise TopologyError(f"{source}: no ports found")
    check_port_lines(source, total, bad)
    topo = _nodes(sides)
    topo.warnings.extend(warnings)
    for msg in warnings[:_MAX_LOGGED]:
        log.warning("%s", msg)
    if len(warnings) > _MAX_LOGGED:
        log.warning("%s: %d more lines skipped", source, len(warnings) - _MAX_LOGGED)
    link_port_lines(topo, ends, source)
    return topo


def _side(kind: str, lid: str, num: str, guid: str, desc: str) -> _Side:
    return _Side(_KIND[kind], int(lid), int(num), int(guid, 16), desc)


def _link_type(width: str, speed: str) -> tuple[int, str] | str:
    """(width, speed) of ``4x NDR``, or the text if this module has no rate for it."""
    w = width.removesuffix("x")
    if not w.isdigit() or int(w) not in WIDTHS or speed not in LANE_DATA_BITS_PER_S:
        return f"{width} {speed}"
    return int(w), speed


def _nodes(sides: dict[str, list[_Side]]) -> Topology:
    """One node per switch GUID and per CA/router port GUID, with the LIDs and GUIDs seen."""
    topo = Topology()
    for nid, seen in sides.items():
        first = seen[0]
        nports = max(s.num for s in seen)
        topo.add_node(Node(nid, first.kind, nports, first.desc, first.guid))
        for s in seen:
            if first.kind == "switch":
                if s.lid:
                    topo.lids.setdefault(Port(nid, 0), s.lid)
            else:
                topo.port_guids[Port(nid, s.num)] = s.guid
                if s.lid:
                    topo.lids.setdefault(Port(nid, s.num), s.lid)
    return topo
