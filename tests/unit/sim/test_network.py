"""Routes of the simulated network: D-mod-K on an XGFT, and OpenSM's tables."""

from __future__ import annotations

import numpy as np
import pytest

from ibqos.errors import TopologyError
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.sim.network import Network, dmodk_lfts, xgft_network


def test_dmodk_spreads_destinations_over_the_uplinks() -> None:
    # 4 leaves of 8 hosts, 2 spines: destination d leaves a leaf by uplink d mod 2
    net = xgft_network(parse_xgft("2;8,4;1,2"))
    job = Job("A", tuple(f"cn{i:04d}" for i in range(1, 17)), "all-to-all", 15e9, 1.0, 1.0)
    load = net.load(net.flows(job))
    up = (net.level == 1) & net.up
    busy = load[up][load[up] > 0]
    # leaves 1 and 2, 8 senders each, 8 of 15 peers off the leaf, half by each uplink
    assert busy == pytest.approx([8 * 15e9 / 15 * 8 / 2] * 4)
    # every flow: host port, leaf up, spine down, leaf down (4 links) or 2 inside a leaf
    lengths = {len(p) for p in net.paths(net.flows(job))}
    assert lengths == {2, 4}


def test_strided_placement_lands_on_one_uplink() -> None:
    # D-mod-K's known weakness: even-numbered hosts only, so d mod 2 is always 0
    net = xgft_network(parse_xgft("2;8,4;1,2"))
    nodes = tuple(f"cn{i:04d}" for i in range(1, 33, 2))  # cn0001, cn0003: d = 0, 2, ...
    load = net.load(net.flows(Job("S", nodes, "all-to-all", 1e9, 1.0, 1.0)))
    up = np.flatnonzero((net.level == 1) & net.up)
    used = {net.router.ports[i].num for i in up if load[i] > 0}
    assert len(used) == 1


def test_paths_follow_the_tables() -> None:
    net = xgft_network(parse_xgft("3;2,2,2;1,2,2"))
    job = Job("A", ("cn0001", "cn0008"), "ring", 1e9, 1.0, 1.0)
    flows = net.flows(job)
    paths = net.paths(flows)
    # across the top: host, leaf up, level-2 up, top down, level-2 down, leaf down
    assert [len(p) for p in paths] == [6, 6]
    for path, dst in zip(paths, flows.dst, strict=True):
        last = net.router.ports[path[-1]]
        assert net.topo.peer(last) == net.router.ports[int(dst)]
        assert list(net.level[path]) == [0, 1, 2, 3, 2, 1]


def test_an_unknown_host_is_named() -> None:
    net = xgft_network(parse_xgft("2;2,2;1,1"))
    with pytest.raises(TopologyError, match="job J: host cn0099 is not on the fabric"):
        net.flows(Job("J", ("cn0001", "cn0099"), "ring", 1e9, 1.0, 1.0))


def test_uneven_uplinks_are_refused() -> None:
    net = xgft_network(parse_xgft("2;2,2;1,2"))
    topo = net.topo
    # cut one uplink of one leaf: leaves then have 1 and 2 uplinks
    leaf = next(s for s in topo.switches() if s.desc == "sw-L1-0001")
    cut = next(link for link in topo.links if link.a.node == leaf.id and link.a.num == 3)
    topo.links.remove(cut)
    del topo._peer[cut.a], topo._peer[cut.b]  # a damaged copy on purpose
    with pytest.raises(TopologyError, match="uplinks: D-mod-K needs one"):
        Network(topo, dmodk_lfts(topo))
