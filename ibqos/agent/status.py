"""``ibqos status``: the agent's saved state as a user reads it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ibqos.agent.state import AgentState
from ibqos.opensm.hold import HOLD_FILE, load_hold
from ibqos.plan.output import align, pct_text


def render_status(state: AgentState, state_dir: Path) -> str:
    """``ibqos status``: when the agent last wrote its state, the last apply, the plan
    (*state* is one the agent wrote: ``updated_s`` set)."""
    when = datetime.fromtimestamp(state.updated_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [f"state {state_dir}, written {when}"]
    if state.mode == "observe":  # the plan below was only shown, never written
        lines.append(
            f"mode: observe (the plan below is proposed, not in force;"
            f" diff: {state_dir / 'observe' / 'proposed.diff'})"
        )
    else:
        lines.append(f"mode: {state.mode}")
    apply = state.last_apply
    lines.append(f"last apply: {apply['summary'] if apply else 'none yet'}")
    if state.routes is not None:
        lines.append(routes_line(state.routes))
    hold = load_hold(state_dir / HOLD_FILE)
    if hold is not None and not hold.released():
        since = datetime.fromtimestamp(hold.since_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        lines.append(
            f"HELD since {since}: {hold.reason}; ibqos writes nothing to OpenSM until"
            f" {hold.until()}"
        )
    plan = state.plan or {}
    jobs = plan.get("jobs", [])
    rows = [
        [
            str(j["id"]),
            j.get("name") or "-",
            pct_text(j.get("intensity")),
            str(j["class"]),
            str(j["sl"]),
            "-" if j.get("vl") is None else str(j["vl"]),
        ]
        for j in jobs
    ]
    lines += align(["JOB", "NAME", "INTENSITY", "CLASS", "SL", "VL"], rows) if rows else []
    lanes = [
        [
            str(lane["vl"]),
            str(lane["weight"]),
            ",".join(map(str, lane["sls"])) or "-",
            ",".join(lane["jobs"]) or "-",
        ]
        for lane in plan.get("lanes", [])
    ]
    if lanes:
        lines += ["", *align(["VL", "WEIGHT", "SLS", "JOBS"], lanes)]
    lines += _tuning_lines(state.tuning)
    return "\n".join(lines) + "\n"


def routes_line(doc: Mapping[str, Any]) -> str:
    """The forwarding tables attribution and tuning use: where from, how many, how old."""
    source = doc.get("source") or "none"
    if source == "none":
        what = "none (attribution splits by subtree, tuning predicts over D-mod-K)"
        if doc.get("mode") == "off":
            what += ", fabric.routes is off"
    else:
        where = f" {doc['path']}" if doc.get("path") else ""
        what = f"{source}{where}, {doc.get('switches', 0)} switches"
        if doc.get("read_s"):
            when = datetime.fromtimestamp(doc["read_s"], UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            what += f", read {when}"
    if doc.get("problem"):
        what += f"; newer tables refused: {doc['problem']}"
    return f"routes: {what}"


def _tuning_lines(doc: Mapping[str, Any] | None) -> list[str]:
    """The tuning state: what it does, the setup it wants, each candidate's scores."""
    if not doc:
        return []
    trial = f", trial of {doc['trial']}" if doc.get("trial") else ""
    head = (
        f"tuning: {doc.get('state')}{trial}; setup {doc.get('wanted')};"
        f" {doc.get('rounds', 0)} rounds, {doc.get('reloads', 0)} reloads"
        f" ({doc.get('reloads_last_hour', 0)} in the last hour)"
    )
    lines = ["", head]
    if doc.get("decision"):
        lines.append(f"last round: {doc['decision']}")
    if doc.get("refinements"):  # setups near the kept one tried after the round decided
        lines.append(f"refinements since the round: {doc['refinements']}")
    if err := doc.get("prediction_error"):  # ibqos.sim.learn.Learnt, when phases were fitted
        lines.append(
            f"prediction error: {err['before']:.1%} with the phases assumed,"
            f" {err['after']:.1%} fitted to {err.get('trials', '?')} trials"
        )
    predicted = doc.get("predicted") or {}
    measured = doc.get("measured") or {}
    names = list(dict.fromkeys([*predicted, *measured]))

    def text(value: object) -> str:
        if value is None:
            return "-"
        return f"{value:.3f}" if isinstance(value, int | float) else str(value)

    rows = [
        [
            name,
            text(predicted.get(name)),
            "ended at floor"
            if name in measured and measured[name] is None
            else text(measured.get(name)),
        ]
        for name in names
    ]
    if rows:
        lines += align(["SETUP", "PREDICTED", "MEASURED"], rows)
    return lines
