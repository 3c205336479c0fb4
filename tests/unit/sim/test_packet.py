"""Tests for ibqos.sim.packet: the packet-level contention model.

Expectations are worked out by hand from the model's rules (module docstring of
ibqos.sim.packet) on the XGFT 2;8,4;1,2 (4 leaves of 8 EDR 4x hosts, 2 spines, D-mod-K):
a 2048-byte packet takes S = 2048 / 12.5e9 s on a link, a switch adds LAT = 100 ns, and
a flow to another leaf crosses 4 links (CA, leaf up, spine down, leaf down) and 3 switches.
D-mod-K sends traffic for destination host d (0-based) up leaf uplink d mod 2, so
cn0009 (d=8), cn0011 (d=10) and cn0013 (d=12) share leaf 1's uplink 0 and spine 0's link
down to leaf 2; the tests check that before relying on it.
"""

from __future__ import annotations

from typing import Any

import pytest

from ibqos.errors import SimError
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.sim.network import Network, xgft_network
from ibqos.sim.packet import simulate_packets
from ibqos.sim.qos import Arbitration, Entry
from ibqos.sim.workload import RunResult, prepare

CAP = 12.5e9  # bytes/s of an EDR 4x link
MTU = 2048
S = MTU / CAP  # one MTU packet on one link (s)
LAT = 100e-9  # the default switch latency (s)
IDENTITY = tuple(range(16))  # SL s -> VL s
ONE_PACKET, THREE_PACKETS = 32, 96  # VLArb weights (64-byte units) of 1 and 3 MTU packets


@pytest.fixture(scope="module")
def net() -> Network:
    return xgft_network(parse_xgft("2;8,4;1,2"))


def flow_job(
    job_id: str,
    pairs: list[tuple[str, str]],
    rate: float,
    nbytes: int,
    duty: float = 1.0,
) -> Job:
    """A job whose hosts send *nbytes* per iteration, each to one peer, at *rate* bytes/s.

    *pairs* are (sender, receiver); the job's period is set so that its communication
    phase moves exactly *nbytes* per flow at *rate*.
    """
    nodes = tuple(sorted({h for pair in pairs for h in pair}))
    rows = [[0.0] * len(nodes) for _ in nodes]
    for src, dst in pairs:
        rows[nodes.index(src)][nodes.index(dst)] = 1.0
    matrix = tuple(tuple(row) for row in rows)
    comm = nbytes / rate
    return Job(job_id, nodes, "matrix", rate, duty, comm / duty, matrix=matrix)


def arbitration(
    job_sl: dict[str, int],
    low: tuple[Entry, ...],
    high: tuple[Entry, ...] = (),
    high_limit: int = 0,
) -> Arbitration:
    return Arbitration(job_sl, IDENTITY, low, high, high_limit, MTU)


def run(
    net: Network, jobs: list[Job], arb: Arbitration, iterations: int = 1, **options: Any
) -> RunResult:
    return simulate_packets(net, prepare(net, jobs), arb, iterations, **options)


def ca_link(net: Network, host: str) -> int:
    """The link a host sends on (its CA port): it carries that host's traffic only."""
    return net.router.port_index[net.hosts[host]]


def shared_links(net: Network, *jobs: Job) -> set[int]:
    """Links every one of the jobs' flows crosses."""
    common: set[int] | None = None
    for sim in prepare(net, list(jobs)):
        for path in net.paths(sim.flows):
            common = set(path) if common is None else common & set(path)
    assert common is not None
    return common


# -- 1: one flow alone -------------------------------------------------------------------


def test_flow_below_capacity_runs_at_its_rate(net: Network) -> None:
    """Paced at half the link: packets leave S/0.5 apart; the last one adds two link
    times and one switch; compute phases of the same length alternate."""
    n = 256
    rate = CAP / 2
    job = flow_job("a", [("cn0001", "cn0002")], rate, n * MTU, duty=0.5)
    result = run(net, [job], arbitration({}, ((0, ONE_PACKET),)), iterations=3)
    compute = n * MTU / rate  # duty 0.5: compute as long as the declared comm phase
    comm = (n - 1) * MTU / rate + 2 * S + LAT
    assert comm == pytest.approx(n * MTU / rate, rel=0.01)
    ends = result.jobs["a"].iteration_ends_s
    assert ends == pytest.approx([k * (compute + comm) for k in (1, 2, 3)], rel=1e-9)
    assert result.jobs["a"].t_s == ends[2]
    assert result.sim_time_s == ends[2]
    assert result.model == "packet"


def test_flow_above_capacity_runs_at_link_speed(net: Network) -> None:
    """Offered at twice the link, the CA link is the limit: n packets back to back, then
    the last one's switch and leaf link."""
    n = 300
    job = flow_job("a", [("cn0001", "cn0002")], 2 * CAP, n * MTU)
    result = run(net, [job], arbitration({}, ((0, ONE_PACKET),)), iterations=2)
    comm = n * S + S + LAT
    assert result.jobs["a"].iteration_ends_s == pytest.approx([comm, 2 * comm], rel=1e-9)


def test_all_to_all_hosts_start_at_different_peers(net: Network) -> None:
    """Eight hosts of one leaf, all-to-all at 0.8 of the link: each host takes its peers
    from the next one on, so every round of the round robin is a permutation and no
    leaf link gets two packets at once.  The phase ends as one paced flow's would: the
    last packet leaves its host after 7k - 1 others, then two links and a switch.  In
    node order (host 0 starting at peer 1, the others at peer 0), round j was an in-cast
    of 7 - j packets on one link and j + 1 on another, and the phase took 8 % longer."""
    k = 8  # packets per flow
    rate = 0.8 * CAP
    nodes = tuple(f"cn{i:04d}" for i in range(1, 9))
    job = Job("a", nodes, "all-to-all", rate, 1.0, 7 * k * MTU / rate)
    result = run(net, [job], arbitration({}, ((0, ONE_PACKET),)))
    assert result.jobs["a"].t_s == pytest.approx((7 * k - 1) * MTU / rate + 2 * S + LAT, rel=1e-9)


def test_zero_switch_latency_and_short_last_packet(net: Network) -> None:
    """The last packet is shorter (bytes not a multiple of the MTU); every byte is counted
    once per link; with no switch latency a packet may leave as soon as it is in."""
    nbytes = 10 * MTU + 100
    job = flow_job("a", [("cn0001", "cn0009")], 2 * CAP, nbytes)
    result = run(net, [job], arbitration({}, ((0, ONE_PACKET),)), 2, switch_latency_s=0.0)
    # the 10 full packets go back to back and the last full one crosses 3 more links; the
    # short one is behind it on each of them, so it ends one short link time after it
    comm = (10 + 3) * S + 100 / CAP
    assert result.jobs["a"].iteration_ends_s == pytest.approx([comm, 2 * comm], rel=1e-9)
    (path,) = net.paths(prepare(net, [job])[0].flows)
    assert len(path) == 4
    assert result.link_bytes[path].tolist() == [2 * nbytes] * 4
    assert result.link_bytes.sum() == 4 * 2 * nbytes


# -- 2-3: weighted round robin, FIFO, work conservation -----------------------------------

N_SHARED = 384  # packets per flow and iteration in the sharing tests
A_FLOW = [("cn0001", "cn0009")]
B_FLOW = [("cn0002", "cn0011")]


def test_weights_split_a_bottleneck_one_to_three(net: Network) -> None:
    """a on VL0 (1 packet per turn) and b on VL1 (3 packets) both offer a full link into
    leaf 1's uplink: b's packets go 3 for 1 of a's, so b ends an iteration in
    N / (3/4) packet times and a (while b keeps iterating) in N / (1/4)."""
    a = flow_job("a", A_FLOW, 2 * CAP, N_SHARED * MTU)
    b = flow_job("b", B_FLOW, 2 * CAP, N_SHARED * MTU)
    assert shared_links(net, a, b)
    arb = arbitration({"a": 0, "b": 1}, ((0, ONE_PACKET), (1, THREE_PACKETS)))
    result = run(net, [a, b], arb)
    assert result.jobs["a"].t_s == pytest.approx(N_SHARED * S * 4, rel=0.03)
    assert result.jobs["b"].iteration_ends_s[0] == pytest.approx(N_SHARED * S * 4 / 3, rel=0.03)
    sent_a = result.link_bytes[ca_link(net, "cn0001")]
    sent_b = result.link_bytes[ca_link(net, "cn0002")]
    assert sent_b / sent_a == pytest.approx(3.0, rel=0.05)


def test_same_vl_splits_by_offered_load(net: Network) -> None:
    """On one VL the uplink is a FIFO fed by three full input buffers (a's host and b's
    two): each input gets a third, so b (two senders) gets twice a's share."""
    a = flow_job("a", A_FLOW, 2 * CAP, N_SHARED * MTU)
    b = flow_job("b", [("cn0002", "cn0011"), ("cn0004", "cn0013")], 2 * CAP, N_SHARED * MTU)
    assert shared_links(net, a, b)
    arb = arbitration({"a": 0, "b": 0}, ((0, ONE_PACKET), (1, THREE_PACKETS)))
    result = run(net, [a, b], arb)
    for job in ("a", "b"):
        assert result.jobs[job].iteration_ends_s[0] == pytest.approx(N_SHARED * S * 3, rel=0.03)
    sent_a = result.link_bytes[ca_link(net, "cn0001")]
    sent_b = result.link_bytes[ca_link(net, "cn0002")] + result.link_bytes[ca_link(net, "cn0004")]
    assert sent_b / sent_a == pytest.approx(2.0, rel=0.05)


def test_idle_lane_gives_its_turns_away(net: Network) -> None:
    """While b (3 packets per turn) computes, a (1 packet per turn) has the whole uplink:
    its first iteration takes what it takes alone.  Then b, once it sends, takes 3/4."""
    a = flow_job("a", A_FLOW, 2 * CAP, N_SHARED * MTU)
    alone = N_SHARED * S + 3 * (S + LAT)  # back to back, then the last packet's 3 hops
    b = flow_job("b", B_FLOW, 2 * CAP, N_SHARED * MTU, duty=0.1)
    b_compute = 0.9 * N_SHARED * MTU / (2 * CAP) / 0.1
    assert b_compute > 2 * alone
    arb = arbitration({"a": 0, "b": 1}, ((0, ONE_PACKET), (1, THREE_PACKETS)))
    result = run(net, [a, b], arb)
    assert result.jobs["a"].iteration_ends_s[0] == pytest.approx(alone, rel=1e-9)
    b_end = b_compute + N_SHARED * S * 4 / 3
    assert result.jobs["b"].t_s == pytest.approx(b_end, rel=0.03)


# -- 4: high priority ------------------------------------------------------------------


def high_priority_comm(net: Network, high_limit: int) -> float:
    """Comm phase of h (high table, VL1) while l (low table, VL0) keeps the uplink busy."""
    h = flow_job("h", B_FLOW, 2 * CAP, N_SHARED * MTU, duty=0.5)
    l_job = flow_job("l", A_FLOW, 2 * CAP, 4 * N_SHARED * MTU)
    arb = arbitration({"h": 1, "l": 0}, ((0, ONE_PACKET),), ((1, ONE_PACKET),), high_limit)
    result = run(net, [h, l_job], arb)
    compute = N_SHARED * MTU / (2 * CAP)  # duty 0.5 of a comm phase of N MTU at 2 x CAP
    return result.jobs["h"].iteration_ends_s[0] - compute


def test_strict_high_priority_takes_the_link(net: Network) -> None:
    """high_limit 255: h's packets go whenever they can, as if l were not there (up to the
    one l packet on the wire when h's first packet arrives)."""
    assert high_priority_comm(net, 255) == pytest.approx(N_SHARED * S, rel=0.02)


def test_high_limit_zero_lets_low_through(net: Network) -> None:
    """high_limit 0: one high packet, then one low packet: h gets half the uplink."""
    assert high_priority_comm(net, 0) == pytest.approx(2 * N_SHARED * S, rel=0.03)


def test_high_limit_counts_bytes(net: Network) -> None:
    """high_limit 1 (4 KiB = 2 MTU packets): two high packets per low one, h gets 2/3."""
    assert high_priority_comm(net, 1) == pytest.approx(1.5 * N_SHARED * S, rel=0.03)


# -- 5: credits ------------------------------------------------------------------------


def incast_and_bystander(net: Network, bystander_sl: int) -> tuple[float, float]:
    """Incast into cn0009 on VL0 (one sender through spine 0, three on its own leaf), and
    b (cn0002 -> cn0011 at half a link) on SL *bystander_sl*, sharing leaf 1's uplink and
    spine 0's downlink with the incast's remote flow.

    Returns b's first comm phase and what it would take at its declared rate.
    """
    senders = ["cn0001", "cn0010", "cn0012", "cn0014"]
    a = flow_job("a", [(s, "cn0009") for s in senders], 2 * CAP, 4 * N_SHARED * MTU)
    nbytes = N_SHARED * MTU
    b = flow_job("b", B_FLOW, CAP / 2, nbytes)
    assert len(shared_links(net, flow_job("x", A_FLOW, CAP, MTU), b)) == 2
    arb = arbitration({"a": 0, "b": bystander_sl}, ((0, ONE_PACKET), (1, ONE_PACKET)))
    result = run(net, [a, b], arb)
    return result.jobs["b"].iteration_ends_s[0], nbytes / (CAP / 2)


def test_blocked_lane_does_not_block_another_lane(net: Network) -> None:
    """On its own VL, b finds free credits past the congestion and keeps its rate."""
    took, declared = incast_and_bystander(net, bystander_sl=1)
    assert took == pytest.approx(declared, rel=0.02)


def test_blocked_lane_holds_back_its_own_traffic(net: Network) -> None:
    """On the incast's VL, b waits for credits that the stuck incast packets hold at
    leaf 2 (head-of-line blocking): it runs at about the incast's per-sender share."""
    took, declared = incast_and_bystander(net, bystander_sl=0)
    assert took > 1.5 * declared


def test_one_credit_spaces_packets(net: Network) -> None:
    """With one buffer slot per VL a packet may leave the host only once the previous one
    has left the leaf switch: packets go S + LAT apart instead of S."""
    n = 50
    job = flow_job("a", [("cn0001", "cn0002")], 2 * CAP, n * MTU)
    result = run(net, [job], arbitration({}, ((0, ONE_PACKET),)), buffer_packets=1)
    assert result.jobs["a"].t_s == pytest.approx((n - 1) * (S + LAT) + 2 * S + LAT, rel=1e-9)


def test_buffers_absorb_a_short_burst(net: Network) -> None:
    """M's 20 KB bursts overload the uplink H uses (20 GB/s into 12.5) for 2 us.  With 8
    slots per VL the leaf holds the excess and drains it afterwards, so H keeps its pace;
    with 2 slots H's packets back up into its CA, and a paced host never catches up.  (The
    fluid model has no buffers: it sides with small buffers, docs/simulate-validation.md.)"""
    h = flow_job("H", [("cn0001", "cn0009")], 10e9, 500 * MTU)
    m = flow_job("M", [("cn0002", "cn0011")], 10e9, 10 * MTU, duty=0.05)
    assert shared_links(net, h, m) - {ca_link(net, "cn0001")}  # an uplink in common
    arb = arbitration({}, ((0, ONE_PACKET),))
    cost = {}
    for slots in (2, 8):
        alone = run(net, [h], arb, buffer_packets=slots).jobs["H"].t_s
        cost[slots] = run(net, [h, m], arb, buffer_packets=slots).jobs["H"].t_s - alone
    assert cost[8] == pytest.approx(0.0, abs=1e-12)
    assert cost[2] > 1e-6


# -- 6-7: errors, determinism -----------------------------------------------------------


def test_lane_without_arbitration_entry_is_rejected(net: Network) -> None:
    job = flow_job("a", [("cn0001", "cn0002")], CAP, 10 * MTU)
    arb = arbitration({"a": 3}, ((0, ONE_PACKET), (1, ONE_PACKET)))
    with pytest.raises(SimError, match=r"job a is on VL 3, which has no VLArb entry"):
        run(net, [job], arb)


def test_weight_zero_entry_does_not_serve_its_lane(net: Network) -> None:
    job = flow_job("a", [("cn0001", "cn0002")], CAP, 10 * MTU)
    with pytest.raises(SimError, match=r"job a is on VL 1"):
        run(net, [job], arbitration({"a": 1}, ((0, ONE_PACKET), (1, 0))))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"buffer_packets": 0}, "buffer_packets 0"),
        ({"switch_latency_s": -1e-9}, "switch_latency_s"),
        ({"max_events": 100}, r"more than 100 events \(.* s simulated\); shrink"),
    ],
)
def test_bad_arguments(net: Network, options: dict[str, Any], message: str) -> None:
    job = flow_job("a", [("cn0001", "cn0002")], CAP, 100 * MTU)
    with pytest.raises(SimError, match=message):
        run(net, [job], arbitration({}, ((0, ONE_PACKET),)), **options)


def test_iterations_must_be_positive(net: Network) -> None:
    job = flow_job("a", [("cn0001", "cn0002")], CAP, MTU)
    sims = prepare(net, [job])
    with pytest.raises(SimError, match="iterations 0"):
        simulate_packets(net, sims, arbitration({}, ((0, ONE_PACKET),)), 0)


def test_runs_are_deterministic(net: Network) -> None:
    senders = ["cn0001", "cn0010", "cn0017", "cn0025"]
    a = flow_job("a", [(s, "cn0009") for s in senders], 2 * CAP, 64 * MTU, duty=0.7)
    b = Job("b", tuple(f"cn{i:04d}" for i in (2, 3, 11, 12, 18, 26)), "all-to-all", CAP, 0.5, 1e-4)
    arb = arbitration({"a": 0, "b": 1}, ((0, ONE_PACKET), (1, THREE_PACKETS)))
    first, second = (run(net, [a, b], arb, iterations=3) for _ in range(2))
    assert first.jobs == second.jobs
    assert first.events == second.events
    assert first.sim_time_s == second.sim_time_s
    assert first.link_bytes.tolist() == second.link_bytes.tolist()
    assert all(len(j.iteration_ends_s) >= 3 for j in first.jobs.values())
    assert first.sim_time_s == max(j.t_s for j in first.jobs.values())


def test_every_byte_is_carried(net: Network) -> None:
    """Each job's CA links carried its bytes of every iteration it ended, plus at most the
    part of the iteration under way (a phase ends only when all its packets are in)."""
    a = flow_job("a", [(s, "cn0009") for s in ("cn0001", "cn0010", "cn0017")], CAP, 96 * MTU)
    b = Job("b", ("cn0002", "cn0011", "cn0018", "cn0027"), "all-to-all", CAP, 0.6, 5e-5)
    arb = arbitration({"a": 0, "b": 1}, ((0, ONE_PACKET), (1, ONE_PACKET)))
    result = run(net, [a, b], arb, iterations=2)
    for sim in prepare(net, [a, b]):
        ended = len(result.jobs[sim.id].iteration_ends_s)
        sent = sum(result.link_bytes[ca_link(net, h)] for h in sim.job.nodes)
        per_iteration = sim.bytes_per_iteration
        assert ended * per_iteration - 1 <= sent < (ended + 1) * per_iteration
