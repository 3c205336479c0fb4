"""Candidate setups beside the favour-light law, and the planner programming them."""

from __future__ import annotations

import pytest

from ibqos.config.lanes import LaneConfig
from ibqos.plan.planner import JobState, law_setup, plan
from ibqos.plan.setups import LAW, Setup, candidates

CFG = LaneConfig(reserved_sls=(0,), data_vls=8, vlarb_low_cap=8, min_hold_s=0, min_interval_s=0)


def _three():
    jobs = [JobState("heavy", 0.8, "high"), JobState("mod", 0.3, "moderate")]
    jobs.append(JobState("light", 0.05, "low"))
    return plan(jobs, CFG, None, 0.0).plan


def test_law_setup_is_what_the_planner_programs() -> None:
    p = _three()
    law = law_setup(p)
    assert law.name == LAW
    sls = [p.job_sl[j] for j in ("heavy", "mod", "light")]
    assert law.groups == tuple((sl,) for sl in sls)  # most intense first
    assert law.targets == (1.0, 2.0, 4.0)
    assert p.tables is not None and p.tables.setup == LAW


def test_candidates_cover_the_kinds_and_are_bounded() -> None:
    law = law_setup(_three())
    names = [s.name for s in candidates(law, 16)]
    assert names[:4] == [LAW, "equal", "favour-heavy", "ratio-4"]
    for name in ("heavy+moderate", "moderate+light", "one-lane", "heavy+light", "ratio-8"):
        assert name in names
    assert "ratio-2" not in names  # the law at ratio 2 programs the same
    assert [s.name for s in candidates(law, 3)] == names[:3]
    heavy_light = next(s for s in candidates(law, 16) if s.name == "heavy+light")
    h, m, li = (g[0] for g in law.groups)
    assert heavy_light.groups == (tuple(sorted((h, li))), (m,))  # not contiguous
    for setup in candidates(law, 16):
        assert setup.fits(law.sls)


def test_four_groups_add_two_lanes_of_halves_favouring_the_lighter() -> None:
    jobs = [JobState("heavy", 0.8, "high"), JobState("mod1", 0.4, "moderate")]
    jobs += [JobState("mod2", 0.2, "moderate"), JobState("light", 0.05, "low")]
    p = plan(jobs, CFG, None, 0.0).plan
    law = law_setup(p)
    assert len(law.groups) == 4
    names = [s.name for s in candidates(law, 8)]
    assert "halves" in names and len(names) == 8
    halves = next(s for s in candidates(law, 8) if s.name == "halves")
    g = [grp[0] for grp in law.groups]  # most intense first
    assert halves.groups == (tuple(sorted(g[:2])), tuple(sorted(g[2:])))
    assert halves.targets == (1.0, 2.0) and halves.fits(law.sls)
    r = plan(jobs, CFG, p, 1.0, halves)
    assert r.plan.tables is not None and r.plan.tables.setup == "halves"
    assert len({r.plan.tables.sl_to_vl[sl] for sl in law.sls}) == 2
    assert "halves" not in [s.name for s in candidates(law_setup(_three()), 16)]


def test_one_job_has_one_candidate() -> None:
    p = plan([JobState("a", 0.5, "high")], CFG, None, 0.0).plan
    assert [s.name for s in candidates(law_setup(p), 8)] == [LAW]


@pytest.mark.parametrize("name", ["equal", "favour-heavy", "one-lane", "heavy+light"])
def test_the_planner_programs_a_setup_and_keeps_job_sls(name: str) -> None:
    p = _three()
    setup = next(s for s in candidates(law_setup(p), 16) if s.name == name)
    jobs = [JobState(j, p.job_intensity[j], p.job_cls[j]) for j in p.job_sl]
    r = plan(jobs, CFG, p, 1.0, setup)
    assert r.replace and r.plan.job_sl == p.job_sl
    tables = r.plan.tables
    assert tables is not None and tables.setup == name
    vl = {j: tables.sl_to_vl[sl] for j, sl in r.plan.job_sl.items()}
    for group in setup.groups:  # SLs of a group share a lane, groups do not
        assert len({tables.sl_to_vl[sl] for sl in group}) == 1
    assert len({tables.sl_to_vl[g[0]] for g in setup.groups}) == len(setup.groups)
    packets = {ln.vl: ln.packets for ln in tables.lanes if ln.rank is not None}
    if name == "favour-heavy":
        assert packets[vl["heavy"]] == 2 * packets[vl["mod"]] == 4 * packets[vl["light"]]
        assert tables.target_ratio == 0.25
    if name == "equal":
        assert len(set(packets.values())) == 1
    # the next cycle with nothing new keeps the setup and reloads nothing
    again = plan(jobs, CFG, r.plan, 2.0, setup)
    assert not again.replace and again.plan.tables == tables
    # without the setup the law comes back
    back = plan(jobs, CFG, r.plan, 3.0)
    assert back.replace and back.plan.tables is not None and back.plan.tables.setup == LAW
    assert f"setup {LAW}" in back.reasons


def test_a_setup_that_no_longer_fits_gives_the_law() -> None:
    p = _three()
    setup = next(s for s in candidates(law_setup(p), 16) if s.name == "equal")
    jobs = [JobState(j, p.job_intensity[j], p.job_cls[j]) for j in p.job_sl if j != "light"]
    r = plan(jobs, CFG, p, 1.0, setup)
    assert r.plan.setup is None and r.plan.tables is not None and r.plan.tables.setup == LAW
    assert any("does not place" in reason for reason in r.reasons)


def test_weight_ratio_below_one_favours_heavy() -> None:
    cfg = LaneConfig(reserved_sls=(0,), weight_ratio=0.5, vlarb_low_cap=8)
    jobs = [JobState("heavy", 0.8, "high"), JobState("light", 0.05, "low")]
    tables = plan(jobs, cfg, None, 0.0).plan.tables
    assert tables is not None
    lanes = {ln.sls: ln.packets for ln in tables.lanes if ln.rank is not None}
    p = plan(jobs, cfg, None, 0.0).plan
    assert lanes[(p.job_sl["heavy"],)] == 2 * lanes[(p.job_sl["light"],)]


def test_setup_fits() -> None:
    s = Setup("x", ((1, 2), (3,)), (1.0, 1.0))
    assert s.fits({1, 2, 3}) and not s.fits({1, 2}) and not s.fits({1, 2, 3, 4})
    assert not Setup("y", ((1,), (1,)), (1.0, 1.0)).fits({1})
