"""Real-fabric topology dumps: SHARP aggregation nodes, ibdiagnet's port labels,
``ibnetdiscover -p``, terminal logs, vendor-default NodeDescriptions, unreadable layouts.

Fixtures (sources and licences in ``tests/data/fabric/README.md``):

- ``selene-sharp-3level.txt``: a trimmed ibnetdiscover dump of NVIDIA's Selene (Quantum
  HDR switches, each with its aggregation node on port 41);
- ``sharp-2level.*``: one small fabric with an aggregation node in every switch and a CA
  with a vendor-default description, as infiniband-diags 44 ``ibnetdiscover`` and
  ``ibnetdiscover -p`` printed it under ibsim (``.net`` is the ibsim file), and the same
  dump with ibdiagnet's port labels added;
- ``ibnetdiscover-manpage-example.txt``: the example of the ibnetdiscover(8) man page
  (every CA with its firmware's description, a ``-g`` chassis line).
"""

from __future__ import annotations

import logging
import re

import pytest

from ibqos.attribute.jobmap import host_ports
from ibqos.errors import TopologyError
from ibqos.fabric.hostnames import HostMatcher, is_vendor_default
from ibqos.fabric.model import Fabric, fabric_from_file, fabric_from_text
from ibqos.fabric.portlist import is_ports_list, parse_ports_list, parse_topology_text
from ibqos.fabric.topology import Port, format_ibnetdiscover, parse_ibnetdiscover
from tests.support.paths import TESTS

DATA = TESTS / "data" / "fabric"
SELENE = DATA / "selene-sharp-3level.txt"
SHARP = DATA / "sharp-2level.ibnetdiscover.txt"
SHARP_PORTS = DATA / "sharp-2level.ports.txt"
SHARP_IBDIAG = DATA / "sharp-2level.ibdiagnet2.ibnetdiscover"
MANPAGE = DATA / "ibnetdiscover-manpage-example.txt"
HDR = 4 * 50e9 / 8  # 4xHDR, bytes per second
AN_DESC = "Mellanox Technologies Aggregation Node"
#: the aggregation nodes' system image GUIDs made their own (apply before changing devid)
SYS = ("devid=0xcf09\nsysimgguid=0xfc6a1c0300", "devid=0xcf09\nsysimgguid=0x1")


def _names(fabric: Fabric) -> dict[str, str]:
    """Switch node id -> its short name (``LG01-01`` of ``MF0;LG01-01:MQM8700/U1``)."""
    return {sid: fabric.topo.nodes[sid].desc.split(";")[1].split(":")[0] for sid in fabric.levels}


# -- SHARP aggregation nodes ----------------------------------------------------------
def test_a_fabric_with_aggregation_nodes_is_a_fat_tree():
    """Every Quantum switch, spines and core included, has a CA on port 41: none of them
    is a leaf, and the levels are those of the fat tree."""
    fabric = fabric_from_file(SELENE)
    names = _names(fabric)
    by_level = {
        lvl: sorted(n for s, n in names.items() if fabric.levels[s] == lvl) for lvl in (1, 2, 3)
    }
    assert fabric.height == 3
    assert by_level[1] == ["LG01-01", "LG02-01", "LG08-01", "LG09-01"]
    assert by_level[2] == ["CSPINE1-01", "CSPINE2-01"]
    assert by_level[3] == ["CCORE1-001"]
    assert len(fabric.aggregation_nodes) == 7 == len(fabric.levels)
    assert fabric.warnings == []


def test_aggregation_nodes_have_no_ports_targets_or_hosts():
    fabric = fabric_from_file(SELENE)
    an = set(fabric.aggregation_nodes)
    assert all(fabric.topo.nodes[a].desc == AN_DESC for a in an)
    assert {n.id for n in fabric.topo.cas()}.isdisjoint(an)
    # neither the aggregation node's port nor the switch port 41 cabled to it
    assert not [fp for fp in fabric.ports.values() if fp.node_id in an or fp.peer.node in an]
    assert not [t for t in fabric.targets() if t.node_desc == AN_DESC]
    assert all(fp.num != 41 for fp in fabric.ports.values() if fp.is_switch)
    hosts = host_ports(fabric)
    assert len(hosts) == 15 and all(h.startswith("luna-") for h in hosts)
    assert len(fabric.uplinks(0)) == 15
    # each leaf has two cables to its spine: the aggregation node adds no uplink capacity
    assert fabric.uplink_capacity_bytes_per_s(1) == 8 * HDR
    assert "7 aggregation nodes left out" in fabric.summary()


def _sharp_text(**edits: tuple[str, str]) -> str:
    text = SHARP.read_text()
    for old, new in edits.values():
        assert old in text
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize(
    "edits",
    [
        pytest.param({}, id="description, devid and system image"),
        pytest.param(
            {
                "desc": (AN_DESC, "an01 mlx5_0"),
                "sys": SYS,
            },
            id="devid only",
        ),
        pytest.param(
            {"desc": (AN_DESC, "an01 mlx5_0"), "dev": ("devid=0xcf09", "devid=0x1021")},
            id="system image GUID of its switch only",
        ),
        pytest.param(
            {"sys": SYS, "dev": ("devid=0xcf09", "devid=0x1021")},
            id="description only",
        ),
    ],
)
def test_each_rule_recognises_an_aggregation_node(edits):
    fabric = fabric_from_text(_sharp_text(**edits), "sharp")
    assert len(fabric.aggregation_nodes) == 4
    assert fabric.height == 2 and sorted(fabric.levels.values()) == [1, 1, 2, 2]
    assert len(fabric.uplinks(0)) == 4
    assert "an01" not in host_ports(fabric)


def test_a_host_is_no_aggregation_node():
    """Without any of the three signs the internal CAs are hosts again, and the fabric is
    refused as before: the rules do not fire on hosts."""
    text = _sharp_text(desc=(AN_DESC, "an01 mlx5_0"), sys=SYS, dev=("devid=0xcf09", "devid=0x1021"))
    topo = parse_ibnetdiscover(text, "sharp")
    assert topo.aggregation_nodes() == []
    with pytest.raises(TopologyError, match="both at level 1"):
        Fabric(topo, source="sharp")


def test_aggregation_nodes_survive_a_round_trip():
    topo = parse_ibnetdiscover(SHARP.read_text(), "sharp")
    again = parse_ibnetdiscover(format_ibnetdiscover(topo), "again")
    assert [n.id for n in again.aggregation_nodes()] == [n.id for n in topo.aggregation_nodes()]
    assert {n.id: (n.devid, n.sysimgguid) for n in again.nodes.values()} == {
        n.id: (n.devid, n.sysimgguid) for n in topo.nodes.values()
    }
    assert topo.nodes["H-fc6a1c0300b00009"].devid == 0xCF09


# -- other layouts --------------------------------------------------------------------
def _links(fabric: Fabric) -> set[tuple[object, ...]]:
    return {(fp.key, fp.peer, fp.role, fp.lid, fp.link_type) for fp in fabric.ports.values()}


def test_ibdiagnet_port_labels_are_read():
    plain, labelled = fabric_from_file(SHARP), fabric_from_file(SHARP_IBDIAG)
    assert "(1/3/1)" in SHARP_IBDIAG.read_text()
    assert "(B9D0F0/0/0/1)(a088c20300c00002)" in SHARP_IBDIAG.read_text()
    assert _links(labelled) == _links(plain) and len(_links(plain)) == 16
    assert labelled.topo.port_guids == plain.topo.port_guids
    assert labelled.aggregation_nodes == plain.aggregation_nodes
    assert labelled.topo.warnings == []


def _switch_ports(fabric: Fabric) -> set[tuple[object, ...]]:
    """Every switch port with its far end named by what both layouts know: a switch's node
    id, a CA's port GUID."""
    out = set()
    for fp in fabric.ports.values():
        if fp.is_switch:
            peer = fabric.topo.nodes[fp.peer.node]
            far = peer.id if peer.kind == "switch" else fabric.topo.port_guids[fp.peer]
            out.add((fp.key, far, fp.peer.num, fp.role, fp.level, fp.lid, fp.link_type))
    return out


def test_a_ports_list_gives_the_same_fat_tree():
    """``ibnetdiscover -p`` of the same fabric: same switches, levels, roles, LIDs and
    capacities; CAs are keyed by port GUID, as the list has no CA node GUID."""
    assert is_ports_list(SHARP_PORTS.read_text()) and not is_ports_list(SHARP.read_text())
    full, plist = fabric_from_file(SHARP), fabric_from_file(SHARP_PORTS)
    assert plist.levels == full.levels
    assert _switch_ports(plist) == _switch_ports(full) and len(_switch_ports(full)) == 12
    assert len(plist.aggregation_nodes) == 4
    full_hosts = {h: [full.ports[k].lid for k in ks] for h, ks in host_ports(full).items()}
    list_hosts = {h: [plist.ports[k].lid for k in ks] for h, ks in host_ports(plist).items()}
    assert list_hosts == full_hosts == {"cn001": [6], "cn003": [8], "sm01": [1]}
    assert {fp.node_guid for fp in plist.uplinks(0)} == {
        full.topo.port_guids[Port(fp.node_id, fp.num)] for fp in full.uplinks(0)
    }
    for lvl in range(plist.height + 1):
        assert plist.uplink_capacity_bytes_per_s(lvl) == full.uplink_capacity_bytes_per_s(lvl)


def test_a_ports_list_line_it_cannot_read():
    lines = SHARP_PORTS.read_text().splitlines()
    bad = "\n".join([*lines[:3], "SW 3 x garbage", *lines[3:]]) + "\n"
    with pytest.raises(TopologyError, match=r":4: cannot parse port line"):
        parse_ports_list(bad, "p")
    topo = parse_topology_text(bad, "p", strict=False)
    assert len(topo.warnings) == 1 and len(topo.links) == 12


def test_a_terminal_log_without_tabs_is_read():
    """A PuTTY log of ibnetdiscover loses its tabs: ``Switch41 "S-..."#``."""
    text = SHARP.read_text().replace("\t", "")
    assert 'Switch5 "S-fc6a1c0300b00001"#' in text
    assert _links(fabric_from_text(text, "log")) == _links(fabric_from_file(SHARP))


def test_grouping_lines_are_no_error_even_when_strict():
    topo = parse_ibnetdiscover(MANPAGE.read_text(), "man", strict=True)
    assert len(topo.switches()) == 2 and len(topo.cas()) == 4 and len(topo.links) == 7


@pytest.mark.parametrize("path", [SHARP_IBDIAG, SHARP])
def test_a_layout_it_cannot_read_fails_as_parsing_not_as_topology(path):
    """When most port lines cannot be read, the error says so, instead of a misleading
    "not a fat tree ... connected to no leaf switch"."""
    text = re.sub(r"^\[(\d+)\]", r"[\1]{x}", path.read_text(), flags=re.MULTILINE)
    with pytest.raises(TopologyError, match=r"parsing failed: 24 of 24 port lines") as err:
        fabric_from_text(text, "odd")
    assert "fat tree" not in str(err.value)
    # one stray port line is still only a warning
    lines = path.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("[1]"))
    lines[first] = lines[first].replace("[1]", "[1]{x}", 1)
    fabric = fabric_from_text("\n".join(lines), "one")
    assert fabric.height == 2 and any("cannot parse port line" in w for w in fabric.topo.warnings)


# -- vendor-default descriptions ------------------------------------------------------
@pytest.mark.parametrize(
    ("desc", "default"),
    [
        ("MT4129 ConnectX7 Mellanox Technologies", True),
        ("MT23108 InfiniHost Mellanox Technologies", True),
        (AN_DESC, True),
        ("MT4131 ConnectX8   Mellanox Technologies", True),
        ("ConnectX7", True),
        ("cn001 mlx5_0", False),
        ("selene-login-01 HCA-2", False),
        ("connectx-node01 mlx5_0", False),
    ],
)
def test_vendor_default_descriptions(desc, default):
    assert is_vendor_default(desc) is default
    assert (HostMatcher().hostname(desc) is None) is default
    assert (HostMatcher(r"^(\S+?)(?:-|\s)").hostname(desc) is None) is default


def test_vendor_default_descriptions_name_no_host_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="ibqos.fabric.model"):
        fabric = fabric_from_file(MANPAGE, root_guids=[0x5442BA00003080])
    unnamed = [m for m in fabric.warnings if "vendor-default" in m]
    assert len(unnamed) == 1
    assert "4 CA(s)" in unnamed[0] and "'MT23108 InfiniHost Mellanox Technologies'" in unnamed[0]
    assert sum("vendor-default" in r.getMessage() for r in caplog.records) == 1
    assert host_ports(fabric) == {}
    assert "MT23108" not in {n.hostname for n in fabric.topo.cas()}
    assert {n.hostname for n in fabric.topo.cas()} == {n.id for n in fabric.topo.cas()}
    # their ports are still measured (levels, targets), only no job gets them
    assert len(fabric.uplinks(0)) == 5


def test_one_vendor_default_host_among_named_ones():
    fabric = fabric_from_file(SHARP)
    assert sorted(host_ports(fabric)) == ["cn001", "cn003", "sm01"]
    assert [w for w in fabric.warnings if "vendor-default" in w] == [
        f"{SHARP}: 1 CA(s) have a vendor-default NodeDescription, e.g. H-a088c20300c00002 "
        "('MT4129 ConnectX7 Mellanox Technologies'): they name no host, so no job gets their "
        "ports (set the descriptions on the hosts, e.g. with rdma-ndd)"
    ]
