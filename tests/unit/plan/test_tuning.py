"""The tuning driver on real decisions: pool, prediction (inline and in a thread), the
decider following the tuner's setup."""

from __future__ import annotations

import threading

from ibqos.config.classes import Thresholds
from ibqos.config.lanes import LaneConfig
from ibqos.config.tuning import TuningConfig
from ibqos.jobs.model import Job
from ibqos.plan.decide import Decider
from ibqos.plan.setups import LAW, Setup
from ibqos.plan.tuning import MAX_FOUND, Predicted, TuningDriver
from tests.support.fabric_rates import leaf_up_ports, rates, setup

LANES = LaneConfig(reserved_sls=(0,), min_hold_s=0.0, min_interval_s=0.0)
LINK = 12.5e9
JOBS = [
    Job("h", ("cn0001", "cn0002", "cn0009", "cn0010"), name="ft"),
    Job("m", ("cn0003", "cn0004", "cn0011", "cn0012"), name="halo"),
    Job("l", ("cn0017", "cn0018", "cn0025", "cn0026"), name="pairs"),
]
CFG = TuningConfig(shortlist=2, trial_sweeps=2, settle_s=0.0)


def table(speed: dict[str, float]):
    """Rates: each job injects *speed* x its base rate from its hosts."""
    fabric, hp = setup()
    base = {"h": 0.8, "m": 0.3, "l": 0.02}
    xmit = {}
    for job in JOBS:
        for host in job.nodes:
            xmit[hp[host]] = 2 * LINK * base[job.id] * speed.get(job.id, 1.0)
    for leaf in (1, 2, 3, 4):
        for key in leaf_up_ports(fabric, f"sw-L1-000{leaf}"):
            xmit.setdefault(key, LINK * 0.5)
    return fabric, rates(fabric, xmit)


def run(driver: TuningDriver, cycles: int, speeds: dict[str, dict[str, float]]) -> list[str]:
    """Cycles of decide + tuning, the fabric serving the last plan's setup from the next
    sweep on; returns the setup in force at each sweep."""
    fabric, _ = table({})
    decider = Decider(fabric, LANES, Thresholds(tau_s=0.0))
    served, reloaded, seen = LAW, False, []
    for k in range(cycles):
        _, rates_ = table(speeds.get(served, {}))
        decider.setup = driver.wanted
        d = decider.decide(rates_, JOBS, 10.0 * k)
        driver.after_cycle(d, fresh=True, in_force=served, reloaded=reloaded, now_s=10.0 * k)
        assert d.plan.tables is not None
        now = d.plan.tables.setup
        reloaded, served = now != served, now
        seen.append(served)
    return seen


def test_the_pool_follows_the_plan_and_an_inline_prediction_orders_the_trials() -> None:
    calls = []

    def predictor(decision, plan, pool):
        calls.append([s.name for s in pool])
        names = [s.name for s in pool]
        scores = {n: 1.0 + 0.001 * i for i, n in enumerate(names)}  # all within the slack
        return Predicted(tuple(reversed(names)), scores, "t")

    driver = TuningDriver(CFG, enforce=True, predictor=predictor, background=False)
    seen = run(driver, 20, {})
    assert calls and calls[0][0] == LAW and len(calls[0]) == CFG.candidates
    first_trial = next(n for n in seen if n != LAW)
    assert first_trial == calls[0][-1]  # the best predicted goes first
    status = driver.status(200.0)
    assert status.predicted[LAW] == 1.0 and status.rounds == 1


def test_the_tuner_keeps_what_the_counters_show_best() -> None:
    driver = TuningDriver(CFG, enforce=True, predictor=None, background=False)
    # the pool's order: equal, favour-heavy next; favour-heavy speeds the heavy job up
    seen = run(driver, 25, {"favour-heavy": {"h": 1.3}, "equal": {"l": 0.2}})
    assert "equal" in seen and "favour-heavy" in seen
    assert seen[-1] == "favour-heavy" and driver.status(250.0).state == "settled"
    assert driver.status(250.0).measured["equal"] == float("inf")  # below the floor


def test_a_prediction_in_a_thread_never_holds_the_cycle() -> None:
    release = threading.Event()

    def slow(decision, plan, pool):
        release.wait(5.0)
        return Predicted(tuple(s.name for s in pool), {})

    driver = TuningDriver(CFG, enforce=True, predictor=slow)
    seen = run(driver, 4, {})
    assert set(seen) == {LAW} and driver.status(40.0).state == "waiting"
    release.set()
    assert driver.wait_prediction(5.0)
    assert driver.predicted is not None


def test_predict_now_and_no_predictor() -> None:
    fabric, rates_ = table({})
    d = Decider(fabric, LANES, Thresholds(tau_s=0.0)).decide(rates_, JOBS, 0.0)
    assert TuningDriver(CFG, enforce=False).predict_now(d) is None
    got = TuningDriver(
        CFG, enforce=False, predictor=lambda d, p, pool: Predicted(("x",), {}, "table")
    ).predict_now(d)
    assert got is not None and got.text == "table"


def test_the_found_setups_join_the_pool_before_the_round() -> None:
    def predictor(decision, plan, pool):
        law = pool[0]
        heavy_first = tuple(reversed(law.targets))
        found = [
            Setup("found-1", law.groups, heavy_first),
            Setup("Found_2", law.groups, law.targets),  # not a setup's name
            Setup("found-3", law.groups[1:], law.targets[1:]),  # an SL left out
            Setup(pool[1].name, law.groups, law.targets),  # a candidate's name
            *(Setup(f"found-{k}", law.groups, (float(k),) * len(law.groups)) for k in (4, 5, 6)),
            Setup("found-7", law.groups, law.targets),  # beyond the bound
        ]
        names = [s.name for s in found if s.name != pool[1].name] + [s.name for s in pool]
        scores = {n: 1.0 + 0.001 * i for i, n in enumerate(names)}
        return Predicted(tuple(names), scores, "t", tuple(found))

    driver = TuningDriver(CFG, enforce=True, predictor=predictor, background=False)
    seen = run(driver, 6, {})
    names = [s.name for s in driver.pool]
    assert names[0] == LAW and len(names) == CFG.candidates + MAX_FOUND
    assert names[CFG.candidates :] == ["found-1", "found-4", "found-5", "found-6"]
    assert next(n for n in seen if n != LAW) == "found-1"  # the first trial, as ranked


def refiner_finding(calls: list[tuple[str, list[str]]], *, found: bool = True):
    """A refiner that records what it was asked and finds the kept setup's weights reversed."""

    def refiner(decision, plan, kept, observations):
        calls.append((kept.name, [s.name for s, _ in observations]))
        near = Setup("found-1", kept.groups, tuple(reversed(kept.targets)))
        error = {"before": 0.3, "after": 0.1, "trials": float(len(observations))}
        if not found:
            return Predicted((), {}, error=error)
        return Predicted(("found-1",), {"found-1": 0.9}, "", (near,), error)

    return refiner


def test_after_a_decision_the_driver_refines_and_the_tuner_tries_what_it_found() -> None:
    calls: list[tuple[str, list[str]]] = []
    cfg = TuningConfig(shortlist=1, trial_sweeps=2, settle_s=0.0, refine_rounds=1)
    driver = TuningDriver(cfg, enforce=True, refiner=refiner_finding(calls), background=False)
    seen = run(driver, 30, {"refine-1": {"h": 1.5}})
    assert len(calls) == 1  # refine_rounds bounds it, though it always finds something
    kept, tried = calls[0]
    assert tried[0] == kept and len(tried) == 2  # the kept setup first, then the other
    assert "refine-1" in seen and seen[-1] == "refine-1"
    st = driver.status(300.0)
    assert st.state == "settled" and st.refinements == 1 and st.measured["refine-1"] < 1.01
    assert st.predicted["refine-1"] == 0.9
    assert driver.prediction_error() == (0.3, 0.1) and st.prediction_error is not None


def test_refinement_repeats_up_to_refine_rounds_and_stops_when_nothing_is_found() -> None:
    counts = {}
    for rounds, found in ((0, True), (2, True), (2, False)):
        calls: list[tuple[str, list[str]]] = []
        cfg = TuningConfig(shortlist=1, trial_sweeps=2, settle_s=0.0, refine_rounds=rounds)
        refiner = refiner_finding(calls, found=found)
        driver = TuningDriver(cfg, enforce=True, refiner=refiner, background=False)
        seen = run(driver, 40, {})
        counts[rounds, found] = len(calls)
        assert ("refine-2" in seen) == (rounds == 2 and found)
    assert counts == {(0, True): 0, (2, True): 2, (2, False): 1}
