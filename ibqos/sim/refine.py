"""Tuning's refinement: the jobs learnt from the setups tried, and setups near the kept one.

After a round of trials decides (:mod:`ibqos.plan.tuning`, ``docs/tuning.md``,
"Refinement"), :func:`refine` takes the setups tried and each job's mean injection under
them, the kept setup first:

1. each setup's tables as the planner programs them (:func:`ibqos.plan.planner.
   setup_tables`) become the fluid model's arbitration, and :func:`ibqos.sim.learn.learn`
   fits the phases of the jobs whose phases are not known (not in *known*: declared, or
   recorded in a profile by a person) so that the model explains what the trials measured,
   the kept setup being the reference;
2. the search (:func:`ibqos.sim.search.rank_pool`) predicts the setups tried with the
   phases given and those fitted, climbs from the best predicted of them (the kept one, when
   the fit explains the trials), and returns the setups it found predicted better than
   every one tried, which the tuner then tries on the fabric.

The agent (:mod:`ibqos.agent.predictor`) bounds both by wall time; the simulator's closed
loop (:mod:`ibqos.sim.closedloop`) by counts, so that a run repeats to the bit.

Units: seconds, bytes per second.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from ibqos.classify.prior import Priors
from ibqos.config.tuning import Objective
from ibqos.errors import IbqosError
from ibqos.jobs.model import Job
from ibqos.plan.planner import Plan, setup_tables
from ibqos.plan.report import Decision
from ibqos.plan.tuning import Observation, Predicted
from ibqos.sim.estimate import ASSUMED_PHASES, Phases, estimate_jobs
from ibqos.sim.learn import Learnt, Trial, learn
from ibqos.sim.network import Network
from ibqos.sim.predict import Steady
from ibqos.sim.qos import from_tables
from ibqos.sim.search import Budget, rank_pool

__all__ = ["refine", "trials_of"]

log = logging.getLogger(__name__)


def trials_of(
    plan: Plan, observations: Sequence[Observation], jobs: Collection[str]
) -> list[Trial]:
    """*observations* as :func:`~ibqos.sim.learn.learn` takes them: each setup's tables
    for *plan*'s *jobs* (ids) as the fluid model's arbitration, and the means measured."""
    job_sl = {j: sl for j, sl in plan.job_sl.items() if j in jobs}
    return [
        (from_tables(setup_tables(plan, s), job_sl, plan.cfg.mtu, s.name), dict(means))
        for s, means in observations
    ]


def refine(
    net: Network,
    jobs: Sequence[Job],
    decision: Decision,
    plan: Plan,
    observations: Sequence[Observation],
    *,
    known: Collection[str] = (),
    priors: Priors | None = None,
    phases: Mapping[str, Phases] | None = None,
    assumed: Phases = ASSUMED_PHASES,
    steady: Steady | None = None,
    budget: Budget | None = None,
    learn_budget_s: float = math.inf,
    clock: Callable[[], float] = time.perf_counter,
    objective: Objective = "node-time",
) -> tuple[Predicted, Learnt | None]:
    """Fit the jobs to *observations* (the kept setup first), then search near the setups
    tried (module docstring); the prediction (found setups in :attr:`Predicted.found`,
    the fit's error in :attr:`Predicted.error`) and the fit (None: fewer than two setups
    measured, or the fit failed).

    Args:
        net: the fabric and its routes.
        jobs: the running jobs as their source gave them.
        decision: the last cycle's decision (the jobs' hosts and rates).
        plan: the plan in force (its jobs' SLs and intensities).
        observations: the setups tried and each job's mean bytes/s, the kept one first.
        known: ids of the jobs whose phases are known: not fitted.
        priors, phases, assumed: as :func:`~ibqos.sim.search.rank_pool` takes them.
        steady: how the search's steady state is measured.
        budget: the search's (None: the setups tried alone are predicted).
        learn_budget_s: wall seconds for the fit.
        clock: wall-clock seconds.
        objective: what setups are scored by.
    """
    given = dict(phases or {})
    learnt: Learnt | None = None
    est = estimate_jobs(net, jobs, decision, priors, given, assumed)
    if len(observations) >= 2 and est.jobs:
        try:
            trials = trials_of(plan, observations, {j.id for j in est.jobs})
            learnt = learn(net, est.jobs, trials, known=known, budget_s=learn_budget_s)
        except (IbqosError, ValueError) as err:  # no fit: predict with the phases given
            log.warning("tuning: fitting the jobs to the trials failed: %s", err)
    if learnt is not None:
        log.info("tuning: %s", learnt.status_line())
        given.update(learnt.phases)
    tried = [s for s, _ in observations]
    out = rank_pool(
        net,
        jobs,
        decision,
        plan,
        tried,
        priors=priors,
        phases=given,
        assumed=assumed,
        steady=steady,
        budget=budget,
        clock=clock,
        objective=objective,
    )
    error = None if learnt is None else learnt.doc()
    return Predicted(out.ranking, out.scores, out.text, out.found, error), learnt
