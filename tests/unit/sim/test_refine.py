"""Tuning's refinement in the fluid model: the jobs fitted to the setups tried, and setups
near the kept one that none of them programs."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ibqos.config.tuning import TuningConfig
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.plan.planner import Plan, setup_tables
from ibqos.plan.report import Decision
from ibqos.plan.setups import Setup
from ibqos.plan.tuning import Observation, Predicted
from ibqos.sim.closedloop import closed_loop, fluid_predictor
from ibqos.sim.estimate import Phases
from ibqos.sim.evaluate import RunSettings
from ibqos.sim.network import xgft_network
from ibqos.sim.policies import DEFAULT_LANES
from ibqos.sim.predict import Steady
from ibqos.sim.refine import refine, trials_of
from ibqos.sim.search import Budget
from ibqos.sim.workload import prepare

NET = xgft_network(parse_xgft("2;8,4;1,2"))
STEADY = Steady(warmup=1, measure=4, buffer_packets=0)


def hosts(slots: range) -> tuple[str, ...]:
    return tuple(f"cn{leaf * 8 + s + 1:04d}" for leaf in range(4) for s in slots)


JOBS = [
    Job("H", hosts(range(0, 4)), "all-to-all", 10e9, 0.6, 0.01),
    Job("M", hosts(range(4, 6)), "halo", 5e9, 0.3, 0.01),
    Job("L", hosts(range(6, 8)), "ring", 2e9, 0.2, 0.01),
]


@pytest.fixture(scope="module")
def asked() -> tuple[Decision, Plan, Setup, list[Observation]]:
    """What the closed loop hands its refiner after its first round."""
    got: list[tuple[Decision, Plan, Setup, list[Observation]]] = []

    def recording(
        decision: Decision, plan: Plan, kept: Setup, seen: Sequence[Observation]
    ) -> Predicted:
        got.append((decision, plan, kept, list(seen)))
        return Predicted((), {})

    runs = RunSettings("fluid", NET, prepare(NET, JOBS), 60, buffer_packets=0)
    cfg = TuningConfig(trial_sweeps=2, shortlist=2, refine_rounds=1)
    predictor = fluid_predictor(NET, JOBS, STEADY, {"H": Phases(0.6, 0.01)}, evaluations=0)
    closed_loop(runs, DEFAULT_LANES, cfg, 0.02, predictor, recording)
    assert len(got) == 1
    return got[0]


def test_trials_are_the_setups_tables_and_what_they_measured(asked) -> None:
    _, plan, kept, seen = asked
    trials = trials_of(plan, seen, {"H", "M", "L"})
    assert [arb.name for arb, _ in trials] == [s.name for s, _ in seen]
    assert trials[0][0].name == kept.name and trials[0][1] == seen[0][1]
    lanes = {sl: setup_tables(plan, kept).sl_to_vl[sl] for sl in plan.job_sl.values()}
    assert {trials[0][0].sl_to_vl[sl] for sl in plan.job_sl.values()} == set(lanes.values())


def test_refine_fits_the_unknown_jobs_and_finds_setups_none_tried_programs(asked) -> None:
    decision, plan, kept, seen = asked
    phases = {"H": Phases(0.6, 0.01)}
    out, learnt = refine(
        NET,
        JOBS,
        decision,
        plan,
        seen,
        known={"H"},
        phases=phases,
        steady=STEADY,
        budget=Budget(None, 12),
    )
    assert learnt is not None and "H" not in learnt.phases
    assert learnt.error_after <= learnt.error_before
    assert out.error == learnt.doc()
    tried = {setup_tables(plan, s).substance() for s, _ in seen}
    for setup in out.found:
        assert setup.name.startswith("found-") and setup.fits(kept.sls)
        assert setup_tables(plan, setup).substance() not in tried
    assert set(out.ranking) == {s.name for s, _ in seen} | {s.name for s in out.found}


def test_one_setup_measured_fits_nothing_and_no_search_finds_nothing(asked) -> None:
    decision, plan, _, seen = asked
    out, learnt = refine(NET, JOBS, decision, plan, seen[:1], steady=STEADY)
    assert learnt is None and out.error is None and out.found == ()
    assert out.ranking == (seen[0][0].name,)
