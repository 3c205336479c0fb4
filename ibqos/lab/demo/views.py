"""What the demo prints: the lines of each of its views, from what it has read.

Each function takes text or data the demo read (the lab's truth, a CSV sweep, a dry run's
diff, the agent's log and state, smpquery's answers, Prometheus's query results, the lab's
metrics) and returns the lines to print; none reads or writes anything itself.  Rates are
in bytes per second and printed in GB/s (10^9 bytes).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ibqos.lab.agentrun import samples

#: A PromQL instant query: one ``{"metric": {...}, "value": [t, "text"]}`` per series.
Query = Callable[[str], list[dict[str, Any]]]
#: Job id -> the part of its uncontended rate it runs at (1.0: as with the fabric alone).
Shares = dict[str, float]

#: The agent's log line of every sweep, left out of the rounds' log (they are counted).
SWEEP_LINE = "ibqos.collect.loop: sweep:"


def truth_table(truth: Mapping[str, Any]) -> list[str]:
    """GB/s per job at each level of the fabric, as the lab's traffic model keeps them."""
    levels = range(truth["levels"])
    out = [f"{'job':>6} " + " ".join(f"{'level ' + str(level):>9}" for level in levels)]
    for jid, job in sorted(truth["jobs"].items()):
        rates = " ".join(f"{r / 1e9:9.2f}" for r in job["level_bytes_per_s"])
        out.append(f"{jid:>6} {rates}{'' if job['running'] else '  (ended)'}")
    return out


def busiest_ports(csv_text: str, count: int = 5) -> list[str]:
    """The ports of ``ibqos collect --format csv`` that send the most, busiest first."""
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    busy = sorted(rows, key=lambda r: -float(r["xmit_bytes_per_s"] or 0))[:count]
    out = [
        f"{len(rows)} ports read; the busiest:",
        f"{'node':<16} {'port':>4} {'level':>5} {'role':<5} {'xmit GB/s':>10} {'rcv GB/s':>10}",
    ]
    for r in busy:
        x, y = float(r["xmit_bytes_per_s"]) / 1e9, float(r["rcv_bytes_per_s"]) / 1e9
        where = f"{r['node_desc']:<16} {r['port']:>4} {r['level']:>5} {r['role']:<5}"
        out.append(f"{where} {x:10.2f} {y:10.2f}")
    return out


def dry_run_excerpt(text: str) -> list[str]:
    """A dry run's output with the policy diff cut short: it names every port of every
    job, so only the first job's blocks are shown, with their first two port GUIDs."""
    out: list[str] = []
    seen: dict[str, int] = {}
    block: str | None = None
    guids = 0
    for line in text.splitlines():
        body = line[1:].strip() if line.startswith("+") else None
        if body in ("port-group", "qos-level", "qos-match-rule"):
            block = body
            seen[block] = seen.get(block, 0) + 1
        first = block is None or seen[block] == 1
        if first and body is not None and body.startswith("port-guid:"):
            guids += 1
            if guids <= 2:
                out.append(line)
            continue
        if guids > 2:
            out.append(f"+    ... {guids - 2} more port-guid lines: one per port of the job")
        guids = 0
        if first:
            out.append(line)
        if block is not None and body == f"end-{block}":
            if seen[block] == 2:
                out.append(f"+  ... the same {block} block for every other job")
            block = None
    return out


def log_since(lines: Sequence[str]) -> list[str]:
    """The agent's new log lines, without its sweep lines (counted) and the lab's MAD
    shim's (umad2sim); the ``INFO ibqos.`` prefix is dropped."""
    sweeps = sum(SWEEP_LINE in line for line in lines)
    plural = "s" if sweeps != 1 else ""
    out = [f"agent log since the last round ({sweeps} sweep line{plural} left out):"]
    for line in lines:
        if SWEEP_LINE in line or "umad2sim" in line:
            continue
        out.append("   " + line.replace("INFO ibqos.", ""))
    return out


def _weights(pairs: Sequence[tuple[int, int]]) -> dict[int, int]:
    """VL -> its total weight in a VLArb table (a VL may have several entries; a weight
    of 0 is no entry)."""
    out: dict[int, int] = {}
    for vl, w in pairs:
        if w:
            out[vl] = out.get(vl, 0) + w
    return out


def switch_check(
    sl2vl_out: str, vlarb_out: str, state: Mapping[str, Any], policy: str, ended: Sequence[str]
) -> list[str]:
    """What a switch port's SL2VL and VLArb tables say (``smpquery``'s answers), checked
    against the plan in force, and a few facts of the plan worth a look.

    Args:
        sl2vl_out: ``smpquery sl2vl LID PORT``.
        vlarb_out: ``smpquery vlarb LID PORT``.
        state: the agent's ``state.json``.
        policy: OpenSM's ``qos-policy.conf`` (to show an ended job's port-group is gone).
        ended: jobs that ended this round.
    """
    head = next(line for line in sl2vl_out.splitlines() if "SL:" in line)
    row = next(line for line in sl2vl_out.splitlines() if line.startswith("ports: in  2,"))
    out = ["   $ smpquery sl2vl", f"   {head}", f"   {row}"]
    sl2vl = [int(x) for x in row.split(":", 2)[2].split("|") if x.strip()]
    low = [line for line in vlarb_out.splitlines() if line.startswith(("VL", "WEIGHT"))][:2]
    out += ["   $ smpquery vlarb   (low-priority table)", *("   " + line for line in low)]
    vls, weights = ([int(x, 16) for x in re.findall(r"0x[0-9A-Fa-f]+", r)] for r in low)
    vlarb = _weights(list(zip(vls, weights, strict=False)))
    plan = state["plan"]
    tables = plan["tables"]
    want_vlarb = _weights([(vl, w) for vl, w in tables["vlarb_low"]])
    per_vl = "  ".join(f"VL{vl} {w}" for vl, w in sorted(vlarb.items()))
    out.append(f"   = weight per VL (64-byte credits per round): {per_vl}")
    if sl2vl == tables["sl2vl"] and vlarb == want_vlarb:
        out.append("   = the plan in force, exactly (SL2VL and VLArb)")
    else:
        out.append("   ! differs from the plan in force (an apply under way?)")
    out.append("look:")
    out += ["   - " + line for line in _look(state, policy, ended)]
    return out


def _look(state: Mapping[str, Any], policy: str, ended: Sequence[str]) -> list[str]:
    """Facts of the plan in force: shared lanes, the tuning setup, where the high jobs
    are, class changes held, ended jobs gone from the plan."""
    plan = state["plan"]
    jobs = plan["jobs"]
    lanes = {lane["vl"]: lane for lane in plan["lanes"]}
    weight = {vl: lane["weight"] for vl, lane in lanes.items()}
    look = []
    for vl, lane in sorted(lanes.items()):
        if len(lane["jobs"]) > 1:
            sls = ",".join(map(str, lane["sls"]))
            look.append(f"VL{vl} is shared by jobs {', '.join(lane['jobs'])} (SLs {sls})")
    light = [weight[j["vl"]] for j in jobs if j["class"] == "low"]
    tuning = state.get("tuning") or {}
    setup = tuning.get("wanted", "favour-light")
    if setup != "favour-light":  # tuning tries or keeps another setup: not the law's weights
        what = "tries" if tuning.get("state") == "trial" else "keeps"
        look.append(f"tuning {what} setup {setup}: lanes and weights as it says, not the law's")
        light = []
    for j in jobs:
        if j["class"] == "high" and light:
            alone = lanes[j["vl"]]["jobs"] == [j["id"]]
            least = weight[j["vl"]] < min(light)
            look.append(
                f"high job {j['id']} ({j['name']}): {'alone' if alone else 'NOT alone'} on "
                f"VL{j['vl']}, weight {weight[j['vl']]}, "
                f"{'less than' if least else 'NOT less than'} "
                f"any light job's lane ({min(light)}-{max(light)})"
            )
    held = [
        f"{j['id']} {j['class']}->{j['measured_class']}"
        for j in jobs
        if j["class"] != j["measured_class"]
    ]
    if held:
        look.append(f"measured class differs, change held: {', '.join(held)}")
    for jid in ended:
        gone = jid not in state["job_sl"] and f"ibqos_job_{jid}" not in policy
        what = (
            "its SL is free again and its port-group is out of the policy"
            if gone
            else "STILL PLANNED"
        )
        look.append(f"job {jid} ended: {what}")
    return look


def path_record(saquery_out: str) -> list[str]:
    """The slid, dlid, sl and mtu lines of a PathRecord (``saquery PR``)."""
    return [
        "   " + line.strip()
        for line in saquery_out.splitlines()
        if re.match(r"^\s*(slid|dlid|sl|mtu)\.", line)
    ]


def path_sl(saquery_out: str) -> int | None:
    """The SL of a PathRecord (``saquery PR``), None if it has none."""
    m = re.search(r"^\s*sl\.+0x([0-9a-fA-F]+)", saquery_out, re.M)
    return None if m is None else int(m.group(1), 16)


def prometheus_view(query: Query) -> list[str]:
    """What the Lanes and Jobs dashboards show now, from their queries (and the
    recording rules of ``dashboards/ibqos.rules.yml``)."""

    def by(expr: str, label: str) -> dict[int, float]:
        return {int(e["metric"][label]): float(e["value"][1]) for e in query(expr)}

    def first(expr: str) -> int:
        result = query(expr)
        return int(float(result[0]["value"][1])) if result else 0

    util = by('ibqos_lane_utilization_ratio{level="1"}', "vl")
    weight = by("ibqos:lane_weight_share:ratio", "vl")
    jobs = by("ibqos_lane_jobs", "vl")
    if not weight:
        return ["Prometheus: no scrape yet (its first scrape comes ~5 s after it starts)"]
    out = [
        "Prometheus (as the Lanes dashboard shows it): per VL, jobs, weight share, "
        "leaf-uplink utilization"
    ]
    for vl in sorted(weight):
        bar = "#" * round(util.get(vl, 0.0) * 50)
        out.append(
            f"   VL {vl}: {int(jobs.get(vl, 0))} jobs, weight {weight[vl]:5.1%}, "
            f"uplinks {util.get(vl, 0.0):6.1%} {bar}"
        )
    level = by("ibqos:level_utilization:ratio", "level")
    classes = {
        e["metric"]["class"]: int(float(e["value"][1]))
        for e in query("ibqos:job_count_by_class:sum")
    }
    out.append(
        f"   leaf uplinks {level.get(1, 0.0):.1%} busy; jobs by class {classes};"
        f" plan changes so far {first('ibqos_plan_changes_total')}"
    )
    state = [e["metric"]["state"] for e in query("ibqos_tuning_state == 1")]
    if state:
        out += _tuning_view(query, state[0], first)
    return out


def _tuning_view(query: Query, state: str, first: Callable[[str], int]) -> list[str]:
    setup = [e["metric"]["setup"] for e in query("ibqos_tuning_setup_info")]
    trial = [e["metric"]["setup"] for e in query("ibqos_tuning_trial_info")]
    scores = {
        (e["metric"]["setup"], e["metric"]["source"]): float(e["value"][1])
        for e in query("ibqos_tuning_score")
    }
    out = [
        f"   ibqos_tuning_state {state}; ibqos_tuning_setup_info {setup[0] if setup else '-'};"
        f" ibqos_tuning_trial_info {trial[0] if trial else '-'}; ibqos_tuning_reloads_total"
        f" {first('ibqos_tuning_reloads_total')}"
        f" ({first('ibqos_tuning_reloads_last_hour')} in the last hour)"
    ]
    measured = {n: v for (n, src), v in sorted(scores.items()) if src == "measured"}
    if measured:
        out.append(
            "   ibqos_tuning_score{source=measured}: "
            + ", ".join(f"{n} {v:.3f}" for n, v in measured.items())
        )
    return out


def progress_shares(
    metrics_text: str, jobs: Mapping[str, Mapping[str, Any]]
) -> tuple[Shares, dict[str, float], dict[str, int]]:
    """Each job's progress from the lab's metrics: the part of its uncontended rate it
    runs at (iterations per second x ``period_s``), its iterations per second, its VL.

    Args:
        metrics_text: the lab's metrics endpoint, as served.
        jobs: job id -> its entry in the job file (``period_s``: seconds per iteration
            with the fabric to itself).
    """
    rate: dict[str, float] = {}
    vl: dict[str, int] = {}
    for (name, labels), value in samples(metrics_text).items():
        jid = dict(labels).get("job_id")
        if jid is None:
            continue
        if name == "ibqos_lab_job_iterations_per_second":
            rate[jid] = value
        elif name == "ibqos_lab_job_vl":
            vl[jid] = int(value)
    share = {j: rate[j] * jobs[j]["period_s"] for j in rate if j in jobs}
    return share, rate, vl


def progress_table(
    share: Shares,
    rate: Mapping[str, float],
    vl: Mapping[str, int],
    jobs: Mapping[str, Mapping[str, Any]],
    columns: Sequence[tuple[str, Shares]],
) -> list[str]:
    """How fast each job iterates now, beside the columns saved before (e.g. "before
    ibqos"); a change of 2 points or more is shown."""
    out = [
        "jobs' progress (lab metrics: iterations per second over the last 10 s of lab time;",
        "  % = of the job's rate with the fabric to itself, 1/period_s; VL = the job's lane as",
        "  the lab last read it back from the switches, which may lag a fresh plan by 2-3 s):",
        f"   {'job':<5} {'app':<9} {'VL':>2} {'it/s':>6} {'now':>5}"
        + "".join(f"  {n:>13}" for n, b in columns if b),
    ]
    for jid in sorted(share):
        line = (
            f"   {jid:<5} {jobs[jid].get('name', ''):<9} {vl.get(jid, 0):>2} "
            f"{rate[jid]:6.1f} {share[jid]:5.0%}"
        )
        for _, before in columns:
            if not before:
                continue
            was = before.get(jid)
            if was is None:
                line += f"  {'(new job)':>13}"
                continue
            diff = (share[jid] - was) * 100
            line += f"  {was:5.0%} ({diff:+3.0f})" if abs(diff) >= 2 else f"  {was:13.0%}"
        out.append(line)
    return out
