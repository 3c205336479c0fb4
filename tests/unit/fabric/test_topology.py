"""Tests for ibqos.fabric.topology: ibnetdiscover parsing/writing, levels, subtrees, link rates.

The fixtures are real ibnetdiscover output recorded from the lab (ibsim + OpenSM 3.3.23)
for the fat trees ``2;8,4;1,2`` and ``3;8,4,4;1,2,2``.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path

import pytest

from ibqos.errors import TopologyError
from ibqos.fabric.topology import (
    Link,
    Node,
    Port,
    Topology,
    format_ibnetdiscover,
    link_rate_bytes_per_s,
    parse_ibnetdiscover,
)
from tests.support.paths import TESTS

DATA = TESTS / "data"
TWO = DATA / "lab-xgft-2_8.4_1.2"
THREE = DATA / "lab-xgft-3_8.4.4_1.2.2"

# (fabric dir, m = children per level, switches per level 1..h, CAs incl. opensm01)
FABRICS = {
    "2-level": (TWO, (8, 4), {1: 4, 2: 2}, 33),
    "3-level": (THREE, (8, 4, 4), {1: 16, 2: 8, 3: 4}, 129),
}
_LEVEL_DESC = re.compile(r"^sw-L(\d+)-\d{4}$")


def load(path: Path) -> Topology:
    return parse_ibnetdiscover((path / "ibnetdiscover.txt").read_text(), "ibnetdiscover.txt")


@pytest.fixture(scope="module", params=sorted(FABRICS))
def fabric(request: pytest.FixtureRequest) -> tuple[str, Topology]:
    return request.param, load(FABRICS[request.param][0])


def host_index(node: Node) -> int:
    """0-based compute host number of a ``cnNNNN mlx5_0`` CA."""
    return int(node.hostname.removeprefix("cn")) - 1


def link_key(link: Link) -> tuple[frozenset[Port], int, str]:
    return frozenset((link.a, link.b)), link.width, link.speed


# --- recorded fabrics -----------------------------------------------------------------


def test_node_counts(fabric: tuple[str, Topology]) -> None:
    name, topo = fabric
    _, _, per_level, cas = FABRICS[name]
    assert len(topo.switches()) == sum(per_level.values())
    assert len(topo.cas()) == cas
    assert len(topo.nodes) == sum(per_level.values()) + cas


def test_opensm_host_is_a_ca(fabric: tuple[str, Topology]) -> None:
    _, topo = fabric
    sm = [n for n in topo.cas() if n.desc == "opensm01 mlx5_0"]
    assert len(sm) == 1
    assert sm[0].hostname == "opensm01"


def test_every_link_once(fabric: tuple[str, Topology]) -> None:
    name, topo = fabric
    text = (FABRICS[name][0] / "ibnetdiscover.txt").read_text()
    port_lines = sum(1 for line in text.splitlines() if re.match(r"^\[\d+\]", line))
    assert port_lines % 2 == 0
    assert len(topo.links) == port_lines // 2
    ends = [end for link in topo.links for end in (link.a, link.b)]
    assert len(ends) == len(set(ends))  # no port in two links


@pytest.mark.parametrize(
    ("name", "links"), [("2-level", 33 + 4 * 2), ("3-level", 129 + 16 * 2 + 8 * 2)]
)
def test_link_count_matches_tree_shape(name: str, links: int) -> None:
    assert len(load(FABRICS[name][0]).links) == links


def test_links_are_4x_edr(fabric: tuple[str, Topology]) -> None:
    _, topo = fabric
    assert {(link.width, link.speed) for link in topo.links} == {(4, "EDR")}
    assert {link.rate_bytes_per_s for link in topo.links} == {12.5e9}


def test_peer_is_symmetric(fabric: tuple[str, Topology]) -> None:
    _, topo = fabric
    for link in topo.links:
        assert topo.peer(link.a) == link.b
        assert topo.peer(link.b) == link.a
        assert topo.link_at(link.a) is link


def test_lids_are_switch_port0_and_ca_ports(fabric: tuple[str, Topology]) -> None:
    name, topo = fabric
    _, _, per_level, cas = FABRICS[name]
    switch_lids = {p: lid for p, lid in topo.lids.items() if topo.nodes[p.node].kind == "switch"}
    ca_lids = {p: lid for p, lid in topo.lids.items() if topo.nodes[p.node].kind == "ca"}
    assert {p.num for p in switch_lids} == {0}
    assert len(switch_lids) == sum(per_level.values())
    assert {p.num for p in ca_lids} == {1}
    assert len(ca_lids) == cas
    # OpenSM hands out LIDs 1..N without gaps (LMC 0)
    assert sorted(topo.lids.values()) == list(range(1, sum(per_level.values()) + cas + 1))


@pytest.mark.parametrize(
    ("node_id", "port", "lid"),
    [
        ("S-0c42a10300010004", 0, 8),  # sw-L1-0004 "base port 0 lid 8"
        ("S-0c42a10300010001", 0, 3),  # sw-L1-0001
        ("H-0c42a10301000060", 1, 32),  # cn0025
        ("H-0c42a10301000080", 1, 1),  # opensm01 (the SM takes LID 1)
    ],
)
def test_recorded_lids_2_level(node_id: str, port: int, lid: int) -> None:
    assert load(TWO).lids[Port(node_id, port)] == lid


def test_port_guids(fabric: tuple[str, Topology]) -> None:
    _, topo = fabric
    for ca in topo.cas():
        # the recorded fabric's HCAs have port GUID = node GUID + 1
        assert ca.guid is not None
        assert topo.port_guids[Port(ca.id, 1)] == ca.guid + 1
        assert topo.port_guid(Port(ca.id, 1)) == ca.guid + 1
        assert ca.id == f"H-{ca.guid:016x}"
    for sw in topo.switches():
        assert sw.guid is not None
        assert sw.id == f"S-{sw.guid:016x}"
        assert topo.port_guid(Port(sw.id, 1)) == sw.guid


def test_cn0025_record_2_level() -> None:
    topo = load(TWO)
    node = topo.nodes["H-0c42a10301000060"]
    assert node == Node(
        "H-0c42a10301000060", "ca", 1, "cn0025 mlx5_0", 0x0C42A10301000060, 0x0C42A10301000060, 0
    )
    assert topo.port_guids[Port(node.id, 1)] == 0x0C42A10301000061
    assert topo.peer(Port(node.id, 1)) == Port("S-0c42a10300010004", 1)


def test_hostname_of_recorded_cas(fabric: tuple[str, Topology]) -> None:
    name, topo = fabric
    hosts = {n.hostname for n in topo.cas()}
    nhosts = FABRICS[name][3] - 1
    assert hosts == {f"cn{i:04d}" for i in range(1, nhosts + 1)} | {"opensm01"}


@pytest.mark.parametrize(
    ("desc", "hostname"),
    [
        ("cn0001 mlx5_0", "cn0001"),
        ("opensm01 mlx5_0", "opensm01"),
        ("  node7   HCA-1 ", "node7"),
        ("single", "single"),
        ("", "H-0000000000000001"),
    ],
)
def test_node_hostname(desc: str, hostname: str) -> None:
    assert Node("H-0000000000000001", "ca", 1, desc).hostname == hostname


def test_switch_levels_match_descriptions(fabric: tuple[str, Topology]) -> None:
    name, topo = fabric
    levels = topo.switch_levels()
    assert set(levels) == {s.id for s in topo.switches()}
    for sw in topo.switches():
        m = _LEVEL_DESC.match(sw.desc)
        assert m is not None
        assert levels[sw.id] == int(m.group(1))
    assert Counter(levels.values()) == FABRICS[name][2]


def test_leaves_are_switches_with_cas(fabric: tuple[str, Topology]) -> None:
    _, topo = fabric
    levels = topo.switch_levels()
    for sw in topo.switches():
        peers = [topo.peer(p) for p in topo.ports(sw.id)]
        has_ca = any(q is not None and topo.nodes[q.node].kind == "ca" for q in peers)
        assert has_ca == (levels[sw.id] == 1)


def test_subtrees_group_hosts_by_block(fabric: tuple[str, Topology]) -> None:
    """Hosts i, j share a level-l subtree iff i // (m1*..*ml) == j // (m1*..*ml)."""
    name, topo = fabric
    m = FABRICS[name][1]
    hosts = [n for n in topo.cas() if n.hostname != "opensm01"]
    for level in range(1, len(m) + 1):
        block = 1
        for mi in m[:level]:
            block *= mi
        sub = topo.subtrees(level)
        assert set(sub) == {n.id for n in topo.cas()}
        for a in hosts:
            for b in hosts:
                same = host_index(a) // block == host_index(b) // block
                assert (sub[a.id] == sub[b.id]) == same, (level, a.desc, b.desc)


def test_subtrees_opensm_host_with_first_leaf(fabric: tuple[str, Topology]) -> None:
    _, topo = fabric
    sub = topo.subtrees(1)
    by_desc = {n.desc: n.id for n in topo.cas()}
    assert sub[by_desc["opensm01 mlx5_0"]] == sub[by_desc["cn0001 mlx5_0"]]
    assert sub[by_desc["opensm01 mlx5_0"]] != sub[by_desc["cn0009 mlx5_0"]]


def test_subtree_count_per_level(fabric: tuple[str, Topology]) -> None:
    name, topo = fabric
    m = FABRICS[name][1]
    nhosts = FABRICS[name][3] - 1
    block = 1
    for level, mi in enumerate(m, 1):
        block *= mi
        assert len(set(topo.subtrees(level).values())) == nhosts // block


def test_switch_levels_unreachable_switch() -> None:
    topo = Topology()
    topo.add_node(Node("S-1", "switch", 2, "leaf"))
    topo.add_node(Node("S-2", "switch", 2, "island"))
    topo.add_node(Node("H-1", "ca", 1, "cn0001 mlx5_0"))
    topo.add_link(Link(Port("H-1", 1), Port("S-1", 1)))
    with pytest.raises(TopologyError, match="S-2"):
        topo.switch_levels()


# --- round trip -----------------------------------------------------------------------


def test_format_round_trip(fabric: tuple[str, Topology]) -> None:
    _, topo = fabric
    again = parse_ibnetdiscover(format_ibnetdiscover(topo), "formatted")
    assert again.nodes == topo.nodes
    assert list(again.nodes) == list(topo.nodes)
    assert {link_key(x) for x in again.links} == {link_key(x) for x in topo.links}
    assert len(again.links) == len(topo.links)
    assert again.lids == topo.lids
    assert again.port_guids == topo.port_guids


def test_format_writes_every_connected_port_once_per_end(fabric: tuple[str, Topology]) -> None:
    _, topo = fabric
    text = format_ibnetdiscover(topo)
    port_lines = [line for line in text.splitlines() if line.startswith("[")]
    assert len(port_lines) == 2 * len(topo.links)


def test_format_unknown_lid_is_zero() -> None:
    topo = Topology()
    topo.add_node(Node("S-0000000000000010", "switch", 1, "leaf", 0x10))
    topo.add_node(Node("H-0000000000000020", "ca", 1, "cn0001 mlx5_0", 0x20))
    topo.add_link(Link(Port("H-0000000000000020", 1), Port("S-0000000000000010", 1), 1, "QDR"))
    text = format_ibnetdiscover(topo)
    assert "base port 0 lid 0 lmc 0" in text
    assert "1xQDR" in text
    again = parse_ibnetdiscover(text, "t")
    assert [link_key(x) for x in again.links] == [link_key(x) for x in topo.links]


# --- link rates -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("width", "speed", "bits_per_s"),
    [
        (1, "SDR", 2.0e9),  # 2.5 Gbaud 8b/10b
        (4, "SDR", 8.0e9),
        (4, "DDR", 16.0e9),
        (4, "QDR", 32.0e9),
        (4, "FDR10", 40.0e9),
        (4, "FDR", 4 * 14.0625e9 * 64 / 66),
        (4, "EDR", 100.0e9),
        (4, "HDR", 200.0e9),
        (2, "HDR", 100.0e9),
        (4, "NDR", 400.0e9),
        (12, "EDR", 300.0e9),
    ],
)
def test_link_rate_bytes_per_s(width: int, speed: str, bits_per_s: float) -> None:
    assert link_rate_bytes_per_s(width, speed) == pytest.approx(bits_per_s / 8, rel=1e-12)


def test_link_rate_sdr_1x_quarter_gigabyte() -> None:
    assert link_rate_bytes_per_s(1, "SDR") == 0.25e9


def test_link_rate_property_uses_width_and_speed() -> None:
    link = Link(Port("a", 1), Port("b", 1), 1, "HDR")
    assert link.rate_bytes_per_s == pytest.approx(50e9 / 8)


# --- bad input ------------------------------------------------------------------------

SW = 'switchguid=0x10\nSwitch\t2 "S-0000000000000010"\t\t# "leaf" base port 0 lid 1 lmc 0'
SW_PORT = '[1]\t"H-0000000000000020"[1](21)\t\t# "cn0001 mlx5_0" lid 2 4xEDR'
CA = 'caguid=0x20\nCa\t1 "H-0000000000000020"\t\t# "cn0001 mlx5_0"'
CA_PORT = '[1](21) \t"S-0000000000000010"[1]\t\t# lid 2 lmc 0 "leaf" lid 1 4xEDR'
GOOD = f"{SW}\n{SW_PORT}\n\n{CA}\n{CA_PORT}\n"  # lines: 1-2 switch, 3 port, 5-6 ca, 7 port


def test_minimal_good_file() -> None:
    topo = parse_ibnetdiscover(GOOD, "t.net")
    assert [n.kind for n in topo.nodes.values()] == ["switch", "ca"]
    assert topo.links == [Link(Port("S-0000000000000010", 1), Port("H-0000000000000020", 1))]
    assert topo.lids == {Port("S-0000000000000010", 0): 1, Port("H-0000000000000020", 1): 2}
    assert topo.port_guids == {Port("H-0000000000000020", 1): 0x21}
    assert topo.nodes["S-0000000000000010"].guid == 0x10


def test_global_settings_and_comments_are_skipped() -> None:
    text = "#\n# Topology file\n#\nvendid=0x0\ndevid=0x0\nsysimgguid=0x10\n" + GOOD
    assert len(parse_ibnetdiscover(text, "t.net").links) == 1


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        pytest.param(f"{SW}\nthis is garbage\n", 3, "cannot parse", id="garbage-line"),
        pytest.param(f"{SW}\n[1 broken\n", 3, "cannot parse port line", id="bad-port-line"),
        pytest.param(f"{SW_PORT}\n{SW}\n", 1, "outside a node", id="port-before-node"),
        pytest.param(f"{SW}\n\n{SW_PORT}\n", 4, "outside a node", id="port-after-blank"),
        pytest.param("[1 broken\n", 1, "cannot parse port line", id="bad-port-line-outside"),
        pytest.param(f'{SW}\n\nSwitch 36 "S-x\n', 4, "node header", id="bad-node-header"),
        pytest.param(f'{SW}\n\nCa two "H-x"\n', 4, "node header", id="bad-ca-header"),
        pytest.param(
            f'{SW}\n[2]\t"H-nowhere"[1]\t\t# "x" lid 5 4xEDR\n', 3, "H-nowhere", id="unknown-node"
        ),
        pytest.param(
            f'{SW}\n[3]\t"H-0000000000000020"[1]\t\t# "x" lid 2 4xEDR\n\n{CA}\n',
            3,
            "port 3",
            id="port-beyond-nports",
        ),
        pytest.param(
            f'{SW}\n[1]\t"H-0000000000000020"[2]\t\t# "x" lid 2 4xEDR\n\n{CA}\n',
            3,
            "port 2",
            id="remote-port-beyond-nports",
        ),
        pytest.param(
            f"{SW}\n{SW_PORT.replace('4xEDR', '4xZDR')}\n\n{CA}\n", 3, "4xZDR", id="unknown-speed"
        ),
        pytest.param(
            f"{SW}\n{SW_PORT.replace('4xEDR', '3xEDR')}\n\n{CA}\n", 3, "3xEDR", id="unknown-width"
        ),
        pytest.param(f"{SW}\n\n{SW}\n", 5, "twice", id="node-defined-twice"),
    ],
)
def test_bad_input_names_source_and_line(text: str, line: int, words: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_ibnetdiscover(text, "t.net")
    msg = str(info.value)
    assert f"t.net:{line}:" in msg
    assert words in msg


@pytest.mark.parametrize(
    "text",
    [
        f"{SW_PORT}\n{SW}\n",  # port line before any node
        f"{SW}\n\n{SW_PORT}\n",  # port line after the record ended
        "[1 broken\n",
        f'{SW}\n\nSwitch 36 "S-x\n',  # node header
        f'{SW}\n[2]\t"H-nowhere"[1]\t\t# "x" lid 5 4xEDR\n',  # unknown node
        f"{SW}\n\n{SW}\n",  # node twice
    ],
)
def test_structure_errors_raise_even_when_not_strict(text: str) -> None:
    with pytest.raises(TopologyError, match=r"^t\.net:\d+: "):
        parse_ibnetdiscover(text, "t.net", strict=False)


def test_inconsistent_link_ends() -> None:
    """A[1] -> B[1], but B[1] -> C[1]: the line of B's port is named."""
    text = "\n".join(
        [
            'Switch\t1 "S-a"\t\t# "A"',
            '[1]\t"S-b"[1]\t\t# "B" lid 0 4xEDR',
            "",
            'Switch\t1 "S-b"\t\t# "B"',
            '[1]\t"S-c"[1]\t\t# "C" lid 0 4xEDR',
            "",
            'Switch\t1 "S-c"\t\t# "C"',
            '[1]\t"S-b"[1]\t\t# "B" lid 0 4xEDR',
            "",
        ]
    )
    with pytest.raises(TopologyError, match=r"^t\.net:5: "):
        parse_ibnetdiscover(text, "t.net")


def test_inconsistent_link_ends_other_order() -> None:
    """C[1] -> B[1] is described after A[1] -> B[1] and B[1] -> A[1]."""
    text = "\n".join(
        [
            'Switch\t1 "S-a"\t\t# "A"',
            '[1]\t"S-b"[1]\t\t# "B" lid 0 4xEDR',
            "",
            'Switch\t1 "S-b"\t\t# "B"',
            '[1]\t"S-a"[1]\t\t# "A" lid 0 4xEDR',
            "",
            'Switch\t1 "S-c"\t\t# "C"',
            '[1]\t"S-b"[1]\t\t# "B" lid 0 4xEDR',
            "",
        ]
    )
    with pytest.raises(TopologyError, match=r"^t\.net:8: "):
        parse_ibnetdiscover(text, "t.net")


def test_consistent_link_ends_make_one_link() -> None:
    text = "\n".join(
        [
            'Switch\t1 "S-a"\t\t# "A"',
            '[1]\t"S-b"[1]\t\t# "B" lid 0 2xHDR',
            "",
            'Switch\t1 "S-b"\t\t# "B"',
            '[1]\t"S-a"[1]\t\t# "A" lid 0 2xHDR',
            "",
        ]
    )
    topo = parse_ibnetdiscover(text, "t.net")
    assert topo.links == [Link(Port("S-a", 1), Port("S-b", 1), 2, "HDR")]


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "vendid=0x0\n"])
def test_empty_file(text: str) -> None:
    with pytest.raises(TopologyError, match=r"^t\.net: no nodes"):
        parse_ibnetdiscover(text, "t.net")


def test_error_message_is_one_line() -> None:
    with pytest.raises(TopologyError) as info:
        parse_ibnetdiscover(f"{SW}\n\nSwitch " + "x" * 200 + "\n", "t.net")
    assert "\n" not in str(info.value)
    assert len(str(info.value)) < 150  # the bad line is shortened


# --- strict=False: lines the parser skips, with a warning ------------------------------


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ibqos.fabric.topology"]


def test_unknown_line_in_a_record_is_skipped_with_a_warning(caplog) -> None:
    text = f"{SW}\nibwarn: [4177] _do_madrpc: recv failed: Connection timed out\n{SW_PORT}\n\n"
    text += f"{CA}\n{CA_PORT}\n"
    with caplog.at_level(logging.WARNING):
        topo = parse_ibnetdiscover(text, "t.net", strict=False)
    assert len(topo.links) == 1  # the port line after the bad line still counts
    assert topo.warnings == [
        "t.net:3: cannot parse line in the record of S-0000000000000010 ('leaf'), skipped: "
        "'ibwarn: [4177] _do_madrpc: recv failed: Connection timed out'"
    ]
    assert warnings_of(caplog) == topo.warnings


def test_unknown_line_outside_a_record(caplog) -> None:
    with caplog.at_level(logging.WARNING):
        topo = parse_ibnetdiscover(f"Frame 1 (guid 0xabc)\n{GOOD}", "t.net", strict=False)
    assert topo.warnings == ["t.net:1: cannot parse line, skipped: 'Frame 1 (guid 0xabc)'"]
    assert len(topo.links) == 1
    # ibnetdiscover -g's chassis headers are part of the layout, not noise
    grouped = parse_ibnetdiscover(f"Chassis 1 (guid 0xabc)\n{GOOD}", "t.net", strict=True)
    assert grouped.warnings == [] and len(grouped.links) == 1


def test_bad_port_line_loses_only_that_end(caplog) -> None:
    """The switch's line is broken, the CA's line still describes the link."""
    with caplog.at_level(logging.WARNING):
        topo = parse_ibnetdiscover(f"{SW}\n[1 broken\n\n{CA}\n{CA_PORT}\n", "t.net", strict=False)
    assert topo.links == [Link(Port("H-0000000000000020", 1), Port("S-0000000000000010", 1))]
    assert len(topo.warnings) == 1
    assert topo.warnings[0].startswith("t.net:3: cannot parse port line in the record of S-")


def test_many_bad_lines_are_counted_not_all_logged(caplog) -> None:
    text = f"{SW}\n" + "junk\n" * 25 + f"{SW_PORT}\n\n{CA}\n{CA_PORT}\n"
    with caplog.at_level(logging.WARNING):
        topo = parse_ibnetdiscover(text, "t.net", strict=False)
    assert len(topo.warnings) == 25
    logged = warnings_of(caplog)
    assert len(logged) == 11
    assert logged[-1] == "t.net: 15 more lines skipped"


def test_strict_by_default_tolerant_on_request() -> None:
    text = f"{SW}\nibwarn: x\n{SW_PORT}\n\n{CA}\n{CA_PORT}\n"
    with pytest.raises(TopologyError, match=r"^t\.net:3: cannot parse line: 'ibwarn: x'$"):
        parse_ibnetdiscover(text, "t.net")
    with pytest.raises(TopologyError, match=r"^t\.net:3: unknown link type '4x\?\?\?'"):
        parse_ibnetdiscover(two_ends("4x???", "4xNDR"), "t.net")
    assert len(parse_ibnetdiscover(text, "t.net", strict=False).links) == 1


def test_recorded_fabrics_parse_without_warnings(fabric: tuple[str, Topology]) -> None:
    assert fabric[1].warnings == []


# --- real-format variants ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("comment", "expected"),
    [
        ('"cn0001 mlx5_0" lid 2 4xEDR', (4, "EDR")),
        ('"cn0001 mlx5_0" lid 2 4xNDR', (4, "NDR")),
        ('"cn0001 mlx5_0" lid 2 4xHDR', (4, "HDR")),
        ('"cn0001 mlx5_0" lid 2 2xHDR', (2, "HDR")),
        ('"cn0001 mlx5_0" lid 2 4xSDR', (4, "SDR")),
        ('"cn0001 mlx5_0" lid 2 4xFDR10', (4, "FDR10")),
        ('"cn0001 mlx5_0" lid 2 4xFDR', (4, "FDR")),
        ('"cn0001 mlx5_0" lid 2 1xQDR', (1, "QDR")),
        ('"cn0001 mlx5_0" lid 2 8xDDR', (8, "DDR")),
        ('"cn0001 mlx5_0" lid 2 12xEDR', (12, "EDR")),
        ('"cn0001 mlx5_0" lid 2 4xXDR', (4, "XDR")),
        ('"cn0001 mlx5_0" lid 2 4xNDR s=4 w=2 v=4', (4, "NDR")),  # ibnetdiscover -f
        ('"cn0001 4xEDR card" lid 2 2xNDR', (2, "NDR")),  # a type in the description
        (' lid 2 lmc 0 "leaf" lid 1 4xHDR', (4, "HDR")),  # a CA port's comment
        ('"cn0001 mlx5_0" lid 2', None),
        ("", None),
        ('"cn0001 mlx5_0" lid 2 4x???', "4x???"),
        ('"cn0001 mlx5_0" lid 2 ??EDR', "??EDR"),
        ('"cn0001 mlx5_0" lid 2 3xEDR', "3xEDR"),
        ('"cn0001 mlx5_0" lid 2 4xZDR', "4xZDR"),
    ],
)
def test_link_type_in_comment(comment: str, expected: object) -> None:
    """A (width, speed), None for the default 4xSDR, or the unknown type's text."""
    text = f'{SW}\n[1]\t"H-0000000000000020"[1](21) \t\t# {comment}\n\n{CA}\n'
    if isinstance(expected, str):
        want = re.escape(f"t.net:3: unknown link type {expected!r}")
        with pytest.raises(TopologyError, match=want):
            parse_ibnetdiscover(text, "t.net")
        return
    topo = parse_ibnetdiscover(text, "t.net")
    assert [(x.width, x.speed) for x in topo.links] == [expected or (4, "SDR")]


def two_ends(sw_type: str, ca_type: str) -> str:
    return (
        f"{SW}\n{SW_PORT.replace('4xEDR', sw_type)}\n\n{CA}\n{CA_PORT.replace('4xEDR', ca_type)}\n"
    )


def test_unknown_link_type_taken_from_the_far_end(caplog) -> None:
    with caplog.at_level(logging.WARNING):
        topo = parse_ibnetdiscover(two_ends("4x???", "4xNDR"), "t.net", strict=False)
    assert [(x.width, x.speed) for x in topo.links] == [(4, "NDR")]
    assert topo.warnings == [
        "t.net:3: unknown link type '4x???' of \"S-0000000000000010\"[1] in the record of "
        "S-0000000000000010 ('leaf')"
    ]


def test_unknown_link_type_at_both_ends_is_an_error() -> None:
    with pytest.raises(TopologyError, match=r"^t\.net:3: unknown link type '\?\?EDR'"):
        parse_ibnetdiscover(two_ends("??EDR", "??EDR"), "t.net", strict=False)


def test_missing_link_type_taken_from_the_far_end() -> None:
    topo = parse_ibnetdiscover(two_ends("", "2xHDR"), "t.net")
    assert [(x.width, x.speed) for x in topo.links] == [(2, "HDR")]
    assert topo.warnings == []


def test_first_end_wins_when_both_name_a_type() -> None:
    topo = parse_ibnetdiscover(two_ends("4xHDR", "4xEDR"), "t.net")
    assert [(x.width, x.speed) for x in topo.links] == [(4, "HDR")]


def test_grouping_ext_ports_and_remote_ca_guid() -> None:
    """``ibnetdiscover -g`` adds [ext N]; a CA-to-CA link has "(guid) " after the remote."""
    text = "\n".join(
        [
            "caguid=0x20",
            'Ca\t1 "H-0000000000000020"\t\t# "a mlx5_0"',
            '[1](21) \t"H-0000000000000030"[1][ext 3] (31) \t\t# lid 2 lmc 0 "b mlx5_0" '
            "lid 3 4xHDR",
            "",
            "caguid=0x30",
            'Ca\t1 "H-0000000000000030"\t\t# "b mlx5_0"',
            '[1][ext 3](31) \t"H-0000000000000020"[1] (21) \t\t# lid 3 lmc 0 "a mlx5_0" '
            "lid 2 4xHDR",
            "",
        ]
    )
    topo = parse_ibnetdiscover(text, "t.net")
    assert topo.links == [
        Link(Port("H-0000000000000020", 1), Port("H-0000000000000030", 1), 4, "HDR")
    ]
    assert topo.lids == {Port("H-0000000000000020", 1): 2, Port("H-0000000000000030", 1): 3}
    assert topo.warnings == []


def test_enhanced_port_0_and_quote_in_description() -> None:
    text = (
        "switchguid=0x10(10)\n"
        'Switch\t2 "S-0000000000000010"\t\t# "MF0;sw:"Q"/U1" enhanced port 0 lid 9 lmc 0\n'
    )
    topo = parse_ibnetdiscover(text, "t.net")
    node = topo.nodes["S-0000000000000010"]
    assert node.desc == 'MF0;sw:"Q"/U1'
    assert topo.lids == {Port(node.id, 0): 9}


def test_router_ports_get_lids_and_guids() -> None:
    text = (
        f'{SW}\n[2]\t"R-0000000000000040"[1](41) \t\t# "gw" lid 4 4xEDR\n\n'
        "rtguid=0x40\n"
        'Rt\t1 "R-0000000000000040"\t\t# "gw"\n'
        '[1](41) \t"S-0000000000000010"[2]\t\t# lid 4 lmc 0 "leaf" lid 1 4xEDR\n'
    )
    topo = parse_ibnetdiscover(text, "t.net")
    assert topo.nodes["R-0000000000000040"].kind == "router"
    assert topo.lids[Port("R-0000000000000040", 1)] == 4
    assert topo.port_guids[Port("R-0000000000000040", 1)] == 0x41


def test_components_give_switches_their_subtree(fabric: tuple[str, Topology]) -> None:
    _, topo = fabric
    levels = topo.switch_levels()
    for level in range(1, max(levels.values()) + 1):
        comp = topo.components(level, levels)
        assert {n for n in topo.nodes if n not in comp} == {
            s for s, lvl in levels.items() if lvl > level
        }
        sub = topo.subtrees(level, levels)
        assert all(comp[c] == sub[c] for c in sub)
        # every switch of level <= level shares the subtree of the CAs below it
        for sw, lvl in levels.items():
            if lvl == 1:
                cas = [q.node for p in topo.ports(sw) if (q := topo.peer(p)) and q.node in sub]
                assert {sub[c] for c in cas} == {comp[sw]}
