"""The exhaustive optimum's search: symmetry, the bound, processes and limits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ibqos.errors import SimError
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.sim.evaluate import RunSettings
from ibqos.sim.network import xgft_network
from ibqos.sim.optimum import search, setup_key
from ibqos.sim.policies import DEFAULT_LANES, grid, grouped, one_vl, optimum
from ibqos.sim.qos import Arbitration
from ibqos.sim.workload import prepare


def hosts(leaf_slots: range) -> tuple[str, ...]:
    """Hosts in the given slots of every leaf (4 leaves of 8): interleaved placements."""
    return tuple(f"cn{leaf * 8 + s + 1:04d}" for leaf in range(4) for s in leaf_slots)


@pytest.fixture(scope="module")
def fluid() -> RunSettings:
    net = xgft_network(parse_xgft("2;8,4;1,2"))  # 4:1 at the leaves
    jobs = [
        Job("H", hosts(range(0, 4)), "all-to-all", 10e9, 0.6, 0.01),
        Job("M", hosts(range(4, 6)), "halo", 5e9, 0.3, 0.01),
        Job("L", hosts(range(6, 8)), "ring", 2e9, 0.2, 0.004),
    ]
    return RunSettings("fluid", net, prepare(net, jobs), 3)


def test_the_key_ignores_which_vl_a_group_is_on() -> None:
    a = grouped([["H"], ["M", "L"]], [1.0, 4.0], DEFAULT_LANES, "a")
    b = grouped([["M", "L"], ["H"]], [4.0, 1.0], DEFAULT_LANES, "b")
    c = grouped([["M", "L"], ["H"]], [1.0, 4.0], DEFAULT_LANES, "c")
    assert a.vl_of("H") != b.vl_of("H")
    ids = ["H", "M", "L"]
    assert setup_key(a, ids) == setup_key(b, ids) != setup_key(c, ids)


def test_the_bounded_search_finds_what_running_every_setup_finds(fluid: RunSettings) -> None:
    setups = grid(fluid.jobs, DEFAULT_LANES)
    t_alone = fluid.alone(one_vl(fluid.jobs, DEFAULT_LANES))
    for objective in ("node-time", "worst-job"):
        full, values = fluid.best_of(setups, t_alone, objective)
        found = search(fluid, setups, t_alone, objective)
        assert found.complete and found.distinct == len(setups)
        assert found.outcome.measure(objective) == pytest.approx(min(values), abs=1e-9)
        assert found.cut > 0  # one VL's slowdowns cannot beat lanes of their own
        assert found.run + found.cut == len(setups)
        for k, v in found.values.items():  # what ran to its end measures as in full
            assert v == pytest.approx(values[k], abs=1e-9)
        assert full.measure(objective) == pytest.approx(found.outcome.measure(objective))


def test_duplicates_run_once_and_processes_agree(fluid: RunSettings) -> None:
    setups = grid(fluid.jobs, DEFAULT_LANES)[:12]
    swapped = [replace(a, name="again") for a in setups[:3]]
    t_alone = fluid.alone(one_vl(fluid.jobs, DEFAULT_LANES))
    one = search(fluid, setups + swapped, t_alone)
    assert (one.setups, one.distinct) == (15, 12)
    two = search(fluid, setups + swapped, t_alone, workers=2)
    assert two.outcome.slowdown == pytest.approx(one.outcome.slowdown, abs=1e-12)
    assert two.outcome.setup.name != "again"  # the first of equals


def test_a_limit_makes_the_answer_a_bound(fluid: RunSettings) -> None:
    found = optimum(fluid, DEFAULT_LANES, max_runs=2)
    assert not found.complete and "a bound" in found.summary()
    whole = optimum(fluid, DEFAULT_LANES)
    assert whole.complete and "the optimum of" in whole.summary()
    # the bound is the best of what it ran: one-vl and equal, the first two setups
    assert found.run + found.cut == 2
    assert whole.outcome.slowdown <= found.outcome.slowdown + 1e-12


def test_bad_searches_are_refused(fluid: RunSettings) -> None:
    arb: list[Arbitration] = [one_vl(fluid.jobs, DEFAULT_LANES)]
    with pytest.raises(SimError, match="objective 'fastest'"):
        search(fluid, arb, {}, "fastest")
    with pytest.raises(SimError, match="no setup"):
        search(fluid, [], {})
    with pytest.raises(SimError, match="not packet"):
        search(replace(fluid, model="packet"), arb, {})
