"""The observation tuner: rounds of trials, the score, the floor, the margin, the cap."""

from __future__ import annotations

import math
import random

import pytest

from ibqos.config.tuning import TuningConfig
from ibqos.plan.setups import LAW, Setup
from ibqos.plan.tuner import Sample, Tuner, combine, score, score_errors

LAW_SETUP = Setup(LAW, ((1,), (2,)), (1.0, 2.0))
EQUAL = Setup("equal", ((1,), (2,)), (1.0, 1.0))
HEAVY = Setup("favour-heavy", ((1,), (2,)), (1.0, 0.5))
ONE = Setup("one-lane", ((1, 2),), (1.0,))
POOL = [LAW_SETUP, EQUAL, HEAVY, ONE]
NODES = {"big": 24, "small": 8}
MIX = frozenset({"big", "small"})
CLASSES = frozenset({("big", "high"), ("small", "low")})


class Fabric:
    """Rates each setup gives the jobs; what is in force follows the wanted setup one
    sweep later (the agent applies after the sweep), with the reload in the next one."""

    def __init__(self, rates: dict[str, dict[str, float]]) -> None:
        self.rates = rates
        self.in_force = LAW
        self.reloaded = False
        self.now = 0.0
        self.reloads = 0
        self.room = True
        # setup -> factors on every job's rate, one per sweep in turn (sweep-to-sweep noise)
        self.wobble: dict[str, list[float]] = {}
        self.sweeps = 0

    def run(
        self,
        tuner: Tuner,
        sweeps: int,
        ranking=("equal", "favour-heavy", "one-lane"),
        mix=MIX,
        interval=10.0,
        log=None,
        classes=CLASSES,
        predicted=None,
    ) -> list[str]:
        seen = []
        for _ in range(sweeps):
            self.now += interval
            self.sweeps += 1
            rates = dict(self.rates[self.in_force])
            factors = self.wobble.get(self.in_force)
            if factors:
                f = factors[self.sweeps % len(factors)]
                rates = {j: r * f for j, r in rates.items()}
            sample = Sample(
                self.now, rates, NODES, self.in_force, self.reloaded, mix, classes, self.room
            )
            wanted = tuner.step(sample, POOL, list(ranking), predicted)
            name = LAW if wanted is None else wanted.name
            self.reloaded = name != self.in_force
            self.reloads += self.reloaded
            self.in_force = name
            seen.append(name)
            if log is not None:
                log.append((tuner.state, name))
        return seen


def cfg(**kw) -> TuningConfig:
    base = dict(
        shortlist=3, trial_sweeps=2, settle_s=0.0, margin=0.03, margin_sigmas=0.0, floor=0.5
    )
    return TuningConfig(**(base | kw))


def test_score_is_node_weighted_slowdown_relative_to_best() -> None:
    means = {"a": {"big": 10.0, "small": 4.0}, "b": {"big": 5.0, "small": 8.0}}
    got = score(means, NODES)
    assert got["a"] == pytest.approx((24 * 1 + 8 * 2) / 32)
    assert got["b"] == pytest.approx((24 * 2 + 8 * 1) / 32)
    assert score({"a": {"big": 1.0}, "b": {"small": 1.0}}, NODES) == {"a": 1.0, "b": 1.0}


def test_the_worst_job_objective_scores_the_largest_slowdown() -> None:
    means = {"a": {"big": 10.0, "small": 4.0}, "b": {"big": 5.0, "small": 8.0}}
    got = score(means, NODES, "worst-job")
    # a halves the small job, b the big one: alike by the worst job, not by node-time
    assert got == {"a": pytest.approx(2.0), "b": pytest.approx(2.0)}
    means["c"] = {"big": 8.0, "small": 6.0}
    got = score(means, NODES, "worst-job")
    assert got["c"] == pytest.approx(max(10 / 8, 8 / 6))
    assert got["c"] < got["a"]
    assert score(means, NODES)["a"] < score(means, NODES)["c"]  # node-time prefers a
    sweeps = {"b": ({"big": 4.0, "small": 8.0}, {"big": 6.0, "small": 8.0})}
    per = [10 / 4, 10 / 6]  # the big job is the worst in both sweeps
    errors = score_errors(sweeps, means, NODES, "worst-job")
    assert errors["b"] == pytest.approx(abs(per[0] - per[1]) / 2)
    with pytest.raises(ValueError, match="objective 'fastest'"):
        combine({"big": 1.0}, NODES, "fastest")  # type: ignore[arg-type]


def test_the_tuner_keeps_what_its_objective_prefers() -> None:
    rates = {
        LAW: {"big": 8.0, "small": 4.0},
        "equal": {"big": 10.0, "small": 3.0},  # the big job gains, the small one pays
        "favour-heavy": {"big": 6.0, "small": 4.0},
        "one-lane": {"big": 7.0, "small": 3.0},
    }
    kept = {}
    for objective in ("node-time", "worst-job"):
        fab, tuner = Fabric(rates), Tuner(cfg(objective=objective), enforce=True)
        kept[objective] = fab.run(tuner, 30)[-1]
    # node-time: equal (24 x 1.0 + 8 x 1.33) / 32 = 1.08 against the law's 1.19; by the
    # worst job equal's small job (1.33) is worse off than anyone under the law (1.25)
    assert kept == {"node-time": "equal", "worst-job": LAW}


def test_a_round_tries_law_then_shortlist_and_keeps_the_best_measured() -> None:
    rates = {
        LAW: {"big": 8.0, "small": 4.0},
        "equal": {"big": 10.0, "small": 4.0},  # best: the big job gains, the small keeps
        "favour-heavy": {"big": 10.5, "small": 2.5},
        "one-lane": {"big": 9.0, "small": 3.0},
    }
    fab, tuner = Fabric(rates), Tuner(cfg(), enforce=True)
    log: list = []
    seen = fab.run(tuner, 30, log=log)
    assert seen[0] == LAW
    order = [n for i, n in enumerate(seen) if i == 0 or seen[i - 1] != n]
    assert order[:4] == [LAW, "equal", "favour-heavy", "one-lane"]
    assert seen[-1] == "equal" and tuner.state == "settled"
    # each trial: 2 counted sweeps after the one the reload fell in
    assert seen.count("favour-heavy") == 3
    st = tuner.status(fab.now)
    assert st.measured["equal"] == pytest.approx((24 * 10.5 / 10 + 8) / 32)
    assert min(st.measured, key=st.measured.__getitem__) == "equal"
    assert "kept equal" in st.decision
    assert fab.reloads == tuner.reloads == 4  # three trials and the choice


def test_the_law_stays_when_the_gain_is_within_the_margin() -> None:
    rates = {n: {"big": 8.0, "small": 4.0} for n in (LAW, "equal", "favour-heavy", "one-lane")}
    rates["equal"] = {"big": 8.1, "small": 4.0}  # ~1 % better: noise, not a reason to move
    fab, tuner = Fabric(rates), Tuner(cfg(margin=0.03), enforce=True)
    assert fab.run(tuner, 30)[-1] == LAW
    assert "within margin" in tuner.status(fab.now).decision


def test_score_errors_are_the_spread_of_each_sweeps_score() -> None:
    sweeps = {
        "a": ({"big": 10.0, "small": 4.0}, {"big": 10.0, "small": 4.0}),
        "b": ({"big": 4.0, "small": 8.0}, {"big": 6.0, "small": 8.0}),
    }
    means = {"a": {"big": 10.0, "small": 4.0}, "b": {"big": 5.0, "small": 8.0}}
    got = score_errors(sweeps, means, NODES)
    assert got["a"] == 0.0  # the same every sweep
    per = [(24 * 10 / 4 + 8) / 32, (24 * 10 / 6 + 8) / 32]  # b's two sweeps, scored alone
    assert got["b"] == pytest.approx(abs(per[0] - per[1]) / math.sqrt(2) / math.sqrt(2))
    assert score_errors({"a": sweeps["a"][:1]}, {"a": means["a"]}, NODES) == {"a": 0.0}


def _noisy_round(sigmas: float) -> tuple[str, str]:
    """A round where equal is 5 % better on average but its sweeps scatter by +-30 %."""
    rates = {n: {"big": 8.0, "small": 4.0} for n in (LAW, "equal", "favour-heavy", "one-lane")}
    rates["equal"] = {"big": 8.4, "small": 4.2}
    fab = Fabric(rates)
    fab.wobble = {"equal": [0.7, 1.3]}
    tuner = Tuner(cfg(margin=0.01, margin_sigmas=sigmas, trial_sweeps=4), enforce=True)
    seen = fab.run(tuner, 40)
    return seen[-1], tuner.status(fab.now).decision


def test_the_margin_widens_with_the_trials_scatter() -> None:
    kept, decision = _noisy_round(2.0)
    assert kept == LAW and "within margin" in decision, decision
    # the same measurements with the floor alone: the mean gain is taken
    kept, decision = _noisy_round(0.0)
    assert kept == "equal", decision


def test_a_steady_gain_beyond_the_floor_leaves_the_law_whatever_the_sigmas() -> None:
    rates = {n: {"big": 8.0, "small": 4.0} for n in (LAW, "equal", "favour-heavy", "one-lane")}
    rates["favour-heavy"] = {"big": 8.4, "small": 4.2}  # 5 % better, every sweep alike
    fab, tuner = Fabric(rates), Tuner(cfg(margin=0.01, margin_sigmas=2.0), enforce=True)
    assert fab.run(tuner, 30)[-1] == "favour-heavy"


def test_a_later_setup_must_beat_an_earlier_one_by_the_margin() -> None:
    rates = {
        LAW: {"big": 8.0, "small": 4.0},
        "equal": {"big": 10.0, "small": 4.0},
        "favour-heavy": {"big": 10.1, "small": 4.0},  # 1 % above equal: the earlier stays
        "one-lane": {"big": 9.0, "small": 3.0},
    }
    fab, tuner = Fabric(rates), Tuner(cfg(margin=0.03), enforce=True)
    assert fab.run(tuner, 30)[-1] == "equal"
    assert "favour-heavy" in tuner.status(fab.now).decision.split("(")[1]


def test_setups_predicted_too_slow_are_not_tried() -> None:
    rates = {n: {"big": 8.0, "small": 4.0} for n in (LAW, "equal", "favour-heavy", "one-lane")}
    predicted = {LAW: 1.04, "equal": 1.0, "favour-heavy": 1.03, "one-lane": 1.2}
    fab = Fabric(rates)
    tuner = Tuner(cfg(predicted_slack=0.05), enforce=True)
    seen = fab.run(tuner, 30, ranking=("equal", "favour-heavy", "one-lane"), predicted=predicted)
    assert "one-lane" not in seen and "favour-heavy" in seen and "equal" in seen
    # the law is tried whatever it is predicted: 1.04 is within 5 % of 1.0, 1.06 is not
    tuner = Tuner(cfg(predicted_slack=0.05), enforce=True)
    fab = Fabric(rates)
    worse = {**predicted, LAW: 1.2}
    seen = fab.run(tuner, 30, predicted=worse)
    assert seen.count(LAW) >= 2 and "one-lane" not in seen


def test_a_trial_below_the_floor_ends_at_once() -> None:
    rates = {
        LAW: {"big": 8.0, "small": 4.0},
        "equal": {"big": 9.0, "small": 1.0},  # the small job at 25 % of its best
        "favour-heavy": {"big": 8.0, "small": 4.0},
        "one-lane": {"big": 8.0, "small": 4.0},
    }
    fab, tuner = Fabric(rates), Tuner(cfg(floor=0.5), enforce=True)
    seen = fab.run(tuner, 30)
    # the sweep with the reload, then one below the floor: left at the next sweep
    assert seen.count("equal") == 2 and seen[seen.index("equal") + 2] != "equal"
    assert tuner.status(fab.now).measured["equal"] == math.inf
    assert seen[-1] != "equal"


def test_reloads_stay_within_the_hourly_cap() -> None:
    rng = random.Random(7)
    names = (LAW, "equal", "favour-heavy", "one-lane")
    rates = {n: {"big": 8.0, "small": 4.0} for n in names}
    fab = Fabric(rates)
    tuner = Tuner(cfg(max_reloads_per_hour=4, drift=0.01), enforce=True)
    switches: list[float] = []  # times of the switches tuning caused (not mix changes)
    mix = MIX
    for k in range(3 * 360):  # three hours of 10 s sweeps
        if k % 180 == 179:  # a job ends or starts every half hour
            mix = MIX if k % 360 == 359 else frozenset({"big", "small", "other"})
        for n in names:  # noisy jobs: drift starts rounds all the time
            rates[n] = {"big": rng.uniform(6, 10), "small": rng.uniform(2, 5)}
        before, changed = fab.in_force, mix != tuner._mix
        fab.run(tuner, 1, mix=mix)
        if fab.in_force != before and not changed:
            switches.append(fab.now)
    assert tuner.reloads == len(switches) >= 8
    worst = max(sum(1 for t in switches if s <= t < s + 3600) for s in switches)
    assert worst <= 4


def test_a_mix_change_ends_the_round_and_brings_back_the_law() -> None:
    rates = {n: {"big": 8.0, "small": 4.0} for n in (LAW, "equal", "favour-heavy", "one-lane")}
    fab, tuner = Fabric(rates), Tuner(cfg(settle_s=30.0), enforce=True)
    seen = fab.run(tuner, 6)
    assert tuner.state == "trial" and seen[-1] != LAW
    other = frozenset({"big"})
    assert fab.run(tuner, 1, mix=other) == [LAW]
    assert tuner.state == "settling"
    assert fab.run(tuner, 2, mix=other) == [LAW, LAW]  # settle_s not over yet


def test_observe_mode_never_switches() -> None:
    rates = {n: {"big": 8.0, "small": 4.0} for n in (LAW, "equal", "favour-heavy", "one-lane")}
    fab, tuner = Fabric(rates), Tuner(cfg(), enforce=False)
    assert set(fab.run(tuner, 20)) == {LAW}
    assert tuner.status(fab.now).state == "predicting" and tuner.reloads == 0


def test_disabled_tuning_is_off() -> None:
    rates = {n: {"big": 8.0, "small": 4.0} for n in (LAW, "equal", "favour-heavy", "one-lane")}
    fab, tuner = Fabric(rates), Tuner(cfg(enabled=False), enforce=True)
    assert set(fab.run(tuner, 10)) == {LAW}
    assert tuner.status(fab.now).state == "off"


def test_a_round_waits_for_the_prediction() -> None:
    rates = {n: {"big": 8.0, "small": 4.0} for n in (LAW, "equal", "favour-heavy", "one-lane")}
    fab, tuner = Fabric(rates), Tuner(cfg(), enforce=True)
    for _ in range(3):
        fab.now += 10
        s = Sample(fab.now, rates[LAW], NODES, LAW, False, MIX, CLASSES)
        assert tuner.step(s, POOL, None) is None
    assert tuner.state == "waiting" and tuner.rounds == 0


def test_drift_starts_a_new_round() -> None:
    rates = {
        LAW: {"big": 8.0, "small": 4.0},
        "equal": {"big": 10.0, "small": 4.0},
        "favour-heavy": {"big": 8.0, "small": 3.0},
        "one-lane": {"big": 7.0, "small": 3.0},
    }
    fab, tuner = Fabric(rates), Tuner(cfg(drift=0.2), enforce=True)
    fab.run(tuner, 30)
    assert tuner.state == "settled" and tuner.rounds == 1
    rates["equal"] = {"big": 5.0, "small": 2.0}  # the jobs changed phase: re-measure
    fab.run(tuner, 4)
    assert tuner.rounds == 2


def test_class_changes_wait_for_the_round_and_then_start_one() -> None:
    rates = {
        LAW: {"big": 8.0, "small": 4.0},
        "equal": {"big": 10.0, "small": 4.0},
        "favour-heavy": {"big": 8.0, "small": 3.0},
        "one-lane": {"big": 7.0, "small": 3.0},
    }
    fab, tuner = Fabric(rates), Tuner(cfg(settle_s=20.0), enforce=True)
    fab.run(tuner, 4)  # settle, then the round's first trial
    assert tuner.state == "trial"
    moved = frozenset({("big", "moderate"), ("small", "low")})  # a trial moved a class
    fab.run(tuner, 30, classes=moved)
    assert tuner.rounds == 1 and tuner.state == "settled"  # the round went on
    fab.run(tuner, 1, classes=CLASSES)  # settled: a class change is a change that matters
    assert tuner.state == "settling"
    fab.run(tuner, 3, classes=CLASSES)
    assert tuner.rounds == 2


def test_no_trial_without_room_in_opensms_budget() -> None:
    rates = {n: {"big": 8.0, "small": 4.0} for n in (LAW, "equal", "favour-heavy", "one-lane")}
    fab, tuner = Fabric(rates), Tuner(cfg(), enforce=True)
    fab.room = False
    assert set(fab.run(tuner, 10)) == {LAW}
    assert tuner.state == "budget"
    fab.room = True
    assert "equal" in fab.run(tuner, 3)


# -- refinement: setups tried after a round decides -----------------------------------------

R_BETTER = Setup("refine-1", ((1,), (2,)), (3.0, 1.0))
R_CLOSE = Setup("refine-2", ((2,), (1,)), (1.0, 3.0))
R_WORSE = Setup("refine-3", ((1, 2),), (2.0,))
REFINE_RATES = {
    LAW: {"big": 8.0, "small": 4.0},
    "equal": {"big": 8.0, "small": 4.0},
    "favour-heavy": {"big": 8.0, "small": 4.0},
    "one-lane": {"big": 8.0, "small": 4.0},
    "refine-1": {"big": 10.0, "small": 4.0},  # the big job 25 % faster: S 18 % better
    "refine-2": {"big": 8.16, "small": 4.0},  # S 1.5 % better than the law: within 3 %
    "refine-3": {"big": 6.0, "small": 4.0},
}


def settled_on_the_law(**kw) -> tuple[Fabric, Tuner]:
    fab, tuner = Fabric(REFINE_RATES), Tuner(cfg(shortlist=0, **kw), enforce=True)
    fab.run(tuner, 6)
    assert tuner.state == "settled" and tuner.kept == LAW_SETUP
    return fab, tuner


def test_a_refined_setup_is_kept_only_when_it_measures_better_by_the_margin() -> None:
    fab, tuner = settled_on_the_law()
    assert tuner.extend([R_CLOSE], fab.now)
    assert tuner.state == "trial" and tuner.status(fab.now).refinements == 1
    fab.run(tuner, 8)
    assert tuner.state == "settled" and fab.in_force == LAW  # within the margin: reverted
    assert "refine-2" in tuner.status(fab.now).measured
    assert tuner.decision.startswith(f"kept {LAW}") and "within margin" in tuner.decision
    decided = tuner.decided
    assert tuner.extend([R_WORSE, R_BETTER], fab.now)
    fab.run(tuner, 12)
    assert tuner.decided == decided + 1 and tuner.state == "settled"
    assert fab.in_force == "refine-1" and tuner.kept == R_BETTER
    assert tuner.decision.startswith("kept refine-1: favour-light")
    # the kept setup comes first in what the trials measured, then the order tried
    names = [s.name for s, _ in tuner.observations()]
    assert names == ["refine-1", LAW, "refine-2", "refine-3"]
    assert tuner.observations()[0][1] == {"big": 10.0, "small": 4.0}


def test_a_worse_refined_setup_reverts_to_the_kept_one() -> None:
    fab, tuner = settled_on_the_law()
    assert tuner.extend([R_WORSE], fab.now)
    seen = fab.run(tuner, 8)
    assert "refine-3" in seen and seen[-1] == LAW and tuner.state == "settled"
    assert tuner.status(fab.now).measured["refine-3"] > tuner.status(fab.now).measured[LAW]


def test_refinement_needs_room_in_the_reload_budget_and_a_settled_tuner() -> None:
    fab, tuner = settled_on_the_law(max_reloads_per_hour=3)
    assert not tuner.extend([LAW_SETUP], fab.now)  # nothing new
    assert tuner.extend([R_BETTER, R_CLOSE, R_WORSE], fab.now)
    assert not tuner.extend([R_WORSE], fab.now)  # not settled: on trial
    fab.run(tuner, 30)
    # two switches and the revert fit; a third switch would leave no room for its revert
    assert fab.reloads <= 3 and tuner.status(fab.now).reloads_last_hour <= 3
    assert "refine-3" not in tuner.status(fab.now).measured
    assert fab.in_force == "refine-1"  # the fall back keeps what beat the law by the margin
    assert not tuner.extend([Setup("refine-4", ((1,), (2,)), (5.0, 1.0))], fab.now)


def test_a_new_mix_ends_a_refinement() -> None:
    fab, tuner = settled_on_the_law()
    assert tuner.extend([R_BETTER], fab.now)
    fab.run(tuner, 2)
    assert tuner.status(fab.now).trial == "refine-1"
    fab.run(tuner, 1, mix=frozenset({"big"}))
    st = tuner.status(fab.now)
    assert st.state == "settling" and st.wanted == LAW and st.trial is None
    assert tuner.kept is None and tuner.observations() == []
    fab.run(tuner, 10, mix=frozenset({"big"}))
    assert tuner.status(fab.now).refinements == 0 and "refine-1" not in tuner.decision
