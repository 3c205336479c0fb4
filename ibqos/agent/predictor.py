"""The agent's prediction of candidate setups: the fluid model on what the agent knows.

:func:`make_predictor` gives :class:`ibqos.plan.tuning.TuningDriver` its
:data:`~ibqos.plan.tuning.Predictor`: the fabric with OpenSM's routes, the tables the
agent routes attribution by (``fabric.routes``, :mod:`ibqos.collect.routes`; D-mod-K while
there are none); the running jobs
estimated from the decision (:func:`ibqos.sim.estimate.estimate_jobs`: measured rates,
declared or profile pattern, else gravity; phases from the job's profile where it records
them, else ``tuning.assumed_duty`` and ``assumed_period_s``), calibrated to what they
measured under the setup in force; and each candidate's tables as the planner would
program them (:func:`ibqos.plan.planner.setup_tables`), run in the steady state
(:mod:`ibqos.sim.predict`); then the search beyond the candidates
(:func:`ibqos.sim.search.rank_pool`), within ``tuning.search_budget_s`` of wall time.

:func:`make_refiner` gives the driver its :data:`~ibqos.plan.tuning.Refiner`, run after a
round decides (:mod:`ibqos.sim.refine`): the phases of the jobs not known (a profile that
records phases not learnt from trials: :func:`ibqos.sim.learn.known_phases`) fitted to
what the trials measured, within half of ``tuning.search_budget_s``, then the search near
the setups tried with the phases fitted, within the other half.  What was learnt is
recorded in the jobs' profiles (:func:`ibqos.sim.learn.record`, when the agent has
profiles), where the next run's prediction starts from it, and the prediction's error
before and after the fit is logged, kept for ``ibqos status`` and the metrics.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from ibqos.classify.prior import Priors
from ibqos.config.tuning import TuningConfig
from ibqos.errors import LabError
from ibqos.fabric.lfts import Tables
from ibqos.fabric.model import Fabric
from ibqos.fabric.topology import Topology
from ibqos.jobs.model import Job
from ibqos.plan.planner import Plan
from ibqos.plan.report import Decision
from ibqos.plan.setups import Setup
from ibqos.plan.tuning import Observation, Predicted, Predictor, Refiner
from ibqos.sim.estimate import Phases
from ibqos.sim.learn import known_phases, record
from ibqos.sim.network import Network
from ibqos.sim.predict import network_for
from ibqos.sim.refine import refine
from ibqos.sim.search import Budget, rank_pool

log = logging.getLogger(__name__)

__all__ = [
    "AGENT_EVALUATIONS",
    "make_predictor",
    "make_refiner",
    "profile_phases",
    "routed_network",
]

#: most predictions of the search beyond the candidates (its time budget ends it first on
#: large fabrics)
AGENT_EVALUATIONS = 1000


def make_predictor(
    cfg: TuningConfig,
    fabric: Callable[[], Fabric],
    jobs: Callable[[], Sequence[Job]],
    priors: Callable[[], Priors | None],
    routes: Callable[[], Tables | None] = lambda: None,
) -> Predictor:
    """The predictor of the agent whose fabric, running jobs, job profiles and
    forwarding tables the callables give (read when a prediction starts: the fabric or
    the tables may have been read again)."""
    network = _networks(fabric, routes)
    # no time, no search; a search bounded by evaluations too, as the simulator's
    budget = Budget(cfg.search_budget_s, AGENT_EVALUATIONS) if cfg.search_budget_s > 0 else None

    def predictor(decision: Decision, plan: Plan, pool: Sequence[Setup]) -> Predicted:
        running, known = jobs(), priors()
        return rank_pool(
            network(),
            running,
            decision,
            plan,
            pool,
            priors=known,
            phases=profile_phases(running, known),
            assumed=Phases(cfg.assumed_duty, cfg.assumed_period_s),
            budget=budget,
            objective=cfg.objective,
        )

    return predictor


def make_refiner(
    cfg: TuningConfig,
    fabric: Callable[[], Fabric],
    jobs: Callable[[], Sequence[Job]],
    priors: Callable[[], Priors | None],
    routes: Callable[[], Tables | None] = lambda: None,
) -> Refiner:
    """The refiner of the agent the callables describe (as :func:`make_predictor`'s):
    fits the jobs to the trials, records what it learnt in their profiles, and searches
    near the setups tried (module docstring)."""
    network = _networks(fabric, routes)
    half = cfg.search_budget_s / 2
    budget = Budget(half, AGENT_EVALUATIONS) if half > 0 else None

    def refiner(
        decision: Decision, plan: Plan, kept: Setup, observations: Sequence[Observation]
    ) -> Predicted:
        running, known = jobs(), priors()
        out, learnt = refine(
            network(),
            running,
            decision,
            plan,
            observations,
            known=known_phases(running, known),
            priors=known,
            phases=profile_phases(running, known),
            assumed=Phases(cfg.assumed_duty, cfg.assumed_period_s),
            budget=budget,
            learn_budget_s=half,
            objective=cfg.objective,
        )
        if learnt is not None and learnt.phases and known is not None:
            done = record(known.store, running, learnt, plan.job_cls)
            log.info(
                "tuning: phases learnt from %d trials recorded in %d profile(s)",
                learnt.trials,
                done,
            )
        return out

    return refiner


def _networks(
    fabric: Callable[[], Fabric], routes: Callable[[], Tables | None]
) -> Callable[[], Network]:
    """The network of the fabric and tables the callables give now, built once per
    fabric model and tables."""
    lock = threading.Lock()
    # the network of one fabric model and tables (both are replaced, never changed in
    # place), held with them: an id alone could be a newer object's
    cache: list[tuple[Fabric, Tables | None, Network]] = []

    def network() -> Network:
        model, tables = fabric(), routes()
        with lock:
            if cache and cache[0][0] is model and cache[0][1] is tables:
                return cache[0][2]
            net = routed_network(model.topo, tables)
            cache[:] = [(model, tables, net)]
            return net

    return network


def routed_network(topo: Topology, tables: Tables | None) -> Network:
    """*topo* with OpenSM's *tables*; D-mod-K routes without them, or (warned) when they
    do not fit *topo*."""
    if tables is not None:
        try:
            return Network(topo, tables)
        except LabError as err:  # tables of another fabric: predict anyway
            log.warning("tuning: %s; predicting over D-mod-K routes", err)
    return network_for(topo, None)


def profile_phases(jobs: Sequence[Job], priors: Priors | None) -> dict[str, Phases]:
    """Job id -> the phases its matching profile records (``model.duty`` and
    ``model.period_s``), for the jobs whose profile has both; however sure the profile is
    of its class (phases learnt from trials, :mod:`ibqos.sim.learn`, may be all a new
    profile holds)."""
    out: dict[str, Phases] = {}
    if priors is None:
        return out
    for job in jobs:
        model = priors.phases(job)
        if model is not None and model.duty is not None and model.period_s is not None:
            out[job.id] = Phases(model.duty, model.period_s)
    return out
