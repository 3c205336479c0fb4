"""Per-job available bandwidth, utilization, intensity and classes (ibqos.classify.classifier)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ibqos.attribute.jobmap import MappedJob
from ibqos.classify.classifier import (
    Capacities,
    Classifier,
    available,
    class_of,
    intensity,
    next_class,
    utilization,
)
from ibqos.config.classes import CLASSES, Thresholds
from ibqos.fabric.model import Fabric, fabric_from_file
from ibqos.jobs.model import Job
from tests.support.paths import TESTS

DATA = TESTS / "data"
TWO = DATA / "lab-xgft-2_8.4_1.2" / "ibnetdiscover.txt"  # 4 leaves x 8 hosts, 2 spines
THREE = DATA / "lab-xgft-3_8.4.4_1.2.2" / "ibnetdiscover.txt"  # 16 leaves, 4 level-2 groups
EDR = 12.5e9  # 4xEDR, bytes per second


@pytest.fixture(scope="module")
def two() -> Fabric:
    return fabric_from_file(TWO)


@pytest.fixture(scope="module")
def three() -> Fabric:
    return fabric_from_file(THREE)


def mapped(fabric: Fabric, *hosts: str, job_id: str = "1") -> MappedJob:
    """A MappedJob of *hosts*, with their CA ports looked up by NodeDescription."""
    by_host = {
        fp.node_desc.split()[0]: key for key, fp in fabric.ports.items() if fp.role == "host"
    }
    job = Job(id=job_id, nodes=hosts, pattern="ring", rate_bytes_per_s=1e9, duty=1.0, period_s=1.0)
    return MappedJob(job, ports=tuple(by_host[h] for h in hosts), hosts=hosts)


def cn(first: int, last: int) -> tuple[str, ...]:
    return tuple(f"cn{k:04d}" for k in range(first, last + 1))


# -- available ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        # one host: its own link, its leaf's 2 uplinks; nothing above the spines
        (cn(1, 1), {0: EDR, 1: 2 * EDR, 2: 0.0}),
        # a whole leaf (cn0001-0008 hang off sw-L1-0001)
        (cn(1, 8), {0: 8 * EDR, 1: 2 * EDR, 2: 0.0}),
        # two hosts either side of a leaf boundary: two leaves' uplinks
        (cn(8, 9), {0: 2 * EDR, 1: 4 * EDR, 2: 0.0}),
        # one host on each leaf
        (("cn0001", "cn0009", "cn0017", "cn0025"), {0: 4 * EDR, 1: 8 * EDR, 2: 0.0}),
        (cn(1, 32), {0: 32 * EDR, 1: 8 * EDR, 2: 0.0}),
    ],
)
def test_available_two_levels(two: Fabric, hosts, expected) -> None:
    assert available(two, mapped(two, *hosts)) == expected


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        # a leaf (2 uplinks) inside a level-2 group (2 switches x 2 uplinks)
        (cn(1, 8), {0: 8 * EDR, 1: 2 * EDR, 2: 4 * EDR, 3: 0.0}),
        # a whole level-2 group: 4 leaves, 1 group
        (cn(1, 32), {0: 32 * EDR, 1: 8 * EDR, 2: 4 * EDR, 3: 0.0}),
        # across a group boundary: 2 leaves in 2 groups
        (cn(31, 34), {0: 4 * EDR, 1: 4 * EDR, 2: 8 * EDR, 3: 0.0}),
        (cn(1, 128), {0: 128 * EDR, 1: 32 * EDR, 2: 16 * EDR, 3: 0.0}),
    ],
)
def test_available_three_levels(three: Fabric, hosts, expected) -> None:
    assert available(three, mapped(three, *hosts)) == expected


@pytest.mark.parametrize("name", ["two", "three"])
def test_available_to_every_host_is_the_fabric_uplink_capacity(name, request) -> None:
    fabric: Fabric = request.getfixturevalue(name)
    every = [key for key, fp in fabric.ports.items() if fp.role == "host"]
    caps = Capacities.from_fabric(fabric)
    assert caps.available(every) == {
        lvl: fabric.uplink_capacity_bytes_per_s(lvl) for lvl in range(fabric.height + 1)
    }


@pytest.mark.parametrize("name", ["two", "three"])
def test_capacities_match_the_fabric(name, request) -> None:
    fabric: Fabric = request.getfixturevalue(name)
    caps = Capacities.from_fabric(fabric)
    for level in range(1, fabric.height + 1):
        assert caps.subtree_capacity[level - 1] == fabric.subtree_uplink_capacity_bytes_per_s(level)
        ca_subtree = fabric.topo.subtrees(level, fabric.levels)
        assert caps.subtree_of[level - 1] == {
            key: ca_subtree[fabric.ports[key].node_id] for key in caps.host_capacity
        }


def test_capacities_are_reused(two: Fabric) -> None:
    caps = Capacities.from_fabric(two)
    job = mapped(two, *cn(8, 9))
    assert available(caps, job) == available(two, job) == caps.available(job.ports)
    assert caps.height == 2


def test_available_skips_unknown_and_repeated_ports(two: Fabric) -> None:
    job = mapped(two, "cn0001")
    ports = (*job.ports, *job.ports, (0xDEAD, 1))
    assert Capacities.from_fabric(two).available(ports) == {0: EDR, 1: 2 * EDR, 2: 0.0}


def test_available_of_no_ports(two: Fabric) -> None:
    assert Capacities.from_fabric(two).available([]) == {0: 0.0, 1: 0.0, 2: 0.0}


@pytest.mark.parametrize("name", ["two", "three"])
def test_available_many_agrees_with_available(name, request) -> None:
    """The vectorized path gives what the simple one gives, job by job."""
    fabric: Fabric = request.getfixturevalue(name)
    caps = Capacities.from_fabric(fabric)
    hosts = [key for key, fp in fabric.ports.items() if fp.role == "host"]
    rng = np.random.default_rng(3)
    jobs = [[hosts[i] for i in rng.choice(len(hosts), rng.integers(1, 12))] for _ in range(40)]
    jobs += [[], [(0xDEAD, 1)], hosts, [hosts[0], hosts[0], (0xDEAD, 1)]]  # edge cases
    got = caps.available_many(jobs)
    assert got.shape == (len(jobs), fabric.height + 1)
    for ports, row in zip(jobs, got.tolist(), strict=True):
        want = caps.available(ports)
        assert list(want) == list(range(fabric.height + 1))
        assert row == pytest.approx(list(want.values()), rel=1e-12)


def test_available_many_of_no_jobs(two: Fabric) -> None:
    assert Capacities.from_fabric(two).available_many([]).shape == (0, 3)


# -- utilization and intensity ------------------------------------------------------------


def test_utilization_leaves_out_levels_without_bandwidth() -> None:
    rate = {0: 5e9, 1: 5e9, 2: 0.0}
    avail = {0: 10e9, 1: 25e9, 2: 0.0}
    assert utilization(rate, avail) == {0: 0.5, 1: 0.2}
    assert utilization({3: 1.0}, avail) == {}  # no avail known for the level


@pytest.mark.parametrize(
    ("util", "expected"),
    [
        ({0: 0.9, 1: 0.2, 2: 0.3}, (0.3, 2)),  # level 0 does not decide
        ({0: 0.9, 1: 0.0}, (0.0, 1)),  # a job inside one leaf shares nothing
        ({0: 0.7}, (0.7, 0)),  # single-switch fabric: injection decides
        ({1: 0.25, 2: 0.25}, (0.25, 1)),  # ties: the lowest level
        ({}, (0.0, None)),
    ],
)
def test_intensity(util, expected) -> None:
    assert intensity(util) == expected


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf])
def test_intensity_rejects_bad_values(bad) -> None:
    with pytest.raises(ValueError, match="level 1: utilization"):
        intensity({0: 0.1, 1: bad})


# -- thresholds ---------------------------------------------------------------------------


def test_default_thresholds() -> None:
    th = Thresholds()
    assert (th.moderate, th.high, th.hysteresis, th.tau_s) == (0.1, 0.4, 0.2, 60.0)
    assert th.bounds == (0.1, 0.4)
    # the hysteresis bands around the two bounds do not overlap
    assert th.moderate * (1 + th.hysteresis) < th.high * (1 - th.hysteresis)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"moderate": 0.0}, "0 < moderate < high"),
        ({"moderate": 0.5, "high": 0.4}, "0 < moderate < high"),
        ({"high": math.nan}, "high: expected a finite number"),
        ({"hysteresis": 1.0}, "hysteresis: expected a fraction < 1"),
        ({"hysteresis": -0.1}, "hysteresis: expected a finite number >= 0"),
        ({"tau_s": -1.0}, "tau_s"),
        ({"tau_s": math.inf}, "tau_s: expected a finite number"),
    ],
)
def test_bad_thresholds(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        Thresholds(**kwargs)


@pytest.mark.parametrize(
    ("value", "cls"),
    [(0.0, "low"), (0.099, "low"), (0.1, "moderate"), (0.399, "moderate"), (0.4, "high")],
)
def test_class_of(value, cls) -> None:
    assert class_of(value, Thresholds()) == cls


# Binary-exact bounds so the margins are exact: up past 0.375 / 0.75, down under 0.125 / 0.25.
EXACT = Thresholds(moderate=0.25, high=0.5, hysteresis=0.5, tau_s=0.0)


@pytest.mark.parametrize(
    ("current", "value", "expected"),
    [
        ("low", 0.375, "low"),  # must exceed bound x (1 + h)
        ("low", 0.376, "moderate"),
        ("low", 0.76, "high"),  # two classes at once
        ("moderate", 0.125, "moderate"),  # must fall below bound x (1 - h)
        ("moderate", 0.124, "low"),
        ("moderate", 0.75, "moderate"),
        ("high", 0.25, "high"),
        ("high", 0.24, "moderate"),
        ("high", 0.1, "low"),  # two classes at once
        ("high", 2.0, "high"),
        ("low", 0.0, "low"),
    ],
)
def test_next_class_margins(current, value, expected) -> None:
    assert next_class(current, value, EXACT) == expected


# -- the classifier: hysteresis (no smoothing) --------------------------------------------

NO_EWMA = Thresholds(tau_s=0.0)  # 0.1 / 0.4 bounds, up past 0.12 / 0.48, down under 0.08 / 0.32


def run(clf: Classifier, rows, job_id: str = "1", level: int = 1):
    """Feed (t, util) rows; return (t, class, changed) per row."""
    out = []
    for t, util in rows:
        result = clf.update(job_id, {0: 1.0, level: util}, t)
        out.append((t, result.cls, result.changed))
    return out


@pytest.mark.parametrize(
    ("name", "rows"),
    [
        (
            "oscillating around the moderate bound does not flap",
            [
                (0, 0.05, "low", False),
                (10, 0.11, "low", False),
                (20, 0.09, "low", False),
                (30, 0.115, "low", False),
                (40, 0.125, "moderate", True),
                (50, 0.09, "moderate", False),
                (60, 0.11, "moderate", False),
                (70, 0.085, "moderate", False),
                (80, 0.079, "low", True),
                (90, 0.11, "low", False),
            ],
        ),
        (
            "oscillating around the high bound does not flap",
            [
                (0, 0.3, "moderate", False),
                (10, 0.45, "moderate", False),
                (20, 0.35, "moderate", False),
                (30, 0.47, "moderate", False),
                (40, 0.49, "high", True),
                (50, 0.33, "high", False),
                (60, 0.42, "high", False),
                (70, 0.31, "moderate", True),
                (80, 0.45, "moderate", False),
            ],
        ),
        (
            "big steps skip a class",
            [
                (0, 0.0, "low", False),
                (10, 0.9, "high", True),
                (20, 0.05, "low", True),
            ],
        ),
        (
            "the first sample takes its plain band, without margins",
            [(0, 0.41, "high", False), (10, 0.35, "high", False)],
        ),
    ],
)
def test_hysteresis_table(name, rows) -> None:
    clf = Classifier(NO_EWMA)
    got = run(clf, [(t, u) for t, u, _, _ in rows])
    assert got == [(t, cls, changed) for t, _, cls, changed in rows], name


def test_intensity_is_the_busiest_shared_level() -> None:
    clf = Classifier(NO_EWMA)
    result = clf.update("1", {0: 0.95, 1: 0.05, 2: 0.3}, 0.0)
    assert (result.intensity, result.level, result.cls) == (0.3, 2, "moderate")


# -- the classifier: smoothing ------------------------------------------------------------


def test_ewma_follows_a_step_with_the_time_constant() -> None:
    clf = Classifier(Thresholds(tau_s=60.0))
    clf.update("1", {1: 0.0}, 0.0)  # the first sample initialises the average
    for t in range(10, 310, 10):
        result = clf.update("1", {1: 1.0}, float(t))
        assert result.intensity == 1.0
        assert result.smoothed == pytest.approx(1 - math.exp(-t / 60))
    # after one time constant, 63 % of the step
    clf2 = Classifier(Thresholds(tau_s=60.0))
    clf2.update("1", {1: 0.0}, 0.0)
    assert clf2.update("1", {1: 1.0}, 60.0).smoothed == pytest.approx(1 - math.exp(-1))


def test_ewma_weighs_by_time_not_by_samples() -> None:
    th = Thresholds(tau_s=30.0)
    one, many = Classifier(th), Classifier(th)
    one.update("1", {1: 0.0}, 0.0)
    many.update("1", {1: 0.0}, 0.0)
    last = one.update("1", {1: 0.5}, 20.0)
    for t in (1.0, 2.5, 7.0, 20.0):
        other = many.update("1", {1: 0.5}, t)
    assert other.smoothed == pytest.approx(last.smoothed)


def test_a_step_up_crosses_only_past_the_margin() -> None:
    """A step to 0.5 passes the high bound (0.4) near t = 97 s but the class moves only
    once the average passes 0.4 x 1.2 = 0.48, near t = 193 s."""
    clf = Classifier(Thresholds(tau_s=60.0))
    clf.update("1", {1: 0.0}, 0.0)
    classes = {t: clf.update("1", {1: 0.5}, float(t)) for t in range(10, 310, 10)}
    assert classes[100].smoothed > 0.4
    assert classes[100].cls == "moderate"
    assert classes[190].cls == "moderate"
    assert classes[200].cls == "high"
    assert classes[200].changed
    assert classes[200].since_s == 200.0
    first_high = min(t for t, r in classes.items() if r.cls == "high")
    assert first_high == min(t for t in classes if 0.5 * (1 - math.exp(-t / 60)) > 0.48)


def test_a_short_burst_does_not_change_the_class() -> None:
    clf = Classifier(Thresholds(tau_s=60.0))
    clf.update("1", {1: 0.02}, 0.0)
    burst = clf.update("1", {1: 1.0}, 5.0)  # 5 s at full rate: about 8 % of the step
    assert burst.intensity == 1.0
    assert burst.smoothed < 0.12
    assert burst.cls == "low"
    assert not burst.changed


def test_no_time_passed_does_not_move_the_average() -> None:
    clf = Classifier(Thresholds(tau_s=60.0))
    clf.update("1", {1: 0.2}, 100.0)
    same = clf.update("1", {1: 0.9}, 100.0)
    back = clf.update("1", {1: 0.9}, 50.0)  # a clock going back counts as no time
    assert same.smoothed == back.smoothed == 0.2
    assert clf.update("1", {1: 0.9}, 160.0).smoothed == pytest.approx(
        0.2 + 0.7 * (1 - math.exp(-1))
    )


def test_no_smoothing_with_tau_zero() -> None:
    clf = Classifier(NO_EWMA)
    clf.update("1", {1: 0.1}, 0.0)
    assert clf.update("1", {1: 0.7}, 1.0).smoothed == 0.7


# -- the classifier: prior, hold, state ---------------------------------------------------


@pytest.mark.parametrize(
    ("prior", "first", "cls", "changed"),
    [
        ("high", 0.35, "high", False),  # inside the margin below 0.4: the prior holds
        ("high", 0.05, "low", True),  # far off: the measurement wins
        ("low", 0.11, "low", False),  # plain band would say moderate
        ("moderate", 0.5, "high", True),
        (None, 0.11, "moderate", False),
    ],
)
def test_prior(prior, first, cls, changed) -> None:
    result = Classifier().update("1", {1: first}, 10.0, prior=prior)
    assert (result.cls, result.changed, result.since_s, result.held_s) == (cls, changed, 10.0, 0)


def test_prior_is_ignored_for_a_known_job() -> None:
    clf = Classifier(NO_EWMA)
    clf.update("1", {1: 0.0}, 0.0)
    assert clf.update("1", {1: 0.0}, 10.0, prior="high").cls == "low"


def test_bad_prior() -> None:
    with pytest.raises(ValueError, match="prior: expected one of low, moderate, high"):
        Classifier().update("1", {1: 0.0}, 0.0, prior="medium")
    assert CLASSES == ("low", "moderate", "high")


def test_since_and_held() -> None:
    clf = Classifier(NO_EWMA)
    clf.update("1", {1: 0.0}, 100.0)
    r = clf.update("1", {1: 0.0}, 130.0)
    assert (r.cls, r.since_s, r.held_s) == ("low", 100.0, 30.0)
    r = clf.update("1", {1: 0.6}, 140.0)
    assert (r.cls, r.since_s, r.held_s, r.changed) == ("high", 140.0, 0.0, True)
    assert clf.get("1") == r


def test_jobs_are_independent_and_thresholds_can_change() -> None:
    clf = Classifier(NO_EWMA)
    assert clf.update("a", {1: 0.2}, 0.0).cls == "moderate"
    assert clf.update("b", {1: 0.02}, 0.0).cls == "low"
    clf.thresholds = Thresholds(moderate=0.01, high=0.1, tau_s=0.0)
    assert clf.update("a", {1: 0.2}, 10.0).cls == "high"
    assert clf.update("b", {1: 0.02}, 10.0).cls == "moderate"


def test_update_many_is_update_job_by_job() -> None:
    rng = np.random.default_rng(4)
    one, many = Classifier(), Classifier()
    ids = [f"j{k}" for k in range(30)]
    priors = [(None, *CLASSES)[k % 4] for k in range(30)]
    for now in (0.0, 10.0, 25.0, 25.0, 90.0):
        values = (rng.lognormal(-2.5, 1.5, len(ids))).tolist()
        levels = rng.integers(1, 3, len(ids)).tolist()
        want = [
            one.update(j, {lvl: v}, now, prior=p)
            for j, v, lvl, p in zip(ids, values, levels, priors, strict=True)
        ]
        assert many.update_many(ids, values, levels, now, priors) == want
        assert [many.get(j) for j in ids] == want


def test_update_many_rejects_a_bad_prior() -> None:
    with pytest.raises(ValueError, match="prior"):
        Classifier().update_many(["a"], [0.1], [1], 0.0, ["medium"])


def test_prune_and_forget() -> None:
    clf = Classifier()
    for job_id in ("a", "b", "c"):
        clf.update(job_id, {1: 0.0}, 0.0)
    assert clf.prune(["b", "zzz"]) == ["a", "c"]
    assert "b" in clf
    assert "a" not in clf
    assert len(clf) == 1
    clf.forget("b")
    clf.forget("zzz")  # unknown: nothing happens
    assert len(clf) == 0
    assert clf.get("b") is None
    # a job that comes back starts afresh
    assert clf.update("b", {1: 0.5}, 10.0).smoothed == 0.5


# -- end to end on the recorded fabric ----------------------------------------------------


def test_rates_to_classes_on_the_two_level_fabric(two: Fabric) -> None:
    caps = Capacities.from_fabric(two)
    clf = Classifier(NO_EWMA)
    # 16 hosts on 2 leaves, sending 4 GB/s out of their leaves: 4e9 / (4 x EDR) = 0.08
    spread = mapped(two, *cn(1, 16), job_id="spread")
    rate = {0: 16 * 1e9, 1: 4e9, 2: 0.0}
    util = utilization(rate, caps.available(spread.ports))
    assert util == {0: 16e9 / (16 * EDR), 1: 4e9 / (4 * EDR)}
    assert clf.update(spread.id, util, 0.0).cls == "low"
    # the same traffic from one leaf's worth of uplinks: 4e9 / (2 x EDR) = 0.16
    packed = mapped(two, *cn(17, 24), job_id="packed")
    util = utilization({0: 8e9, 1: 4e9, 2: 0.0}, caps.available(packed.ports))
    assert clf.update(packed.id, util, 0.0).cls == "moderate"
