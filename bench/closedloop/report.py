"""The closed-loop benchmark's figures: per-run slowdowns, the Markdown table, the targets,
and an SVG chart (hand-written SVG, as :mod:`bench.sim.eval` writes its charts)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bench.closedloop.run import Trace
from bench.machine import machine as _machine
from bench.report import table

POLICIES = ("one-vl", "equal", "ibqos-fixed", "adaptive")
FIXED = ("one-vl", "equal", "ibqos-fixed")
#: the columns of the table of every run
COLUMNS = (
    "mix",
    "policy",
    "slowdown settled",
    "slowdown whole run",
    "per job (settled)",
    "OpenSM reloads",
    "tuning reloads (cap/h)",
    "settled after",
    "kept",
)
COLOURS = {"one-vl": "#9e9e9e", "equal": "#4e79a7", "ibqos-fixed": "#f28e2b", "adaptive": "#59a14f"}


def machine() -> str:
    return _machine()


def slowdown(
    rates: Mapping[str, float], alone: Mapping[str, float], nodes: Mapping[str, int]
) -> tuple[float, dict[str, float]]:
    """The node-weighted total slowdown and each job's (alone rate / rate; 1.0 = as alone)."""
    per = {j: alone[j] / rates[j] if rates.get(j, 0) > 0 else math.inf for j in alone}
    weight = sum(nodes[j] for j in per)
    return sum(nodes[j] * s for j, s in per.items()) / weight, per


def summarize(
    trace: Trace, alone: Mapping[str, float], nodes: Mapping[str, int], window_s: float
) -> dict[str, Any]:
    """One run's figures (plain data, for the JSON file)."""
    end = trace.points[-1].model_s
    settled, per = slowdown(trace.rates(end - window_s), alone, nodes)
    whole, _ = slowdown(trace.rates(trace.start_model_s), alone, nodes)
    m = trace.metrics
    window = [p for p in trace.points if p.model_s >= end - window_s]
    return {
        "duration_s": end - trace.start_model_s,
        "settled": settled,
        "whole": whole,
        "per_job": per,
        "opensm_reloads": m.get("ibqos_opensm_reloads_total"),
        "tuning_reloads": m.get("ibqos_tuning_reloads_total"),
        "tuning_reloads_last_hour": m.get("ibqos_tuning_reloads_last_hour"),
        "settle_s": None
        if trace.settled_model_s is None
        else trace.settled_model_s - trace.start_model_s,
        "kept": trace.tuning.get("wanted"),
        "decision": trace.tuning.get("decision", ""),
        "measured": trace.tuning.get("measured", {}),
        "rounds": trace.tuning.get("rounds"),
        # the agent's own account: its plan, apply and tuning lines
        "log": [
            line
            for line in trace.log.splitlines()
            if any(k in line for k in ("tuning:", "plan:", "OpenSM:", "ERROR", "WARNING"))
        ],
        # tuning left "settled" within the settled window (a drift started a round)
        "retuned": any(p.tuning.get("state") not in (None, "settled") for p in window)
        if trace.tuning
        else False,
    }


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def markdown(doc: Mapping[str, Any]) -> str:
    """The table of every run, then the targets per mix."""
    where = doc.get("fabric") or f"XGFT {doc['xgft']}"  # results saved before "fabric"
    lines = [
        f"ibqos {doc['version']}, {where}, settled window {doc['window_s']:g} s;"
        f" {doc['machine']}; load average {doc['load'][0][0]:.1f} at the start,"
        f" {doc['load'][1][0]:.1f} at the end; {doc['wall_s'] / 60:.0f} min in all.",
        "",
    ]
    rows = []
    for mix in doc["mixes"]:
        for name in POLICIES:
            r = mix["runs"].get(name)
            if r is None:
                continue
            per = " ".join(f"{j} {s:.2f}" for j, s in r["per_job"].items())
            tuning = "-"
            if name == "adaptive":
                tuning = f"{_num(r['tuning_reloads'])} ({doc['max_reloads_per_hour']})"
            settle = "-" if name != "adaptive" else _num(r["settle_s"], "{:.0f} s")
            if name == "adaptive" and r["settle_s"] is None:
                settle = "not settled"
            kept = r["kept"] or "-"
            if r.get("retuned"):
                kept += " (re-tuned in the window)"
            rows.append(
                [
                    mix["mix"],
                    name,
                    f"{r['settled']:.3f}",
                    f"{r['whole']:.3f}",
                    per,
                    _num(r["opensm_reloads"]),
                    tuning,
                    settle,
                    kept,
                ]
            )
    lines += table(COLUMNS, rows)
    lines += ["", "Targets:", ""]
    for mix in doc["mixes"]:
        lines.append(f"- {mix['mix']}: " + "; ".join(targets(mix, doc["max_reloads_per_hour"])))
    lines += ["", "Tuning's decisions:", ""]
    for mix in doc["mixes"]:
        r = mix["runs"].get("adaptive")
        if r is not None:
            lines.append(f"- {mix['mix']}: {r['decision'] or '(none)'}")
    return "\n".join(lines)


def targets(mix: Mapping[str, Any], cap: int) -> list[str]:
    """The three targets of a mix, each met or not, with the numbers."""
    runs = mix["runs"]
    a = runs.get("adaptive")
    if a is None:
        return ["no adaptive run"]
    fixed = {n: runs[n] for n in FIXED if n in runs}
    out = []
    if fixed:
        best = min(fixed, key=lambda n: fixed[n]["settled"])
        gap = a["settled"] / fixed[best]["settled"] - 1.0
        ok = "met" if gap <= 0.05 else "NOT met"
        out.append(
            f"settled {a['settled']:.3f} vs best fixed {best} {fixed[best]['settled']:.3f}"
            f" ({gap:+.1%}; within 5 %: {ok})"
        )
    for base in ("one-vl", "equal"):
        if base in runs:
            ok = "met" if a["whole"] < runs[base]["whole"] else "NOT met"
            out.append(f"whole run {a['whole']:.3f} vs {base} {runs[base]['whole']:.3f} ({ok})")
    reloads = a["tuning_reloads_last_hour"]
    ok = "met" if reloads is not None and reloads <= cap else "NOT met"
    out.append(f"tuning reloads {_num(reloads)} in the run's hour, cap {cap} ({ok})")
    return out


def svg(doc: Mapping[str, Any]) -> str:
    """Bars of each mix's total slowdown per policy: settled (solid) and whole run (light)."""
    mixes = doc["mixes"]
    bar, gap, group_gap, left, top, height = 18, 4, 30, 60, 40, 220
    n = len(POLICIES)
    width = left + len(mixes) * (n * (2 * bar + gap) + group_gap) + 20
    values = [
        r[k]
        for m in mixes
        for r in m["runs"].values()
        for k in ("settled", "whole")
        if math.isfinite(r[k])
    ]
    top_value = max(1.0, max(values, default=1.0))
    top_value = math.ceil(top_value * 10) / 10

    def y(v: float) -> float:
        return top + height - (min(v, top_value) - 1.0) / (top_value - 1.0 or 1.0) * height

    body = [
        f'<text x="{left}" y="20" font-size="13">Total slowdown (node-weighted, 1.0 = as alone),'
        f" ibqos {doc['version']}: settled (solid) and whole run (light)</text>"
    ]
    steps = 5
    for k in range(steps + 1):
        v = 1.0 + (top_value - 1.0) * k / steps
        body.append(
            f'<line x1="{left}" x2="{width - 10}" y1="{y(v):.1f}" y2="{y(v):.1f}"'
            ' stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end">'
            f"{v:.2f}</text>"
        )
    x = left + 10
    for m in mixes:
        x0 = x
        for name in POLICIES:
            r = m["runs"].get(name)
            if r is not None:
                for k, (key, opacity) in enumerate((("settled", 1.0), ("whole", 0.45))):
                    v = r[key] if math.isfinite(r[key]) else top_value
                    body.append(
                        f'<rect x="{x + k * bar}" y="{y(v):.1f}" width="{bar - 1}"'
                        f' height="{top + height - y(v):.1f}" fill="{COLOURS[name]}"'
                        f' fill-opacity="{opacity}"><title>{m["mix"]} {name} {key}'
                        f" {r[key]:.3f}</title></rect>"
                    )
            x += 2 * bar + gap
        body.append(
            f'<text x="{(x0 + x) / 2:.0f}" y="{top + height + 16}" font-size="11"'
            f' text-anchor="middle">{m["mix"]}</text>'
        )
        x += group_gap
    lx = left
    for name in POLICIES:
        body.append(
            f'<rect x="{lx}" y="{top + height + 28}" width="10" height="10"'
            f' fill="{COLOURS[name]}"/><text x="{lx + 14}" y="{top + height + 37}"'
            f' font-size="11">{name}</text>'
        )
        lx += 110
    h = top + height + 50
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}"'
        f' viewBox="0 0 {width} {h}" font-family="sans-serif">\n'
        f'<rect width="{width}" height="{h}" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n"
    )
