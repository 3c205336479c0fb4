"""Tests for ibqos.fabric.xgft: the XGFT spec parser and the lab's fat-tree generator.

Expectations are computed from the XGFT definition (docs/design.md §2, Öhring et al.):
level-i switches have m_i children, every level-(i-1) element has w_i parents; the
structure is checked through the names the generator gives (``sw-L<level>-<index>``,
``cnNNNN mlx5_R``) with the test's own graph walks, not through ibqos.fabric.topology helpers.
"""

from __future__ import annotations

import math
import re
from collections import Counter, deque

import pytest

from ibqos.errors import TopologyError
from ibqos.fabric.topology import Node, Port, Topology, format_ibnetdiscover
from ibqos.fabric.xgft import XgftSpec, build_xgft, parse_xgft
from tests.support.paths import TESTS

DATA = TESTS / "data"
RECORDED = {
    "2;8,4;1,2": DATA / "lab-xgft-2_8.4_1.2" / "fabric.net",
    "3;8,4,4;1,2,2": DATA / "lab-xgft-3_8.4.4_1.2.2" / "fabric.net",
}
# spec -> (h, m, w, elements per level 0..h)
SHAPES = {
    "2;8,4;1,2": (2, (8, 4), (1, 2), (32, 4, 2)),
    "3;8,4,4;1,2,2": (3, (8, 4, 4), (1, 2, 2), (128, 16, 8, 4)),
    "1;4;1": (1, (4,), (1,), (4, 1)),
    "2;4,2;2,2": (2, (4, 2), (2, 2), (8, 2 * 2, 2 * 2)),  # two rails: one HCA per leaf parent
}
_SWITCH_DESC = re.compile(r"^sw-L(\d+)-(\d{4,})$")
_HOST_DESC = re.compile(r"^cn(\d{4,}) mlx5_(\d+)$")
SM_DESC = "opensm01 mlx5_0"


# the lab builds single-rail trees only (w1 > 1 is several subnets: see test below)
BUILT = sorted(t for t, shape in SHAPES.items() if shape[2][0] == 1)


@pytest.fixture(scope="module", params=BUILT)
def built(request: pytest.FixtureRequest) -> tuple[str, Topology]:
    return request.param, build_xgft(parse_xgft(request.param))


def level_of(node: Node) -> int:
    """Level from the generated name: switches ``sw-L<l>-..``, CAs 0."""
    if node.kind != "switch":
        return 0
    m = _SWITCH_DESC.match(node.desc)
    assert m is not None, node.desc
    return int(m.group(1))


def host_of(node: Node) -> tuple[int, int]:
    """(0-based host number, rail) of a ``cnNNNN mlx5_R`` HCA."""
    m = _HOST_DESC.match(node.desc)
    assert m is not None, node.desc
    return int(m.group(1)) - 1, int(m.group(2))


def peers(topo: Topology, node_id: str) -> list[tuple[Port, Node]]:
    out = []
    for p in topo.ports(node_id):
        q = topo.peer(p)
        assert q is not None
        out.append((p, topo.nodes[q.node]))
    return out


def host_cas(topo: Topology) -> list[Node]:
    return [n for n in topo.cas() if n.desc != SM_DESC]


# --- parse_xgft -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("2;8,4;1,2", XgftSpec(2, (8, 4), (1, 2))),
        ("3;8,4,4;1,2,2", XgftSpec(3, (8, 4, 4), (1, 2, 2))),
        ("1;4;1", XgftSpec(1, (4,), (1,))),
        ("2;4,2;2,2", XgftSpec(2, (4, 2), (2, 2))),
        (" 2 ; 8, 4 ; 1, 2", XgftSpec(2, (8, 4), (1, 2))),
        ("2;1,1;1,1", XgftSpec(2, (1, 1), (1, 1))),
    ],
)
def test_parse_xgft_good(text: str, spec: XgftSpec) -> None:
    assert parse_xgft(text) == spec


@pytest.mark.parametrize("text", ["2;8,4;1,2", "3;8,4,4;1,2,2", "1;4;1"])
def test_spec_str_round_trip(text: str) -> None:
    assert str(parse_xgft(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("2;8,4", id="missing-w"),
        pytest.param("x;1;1", id="height-not-a-number"),
        pytest.param("2;8,4;1", id="too-few-w"),
        pytest.param("2;8;1,2", id="too-few-m"),
        pytest.param("3;8,4;1,2", id="height-too-big"),
        pytest.param("1;8,4;1,2", id="height-too-small"),
        pytest.param("0;1;1", id="height-zero"),
        pytest.param("2;8,0;1,2", id="m-zero"),
        pytest.param("2;8,4;0,2", id="w-zero"),
        pytest.param("2;8,,4;1,2", id="empty-m"),
        pytest.param("2;8,4;1,2,", id="trailing-comma"),
        pytest.param("2;8,4;1,2;", id="trailing-semicolon"),
        pytest.param("2;-8,4;1,2", id="negative"),
        pytest.param("2;8.5,4;1,2", id="fraction"),
        pytest.param("1;4;2", id="one-level-two-parents"),
    ],
)
def test_parse_xgft_bad_names_spec(text: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_xgft(text)
    assert text in str(info.value)


def test_build_xgft_lid_limit_boundary() -> None:
    """hosts + switches + the OpenSM host must fit ibsim's 30720 routable LIDs."""
    assert len(build_xgft(parse_xgft("2;30717,1;1,1")).cas()) == 30718
    with pytest.raises(TopologyError, match="30721 end ports"):
        build_xgft(parse_xgft("2;30718,1;1,1"))


# --- XgftSpec.count -------------------------------------------------------------------


def test_count_per_level() -> None:
    for text, (h, _, _, counts) in SHAPES.items():
        spec = parse_xgft(text)
        assert [spec.count(level) for level in range(h + 1)] == list(counts), text
        assert spec.hosts == counts[0]
        assert spec.switches == sum(counts[1:])


# --- build_xgft: shape ----------------------------------------------------------------


def test_switches_per_level(built: tuple[str, Topology]) -> None:
    text, topo = built
    h, _, _, counts = SHAPES[text]
    levels = Counter(level_of(s) for s in topo.switches())
    assert levels == {level: counts[level] for level in range(1, h + 1)}


def test_switch_descriptions(built: tuple[str, Topology]) -> None:
    text, topo = built
    h, _, _, counts = SHAPES[text]
    want = {f"sw-L{lvl}-{i:04d}" for lvl in range(1, h + 1) for i in range(1, counts[lvl] + 1)}
    descs = [s.desc for s in topo.switches()]
    assert len(descs) == len(set(descs))
    assert set(descs) == want


def test_host_names(built: tuple[str, Topology]) -> None:
    text, topo = built
    _, _, w, counts = SHAPES[text]
    descs = [n.desc for n in host_cas(topo)]
    want = [f"cn{i:04d} mlx5_{r}" for i in range(1, counts[0] + 1) for r in range(w[0])]
    assert descs == want
    assert [n.desc for n in topo.cas()].count(SM_DESC) == 1
    assert all(n.nports == 1 for n in topo.cas())


def test_opensm_on_spare_port_of_first_leaf(built: tuple[str, Topology]) -> None:
    text, topo = built
    h, m, w, _ = SHAPES[text]
    (sm,) = [n for n in topo.cas() if n.desc == SM_DESC]
    leaf_port = topo.peer(Port(sm.id, 1))
    assert leaf_port is not None
    leaf = topo.nodes[leaf_port.node]
    assert leaf.desc == "sw-L1-0001"
    spare = m[0] + (w[1] if h > 1 else 0) + 1
    assert leaf_port.num == spare == leaf.nports


def test_switch_port_counts(built: tuple[str, Topology]) -> None:
    text, topo = built
    h, m, w, _ = SHAPES[text]
    for sw in topo.switches():
        level = level_of(sw)
        up = w[level] if level < h else 0
        spare = 1 if level == 1 else 0
        assert sw.nports == m[level - 1] + up + spare, sw.desc
        connected = len(list(topo.ports(sw.id)))
        unused_spare = 1 if level == 1 and sw.desc != "sw-L1-0001" else 0
        assert connected == sw.nports - unused_spare, sw.desc


@pytest.mark.parametrize("text", [t for t, shape in SHAPES.items() if shape[2][0] == 1])
def test_leaf_k_holds_hosts_in_order(text: str) -> None:
    """With w1 = 1, leaf k (0-based) holds cn[k*m1+1 .. (k+1)*m1] on ports 1..m1."""
    _, m, _, counts = SHAPES[text]
    topo = build_xgft(parse_xgft(text))
    leaves = {s.desc: s for s in topo.switches() if level_of(s) == 1}
    for k in range(counts[1]):
        leaf = leaves[f"sw-L1-{k + 1:04d}"]
        for j in range(m[0]):
            peer = topo.peer(Port(leaf.id, j + 1))
            assert peer is not None
            assert topo.nodes[peer.node].desc == f"cn{k * m[0] + j + 1:04d} mlx5_0"


def test_multi_rail_is_refused() -> None:
    """w1 = 2 gives each host two HCAs under separate leaf planes: two IB subnets, two SMs."""
    with pytest.raises(TopologyError, match=r"--xgft 2;4,2;2,2: w1 = 2 .*w1 must be 1"):
        build_xgft(parse_xgft("2;4,2;2,2"))


def test_uplinks_to_distinct_parents(built: tuple[str, Topology]) -> None:
    """Every non-top element has w_{i+1} uplinks to distinct level-(i+1) parents."""
    text, topo = built
    h, m, w, _ = SHAPES[text]
    for node in topo.nodes.values():
        if node.desc == SM_DESC:
            continue
        level = level_of(node)
        ups = [(p, n) for p, n in peers(topo, node.id) if level_of(n) == level + 1]
        parents = {n.id for _, n in ups}
        if node.kind == "ca":
            assert len(ups) == 1  # one HCA per rail, each with one parent
        elif level == h:
            assert ups == []
        else:
            assert len(ups) == len(parents) == w[level], node.desc
            assert sorted(p.num for p, _ in ups) == list(
                range(m[level - 1] + 1, m[level - 1] + 1 + w[level])
            )


def test_children_per_switch(built: tuple[str, Topology]) -> None:
    """Every level-i switch has m_i distinct children of level i-1, on ports 1..m_i."""
    text, topo = built
    _, m, _, _ = SHAPES[text]
    for sw in topo.switches():
        level = level_of(sw)
        down = [
            (p, n) for p, n in peers(topo, sw.id) if level_of(n) == level - 1 and n.desc != SM_DESC
        ]
        assert len(down) == len({n.id for _, n in down}) == m[level - 1], sw.desc
        assert sorted(p.num for p, _ in down) == list(range(1, m[level - 1] + 1))


def test_no_links_skip_levels(built: tuple[str, Topology]) -> None:
    _, topo = built
    for link in topo.links:
        a, b = topo.nodes[link.a.node], topo.nodes[link.b.node]
        assert abs(level_of(a) - level_of(b)) == 1, (a.desc, b.desc)


def _subtree_of_hosts(topo: Topology, level: int) -> dict[str, int]:
    """Component of every CA using only switches of level <= *level* (own BFS)."""
    comp: dict[str, int] = {}
    for start in topo.nodes.values():
        if start.kind != "ca" or start.id in comp:
            continue
        comp[start.id] = len(comp)
        label = comp[start.id]
        queue = deque([start.id])
        while queue:
            nid = queue.popleft()
            for _, n in peers(topo, nid):
                if n.id not in comp and level_of(n) <= level:
                    comp[n.id] = label
                    queue.append(n.id)
    return {n.id: comp[n.id] for n in topo.cas()}


def test_xgft_subtree_rule(built: tuple[str, Topology]) -> None:
    """Hosts (same rail) share a level-l subtree iff index // (m1*..*ml) agree."""
    text, topo = built
    h, m, _, _ = SHAPES[text]
    cas = host_cas(topo)
    for level in range(1, h + 1):
        block = math.prod(m[:level])
        sub = _subtree_of_hosts(topo, level)
        for a in cas:
            ia, ra = host_of(a)
            for b in cas:
                ib, rb = host_of(b)
                if ra != rb:
                    continue
                same = ia // block == ib // block
                assert (sub[a.id] == sub[b.id]) == same, (level, a.desc, b.desc)


def test_xgft_ancestors(built: tuple[str, Topology]) -> None:
    """A host has w1*..*wl level-l ancestors, shared exactly by the hosts of its block."""
    text, topo = built
    h, m, w, counts = SHAPES[text]
    frontier: dict[int, set[str]] = {}
    for ca in host_cas(topo):
        frontier.setdefault(host_of(ca)[0], set()).add(ca.id)
    for level in range(1, h + 1):
        for i, nodes in frontier.items():
            frontier[i] = {
                n.id for nid in nodes for _, n in peers(topo, nid) if level_of(n) == level
            }
        block = math.prod(m[:level])
        for i, anc in frontier.items():
            assert len(anc) == math.prod(w[:level]), (level, i)
            for j, other in frontier.items():
                if i // block == j // block:
                    assert anc == other, (level, i, j)
                else:
                    assert not anc & other, (level, i, j)
        assert len(set().union(*frontier.values())) == counts[level]


def test_every_node_reachable_from_opensm_host(built: tuple[str, Topology]) -> None:
    """The lab runs one OpenSM, on opensm01: it can only manage what is cabled to it."""
    _, topo = built
    (sm,) = [n for n in topo.cas() if n.desc == SM_DESC]
    seen = {sm.id}
    queue = deque([sm.id])
    while queue:
        for _, n in peers(topo, queue.popleft()):
            if n.id not in seen:
                seen.add(n.id)
                queue.append(n.id)
    unreachable = sorted(topo.nodes[nid].desc for nid in set(topo.nodes) - seen)
    assert unreachable == []


def test_one_level_tree() -> None:
    topo = build_xgft(parse_xgft("1;4;1"))
    (sw,) = topo.switches()
    assert sw.desc == "sw-L1-0001"
    assert sw.nports == 5
    assert [topo.nodes[n.id].desc for _, n in peers(topo, sw.id)] == [
        "cn0001 mlx5_0",
        "cn0002 mlx5_0",
        "cn0003 mlx5_0",
        "cn0004 mlx5_0",
        SM_DESC,
    ]


# --- identifiers ----------------------------------------------------------------------


def test_guids_and_ids_unique(built: tuple[str, Topology]) -> None:
    _, topo = built
    guids = [n.guid for n in topo.nodes.values()]
    assert None not in guids
    assert len(set(guids)) == len(guids)
    port_guids = list(topo.port_guids.values())
    assert len(port_guids) == len(topo.cas())
    assert len(set(port_guids) | set(guids)) == len(port_guids) + len(guids)
    for node in topo.nodes.values():
        prefix = "S" if node.kind == "switch" else "H"
        assert node.id == f"{prefix}-{node.guid:016x}"


def test_more_end_ports_than_ibsim_routes_is_refused() -> None:
    """65537 leaves would also overflow the 16-bit switch index in the generated GUIDs."""
    spec = parse_xgft("2;1,65537;1,1")
    assert spec.count(1) == 65537
    with pytest.raises(TopologyError, match=r"131076 end ports need LIDs.*30720"):
        build_xgft(spec)


# --- recorded net files ---------------------------------------------------------------


@pytest.mark.parametrize("text", sorted(RECORDED))
def test_net_file_matches_recorded(text: str) -> None:
    """The generator is deterministic: it writes what the lab recorded, byte for byte."""
    got = format_ibnetdiscover(build_xgft(parse_xgft(text))).encode()
    assert got == RECORDED[text].read_bytes()


# --- width and speed ------------------------------------------------------------------


@pytest.mark.parametrize(("width", "speed"), [(1, "SDR"), (4, "HDR"), (12, "FDR10"), (8, "NDR")])
def test_width_and_speed_on_every_link(width: int, speed: str) -> None:
    topo = build_xgft(parse_xgft("2;8,4;1,2"), width, speed)
    assert {(x.width, x.speed) for x in topo.links} == {(width, speed)}
    assert f"{width}x{speed}" in format_ibnetdiscover(topo)


def test_default_width_and_speed_is_4x_edr() -> None:
    topo = build_xgft(parse_xgft("1;4;1"))
    assert {(x.width, x.speed) for x in topo.links} == {(4, "EDR")}


@pytest.mark.parametrize(
    ("width", "speed", "words"),
    [
        (3, "EDR", "--width 3"),
        (0, "EDR", "--width 0"),
        (16, "EDR", "--width 16"),
        (4, "ZDR", "--speed ZDR"),
        (4, "edr", "--speed edr"),
        (4, "", "--speed"),
    ],
)
def test_width_speed_errors(width: int, speed: str, words: str) -> None:
    with pytest.raises(TopologyError) as info:
        build_xgft(parse_xgft("1;4;1"), width, speed)
    assert words in str(info.value)
