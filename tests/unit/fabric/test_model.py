"""Tests for ibqos.fabric: levels, port roles, capacities, targets, validation, diffs, sources.

Fixtures: the recorded lab fabrics (real ibnetdiscover output of ``2;8,4;1,2`` and
``3;8,4,4;1,2,2``, all 4xEDR) and ``fabric/ndr-hdr-2level.txt`` (real format, mixed
NDR/HDR/SDR links, a CA with no link, an ibwarn line).
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import stat
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ibqos.collect.discover import fabric_from_config
from ibqos.config.load import parse_config
from ibqos.errors import StopRequested, TopologyError
from ibqos.fabric.diff import FabricChange, PortChange, diff_fabrics
from ibqos.fabric.model import (
    DISCOVER_TIMEOUT_S,
    Fabric,
    fabric_from_file,
    fabric_from_ibnetdiscover,
    fabric_from_text,
)
from ibqos.fabric.targets import Target
from ibqos.fabric.topology import Link, Node, Port, Topology, format_ibnetdiscover
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.lab.fabric import fabric_from_lab
from ibqos.tools import waiter
from tests.support.paths import TESTS

DATA = TESTS / "data"
TWO = DATA / "lab-xgft-2_8.4_1.2" / "ibnetdiscover.txt"
THREE = DATA / "lab-xgft-3_8.4.4_1.2.2" / "ibnetdiscover.txt"
MIXED = DATA / "fabric" / "ndr-hdr-2level.txt"
EDR = 12.5e9  # 4xEDR: 4 lanes x 25 Gb/s after 64b/66b, bytes per second

# ndr-hdr-2level.txt node GUIDs
SPINE1, SPINE2 = 0xFC6A1C0300A00001, 0xFC6A1C0300A00002
LEAF1, LEAF2 = 0xFC6A1C0300B00001, 0xFC6A1C0300B00002
CN1, CN2, CN3, CN4, CN5 = (0xA088C20300C00000 + i for i in range(1, 6))
SM = 0x0C42A10300D00001

# recorded fabric -> (host, down, up) port counts, uplink capacity per level 0..h
RECORDED = {
    "2-level": (TWO, (33, 33 + 4 * 2, 4 * 2), [33 * EDR, 8 * EDR, 0.0]),
    "3-level": (
        THREE,
        (129, 129 + 16 * 2 + 8 * 2, 16 * 2 + 8 * 2),
        [129 * EDR, 32 * EDR, 16 * EDR, 0.0],
    ),
}


@pytest.fixture(scope="module", params=sorted(RECORDED))
def recorded(request: pytest.FixtureRequest) -> tuple[str, Fabric]:
    return request.param, fabric_from_file(RECORDED[request.param][0])


@pytest.fixture(scope="module")
def mixed() -> Fabric:
    return fabric_from_file(MIXED)


def fabric_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ibqos.fabric.model"]


def copy_without(topo: Topology, drop=lambda link: False, drop_nodes=()) -> Topology:
    """A copy of *topo* without the links *drop* selects and without *drop_nodes*."""
    out = Topology()
    for node in topo.nodes.values():
        if node.id not in drop_nodes:
            out.add_node(node)
    for link in topo.links:
        if not drop(link) and link.a.node in out.nodes and link.b.node in out.nodes:
            out.add_link(link)
    out.lids = {p: v for p, v in topo.lids.items() if p.node in out.nodes}
    out.port_guids = {p: v for p, v in topo.port_guids.items() if p.node in out.nodes}
    return out


def with_spare_port(base: Topology, descs: set[str]) -> Topology:
    """A copy of *base* where the nodes described by *descs* have one more (free) port."""
    topo = Topology()
    for node in base.nodes.values():
        nports = node.nports + (1 if node.desc in descs else 0)
        topo.add_node(Node(node.id, node.kind, nports, node.desc, node.guid))
    for link in base.links:
        topo.add_link(link)
    topo.lids, topo.port_guids = dict(base.lids), dict(base.port_guids)
    return topo


def spare(topo: Topology, desc: str) -> Port:
    node = next(n for n in topo.nodes.values() if n.desc == desc)
    return Port(node.id, node.nports)


def with_lids(topo: Topology) -> Topology:
    """Give every switch port 0 and every CA port a LID, as OpenSM would."""
    lid = 1
    for node in topo.nodes.values():
        nums = [0] if node.kind == "switch" else range(1, node.nports + 1)
        for num in nums:
            topo.lids[Port(node.id, num)] = lid
            lid += 1
    return topo


def xgft(spec: str) -> Topology:
    return with_lids(build_xgft(parse_xgft(spec)))


# --- the mixed-speed fixture ------------------------------------------------------------


def test_mixed_levels(mixed: Fabric) -> None:
    by_guid = {mixed.topo.nodes[sid].guid: lvl for sid, lvl in mixed.levels.items()}
    assert by_guid == {SPINE1: 2, SPINE2: 2, LEAF1: 1, LEAF2: 1}
    assert mixed.height == 2
    assert mixed.level_of(f"H-{CN1:016x}") == 0


@pytest.mark.parametrize(
    ("guid", "port", "role", "link_type", "capacity"),
    [
        (CN1, 1, "host", "4xNDR", 50e9),  # 4 x 100 Gb/s
        (CN2, 1, "host", "2xNDR", 25e9),
        (SM, 1, "host", "4xHDR", 25e9),  # 4 x 50 Gb/s
        (CN3, 1, "host", "4xHDR", 25e9),
        (CN4, 1, "host", "4xSDR", 1e9),  # 4 x 2 Gb/s after 8b/10b
        (LEAF1, 1, "down", "4xNDR", 50e9),
        (LEAF1, 3, "down", "4xHDR", 25e9),
        (LEAF2, 2, "down", "4xSDR", 1e9),
        (LEAF1, 33, "up", "4xNDR", 50e9),
        (LEAF2, 34, "up", "2xNDR", 25e9),
        (SPINE1, 2, "down", "4xNDR", 50e9),
        (SPINE2, 2, "down", "2xNDR", 25e9),
    ],
)
def test_mixed_port(mixed: Fabric, guid, port, role, link_type, capacity) -> None:
    fp = mixed.port(guid, port)
    assert (fp.role, fp.link_type, fp.capacity_bytes_per_s) == (role, link_type, capacity)
    assert fp.key == (guid, port)


def test_port_guids() -> None:
    """CA ports carry their own port GUID (what qos-policy.conf's port-guid matches);
    switch ports the switch's node GUID."""
    mixed = fabric_from_file(MIXED)
    assert mixed.port(CN1, 1).port_guid == 0xA088C20300C00001  # the file's "(guid)"
    assert mixed.port(LEAF1, 1).port_guid == LEAF1
    two = fabric_from_file(TWO)
    topo = two.topo
    for ca in topo.cas():
        for port in topo.ports(ca.id):
            assert ca.guid is not None
            assert two.port(ca.guid, port.num).port_guid == topo.port_guids[port]
    assert all(fp.port_guid == fp.node_guid for fp in two.ports.values() if fp.is_switch)


def test_mixed_role_counts(mixed: Fabric) -> None:
    assert Counter(fp.role for fp in mixed.ports.values()) == {"host": 5, "down": 9, "up": 4}
    assert len(mixed.ports) == 2 * len(mixed.topo.links)


def test_mixed_uplink_capacity(mixed: Fabric) -> None:
    assert mixed.uplink_capacity_bytes_per_s(0) == 50e9 + 25e9 + 25e9 + 25e9 + 1e9
    assert mixed.uplink_capacity_bytes_per_s(1) == 3 * 50e9 + 25e9
    assert mixed.uplink_capacity_bytes_per_s(2) == 0.0
    assert [(fp.node_guid, fp.num) for fp in mixed.uplinks(1)] == [
        (LEAF1, 33),
        (LEAF1, 34),
        (LEAF2, 33),
        (LEAF2, 34),
    ]


def test_mixed_subtree_uplink_capacity(mixed: Fabric) -> None:
    sub = mixed.topo.subtrees(1, mixed.levels)
    per_subtree = mixed.subtree_uplink_capacity_bytes_per_s(1)
    assert per_subtree[sub[f"H-{CN1:016x}"]] == 100e9  # leaf01: 2 x 4xNDR
    assert per_subtree[sub[f"H-{CN3:016x}"]] == 75e9  # leaf02: 4xNDR + 2xNDR
    assert per_subtree[sub[f"H-{CN5:016x}"]] == 0.0  # the unlinked CA is a subtree alone
    assert sorted(per_subtree.values()) == [0.0, 75e9, 100e9]


@pytest.mark.parametrize("level", [-1, 3])
def test_level_out_of_range(mixed: Fabric, level: int) -> None:
    with pytest.raises(ValueError, match=r"levels 0\.\.2"):
        mixed.uplinks(level)


def test_mixed_warnings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        fabric = fabric_from_file(MIXED)
    assert fabric.warnings == [
        f"{MIXED}: CA H-a088c20300c00005 ('cn005 mlx5_0') has no link: left out"
    ]
    assert fabric_warnings(caplog) == fabric.warnings
    (skipped,) = fabric.topo.warnings
    assert skipped.startswith(f"{MIXED}:43: cannot parse line in the record of S-fc6a1c0300b00002")
    assert "ibwarn: [31457]" in skipped


def test_mixed_targets(mixed: Fabric) -> None:
    targets = mixed.targets()
    assert len(targets) == 18
    assert Counter((t.role, t.level, t.is_switch) for t in targets) == {
        ("host", 0, False): 5,
        ("down", 1, True): 5,
        ("up", 1, True): 4,
        ("down", 2, True): 4,
    }
    assert {t.node_guid for t in targets if not t.is_switch} == {SM, CN1, CN2, CN3, CN4}
    assert [t.port for t in targets if t.node_guid == CN1] == [1]  # port 2 is not linked
    assert (
        Target(
            node_guid=LEAF2,
            node_desc="MF0;ib-leaf02:MQM9700/U1",
            port=34,
            lid=5,
            level=1,
            role="up",
            is_switch=True,
            capacity_bytes_per_s=mixed.port(LEAF2, 34).capacity_bytes_per_s,
        )
        in targets
    )
    by_port = {(t.node_guid, t.port): t for t in targets}
    assert by_port[(SM, 1)].lid == 1
    assert by_port[(CN4, 1)].lid == 9
    assert {t.lid for t in targets if t.node_guid == SPINE2} == {3}  # the switch's port-0 LID
    assert mixed.targets() == targets and mixed.targets() is not targets


def test_port_lookup_unknown(mixed: Fabric) -> None:
    with pytest.raises(KeyError, match=r"0xa088c20300c00001\[2\]"):
        mixed.port(CN1, 2)


def test_summary(mixed: Fabric) -> None:
    assert mixed.summary() == (
        f"{MIXED}: 2 levels, 4 switches, 6 CAs, 5 host, 9 down and 4 up ports"
    )


# --- the recorded lab fabrics -----------------------------------------------------------


def test_recorded_role_counts(recorded: tuple[str, Fabric]) -> None:
    name, fabric = recorded
    host, down, up = RECORDED[name][1]
    assert Counter(fp.role for fp in fabric.ports.values()) == {
        "host": host,
        "down": down,
        "up": up,
    }
    assert len(fabric.targets()) == host + down + up == 2 * len(fabric.topo.links)
    assert fabric.warnings == []


def test_recorded_uplink_capacity(recorded: tuple[str, Fabric]) -> None:
    name, fabric = recorded
    expected = RECORDED[name][2]
    assert [fabric.uplink_capacity_bytes_per_s(lvl) for lvl in range(fabric.height + 1)] == expected


@pytest.mark.parametrize(
    ("name", "level", "subtrees", "capacity"),
    [
        ("2-level", 1, 4, 2 * EDR),  # a leaf: 2 up ports
        ("3-level", 1, 16, 2 * EDR),
        ("3-level", 2, 4, 4 * EDR),  # 4 leaves under 2 level-2 switches, 2 up ports each
    ],
)
def test_recorded_subtree_capacity(name, level, subtrees, capacity) -> None:
    fabric = fabric_from_file(RECORDED[name][0])
    per_subtree = fabric.subtree_uplink_capacity_bytes_per_s(level)
    assert per_subtree == dict.fromkeys(range(subtrees), capacity)
    assert set(fabric.topo.subtrees(level, fabric.levels).values()) == set(per_subtree)


def test_recorded_levels_match_descriptions(recorded: tuple[str, Fabric]) -> None:
    _, fabric = recorded
    for t in fabric.targets():
        if t.is_switch:
            m = re.match(r"sw-L(\d)-", t.node_desc)
            assert m is not None and t.level == int(m.group(1))
        else:
            assert (t.level, t.role) == (0, "host")


def test_recorded_roles_follow_peer_levels(recorded: tuple[str, Fabric]) -> None:
    _, fabric = recorded
    for fp in fabric.ports.values():
        peer_level = fabric.level_of(fp.peer.node)
        if fp.is_switch:
            assert fp.role == ("up" if peer_level > fp.level else "down")
            assert abs(peer_level - fp.level) == 1
        assert fabric.ports[(fp.peer_guid, fp.peer.num)].peer == Port(fp.node_id, fp.num)


def test_recorded_lids_are_targets(recorded: tuple[str, Fabric]) -> None:
    _, fabric = recorded
    for t in fabric.targets():
        node = f"{'S' if t.is_switch else 'H'}-{t.node_guid:016x}"
        want = fabric.topo.lids[Port(node, 0 if t.is_switch else t.port)]
        assert t.lid == want


def test_root_guids_give_the_same_levels(recorded: tuple[str, Fabric]) -> None:
    _, fabric = recorded
    tops = [fabric.topo.nodes[s].guid for s, lvl in fabric.levels.items() if lvl == fabric.height]
    again = Fabric(fabric.topo, root_guids=tops)
    assert again.levels == fabric.levels
    assert again.targets() == fabric.targets()


# --- validation -------------------------------------------------------------------------


def test_same_level_link_is_an_error() -> None:
    topo = with_spare_port(xgft("2;4,2;1,2"), {"sw-L1-0001", "sw-L1-0002"})
    a, b = spare(topo, "sw-L1-0001"), spare(topo, "sw-L1-0002")
    topo.add_link(Link(a, b))
    with pytest.raises(TopologyError) as info:
        Fabric(topo, source="t")
    assert str(info.value) == (
        f"t: not a fat tree: switches {a.node} ('sw-L1-0001') port 8 and {b.node} "
        "('sw-L1-0002') port 8 are linked but both at level 1; leaves are the switches with "
        "CA ports: if CAs hang off higher switches, give the top switches' GUIDs as root GUIDs"
    )


def test_spine_to_spine_links_are_an_error() -> None:
    topo = with_spare_port(
        xgft("3;4,2,2;1,2,2"), {"sw-L2-0001", "sw-L2-0002", "sw-L3-0001", "sw-L3-0002"}
    )
    topo.add_link(Link(spare(topo, "sw-L2-0001"), spare(topo, "sw-L2-0002")))
    topo.add_link(Link(spare(topo, "sw-L3-0001"), spare(topo, "sw-L3-0002")))
    with pytest.raises(TopologyError, match=r"sw-L2-0001.*sw-L2-0002.*level 2 \(and 1 more such"):
        Fabric(topo)


def test_switch_connected_to_no_leaf_is_an_error() -> None:
    topo = xgft("1;4;1")
    topo.add_node(Node("S-a", "switch", 2, "island-a", 0xA))
    topo.add_node(Node("S-b", "switch", 2, "island-b", 0xB))
    topo.add_link(Link(Port("S-a", 1), Port("S-b", 1)))
    with pytest.raises(
        TopologyError, match=r"^t: not a fat tree: switch S-a is connected to no leaf"
    ):
        Fabric(topo, source="t")


def test_no_switches_is_an_error() -> None:
    text = "\n".join(
        [
            'Ca\t1 "H-0000000000000020"\t\t# "a mlx5_0"',
            '[1](21) \t"H-0000000000000030"[1] (31) \t\t# lid 2 lmc 0 "b mlx5_0" lid 3 4xHDR',
            "",
            'Ca\t1 "H-0000000000000030"\t\t# "b mlx5_0"',
        ]
    )
    with pytest.raises(TopologyError, match=r"^b2b: not a fat tree: no switches$"):
        fabric_from_text(text, "b2b")


def test_ca_on_a_spine_needs_root_guids() -> None:
    """A storage node on a spine makes the spine look like a leaf linked to leaves."""
    topo = with_spare_port(xgft("2;4,2;1,2"), {"sw-L2-0001"})
    spines = [s for s in topo.switches() if s.desc.startswith("sw-L2")]
    topo.add_node(Node("H-00000000000000f0", "ca", 1, "storage01 mlx5_0", 0xF0))
    on_spine = spare(topo, "sw-L2-0001")
    topo.add_link(Link(Port("H-00000000000000f0", 1), on_spine))
    topo.lids[Port("H-00000000000000f0", 1)] = 99
    with pytest.raises(TopologyError, match=r"both at level 1.*root GUIDs"):
        Fabric(topo)
    fabric = Fabric(topo, root_guids=[s.guid for s in spines])
    assert {fabric.levels[s.id] for s in spines} == {2}
    assert fabric.port(0xF0, 1).role == "host"
    down = fabric.port(spines[0].guid, on_spine.num)
    assert (down.role, down.level) == ("down", 2)
    assert fabric.uplink_capacity_bytes_per_s(0) == 10 * EDR  # 8 hosts, SM, storage
    assert fabric.uplink_capacity_bytes_per_s(1) == 4 * EDR
    assert fabric.warnings == []


def test_leaf_without_hosts_needs_root_guids() -> None:
    """Without root GUIDs a leaf whose hosts are all down looks like a level-3 switch."""
    base = xgft("2;4,2;1,2")
    leaf2 = next(s.id for s in base.switches() if s.desc == "sw-L1-0002")
    hosts = {q.node for p in base.ports(leaf2) if base.nodes[(q := base.peer(p)).node].kind == "ca"}
    topo = copy_without(base, drop_nodes=hosts)
    assert Fabric(topo).levels[leaf2] == 3
    spines = [s.guid for s in topo.switches() if s.desc.startswith("sw-L2")]
    fabric = Fabric(topo, root_guids=spines)
    assert fabric.levels[leaf2] == 1
    assert fabric.uplink_capacity_bytes_per_s(1) == 4 * EDR


def test_root_guids_unknown(caplog: pytest.LogCaptureFixture) -> None:
    topo = xgft("2;4,2;1,2")
    spines = [s.guid for s in topo.switches() if s.desc.startswith("sw-L2")]
    with caplog.at_level(logging.WARNING):
        fabric = Fabric(topo, source="t", root_guids=[*spines, 0x1234])
    assert fabric.warnings == ["t: root GUID 0x0000000000001234 is not a switch of this fabric"]
    with pytest.raises(TopologyError, match=r"^t: none of the root GUIDs"):
        Fabric(topo, source="t", root_guids=[0x1234])


def test_switch_without_up_link_warns(caplog: pytest.LogCaptureFixture) -> None:
    base = xgft("3;4,2,2;1,2,2")
    mid = next(s for s in base.switches() if s.desc == "sw-L2-0001")
    levels = base.switch_levels()

    def cut(link: Link) -> bool:  # both uplinks of mid
        ends = {link.a.node, link.b.node}
        return mid.id in ends and any(levels.get(n) == 3 for n in ends)

    with caplog.at_level(logging.WARNING):
        fabric = Fabric(copy_without(base, cut), source="t")
    msg = f"t: switch {mid.id} ('sw-L2-0001') at level 2 has no up link (the top level is 3)"
    assert fabric.warnings == [msg]
    assert fabric_warnings(caplog) == [msg]
    assert fabric.uplink_capacity_bytes_per_s(2) == (8 - 2) * EDR


def test_ports_without_lid_are_not_targets(caplog: pytest.LogCaptureFixture) -> None:
    """Before OpenSM assigns LIDs (a lab's net file says lid 0): a model, no targets."""
    text = format_ibnetdiscover(build_xgft(parse_xgft("2;4,2;1,2")))
    with caplog.at_level(logging.WARNING):
        fabric = fabric_from_text(text, "net")
    assert fabric.targets() == []
    assert len(fabric.warnings) == len(fabric.ports) == 2 * len(fabric.topo.links)
    assert all(w.endswith(": not a target") and "has no LID" in w for w in fabric.warnings)
    logged = fabric_warnings(caplog)
    assert len(logged) == 11  # ten, then a count
    assert logged[-1] == f"net: {len(fabric.warnings) - 10} more fabric warnings"
    assert Counter(fp.role for fp in fabric.ports.values()) == {"host": 9, "down": 13, "up": 4}


def test_nodes_without_guid_are_not_targets() -> None:
    fabric = fabric_from_file(DATA / "small-fabric.net")  # ids only, no GUIDs, no LIDs
    assert fabric.ports == {}
    assert fabric.targets() == []
    assert any("Leaf1 ('leaf-1') port 1 has no GUID" in w for w in fabric.warnings)
    assert fabric.uplink_capacity_bytes_per_s(1) == 4 * 1e9  # 4xSDR when no type is given


# --- changes between sweeps -------------------------------------------------------------


def test_no_change(mixed: Fabric) -> None:
    change = diff_fabrics(mixed, fabric_from_file(MIXED))
    assert change == FabricChange()
    assert not change
    assert str(change) == "fabric unchanged"


def test_link_gone_and_back() -> None:
    base = xgft("2;4,2;1,2")
    leaf = next(s for s in base.switches() if s.desc == "sw-L1-0001")
    up = next(p for p in base.ports(leaf.id) if base.nodes[base.peer(p).node].kind == "switch")
    peer = base.peer(up)
    old = Fabric(base)
    new = Fabric(copy_without(base, lambda link: up in (link.a, link.b)))
    gone = tuple(sorted([(leaf.guid, up.num), (base.nodes[peer.node].guid, peer.num)]))
    change = diff_fabrics(old, new)
    assert change == FabricChange(ports_gone=gone)
    assert str(change) == (
        f"fabric changed: 2 ports gone (sw-L1-0001[{up.num}], sw-L2-0001[{peer.num}])"
    )
    assert diff_fabrics(new, old) == FabricChange(ports_added=gone)


def test_ca_gone() -> None:
    base = xgft("2;4,2;1,2")
    ca = next(n for n in base.cas() if n.desc == "cn0003 mlx5_0")
    leaf_port = base.peer(Port(ca.id, 1))
    change = diff_fabrics(Fabric(base), Fabric(copy_without(base, drop_nodes={ca.id})))
    leaf_guid = base.nodes[leaf_port.node].guid
    assert change.nodes_gone == (ca.guid,)
    assert change.ports_gone == tuple(sorted([(ca.guid, 1), (leaf_guid, leaf_port.num)]))
    assert (change.nodes_added, change.ports_added, change.changed) == ((), (), ())
    assert str(change).startswith("fabric changed: 1 node gone (cn0003 mlx5_0); 2 ports gone (")


def test_link_speed_change() -> None:
    text = MIXED.read_text()
    slower = text.replace('"cn003 mlx5_0" lid 8 4xHDR', '"cn003 mlx5_0" lid 8 1xHDR')
    slower = slower.replace(
        '"MF0;ib-leaf02:MQM9700/U1" lid 5 4xHDR', '"MF0;ib-leaf02:MQM9700/U1" lid 5 1xHDR'
    )
    change = diff_fabrics(fabric_from_text(text, "a"), fabric_from_text(slower, "b"))
    assert change == FabricChange(
        changed=(
            PortChange((CN3, 1), "link", "4xHDR", "1xHDR"),
            PortChange((LEAF2, 1), "link", "4xHDR", "1xHDR"),
        )
    )
    assert str(change) == (
        "fabric changed: 2 ports changed (cn003 mlx5_0[1] link 4xHDR->1xHDR, "
        "MF0;ib-leaf02:MQM9700/U1[1] link 4xHDR->1xHDR)"
    )


def test_recabled_and_lid_change() -> None:
    base = xgft("2;4,2;1,2")
    leaf = next(s for s in base.switches() if s.desc == "sw-L1-0002")
    h1, h2 = (base.peer(Port(leaf.id, n)) for n in (1, 2))
    swapped = copy_without(
        base,
        lambda link: Port(leaf.id, 1) in (link.a, link.b) or Port(leaf.id, 2) in (link.a, link.b),
    )
    swapped.add_link(Link(h1, Port(leaf.id, 2), 4, "EDR"))
    swapped.add_link(Link(h2, Port(leaf.id, 1), 4, "EDR"))
    swapped.lids[h1] = 77
    change = diff_fabrics(Fabric(base), Fabric(swapped))
    g1, g2 = base.nodes[h1.node].guid, base.nodes[h2.node].guid
    assert change.ports_gone == change.ports_added == ()
    assert {(c.key, c.what) for c in change.changed} == {
        ((leaf.guid, 1), "peer"),
        ((leaf.guid, 2), "peer"),
        ((g1, 1), "peer"),
        ((g2, 1), "peer"),
        ((g1, 1), "lid"),
    }
    assert (
        PortChange((leaf.guid, 1), "peer", f"0x{g1:016x}[1]", f"0x{g2:016x}[1]") in change.changed
    )


def test_change_summary_is_short() -> None:
    base = xgft("2;8,4;1,2")
    leaf = next(s for s in base.switches() if s.desc == "sw-L1-0001")
    hosts = {
        q.node for p in base.ports(leaf.id) if base.nodes[(q := base.peer(p)).node].kind == "ca"
    }
    change = diff_fabrics(Fabric(base), Fabric(copy_without(base, drop_nodes=hosts)))
    text = str(change)
    assert "\n" not in text
    assert text.startswith("fabric changed: 9 nodes gone (cn0001 mlx5_0, cn0002 mlx5_0, ")
    assert ", +6 more); 18 ports gone (" in text
    assert len(text) < 300


# --- sources ----------------------------------------------------------------------------


def test_from_file_missing(tmp_path: Path) -> None:
    with pytest.raises(TopologyError) as info:
        fabric_from_file(tmp_path / "nope.txt")
    assert str(info.value) == f"{tmp_path}/nope.txt: cannot read: No such file or directory"


def test_from_file_not_text(tmp_path: Path) -> None:
    (tmp_path / "bin.txt").write_bytes(b"Switch\xff\xfe\n")
    with pytest.raises(TopologyError, match=r"bin\.txt: not text: 'utf-8' codec"):
        fabric_from_file(tmp_path / "bin.txt")


def test_from_ibnetdiscover_reads_stdout_with_env_and_cwd() -> None:
    script = "import os, sys; sys.stdout.write(open(os.environ['NET']).read())"
    fabric = fabric_from_ibnetdiscover(
        command=[sys.executable, "-c", script],
        env={"NET": MIXED.name},
        cwd=MIXED.parent,
        timeout=30,
    )
    assert fabric.targets() == fabric_from_file(MIXED).targets()
    assert fabric.source.endswith(" -c " + script)


def test_from_ibnetdiscover_failure_names_command_and_stderr() -> None:
    script = (
        "import sys; sys.stderr.write('ibwarn: [1] umad_init: cannot open\\n"
        "ibnetdiscover: iberror: failed: discover failed\\n'); sys.exit(1)"
    )
    with pytest.raises(TopologyError) as info:
        fabric_from_ibnetdiscover(command=[sys.executable, "-c", script])
    msg = str(info.value)
    assert msg.startswith(f"{sys.executable} -c ")
    assert msg.endswith("failed (exit status 1): ibnetdiscover: iberror: failed: discover failed")


def test_from_ibnetdiscover_stderr_on_success_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    script = (
        f"import sys; sys.stdout.write(open({str(MIXED)!r}).read()); "
        "sys.stderr.write('ibwarn: [7] node timed out\\n')"
    )
    with caplog.at_level(logging.WARNING):
        fabric_from_ibnetdiscover(command=[sys.executable, "-c", script])
    assert any(m.endswith(": ibwarn: [7] node timed out") for m in fabric_warnings(caplog))


def test_from_ibnetdiscover_not_installed(tmp_path: Path) -> None:
    with pytest.raises(TopologyError) as info:
        fabric_from_ibnetdiscover(command=[str(tmp_path / "ibnetdiscover")])
    assert str(info.value) == (
        f"{tmp_path}/ibnetdiscover: command not found (infiniband-diags installs it)"
    )


def test_from_ibnetdiscover_not_executable(tmp_path: Path) -> None:
    (tmp_path / "ibnetdiscover").write_text("")
    with pytest.raises(TopologyError, match=r"ibnetdiscover: cannot run: Permission denied$"):
        fabric_from_ibnetdiscover(command=[str(tmp_path / "ibnetdiscover")])


def test_from_ibnetdiscover_timeout() -> None:
    with pytest.raises(TopologyError, match=r"no answer within 0\.5 s$"):
        fabric_from_ibnetdiscover(
            command=[sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5
        )


def test_a_hung_ibnetdiscover_keeps_the_loop_pinged_and_ends_on_a_stop(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    pings: list[float] = []

    def ping_then_stop() -> None:  # what the agent's waiter does on SIGTERM
        pings.append(time.monotonic())
        if len(pings) == 3:
            raise StopRequested

    started = time.monotonic()
    with waiter(ping_then_stop), pytest.raises(StopRequested):
        fabric_from_ibnetdiscover(command=[sys.executable, "-c", script])
    assert len(pings) == 3 and time.monotonic() - started < 5
    with pytest.raises(ProcessLookupError):  # killed by its pid and reaped
        os.kill(int(pidfile.read_text()), 0)


def test_discovery_is_bounded_by_default() -> None:
    default = inspect.signature(fabric_from_ibnetdiscover).parameters["timeout"].default
    assert default == DISCOVER_TIMEOUT_S == 60.0


def test_the_config_bounds_a_live_discovery(tmp_path: Path) -> None:
    exe = tmp_path / "ibnetdiscover"
    exe.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    cfg = parse_config({"fabric": {"discover_timeout_s": 1}}, "c.yaml")
    started = time.monotonic()
    with pytest.raises(TopologyError, match=r"^ibnetdiscover: no answer within 1 s$"):
        fabric_from_config(cfg, env={"PATH": str(tmp_path)})
    assert time.monotonic() - started < 5


def test_targets_carry_their_link_capacity() -> None:
    fabric = fabric_from_file(MIXED)
    for t in fabric.targets():
        assert t.capacity_bytes_per_s == fabric.port(t.node_guid, t.port).capacity_bytes_per_s > 0


def test_from_ibnetdiscover_empty_output() -> None:
    with pytest.raises(TopologyError, match=r"no nodes found"):
        fabric_from_ibnetdiscover(command=[sys.executable, "-c", "pass"])


def test_from_lab_not_started(make_lab) -> None:
    lab = make_lab("2;4,2;1,2", start=False)
    with pytest.raises(TopologyError, match=r"^lab lab: no LIDs known and no .*ibnetdiscover\.txt"):
        fabric_from_lab(lab)


def test_from_lab_reads_the_recorded_discovery(make_lab) -> None:
    """A lab whose topology has no LIDs (not started by this process) is read from its
    ibnetdiscover.txt."""
    lab = make_lab("2;8,4;1,2", start=False)
    lab.paths.discovered.write_text(TWO.read_text())
    fabric = fabric_from_lab(lab)
    assert fabric.source == str(lab.paths.discovered)
    assert fabric.targets() == fabric_from_file(TWO).targets()
