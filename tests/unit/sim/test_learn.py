"""Learning the jobs' phases from the setups tried, and keeping them in their profiles."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from ibqos.agent.predictor import profile_phases
from ibqos.agent.state import AgentState, load_state, save_state
from ibqos.agent.status import render_status
from ibqos.classify.prior import MAX_PHASE_TRIALS, Priors, learn_phases
from ibqos.classify.profiles import ProfileStore, load_profile
from ibqos.errors import ProfileError, SimError
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.metrics import AgentMetrics, Counters
from ibqos.plan.tuner import TuningStatus
from ibqos.sim.estimate import ASSUMED_PHASES, Phases
from ibqos.sim.learn import Learnt, Trial, known_phases, learn, record, trial_error
from ibqos.sim.network import Network, xgft_network
from ibqos.sim.policies import DEFAULT_LANES, grouped, one_vl
from ibqos.sim.predict import Steady, steady_times
from ibqos.sim.workload import prepare

EDR4 = 12.5e9  # bytes/s of a 4x EDR link


@pytest.fixture(scope="module")
def tree() -> Network:
    """8 leaves of 8 hosts under 2 spines (4:1 at the leaves)."""
    return xgft_network(parse_xgft("2;8,8;1,2"))


def on(*slots: int) -> tuple[str, ...]:
    """Hosts of these slots on every leaf of 8: jobs interleaved across the leaves."""
    return tuple(f"cn{i + 1:04d}" for i in range(64) if i % 8 in slots)


#: the truth: a heavy all-to-all of long bursts, a short-burst random-pairs job and a light
#: halo, none at the assumed phases (duty 0.5, 10 ms)
TRUTH = [
    Job("1", on(0, 1, 4, 5), "all-to-all", 0.9 * EDR4, 0.8, 0.03, name="big"),
    Job("2", on(2, 6), "random-pairs", 0.8 * EDR4, 0.25, 0.004, name="pairs"),
    Job("3", on(3, 7), "halo", 0.5 * EDR4, 0.2, 0.02, name="halo", halo_dims=(4, 4)),
]


def trials_of(net: Network, truth: list[Job]) -> list[Trial]:
    """The truth run under one lane (the reference), heavy first and heavy last: each
    job's mean injection measured."""
    sim_jobs = prepare(net, truth)
    ids = [[j.id] for j in truth]
    setups = [
        one_vl(sim_jobs, DEFAULT_LANES),
        grouped(ids, [1.0, 4.0, 8.0][: len(ids)], DEFAULT_LANES, "heavy last"),
        grouped(ids, [8.0, 2.0, 1.0][: len(ids)], DEFAULT_LANES, "heavy first"),
    ]
    out: list[Trial] = []
    for arb in setups:
        t = steady_times(net, sim_jobs, arb, Steady())
        out.append((arb, {j.id: j.bytes_per_iteration / t[j.id] for j in sim_jobs}))
    return out


def assumed(jobs: list[Job]) -> list[Job]:
    """The jobs as estimated with their phases assumed: the same mean alone."""
    return [
        replace(
            j,
            rate_bytes_per_s=min(j.rate_bytes_per_s * j.duty / ASSUMED_PHASES.duty, EDR4),
            duty=ASSUMED_PHASES.duty,
            period_s=ASSUMED_PHASES.period_s,
        )
        for j in jobs
    ]


@pytest.fixture(scope="module")
def fitted(tree: Network) -> Learnt:
    return learn(tree, assumed(TRUTH), trials_of(tree, TRUTH))


def test_fitting_lowers_the_error_on_the_setup_held_out(fitted) -> None:
    got = fitted
    assert got.trials == 2  # the third is held out
    assert got.held_out_before is not None and got.held_out_after is not None
    # the assumed phases mispredict what the trials measured ...
    assert got.error_before > 0.03 and got.held_out_before > 0.03
    # ... the fitted ones explain the trial fitted and predict the one held out better
    assert got.error_after < got.error_before / 2
    assert got.held_out_after < 0.75 * got.held_out_before
    assert got.phases and set(got.phases) <= {"1", "2", "3"}
    assert got.runs > 0 and got.seconds > 0
    line = got.status_line()
    assert f"{got.error_before:.1%} -> {got.error_after:.1%}" in line
    assert "held out" in line


def test_the_heavy_jobs_long_bursts_are_learnt(fitted) -> None:
    got = fitted
    # the heavy job communicates 80 % of its iterations; the fit moves it off 0.5 upwards
    assert got.phases["1"].duty > ASSUMED_PHASES.duty


def test_jobs_with_known_phases_keep_them(tree: Network) -> None:
    trials = trials_of(tree, TRUTH)
    est = assumed(TRUTH)
    est[0] = TRUTH[0]  # the heavy job's phases known, at the truth
    got = learn(tree, est, trials[:2], known={"1"})
    assert "1" not in got.phases
    assert got.held_out_before is None  # two trials: none held out
    assert got.error_after <= got.error_before
    everything = learn(tree, est, trials[:2], known={"1", "2", "3"})
    assert everything.phases == {}
    assert everything.error_after == everything.error_before


def test_a_mix_that_does_not_contend_learns_nothing(tree: Network) -> None:
    # two jobs each within its own leaf: no setup changes anything
    alone = [
        Job("a", tuple(f"cn{i:04d}" for i in range(1, 9)), "all-to-all", 0.9 * EDR4, 0.3, 0.005),
        Job("b", tuple(f"cn{i:04d}" for i in range(9, 17)), "ring", 0.9 * EDR4, 0.7, 0.02),
    ]
    trials = trials_of(tree, alone)
    got = learn(tree, assumed(alone), trials)
    assert got.phases == {}
    assert got.error_before < 0.01 and got.error_after == got.error_before


def test_without_hold_out_every_trial_is_fitted(tree: Network) -> None:
    got = learn(tree, assumed(TRUTH), trials_of(tree, TRUTH), hold_out=False, sweeps=1)
    assert got.trials == 3 and got.held_out_before is None
    assert got.error_after < got.error_before


def test_the_fit_stops_at_its_time_budget(tree: Network) -> None:
    got = learn(tree, assumed(TRUTH), trials_of(tree, TRUTH), budget_s=0.0)
    assert got.stopped and got.phases == {}
    assert got.error_after == got.error_before
    assert "stopped at its time budget" in got.status_line()


def test_learning_needs_two_trials(tree: Network) -> None:
    trials = trials_of(tree, TRUTH)
    with pytest.raises(SimError, match="two trials"):
        learn(tree, assumed(TRUTH), trials[:1])
    with pytest.raises(SimError, match="duties"):
        learn(tree, assumed(TRUTH), trials, duties=(0.0, 0.5))


def test_trial_error_is_zero_for_the_truth(tree: Network) -> None:
    trials = trials_of(tree, TRUTH)
    assert trial_error(tree, TRUTH, trials[1], Steady()) == pytest.approx(0.0, abs=1e-9)
    assert trial_error(tree, assumed(TRUTH), trials[1], Steady()) > 0.01


def test_learnt_phases_round_trip_through_the_profiles(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path)
    jobs = [Job(j.id, j.nodes, name=j.name, user="alice") for j in TRUTH]
    jobs[2] = replace(jobs[2], pattern="halo", halo_dims=(4, 4))  # declared: kept
    got = Learnt({"1": Phases(0.7, 0.05), "3": Phases(0.2, 0.02)}, 0.1, 0.02, 2)
    assert record(store, jobs, got, {"1": "high"}) == 2
    priors = Priors(ProfileStore(tmp_path))
    # a new profile holds nothing but the phases: no class confidence, still read
    assert profile_phases(jobs, priors) == {"1": Phases(0.7, 0.05), "3": Phases(0.2, 0.02)}
    big = load_profile(tmp_path / "big.yaml")
    assert (big.expected_class, big.confidence) == ("high", 0.0)
    assert big.model is not None and big.model.pattern == "all-to-all"  # gravity
    assert big.model.phase_trials == 2
    halo = load_profile(tmp_path / "halo.yaml").model
    assert halo is not None and (halo.pattern, halo.halo_dims) == ("halo", (4, 4))
    # learnt phases are refined, not kept
    assert known_phases(jobs, priors) == set()
    # a second fit is averaged in, by trials (the period geometrically)
    assert learn_phases(store, jobs[0], 0.4, 0.0125, 6, "high")
    again = load_profile(tmp_path / "big.yaml").model
    assert again is not None
    assert again.duty == pytest.approx((2 * 0.7 + 6 * 0.4) / 8)
    assert again.period_s == pytest.approx((0.05**2 * 0.0125**6) ** (1 / 8), rel=1e-3)
    assert again.phase_trials == 8
    assert learn_phases(store, jobs[0], 0.4, 0.01, 100, "high")
    capped = load_profile(tmp_path / "big.yaml").model
    assert capped is not None and capped.phase_trials == MAX_PHASE_TRIALS


def test_declared_phases_are_not_overwritten(tmp_path: Path) -> None:
    doc = {
        "version": 1,
        "application": "big",
        "expected_class": "high",
        "confidence": 0.8,
        "model": {"pattern": "all-to-all", "duty": 0.3, "period_s": 0.01},
    }
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(doc))
    store = ProfileStore(tmp_path)
    job = Job("1", TRUTH[0].nodes, name="big")
    assert known_phases([job], Priors(store)) == {"1"}
    assert not learn_phases(store, job, 0.7, 0.05, 3, "high")
    assert yaml.safe_load((tmp_path / "big.yaml").read_text()) == doc
    # a job without a usable name teaches nothing
    assert not learn_phases(store, Job("2", ("a", "b")), 0.7, 0.05, 3, "low")


def test_phase_trials_must_count_trials(tmp_path: Path) -> None:
    doc = {
        "version": 1,
        "application": "big",
        "expected_class": "high",
        "confidence": 0.8,
        "model": {"pattern": "ring", "duty": 0.3, "period_s": 0.01, "phase_trials": 0},
    }
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ProfileError, match=r"model\.phase_trials"):
        ProfileStore(tmp_path)


def test_an_unwritable_profile_is_logged_unless_strict(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = ProfileStore(blocker / "profiles")  # its directory cannot be made
    job = Job("1", ("a", "b"), name="big")
    assert not learn_phases(store, job, 0.5, 0.01, 2, "low")
    with pytest.raises(ProfileError, match="cannot write"):
        learn_phases(store, job, 0.5, 0.01, 2, "low", strict=True)


def test_the_error_shows_in_the_metrics_and_in_status(tmp_path: Path) -> None:
    got = Learnt({"1": Phases(0.7, 0.05)}, 0.118, 0.058, 2, 0.074, 0.04)
    reg = CollectorRegistry()
    metrics = AgentMetrics(Counters(), fabric="f", routing_engine="", dry_run=False, registry=reg)
    status = TuningStatus(
        state="settled",
        wanted="favour-light",
        trial=None,
        rounds=1,
        reloads=3,
        reloads_last_hour=3,
        predicted={},
        measured={},
        decision="",
    )
    metrics.tuning.status = lambda: status
    name = "ibqos_tuning_prediction_error_ratio"
    assert reg.get_sample_value(name, {"when": "before"}) is None  # nothing fitted
    metrics.tuning.prediction_error = lambda: (got.error_before, got.error_after)
    assert reg.get_sample_value(name, {"when": "before"}) == 0.118
    assert reg.get_sample_value(name, {"when": "after"}) == 0.058
    tuning = {"state": "settled", "wanted": "favour-light", "prediction_error": got.doc()}
    save_state(tmp_path, AgentState(updated_s=1.0, tuning=tuning))
    text = render_status(load_state(tmp_path), tmp_path)
    assert "prediction error: 11.8% with the phases assumed, 5.8% fitted to 2 trials" in text
