"""One decision cycle on the recorded 2-level lab fabric with hand-made rates."""

from __future__ import annotations

import json
import logging
import math

import pytest
from fabric_rates import leaf_up_ports, rates, setup

from ibqos.classify import Thresholds
from ibqos.decide import Decider
from ibqos.jobs import Job
from ibqos.plan_output import lane_weights, render, to_json
from ibqos.planner import LaneConfig

NO_EWMA = Thresholds(tau_s=0.0)
LANES = LaneConfig(min_hold_s=60.0, min_interval_s=0.0)
LINK = 12.5e9  # 4x EDR, bytes/s per direction
HEAVY = Job("h", ("cn0001", "cn0002", "cn0009", "cn0010"), name="ft")  # leaves 1 and 2
LIGHT = Job("l", ("cn0017", "cn0018", "cn0025", "cn0026"), name="pairs")  # leaves 3 and 4


def traffic(heavy_util: float, light_util: float):
    """Rates where each job is alone on its two leaves and sends *util* of their uplinks."""
    fabric, hp = setup()
    xmit = {}
    for job, util, leaves in ((HEAVY, heavy_util, (1, 2)), (LIGHT, light_util, (3, 4))):
        for host in job.nodes:
            xmit[hp[host]] = 2 * LINK * util  # two uplinks per leaf, two hosts per leaf
        for leaf in leaves:
            for key in leaf_up_ports(fabric, f"sw-L1-000{leaf}"):
                xmit[key] = LINK * util
    return fabric, rates(fabric, xmit)


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
