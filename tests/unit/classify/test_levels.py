"""Characterization of known patterns on known placements, against figures worked out by
hand (4x EDR links: 12.5e9 bytes/s per direction)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from ibqos.characterize.command import fabric_of
from ibqos.characterize.trace import format_csv_trace, load_csv_trace, parse_csv_trace
from ibqos.classify.levels import Characterizer, Placement
from ibqos.classify.traffic import NodeTraffic
from ibqos.errors import JobsError, TopologyError, TraceError
from ibqos.jobs.model import Job
from tests.support.paths import ROOT

LINK = 12.5e9
TRACES = ROOT / "characterize" / "traces"


def characterizer(xgft: str) -> Characterizer:
    fabric, _, exclude = fabric_of(xgft, None)
    return Characterizer(fabric, exclude=exclude)


def job(pattern: str, n: int, rate: float = 1e9, duty: float = 1.0, **kw: object) -> Job:
    hosts = tuple(f"h{i}" for i in range(n))  # the placement decides the real hosts
    return Job("j", hosts, pattern=pattern, rate_bytes_per_s=rate, duty=duty, period_s=1.0, **kw)  # type: ignore[arg-type]


def figures(c, spec: str, j: Job):
    traffic = NodeTraffic.from_job(j)
    return c.characterize(traffic, c.placement(spec, traffic.nodes))


def test_xgft_leaves_exclude_the_opensm_host() -> None:
    c = characterizer("2;4,2;1,2")
    assert c.leaves == [
        ["cn0001", "cn0002", "cn0003", "cn0004"],
        ["cn0005", "cn0006", "cn0007", "cn0008"],
    ]
    assert c.hosts_per_leaf == 4


def test_ring_contiguous_stays_in_its_leaf() -> None:
    r = figures(characterizer("2;4,2;1,2"), "contiguous", job("ring", 4, duty=0.5))
    l0, l1, l2 = r.levels
    # 4 nodes x 1e9 B/s x duty 0.5 injected; nothing leaves the leaf
    assert l0.bytes_per_s == pytest.approx(2e9) and l0.peak_bytes_per_s == pytest.approx(4e9)
    assert l0.avail_bytes_per_s == pytest.approx(4 * LINK)
    assert l1.bytes_per_s == 0.0 and l1.avail_bytes_per_s == pytest.approx(2 * LINK)
    assert l2.avail_bytes_per_s == 0.0 and l2.util is None  # the top has no uplinks
    assert (r.leaves, r.intensity, r.cls) == (1, 0.0, "low")


def test_ring_fragmented_two_per_leaf() -> None:
    r = figures(characterizer("2;4,2;1,2"), "F2", job("ring", 4, duty=0.5))
    assert r.hosts == ("cn0001", "cn0002", "cn0005", "cn0006")
    l1 = r.levels[1]
    # flows 1->2 and 3->0 cross: 2 x 1e9 x 0.5 mean, 2e9 while communicating
    assert l1.bytes_per_s == pytest.approx(1e9) and l1.peak_bytes_per_s == pytest.approx(2e9)
    assert l1.avail_bytes_per_s == pytest.approx(2 * 2 * LINK)  # 2 leaves x 2 uplinks
    assert l1.util == pytest.approx(1e9 / 5e10) and r.peak_intensity == pytest.approx(0.04)
    assert (r.leaves, r.level, r.cls) == (2, 1, "low")


def test_all_to_all_over_two_leaves_crosses_the_class_bound() -> None:
    c = characterizer("2;4,2;1,2")
    # 8 nodes, 4 of each node's 7 peers on the other leaf: 8 x rate x 4/7 cross level 1
    low = figures(c, "contiguous", job("all-to-all", 8, rate=1e9))
    assert low.levels[1].bytes_per_s == pytest.approx(8 * 1e9 * 4 / 7)
    assert low.intensity == pytest.approx(8 * 4 / 7 / 50) and low.cls == "low"  # 0.0914
    moderate = figures(c, "contiguous", job("all-to-all", 8, rate=2e9))
    assert moderate.intensity == pytest.approx(2 * 8 * 4 / 7 / 50) and moderate.cls == "moderate"


def test_three_levels_ring_per_level() -> None:
    c = characterizer("3;2,2,2;1,2,2")  # 2 hosts a leaf, 2 leaves a level-2 subtree
    r = figures(c, "contiguous", job("ring", 8))
    l0, l1, l2, l3 = r.levels
    assert l0.bytes_per_s == pytest.approx(8e9)
    assert l1.bytes_per_s == pytest.approx(4e9)  # 1->2, 3->4, 5->6, 7->0
    assert l2.bytes_per_s == pytest.approx(2e9)  # 3->4, 7->0
    assert l1.avail_bytes_per_s == pytest.approx(4 * 2 * LINK)  # 4 leaves x 2 uplinks
    assert l2.avail_bytes_per_s == pytest.approx(2 * 2 * 2 * LINK)  # 2 subtrees x 2 sw x 2
    assert l3.avail_bytes_per_s == 0.0
    assert r.subtrees == (4, 2, 1)
    assert r.intensity == pytest.approx(0.04) and r.level == 1  # 4e9/1e11 > 2e9/1e11


def test_spreading_a_job_gives_it_more_bandwidth() -> None:
    c = characterizer("2;8,4;1,2")
    spreads = c.spreads(8)
    assert [p.name for p in spreads] == ["F8", "F7", "F6", "F5", "F4", "F3", "F2"]
    avail = [c.characterize(NodeTraffic.from_job(job("halo", 8)), p).levels[1] for p in spreads]
    assert [a.avail_bytes_per_s for a in avail] == pytest.approx(
        [2 * LINK, 4 * LINK, 4 * LINK, 4 * LINK, 4 * LINK, 6 * LINK, 8 * LINK]
    )


def test_the_spread_keeps_the_even_split_of_the_same_leaves() -> None:
    # characterize/traces/stencil-trace.csv: a 2 x 4 halo, 8 ranks, each sending to its 3
    # neighbours (row 0-3 or 4-7 left and right, and i +- 4) 1/3, 4/3, 1/3 GB in 3 s: 2/3 GB/s
    # a flow.
    # F7 cuts only rank 7 off: 3 flows each way cross, 6 x 2/3e9 = 4e9 B/s over 2 leaves
    # x 2 uplinks x 12.5e9 = 8.0 %, low.  F4 (4 + 4, the same 2 leaves) cuts the rows
    # apart: the 8 flows i <-> i + 4 cross, 5.33e9 B/s = 10.7 %, moderate.
    trace = load_csv_trace(TRACES / "stencil-trace.csv")
    c = characterizer("2;8,4;1,2")
    traffic = trace.node_traffic(1)
    by = {p.name: c.characterize(traffic, p) for p in c.spreads(traffic.nodes)}
    assert by["F7"].leaves == by["F4"].leaves == 2
    assert by["F7"].intensity == pytest.approx(0.08) and by["F7"].cls == "low"
    assert by["F4"].intensity == pytest.approx(0.32 / 3) and by["F4"].cls == "moderate"


def test_random_placement_is_seeded_and_in_host_order() -> None:
    c = characterizer("2;8,4;1,2")
    a, b = c.placement("random:7", 6), c.placement("random:7", 6)
    assert a == b and list(a.hosts) == sorted(a.hosts) and len(set(a.hosts)) == 6
    assert c.placement("random", 6).name == "random:0"


@pytest.mark.parametrize(
    ("spec", "nodes", "message"),
    [
        ("F0", 4, "expected 1 to 4 nodes per leaf"),
        ("F5", 4, "expected 1 to 4 nodes per leaf"),
        ("F1", 5, "5 nodes do not fit"),
        ("contiguous", 9, "9 nodes do not fit"),
        ("random:x", 2, "seed must be an integer"),
        ("scatter", 2, "expected contiguous"),
    ],
)
def test_bad_placements(spec: str, nodes: int, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        characterizer("2;4,2;1,2").placement(spec, nodes)


def test_a_job_placement_must_be_on_the_fabric() -> None:
    c = characterizer("2;4,2;1,2")
    with pytest.raises(TopologyError, match="host cn0099 is not on the fabric"):
        c.placement("job", 2, ("cn0001", "cn0099"))
    with pytest.raises(TopologyError, match="2 hosts for 4 nodes"):
        c.characterize(NodeTraffic.from_job(job("ring", 4)), Placement("x", ("cn0001", "cn0002")))


def test_a_job_without_traffic_keys_cannot_be_characterized() -> None:
    with pytest.raises(JobsError, match="job x: needs pattern"):
        NodeTraffic.from_job(Job("x", ("a", "b"), pattern="ring"))


TRACE = """# ibqos communication trace
# ranks: 4
start_s,end_s,src,dst,bytes
0.0,1.0,0,1,1000
0.0,1.0,1,0,1000
0.0,1.0,2,3,3000
2.0,4.0,0,2,4000
"""


def test_trace_to_node_traffic_and_per_interval_peak() -> None:
    trace = parse_csv_trace(TRACE, "t.csv")
    assert trace.ranks == 4 and trace.span_s == 4.0 and trace.total_bytes == 9000
    assert trace.rank_matrix()[0, 2] == pytest.approx(1000)  # 4000 bytes over 4 s
    again = parse_csv_trace(format_csv_trace(trace), "again")  # the format round-trips
    for name in ("starts_s", "ends_s", "interval", "src", "dst", "bytes"):
        assert np.array_equal(getattr(again, name), getattr(trace, name)), name
    assert again.ranks == trace.ranks
    # two ranks a node: 0,1 on node 0 and 2,3 on node 1; only 0->2 leaves a node
    nodes = trace.node_traffic(ranks_per_node=2)
    assert nodes.nodes == 2 and nodes.matrix()[0, 1] == pytest.approx(1000)
    c = characterizer("2;1,2;1,1")  # one host per leaf: every node-to-node byte goes up
    r = c.characterize(nodes, c.placement("contiguous", 2))
    assert r.levels[1].bytes_per_s == pytest.approx(1000)  # mean over the 4 s
    assert r.levels[1].peak_bytes_per_s == pytest.approx(2000)  # 4000 bytes in 2 s


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("start_s,end_s,src,dst\n", "t.csv:1: expected the header"),
        ("# c\nstart_s,end_s,src,dst,bytes\n0,1,0,1\n", "t.csv:3: expected 5 fields, got 4"),
        ("start_s,end_s,src,dst,bytes\n1,1,0,1,5\n", "t.csv:2: end_s 1.0 is not after"),
        ("start_s,end_s,src,dst,bytes\n0,1,0,0,5\n", "t.csv:2: src and dst are the same"),
        ("start_s,end_s,src,dst,bytes\n0,1,0,x,5\n", "t.csv:2: dst: expected an integer"),
        ("start_s,end_s,src,dst,bytes\n0,1,0,1,-5\n", "t.csv:2: bytes: expected a finite"),
        ("start_s,end_s,src,dst,bytes\n0,1,0,1,nan\n", "t.csv:2: bytes: expected a finite"),
        ("# ranks: 2\nstart_s,end_s,src,dst,bytes\n0,1,0,2,5\n", "t.csv:3: rank 2 is not below"),
        ("start_s,end_s,src,dst,bytes\n", "t.csv: no records"),
        ("", "t.csv: no header"),
        (
            "start_s,end_s,src,dst,bytes\n0,2,0,1,5\n1,3,0,1,5\n",
            "intervals 0.0-2.0 s and 1.0-3.0 s overlap",
        ),
    ],
)
def test_bad_traces_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_csv_trace(text, "t.csv")
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.fixture(autouse=True)
def _quiet_fabric(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
