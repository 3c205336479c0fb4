"""``ibqos plan`` output: a decision as aligned tables or as the documented JSON object.

The JSON is a stable interface (``docs/plan.md``): keys are only ever added.  Levels are
JSON object keys, so they are strings ("0", "1", ...); unknown numbers are null.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from ibqos.plan.setups import LAW

if TYPE_CHECKING:
    from ibqos.plan.planner import Tables
    from ibqos.plan.report import Decision, JobReport

FORMATS = ("table", "json")
#: version of the JSON layout; raised only when a key changes meaning or goes away
SCHEMA = 1


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def lane_weights(tables: Tables) -> dict[int, int]:
    """VL -> its VLArbLow weight per round, in 64-byte credits (sum over its entries)."""
    out: dict[int, int] = {}
    for vl, weight in tables.vlarb_low:
        out[vl] = out.get(vl, 0) + weight
    return out


def _jobs_by_sl(decision: Decision) -> dict[int, list[str]]:
    """SL -> ids of the jobs on it, in job order."""
    out: dict[int, list[str]] = {}
    for job in decision.jobs:
        out.setdefault(job.sl, []).append(job.id)
    return out


def to_json(decision: Decision) -> dict[str, Any]:
    """The decision as the documented JSON object."""
    current = decision.plan
    tables = current.tables
    jobs_by_sl = _jobs_by_sl(decision)
    lanes: list[dict[str, Any]] = []
    if tables is not None:
        weights = lane_weights(tables)
        for lane in sorted(tables.lanes, key=lambda lane: lane.vl):
            lanes.append(
                {
                    "vl": lane.vl,
                    "weight": weights.get(lane.vl, 0),
                    "packets": lane.packets,
                    "target": lane.target,
                    "rank": lane.rank,
                    "sls": list(lane.sls),
                    "jobs": [j for sl in lane.sls for j in jobs_by_sl.get(sl, [])],
                    "intensity": lane.intensity,
                    "load": lane.load,
                }
            )
    cfg = current.cfg
    return {
        "schema": SCHEMA,
        "time_s": decision.now_s,
        "replace": decision.result.replace,
        "reasons": list(decision.result.reasons),
        "warnings": list(decision.warnings),
        "jobs": [_job(job) for job in decision.jobs],
        "lanes": lanes,
        "tables": None
        if tables is None
        else {
            "sl2vl": list(tables.sl_to_vl),
            "vlarb_low": [list(e) for e in tables.vlarb_low],
            "vlarb_high": [list(e) for e in tables.vlarb_high],
            "high_limit": tables.high_limit,
            "cost": tables.cost,
            "target_ratio": tables.target_ratio,
            "achieved_ratio": tables.achieved_ratio,
            "weight_error": tables.weight_error,
            "setup": tables.setup,
        },
        "unattributed": {str(k): _num(v) for k, v in sorted(decision.unattributed.items())},
        "attribution": {
            "method": "routes" if decision.residual else "subtree",
            "residual": {str(k): _num(v) for k, v in sorted(decision.residual.items())},
        },
        "lane_config": {
            "data_vls": cfg.data_vls,
            "vlarb_low_cap": cfg.vlarb_low_cap,
            "vlarb_high_cap": cfg.vlarb_high_cap,
            "mtu": cfg.mtu,
            "reserved_sls": list(cfg.reserved_sls),
            "reserved_vls": list(cfg.reserved_vls),
            "default_vl": cfg.default_vl,
            "routing_engine": cfg.routing_engine,
            "weight_law": cfg.weight_law,
            "weight_ratio": cfg.weight_ratio,
        },
    }


def _job(job: JobReport) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "user": job.user,
        "nodes": list(job.nodes),
        "missing_nodes": list(job.missing),
        "shared_nodes": list(job.shared),
        "ports": job.ports,
        "levels": {
            str(level): {
                "bytes_per_s": _num(f.bytes_per_s),
                "avail_bytes_per_s": f.avail_bytes_per_s,
                "util": _num(f.util),
            }
            for level, f in sorted(job.levels.items())
        },
        "intensity": _num(job.intensity),
        "level": job.level,
        "class": job.cls,
        "measured_class": job.measured_class,
        "expected_class": job.expected,
        "sl": job.sl,
        "vl": job.vl,
        "measured_share": _num(job.measured_share),
        "profile": job.profile,
        "prior": job.prior,
    }


def render(decision: Decision, fmt: str, *, from_scratch: bool = False) -> str:
    """The decision as text: "table" (two aligned tables and notes) or "json".

    *from_scratch*: the decision was made without the plan in force (``ibqos plan``): the
    table then says that nothing was written instead of whether the plan in force would
    change (the JSON keeps ``replace`` and ``reasons`` as they are).
    """
    if fmt == "json":
        return json.dumps(to_json(decision), indent=1, allow_nan=False) + "\n"
    return _tables_text(decision, from_scratch)


def rate_text(value: float | None) -> str:
    """Bytes per second for people (``12.50 GB/s``); ``-`` when not known."""
    if value is None or not math.isfinite(value):
        return "-"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B/s"


def pct_text(value: float | None) -> str:
    """A fraction as a percentage (``10.7%``); ``-`` when not known."""
    return "-" if value is None or not math.isfinite(value) else f"{100 * value:.1f}%"


def align(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The header and rows as lines of left-aligned columns two spaces apart."""
    table = [list(header), *(list(r) for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]


def source_text(job: JobReport) -> str:
    """Where the job's figures come from: ``measured`` (counters of its own: its hosts,
    subtrees it has alone), ``estimated`` (its part of counters it shares with other jobs,
    split by pattern or gravity), or the share measured when it is some of each."""
    share = round(job.measured_share, 3)
    if share >= 1.0:
        return "measured"
    if share <= 0.0:
        return "estimated"
    return f"{pct_text(share)} measured"


#: what the SOURCE column means
SOURCE_NOTE = (
    "SOURCE: measured from counters of the job's own (its hosts, subtrees it has alone), or"
    " estimated: its part of counters it shares with other jobs, split by pattern or gravity"
)


def weights_text(tables: Tables, vlarb_low_cap: int) -> str:
    """The note under the lanes: the unit of WEIGHT, and the spread of the weights between
    the lightest and the most intense job lane next to what the weight law asks."""
    text = "WEIGHT: 64-byte credits per arbitration round"
    if sum(lane.rank is not None for lane in tables.lanes) < 2:
        return text
    got, want = tables.achieved_ratio, tables.target_ratio
    text += f"; the lightest lane weighs {got:.3g}x the most intense one"
    asks = "the weight law asks" if tables.setup == LAW else f"setup {tables.setup} asks"
    if math.isclose(got, want, rel_tol=1e-3):
        return text + f", as {asks}"
    return text + f" ({asks} {want:.3g}x; {vlarb_low_cap} VLArb entries encode no closer)"


def _tables_text(decision: Decision, from_scratch: bool) -> str:
    current = decision.plan
    levels = sorted({lvl for job in decision.jobs for lvl in job.levels})
    upper = [
        lvl for lvl in levels if any(j.levels[lvl].avail_bytes_per_s > 0 for j in decision.jobs)
    ]
    header = ["JOB", "NAME", "NODES", *(f"L{lvl} rate/util" for lvl in upper)]
    header += ["INTENSITY", "CLASS", "SL", "VL", "SOURCE"]
    rows = []
    for job in decision.jobs:
        nodes = str(NodeSet.fromlist(job.nodes, resolver=RESOLVER_NOGROUP))
        cells = [job.id, job.name or "-", nodes]
        for lvl in upper:
            f = job.levels[lvl]
            cells.append(f"{rate_text(f.bytes_per_s)} {pct_text(f.util)}")
        cells += [
            pct_text(job.intensity),
            job.cls + ("" if job.measured_class in (None, job.cls) else f" ({job.measured_class})"),
            str(job.sl),
            "-" if job.vl is None else str(job.vl),
            source_text(job),
        ]
        rows.append(cells)
    lines = [*align(header, rows), SOURCE_NOTE] if rows else ["no running jobs on the fabric"]
    lines += [
        f"job {job.id}: expected class from profile {job.prior}"
        for job in decision.jobs
        if job.prior
    ]
    lines += [
        f"job {job.id}: shares {NodeSet.fromlist(job.shared, resolver=RESOLVER_NOGROUP)} with"
        " other jobs: its part of their traffic is estimated"
        for job in decision.jobs
        if job.shared
    ]
    tables = current.tables
    if tables is not None:
        weights = lane_weights(tables)
        jobs_by_sl = _jobs_by_sl(decision)
        lane_rows = [
            [
                str(lane.vl),
                str(weights.get(lane.vl, 0)),
                ",".join(map(str, lane.sls)) or "-",
                ",".join(j for sl in lane.sls for j in jobs_by_sl.get(sl, [])) or "-",
                pct_text(lane.intensity),
            ]
            for lane in sorted(tables.lanes, key=lambda lane: lane.vl)
        ]
        lines += ["", *align(["VL", "WEIGHT", "SLS", "JOBS", "INTENSITY"], lane_rows)]
        lines.append(weights_text(tables, current.cfg.vlarb_low_cap))
    why = "; ".join(decision.result.reasons)
    if from_scratch:
        lines.append(
            "nothing written: planned from scratch, without the agent's plan in force"
            " (ibqos run --dry-run --once shows what the agent would change)"
        )
    elif decision.result.replace:
        lines.append(f"plan: replaces the plan in force ({why})")
    else:
        lines.append(f"plan: the plan in force stays ({why})")
    lines += [f"warning: {w}" for w in decision.warnings]
    return "\n".join(lines) + "\n"
