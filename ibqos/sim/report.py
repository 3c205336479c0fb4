"""What ``ibqos simulate`` prints, and the plan files it reads.

The measure of a policy is S, the node-weighted mean slowdown of the jobs
(:attr:`~ibqos.sim.evaluate.Outcome.slowdown`), and its gain over one-vl the share of
one-vl's excess slowdown it removes (:meth:`~ibqos.sim.evaluate.Outcome.gain`); when
one-vl slows nobody there is no gain to make, and the gain is a dash (JSON null).  The
worst job's slowdown, the total contention, the node-time wasted and E (one-vl's total
contention over the policy's; a dash when the policy has none) are printed beside it.

JSON (one policy): ``policy``, ``model``, ``buffer_packets`` (the model's switch input
buffers per VL, MTU packets; 0: none), ``plan_buffer_packets`` (for ibqos and optimal, the
buffers of the fluid runs they planned with; else null), ``iterations``, ``jobs`` (``id``,
``nodes``, ``sl``, ``vl``, ``t_alone_s``, ``t_sharing_s``, ``contention_s``,
``slowdown``), ``slowdown`` (S), ``worst_slowdown``, ``objective`` (what ``optimal``
judged by), ``gain`` (over ``baseline``, the one-vl policy, by the objective; null when
the baseline has no excess), ``bound`` (true: optimal's search stopped at its limit, the
setup is the best known, not the optimum), ``total_contention_s``, ``node_time_wasted_s``,
``efficiency`` (E against ``baseline``; null when the policy has no contention),
``setup`` (``sl2vl``, ``vlarb_low``, ``vlarb_high``, ``high_limit``, ``mtu``). Several
policies: ``{"results": [...]}`` in the order asked.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ibqos.config.lanes import NUM_SLS
from ibqos.errors import SimError
from ibqos.sim.evaluate import Outcome
from ibqos.sim.qos import Arbitration

FORMATS = ("table", "json")
BASELINE = "one-vl"
#: an excess slowdown below this is none (round-off)
EXCESS_EPS = 1e-9


def to_json(outcome: Outcome, baseline: Outcome, objective: str = "node-time") -> dict[str, Any]:
    """One outcome as the documented JSON object."""
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
                "slowdown": j.slowdown,
            }
            for j in outcome.jobs
        ],
        "slowdown": outcome.slowdown,
        "worst_slowdown": outcome.worst_slowdown,
        "objective": objective,
        "gain": gain_of(outcome, baseline, objective),
        "bound": outcome.bound,
        "total_contention_s": _clean(outcome.total_contention_s),
        "node_time_wasted_s": _clean(outcome.node_time_wasted_s),
        "efficiency": efficiency_of(outcome, baseline),
        "baseline": BASELINE,
        "setup": {
            "sl2vl": list(arb.sl_to_vl),
            "vlarb_low": [list(e) for e in arb.vlarb_low],
            "vlarb_high": [list(e) for e in arb.vlarb_high],
            "high_limit": arb.high_limit,
            "mtu": arb.mtu,
        },
    }


def gain_of(outcome: Outcome, baseline: Outcome, objective: str = "node-time") -> float | None:
    """*outcome*'s gain over *baseline* by *objective* (the share of its excess removed);
    None when the baseline has no excess to remove (0 against 0 is no gain)."""
    if baseline.measure(objective) - 1.0 <= EXCESS_EPS:
        return None
    return outcome.gain(baseline, objective)


def efficiency_of(outcome: Outcome, baseline: Outcome) -> float | None:
    """E, *baseline*'s total contention over *outcome*'s; None when *outcome* has none
    (round-off below a nanosecond is none): no ratio to print."""
    mine = _clean(outcome.total_contention_s)
    if mine <= 0:
        return None
    return _clean(baseline.total_contention_s) / mine


def _text(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _gain_text(g: float | None) -> str:
    return "-" if g is None else f"{g:.0%}"


def render(
    outcomes: Sequence[Outcome], baseline: Outcome, fmt: str, objective: str = "node-time"
) -> str:
    """The outcomes as a table (per job, then S and totals) or JSON; *objective*: what
    the gain and ``optimal`` judge by."""
    if fmt == "json":
        docs = [to_json(o, baseline, objective) for o in outcomes]
        body: Any = docs[0] if len(docs) == 1 else {"results": docs}
        return json.dumps(body, indent=2) + "\n"
    by = "S" if objective == "node-time" else "worst"
    lines: list[str] = []
    for o in outcomes:
        how = f"{o.model} model, {buffers_text(o.buffer_packets)}"
        if o.plan_buffer_packets is not None and o.model != "fluid":
            how += f"; planned with the fluid model, {buffers_text(o.plan_buffer_packets)}"
        lines.append(f"policy {_name(o)} ({how}, {o.iterations} iterations)")
        lines.append(f"  setup: {o.setup.describe()}")
        lines.append(
            f"  {'job':<12} {'nodes':>5} {'SL':>3} {'VL':>3} {'T_alone s':>11}"
            f" {'T_sharing s':>12} {'slowdown':>9} {'contention s':>13}"
        )
        for j in o.jobs:
            lines.append(
                f"  {j.id:<12} {j.nodes:>5} {j.sl:>3} {j.vl:>3} {j.t_alone_s:>11.6f}"
                f" {j.t_sharing_s:>12.6f} {j.slowdown:>9.3f} {_clean(j.contention_s):>13.6f}"
            )
        e = _text(efficiency_of(o, baseline), ".2f")
        lines.append(
            f"  S {o.slowdown:.3f}, worst job {o.worst_slowdown:.3f}, gain over {BASELINE}"
            f" by {by} {_gain_text(gain_of(o, baseline, objective))}; beside it: total"
            f" contention {_clean(o.total_contention_s):.6f} s, node-time wasted"
            f" {_clean(o.node_time_wasted_s):.6f} node-s, E {e}"
        )
        lines.append("")
    if len(outcomes) > 1:
        w = max(10, *(len(_name(o)) for o in outcomes))  # the names line up
        lines.append(
            f"{'policy':<{w}} {'S':>6} {'worst':>6} {'gain':>5}"
            f" {'contention s':>13} {'node-s wasted':>14} {'E':>6}"
        )
        for o in outcomes:
            lines.append(
                f"{_name(o):<{w}} {o.slowdown:>6.3f} {o.worst_slowdown:>6.3f}"
                f" {_gain_text(gain_of(o, baseline, objective)):>5}"
                f" {_clean(o.total_contention_s):>13.6f} {_clean(o.node_time_wasted_s):>14.6f}"
                f" {_text(efficiency_of(o, baseline), '.2f'):>6}"
            )
        lines.append(
            f"S: node-weighted mean slowdown; gain: share of {BASELINE}'s excess"
            f" {by} - 1 removed; contention and E (its total over the policy's) beside it"
        )
    return "\n".join(lines).rstrip("\n") + "\n"


def _name(o: Outcome) -> str:
    """The policy's name, marked when its setup is a search's bound."""
    return f"{o.policy} (bound)" if o.bound else o.policy


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
