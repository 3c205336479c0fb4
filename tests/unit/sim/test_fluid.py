"""The fluid model against hand-computed rates and times."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from ibqos.errors import SimError
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.sim.allocator import Allocator
from ibqos.sim.fluid import FluidSim, simulate_fluid
from ibqos.sim.maxmin import fill
from ibqos.sim.network import Network, xgft_network
from ibqos.sim.packet import simulate_packets
from ibqos.sim.qos import Arbitration
from ibqos.sim.senders import Senders, auto_buffers, forget_mix, granularity
from ibqos.sim.workload import SimJob, prepare

EDR4 = 12.5e9  # bytes/s of a 4x EDR link


@pytest.fixture(scope="module")
def pair_tree() -> Network:
    """Two leaves of two hosts under one spine: cn1, cn2 | cn3, cn4; one uplink per leaf."""
    return xgft_network(parse_xgft("2;2,2;1,1"))


def flow(jid: str, src: int, dst: int, rate: float, duty: float = 1.0) -> Job:
    """A two-host job sending from its first host to its second (matrix pattern)."""
    nodes = tuple(sorted((f"cn{src:04d}", f"cn{dst:04d}")))
    matrix = ((0.0, 1.0), (0.0, 0.0)) if nodes[0] == f"cn{src:04d}" else ((0.0, 0.0), (1.0, 0.0))
    return Job(jid, nodes, "matrix", rate, duty, 0.01, matrix=matrix)


def last_packet_s(links: int, rate: float, mtu: int) -> float:
    """What the buffered fluid model adds to a phase for its last packet's trip over
    *links* links of EDR4 (store and forward: the packet's time on each link after the
    first, 100 ns in each switch), less what it saves on the first link over a host
    pacing its packets at *rate* bytes per second (the packet model's sources)."""
    trip = (links - 1) * (mtu / EDR4 + 100e-9)
    return max(trip - max(mtu / rate - mtu / EDR4, 0.0), 0.0)


def setup(job_sl: dict[str, int], low: tuple[tuple[int, int], ...], **kw: object) -> Arbitration:
    sl2vl = tuple(range(8)) + (0,) * 8
    return Arbitration(job_sl, sl2vl, low, **kw)  # type: ignore[arg-type]


def shares(demand: list[float], weight: list[float], cap: float) -> list[float]:
    out = np.empty(len(demand))
    fill(np.array(demand), np.array(weight), cap, out)
    return list(out)


def test_fill_is_weighted_max_min() -> None:
    # 1 to share between three rows wanting 1, 1, 0.2 with weights 1, 3, 1: the small one
    # is served, the others split 0.8 in the ratio 1:3
    assert shares([1.0, 1.0, 0.2], [1.0, 3.0, 1.0], 1.0) == pytest.approx([0.2, 0.6, 0.2])
    # everything fits: everyone gets what it wants
    assert shares([0.3, 0.4], [1.0, 1.0], 1.0) == pytest.approx([0.3, 0.4])
    # equal weights and demands: equal halves; no demand, nothing; weight 0, nothing
    assert shares([2.0, 2.0, 0.0], [1.0, 1.0, 1.0], 1.0) == pytest.approx([0.5, 0.5, 0.0])
    assert shares([2.0, 2.0], [1.0, 0.0], 1.0) == pytest.approx([1.0, 0.0])


def test_a_job_alone_below_capacity_keeps_its_period(pair_tree: Network) -> None:
    jobs = prepare(pair_tree, [flow("A", 1, 2, 5e9, duty=0.5)])
    run = simulate_fluid(pair_tree, jobs, setup({"A": 0}, ((0, 32),)), 4)
    assert run.jobs["A"].iteration_ends_s == pytest.approx((0.01, 0.02, 0.03, 0.04))


def test_a_job_faster_than_its_link_is_slowed_to_the_link(pair_tree: Network) -> None:
    # 2x the host link: the 5 ms communication phase takes 10 ms, the iteration 15 ms
    jobs = prepare(pair_tree, [flow("A", 1, 2, 2 * EDR4, duty=0.5)])
    run = simulate_fluid(pair_tree, jobs, setup({"A": 0}, ((0, 32),)), 3)
    assert run.jobs["A"].t_s == pytest.approx(3 * 0.015)
    # bytes on the host link: what the job sent, 3 iterations x 25e9 x 5 ms
    src = pair_tree.router.port_index[pair_tree.hosts["cn0001"]]
    assert run.link_bytes[src] == pytest.approx(3 * 2 * EDR4 * 0.005)


def test_one_lane_splits_a_shared_uplink_between_its_inputs(pair_tree: Network) -> None:
    # A and B both cross leaf 1's only uplink, each at the full link rate: half each
    jobs = prepare(pair_tree, [flow("A", 1, 3, EDR4), flow("B", 2, 4, EDR4)])
    sim = FluidSim(pair_tree, jobs, setup({"A": 0, "B": 0}, ((0, 32),)))
    assert sim.alpha == pytest.approx([0.5, 0.5])
    # B offers half: the two inputs (cn1's and cn2's links) split the uplink max-min, so B
    # gets all it offers and A the rest, as the packet model does (A 20 ms, B 10 ms), not
    # 2/3 of each one's demand.  Downstream, at the spine's port to leaf 2, both come in
    # over the same input and fit.
    jobs = prepare(pair_tree, [flow("A", 1, 3, EDR4), flow("B", 2, 4, EDR4 / 2)])
    sim = FluidSim(pair_tree, jobs, setup({"A": 0, "B": 0}, ((0, 32),)))
    assert sim.alpha == pytest.approx([0.5, 1.0])
    run = simulate_fluid(pair_tree, jobs, setup({"A": 0, "B": 0}, ((0, 32),)), 1)
    assert run.jobs["A"].t_s == pytest.approx(0.02) and run.jobs["B"].t_s == pytest.approx(0.01)


def test_within_an_input_senders_share_its_bytes_max_min() -> None:
    # Three leaves of four hosts under one spine.  A (cn1 -> cn5, 10 GB/s) and B (cn2 ->
    # cn6, 5 GB/s) come into the spine over leaf 1's uplink, C (cn9 -> cn7, 10 GB/s) over
    # leaf 3's; all three go down the spine's port to leaf 2 (25 GB/s into 12.5).  The two
    # inputs get 6.25 each; leaf 1's goes to A and B at 3.125 each (bytes, not in
    # proportion to demand), as the packet model has it: B 1.60 ms, C 1.60 ms.
    net = xgft_network(parse_xgft("2;4,3;1,1"))

    def one(jid: str, src: int, dst: int, rate: float) -> Job:
        return Job(
            jid,
            (f"cn{src:04d}", f"cn{dst:04d}"),
            "matrix",
            rate,
            1.0,
            0.001,
            matrix=pairs(2, {(0, 1)}),
        )

    jobs = prepare(net, [one("A", 1, 5, 10e9), one("B", 2, 6, 5e9), one("C", 9, 7, 10e9)])
    sim = FluidSim(net, jobs, setup({"A": 0, "B": 0, "C": 0}, ((0, 32),)))
    assert sim.alpha == pytest.approx([0.3125, 0.625, 0.625])


def test_lane_weights_split_a_busy_link_and_idle_share_is_reused(pair_tree: Network) -> None:
    jobs = prepare(pair_tree, [flow("A", 1, 3, EDR4), flow("B", 2, 4, EDR4)])
    # A on VL1 with 1 packet per round, B on VL2 with 3 (MTU 2048 = 32 credits a packet)
    arb = setup({"A": 1, "B": 2}, ((1, 32), (2, 96)))
    sim = FluidSim(pair_tree, jobs, arb)
    assert sim.alpha == pytest.approx([0.25, 0.75])
    sim.run(2)
    # always communicating (duty 1): A's 10 ms phases take 40 ms at a quarter of its rate
    assert sim.ends[0][:2] == pytest.approx([0.04, 0.08])
    # work-conserving: B wants only a fifth of the link, A gets the rest despite weights
    light = prepare(pair_tree, [flow("A", 1, 3, EDR4), flow("B", 2, 4, EDR4 / 5)])
    assert FluidSim(pair_tree, light, arb).alpha == pytest.approx([0.8, 1.0])


def test_high_priority_goes_first_up_to_its_limit(pair_tree: Network) -> None:
    jobs = prepare(pair_tree, [flow("A", 1, 3, EDR4), flow("B", 2, 4, EDR4)])
    strict = setup({"A": 1, "B": 2}, ((1, 32),), vlarb_high=((2, 32),), high_limit=255)
    assert FluidSim(pair_tree, jobs, strict).alpha == pytest.approx([0.0, 1.0])
    # limit 0: one high packet, then one low packet while both wait: half each
    bounded = setup({"A": 1, "B": 2}, ((1, 32),), vlarb_high=((2, 32),), high_limit=0)
    assert FluidSim(pair_tree, jobs, bounded).alpha == pytest.approx([0.5, 0.5])


def test_compute_phases_free_the_link(pair_tree: Network) -> None:
    # duty 0.5, periods 10 ms: alone each would finish at 10 ms; together both phases
    # start at 5 ms and share the uplink, so each phase takes 10 ms and ends at 15 ms
    jobs = prepare(pair_tree, [flow("A", 1, 3, EDR4, 0.5), flow("B", 2, 4, EDR4, 0.5)])
    run = simulate_fluid(pair_tree, jobs, setup({"A": 0, "B": 0}, ((0, 32),)), 1)
    assert run.jobs["A"].t_s == pytest.approx(0.015) and run.jobs["B"].t_s == pytest.approx(0.015)
    assert run.events >= 4 and math.isclose(run.sim_time_s, 0.015)


def test_a_job_whose_lane_never_transmits_is_refused(pair_tree: Network) -> None:
    jobs = prepare(pair_tree, [flow("A", 1, 3, EDR4)])
    with pytest.raises(SimError, match="job A is on VL 3, which has no VLArb entry"):
        FluidSim(pair_tree, jobs, setup({"A": 3}, ((0, 32),)))


def test_a_job_without_traffic_keys_is_refused(pair_tree: Network) -> None:
    with pytest.raises(SimError, match="job X: needs pattern"):
        prepare(pair_tree, [Job("X", ("cn0001", "cn0002"))])
    with pytest.raises(SimError, match="host cn0001 is also in job A"):
        prepare(pair_tree, [flow("A", 1, 2, 1e9), flow("B", 1, 3, 1e9)])


def test_advance_moves_time_in_steps_like_one_run(pair_tree: Network) -> None:
    jobs = prepare(pair_tree, [flow("A", 1, 3, EDR4, 0.5), flow("B", 2, 4, EDR4, 0.3)])
    arb = setup({"A": 1, "B": 2}, ((1, 32), (2, 64)))
    whole = FluidSim(pair_tree, jobs, arb)
    whole.run(5)
    stepped = FluidSim(pair_tree, jobs, arb)
    while stepped.time < whole.time - 1e-12:
        stepped.advance(0.0037)
    assert stepped.ends[0][:5] == pytest.approx(whole.ends[0][:5])
    assert stepped.ends[1][:5] == pytest.approx(whole.ends[1][:5])


def pairs(n: int, links: set[tuple[int, int]]) -> tuple[tuple[float, ...], ...]:
    """An n-host traffic matrix with weight 1 on the given (source, destination) pairs."""
    return tuple(tuple(1.0 if (s, d) in links else 0.0 for d in range(n)) for s in range(n))


@pytest.fixture(scope="module")
def two_leaves() -> Network:
    """Two leaves of four hosts under one spine: cn1..cn4 | cn5..cn8."""
    return xgft_network(parse_xgft("2;4,2;1,1"))


def incast_and_uplink() -> tuple[Network, Job, Job]:
    """Three leaves of four hosts under one spine; H: cn1 -> cn9, cn5 and cn6 -> cn7 at
    10 GB/s each for 10 ms; M: cn2 -> cn10 at 5 GB/s, duty 0.5 of 8 ms."""
    net = xgft_network(parse_xgft("2;4,3;1,1"))
    h = Job(
        "H",
        ("cn0001", "cn0005", "cn0006", "cn0007", "cn0009"),
        "matrix",
        10e9,
        1.0,
        0.01,
        matrix=pairs(5, {(0, 4), (1, 3), (2, 3)}),
    )
    m = Job("M", ("cn0002", "cn0010"), "matrix", 5e9, 0.5, 0.008, matrix=pairs(2, {(0, 1)}))
    return net, h, m


def test_each_host_is_paced_on_its_own() -> None:
    # three leaves of four hosts under one spine.  H: cn5 and cn6 both send to cn7 (20 GB/s
    # into 12.5: 5/8 of the rate, its 10 ms of bytes take 16 ms); cn1 sends to cn9, up the
    # leaf-1 uplink that M (cn2 -> cn10, 5 GB/s) shares from 4 ms to 8 ms.  The uplink's
    # two inputs split it max-min: M gets its 5 GB/s, cn1 7.5 (0.75), so cn1 is done at
    # 11 ms, long before the in-cast: H loses nothing (the packet model: 16.0 ms and 8.0).
    # One rate for the whole job would have slowed the in-cast too.
    net, h, m = incast_and_uplink()
    sim = FluidSim(net, prepare(net, [h, m]), setup({"H": 0, "M": 0}, ((0, 32),)))
    # senders: H's cn1, cn5, cn6 (cn7 and cn9 only receive), then M's cn2 (computing)
    assert sim.sender_alpha == pytest.approx([1.0, 0.625, 0.625, 0.0])
    sim.run(1)
    assert sim.ends[0][0] == pytest.approx(0.016)
    assert sim.ends[1][0] == pytest.approx(0.008)


def test_an_in_cast_downstream_leaves_its_lane_s_other_senders_alone(
    two_leaves: Network,
) -> None:
    # H: cn1 and cn5 both send to cn6 at 10 GB/s (20 into 12.5: H runs at 5/8).  cn1's
    # flow crosses leaf 1's uplink before the in-cast, and M (cn2 -> cn7, 6 GB/s) too.
    # The uplink carries 6.25 + 6 <= 12.5 once H is held at the in-cast, so M keeps its
    # rate on one lane as on two.  Head-of-line blocking is not modelled: the packet model
    # has M lose 9 us of 100 on one lane (its FIFOs fill before H settles), 0 on two.
    h = Job(
        "H",
        ("cn0001", "cn0005", "cn0006"),
        "matrix",
        10e9,
        1.0,
        1e-4,
        matrix=pairs(3, {(0, 2), (1, 2)}),
    )
    m = Job("M", ("cn0002", "cn0007"), "matrix", 6e9, 1.0, 1e-4, matrix=pairs(2, {(0, 1)}))
    jobs = prepare(two_leaves, [h, m])
    one = FluidSim(two_leaves, jobs, setup({"H": 0, "M": 0}, ((0, 32),)))
    assert one.alpha == pytest.approx([0.625, 1.0])
    two = FluidSim(two_leaves, jobs, setup({"H": 1, "M": 2}, ((1, 32), (2, 32))))
    assert two.alpha == pytest.approx([0.625, 1.0])
    run = simulate_fluid(two_leaves, jobs, setup({"H": 0, "M": 0}, ((0, 32),)), 1)
    assert run.jobs["M"].t_s == pytest.approx(1e-4)
    # With switch buffers the in-cast fills them and leaf 2's input from the spine, which
    # M's flow shares, moves at the pace of cn1's flow (6.25 GB/s); M brings less than
    # that, so the head of line does not slow it (the packet model: 109 us).  Its phase
    # ends when its last packet is at cn7, four links on.
    one_lane = setup({"H": 0, "M": 0}, ((0, 32),))
    buffered = simulate_fluid(two_leaves, jobs, one_lane, 1, buffer_packets=8)
    assert buffered.jobs["M"].t_s == pytest.approx(1e-4 + last_packet_s(4, 6e9, one_lane.mtu))
    assert buffered.jobs["H"].t_s > 1.5e-4  # H itself is held at the in-cast


def test_a_full_column_holds_only_the_inputs_whose_buffers_it_fills() -> None:
    # Three leaves of three hosts under one spine.  H: cn1 and cn2 -> cn7 (an in-cast on
    # the spine's port down to leaf 3, fed by leaf 1's uplink); M: cn4 -> cn8 at 1 GB/s
    # into the same port over leaf 2's uplink; N: cn5 -> cn3 at 10 GB/s over leaf 2's
    # uplink too, down to leaf 1, a port with room.  All on one lane.  Leaf 2's input at
    # the spine brings the in-cast far less than its share: its packets for it leave as
    # they come (1 GB/s for the 2.6 us they wait there is 2.6 kB of its 16 kB), so that
    # buffer never fills and N is not held behind them (Little's law).  A model that holds
    # every switch input of a full column at its fastest host's bytes would give N
    # M's 1 GB/s, 847 us for 100.
    net = xgft_network(parse_xgft("2;3,3;1,1"))
    incast = pairs(3, {(0, 2), (1, 2)})
    h = Job("H", ("cn0001", "cn0002", "cn0007"), "matrix", EDR4, 1.0, 2e-4, matrix=incast)
    m = replace(flow("M", 4, 8, 1e9), period_s=1e-4)
    n = replace(flow("N", 5, 3, 10e9), period_s=1e-4)
    jobs = prepare(net, [h, m, n])
    one_lane = setup({"H": 0, "M": 0, "N": 0}, ((0, 32),))
    run = simulate_fluid(net, jobs, one_lane, 1, buffer_packets=8)
    packet = simulate_packets(net, jobs, one_lane, 1, buffer_packets=8)
    assert packet.jobs["N"].t_s == pytest.approx(1e-4, rel=0.01)
    assert run.jobs["N"].t_s == pytest.approx(1e-4, rel=0.15)
    assert run.jobs["H"].t_s == pytest.approx(packet.jobs["H"].t_s, rel=0.01)


def test_a_backlog_held_back_below_leaves_its_link_to_the_other_lanes() -> None:
    # H: cn1 -> cn7 and cn2 -> cn8 up leaf 1's uplink (25 GB/s into 12.5) on lane 0,
    # weight 4; M: cn4 -> cn9 on lane 0 too, so the spine's port down to leaf 3 splits
    # 6.25 : 6.25 between its inputs; L: cn3 -> cn6 up the same uplink on lane 1, weight
    # 1.  H's lane on the uplink fills and holds a backlog, but the spine's input below
    # it is held at 6.25 GB/s by the full port down to leaf 3: the backlog cannot leave
    # faster, so it asks the uplink for no more, and L gets the other 6.25, not the 2.5
    # of its weight (packet model: L ends at 202.65 us for 200).  A model that drained the
    # backlog into the held input at 10 GB/s would run L at 2.5 meanwhile.
    net = xgft_network(parse_xgft("2;3,3;1,1"))
    nodes = ("cn0001", "cn0002", "cn0007", "cn0008")
    h = Job("H", nodes, "matrix", EDR4, 1.0, 4e-4, matrix=pairs(4, {(0, 2), (1, 3)}))
    m = replace(flow("M", 4, 9, EDR4), period_s=4e-4)
    low = replace(flow("L", 3, 6, EDR4), period_s=1e-4)
    jobs = prepare(net, [h, m, low])
    two_lanes = setup({"H": 0, "M": 0, "L": 1}, ((0, 128), (1, 32)))
    sim = FluidSim(net, jobs, two_lanes, buffer_packets=8)
    sim.advance(2e-6)  # the uplink's lanes are full, H's with a backlog
    assert sim.buffered_bytes > 0
    assert sim.alpha[2] == pytest.approx(0.5)
    run = simulate_fluid(net, jobs, two_lanes, 1, buffer_packets=8)
    packet = simulate_packets(net, jobs, two_lanes, 1, buffer_packets=8)
    assert run.jobs["L"].t_s == pytest.approx(packet.jobs["L"].t_s, rel=0.01)


def test_a_per_job_sender_weighs_as_its_hosts_within_an_input() -> None:
    # Three leaves of four hosts under one spine.  A: cn1 -> cn5 and cn2 -> cn6, B: cn3 ->
    # cn7, C: cn9 -> cn8, all at 10 GB/s per host.  Leaf 1's uplink gives its three host
    # inputs 12.5 / 3 each; the spine's port down to leaf 2 splits 6.25 : 6.25 between
    # its inputs (leaf 1's and leaf 3's uplinks), and leaf 1's share goes to its three
    # hosts alike: 2.08 GB/s each.  One sender for all of A counts as A's two hosts, so
    # per job gives A and B what per host does (as one sender, A would get half of 6.25).
    net = xgft_network(parse_xgft("2;4,3;1,1"))
    a = Job(
        "A",
        ("cn0001", "cn0002", "cn0005", "cn0006"),
        "matrix",
        10e9,
        1.0,
        0.001,
        matrix=pairs(4, {(0, 2), (1, 3)}),
    )
    b = Job("B", ("cn0003", "cn0007"), "matrix", 10e9, 1.0, 0.001, matrix=pairs(2, {(0, 1)}))
    c = Job("C", ("cn0008", "cn0009"), "matrix", 10e9, 1.0, 0.001, matrix=pairs(2, {(1, 0)}))
    jobs = prepare(net, [a, b, c])
    arb = setup({"A": 0, "B": 0, "C": 0}, ((0, 32),))
    host = FluidSim(net, jobs, arb, "host").alpha
    job = FluidSim(net, jobs, arb, "job").alpha
    assert host == pytest.approx([6.25 / 3 / 10, 6.25 / 3 / 10, 0.625])
    assert job == pytest.approx(host)


def test_per_job_senders_move_a_job_at_one_rate() -> None:
    # The same mix as test_a_job_alone_below_capacity_keeps_its_period, one rate per job:
    # H's three senders share the in-cast's 12.5 GB/s, so all of H runs at the rate of its
    # held-back hosts (5/8), including cn1, whose own flow has room.
    net, h, m = incast_and_uplink()
    jobs = prepare(net, [h, m])
    arb = setup({"H": 0, "M": 0}, ((0, 32),))
    sim = FluidSim(net, jobs, arb, "job")
    assert sim.senders.rows == 2
    assert sim.alpha == pytest.approx([0.625, 0.0])
    sim.run(1)
    assert sim.ends[0][0] == pytest.approx(0.016)
    # auto: per host for a mix this small, per job above AUTO_HOSTS sending hosts
    assert FluidSim(net, jobs, arb).senders.rows == 4
    assert granularity(jobs) == "host"


def test_auto_goes_per_job_above_the_host_limit(
    pair_tree: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ibqos.sim import senders as fluid

    jobs = prepare(pair_tree, [flow("A", 1, 3, 6e9), flow("B", 2, 4, 6e9)])
    assert granularity(jobs) == "host"
    monkeypatch.setattr(fluid, "AUTO_HOSTS", 1)
    assert granularity(jobs) == "job"


def test_the_commands_buffers_follow_the_mix_s_senders(
    pair_tree: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Buffered per host, unbuffered per job (too slow there yet), decided by the whole mix
    # so that its jobs alone get the same buffers as the mix; the library's own default
    # stays none.
    from ibqos.sim import senders as fluid

    jobs = prepare(pair_tree, [flow("A", 1, 3, 6e9), flow("B", 2, 4, 6e9)])
    assert auto_buffers(jobs) == auto_buffers(jobs, "host") == fluid.AUTO_BUFFER_PACKETS == 8
    assert auto_buffers(jobs, "job") == 0
    assert FluidSim(pair_tree, jobs, setup({"A": 0, "B": 0}, ((0, 32),))).buffer_packets == 0
    monkeypatch.setattr(fluid, "AUTO_HOSTS", 1)
    assert auto_buffers(jobs) == 0
    # a job alone has one sending host, so on its own it would get buffers: its runs take
    # the mix's granularity (as evaluate.alone does), and so the mix's buffers
    assert auto_buffers(jobs[:1]) == 8
    assert auto_buffers(jobs[:1], granularity(jobs)) == 0
    assert auto_buffers(jobs, given=3) == 3


def test_jobs_that_share_no_hot_link_are_solved_apart(two_leaves: Network) -> None:
    # A and B overload leaf 1's uplink together (20 GB/s); C and D leaf 2's (15: D gets its
    # 5 as one of two inputs, C the rest).  When B
    # ends its phase, only A's group is solved again: C and D's rates come back from the
    # kept solution, equal to solving everything at once.
    jobs = prepare(
        two_leaves,
        [
            flow("A", 1, 5, 10e9),
            flow("B", 2, 6, 10e9),
            flow("C", 7, 3, 10e9),
            flow("D", 8, 4, 5e9),
        ],
    )
    arb = setup({"A": 0, "B": 0, "C": 0, "D": 0}, ((0, 32),))
    alloc = Allocator(two_leaves, jobs, arb)
    solved: list[list[int]] = []
    real = alloc._solve

    def counting(todo: np.ndarray, hot: np.ndarray, label: np.ndarray) -> np.ndarray:
        solved.append(np.flatnonzero(todo).tolist())
        return real(todo, hot, label)

    alloc._solve = counting  # type: ignore[method-assign]
    everyone = alloc.rates(np.ones(4, dtype=bool))
    assert everyone == pytest.approx([0.625, 0.625, 0.75, 1.0])
    assert solved == [[0, 1, 2, 3]]  # both groups in one solve
    no_b = alloc.rates(np.array([True, False, True, True]))
    assert no_b == pytest.approx([1.0, 0.0, 0.75, 1.0])
    assert solved == [[0, 1, 2, 3]]  # A alone overloads nothing; C and D were kept
    again = alloc.rates(np.ones(4, dtype=bool))
    assert again == pytest.approx(everyone) and len(solved) == 1
    fresh = Allocator(two_leaves, jobs, arb).rates(np.array([True, False, True, True]))
    assert fresh == pytest.approx(no_b)


def four_jobs(duty: float = 1.0) -> tuple[Network, list[SimJob], Arbitration]:
    """Three leaves of four hosts under one spine; four jobs that cross each other, on
    two lanes of unequal weight (B with the given duty)."""
    net = xgft_network(parse_xgft("2;4,3;1,1"))
    jobs = prepare(
        net,
        [
            Job("A", ("cn0001", "cn0002", "cn0005", "cn0009"), "all-to-all", 8e9, 1.0, 0.01),
            Job("B", ("cn0003", "cn0006", "cn0010"), "ring", 6e9, duty, 0.01),
            flow("C", 4, 7, 10e9),
            Job("D", ("cn0008", "cn0011", "cn0012"), "all-to-all", 5e9, 1.0, 0.01),
        ],
    )
    return net, jobs, setup({"A": 1, "B": 2, "C": 1, "D": 2}, ((1, 1), (2, 4)))


def test_a_solve_that_keeps_its_first_round_matches_a_fresh_one() -> None:
    # The solver keeps its first round from one solve to the next and fills again only
    # the links whose senders changed; over a run of changing active senders, in two
    # lanes of unequal weight, every answer must equal a fresh allocator's to the bit.
    net, jobs, arb = four_jobs()
    kept = Allocator(net, jobs, arb)
    rows = kept.senders.rows
    rng = np.random.default_rng(7)
    held_back = 0
    for _ in range(60):
        active = rng.random(rows) < 0.7
        kept._memo.clear()  # solve every time, from the kept first round
        got = kept.rates(active)
        want = Allocator(net, jobs, arb).rates(active)
        np.testing.assert_array_equal(got, want)
        held_back += int(((got > 0) & (got < 1)).sum())
    assert held_back > 0  # the mix does contend: a check of something


def test_a_job_s_senders_cut_from_its_mix_are_those_it_has_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ibqos simulate routes a mix once and cuts each job's T_alone run from it; the cut
    # must be what routing the job alone gives, to the bit, per host and per job.
    net, jobs, arb = four_jobs(duty=0.5)
    for per in ("host", "job"):
        mix = Senders.of(net, jobs, per)
        for j, job in enumerate(jobs):
            cut, alone = mix.alone(j), Senders.of(net, [job], per)
            for name in ("job", "rate", "first", "e_row", "e_link", "e_in", "e_load", "e_hosts"):
                a, b = getattr(cut, name), getattr(alone, name)
                assert a.dtype == b.dtype, name
                np.testing.assert_array_equal(a, b, err_msg=f"{job.id} {per} {name}")
        assert mix.alone(0).rows < mix.rows  # a cut, not the mix
    # and runs that reuse them (no routing of their own) end as runs that route their own
    built: list[int] = []
    of = Senders.of.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Senders], *args: object) -> Senders:
        built.append(len(args[1]))  # type: ignore[arg-type]
        return of(cls, *args)  # type: ignore[no-any-return]

    monkeypatch.setattr(Senders, "of", classmethod(counted))
    forget_mix()
    mix_run = simulate_fluid(net, jobs, arb, 3)
    again = simulate_fluid(net, jobs, arb, 3)
    reused = [simulate_fluid(net, [j], arb, 3, "host").jobs[j.id] for j in jobs]
    assert built == [4]  # the mix, once
    assert again.jobs == mix_run.jobs
    forget_mix()
    fresh = [simulate_fluid(net, [j], arb, 3, "host").jobs[j.id] for j in jobs]
    assert built == [4, 1, 1, 1, 1]
    assert reused == fresh


def up_one_link(
    rate_a: float, rate_b: float, duty_b: float, period_a: float = 0.01, period_b: float = 0.01
) -> tuple[Network, list[SimJob]]:
    """A (cn1 -> cn4) and B (cn2 -> cn7) up leaf 1's only uplink, then apart at the spine:
    the uplink's lane has the buffers of its two inputs (cn1's and cn2's links), each
    holding traffic for the uplink only."""
    net = xgft_network(parse_xgft("2;3,3;1,1"))
    a = replace(flow("A", 1, 4, rate_a), period_s=period_a)
    b = replace(flow("B", 2, 7, rate_b), duty=duty_b, period_s=period_b)
    return net, prepare(net, [a, b])


def test_buffers_absorb_the_excess_until_full_then_the_lane_s_share_holds() -> None:
    net, jobs = up_one_link(EDR4, EDR4 / 2, 1.0)
    one_lane = setup({"A": 0, "B": 0}, ((0, 32),))
    room = 2 * 8 * one_lane.mtu  # two inputs of 8 packets
    fill_s = room / (EDR4 / 2)  # 18.75 GB/s into 12.5
    sim = FluidSim(net, jobs, one_lane, buffer_packets=8)
    assert sim.alpha == pytest.approx([1.0, 1.0])  # the buffers take the excess
    sim.advance(0.99 * fill_s)
    assert sim.alpha == pytest.approx([1.0, 1.0]) and sim.buffer_events == 0
    sim.advance(0.02 * fill_s)
    # full: the link's inputs split it max-min as without buffers (B gets its 6.25)
    assert sim.alpha == pytest.approx([0.5, 1.0])
    assert sim.buffer_events == 1 and sim.buffered_bytes == pytest.approx(room)


@pytest.mark.parametrize("packets", [8, 32])
def test_a_phase_ends_when_its_last_bytes_are_out_of_the_buffers(packets: int) -> None:
    # An in-cast up leaf 1's only uplink: cn1 and cn2 send 1.25 MB each to cn4 at the
    # link's rate.  The uplink is busy from the first byte to the last: 2.5 MB at 12.5
    # GB/s, 200 us (packet model: 200.8, store and forward).  With buffers the hosts are
    # done sooner, by what the buffers hold then, and the phase ends when the bytes are
    # out: behind what the queues on the path hold, at the rate each column sends on.  The
    # links after the uplink see the hosts' rate while it fills (a simplification,
    # docs/simulate-validation.md): their buffers (one input each) fill first
    # and hold the hosts to the link's rate, the uplink's half full.  The queues drain
    # together, so the last bytes wait for the longest one (one input's worth), not for
    # their sum, and the phase ends at 200 us and the last packet's trip
    # (0.8 us, store and forward over three more links), as in the packet model (200.8).
    net = xgft_network(parse_xgft("2;3,3;1,1"))
    incast = ((0.0, 0.0, 1.0), (0.0, 0.0, 1.0), (0.0, 0.0, 0.0))
    job = Job("A", ("cn0001", "cn0002", "cn0004"), "matrix", EDR4, 1.0, 100e-6, matrix=incast)
    jobs = prepare(net, [job])
    one_lane = setup({"A": 0}, ((0, 32),))
    assert simulate_fluid(net, jobs, one_lane, 1).jobs["A"].t_s == pytest.approx(200e-6)
    sim = FluidSim(net, jobs, one_lane, buffer_packets=packets)
    while sim.bytes_left.any():
        sim.advance(sim.next_event_s())
    per_input = packets * one_lane.mtu
    assert sim.time == pytest.approx(200e-6 - per_input / EDR4, rel=1e-9)
    assert sim.buffered_bytes == pytest.approx(3 * per_input)  # one input's worth each
    run = simulate_fluid(net, jobs, one_lane, 1, buffer_packets=packets)
    end = 200e-6 + last_packet_s(4, EDR4, one_lane.mtu)
    assert run.jobs["A"].t_s == pytest.approx(end, rel=1e-9), "see the comment"
    assert run.sim_time_s == run.jobs["A"].t_s  # the run lasts until the bytes are out
    packet = simulate_packets(net, jobs, one_lane, 1, buffer_packets=packets)
    assert packet.jobs["A"].t_s == pytest.approx(end, rel=1e-3)


def test_every_iteration_alone_starts_with_empty_buffers() -> None:
    # The in-cast above with a 100 us compute phase before each 100 us of bytes.  When
    # the hosts stop, nothing feeds the uplink: its buffers are empty, not full, so the
    # next phase fills them again and every iteration alone lasts as long as the first.
    # (A column that stayed full with nothing held would hold the hosts at once from the
    # second iteration on: they would send their last bytes only at the end, with nothing
    # left to drain.)
    net = xgft_network(parse_xgft("2;3,3;1,1"))
    incast = ((0.0, 0.0, 1.0), (0.0, 0.0, 1.0), (0.0, 0.0, 0.0))
    job = Job("A", ("cn0001", "cn0002", "cn0004"), "matrix", EDR4, 0.5, 200e-6, matrix=incast)
    jobs = prepare(net, [job])
    one_lane = setup({"A": 0}, ((0, 32),))
    length = 100e-6 + 200e-6 + last_packet_s(4, EDR4, one_lane.mtu)
    sim = FluidSim(net, jobs, one_lane, buffer_packets=8)
    sent: list[float] = []  # when the hosts have sent their bytes, from the phase's start
    for _ in range(100):
        had = bool(sim.bytes_left.any())
        sim.advance(sim.next_event_s())
        if had and not sim.bytes_left.any():
            sent.append(sim.time - (len(sent) * length + 100e-6))
        if len(sent) == 3:
            break
    # the buffers take one input's worth of each phase (above)
    assert sent == pytest.approx([200e-6 - 8 * one_lane.mtu / EDR4] * 3, rel=1e-9)
    run = simulate_fluid(net, jobs, one_lane, 3, buffer_packets=8)
    lengths = np.diff((0.0, *run.jobs["A"].iteration_ends_s))
    assert lengths == pytest.approx([length] * 3, rel=1e-9)


def test_the_last_bytes_drain_at_the_rate_their_queue_gets_after_the_senders_stop() -> None:
    # The in-cast above (H, both hosts at the link's rate for 100 us) shares the spine's
    # link down to leaf 2 with M (cn3 to cn5, half the link for 398 us, on its own lane,
    # equal weights), so H gets half of it too.  H's hosts are done at 697.4 us with a
    # full buffer ahead of their last bytes, which leaves at half the link until M stops at
    # 698 us and at the whole link after.  So H ends about 1 us after M, as in the packet
    # model; at the rate of the moment the hosts were done it would be 2.1 us more (session
    # 17).  (The fluid model counts each job's last packet's trip from its host, 0.8 us
    # for H and 0.6 for M, who paces its packets: 0.25 us more for H than the packet
    # model, where H's last packet had crossed two of its links while it waited.)
    net = xgft_network(parse_xgft("2;3,3;1,1"))
    incast = ((0.0, 0.0, 1.0), (0.0, 0.0, 1.0), (0.0, 0.0, 0.0))
    h = Job("H", ("cn0001", "cn0002", "cn0004"), "matrix", EDR4, 0.25, 400e-6, matrix=incast)
    m_matrix = ((0.0, 1.0), (0.0, 0.0))
    m = Job("M", ("cn0003", "cn0005"), "matrix", EDR4 / 2, 398 / 698, 698e-6, matrix=m_matrix)
    jobs = prepare(net, [h, m])
    two_lanes = setup({"H": 1, "M": 2}, ((1, 32), (2, 32)))
    fluid = simulate_fluid(net, jobs, two_lanes, 1, buffer_packets=8)
    packet = simulate_packets(net, jobs, two_lanes, 1, buffer_packets=8)
    assert fluid.jobs["M"].t_s == pytest.approx(698e-6 + last_packet_s(4, EDR4 / 2, two_lanes.mtu))
    after_fluid = fluid.jobs["H"].t_s - fluid.jobs["M"].t_s
    after_packet = packet.jobs["H"].t_s - packet.jobs["M"].t_s
    assert after_packet == pytest.approx(1.0e-6, abs=0.1e-6)
    assert after_fluid == pytest.approx(after_packet, abs=0.3e-6)


def test_a_light_lane_s_last_packets_wait_for_the_heavy_lane_s_turn() -> None:
    # A (0.9 of the link, always sending) and B (1.5 GB/s, half of its 1 ms) share leaf
    # 1's uplink on two lanes, A's with one VLArb entry of 4 packets, B's of 1.  B is well
    # within its share: it is never slowed, but its last packet comes in while A's lane
    # sends (0.88 of the time) and waits half a turn of A's on average (4 packets), so
    # its iteration ends that much after 1 ms (packet model: 0.337 us).
    net, jobs = up_one_link(0.9 * EDR4, 1.5e9, 0.5, period_a=0.002, period_b=0.001)
    two_lanes = setup({"A": 0, "B": 1}, ((0, 128), (1, 32)))
    mtu = two_lanes.mtu
    wait = (EDR4 - 1.5e9) / EDR4 * (4 * mtu / EDR4) / 2
    assert simulate_fluid(net, jobs, two_lanes, 1).jobs["B"].t_s == pytest.approx(0.001)
    run = simulate_fluid(net, jobs, two_lanes, 1, buffer_packets=8)
    assert run.jobs["B"].t_s == pytest.approx(0.001 + wait, rel=1e-12)
    packet = simulate_packets(net, jobs, two_lanes, 1).jobs["B"].t_s - 0.001
    assert packet == pytest.approx(wait, rel=0.25)


def test_a_setup_changed_mid_run_prices_the_last_packets_on_the_new_lanes() -> None:
    # The case above, but B's first iteration runs with A on one lane (no other lane's
    # turn to wait for, and B's paths kept for that setup), and the two lanes come while B
    # computes again: its next iteration is the two-lane one, turn wait included.
    net, jobs = up_one_link(0.9 * EDR4, 1.5e9, 0.5, period_a=0.002, period_b=0.001)
    one_lane = setup({"A": 0, "B": 0}, ((0, 32),))
    two_lanes = setup({"A": 0, "B": 1}, ((0, 128), (1, 32)))
    wait = (EDR4 - 1.5e9) / EDR4 * (4 * two_lanes.mtu / EDR4) / 2
    sim = FluidSim(net, jobs, one_lane, buffer_packets=8)
    while sim.iterations[1] < 1:
        sim.advance(sim.next_event_s())
    assert not sim.comm[1]
    sim.set_arbitration(two_lanes)
    while sim.iterations[1] < 2:
        sim.advance(sim.next_event_s())
    assert sim.ends[1][1] - sim.ends[1][0] == pytest.approx(0.001 + wait, rel=1e-9)


def test_full_buffers_drain_once_their_senders_bring_less_than_the_link() -> None:
    # A sends all the time (a 20 ms phase), B half of its 10 ms period (computing
    # first), both at 0.75 of the link: while both send they fill (at 6.25 GB/s) and then
    # hold both at 2/3; when B computes again, A alone brings 9.375 GB/s and the backlog
    # drains at the 3.125 left
    net, jobs = up_one_link(0.75 * EDR4, 0.75 * EDR4, 0.5, period_a=0.02)
    one_lane = setup({"A": 0, "B": 0}, ((0, 32),))
    room = 2 * 8 * one_lane.mtu
    sim = FluidSim(net, jobs, one_lane, buffer_packets=8)
    while not sim.comm[1]:
        sim.advance(sim.next_event_s())
    sim.advance(2 * room / (0.5 * EDR4))
    assert sim.alpha == pytest.approx([2 / 3, 2 / 3])
    assert sim.buffered_bytes == pytest.approx(room) and sim.buffer_events == 1
    while sim.comm[1]:
        sim.advance(sim.next_event_s())
    # B's input buffer is no longer counted (what it held, delivered); A's still full
    assert sim.alpha[0] == pytest.approx(1.0) and sim.buffered_bytes == pytest.approx(room / 2)
    drain_s = room / 2 / (0.25 * EDR4)
    sim.advance(0.99 * drain_s)
    assert 0 < sim.buffered_bytes < 0.02 * room
    sim.advance(0.02 * drain_s)
    assert sim.buffered_bytes == 0 and sim.buffer_events == 2


def test_buffers_of_a_negative_size_are_refused(pair_tree: Network) -> None:
    jobs = prepare(pair_tree, [flow("A", 1, 3, EDR4)])
    with pytest.raises(SimError, match="buffer_packets: expected 0 or more, got -1"):
        FluidSim(pair_tree, jobs, setup({"A": 0}, ((0, 32),)), buffer_packets=-1)


def test_a_full_buffer_holds_its_input_s_other_traffic_of_the_lane() -> None:
    # Head of line.  H: cn1, cn17 and cn26 each send 10 GB/s to cn9 (30 into 12.5); M
    # sends 8 GB/s cn2 -> cn25 and meets H only on leaf 1's uplink, which has room for
    # both.  On one lane cn9's link fills its buffers, the spine's port to leaf 2 backs up,
    # and the spine's input from leaf 1 lets cn1's flow through at 25/6 GB/s; leaf 1's
    # uplink serves cn1 and cn2 in turn, so M's packets come in no faster: 25/48 of its
    # rate (the packet model: M takes 199.5 us for 100).  On a lane of its own M keeps it.
    net = xgft_network(parse_xgft("2;8,4;1,1"))
    h_hosts = ("cn0001", "cn0009", "cn0017", "cn0026")
    to_cn9 = tuple(tuple(1.0 if b == 1 and a != 1 else 0.0 for b in range(4)) for a in range(4))
    h = Job("H", h_hosts, "matrix", 10e9, 1.0, 100e-6, matrix=to_cn9)
    m = Job("M", ("cn0002", "cn0025"), "matrix", 8e9, 1.0, 100e-6, matrix=((0, 1), (0, 0)))
    jobs = prepare(net, [h, m])
    one_lane = setup({"H": 0, "M": 0}, ((0, 32),))
    own_lanes = setup({"H": 0, "M": 1}, ((0, 1), (1, 4)))
    for arb, m_alpha in ((one_lane, 25 / 48), (own_lanes, 1.0)):
        sim = FluidSim(net, jobs, arb, buffer_packets=8)
        sim.advance(20e-6)  # the buffers are full after a few µs
        assert sim.buffer_events > 0
        assert sim.sender_alpha[:3] == pytest.approx([5 / 12] * 3)
        assert sim.alpha[1] == pytest.approx(m_alpha)
    # One sender for all of H weighs as the one host of it that comes in over leaf 1's
    # uplink, not as its three: M is held to the same bytes.
    per_job = FluidSim(net, jobs, one_lane, "job", buffer_packets=8)
    per_job.advance(20e-6)
    assert per_job.senders.rows == 2
    assert per_job.alpha == pytest.approx([5 / 12, 25 / 48])
