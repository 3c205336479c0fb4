"""What ``ibqos simulate`` prints, and the plan files it reads.

JSON (one policy): ``policy``, ``model``, ``buffer_packets`` (the model's switch input
buffers per VL, MTU packets; 0: none), ``plan_buffer_packets`` (for ibqos and optimal, the
buffers of the fluid runs they planned with; else null), ``iterations``, ``jobs`` (``id``,
``nodes``, ``sl``, ``vl``, ``t_alone_s``, ``t_sharing_s``, ``contention_s``),
``total_contention_s``, ``node_time_wasted_s``, ``efficiency`` (E against ``baseline``,
the one-vl policy; null when it is infinite), ``setup`` (``sl2vl``, ``vlarb_low``,
``vlarb_high``, ``high_limit``, ``mtu``). Several policies: ``{"results": [...]}`` in the
order asked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ibqos.config.lanes import NUM_SLS
from ibqos.errors import SimError
from ibqos.sim.evaluate import Outcome
from ibqos.sim.qos import Arbitration

FORMATS = ("table", "json")
BASELINE = "one-vl"


def to_json(outcome: Outcome, baseline: Outcome) -> dict[str, Any]:
    """One outcome as the documented JSON object."""
    eff = outcome.efficiency(baseline)
    arb = outcome.setup
    return {
        "policy": outcome.policy,
        "model": outcome.model,
        "buffer_packets": outcome.buffer_packets,
        "plan_buffer_packets": outcome.plan_buffer_packets,
        "iterations": outcome.iterations,
        "jobs": [
            {
                "id": j.id,
                "nodes": j.nodes,
                "sl": j.sl,
                "vl": j.vl,
                "t_alone_s": j.t_alone_s,
                "t_sharing_s": j.t_sharing_s,
                "contention_s": _clean(j.contention_s),
            }
            for j in outcome.jobs
        ],
        "total_contention_s": _clean(outcome.total_contention_s),
        "node_time_wasted_s": _clean(outcome.node_time_wasted_s),
        "efficiency": None if math.isinf(eff) else eff,
        "baseline": BASELINE,
        "setup": {
            "sl2vl": list(arb.sl_to_vl),
            "vlarb_low": [list(e) for e in arb.vlarb_low],
            "vlarb_high": [list(e) for e in arb.vlarb_high],
            "high_limit": arb.high_limit,
            "mtu": arb.mtu,
        },
    }


def render(outcomes: Sequence[Outcome], baseline: Outcome, fmt: str) -> str:
    """The outcomes as a table (per job, then totals) or JSON."""
    if fmt == "json":
        docs = [to_json(o, baseline) for o in outcomes]
        body: Any = docs[0] if len(docs) == 1 else {"results": docs}
        return json.dumps(body, indent=2) + "\n"
    lines: list[str] = []
    for o in outcomes:
        how = f"{o.model} model, {buffers_text(o.buffer_packets)}"
        if o.plan_buffer_packets is not None and o.model != "fluid":
            how += f"; planned with the fluid model, {buffers_text(o.plan_buffer_packets)}"
        lines.append(f"policy {o.policy} ({how}, {o.iterations} iterations)")
        lines.append(f"  setup: {o.setup.describe()}")
        lines.append(
            f"  {'job':<12} {'nodes':>5} {'SL':>3} {'VL':>3} {'T_alone s':>11}"
            f" {'T_sharing s':>12} {'contention s':>13}"
        )
        for j in o.jobs:
            lines.append(
                f"  {j.id:<12} {j.nodes:>5} {j.sl:>3} {j.vl:>3} {j.t_alone_s:>11.6f}"
                f" {j.t_sharing_s:>12.6f} {_clean(j.contention_s):>13.6f}"
            )
        eff = o.efficiency(baseline)
        shown = "inf" if math.isinf(eff) else f"{eff:.2f}"
        lines.append(
            f"  total contention {_clean(o.total_contention_s):.6f} s, node-time wasted"
            f" {_clean(o.node_time_wasted_s):.6f} node-s, E vs {BASELINE} {shown}"
        )
        lines.append("")
    if len(outcomes) > 1:
        w = max(10, *(len(o.policy) for o in outcomes))  # the names line up
        lines.append(f"{'policy':<{w}} {'total contention s':>19} {'node-s wasted':>14} {'E':>7}")
        for o in outcomes:
            eff = o.efficiency(baseline)
            lines.append(
                f"{o.policy:<{w}} {_clean(o.total_contention_s):>19.6f}"
                f" {_clean(o.node_time_wasted_s):>14.6f}"
                f" {'inf' if math.isinf(eff) else f'{eff:.2f}':>7}"
            )
    return "\n".join(lines).rstrip("\n") + "\n"


def buffers_text(packets: int) -> str:
    """A model's switch buffers (MTU packets per VL per input), as the reports say them."""
    return f"{packets} packets of buffer per VL" if packets else "no buffers"


def _clean(x: float) -> float:
    """Round-off below a nanosecond is no contention (and no negative zero)."""
    return 0.0 if abs(x) < 1e-9 else x


def load_plan(path: Path) -> Arbitration:
    """A QoS setup from ``ibqos plan --format json`` output (docs/plan.md).

    Raises:
        SimError: the file is unreadable or not such a plan (naming the file and the key).
    """
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise SimError(f"--plan {path}: {err}") from err
    return parse_plan(doc, f"--plan {path}", f"plan {path.name}")


def parse_plan(doc: object, where: str, name: str) -> Arbitration:
    """A QoS setup from a plan's JSON object (``ibqos plan``, or the agent's state).

    Raises:
        SimError: not such a plan (naming *where* and the key).
    """
    if not isinstance(doc, dict):
        raise SimError(f"{where}: expected the JSON object of `ibqos plan --format json`")
    tables = doc.get("tables")
    if not isinstance(tables, dict):
        raise SimError(f"{where}: tables: missing (the routing engine owns SLs?)")
    try:
        sl2vl = tuple(int(v) for v in tables["sl2vl"])
        low = tuple((int(e[0]), int(e[1])) for e in tables["vlarb_low"])
        high = tuple((int(e[0]), int(e[1])) for e in tables.get("vlarb_high", []))
        limit = int(tables.get("high_limit", 0))
        job_sl = {str(j["id"]): int(j["sl"]) for j in doc.get("jobs", [])}
        mtu = int(doc.get("lane_config", {}).get("mtu", 2048))
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise SimError(f"{where}: tables or jobs malformed: {err!r}") from err
    if len(sl2vl) != NUM_SLS:
        raise SimError(f"{where}: tables.sl2vl: expected {NUM_SLS} VLs, got {len(sl2vl)}")
    return Arbitration(job_sl, sl2vl, low, high, limit, mtu, name=name)
