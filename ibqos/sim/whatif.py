"""The agent's what-if (``ibqos run --dry-run --simulate``): the running jobs under the QoS
setup in force and under the one ibqos proposes, predicted in the steady state they live in
(:func:`ibqos.sim.predict.predict`: staggered starts, warm-up iterations dropped, no switch
buffers, as the closed-loop lab runs).

Routes: D-mod-K over the discovered fabric (:func:`ibqos.sim.network.dmodk_lfts`), the
spreading ftree/updn give a fat tree; not OpenSM's actual tables.  Jobs: as the agent
measured them (:func:`ibqos.sim.estimate.estimate_jobs`: their hosts' injected bytes per
second, their declared pattern else all-to-all, assumed phases; never a job file's rate,
duty or period), calibrated to what they measured under the setup in force
(:func:`ibqos.sim.predict.calibrate`).  Jobs that injected less than 1 MB/s per host are
left out, and said so.  Times are seconds per iteration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ibqos.config.lanes import LaneConfig
from ibqos.jobs.model import Job
from ibqos.plan.report import Decision
from ibqos.sim.estimate import estimate_jobs
from ibqos.sim.evaluate import JobOutcome, Outcome
from ibqos.sim.network import Network
from ibqos.sim.policies import one_vl
from ibqos.sim.predict import Prediction, calibrate, predict
from ibqos.sim.qos import Arbitration, from_tables
from ibqos.sim.report import parse_plan, render
from ibqos.sim.workload import SimJob, prepare


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
    est = estimate_jobs(net, jobs, decision)
    notes = "".join(f"  {n}\n" for n in est.notes)
    if not est.jobs:
        return "simulate: no job to simulate yet\n" + notes
    current = current_setup(in_force, prepare(net, est.jobs), decision.plan.cfg)
    measured = {r.id: r.levels[0].bytes_per_s for r in decision.jobs if 0 in r.levels}
    sim_jobs = prepare(net, calibrate(net, est.jobs, measured, current))
    proposed = from_tables(tables, decision.plan.job_sl, decision.plan.cfg.mtu, "proposed")
    pred = predict(net, sim_jobs, [current, proposed])
    now, then = _outcomes(pred)
    head = f"simulated steady state ({pred.how}), seconds per iteration: in force vs proposed\n"
    return head + render([now, then], now, "table") + notes


def _outcomes(pred: Prediction) -> list[Outcome]:
    """The prediction as the simulator's outcomes, one iteration each (for its table)."""
    out = []
    for s in pred.setups:
        arb = s.setup
        per_job = tuple(
            JobOutcome(j.id, j.nodes, arb.job_sl.get(j.id, 0), arb.vl_of(j.id), j.t_alone_s, j.t_s)
            for j in s.jobs
        )
        out.append(Outcome(s.name, "fluid", 1, per_job, arb, 0.0, 0))
    return out
