"""The policies the simulator compares, on a small slimmed tree."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ibqos.errors import SimError
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.sim.evaluate import alone, evaluate
from ibqos.sim.network import Network, xgft_network
from ibqos.sim.policies import (
    ADAPTIVE,
    DEFAULT_LANES,
    POLICIES,
    _partitions,
    best_of,
    build,
    grid,
)
from ibqos.sim.workload import SimJob, prepare

#: the policies that are one setup (ibqos tunes as the mix runs: test_sim_closedloop.py)
SETUPS = [p for p in POLICIES if p != ADAPTIVE]


def hosts(leaf_slots: range) -> tuple[str, ...]:
    """Hosts in the given slots of every leaf (4 leaves of 8): interleaved placements."""
    return tuple(f"cn{leaf * 8 + s + 1:04d}" for leaf in range(4) for s in leaf_slots)


@pytest.fixture(scope="module")
def mix() -> tuple[Network, list[SimJob]]:
    net = xgft_network(parse_xgft("2;8,4;1,2"))  # 8 hosts to 2 uplinks: 4:1 at the leaves
    jobs = [
        Job("H", hosts(range(0, 4)), "all-to-all", 10e9, 0.6, 0.01),
        Job("M", hosts(range(4, 6)), "halo", 5e9, 0.3, 0.01),
        Job("L", hosts(range(6, 8)), "ring", 2e9, 0.2, 0.01),
    ]
    return net, prepare(net, jobs)


def test_every_policy_gives_every_job_a_served_lane(mix: tuple[Network, list[SimJob]]) -> None:
    net, jobs = mix
    lanes = {}
    for name in SETUPS:
        arb = build(name, net, jobs, 3)
        arb.check_jobs([j.id for j in jobs])
        lanes[name] = {j.id: arb.vl_of(j.id) for j in jobs}
    assert set(lanes["one-vl"].values()) == {0}
    assert len(set(lanes["equal"].values())) == 3
    # ibqos keeps SL 0 for unmanaged traffic and gives jobs SLs of their own
    ibqos = build("ibqos-fixed", net, jobs, 3)
    assert 0 not in ibqos.job_sl.values()


def test_bandwidth_weights_follow_demand(mix: tuple[Network, list[SimJob]]) -> None:
    net, jobs = mix
    arb = build("bandwidth", net, jobs, 3)
    packets = arb.low_packets()
    h, m, light = (packets[arb.vl_of(j)] for j in ("H", "M", "L"))
    assert h > m > light


def test_ibqos_favours_the_light_lanes(mix: tuple[Network, list[SimJob]]) -> None:
    net, jobs = mix
    arb = build("ibqos-fixed", net, jobs, 3)
    packets = arb.low_packets()
    assert packets[arb.vl_of("L")] > packets[arb.vl_of("H")]


def test_optimal_is_no_worse_than_any_policy_by_its_objective(
    mix: tuple[Network, list[SimJob]],
) -> None:
    net, jobs = mix
    t_alone = alone("fluid", net, jobs, build("one-vl", net, jobs, 3), 3)
    for objective in ("node-time", "worst-job"):
        outs = {
            name: evaluate(
                "fluid", net, jobs, build(name, net, jobs, 3, objective=objective), 3, t_alone
            )
            for name in SETUPS
        }
        measures = {name: o.measure(objective) for name, o in outs.items()}
        assert measures["optimal"] <= min(measures.values()) + 1e-12, objective
    # separating the heavy job from the others removes most of one VL's excess slowdown
    assert outs["ibqos-fixed"].gain(outs["one-vl"]) > 0.5


def test_the_search_keeps_every_setups_s_and_the_first_best(
    mix: tuple[Network, list[SimJob]],
) -> None:
    net, jobs = mix
    base = build("one-vl", net, jobs, 3)
    t_alone = alone("fluid", net, jobs, base, 3)
    setups = grid(jobs, DEFAULT_LANES)
    # 3 jobs on 8 lanes: 1 grouping on one lane, 3 on two lanes x 7 weight pairs of
    # 1, 2, 4, 8 with no common factor (one of them 1), 1 on three lanes x 37 triples
    assert len(setups) == 1 + 3 * 7 + 37
    assert {a.name for a in setups} == {"optimal"}
    tried = [base, setups[-1], base]
    best, values = best_of("fluid", net, jobs, tried, 3, t_alone)
    assert values[0] == values[2] > values[1]  # one VL costs more than any lane per job
    assert best.setup is setups[-1] and best.slowdown == values[1] > 1.0
    twin = replace(base)  # equal, not the same object: the first of the two wins
    first, again = best_of("fluid", net, jobs, [twin, base], 3, t_alone)
    assert first.setup is twin and again == [values[0], values[0]]


def test_more_jobs_than_lanes_share_lanes(mix: tuple[Network, list[SimJob]]) -> None:
    net, jobs = mix
    two = replace(DEFAULT_LANES, data_vls=2, vlarb_low_cap=2)
    for name in ("equal", "bandwidth", "ibqos-fixed"):
        arb = build(name, net, jobs, 3, two)
        assert {arb.vl_of(j.id) for j in jobs} <= {0, 1}, name


def test_partitions_are_complete_and_bounded() -> None:
    four = list(_partitions(["a", "b", "c", "d"], 4))
    assert len(four) == 15  # Bell(4)
    assert len(list(_partitions(["a", "b", "c", "d"], 2))) == 1 + 7  # S(4,1) + S(4,2)
    assert all(sorted(x for g in p for x in g) == ["a", "b", "c", "d"] for p in four)


def test_unknown_policy_and_too_big_a_search_are_refused(
    mix: tuple[Network, list[SimJob]],
) -> None:
    net, jobs = mix
    with pytest.raises(SimError, match="--policy 'fair': expected one of"):
        build("fair", net, jobs, 3)
    many = [
        Job(f"J{i}", (f"cn{2 * i + 1:04d}", f"cn{2 * i + 2:04d}"), "ring", 1e9, 0.5, 0.01)
        for i in range(9)
    ]
    with pytest.raises(SimError, match="more than 4000 setups to try"):
        build("optimal", net, prepare(net, many), 1)


def test_ibqos_builds_the_same_plan_from_a_given_one_vl_run(
    mix: tuple[Network, list[SimJob]],
) -> None:
    from ibqos.sim.fluid import simulate_fluid

    net, jobs = mix
    seen = simulate_fluid(net, jobs, build("one-vl", net, jobs, 3), 3)
    assert build("ibqos-fixed", net, jobs, 3, seen=seen) == build("ibqos-fixed", net, jobs, 3)
