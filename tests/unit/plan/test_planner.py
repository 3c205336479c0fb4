"""The planner: job -> SL, lanes, weights as encoded in the tables, stability.

The grouping DP is tested in ``test_grouping.py``, the weight laws and their encoding in
``test_weights.py``.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibqos.config.classes import CLASSES
from ibqos.config.lanes import NUM_SLS, VL15, LaneConfig
from ibqos.errors import PlanError
from ibqos.plan.planner import JobState, Plan, PlanResult, plan


def _jobs(*specs: tuple[str, float, str]) -> list[JobState]:
    return [JobState(job_id, intensity=x, cls=cls) for job_id, x, cls in specs]  # type: ignore[arg-type]


def _vl_of(result: PlanResult, job_id: str) -> int:
    tables = result.plan.tables
    assert tables is not None
    return tables.sl_to_vl[result.plan.job_sl[job_id]]


def _packets(result: PlanResult) -> dict[int, int]:
    tables = result.plan.tables
    assert tables is not None
    out: dict[int, int] = {}
    for vl, weight in tables.vlarb_low:
        out[vl] = out.get(vl, 0) + weight
    return out


# -- weights, as plan() encodes them --------------------------------------------------


def test_geometric_weights_in_whole_mtus_favour_light_lanes() -> None:
    jobs = _jobs(("heavy", 0.8, "high"), ("mid", 0.3, "moderate"), ("light", 0.05, "low"))
    result = plan(jobs, LaneConfig(data_vls=4, mtu=2048), None, 0.0)
    packets = _packets(result)
    # 2048-byte MTU = 32 credits per packet; ratio 2: 1, 2, 4 packets
    assert [packets[_vl_of(result, j)] for j in ("heavy", "mid", "light")] == [32, 64, 128]
    tables = result.plan.tables
    assert tables is not None
    assert (tables.target_ratio, tables.achieved_ratio, tables.weight_error) == (4.0, 4.0, 0.0)
    assert all(0 < w <= 255 for _, w in tables.vlarb_low)


def test_weights_above_255_split_into_entries_of_the_same_vl() -> None:
    jobs = _jobs(("heavy", 0.8, "high"), ("mid", 0.3, "moderate"), ("light", 0.05, "low"))
    result = plan(jobs, LaneConfig(data_vls=4, mtu=4096), None, 0.0)
    tables = result.plan.tables
    assert tables is not None
    light = _vl_of(result, "light")
    assert [w for vl, w in tables.vlarb_low if vl == light] == [128, 128]  # 4 packets of 4 KiB
    assert tables.achieved_ratio == 4.0


def test_a_small_vlarb_cap_degrades_and_reports_the_ratio() -> None:
    jobs = _jobs(*((f"j{i}", 0.9 / (i + 1), "moderate") for i in range(8)))
    cfg = LaneConfig(data_vls=8, vlarb_low_cap=8)
    result = plan(jobs, cfg, None, 0.0)
    tables = result.plan.tables
    assert tables is not None
    assert len(tables.vlarb_low) <= 8
    assert tables.target_ratio == 128.0
    assert 1.0 < tables.achieved_ratio <= 7.0  # one entry per lane, 7 packets at most
    assert tables.weight_error > 0


# -- job -> SL and lanes: table of scenarios ---------------------------------------


def test_few_jobs_each_get_an_sl_and_a_lane_the_default_lane_stays_for_unused_sls() -> None:
    jobs = _jobs(("a", 0.5, "high"), ("b", 0.1, "moderate"), ("c", 0.01, "low"))
    result = plan(jobs, LaneConfig(data_vls=8, default_vl=0), None, 0.0)
    assert result.replace and result.reasons[0] == "first plan"
    p = result.plan
    assert sorted(p.job_sl.values()) == [0, 1, 2]
    vls = {_vl_of(result, j) for j in "abc"}
    assert len(vls) == 3 and 0 not in vls
    tables = p.tables
    assert tables is not None
    assert tables.cost == 0.0
    assert all(tables.sl_to_vl[sl] == 0 for sl in range(3, NUM_SLS))
    assert 0 in _packets(result)  # the idle default lane keeps an entry


def test_reserved_sls_and_vls_are_left_to_the_admin() -> None:
    cfg = LaneConfig(data_vls=4, reserved_sls=(0, 1), reserved_vls=(3,), reserved_sl2vl=((1, 3),))
    jobs = _jobs(*((f"j{i}", 0.1 * (i + 1), "moderate") for i in range(6)))
    result = plan(jobs, cfg, None, 0.0)
    tables = result.plan.tables
    assert tables is not None
    assert not {0, 1} & set(result.plan.job_sl.values())
    assert (tables.sl_to_vl[0], tables.sl_to_vl[1]) == (0, 3)
    assert all(_vl_of(result, f"j{i}") != 3 for i in range(6))
    assert 3 in _packets(result)  # a reserved lane keeps an entry


def test_when_sls_run_out_a_new_job_shares_with_jobs_of_its_class() -> None:
    cfg = LaneConfig(data_vls=8, reserved_sls=tuple(range(3, 16)))  # SLs 0-2 for jobs
    first = plan(
        _jobs(("h", 0.7, "high"), ("m", 0.3, "moderate"), ("l", 0.01, "low")), cfg, None, 0.0
    )
    jobs = [*_jobs(("h", 0.7, "high"), ("m", 0.3, "moderate"), ("l", 0.01, "low"))]
    jobs.append(JobState("new", expected="low"))
    second = plan(jobs, cfg, first.plan, 1.0)
    assert second.plan.job_sl["new"] == first.plan.job_sl["l"]
    jobs[-1] = JobState("new")
    third = plan([*jobs[:3], JobState("other")], cfg, first.plan, 1.0)  # default: moderate
    assert third.plan.job_sl["other"] == first.plan.job_sl["m"]


def test_more_sls_than_lanes_isolates_the_heaviest() -> None:
    specs = [("big", 0.9, "high"), ("big2", 0.6, "high")]
    specs += [(f"small{i}", 0.01 * (i + 1), "low") for i in range(6)]
    result = plan(_jobs(*specs), LaneConfig(data_vls=4), None, 0.0)
    big, big2 = _vl_of(result, "big"), _vl_of(result, "big2")
    others = [_vl_of(result, f"small{i}") for i in range(6)]
    assert big != big2 and big not in others and big2 not in others


def test_one_data_vl_puts_everything_on_vl0() -> None:
    result = plan(_jobs(("a", 0.5, "high"), ("b", 0.1, "low")), LaneConfig(data_vls=1), None, 0)
    tables = result.plan.tables
    assert tables is not None
    assert set(tables.sl_to_vl) == {0}


def test_a_restarted_agent_keeps_the_sls_jobs_already_have() -> None:
    jobs = [JobState("old", intensity=0.2, cls="moderate", sl=5), JobState("new")]
    result = plan(jobs, LaneConfig(), None, 0.0)
    assert result.plan.job_sl == {"old": 5, "new": 0}


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (LaneConfig(data_vls=4, reserved_vls=(4,)), "VL 4 is not a data VL"),
        (LaneConfig(data_vls=2, reserved_vls=(0, 1)), "every data VL is reserved"),
        (LaneConfig(reserved_sls=tuple(range(16))), "every SL is reserved"),
        (LaneConfig(mtu=1500), "mtu"),
        (LaneConfig(data_vls=16), "data_vls"),
        (LaneConfig(weight_ratio=0.05), "weight_ratio"),
        (LaneConfig(weight_law="linear", weight_ratio=0.5), "needs weight_law geometric"),
        (LaneConfig(reserved_sl2vl=((2, 1),)), "SL 2 is not reserved"),
        (LaneConfig(vlarb_high=((15, 4),)), "vlarb_high"),
        (LaneConfig(data_vls=4, reserved_vls=(0, 1), vlarb_low_cap=2), "no entry for jobs"),
    ],
)
def test_bad_lane_configs_are_refused(cfg: LaneConfig, match: str) -> None:
    with pytest.raises(PlanError, match=match):
        plan(_jobs(("a", 0.1, "low")), cfg, None, 0.0)


def test_bad_jobs_are_refused() -> None:
    with pytest.raises(PlanError, match="listed twice"):
        plan(_jobs(("a", 0.1, "low"), ("a", 0.2, "low")), LaneConfig(), None, 0.0)
    with pytest.raises(PlanError, match="intensity"):
        plan([JobState("a", intensity=-1.0)], LaneConfig(), None, 0.0)


# -- routing engines that own SLs ----------------------------------------------------


@pytest.mark.parametrize("engine", ["lash", "dfsssp", "torus-2QoS", "nue", "ftree,lash"])
def test_sl_owning_engines_get_no_tables_but_jobs_still_get_sls(engine: str) -> None:
    result = plan(_jobs(("a", 0.1, "low")), LaneConfig(routing_engine=engine), None, 0.0)
    assert result.plan.tables is None
    assert result.plan.job_sl == {"a": 0}
    assert any("owns SLs" in w for w in result.warnings)


@pytest.mark.parametrize("engine", ["", "minhop", "ftree", "updn", "sssp", "dor"])
def test_other_engines_get_tables(engine: str) -> None:
    result = plan(_jobs(("a", 0.1, "low")), LaneConfig(routing_engine=engine), None, 0.0)
    assert result.plan.tables is not None and not result.warnings


# -- stability ---------------------------------------------------------------------------


def test_noise_does_not_replace_the_plan() -> None:
    cfg = LaneConfig(data_vls=2)
    jobs = _jobs(("a", 0.5, "high"), ("b", 0.45, "high"), ("c", 0.01, "low"))
    first = plan(jobs, cfg, None, 0.0)
    noisy = _jobs(("a", 0.44, "high"), ("b", 0.5, "high"), ("c", 0.02, "low"))
    second = plan(noisy, cfg, first.plan, 10.0)
    assert not second.replace
    assert second.plan.tables == first.plan.tables
    assert second.plan.changed_s == 0.0


def test_class_changes_wait_for_min_hold_and_min_interval() -> None:
    cfg = LaneConfig(data_vls=2, min_hold_s=60, min_interval_s=300)
    base = [("a", 0.6, "high"), ("b", 0.02, "low"), ("c", 0.01, "low")]
    p0 = plan(_jobs(*base), cfg, None, 0.0)
    assert _vl_of(p0, "b") == _vl_of(p0, "c") != _vl_of(p0, "a")
    changed = _jobs(("a", 0.6, "high"), ("b", 0.02, "low"), ("c", 0.7, "high"))
    p1 = plan(changed, cfg, p0.plan, 100.0)  # just seen: held
    assert not p1.replace and p1.plan.pending == {"c": ("high", 100.0)}
    p2 = plan(changed, cfg, p1.plan, 200.0)  # held 100 s, but only 200 s since the change
    assert not p2.replace and "wait" in p2.reasons[0]
    p3 = plan(changed, cfg, p2.plan, 300.0)  # both passed: regroup
    assert p3.replace and p3.plan.job_cls["c"] == "high" and not p3.plan.pending
    assert _vl_of(p3, "a") == _vl_of(p3, "b") != _vl_of(p3, "c")  # now c is the heaviest
    assert p3.plan.changed_s == 300.0
    assert p3.plan.job_sl == p0.plan.job_sl


def test_a_job_start_goes_through_at_once() -> None:
    cfg = LaneConfig(min_interval_s=300)
    p0 = plan(_jobs(("a", 0.5, "high")), cfg, None, 0.0)
    p1 = plan([*_jobs(("a", 0.5, "high")), JobState("b", expected="low")], cfg, p0.plan, 1.0)
    assert p1.replace and p1.reasons == ("jobs started: b",)
    assert p1.plan.job_sl == {"a": 0, "b": 1}
    assert _vl_of(p1, "a") != _vl_of(p1, "b")
    p2 = plan(_jobs(("b", 0.01, "low")), cfg, p1.plan, 2.0)
    assert p2.replace and p2.reasons == ("jobs ended: a",) and p2.plan.job_sl == {"b": 1}


# -- properties ------------------------------------------------------------------------

_CLASS = st.sampled_from(CLASSES)


@st.composite
def _configs(draw: st.DrawFn) -> LaneConfig:
    data_vls = draw(st.sampled_from([1, 2, 4, 8, 15]))
    reserved_vls = draw(st.sets(st.integers(0, data_vls - 1), max_size=max(0, data_vls - 1)))
    reserved_sls = draw(st.sets(st.integers(0, 15), max_size=6))
    sl2vl = {sl: draw(st.integers(0, data_vls - 1)) for sl in reserved_sls if draw(st.booleans())}
    cap = draw(st.integers(len(reserved_vls) + 1, 64))
    return LaneConfig(
        data_vls=data_vls,
        reserved_sls=tuple(sorted(reserved_sls)),
        reserved_vls=tuple(sorted(reserved_vls)),
        reserved_sl2vl=tuple(sorted(sl2vl.items())),
        default_vl=draw(st.integers(0, data_vls - 1)),
        weight_law=draw(st.sampled_from(["geometric", "linear", "equal"])),
        weight_ratio=draw(st.sampled_from([1.0, 1.5, 2.0, 3.0])),
        vlarb_low_cap=cap,
        mtu=draw(st.sampled_from([256, 1024, 2048, 4096])),
        min_hold_s=draw(st.sampled_from([0.0, 30.0])),
        min_interval_s=draw(st.sampled_from([0.0, 100.0])),
    )


_STEP = st.dictionaries(
    st.sampled_from([f"j{i}" for i in range(24)]),
    st.tuples(st.floats(0, 1, allow_nan=False), _CLASS, st.one_of(st.none(), _CLASS)),
    max_size=20,
)


def _check(
    result: PlanResult,
    cfg: LaneConfig,
    jobs: dict[str, tuple[float, str, str | None]],
    previous: Plan | None,
) -> None:
    p: Plan = result.plan
    assert set(p.job_sl) == set(jobs)
    assert not set(p.job_sl.values()) & set(cfg.reserved_sls)
    t = p.tables
    assert t is not None
    assert len(t.sl_to_vl) == NUM_SLS
    assert all(0 <= vl < cfg.data_vls and vl != VL15 for vl in t.sl_to_vl)
    for sl in cfg.reserved_sls:
        assert t.sl_to_vl[sl] == dict(cfg.reserved_sl2vl).get(sl, cfg.default_vl)
    active = set(p.job_sl.values())
    assert not {t.sl_to_vl[sl] for sl in active} & set(cfg.reserved_vls)
    # VLArb: data VLs only, weights 1..255, within the cap, every used lane served
    assert 0 < len(t.vlarb_low) <= cfg.vlarb_low_cap
    assert all(0 <= vl < cfg.data_vls and 0 < w <= 255 for vl, w in t.vlarb_low)
    served = {vl for vl, _ in t.vlarb_low}
    assert {t.sl_to_vl[sl] for sl in active} <= served
    # weights never increase with intensity
    job_lanes = [lane for lane in t.lanes if lane.rank is not None]
    for a, b in itertools.permutations(job_lanes, 2):
        if a.intensity > b.intensity:
            assert a.packets <= b.packets
    # isolation when lanes suffice
    lanes_for_jobs = min(
        cfg.data_vls - len(cfg.reserved_vls),
        cfg.vlarb_low_cap - len(cfg.reserved_vls),
    )
    if len(active) <= lanes_for_jobs:
        vls = [t.sl_to_vl[sl] for sl in active]
        assert len(set(vls)) == len(vls)
    # a new job gets an SL of its own while free ones are left; jobs that had to share an SL
    # earlier keep sharing it (their SL never changes), so only new jobs are checked
    kept = {j: sl for j, sl in p.job_sl.items() if previous is not None and j in previous.job_sl}
    new = [p.job_sl[j] for j in p.job_sl if j not in kept]
    free_sls = NUM_SLS - len(cfg.reserved_sls) - len(set(kept.values()))
    if len(new) <= free_sls:
        assert len(set(new)) == len(new)
        assert not set(new) & set(kept.values())


@settings(deadline=None, max_examples=200)
@given(_configs(), st.lists(_STEP, min_size=1, max_size=5))
def test_plan_invariants_over_time(
    cfg: LaneConfig, steps: list[dict[str, tuple[float, str, str | None]]]
) -> None:
    previous: Plan | None = None
    for i, step in enumerate(steps):
        jobs = [
            JobState(j, intensity=x, cls=cls, expected=exp)  # type: ignore[arg-type]
            for j, (x, cls, exp) in sorted(step.items())
        ]
        result = plan(jobs, cfg, previous, 50.0 * i)
        _check(result, cfg, step, previous)
        for job_id, sl in result.plan.job_sl.items():
            # a job's SL never changes while it runs
            if previous is not None and job_id in previous.job_sl:
                assert sl == previous.job_sl[job_id]
        if previous is not None and not result.replace:
            assert result.plan.substance() == previous.substance()
        previous = result.plan
