"""The agent's what-if (``ibqos run --dry-run --simulate``): the running jobs under the QoS
setup in force and under the one ibqos proposes, through the fluid model with the switch
buffers ``ibqos simulate`` gives it (:func:`ibqos.sim.senders.auto_buffers`).

Routes: D-mod-K over the discovered fabric (:func:`ibqos.sim.network.dmodk_lfts`), the
spreading ftree/updn give a fat tree; not OpenSM's actual tables.  Jobs: those declaring
their traffic (pattern, rate, duty, period) are simulated as declared; the others as
measured: all-to-all at the bytes/s their hosts injected on average in the last cycle,
always communicating with a 1 s period (an estimate: it keeps their load, not their
phases).  Jobs that injected less than 1 MB/s per host are left out, and said so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ibqos.config.lanes import LaneConfig
from ibqos.jobs.model import Job
from ibqos.plan.report import Decision
from ibqos.sim.estimate import QUIET_BYTES_PER_S
from ibqos.sim.evaluate import RunSettings
from ibqos.sim.network import Network
from ibqos.sim.policies import one_vl
from ibqos.sim.qos import Arbitration, from_tables
from ibqos.sim.report import buffers_text, parse_plan, render
from ibqos.sim.senders import auto_buffers
from ibqos.sim.workload import SimJob, prepare

ITERATIONS = 10


def simulated_jobs(jobs: Sequence[Job], decision: Decision) -> tuple[list[Job], list[str]]:
    """The jobs to simulate (declared or estimated from the decision) and notes."""
    reports = {r.id: r for r in decision.jobs}
    out: list[Job] = []
    notes: list[str] = []
    for job in jobs:
        report = reports.get(job.id)
        if report is None or len(report.nodes) < 2:
            continue
        if job.has_rates and job.pattern:
            out.append(replace(job, nodes=report.nodes))
            continue
        injected = report.levels[0].bytes_per_s if 0 in report.levels else math.nan
        rate = injected / len(report.nodes)
        if not math.isfinite(rate) or rate < QUIET_BYTES_PER_S:
            notes.append(f"job {job.id}: nothing measured to simulate, left out")
            continue
        out.append(Job(job.id, report.nodes, "all-to-all", rate, 1.0, 1.0, name=job.name))
        notes.append(f"job {job.id}: estimated as all-to-all at {rate / 1e9:.2f} GB/s per host")
    return out, notes


def current_setup(
    plan: Mapping[str, object] | None, jobs: Sequence[SimJob], lanes: LaneConfig
) -> Arbitration:
    """The setup in force: the agent's last plan (from its state), else OpenSM's default of
    every SL on VL 0.  Jobs the plan in force does not know are on SL 0 there, as they run
    now."""
    if plan is None:
        return replace(one_vl(jobs, lanes), name="in force (all on VL 0)")
    known = parse_plan(plan, "agent state", "in force")
    return replace(known, job_sl={j.id: known.job_sl.get(j.id, 0) for j in jobs})


def what_if(
    net: Network, jobs: Sequence[Job], decision: Decision, in_force: Mapping[str, object] | None
) -> str:
    """The table of the jobs under the setup in force and under the proposed plan."""
    tables = decision.plan.tables
    if tables is None:
        return "simulate: the routing engine owns SLs; nothing to compare\n"
    proposed = from_tables(tables, decision.plan.job_sl, decision.plan.cfg.mtu, "proposed")
    chosen, notes = simulated_jobs(jobs, decision)
    if not chosen:
        return "simulate: no job to simulate yet\n" + "".join(f"  {n}\n" for n in notes)
    sim_jobs = prepare(net, chosen)
    current = current_setup(in_force, sim_jobs, decision.plan.cfg)
    bp = auto_buffers(sim_jobs)  # as `ibqos simulate` would
    runs = RunSettings("fluid", net, sim_jobs, ITERATIONS, buffer_packets=bp)
    t_alone = runs.alone(current)
    now = runs.evaluate(current, t_alone)
    then = runs.evaluate(proposed, t_alone)
    how = f"{ITERATIONS} iterations, fluid model, {buffers_text(bp)}"
    head = f"simulated ({how}): in force vs proposed\n"
    return head + render([now, then], now, "table") + "".join(f"  {n}\n" for n in notes)
