"""Extended generalized fat trees (XGFT) for the lab.

``XGFT(h; m1..mh; w1..wh)`` (Öhring et al. 1995; docs/design.md §2): level-i
switches have ``m_i`` children and every level-(i-1) element has ``w_i`` parents, so
``2;8,4;1,2`` is 4 leaf switches of 8 nodes under 2 spines.  A node at level *i* is named by
the digits ``(a_{i+1}..a_h; b_1..b_i)``; it is child number ``a_i`` of each of its ``w_i``
parents ``(a_{i+1}..a_h; b_1..b_{i-1}, b_i)``.

Hosts are single-port HCAs ``cnNNNN mlx5_0`` (w1 must be 1: see :func:`build_xgft`),
numbered from cn0001 leaf switch by leaf switch; switches are ``sw-L<level>-<index>``.
One extra HCA, ``opensm01 mlx5_0``, hosts OpenSM on a spare port of the first leaf switch.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from ibqos.errors import TopologyError
from ibqos.fabric.hostnames import LAB_SM_HOSTNAME
from ibqos.fabric.topology import (
    LANE_DATA_BITS_PER_S,
    WIDTHS,
    Link,
    Node,
    Port,
    Topology,
    default_node_id,
)

SM_HOSTNAME = LAB_SM_HOSTNAME
#: ibsim 0.10 switches have LinearFDBCap 30720: end ports beyond that LID get no route.
MAX_LIDS = 30720
_SWITCH_GUID_BASE = 0x0C42A10300000000
_CA_GUID_BASE = 0x0C42A10301000000
_SPEC = re.compile(r"^\s*(\d+)\s*;\s*([\d,\s]+);\s*([\d,\s]+)$")


@dataclass(frozen=True)
class XgftSpec:
    """Shape of an XGFT: height and the m (children) and w (parents) of each level."""

    h: int
    m: tuple[int, ...]
    w: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.h};{','.join(map(str, self.m))};{','.join(map(str, self.w))}"

    def count(self, level: int) -> int:
        """Number of elements at *level* (0 = hosts, h = top switches)."""
        return math.prod(self.m[level:]) * math.prod(self.w[:level])

    @property
    def hosts(self) -> int:
        return self.count(0)

    @property
    def switches(self) -> int:
        return sum(self.count(i) for i in range(1, self.h + 1))


def parse_xgft(text: str) -> XgftSpec:
    """Parse ``"H;m1,..,mH;w1,..,wH"``.

    Raises:
        TopologyError: naming the spec and what is wrong with it.
    """
    where = f"--xgft {text!r}"
    match = _SPEC.match(text)
    if match is None:
        raise TopologyError(f"{where}: expected 'H;m1,..,mH;w1,..,wH', e.g. '2;8,4;1,2'")
    try:
        h = int(match.group(1))
        m = tuple(int(x) for x in match.group(2).split(","))
        w = tuple(int(x) for x in match.group(3).split(","))
    except ValueError:
        raise TopologyError(f"{where}: empty number in a list") from None
    if h < 1 or len(m) != h or len(w) != h:
        raise TopologyError(f"{where}: height {h} needs {h} m values and {h} w values")
    if min(m) < 1 or min(w) < 1:
        raise TopologyError(f"{where}: every m and w must be at least 1")
    if m[0] < 1 or (h == 1 and w[0] != 1):
        raise TopologyError(f"{where}: a 1-level tree has one switch above each host")
    return XgftSpec(h, m, w)


def build_xgft(spec: XgftSpec, width: int = 4, speed: str = "EDR") -> Topology:
    """Build the topology of an XGFT, plus the OpenSM host.

    Args:
        spec: the tree shape.
        width: lanes per link (1, 2, 4, 8, 12).
        speed: lane speed (SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR).
    """
    if width not in WIDTHS:
        raise TopologyError(f"--width {width}: expected one of {', '.join(map(str, WIDTHS))}")
    if speed not in LANE_DATA_BITS_PER_S:
        raise TopologyError(f"--speed {speed}: expected one of {', '.join(LANE_DATA_BITS_PER_S)}")
    h, m, w = spec.h, spec.m, spec.w
    if w[0] != 1:
        # HCAs do not forward: w1 parents per host make w1 separate subnets, each needing
        # its own subnet manager, and the lab runs one OpenSM.
        raise TopologyError(
            f"--xgft {spec}: w1 = {w[0]} makes {w[0]} separate subnets "
            "(multi-rail); the lab runs one OpenSM, so w1 must be 1"
        )
    lids = spec.hosts + spec.switches + 1
    if lids > MAX_LIDS:
        raise TopologyError(
            f"--xgft {spec}: {lids} end ports need LIDs; ibsim's switches route at most {MAX_LIDS}"
        )
    topo = Topology()
    # ids[level][label] -> node id; labels are (a_{i+1}..a_h, b_1..b_i) digit tuples.
    ids: list[dict[tuple[int, ...], str]] = [{} for _ in range(h + 1)]
    for level in range(h, 0, -1):
        nports = m[level - 1] + (w[level] if level < h else 0) + (1 if level == 1 else 0)
        for index, label in enumerate(_labels(spec, level)):
            guid = _SWITCH_GUID_BASE | level << 16 | (index + 1)
            node = Node(
                default_node_id("switch", guid),
                "switch",
                nports,
                f"sw-L{level}-{index + 1:04d}",
                guid,
            )
            topo.add_node(node)
            ids[level][label] = node.id
    ca_index = 0
    for host, a in enumerate(_digits(m)):
        for rail in range(w[0]):
            guid = _CA_GUID_BASE + 4 * ca_index
            ca_index += 1
            node = Node(default_node_id("ca", guid), "ca", 1, f"cn{host + 1:04d} mlx5_{rail}", guid)
            topo.add_node(node)
            topo.port_guids[Port(node.id, 1)] = guid + 1
            ids[0][(*a, rail)] = node.id
    for level in range(1, h + 1):
        for label, child in ids[level - 1].items():
            a_i = label[0]
            if level == 1:
                rest, b = label[1:h], label[h:]
                parents = [(*rest, *b)]
                up_ports = [1]
            else:
                rest, b = label[1:], ()
                parents = [(*rest, bi) for bi in range(w[level - 1])]
                up_ports = [m[level - 2] + bi + 1 for bi in range(w[level - 1])]
            for parent_label, up in zip(parents, up_ports, strict=True):
                parent = ids[level][parent_label]
                topo.add_link(Link(Port(child, up), Port(parent, a_i + 1), width, speed))
    sm_guid = _CA_GUID_BASE + 4 * ca_index
    sm = Node(default_node_id("ca", sm_guid), "ca", 1, f"{SM_HOSTNAME} mlx5_0", sm_guid)
    topo.add_node(sm)
    topo.port_guids[Port(sm.id, 1)] = sm_guid + 1
    first_leaf = ids[1][min(ids[1])]
    spare = topo.nodes[first_leaf].nports
    topo.add_link(Link(Port(sm.id, 1), Port(first_leaf, spare), width, speed))
    return topo


def _digits(radices: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Mixed-radix digit tuples, first digit fastest (so siblings are consecutive)."""
    return [tuple(reversed(t)) for t in itertools.product(*(range(r) for r in reversed(radices)))]


def _labels(spec: XgftSpec, level: int) -> list[tuple[int, ...]]:
    """Labels ``(a_{level+1}..a_h, b_1..b_level)`` of one level, in index order.

    Leaf switches are ordered like their hosts (a digits first), so leaf k holds
    hosts k*m1+1 .. (k+1)*m1 when w1 = 1.
    """
    a_part = _digits(spec.m[level:])
    b_part = _digits(spec.w[:level])
    if level == 1:
        return [(*a, *b) for a in a_part for b in b_part]
    return [(*a, *b) for b in b_part for a in a_part]
