"""Attribution on a recorded fabric with hand-made rates: sums, priors, measured shares."""

from __future__ import annotations

import math

from fabric_rates import leaf_up_ports, rates, setup

from ibqos.attribution import Attributor
from ibqos.jobmap import MappedJob
from ibqos.jobs import Job


def job(jid: str, nodes: list[str], pattern: str = "") -> Job:
    return Job(jid, tuple(nodes), pattern, 1e9, 1.0, 1.0)


def test_level_0_is_the_hosts_and_subtree_totals_are_split_exactly() -> None:
    fabric, hp = setup()
    a = job("a", ["cn0001", "cn0002", "cn0009"])  # 2 on leaf 1, 1 on leaf 2
    b = job("b", ["cn0003", "cn0004", "cn0005", "cn0017"])  # 3 on leaf 1, 1 on leaf 3
    mapped = [MappedJob(j, tuple(hp[h] for h in j.nodes), j.nodes) for j in (a, b)]
    xmit = {hp[h]: 1e9 for h in (*a.nodes, *b.nodes)}
    up1 = leaf_up_ports(fabric, "sw-L1-0001")
    for k in up1:
        xmit[k] = 1.5e9  # 3 GB/s leave leaf 1 in all
    result = Attributor(fabric).attribute(rates(fabric, xmit), mapped)
    ja, jb = result.jobs["a"], result.jobs["b"]
    assert ja.bytes_per_s[0] == 3e9 and jb.bytes_per_s[0] == 4e9
    assert ja.measured[0] == jb.measured[0] == 1.0
    # gravity priors on leaf 1: a: 2 hosts x 1/2 outside = 1e9; b: 3 hosts x 1/3 = 1e9
    leaf1_a = 3e9 * 1e9 / 2e9
    # leaves 2 and 3 report no uplink traffic: nothing more to give
    assert math.isclose(ja.bytes_per_s[1], leaf1_a)
    assert math.isclose(ja.bytes_per_s[1] + jb.bytes_per_s[1], 3e9)  # the counters, exactly
    assert ja.measured[1] == 0.0  # shared subtree: estimated


def test_a_job_alone_in_its_subtrees_is_measured() -> None:
    fabric, hp = setup()
    a = job("a", ["cn0025", "cn0026", "cn0017"])  # leaf 4 and leaf 3, nobody else there
    mapped = [MappedJob(a, tuple(hp[h] for h in a.nodes), a.nodes)]
    xmit = {hp[h]: 2e9 for h in a.nodes}
    for k in leaf_up_ports(fabric, "sw-L1-0004") + leaf_up_ports(fabric, "sw-L1-0003"):
        xmit[k] = 1e9
    r = Attributor(fabric).attribute(rates(fabric, xmit), mapped).jobs["a"]
    assert r.bytes_per_s[1] == 4e9 and r.measured[1] == 1.0 and r.measured_share == 1.0


def test_a_pattern_prior_follows_the_pattern() -> None:
    fabric, hp = setup()
    # ring over cn0001, cn0002 (leaf 1), cn0009 (leaf 2): from leaf 1 only cn0002 -> cn0009
    # leaves, while gravity would say 1/2 of each of the two hosts' traffic
    ring = job("ring", ["cn0001", "cn0002", "cn0009"], "ring")
    a2a = job("a2a", ["cn0003", "cn0004", "cn0010"], "all-to-all")
    mapped = [MappedJob(j, tuple(hp[h] for h in j.nodes), j.nodes) for j in (ring, a2a)]
    xmit = {hp[h]: 1e9 for h in (*ring.nodes, *a2a.nodes)}
    for k in leaf_up_ports(fabric, "sw-L1-0001"):
        xmit[k] = 1e9  # 2 GB/s leave leaf 1
    r = Attributor(fabric).attribute(rates(fabric, xmit), mapped).jobs
    # priors on leaf 1: ring 1e9 (cn0002 only), a2a 2 x 1e9 x 1/2 = 1e9: an even split
    assert math.isclose(r["ring"].bytes_per_s[1], 1e9)
    assert math.isclose(r["a2a"].bytes_per_s[1], 1e9)


def test_a_pattern_without_a_rate_is_a_profile_too() -> None:
    """An agent job file may declare only the pattern: the split is the same."""
    fabric, hp = setup()
    ring = job("ring", ["cn0001", "cn0002", "cn0009"], "ring")
    bare = Job("ring", ring.nodes, "ring")  # no rate, duty or period
    a2a = job("a2a", ["cn0003", "cn0004", "cn0010"], "all-to-all")
    xmit = {hp[h]: 1e9 for h in (*ring.nodes, *a2a.nodes)}
    xmit[leaf_up_ports(fabric, "sw-L1-0001")[0]] = 1.5e9
    got = []
    for r in (ring, bare):
        mapped = [MappedJob(j, tuple(hp[h] for h in j.nodes), j.nodes) for j in (r, a2a)]
        got.append(Attributor(fabric).attribute(rates(fabric, xmit), mapped).jobs["ring"])
    assert got[0].bytes_per_s[1] > 0
    assert got[0].bytes_per_s == got[1].bytes_per_s


def test_unknown_rates_stay_unknown() -> None:
    fabric, hp = setup()
    a = job("a", ["cn0001", "cn0009"])
    mapped = [MappedJob(a, tuple(hp[h] for h in a.nodes), a.nodes)]
    xmit = {hp["cn0001"]: float("nan"), hp["cn0009"]: 1e9}
    r = Attributor(fabric).attribute(rates(fabric, xmit), mapped).jobs["a"]
    assert math.isnan(r.bytes_per_s[0])  # never a silent zero
