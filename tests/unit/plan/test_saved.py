"""The plan in force survives a restart: the state file keeps it, the planner goes on from it."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from ibqos.plan.decide import Decider
from ibqos.plan.report import Decision
from ibqos.plan.saved import plan_from_doc, plan_to_doc
from tests.support.fabric_rates import rates
from tests.support.two_jobs import HEAVY, LANES, LIGHT, NO_EWMA, traffic


def light_then_heavy() -> Decision:
    """The light job starts alone, the heavy one joins: the light job's lane was placed
    first, so a plan made from scratch for both puts the lanes elsewhere."""
    fabric, table = traffic(0.8, 0.01)
    decider = Decider(fabric, LANES, NO_EWMA)
    decider.decide(table, [LIGHT], 0.0)
    return decider.decide(table, [HEAVY, LIGHT], 1.0)


def restarted(decision: Decision, doc: dict | None) -> Decision:
    """A new decider (a restarted agent) on the saved state, first cycle without rates."""
    fabric, _ = traffic(0.8, 0.01)
    plan = decision.plan
    decider = Decider(fabric, LANES, NO_EWMA)
    decider.restore(plan.job_sl, plan.job_cls, {}, {}, plan_from_doc(doc, LANES))
    nothing = rates(fabric, {}, math.nan)
    return decider.decide(nothing, [HEAVY, LIGHT], 0.0, fresh=False)


def test_a_restart_keeps_the_lanes_in_force() -> None:
    before = light_then_heavy()
    doc = json.loads(json.dumps(plan_to_doc(before.plan), allow_nan=False))  # as on disk
    after = restarted(before, doc)
    assert not after.result.replace  # nothing for OpenSM to do
    assert after.plan.tables == before.plan.tables
    assert after.plan.job_sl == before.plan.job_sl
    assert after.plan.job_intensity == before.plan.job_intensity  # measured, not priors


def test_without_the_plan_in_force_a_restart_repacks() -> None:
    """What the saved plan prevents: SLs keep their numbers, but their lanes move."""
    before = light_then_heavy()
    after = restarted(before, None)
    assert after.plan.job_sl == before.plan.job_sl
    assert after.result.replace
    assert before.plan.tables is not None and after.plan.tables is not None
    assert after.plan.tables.sl_to_vl != before.plan.tables.sl_to_vl


def test_a_plan_of_other_lanes_or_a_damaged_one_is_not_restored() -> None:
    doc = plan_to_doc(light_then_heavy().plan)
    assert plan_from_doc(doc, LANES) is not None
    assert plan_from_doc(doc, replace(LANES, reserved_vls=(1,))) is None
    assert plan_from_doc(doc | {"version": 99}, LANES) is None
    assert plan_from_doc(doc | {"job_sl": {"h": 99, "l": 0}}, LANES) is None
    assert plan_from_doc(doc | {"job_cls": {"h": "huge", "l": "low"}}, LANES) is None
    tables = dict(doc["tables"]) | {"sl_to_vl": [0, 1]}
    assert plan_from_doc(doc | {"tables": tables}, LANES) is None
    assert plan_from_doc(None, LANES) is None
