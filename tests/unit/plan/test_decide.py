"""One decision cycle on the recorded 2-level lab fabric with hand-made rates."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import replace

import numpy as np
import pytest

from ibqos.attribute.attribution import Attributor
from ibqos.attribute.jobmap import map_jobs
from ibqos.classify.classifier import Capacities, Classifier, utilization
from ibqos.config.lanes import LaneConfig
from ibqos.fabric.model import Fabric
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.jobs.model import Job
from ibqos.plan.decide import Decider
from ibqos.plan.output import lane_weights, render, to_json, weights_text
from ibqos.plan.planner import JobState, plan
from tests.support.fabric_rates import leaf_up_ports, random_jobs, random_rates, rates, setup
from tests.support.two_jobs import HEAVY, LANES, LIGHT, LINK, NO_EWMA, traffic


def test_a_cycle_measures_classifies_and_plans() -> None:
    fabric, table = traffic(0.8, 0.01)
    decider = Decider(fabric, LANES, NO_EWMA)
    d = decider.decide(table, [HEAVY, LIGHT], 0.0)
    h, lt = d.jobs
    assert math.isclose(h.levels[1].avail_bytes_per_s, 4 * LINK)  # 2 leaves x 2 uplinks
    assert math.isclose(h.levels[1].util or 0, 0.8) and math.isclose(lt.levels[1].util or 0, 0.01)
    assert h.levels[2].avail_bytes_per_s == 0.0 and h.levels[2].util is None  # top level
    assert (h.cls, lt.cls) == ("high", "low")
    assert h.measured_share == lt.measured_share == 1.0  # alone on their leaves
    assert h.sl != lt.sl and h.vl != lt.vl
    assert d.plan.tables is not None
    weight = lane_weights(d.plan.tables)
    assert weight[lt.vl] > weight[h.vl]  # the light lane is favoured
    assert d.result.replace and d.result.reasons[0] == "first plan"


def test_the_sl_stays_and_a_class_change_waits_min_hold() -> None:
    fabric, table = traffic(0.8, 0.01)
    decider = Decider(fabric, LANES, NO_EWMA)
    first = {j.id: j for j in decider.decide(table, [HEAVY, LIGHT], 0.0).jobs}
    _, swapped = traffic(0.01, 0.8)
    d = decider.decide(swapped, [HEAVY, LIGHT], 10.0)
    now = {j.id: j for j in d.jobs}
    assert {k: j.sl for k, j in now.items()} == {k: j.sl for k, j in first.items()}
    assert (now["l"].cls, now["l"].measured_class) == ("low", "high")  # held
    assert not d.result.replace
    d = decider.decide(swapped, [HEAVY, LIGHT], 70.0)
    now = {j.id: j for j in d.jobs}
    assert (now["l"].cls, now["h"].cls) == ("high", "low") and d.result.replace
    assert {k: j.sl for k, j in now.items()} == {k: j.sl for k, j in first.items()}


def test_unmeasured_jobs_take_their_expected_class() -> None:
    """The first sweep has no rates: jobs get SLs at once, on the default class."""
    fabric, _ = setup()
    d = Decider(fabric, LANES).decide(rates(fabric, {}, math.nan), [HEAVY, LIGHT], 0.0)
    for job in d.jobs:
        assert (job.intensity, job.measured_class, job.cls) == (None, None, "moderate")
        assert job.levels[1].util is None
    doc = to_json(d)
    json.dumps(doc, allow_nan=False)  # NaN never reaches the JSON
    assert doc["jobs"][0]["levels"]["1"]["bytes_per_s"] is None


def test_an_application_is_expected_to_behave_as_last_time() -> None:
    fabric, table = traffic(0.8, 0.01)
    decider = Decider(fabric, LANES, NO_EWMA)
    decider.decide(table, [HEAVY, LIGHT], 0.0)
    decider.decide(table, [LIGHT], 10.0)  # h (ft) ended as high
    again = Job("h2", HEAVY.nodes, name="ft")
    d = decider.decide(rates(fabric, {}, math.nan), [LIGHT, again], 20.0)
    new = d.jobs[1]
    assert (new.id, new.expected, new.cls) == ("h2", "high", "high")


def test_mapping_warnings_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    fabric, table = traffic(0.1, 0.1)
    stray = Job("s", ("cn0003", "nosuchhost"))
    decider = Decider(fabric, LANES)
    with caplog.at_level(logging.WARNING):
        for t in (0.0, 10.0):
            d = decider.decide(table, [HEAVY, stray], t)
            assert any("nosuchhost" in w for w in d.warnings)
    assert sum("nosuchhost" in r.getMessage() for r in caplog.records) == 1


def test_an_sl_owning_engine_keeps_the_policy_side_only() -> None:
    fabric, table = traffic(0.8, 0.01)
    d = Decider(fabric, LaneConfig(routing_engine="lash")).decide(table, [HEAVY, LIGHT], 0.0)
    assert [j.vl for j in d.jobs] == [None, None] and d.plan.tables is None
    doc = to_json(d)
    assert (doc["lanes"], doc["tables"]) == ([], None)
    assert any("lash" in w for w in doc["warnings"])
    assert "owns SLs" in render(d, "table")


def test_the_json_and_the_table() -> None:
    fabric, table = traffic(0.8, 0.01)
    d = Decider(fabric, LANES, NO_EWMA).decide(table, [HEAVY, LIGHT], 0.0)
    doc = json.loads(render(d, "json"))
    job = doc["jobs"][0]
    for key in ("id", "nodes", "levels", "intensity", "class", "sl", "vl", "measured_share"):
        assert key in job
    assert set(job["levels"]["1"]) == {"bytes_per_s", "avail_bytes_per_s", "util"}
    assert job["nodes"] == list(HEAVY.nodes)
    lanes = {lane["vl"]: lane for lane in doc["lanes"]}
    assert lanes[job["vl"]]["jobs"] == ["h"] and lanes[job["vl"]]["sls"] == [job["sl"]]
    for lane in doc["lanes"]:
        assert set(lane) >= {"vl", "weight", "sls", "jobs", "intensity"}
    text = render(d, "table")
    assert text.splitlines()[0].split()[:3] == ["JOB", "NAME", "NODES"]
    assert "cn[0001-0002,0009-0010]" in text and "80.0%" in text


# -- the vectorized cycle against the per-job one -----------------------------------------


def per_job_cycle(fabric, classifier, table, jobs, now_s):
    """What a cycle computes for each job, one job at a time with the scalar functions:
    job id -> (figures by level as (rate, avail, util), classification)."""
    mapped, _ = map_jobs(jobs, fabric, log=False)
    attribution = Attributor(fabric).attribute(table, mapped)
    caps = Capacities.from_fabric(fabric)
    out = {}
    for mj in mapped:
        rate = attribution.jobs[mj.id].bytes_per_s
        avail = caps.available(mj.ports)
        levels = {}
        for lvl in sorted(avail):
            r, a = rate.get(lvl, math.nan), avail[lvl]
            levels[lvl] = (r, a, r / a if a > 0 and math.isfinite(r) else None)
        known = {lvl: f[0] for lvl, f in levels.items() if f[2] is not None}
        if any(lvl >= 1 for lvl in known) or (known and fabric.height <= 1):
            sample = classifier.update(mj.id, utilization(known, avail), now_s, "moderate")
        else:
            sample = classifier.get(mj.id)
        out[mj.id] = (levels, sample)
    return out


def close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12)


@pytest.mark.parametrize("xgft", ["1;12;1", "2;8,4;1,2", "3;4,4,3;1,2,2"])
def test_the_vectorized_cycle_agrees_with_the_per_job_one(xgft: str) -> None:
    fabric = Fabric(build_xgft(parse_xgft(xgft)))
    rng = np.random.default_rng(9)
    first = random_jobs(fabric, rng, 8)
    later = [*first[3:], *random_jobs(fabric, rng, 2, prefix="new")]
    decider = Decider(fabric, LANES)
    scalar = Classifier(decider.classifier.thresholds)
    cycles = [(first, 0.05), (first, 0.0), (later, 0.0), (later, 1.0), (later, 0.0)]
    for k, (jobs, nan_share) in enumerate(cycles):
        table = random_rates(fabric, rng, nan_share)
        now = 10.0 * k
        d = decider.decide(table, jobs, now)
        want = per_job_cycle(fabric, scalar, table, jobs, now)
        assert [r.id for r in d.jobs] == list(want)
        for report in d.jobs:
            levels, sample = want[report.id]
            assert list(report.levels) == list(levels)
            for lvl, f in report.levels.items():
                assert all(map(close, (f.bytes_per_s, f.avail_bytes_per_s, f.util), levels[lvl]))
            if sample is None:
                assert (report.intensity, report.level, report.measured_class) == (None,) * 3
            else:
                assert close(report.intensity, sample.smoothed), (k, report.id)
                assert (report.level, report.measured_class) == (sample.level, sample.cls)


def test_a_report_s_levels_read_like_a_dict() -> None:
    fabric, table = traffic(0.8, 0.01)
    h = Decider(fabric, LANES, NO_EWMA).decide(table, [HEAVY, LIGHT], 0.0).jobs[0]
    plain = dict(h.levels)
    assert list(plain) == [0, 1, 2] and len(h.levels) == 3 and 1 in h.levels
    assert h.levels[1] == plain[1] and h.levels == plain
    assert repr(h.levels) == repr(plain)
    for missing in (3, -1, "1", None):
        with pytest.raises(KeyError):
            h.levels[missing]
    assert h.levels.get(5) is None


def test_a_negative_rate_is_an_error_naming_the_job() -> None:
    fabric, hp = setup()
    xmit = {hp[host]: -1e9 for host in HEAVY.nodes}
    for leaf in ("sw-L1-0001", "sw-L1-0002"):
        for key in leaf_up_ports(fabric, leaf):
            xmit[key] = -1e9
    with pytest.raises(ValueError, match=r"job h: level 0: utilization -0\.08 "):
        Decider(fabric, LANES).decide(rates(fabric, xmit), [HEAVY], 0.0)


def test_a_cycle_without_jobs() -> None:
    fabric, table = traffic(0.5, 0.5)
    d = Decider(fabric, LANES).decide(table, [], 0.0)
    assert d.jobs == () and d.plan.job_sl == {}
    assert d.unattributed[1] > 0  # the uplinks' bytes: no job takes them


def test_a_job_new_between_sweeps_is_not_classed_from_rates_read_before_it() -> None:
    """The agent replans at once when a job starts, with the last sweep's rates: the new
    job's nodes were idle then, so it keeps its expected class until a fresh sweep."""
    fabric, table = traffic(0.8, 0.01)
    decider = Decider(fabric, LANES, NO_EWMA)
    decider.decide(table, [LIGHT], 0.0)
    d = decider.decide(table, [LIGHT, HEAVY], 1.0, fresh=False)
    new = {j.id: j for j in d.jobs}["h"]
    assert (new.measured_class, new.cls, new.intensity) == (None, "moderate", None)
    d = decider.decide(table, [LIGHT, HEAVY], 2.0)  # a fresh sweep
    assert {j.id: j for j in d.jobs}["h"].measured_class == "high"


def test_jobs_on_shared_hosts_are_reported_and_checked_from_a_host_of_their_own() -> None:
    fabric, table = traffic(0.2, 0.01)
    # s has cn0001 and cn0009 of HEAVY's hosts, and cn0005 of its own in between
    shared = Job("s", ("cn0001", "cn0005", "cn0009"), name="small")
    only = Job("t", ("cn0002",), name="tiny")  # on a shared host only
    decider = Decider(fabric, LANES, NO_EWMA)
    d = decider.decide(table, [HEAVY, LIGHT, shared, only], 0.0)
    by_id = {j.id: j for j in d.jobs}
    assert set(by_id) == {"h", "l", "s", "t"} and len({j.sl for j in d.jobs}) == 4
    assert by_id["s"].shared == ("cn0001", "cn0009") and by_id["t"].shared == ("cn0002",)
    assert by_id["h"].measured_share < 1 and by_id["l"].measured_share == 1.0
    doc = json.loads(render(d, "json"))
    assert [j["shared_nodes"] for j in doc["jobs"]] == [
        ["cn0001", "cn0002", "cn0009"],
        [],
        ["cn0001", "cn0009"],
        ["cn0002"],
    ]
    assert "job s: shares cn[0001,0009] with other jobs" in render(d, "table")
    # the SA serves s's SL on a path from cn0005 (only s has it), not from cn0001 to cn0009
    # (h's rule comes first there): the PathRecord check starts at the port of its own
    lid = {fp.node_desc.split()[0]: fp.lid for fp in fabric.ports.values() if not fp.is_switch}
    lids = dict(decider.job_lids())
    assert lids["s"][0] == lid["cn0005"] and sorted(lids["s"]) == sorted(
        lid[h] for h in shared.nodes
    )
    assert lids["t"] == [] and lids["l"] == [lid[h] for h in LIGHT.nodes]


# -- the table's words ---------------------------------------------------------------------


def shared_leaves():
    """h and x share leaves 1 and 2; l is alone on leaves 3 and 4; one sits on leaf 1
    only, so it sends nothing up (and nothing of it is estimated) whatever it injects."""
    fabric, hp = setup()
    x = Job("x", ("cn0003", "cn0011"), name="x")
    one = Job("one", ("cn0005", "cn0006"), name="one")
    injection = ((HEAVY, 4e9), (x, 2e9), (LIGHT, 1e9), (one, 3e9))
    xmit = {hp[h]: r for job, r in injection for h in job.nodes}
    for leaf, up in ((1, 6e9), (2, 6e9), (3, 1e9), (4, 1e9)):
        for key in leaf_up_ports(fabric, f"sw-L1-000{leaf}"):
            xmit[key] = up / 2
    decider = Decider(fabric, LANES, NO_EWMA)
    return decider.decide(rates(fabric, xmit), [HEAVY, x, LIGHT, one], 0.0)


def test_the_table_says_where_each_job_s_figures_come_from() -> None:
    """A job at GB/s whose share of shared uplinks was estimated does not read "0.0%"."""
    d = shared_leaves()
    lines = render(d, "table").splitlines()
    assert lines[0].endswith("VL  SOURCE")
    assert lines[1].split()[3:5] == ["16.00", "GB/s"]  # h: measured on its own hosts
    source = {ln.split()[0]: ln.split()[-1] for ln in lines[1:5]}
    assert source == {"h": "estimated", "x": "estimated", "l": "measured", "one": "measured"}
    assert lines[5].startswith("SOURCE: measured from counters of the job's own")
    partly = replace(d, jobs=(replace(d.jobs[0], measured_share=0.25),))
    assert render(partly, "table").splitlines()[1].endswith("25.0% measured")
    assert to_json(d)["jobs"][0]["measured_share"] == 0.0  # the JSON keeps the number


def test_the_weight_note_says_what_the_ratio_is() -> None:
    d = shared_leaves()
    assert d.plan.tables is not None and d.plan.tables.achieved_ratio == 8.0
    assert (
        "WEIGHT: 64-byte credits per arbitration round; the lightest lane weighs 8x the most"
        " intense one, as the weight law asks"
    ) in render(d, "table").splitlines()
    # 8 lanes of distinct intensity want 2**7 = 128x; 8 VLArb entries of one lane each
    # hold at most 7 packets against 1
    jobs = [JobState(f"j{i}", intensity=0.9 / (i + 1), cls="moderate") for i in range(8)]
    tables = plan(jobs, LaneConfig(data_vls=8, vlarb_low_cap=8), None, 0.0).plan.tables
    assert tables is not None
    got = tables.achieved_ratio
    assert weights_text(tables, 8) == (
        f"WEIGHT: 64-byte credits per arbitration round; the lightest lane weighs {got:.3g}x"
        " the most intense one (the weight law asks 128x; 8 VLArb entries encode no closer)"
    )
    one_lane = plan(jobs[:1], LaneConfig(), None, 0.0).plan.tables
    assert one_lane is not None
    assert weights_text(one_lane, 64) == "WEIGHT: 64-byte credits per arbitration round"


def test_the_table_does_not_say_apply_for_what_it_does_not_write() -> None:
    fabric, table = traffic(0.8, 0.01)
    decider = Decider(fabric, LANES, NO_EWMA)
    first = decider.decide(table, [HEAVY, LIGHT], 0.0)
    assert render(first, "table").splitlines()[-1] == (
        "plan: replaces the plan in force (first plan; jobs started: h, l)"
    )
    again = decider.decide(table, [HEAVY, LIGHT], 10.0)
    assert render(again, "table").splitlines()[-1] == (
        "plan: the plan in force stays (no change in substance)"
    )
    text = render(first, "table", from_scratch=True)
    assert "apply" not in text and "replaces" not in text
    assert text.splitlines()[-1].startswith("nothing written: planned from scratch")
