"""The plan in force as the agent's state file keeps it, and back.

A restart must not re-pack the lanes: OpenSM still programs the plan the agent left, and any
change (an SL moved from one VL to another) costs a heavy sweep of the whole subnet.  So the
state file keeps the plan whose files OpenSM took (:func:`plan_to_doc`), and a restarted
agent hands it back to the planner as the previous plan (:func:`plan_from_doc`): jobs still
running keep their SLs, classes and intensities, and the lanes stay where they were until
something changes in substance (a job starts or ends, a class change outlasts
``lanes.min_hold_s``).

The lane configuration the plan was made with is kept as a fingerprint.  When it differs
from the configuration the agent starts with, the saved tables may not fit any more (a VL
reserved since, fewer data VLs), so nothing is restored and the planner starts afresh.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

from ibqos.config.classes import as_class
from ibqos.config.lanes import NUM_SLS, LaneConfig
from ibqos.plan.planner import Lane, Plan, Tables
from ibqos.plan.setups import LAW

#: version of the document; another version is not restored
VERSION = 1


def lane_fingerprint(cfg: LaneConfig) -> str:
    """A short digest of *cfg*: equal for equal configurations, across processes."""
    return hashlib.sha256(repr(cfg).encode()).hexdigest()[:16]


def plan_to_doc(plan: Plan) -> dict[str, Any]:
    """*plan* as JSON-ready data (without its clock: the next process has another)."""
    tables = plan.tables
    return {
        "version": VERSION,
        "lane_config": lane_fingerprint(plan.cfg),
        "job_sl": dict(sorted(plan.job_sl.items())),
        "job_cls": dict(sorted(plan.job_cls.items())),
        "job_intensity": {j: _finite(v) for j, v in sorted(plan.job_intensity.items())},
        "tables": None
        if tables is None
        else {
            "sl_to_vl": list(tables.sl_to_vl),
            "vlarb_low": [list(e) for e in tables.vlarb_low],
            "vlarb_high": [list(e) for e in tables.vlarb_high],
            "high_limit": tables.high_limit,
            "lanes": [_lane(ln) for ln in tables.lanes],
            "cost": _finite(tables.cost),
            "target_ratio": _finite(tables.target_ratio),
            "achieved_ratio": _finite(tables.achieved_ratio),
            "weight_error": _finite(tables.weight_error),
            "setup": tables.setup,
        },
    }


def plan_from_doc(doc: Mapping[str, Any] | None, cfg: LaneConfig) -> Plan | None:
    """The plan :func:`plan_to_doc` wrote, for lanes *cfg*; None when there is none, it was
    made with another lane configuration, or it does not read back whole.

    Its ``changed_s`` is minus infinity: the new process's clock has not seen it change,
    so ``lanes.min_interval_s`` does not hold back the first change after a restart.
    """
    if not doc or doc.get("version") != VERSION or doc.get("lane_config") != lane_fingerprint(cfg):
        return None
    try:
        job_sl = {str(j): int(sl) for j, sl in doc["job_sl"].items()}
        job_cls = {str(j): as_class(c) for j, c in doc["job_cls"].items()}
        job_int = {str(j): float(v) for j, v in doc["job_intensity"].items()}
        tables = None if doc["tables"] is None else _tables(doc["tables"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if set(job_sl) != set(job_cls) or set(job_sl) != set(job_int):
        return None
    if any(not 0 <= sl < NUM_SLS for sl in job_sl.values()):
        return None
    return Plan(job_sl, tables, job_cls, job_int, {}, -math.inf, cfg)


def _tables(doc: Mapping[str, Any]) -> Tables:
    sl_to_vl = tuple(int(vl) for vl in doc["sl_to_vl"])
    if len(sl_to_vl) != NUM_SLS:
        raise ValueError(f"sl_to_vl: {len(sl_to_vl)} entries")
    lanes = tuple(
        Lane(
            int(vl),
            tuple(int(s) for s in sls),
            float(intensity),
            float(load),
            None if rank is None else int(rank),
            None if target is None else float(target),
            int(packets),
        )
        for vl, sls, intensity, load, rank, target, packets in doc["lanes"]
    )
    return Tables(
        sl_to_vl,
        tuple((int(vl), int(w)) for vl, w in doc["vlarb_low"]),
        tuple((int(vl), int(w)) for vl, w in doc["vlarb_high"]),
        int(doc["high_limit"]),
        lanes,
        float(doc["cost"]),
        float(doc["target_ratio"]),
        float(doc["achieved_ratio"]),
        float(doc["weight_error"]),
        str(doc.get("setup", LAW)),  # absent in files of ibqos <= 0.3.0: the law
    )


def _lane(ln: Lane) -> list[Any]:
    target = None if ln.target is None else _finite(ln.target)
    return [
        ln.vl,
        list(ln.sls),
        _finite(ln.intensity),
        _finite(ln.load),
        ln.rank,
        target,
        ln.packets,
    ]


def _finite(value: float) -> float:
    """The state file is strict JSON (no NaN or infinity): a figure not known is kept as 0."""
    return value if math.isfinite(value) else 0.0
