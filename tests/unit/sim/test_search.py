"""The search beyond the fixed candidates: its moves, its cache, its budget, what it finds."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

import pytest

from ibqos.config.tuning import TuningConfig
from ibqos.errors import SimError
from ibqos.fabric.model import Fabric
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.plan.decide import Decider
from ibqos.plan.planner import Plan, law_setup
from ibqos.plan.report import Decision
from ibqos.plan.setups import Setup, candidates
from ibqos.sim.closedloop import LoopResult, closed_loop, fluid_predictor
from ibqos.sim.estimate import Phases
from ibqos.sim.evaluate import RunSettings
from ibqos.sim.fluid import simulate_fluid
from ibqos.sim.network import Network, xgft_network
from ibqos.sim.policies import DEFAULT_LANES, SweepTable, one_vl
from ibqos.sim.predict import Steady
from ibqos.sim.search import (
    FOUND,
    MIN_GAIN,
    Budget,
    Evaluator,
    rank_pool,
    search,
)
from ibqos.sim.setupspace import Space
from ibqos.sim.workload import prepare

LINK = 12.5e9
NAME = re.compile(r"[a-z0-9+.-]+")


def on(slots: tuple[int, ...]) -> tuple[str, ...]:
    """Hosts in *slots* of every leaf of 8 (8 leaves): interleaved placements."""
    return tuple(f"cn{i + 1:04d}" for i in range(64) if i % 8 in slots)


#: built for the search: a heavy all-to-all, a moderate random-pairs and a light halo
#: interleaved on a 4:1 tree; the heavy job gains most from the most weight, the
#: moderate one least: weights that are not monotonic in intensity
MIX = [
    Job("a2a", on((0, 1, 4, 5)), "all-to-all", 11e9, 0.5, 0.02),
    Job("pairs", on((2, 6)), "random-pairs", 8e9, 0.35, 0.02),
    Job("halo", on((3, 7)), "halo", 4e9, 0.2, 0.02, halo_dims=(4, 4)),
]
PHASES = {j.id: Phases(j.duty, j.period_s) for j in MIX}


@pytest.fixture(scope="module")
def net() -> Network:
    return xgft_network(parse_xgft("2;8,8;1,2"))


@pytest.fixture(scope="module")
def decided(net: Network) -> tuple[Decision, Plan]:
    """The agent's decision after the mix ran on one VL: the law's plan."""
    sim_jobs = prepare(net, MIX)
    run = simulate_fluid(net, sim_jobs, one_vl(sim_jobs, DEFAULT_LANES), 4, buffer_packets=0)
    fabric = Fabric(net.topo, source="test")
    table = SweepTable(net, fabric)(run.link_bytes / run.sim_time_s)
    decision = Decider(fabric, DEFAULT_LANES).decide(table, MIX, 0.0)
    return decision, decision.plan


def evaluator(net: Network, plan: Plan, clock: Callable[[], float] | None = None) -> Evaluator:
    """The declared mix (not estimated: the test knows it) on *plan*'s SLs."""
    if clock is None:
        return Evaluator(net, prepare(net, MIX), plan)
    return Evaluator(net, prepare(net, MIX), plan, clock=clock)


def pool(plan: Plan) -> list[Setup]:
    return candidates(law_setup(plan), 16)


def intensity_order(plan: Plan, setup: Setup) -> list[float]:
    """The setup's packets per lane, its lanes from the most intense."""
    space = Space.of(plan)
    lanes = sorted(
        zip(setup.groups, setup.targets, strict=True),
        key=lambda lane: -max(space.intensity[sl] for sl in lane[0]),
    )
    return [t for _, t in lanes]


def test_the_search_finds_a_non_monotonic_setup_better_than_every_shape(
    net: Network, decided: tuple[Decision, Plan]
) -> None:
    _, plan = decided
    starts = pool(plan)
    got = search(evaluator(net, plan), starts, Budget(None, 80))
    best_shape = min(e.score for e in got.starts)
    assert [e.setup.name for e in got.starts] == [s.name for s in starts]
    assert got.found and got.best is got.found[0]
    assert got.best.score < best_shape * (1 - MIN_GAIN)
    assert [e.score for e in got.found] == sorted(e.score for e in got.found)
    assert len(got.found) <= FOUND and all(NAME.fullmatch(e.setup.name) for e in got.found)
    # neither favour-light nor favour-heavy: the moderate lane weighs least
    weights = intensity_order(plan, got.best.setup)
    assert weights != sorted(weights) and weights != sorted(weights, reverse=True)
    # what it found is no candidate's tables
    shapes = {e.arbitration.sl_to_vl + e.arbitration.vlarb_low for e in got.starts}
    for e in got.found:
        assert e.arbitration.sl_to_vl + e.arbitration.vlarb_low not in shapes
        assert e.setup.fits(law_setup(plan).sls)


def test_evaluations_are_cached_by_the_tables_programmed(
    net: Network, decided: tuple[Decision, Plan]
) -> None:
    _, plan = decided
    ev = evaluator(net, plan)
    groups = law_setup(plan).groups
    a = ev.evaluate(Setup("a", groups, (1.0, 2.0, 4.0)))
    b = ev.evaluate(Setup("b", groups, (2.0, 4.0, 8.0)))  # the same ratios, tables
    assert (ev.evaluations, ev.hits) == (1, 1)
    assert b.setup.name == "b" and b.arbitration.name == "b" and b.times == a.times
    c = ev.evaluate(Setup("c", groups, (4.0, 2.0, 1.0)))
    assert ev.evaluations == 2 and c.times != a.times
    # the score is S: each job's time over its time alone, node-weighted
    assert ev.alone is not None
    nodes = {j.id: len(j.nodes) for j in MIX}
    s = sum(nodes[j] * c.times[j] / ev.alone[j] for j in nodes) / sum(nodes.values())
    assert c.score == pytest.approx(s, rel=1e-9)


def test_the_search_stops_within_its_budget(net: Network, decided: tuple[Decision, Plan]) -> None:
    _, plan = decided
    ticks = itertools.count()
    ev = evaluator(net, plan, clock=lambda: 0.1 * next(ticks))  # every reading 0.1 s on
    got = search(ev, pool(plan), Budget(6.0, 1000))
    assert got.stopped == "time" and got.elapsed_s <= 6.0
    assert len(got.starts) == len(pool(plan)) < got.evaluations
    # a count of predictions: that many beyond the starts, and the same setups every time
    runs = [search(evaluator(net, plan), pool(plan), Budget(None, 5)) for _ in range(2)]
    assert [r.stopped for r in runs] == ["evaluations"] * 2
    assert [r.evaluations for r in runs] == [len(pool(plan)) + 5] * 2
    assert runs[0].best.times == runs[1].best.times
    none = search(evaluator(net, plan), pool(plan), Budget(0.0, 10))
    assert none.stopped == "time" and none.evaluations == len(pool(plan)) and not none.found
    with pytest.raises(SimError):
        Budget(None, -1)
    with pytest.raises(SimError):
        search(evaluator(net, plan), [], Budget())


def test_rank_pool_hands_the_found_setups_to_the_tuner(
    net: Network, decided: tuple[Decision, Plan]
) -> None:
    decision, plan = decided
    starts = pool(plan)
    got = rank_pool(net, MIX, decision, plan, starts, phases=PHASES, budget=Budget(None, 40))
    assert got.found and set(got.ranking) == {s.name for s in [*starts, *got.found]}
    assert got.ranking[0] == got.found[0].name == "found-1"
    assert all(got.scores[got.ranking[0]] <= v for v in got.scores.values())
    assert "found-1" in got.text and "S, the node-weighted mean" in got.text
    # no budget: the pool alone, as before the search
    plain = rank_pool(net, MIX, decision, plan, starts, phases=PHASES)
    assert not plain.found and set(plain.ranking) == {s.name for s in starts}
    for name in plain.ranking:
        assert plain.scores[name] == pytest.approx(got.scores[name])


def test_the_closed_loop_tries_what_the_search_found_and_repeats(net: Network) -> None:
    jobs = prepare(net, MIX)
    runs = RunSettings("fluid", net, jobs, 40, buffer_packets=0)
    cfg = TuningConfig(trial_sweeps=2, shortlist=2)
    steady = Steady(warmup=1, measure=4, buffer_packets=0)

    def once() -> LoopResult:
        predictor = fluid_predictor(net, MIX, steady, dict(PHASES), evaluations=30)
        return closed_loop(runs, DEFAULT_LANES, cfg, None, predictor)

    a, b = once(), once()
    assert "found-1" in a.status.predicted
    assert a.status.predicted["found-1"] == min(a.status.predicted.values())
    tried = [s.setup for s in a.switches if any(r.startswith("setup") for r in s.reasons)]
    assert "found-1" in tried
    assert a.switches == b.switches and a.status == b.status  # deterministic
