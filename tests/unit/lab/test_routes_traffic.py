"""Tests for ibqos.fabric.routes (LFT dump, Router) and ibqos.lab.traffic (patterns, model).

Routes come from OpenSM's real LFT dumps recorded in the lab, over the recorded
ibnetdiscover topologies of the fat trees ``2;8,4;1,2`` and ``3;8,4,4;1,2,2``.
Switch levels are taken from the generated names (``sw-L<level>-<index>``) and host LIDs
from the recorded text with the test's own regular expressions.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ibqos.attribute.patterns import traffic_matrix
from ibqos.errors import LabError
from ibqos.fabric.routes import Router, parse_lft_dump
from ibqos.fabric.topology import Node, Port, Topology, parse_ibnetdiscover
from ibqos.jobs.model import Job
from ibqos.lab.traffic import (
    VL_XMIT_WAIT_FIELDS,
    XMIT_WAIT_FIELD,
    XMIT_WAIT_MAX,
    XMIT_WAIT_TICKS_PER_S,
    TrafficModel,
    comm_seconds,
)
from tests.support.paths import TESTS

DATA = TESTS / "data"
TWO = DATA / "lab-xgft-2_8.4_1.2"
THREE = DATA / "lab-xgft-3_8.4.4_1.2.2"
EDR_4X = 12.5e9

_SWITCH_HEAD = re.compile(r'^Switch\s+\d+\s+"([^"]+)"\s+# "(sw-L(\d+)-\d+)" base port 0 lid (\d+)')
_HOST_PORT = re.compile(
    r'^\[(\d+)\]\s+"H-[0-9a-f]+"\[1\]\([0-9a-f]+\)\s+# "(\S+) mlx5_0" lid (\d+)'
)


def read(path: Path, name: str) -> str:
    return (path / name).read_text()


def recorded_hosts(path: Path) -> dict[str, tuple[int, str, int, int]]:
    """hostname -> (its LID, leaf description, leaf LID, leaf port), from ibnetdiscover.txt."""
    out: dict[str, tuple[int, str, int, int]] = {}
    leaf: tuple[str, int] | None = None
    for line in read(path, "ibnetdiscover.txt").splitlines():
        if m := _SWITCH_HEAD.match(line):
            leaf = (m.group(2), int(m.group(4)))
        elif (m := _HOST_PORT.match(line)) and leaf is not None:
            out[m.group(2)] = (int(m.group(3)), leaf[0], leaf[1], int(m.group(1)))
        elif not line.strip():
            leaf = None
    return out


def recorded_switch_lids(path: Path) -> dict[str, int]:
    """switch description -> LID, from ibnetdiscover.txt."""
    text = read(path, "ibnetdiscover.txt")
    return {m.group(2): int(m.group(4)) for m in map(_SWITCH_HEAD.match, text.splitlines()) if m}


def level_of(node: Node) -> int:
    if node.kind != "switch":
        return 0
    m = re.match(r"^sw-L(\d+)-", node.desc)
    assert m is not None
    return int(m.group(1))


def uplinks(topo: Topology, level: int) -> list[Port]:
    """Ports of level-*level* switches whose peer is a level-(level+1) switch."""
    out = []
    for sw in topo.switches():
        if level_of(sw) != level:
            continue
        for p in topo.ports(sw.id):
            peer = topo.peer(p)
            assert peer is not None
            if level_of(topo.nodes[peer.node]) == level + 1:
                out.append(p)
    return out


def host_port(topo: Topology, hostname: str) -> Port:
    (node,) = [n for n in topo.cas() if n.hostname == hostname]
    return Port(node.id, 1)


def cn(*numbers: int) -> tuple[str, ...]:
    return tuple(f"cn{i:04d}" for i in numbers)


def make_job(
    nodes: tuple[str, ...],
    pattern: str = "ring",
    rate: float = 1e9,
    duty: float = 0.5,
    period: float = 0.01,
    job_id: str = "j1",
    halo_dims: tuple[int, ...] | None = None,
    seed: int | None = None,
    matrix: tuple[tuple[float, ...], ...] | None = None,
) -> Job:
    return Job(
        id=job_id,
        nodes=nodes,
        pattern=pattern,
        rate_bytes_per_s=rate,
        duty=duty,
        period_s=period,
        halo_dims=halo_dims,
        seed=seed,
        matrix=matrix,
    )


@pytest.fixture(scope="module")
def two() -> tuple[Topology, dict[int, dict[int, int]], Router]:
    topo = parse_ibnetdiscover(read(TWO, "ibnetdiscover.txt"), "2-level")
    lfts = parse_lft_dump(read(TWO, "opensm-lfts.dump"))
    return topo, lfts, Router(topo, lfts)


@pytest.fixture(scope="module")
def three() -> tuple[Topology, dict[int, dict[int, int]], Router]:
    topo = parse_ibnetdiscover(read(THREE, "ibnetdiscover.txt"), "3-level")
    lfts = parse_lft_dump(read(THREE, "opensm-lfts.dump"))
    return topo, lfts, Router(topo, lfts)


# --- parse_lft_dump -------------------------------------------------------------------


@pytest.mark.parametrize("path", [TWO, THREE], ids=["2-level", "3-level"])
def test_lft_one_table_per_switch(path: Path) -> None:
    tables = parse_lft_dump(read(path, "opensm-lfts.dump"))
    assert set(tables) == set(recorded_switch_lids(path).values())


@pytest.mark.parametrize("path", [TWO, THREE], ids=["2-level", "3-level"])
def test_lft_every_table_routes_every_host(path: Path) -> None:
    tables = parse_lft_dump(read(path, "opensm-lfts.dump"))
    host_lids = {lid for lid, _, _, _ in recorded_hosts(path).values()}
    assert len(host_lids) == len(recorded_hosts(path))
    for lid, table in tables.items():
        assert host_lids <= set(table), lid
        assert table[lid] == 0  # a switch's own LID goes to its management port 0


@pytest.mark.parametrize("path", [TWO, THREE], ids=["2-level", "3-level"])
def test_lft_entries_as_in_the_text(path: Path) -> None:
    """Every ``0x<lid> <port>`` line of a section lands in that switch's table."""
    text = read(path, "opensm-lfts.dump")
    expected: dict[int, dict[int, int]] = {}
    current: dict[int, int] = {}
    for line in text.splitlines():
        if head := re.match(r"^Unicast lids \[0-\d+\] of switch Lid (\d+) ", line):
            current = expected.setdefault(int(head.group(1)), {})
        elif entry := re.match(r"^0x([0-9a-f]{4}) (\d{3}) # ", line):
            current[int(entry.group(1), 16)] = int(entry.group(2))
    assert sum(map(len, expected.values())) == sum(
        1 for line in text.splitlines() if line.startswith("0x")
    )
    assert parse_lft_dump(text) == expected


def test_lft_spine_misses_other_spine() -> None:
    """OpenSM leaves out LIDs it has no route for: sw-L2-0001 (LID 4) to sw-L2-0002 (LID 6)."""
    tables = parse_lft_dump(read(TWO, "opensm-lfts.dump"))
    assert len(tables) == 6
    assert 6 not in tables[4]
    assert 4 not in tables[6]
    assert len(tables[3]) == 39


@pytest.mark.parametrize("path", [TWO, THREE], ids=["2-level", "3-level"])
def test_lft_leaf_routes_own_hosts_down_in_order(path: Path) -> None:
    tables = parse_lft_dump(read(path, "opensm-lfts.dump"))
    hosts = recorded_hosts(path)
    leaves = sorted({(desc, lid) for _, desc, lid, _ in hosts.values()})
    assert len(leaves) == (4 if path == TWO else 16)
    for k, (desc, leaf_lid) in enumerate(leaves):
        assert desc == f"sw-L1-{k + 1:04d}"
        for j in range(8):
            lid = hosts[f"cn{8 * k + j + 1:04d}"][0]
            assert tables[leaf_lid][lid] == j + 1, (desc, j)


def test_lft_opensm_host_on_spare_port_2_level() -> None:
    tables = parse_lft_dump(read(TWO, "opensm-lfts.dump"))
    lid, desc, leaf_lid, port = recorded_hosts(TWO)["opensm01"]
    assert (lid, desc, port) == (1, "sw-L1-0001", 11)
    assert tables[leaf_lid][lid] == 11


def test_lft_values_of_first_entries() -> None:
    text = (
        "Unicast lids [0-3] of switch Lid 3 guid 0x0c42a10300010001 ('sw-L1-0001'):\n"
        "0x0001 011 # Channel Adapter portguid 0x0c42a10301000081: 'opensm01 mlx5_0'\n"
        "0x0003 000 # Switch portguid 0x0c42a10300010001: 'sw-L1-0001'\n"
        "0x00ff 036 # far away\n"
        "3 lids dumped\n"
        "\n"
        "Unicast lids [0-1] of switch Lid 4 guid 0x0c42a10300020001 ('sw-L2-0001'):\n"
        "0x0001 001 # x\n"
    )
    assert parse_lft_dump(text) == {3: {1: 11, 3: 0, 255: 36}, 4: {1: 1}}


HEADER = "Unicast lids [0-3] of switch Lid 3 guid 0x0c42a10300010001 ('sw-L1-0001'):"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("0x0001 011 # before any header\n", 1, id="entry-before-header"),
        pytest.param(f"{HEADER}\nthis is garbage\n", 2, id="garbage"),
        pytest.param(f"{HEADER}\n0x0001 abc\n", 2, id="port-not-a-number"),
        pytest.param(f"{HEADER}\n0x0001 011\n0xzz01 002\n", 3, id="lid-not-hex"),
        pytest.param(f"{HEADER}\n1 011\n", 2, id="lid-without-0x"),
        pytest.param("Unicast lids of switch Lid 3\n", 1, id="bad-header"),
        pytest.param(f"{HEADER}\n0x0001 011\nlids dumped\n", 3, id="bad-footer"),
    ],
)
def test_lft_bad_line(text: str, line: int) -> None:
    with pytest.raises(LabError) as info:
        parse_lft_dump(text, "lfts.dump")
    assert f"lfts.dump:{line}:" in str(info.value)


# --- Router ---------------------------------------------------------------------------


def route_one(
    topo: Topology, router: Router, src: str, dst: str, weight: float = 1e9
) -> tuple[dict[Port, float], dict[Port, float]]:
    s, d = host_port(topo, src), host_port(topo, dst)
    xmit, rcv = router.route(
        np.array([router.port_index[s]]),
        np.array([topo.lids[d]]),
        np.array([router.port_index[d]]),
        np.array([weight]),
    )
    return _nonzero(router, xmit), _nonzero(router, rcv)


def _nonzero(router: Router, load: np.ndarray) -> dict[Port, float]:
    return {router.ports[i]: float(load[i]) for i in np.nonzero(load)[0]}


def test_router_same_leaf_flow(two: tuple[Topology, dict[int, dict[int, int]], Router]) -> None:
    topo, _, router = two
    xmit, rcv = route_one(topo, router, "cn0001", "cn0002", 3e9)
    leaf = "S-0c42a10300010001"  # sw-L1-0001: cn0001 on port 1, cn0002 on port 2
    assert xmit == {host_port(topo, "cn0001"): 3e9, Port(leaf, 2): 3e9}
    assert rcv == {Port(leaf, 1): 3e9, host_port(topo, "cn0002"): 3e9}


def test_router_cross_leaf_flow(two: tuple[Topology, dict[int, dict[int, int]], Router]) -> None:
    topo, _, router = two
    xmit, rcv = route_one(topo, router, "cn0001", "cn0009", 2e9)
    up = [p for p in uplinks(topo, 1) if p in xmit]
    assert len(up) == 1
    assert topo.nodes[up[0].node].desc == "sw-L1-0001"
    assert rcv[host_port(topo, "cn0009")] == 2e9
    # the recorded LFT of sw-L1-0001 sends LID 16 (cn0009) out of port 9, to sw-L2-0001,
    # whose port 2 leads to sw-L1-0002, whose port 1 holds cn0009
    assert xmit == {
        host_port(topo, "cn0001"): 2e9,
        Port("S-0c42a10300010001", 9): 2e9,
        Port("S-0c42a10300020001", 2): 2e9,
        Port("S-0c42a10300010002", 1): 2e9,
    }
    assert sum(rcv.values()) == sum(xmit.values())


def test_router_3_level_flows(three: tuple[Topology, dict[int, dict[int, int]], Router]) -> None:
    topo, _, router = three
    up1, up2 = set(uplinks(topo, 1)), set(uplinks(topo, 2))
    # cn0001 and cn0009 share a level-2 subtree (hosts 1-32), cn0128 does not
    xmit, rcv = route_one(topo, router, "cn0001", "cn0009")
    assert (len(up1 & set(xmit)), len(up2 & set(xmit))) == (1, 0)
    assert rcv[host_port(topo, "cn0009")] == 1e9
    xmit, rcv = route_one(topo, router, "cn0001", "cn0128")
    assert (len(up1 & set(xmit)), len(up2 & set(xmit))) == (1, 1)
    assert len(xmit) == 6  # host, leaf up, L2 up, L3 down, L2 down, leaf down
    assert rcv[host_port(topo, "cn0128")] == 1e9


@pytest.mark.parametrize("fabric", ["two", "three"])
def test_router_conservation(fabric: str, request: pytest.FixtureRequest) -> None:
    topo, _, router = request.getfixturevalue(fabric)
    cas = [Port(n.id, 1) for n in topo.cas()]
    rng = np.random.default_rng(1)
    src_i, dst_i = np.nonzero(~np.eye(len(cas), dtype=bool))
    weight = rng.uniform(1e6, 1e9, size=len(src_i))
    index = np.array([router.port_index[p] for p in cas])
    lids = np.array([topo.lids[p] for p in cas])
    xmit, rcv = router.route(index[src_i], lids[dst_i], index[dst_i], weight)
    ca_index = np.array([router.port_index[p] for p in cas])
    assert xmit[ca_index].sum() == pytest.approx(weight.sum(), rel=1e-12)
    assert rcv[ca_index].sum() == pytest.approx(weight.sum(), rel=1e-12)
    sent = np.bincount(src_i, weights=weight, minlength=len(cas))
    got = np.bincount(dst_i, weights=weight, minlength=len(cas))
    np.testing.assert_allclose(xmit[ca_index], sent, rtol=1e-12)
    np.testing.assert_allclose(rcv[ca_index], got, rtol=1e-12)
    # what leaves a port enters its peer
    for i, p in enumerate(router.ports):
        peer = topo.peer(p)
        assert peer is not None
        assert rcv[router.port_index[peer]] == pytest.approx(xmit[i], rel=1e-12)


def test_router_no_route_to_switch_lid(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    topo, _, router = two
    src = router.port_index[host_port(topo, "cn0001")]
    with pytest.raises(LabError, match="no route"):
        router.route(np.array([src]), np.array([3]), np.array([src]), np.array([1.0]))


def test_router_wrong_destination(two: tuple[Topology, dict[int, dict[int, int]], Router]) -> None:
    topo, _, router = two
    src = router.port_index[host_port(topo, "cn0001")]
    wrong = router.port_index[host_port(topo, "cn0003")]
    lid = topo.lids[host_port(topo, "cn0002")]
    with pytest.raises(LabError, match="wrong port"):
        router.route(np.array([src]), np.array([lid]), np.array([wrong]), np.array([1.0]))


def test_router_needs_every_switch_table() -> None:
    topo = parse_ibnetdiscover(read(TWO, "ibnetdiscover.txt"), "2-level")
    lfts = parse_lft_dump(read(TWO, "opensm-lfts.dump"))
    del lfts[6]  # sw-L2-0002
    with pytest.raises(LabError, match="sw-L2-0002"):
        Router(topo, lfts)


# --- traffic_matrix -------------------------------------------------------------------


def test_all_to_all_matrix() -> None:
    m = traffic_matrix(make_job(cn(1, 2, 3, 4, 5), "all-to-all", rate=4e9))
    expected = np.full((5, 5), 1e9)
    np.fill_diagonal(expected, 0.0)
    np.testing.assert_allclose(m, expected)
    np.testing.assert_allclose(m.sum(axis=1), 4e9)


@pytest.mark.parametrize("n", [2, 3, 6])
def test_ring_matrix(n: int) -> None:
    m = traffic_matrix(make_job(cn(*range(1, n + 1)), "ring", rate=2e9))
    expected = np.zeros((n, n))
    for i in range(n):
        expected[i, (i + 1) % n] = 2e9
    np.testing.assert_array_equal(m, expected)


def test_single_node_job_sends_nothing() -> None:
    for pattern in ("all-to-all", "ring", "halo", "random-pairs"):
        np.testing.assert_array_equal(traffic_matrix(make_job(cn(1), pattern)), np.zeros((1, 1)))


def _grid_neighbours(i: int, dims: tuple[int, ...]) -> set[int]:
    """Periodic grid, node order fills the last dimension fastest."""
    coords = []
    rest = i
    for size in reversed(dims):
        coords.append(rest % size)
        rest //= size
    coords.reverse()
    out = set()
    for d, size in enumerate(dims):
        for step in (1, -1):
            nb = list(coords)
            nb[d] = (nb[d] + step) % size
            index = 0
            for c, s in zip(nb, dims, strict=True):
                index = index * s + c
            if index != i:
                out.add(index)
    return out


@pytest.mark.parametrize(
    ("dims", "n"), [((2, 4), 8), ((2, 2, 2), 8), ((1, 4), 4), ((3, 3), 9), (None, 5)]
)
def test_halo_matrix(dims: tuple[int, ...] | None, n: int) -> None:
    m = traffic_matrix(make_job(cn(*range(1, n + 1)), "halo", rate=6e9, halo_dims=dims))
    for i in range(n):
        nbs = _grid_neighbours(i, dims or (n,))
        expected = np.zeros(n)
        expected[list(nbs)] = 6e9 / len(nbs)
        np.testing.assert_allclose(m[i], expected, err_msg=f"node {i}")


def test_halo_2x4_neighbours_of_node_0() -> None:
    m = traffic_matrix(make_job(cn(*range(1, 9)), "halo", rate=3e9, halo_dims=(2, 4)))
    # grid row 0 = nodes 0..3, row 1 = nodes 4..7: node 0 talks to 1, 3 (row) and 4 (column)
    assert set(np.nonzero(m[0])[0]) == {1, 3, 4}
    np.testing.assert_allclose(m[0, [1, 3, 4]], 1e9)


def _assert_perfect_matching(m: np.ndarray, rate: float) -> None:
    n = len(m)
    np.testing.assert_array_equal(m, m.T)
    assert np.all(np.diag(m) == 0)
    for i in range(n):
        row = np.nonzero(m[i])[0]
        assert len(row) == 1, i
        assert m[i, row[0]] == rate


@pytest.mark.parametrize("seed", [0, 1, 42, None])
def test_random_pairs_is_a_perfect_matching(seed: int | None) -> None:
    m = traffic_matrix(make_job(cn(*range(1, 9)), "random-pairs", rate=5e8, seed=seed))
    _assert_perfect_matching(m, 5e8)


def test_random_pairs_is_deterministic_for_a_seed() -> None:
    job = make_job(cn(*range(1, 13)), "random-pairs", seed=1234)
    np.testing.assert_array_equal(traffic_matrix(job), traffic_matrix(job))
    other = make_job(cn(*range(1, 13)), "random-pairs", seed=1234, job_id="other")
    np.testing.assert_array_equal(traffic_matrix(job), traffic_matrix(other))


def test_random_pairs_depends_on_the_seed() -> None:
    pairings = {
        traffic_matrix(make_job(cn(*range(1, 13)), "random-pairs", seed=s)).tobytes()
        for s in range(10)
    }
    assert len(pairings) > 1


def test_random_pairs_without_seed_depends_on_id() -> None:
    pairings = {
        traffic_matrix(make_job(cn(*range(1, 13)), "random-pairs", job_id=str(k))).tobytes()
        for k in range(10)
    }
    assert len(pairings) > 1


def test_random_pairs_odd_node_count() -> None:
    m = traffic_matrix(make_job(cn(1, 2, 3, 4, 5), "random-pairs", rate=1e9, seed=3))
    np.testing.assert_array_equal(m, m.T)
    sums = sorted(m.sum(axis=1))
    assert sums == [0.0, 1e9, 1e9, 1e9, 1e9]


def test_matrix_rows_normalized() -> None:
    weights = ((0.0, 1.0, 3.0), (2.0, 0.0, 2.0), (0.0, 0.0, 0.0))
    m = traffic_matrix(make_job(cn(1, 2, 3), "matrix", rate=4e9, matrix=weights))
    expected = np.array([[0.0, 1e9, 3e9], [2e9, 0.0, 2e9], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(m, expected)


# --- comm_seconds ---------------------------------------------------------------------

JOB = make_job(cn(1, 2), duty=0.25, period=0.01)  # communicates 2.5 ms of every 10 ms


@pytest.mark.parametrize(("start", "k"), [(0.0, 1), (0.0, 3), (2.0, 10), (5.5, 7)])
def test_comm_seconds_whole_periods(start: float, k: int) -> None:
    assert comm_seconds(JOB, start, start, start + k * 0.01) == pytest.approx(k * 0.0025)


def test_comm_seconds_whole_periods_later() -> None:
    assert comm_seconds(JOB, 1.0, 1.02, 1.05) == pytest.approx(3 * 0.0025)


@pytest.mark.parametrize(
    ("t0", "t1", "busy"),
    [
        (0.0, 0.001, 0.001),  # inside the first burst
        (0.001, 0.002, 0.001),
        (0.002, 0.004, 0.0005),  # burst ends at 2.5 ms
        (0.003, 0.009, 0.0),  # compute phase only
        (0.009, 0.0115, 0.0015),  # next burst starts at 10 ms
        (0.0, 0.015, 0.005),
        (0.004, 0.004, 0.0),
    ],
)
def test_comm_seconds_partial_windows(t0: float, t1: float, busy: float) -> None:
    assert comm_seconds(JOB, 0.0, t0, t1) == pytest.approx(busy, abs=1e-12)


@pytest.mark.parametrize(
    ("t0", "t1", "busy"),
    [(0.0, 5.0, 0.0), (9.0, 10.0, 0.0), (9.0, 10.001, 0.001), (9.0, 10.02, 0.005)],
)
def test_comm_seconds_before_start(t0: float, t1: float, busy: float) -> None:
    assert comm_seconds(JOB, 10.0, t0, t1) == pytest.approx(busy, abs=1e-12)


def test_comm_seconds_full_duty() -> None:
    job = make_job(cn(1, 2), duty=1.0, period=0.01)
    assert comm_seconds(job, 0.0, 0.0033, 0.0271) == pytest.approx(0.0271 - 0.0033)


# --- TrafficModel ---------------------------------------------------------------------


def build_model(
    fabric: tuple[Topology, dict[int, dict[int, int]], Router],
) -> TrafficModel:
    topo, lfts, _ = fabric
    hosts: dict[str, list[Port]] = {}
    for ca in topo.cas():
        hosts.setdefault(ca.hostname, []).extend(topo.ports(ca.id))
    return TrafficModel(topo, Router(topo, lfts), hosts)


def indices(model: TrafficModel, ports: list[Port]) -> np.ndarray:
    return np.array([model.router.port_index[p] for p in ports])


def ca_ports(topo: Topology) -> list[Port]:
    return [Port(n.id, 1) for n in topo.cas()]


A2A = make_job(cn(*range(1, 17)), "all-to-all", rate=1e9, duty=0.5, period=0.01, job_id="a2a")
# halo 2x4 on two leaves: grid row 0 = cn0017-cn0020 (leaf 3), row 1 = cn0025-cn0028 (leaf 4)
HALO = make_job(
    cn(17, 18, 19, 20, 25, 26, 27, 28),
    "halo",
    rate=3e9,
    duty=0.3,
    period=0.02,
    job_id="halo",
    halo_dims=(2, 4),
)


def test_model_levels(two: tuple[Topology, dict[int, dict[int, int]], Router]) -> None:
    model = build_model(two)
    assert model.uplink_levels == 1
    assert model.capacity.shape == (len(model.router.ports),)
    assert set(model.capacity) == {EDR_4X}


def test_truth_matches_counters_2_level(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    topo = two[0]
    model = build_model(two)
    model.set_jobs((A2A, HALO))
    for dt in (0.013, 0.05, 0.037):  # 0.1 s in uneven ticks
        model.tick(dt)
    truth = np.sum([j.truth for j in model.jobs.values()], axis=0)
    cas = indices(model, ca_ports(topo))
    up1 = indices(model, uplinks(topo, 1))
    assert len(up1) == 8
    assert truth[0] == pytest.approx(model.xmit_bytes[cas].sum(), rel=1e-6)
    assert truth[0] == pytest.approx(model.rcv_bytes[cas].sum(), rel=1e-6)
    assert truth[1] == pytest.approx(model.xmit_bytes[up1].sum(), rel=1e-6)


def test_truth_values_2_level(two: tuple[Topology, dict[int, dict[int, int]], Router]) -> None:
    model = build_model(two)
    model.set_jobs((A2A, HALO))
    model.tick(0.1)
    # a2a: 10 periods x 5 ms busy; 16 senders, 8 of each one's 15 peers on the other leaf
    busy = 0.05
    a2a = model.jobs["a2a"].truth
    assert a2a[0] == pytest.approx(16 * 1e9 * busy, rel=1e-9)
    assert a2a[1] == pytest.approx(16 * 1e9 * 8 / 15 * busy, rel=1e-9)
    # halo: 5 periods x 6 ms busy; 1 of each node's 3 neighbours is on the other leaf
    busy = 0.03
    halo = model.jobs["halo"].truth
    assert halo[0] == pytest.approx(8 * 3e9 * busy, rel=1e-9)
    assert halo[1] == pytest.approx(8 * 3e9 / 3 * busy, rel=1e-9)


def test_truth_matches_counters_3_level(
    three: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    topo = three[0]
    model = build_model(three)
    assert model.uplink_levels == 2
    # leaves 1, 2 (level-2 subtree 0), 5 (subtree 1) and 9 (subtree 2)
    job = make_job(cn(1, 9, 33, 65), "all-to-all", rate=3e9, duty=1.0, period=0.01)
    model.set_jobs((job,))
    model.tick(0.1)
    truth = model.jobs["j1"].truth
    rate_busy = 3e9 * 0.1
    np.testing.assert_allclose(truth, [4 * rate_busy, 4 * rate_busy, 10 / 3 * rate_busy])
    cas = indices(model, ca_ports(topo))
    assert truth[0] == pytest.approx(model.xmit_bytes[cas].sum(), rel=1e-6)
    assert truth[0] == pytest.approx(model.rcv_bytes[cas].sum(), rel=1e-6)
    assert truth[1] == pytest.approx(
        model.xmit_bytes[indices(model, uplinks(topo, 1))].sum(), rel=1e-6
    )
    assert truth[2] == pytest.approx(
        model.xmit_bytes[indices(model, uplinks(topo, 2))].sum(), rel=1e-6
    )


def test_last_rate_is_bytes_per_second_of_last_tick(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    model = build_model(two)
    model.set_jobs((A2A,))
    model.tick(0.1)
    np.testing.assert_allclose(model.jobs["a2a"].last_rate, model.jobs["a2a"].truth / 0.1)


@pytest.mark.parametrize("duty", [1.0, 0.5])
def test_capacity_throttling(
    duty: float, two: tuple[Topology, dict[int, dict[int, int]], Router]
) -> None:
    topo = two[0]
    model = build_model(two)
    heavy = make_job(cn(1, 9), "ring", rate=5e10, duty=duty, period=0.01, job_id="heavy")
    model.set_jobs((heavy,))
    dt = 0.01
    before = model.xmit_bytes.copy()
    for _ in range(5):
        model.tick(dt)
        delta = model.xmit_bytes - before
        before = model.xmit_bytes.copy()
        assert np.all(delta <= model.capacity * dt * (1 + 1e-9))
        assert delta.max() == pytest.approx(EDR_4X * dt, rel=1e-9)  # throttled to the link
    src = model.router.port_index[host_port(topo, "cn0001")]
    assert model.xmit_bytes[src] == pytest.approx(5 * EDR_4X * dt, rel=1e-9)
    assert model.jobs["heavy"].truth[0] == pytest.approx(2 * 5 * EDR_4X * dt, rel=1e-9)


def test_throttling_spares_jobs_on_other_ports(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    model = build_model(two)
    heavy = make_job(cn(1, 9), "ring", rate=5e10, duty=1.0, job_id="heavy")
    light = make_job(cn(17, 25), "ring", rate=1e9, duty=1.0, job_id="light")
    model.set_jobs((heavy, light))
    model.tick(0.01)
    assert model.jobs["light"].truth[0] == pytest.approx(2 * 1e9 * 0.01, rel=1e-9)
    assert model.jobs["heavy"].truth[0] == pytest.approx(2 * EDR_4X * 0.01, rel=1e-9)


def test_removed_job_keeps_truth_and_stops(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    model = build_model(two)
    model.set_jobs((A2A, HALO))
    model.tick(0.05)
    model.set_jobs((A2A,))
    assert set(model.jobs) == {"a2a"}
    assert set(model.finished) == {"halo"}
    halo = model.finished["halo"]
    kept = halo.truth.copy()
    assert kept[0] > 0
    counters = model.xmit_bytes.copy()
    model.tick(0.05)
    np.testing.assert_array_equal(model.finished["halo"].truth, kept)
    only_halo = (halo.xmit > 0) & (model.jobs["a2a"].xmit == 0)
    assert only_halo.any()
    np.testing.assert_array_equal(model.xmit_bytes[only_halo], counters[only_halo])
    a2a_ports = model.jobs["a2a"].xmit > 0
    assert np.all(model.xmit_bytes[a2a_ports] > counters[a2a_ports])


def test_no_jobs_no_traffic(two: tuple[Topology, dict[int, dict[int, int]], Router]) -> None:
    model = build_model(two)
    model.set_jobs((A2A,))
    model.tick(0.02)
    model.set_jobs(())
    counters = model.xmit_bytes.copy(), model.rcv_bytes.copy()
    model.tick(0.02)
    assert model.time == pytest.approx(0.04)
    np.testing.assert_array_equal(model.xmit_bytes, counters[0])
    np.testing.assert_array_equal(model.rcv_bytes, counters[1])
    assert set(model.finished) == {"a2a"}


def test_unchanged_job_keeps_phase_and_history(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    model = build_model(two)
    model.set_jobs((A2A,))
    model.tick(0.003)
    first = model.jobs["a2a"]
    model.set_jobs((A2A, HALO))
    assert model.jobs["a2a"] is first
    assert first.start == 0.0
    assert model.jobs["halo"].start == pytest.approx(0.003)


def test_new_job_starts_its_iterations_when_added(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    model = build_model(two)
    model.tick(0.004)
    job = make_job(cn(1, 2), "ring", rate=1e9, duty=0.5, period=0.01)
    model.set_jobs((job,))
    model.tick(0.008)
    # busy from 4 ms to 9 ms; had it started at 0 it would be 4-5 and 10-12 ms (3 ms)
    assert model.jobs["j1"].truth[0] == pytest.approx(2 * 1e9 * 0.005, rel=1e-9)


def test_totals_are_words_and_packets(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    topo = two[0]
    model = build_model(two)
    model.set_jobs((make_job(cn(1, 2), "ring", rate=1e9, duty=1.0, period=0.01),))
    model.tick(0.001)  # 1e6 bytes each way
    # 1e6 / 4 = 250000 words; 1e6 / 2048 = 488.3 -> 489 packets
    assert model.totals(host_port(topo, "cn0001")) == (250000, 250000, 489, 489)
    assert model.totals(host_port(topo, "cn0003")) == (0, 0, 0, 0)


def test_reparameterised_job_keeps_its_bytes(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    """Editing a job in place (same id, new rate) restarts its phase but not its history:
    ground truth stays cumulative, like the counters it is compared with."""
    model = build_model(two)
    slow = make_job(cn(1, 9), "ring", rate=1e9, duty=1.0, job_id="r")
    fast = make_job(cn(1, 9), "ring", rate=2e9, duty=1.0, job_id="r")
    model.set_jobs((slow,))
    model.tick(0.5)
    model.set_jobs((fast,))
    model.tick(0.5)
    assert set(model.jobs) == {"r"} and not model.finished
    hosts = 2  # cn0001 and cn0009, on different leaves
    assert model.jobs["r"].truth[0] == pytest.approx(hosts * (1e9 + 2e9) * 0.5, rel=1e-9)


# --- transmit wait ----------------------------------------------------------------------


def expected_wait(offered: np.ndarray, capacity: np.ndarray, dt: float) -> np.ndarray:
    """The documented rule: (L - C) / L of the tick, at XMIT_WAIT_TICKS_PER_S, where L > C."""
    with np.errstate(divide="ignore", invalid="ignore"):
        over = np.where(offered > capacity, (offered - capacity) / offered, 0.0)
    return over * XMIT_WAIT_TICKS_PER_S * dt


def test_no_wait_at_or_below_capacity(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    topo = two[0]
    model = build_model(two)
    model.set_jobs((A2A, HALO))
    model.tick(0.1)
    assert not model.xmit_wait.any()
    assert model.wait_counters(host_port(topo, "cn0001")) == {XMIT_WAIT_FIELD: 0}
    # exactly at capacity is not over it
    full = make_job(cn(1, 9), "ring", rate=EDR_4X, duty=1.0, job_id="full")
    model.set_jobs((full,))
    model.tick(0.1)
    assert not model.xmit_wait.any()


@pytest.mark.parametrize(("duty", "over"), [(1.0, 0.75), (0.5, 0.5)])
def test_overload_adds_wait_by_the_rule(
    duty: float, over: float, two: tuple[Topology, dict[int, dict[int, int]], Router]
) -> None:
    topo = two[0]
    model = build_model(two)
    heavy = make_job(cn(1, 9), "ring", rate=5e10, duty=duty, period=0.01, job_id="heavy")
    model.set_jobs((heavy,))
    dt = 0.01
    model.tick(dt)
    # 5e10 B/s offered (x duty, averaged over the tick) on a 12.5e9 B/s link
    src = model.router.port_index[host_port(topo, "cn0001")]
    assert model.xmit_wait[src] == pytest.approx(over * XMIT_WAIT_TICKS_PER_S * dt)
    job = model.jobs["heavy"]
    np.testing.assert_allclose(
        model.xmit_wait, expected_wait(job.xmit * duty, model.capacity, dt), rtol=1e-12
    )
    assert (model.xmit_wait[job.xmit == 0] == 0).all()  # ports the job does not use
    assert model.wait_counters(host_port(topo, "cn0001")) == {
        XMIT_WAIT_FIELD: int(over * XMIT_WAIT_TICKS_PER_S * dt)
    }
    model.tick(dt)  # cumulative, like the counter
    assert model.xmit_wait[src] == pytest.approx(2 * over * XMIT_WAIT_TICKS_PER_S * dt)


def test_wait_sticks_at_32_bits(two: tuple[Topology, dict[int, dict[int, int]], Router]) -> None:
    topo = two[0]
    model = build_model(two)
    model.set_jobs((make_job(cn(1, 9), "ring", rate=5e10, duty=1.0, job_id="heavy"),))
    model.tick(100.0)  # 75 s of stall: more ticks than 32 bits hold
    counters = model.wait_counters(host_port(topo, "cn0001"))
    assert counters[XMIT_WAIT_FIELD] == XMIT_WAIT_MAX


def test_wait_splits_over_the_jobs_vls(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    topo = two[0]
    model = build_model(two)
    # the same two hosts, so the same ports: 3e10 + 1e10 B/s offered on 12.5e9 B/s links
    a = make_job(cn(1, 9), "ring", rate=3e10, duty=1.0, job_id="a")
    b = make_job(cn(1, 9), "ring", rate=1e10, duty=1.0, job_id="b")
    other = make_job(cn(17, 25), "ring", rate=1e9, duty=1.0, job_id="other")  # no VL given
    model.set_jobs((a, b, other))
    dt = 1e-4
    model.tick(dt, vls={"a": 2, "b": 5})
    src = host_port(topo, "cn0001")
    i = model.router.port_index[src]
    wait = (1 - EDR_4X / 4e10) * XMIT_WAIT_TICKS_PER_S * dt
    assert model.xmit_wait[i] == pytest.approx(wait)
    assert model.vl_xmit_wait is not None
    np.testing.assert_allclose(model.vl_xmit_wait.sum(axis=1), model.xmit_wait, rtol=1e-12)
    assert model.vl_xmit_wait[i, 2] == pytest.approx(0.75 * wait)
    assert model.vl_xmit_wait[i, 5] == pytest.approx(0.25 * wait)
    counters = model.wait_counters(src)
    assert list(counters) == [XMIT_WAIT_FIELD, *VL_XMIT_WAIT_FIELDS]
    assert VL_XMIT_WAIT_FIELDS[3] == "PortVLXmitWaitCounters.PortVLXmitWaitCounters3"
    assert counters[VL_XMIT_WAIT_FIELDS[2]] == int(0.75 * wait)
    assert counters[VL_XMIT_WAIT_FIELDS[5]] == int(0.25 * wait)
    assert sum(counters[f] for f in VL_XMIT_WAIT_FIELDS) <= counters[XMIT_WAIT_FIELD]
    # the light job's ports are not overloaded: nothing on VL 0 anywhere
    assert not model.vl_xmit_wait[:, 0].any()
    # 16-bit counters stick at 65,535
    model.tick(0.1, vls={"a": 2, "b": 5})
    assert model.wait_counters(src)[VL_XMIT_WAIT_FIELDS[2]] == 65535


def test_without_vls_the_vl_counters_are_left_alone(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    topo = two[0]
    model = build_model(two)
    model.set_jobs((make_job(cn(1, 9), "ring", rate=5e10, duty=1.0, job_id="heavy"),))
    model.tick(0.01)
    assert model.vl_xmit_wait is None
    assert list(model.wait_counters(host_port(topo, "cn0001"))) == [XMIT_WAIT_FIELD]
    model.tick(1e-4, vls={})  # told, but the job has no VL: the default lane, VL 0
    assert model.vl_xmit_wait is not None
    i = model.router.port_index[host_port(topo, "cn0001")]
    assert model.vl_xmit_wait[i, 0] == pytest.approx(0.75 * XMIT_WAIT_TICKS_PER_S * 1e-4)
    assert not model.vl_xmit_wait[:, 1:].any()


def test_bad_vl_is_refused(two: tuple[Topology, dict[int, dict[int, int]], Router]) -> None:
    model = build_model(two)
    with pytest.raises(ValueError, match="VLs must be 0-15"):
        model.tick(0.01, vls={"j1": 16})


# --- progress: iterations ---------------------------------------------------------------


def test_crude_iterations_follow_the_clock(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    """Crude contention: a job's iterations end every period_s, however overloaded."""
    model = build_model(two)
    assert model.contention == "crude"
    heavy = make_job(cn(1, 9), "ring", rate=5e10, duty=1.0, period=0.01, job_id="heavy")
    model.set_jobs((heavy, A2A))
    for _ in range(40):
        model.tick(0.025)  # 1 s
    assert model.jobs["heavy"].iterations == 100  # 4x over its links, still 100 per second
    assert model.jobs["a2a"].iterations == 100
    assert model.iterations_per_second("heavy") == pytest.approx(100.0)
    assert model.vls() == {}
    with pytest.raises(ValueError, match="crude"):
        model.set_arbitration(object())  # type: ignore[arg-type]


def test_crude_iterations_of_a_late_and_a_changed_job(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    model = build_model(two)
    model.tick(0.5)
    slow = make_job(cn(1, 9), "ring", rate=1e9, duty=0.5, period=0.1, job_id="r")
    model.set_jobs((slow,))
    model.tick(1.0)
    assert model.jobs["r"].iterations == 10  # from when it appeared
    model.set_jobs((make_job(cn(1, 9), "ring", rate=1e9, duty=0.5, period=0.05, job_id="r"),))
    model.tick(1.0)
    assert model.jobs["r"].iterations == 30  # 10 before, 20 at the new period
    assert model.iterations_per_second("r") == pytest.approx(15.0)  # 30 in its 2 s so far


def test_iteration_rate_is_over_the_window(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    topo, lfts, _ = two
    hosts: dict[str, list[Port]] = {}
    for ca in topo.cas():
        hosts.setdefault(ca.hostname, []).extend(topo.ports(ca.id))
    model = TrafficModel(topo, Router(topo, lfts), hosts, window_s=2.0)
    model.set_jobs((make_job(cn(1, 2), period=0.1, job_id="a"),))
    for _ in range(10):
        model.tick(0.5)
    model.set_jobs((make_job(cn(1, 2), period=0.5, job_id="a"),))  # slower from now
    model.tick(0.5)
    # the window holds 1.5 s at 10/s and 0.5 s at 2/s: (15 + 1) / 2
    assert model.iterations_per_second("a") == pytest.approx(8.0)
    for _ in range(4):
        model.tick(0.5)
    assert model.iterations_per_second("a") == pytest.approx(2.0)
    model.set_jobs(())
    assert model.iterations_per_second("a") == pytest.approx(2.0)  # finished: kept


# --- fluid contention over OpenSM's recorded routes ---------------------------------------


def test_fluid_model_over_recorded_routes_is_the_simulator(
    two: tuple[Topology, dict[int, dict[int, int]], Router],
) -> None:
    """The fluid mode on OpenSM's real LFTs: its per-job bytes and iterations are those of
    a FluidSim of the same mix (one lane), and counters and truth agree."""
    from ibqos.sim.fluid import FluidSim
    from ibqos.sim.network import Network
    from ibqos.sim.qos import Arbitration
    from ibqos.sim.workload import prepare

    topo, lfts, _ = two
    net = Network(topo, lfts)
    hosts: dict[str, list[Port]] = {}
    for ca in topo.cas():
        hosts.setdefault(ca.hostname, []).extend(topo.ports(ca.id))
    lane = Arbitration({}, (0,) * 16, ((0, 32),))
    model = TrafficModel(topo, net.router, hosts, network=net, arbitration=lane)
    assert model.contention == "fluid"
    # two all-to-alls across leaves 1 and 2, both over the leaves' uplinks
    a = make_job(cn(1, 2, 3, 9, 10, 11), "all-to-all", rate=1.2e10, duty=1.0, period=0.02)
    b = make_job(cn(4, 5, 12, 13), "all-to-all", rate=1.2e10, duty=0.5, period=0.02, job_id="b")
    model.set_jobs((a, b))
    for _ in range(20):
        model.tick(0.05)
    sim = FluidSim(net, prepare(net, [a, b]), lane)
    sim.advance(1.0)
    assert [model.jobs[j].iterations for j in ("j1", "b")] == sim.iterations.tolist()
    assert sim.iterations[1] < 50  # slowed: the uplinks are shared
    for i, jid in enumerate(("j1", "b")):
        job = model.jobs[jid]
        np.testing.assert_allclose(job.truth, job.level_rate * sim.sent[i], rtol=1e-9)
    np.testing.assert_allclose(model.xmit_bytes, sim.link_bytes, rtol=1e-9)
    truth = sum(j.truth for j in model.jobs.values())
    cas = indices(model, ca_ports(topo))
    assert truth[0] == pytest.approx(model.rcv_bytes[cas].sum(), rel=1e-9)
    assert truth[1] == pytest.approx(model.xmit_bytes[indices(model, uplinks(topo, 1))].sum())
