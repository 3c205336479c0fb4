"""Job profiles: files, round trip, matching, confidence, bad input; and their use as the
planner's prior (before any counter is read) and for attribution."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
import yaml

from ibqos.characterize.command import characterize, fabric_of, model_of_trace, save_profile
from ibqos.characterize.trace import parse_csv_trace
from ibqos.classify.levels import Characterizer
from ibqos.classify.prior import FinishedJob, Priors, learn
from ibqos.classify.profiles import (
    Model,
    Observation,
    Profile,
    ProfileStore,
    load_profile,
    parse_profile,
)
from ibqos.config.classes import Thresholds
from ibqos.config.lanes import LaneConfig
from ibqos.errors import JobsError, ProfileError
from ibqos.jobs.jobfile import parse_jobs
from ibqos.jobs.model import Job
from ibqos.plan.decide import Decider
from ibqos.plan.output import render, to_json
from tests.support.fabric_rates import leaf_up_ports, rates, setup

LANES = LaneConfig(min_hold_s=0.0, min_interval_s=0.0)


def test_a_profile_round_trips_through_its_file(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path)
    profile = Profile(
        "lammps",
        "moderate",
        0.5,
        user="alice",
        nodes=4,
        model=Model("halo", 4.5e8, halo_dims=(2, 2)),
        characterized=({"placement": "contiguous", "levels": {0: {"util": 0.1}}},),
        observations=(Observation("trace t.csv", "moderate", 0.2, 1700000000.0),),
    )
    path = store.save(profile)
    assert path == tmp_path / "lammps@alice-n4.yaml"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left
    again = ProfileStore(tmp_path).profiles
    assert again == [profile] and again[0].path == path
    text = path.read_text()
    assert text.startswith("# ibqos job profile") and "halo_dims: [2, 2]" in text


def test_confidence_grows_with_agreeing_observations(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path)
    p = store.observe("ft", Observation("a", "high"))
    assert (p.expected_class, p.confidence) == ("high", 0.5)  # 1 / (1 + 1)
    p = store.observe("ft", Observation("b", "high"))
    p = store.observe("ft", Observation("c", "high"))
    assert (p.expected_class, p.confidence) == ("high", 0.75)
    p = store.observe("ft", Observation("d", "low"))
    assert (p.expected_class, p.confidence) == ("high", 0.6)  # 3 of 4, over 5
    p = store.observe("ft", Observation("e", "low"))
    p = store.observe("ft", Observation("f", "low"))
    assert p.expected_class == "low"  # 3 against 3: the latest class wins the tie
    assert ProfileStore(tmp_path).get("ft") == p


def test_the_most_specific_profile_matches(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path)
    for user, nodes, cls in ((None, None, "low"), ("bob", None, "moderate"), ("bob", 8, "high")):
        store.save(Profile("cfd", cls, 1.0, user=user, nodes=nodes))  # type: ignore[arg-type]
    assert store.match("cfd", "bob", 8).expected_class == "high"  # type: ignore[union-attr]
    assert store.match("cfd", "bob", 4).expected_class == "moderate"  # type: ignore[union-attr]
    assert store.match("cfd", "eve", 8).expected_class == "low"  # type: ignore[union-attr]
    assert store.match("other", "bob", 8) is None and store.match("", None, 1) is None


GOOD = {"version": 1, "application": "ft", "expected_class": "high", "confidence": 0.8}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 2}, "p.yaml: version: expected 1, got 2"),
        ({"application": "a b"}, "p.yaml: application: expected a name"),
        ({"expected_class": "huge"}, "p.yaml: expected_class: expected one of low, moderate"),
        ({"confidence": 1.5}, "p.yaml: confidence: expected a number in [0, 1]"),
        ({"confidence": "sure"}, "p.yaml: confidence: expected a number"),
        ({"nodes": 0}, "p.yaml: nodes: expected an integer >= 1"),
        ({"colour": 1}, "p.yaml: colour: unknown key"),
        ({"model": {"pattern": "star"}}, "p.yaml: model.pattern: expected one of"),
        ({"model": {"pattern": "matrix"}}, "p.yaml: model.matrix: required with pattern matrix"),
        ({"model": {"pattern": "ring", "speed": 1}}, "p.yaml: model.speed: unknown key"),
        (
            {"model": {"pattern": "matrix", "matrix": [[1, 0], [0, 0]]}},
            "p.yaml: model.matrix[0][0]: expected 0 on the diagonal, got 1",
        ),
        (
            {"nodes": 5, "model": {"pattern": "halo", "halo_dims": [2, 2]}},
            "p.yaml: model: does not describe a job of nodes: 5",
        ),
        ({"observations": [{"source": "x", "class": "big"}]}, "p.yaml: observations[0].class"),
    ],
)
def test_bad_profiles_name_the_key(change: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_profile(GOOD | change, "p.yaml")
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_every_problem_of_a_profile_file_is_told_at_once(tmp_path: Path) -> None:
    path = tmp_path / "ft.yaml"
    model = {"pattern": "halo", "halo_dims": [2, 0], "duty": 2}
    doc = GOOD | {"confidence": 1.5, "model": model, "observations": [{"source": "", "class": 1}]}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(info.value).splitlines() == [
        f"{path}: confidence: expected a number in [0, 1], got 1.5",
        f"{path}: model.halo_dims: expected a list of integers > 0, got [2, 0]",
        f"{path}: model.duty: expected a number in (0, 1], got 2",
        f"{path}: observations[0].source: expected a non-empty string, got ''",
        f"{path}: observations[0].class: expected one of low, moderate, high, got 1",
    ]


@pytest.mark.parametrize(
    ("key", "value"),
    [("pattern", "star"), ("duty", 2), ("period_s", 0), ("halo_dims", [2, 0]), ("seed", 1)],
)
def test_a_model_s_traffic_keys_are_checked_as_a_job_file_s(key: str, value: object) -> None:
    with pytest.raises(ProfileError) as profile:
        parse_profile(GOOD | {"model": {"pattern": "halo", key: value}}, "p.yaml")
    traffic = {"pattern": "halo", "rate_bytes_per_s": 1, "duty": 1, "period_s": 1}
    with pytest.raises(JobsError) as jobs:
        parse_jobs({"jobs": [{"id": "1", "nodes": "cn[1-4]"} | traffic | {key: value}]}, "j.yaml")
    # the same problem after the key path: p.yaml: model.duty: ... / j.yaml: jobs[0].duty: ...
    said = str(profile.value).split(": ", 2)
    assert said[1] == f"model.{key}"
    if key == "seed":  # a job's pattern option, no key of a profile's model
        assert said[2].startswith("unknown key (expected one of pattern, halo_dims, matrix,")
    else:
        assert [str(jobs.value).split(": ", 2)[1:]] == [[f"jobs[0].{key}", said[2]]]


def test_a_bad_file_in_the_store_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(GOOD))
    (tmp_path / "b.yaml").write_text("version: 1\napplication: [\n")
    with pytest.raises(ProfileError, match=r"b\.yaml:3: not valid YAML"):
        ProfileStore(tmp_path)
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(GOOD))
    with pytest.raises(
        ProfileError, match=r"b\.yaml: same application, user and nodes as .*a\.yaml"
    ):
        ProfileStore(tmp_path)


def test_numbers_written_without_a_dot_are_numbers() -> None:
    doc = yaml.safe_load("model: {pattern: ring, rate_bytes_per_s: 4.5e8}")
    assert parse_profile(GOOD | doc, "p").model == Model("ring", 4.5e8)


# -- the planner's prior --------------------------------------------------------------

NEW = Job("7", ("cn0001", "cn0002", "cn0009", "cn0010"), name="ft", user="alice")


def decide_without_counters(tmp_path: Path, jobs: list[Job], min_confidence: float = 0.5):
    fabric, _ = setup()
    decider = Decider(fabric, LANES, priors=Priors(ProfileStore(tmp_path), min_confidence))
    # no counter has answered yet: every rate is unknown
    return decider, decider.decide(rates(fabric, {}, math.nan), jobs, 0.0)


def test_a_new_job_starts_in_its_profile_class(tmp_path: Path) -> None:
    ProfileStore(tmp_path).save(Profile("ft", "high", 0.8))
    _, d = decide_without_counters(tmp_path, [NEW])
    job = d.jobs[0]
    assert (job.expected, job.cls, job.measured_class) == ("high", "high", None)
    assert job.prior == "ft.yaml: high (profile class, confidence 0.80)"
    assert to_json(d)["jobs"][0]["prior"] == job.prior
    assert "job 7: expected class from profile ft.yaml: high" in render(d, "table")


def test_without_a_profile_the_default_class_stands(tmp_path: Path) -> None:
    ProfileStore(tmp_path).save(Profile("ft", "high", 0.3))  # not sure enough
    _, d = decide_without_counters(tmp_path, [NEW])
    assert (d.jobs[0].expected, d.jobs[0].prior) == ("moderate", None)


def test_a_model_predicts_the_class_on_the_job_placement(tmp_path: Path) -> None:
    # all-to-all at 1e10 B/s a node, mean: 2 of each node's 3 peers on the other leaf ->
    # 4 x 1e10 x 2/3 = 2.67e10 over 2 leaves x 2 uplinks x 12.5e9 = 0.53: high, though
    # the profile's own class says low
    ProfileStore(tmp_path).save(Profile("ft", "low", 0.9, model=Model("all-to-all", 1e10)))
    _, d = decide_without_counters(tmp_path, [NEW])
    assert d.jobs[0].expected == "high"
    assert d.jobs[0].prior == "ft.yaml: high (model on its placement, confidence 0.90)"
    # the same job packed on one leaf sends nothing up: low
    packed = Job("8", ("cn0001", "cn0002", "cn0003", "cn0004"), name="ft")
    _, d = decide_without_counters(tmp_path, [packed])
    assert d.jobs[0].expected == "low"
    # the job declared no pattern: the profile's is its attribution prior
    assert d.jobs[0].profile == "pattern all-to-all"


def test_the_model_is_classified_by_the_configured_thresholds(tmp_path: Path) -> None:
    # the model above gives 0.533 on NEW: high by the defaults, low under bounds 0.6/0.9
    ProfileStore(tmp_path).save(Profile("ft", "low", 0.9, model=Model("all-to-all", 1e10)))
    fabric, _ = setup()
    priors = Priors(ProfileStore(tmp_path))
    decider = Decider(fabric, LANES, Thresholds(moderate=0.6, high=0.9), priors=priors)
    unknown = rates(fabric, {}, math.nan)
    assert decider.decide(unknown, [NEW], 0.0).jobs[0].expected == "low"
    # a config reload replaces the classifier's thresholds: the next new job follows them
    decider.classifier.thresholds = Thresholds(moderate=0.2, high=0.5)
    again = Job("9", NEW.nodes, name="ft")
    assert decider.decide(unknown, [again], 1.0).jobs[0].expected == "high"


def test_a_traced_model_predicts_what_the_trace_gives(tmp_path: Path) -> None:
    # nodes 0-3 (leaf 1) each send 8e9 B/s to node i + 4 (leaf 2); nodes 4-7 send nothing.
    # Contiguous on 2;4,2;1,2: 4 x 8e9 = 3.2e10 up, over 2 leaves x 2 uplinks x 12.5e9 = 0.64
    text = "# ranks: 8\nstart_s,end_s,src,dst,bytes\n"
    text += "".join(f"0,1,{i},{i + 4},8e9\n" for i in range(4))
    traffic = parse_csv_trace(text, "t.csv").node_traffic(1)
    fabric, name, exclude = fabric_of("2;4,2;1,2", None)
    ch = Characterizer(fabric, exclude=exclude)
    run = characterize(ch, traffic, ["contiguous"], title="trace t.csv", fabric_name=name)
    assert run.placements[0].intensity == pytest.approx(0.64)
    save_profile(ProfileStore(tmp_path), "pairs", run, model_of_trace(traffic))
    profile = ProfileStore(tmp_path).get("pairs", nodes=8)  # read back from its file
    assert profile is not None and profile.model is not None
    assert profile.model.rate_bytes_per_s == pytest.approx(4e9)  # 3.2e10 over 8 nodes
    hosts = run.placements[0].hosts
    prior = Priors(ProfileStore(tmp_path)).prior(Job("j", hosts), profile, hosts, ch)
    # each sending row at the mean rate would give half: 0.32, moderate
    assert prior.intensity == pytest.approx(0.64) and prior.cls == "high"


def test_measured_jobs_overrule_a_wrong_model(tmp_path: Path) -> None:
    # the model gives NEW 0.533, high (above); the jobs measured on the fabric saw low
    trace = Observation("trace ft.csv", "high", 0.53)
    one = (trace, Observation("job 1", "low", 0.02))
    model = Model("all-to-all", 1e10)
    ProfileStore(tmp_path).save(Profile("ft", "high", 0.9, model=model, observations=one))
    _, d = decide_without_counters(tmp_path, [NEW])
    assert d.jobs[0].expected == "high"  # one measurement does not overrule the model
    two = (*one, Observation("history of job 2 from http://p", "low", 0.03))
    ProfileStore(tmp_path).save(Profile("ft", "high", 0.9, model=model, observations=two))
    _, d = decide_without_counters(tmp_path, [NEW])
    # 2 measured, both low: 2 / 3 >= min_confidence 0.5; the trace is not a measurement
    assert d.jobs[0].expected == "low"
    assert d.jobs[0].prior == "ft.yaml: low (measured jobs, the model said high, confidence 0.90)"
    # measurements that agree with the model change nothing
    agree = (trace, Observation("job 1", "high", 0.5), Observation("job 2", "high", 0.5))
    ProfileStore(tmp_path).save(Profile("ft", "high", 0.9, model=model, observations=agree))
    _, d = decide_without_counters(tmp_path, [NEW])
    assert d.jobs[0].prior == "ft.yaml: high (model on its placement, confidence 0.90)"


def test_a_finished_job_is_learned_by_its_measured_band(tmp_path: Path) -> None:
    # expected high (profile); measured 4 up ports x 4.375e9 = 1.75e10 of 5e10 = 0.35:
    # moderate by the bounds, yet it stays high, within the hysteresis (0.4 x 0.8 = 0.32)
    ProfileStore(tmp_path).save(Profile("ft", "high", 0.8))
    fabric, hp = setup()
    decider = Decider(fabric, LANES, priors=Priors(ProfileStore(tmp_path)), wall_clock=lambda: 5e8)
    busy = {
        k: 4.375e9
        for k in leaf_up_ports(fabric, "sw-L1-0001") + leaf_up_ports(fabric, "sw-L1-0002")
    }
    busy |= {hp[h]: 4.375e9 for h in NEW.nodes}
    d = decider.decide(rates(fabric, busy), [NEW], 0.0)
    assert d.jobs[0].intensity == pytest.approx(0.35) and d.jobs[0].measured_class == "high"
    d = decider.decide(rates(fabric, busy), [], 1.0)
    assert d.finished == (FinishedJob("7", "ft", "alice", 4, "moderate", 0.35, 5e8),)
    assert decider.last_finished == {"ft": d.finished[0]}


def test_finished_jobs_teach_their_profiles(tmp_path: Path) -> None:
    fabric, hp = setup()
    decider = Decider(fabric, LANES, priors=Priors(ProfileStore(tmp_path)))
    busy = {hp[h]: 1e9 for h in NEW.nodes}
    decider.decide(rates(fabric, busy), [NEW], 0.0)
    d = decider.decide(rates(fabric, busy), [], 1.0)
    assert [f.id for f in d.finished] == ["7"]
    assert learn(decider.priors.store, d.finished, 100.0) == 1  # type: ignore[union-attr]
    p = ProfileStore(tmp_path).get("ft")
    assert p is not None and p.observations[0].source == "job 7"
    assert p.expected_class == d.finished[0].cls


def test_learning_keeps_what_others_wrote_since_the_store_was_read(tmp_path: Path) -> None:
    agent = ProfileStore(tmp_path)  # loaded at start: no profile yet
    cli = ProfileStore(tmp_path)
    cli.observe("ft", Observation("trace ft.csv", "high", 0.5), model=Model("ring", 3e9))
    finished = [FinishedJob("1", "ft", None, 4, "high", 0.45, 100.0)]
    assert learn(agent, finished, 100.0) == 1
    p = ProfileStore(tmp_path).get("ft")
    assert p is not None and p.model == Model("ring", 3e9)
    assert [o.source for o in p.observations] == ["trace ft.csv", "job 1"]
    assert (p.expected_class, p.confidence) == ("high", round(2 / 3, 4))
    # an admin's edit (another model) made after that is kept by the next job too
    path = tmp_path / "ft.yaml"
    path.write_text(path.read_text().replace("pattern: ring", "pattern: all-to-all"))
    learn(agent, [FinishedJob("2", "ft", None, 4, "high", 0.45, 200.0)], 200.0)
    p = ProfileStore(tmp_path).get("ft")
    assert p is not None and p.model == Model("all-to-all", 3e9) and len(p.observations) == 3
    assert [f.name for f in tmp_path.iterdir()] == ["ft.yaml"]  # no temp file left


def test_learning_skips_jobs_without_a_usable_name(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path)
    jobs = [FinishedJob("1", "", None, 2, "low", 0.0), FinishedJob("2", "a b", None, 2, "low", 0.0)]
    assert learn(store, jobs, 0.0) == 0 and not list(tmp_path.iterdir())


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
