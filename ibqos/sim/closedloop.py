"""The ``ibqos`` policy of ``ibqos simulate``: the agent's search and tuning, closed over
the simulated fabric.

The mix runs in the fluid model (:class:`~ibqos.sim.fluid.FluidSim`), stepped one sweep
interval of simulated time at a time.  At the end of each interval a "counter sweep"
turns the bytes the links carried in it into the rates table the agent's collector
gives (:class:`~ibqos.sim.policies.SweepTable`); the agent's own :class:`~ibqos.plan.
decide.Decider` decides on it with the setup the tuning asks for (``decider.setup =
driver.wanted``), and the agent's own :class:`~ibqos.plan.tuning.TuningDriver` takes the
decision, as :mod:`ibqos.agent.cycle` drives them.  When the plan's tables change, the
fluid model's arbitration changes with them (:meth:`FluidSim.set_arbitration`, as the
lab does when OpenSM reprograms the switches), from the next interval on; that interval
is the one the tuner leaves out (``reloaded``), as the agent leaves out the sweep its
reload falls in.

**Every trial's time counts.**  A job's ``T_sharing`` is its time to finish N iterations
under the setups as they changed: the first plan (the jobs in their expected classes, no
sweep yet), the law once the first sweep has classified them, each trial of the round,
and the setup the round kept.  A short run is mostly trials; :func:`round_sweeps` and
:func:`default_iterations` say how long a round takes and what N makes the run several
rounds long.

Time: the sweep interval is simulated seconds (:func:`default_sweep_s`: a few of the
mix's longest iterations, so a sweep's rates are averages over iterations, as the
agent's sweeps of seconds are over its jobs' millisecond iterations).  Tuning gets its
configuration with ``settle_s`` 0 (the agent's 30 s would be the whole run; a round
starts at the sweep after the one that classified the jobs) and counts its reloads per
hour of simulated time, which in a run of seconds means ``max_reloads_per_hour`` for the
whole run.

The prediction (:mod:`ibqos.sim.predict`) ranks the candidates before a round when a
*predictor* is given (:func:`fluid_predictor`), and its search (:mod:`ibqos.sim.search`)
adds the setups it found; without one the round tries the candidates in the pool's
order.  After a round decides, a *refiner* (:func:`fluid_refiner`) fits the jobs whose
phases are not known to the trials and searches near the kept setup
(:mod:`ibqos.sim.refine`), and the tuner tries what it found (``tuning.refine_rounds``).
Everything is deterministic: the prediction and the refinement run inline, the search is
bounded by its count of predictions, not by wall time, and so is the fit.

Units: seconds (simulated), bytes per second.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ibqos.config.lanes import LaneConfig
from ibqos.config.tuning import Objective, TuningConfig
from ibqos.errors import SimError
from ibqos.fabric.model import Fabric
from ibqos.jobs.model import Job
from ibqos.plan.decide import Decider
from ibqos.plan.planner import Plan
from ibqos.plan.report import Decision
from ibqos.plan.setups import LAW, Setup
from ibqos.plan.tuner import TuningStatus
from ibqos.plan.tuning import Observation, Predicted, Predictor, Refiner, TuningDriver
from ibqos.sim.estimate import Phases
from ibqos.sim.evaluate import RunSettings
from ibqos.sim.fluid import FluidSim
from ibqos.sim.network import Network
from ibqos.sim.policies import ADAPTIVE, SweepTable
from ibqos.sim.predict import Steady
from ibqos.sim.qos import Arbitration, from_tables
from ibqos.sim.refine import refine
from ibqos.sim.search import Budget, rank_pool
from ibqos.sim.workload import RunResult, SimJob

__all__ = [
    "ROUNDS",
    "SEARCH_EVALUATIONS",
    "SWEEP_PERIODS",
    "LoopResult",
    "Switch",
    "closed_loop",
    "default_iterations",
    "default_sweep_s",
    "fluid_predictor",
    "fluid_refiner",
    "round_sweeps",
]

log = logging.getLogger(__name__)

#: the default sweep interval, in the mix's longest declared iteration (period_s)
SWEEP_PERIODS = 4
#: rounds of tuning the default N makes the longest job's run last, at least
ROUNDS = 4
#: N when no policy tunes (and at least N when one does)
BASE_ITERATIONS = 10
#: predictions the search makes beyond the candidates before each round
SEARCH_EVALUATIONS = 40


def default_sweep_s(jobs: Sequence[SimJob]) -> float:
    """The sweep interval for *jobs* (seconds): :data:`SWEEP_PERIODS` of the longest
    declared iteration, so every job runs several iterations per sweep."""
    if not jobs:
        raise SimError("closed loop: no job to run")
    return SWEEP_PERIODS * max(j.job.period_s for j in jobs)


def round_sweeps(cfg: TuningConfig) -> int:
    """Sweeps from the jobs' start until the first round's choice is in force, the
    prediction ranking at once: the first sweep (it classifies the jobs: a reload), the
    round's start, the law's trial (its first sweep has that reload in it), each other
    trial of the shortlist (the sweep the switch is decided in, the one its reload falls
    in, then ``trial_sweeps``), and the switch to the choice (two again)."""
    law = cfg.trial_sweeps + 1
    other = cfg.trial_sweeps + 2
    return 2 + law + cfg.shortlist * other + 2


def default_iterations(jobs: Sequence[SimJob], sweep_s: float, cfg: TuningConfig) -> int:
    """N for a run that tunes: at least :data:`BASE_ITERATIONS`, and enough that the
    longest declared iteration times N lasts :data:`ROUNDS` rounds of tuning
    (:func:`round_sweeps` sweeps of *sweep_s* each), so most of the run is under the setup
    the rounds keep.  Jobs with shorter iterations finish their N sooner: more of their
    time is trials."""
    longest = max(j.job.period_s for j in jobs)
    rounds_s = ROUNDS * round_sweeps(cfg) * sweep_s
    return max(BASE_ITERATIONS, math.ceil(rounds_s / longest - 1e-9))


@dataclass(frozen=True)
class Switch:
    """The tables changed (OpenSM reprogrammed the switches).

    Attributes:
        at_s: when (simulated seconds): the end of the sweep that decided it.
        setup: the setup in force from then on (the law: ``favour-light``).
        reasons: why the plan changed, as the planner says.
    """

    at_s: float
    setup: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class LoopResult:
    """A closed-loop run.

    Attributes:
        run: the jobs' iterations under the changing setups (``t_s``: the N-th's end).
        final: the setup in force at the end, named ``ibqos``.
        switches: every change of the tables, in order (the first plan at 0 included).
        sweeps: sweeps made.
        sweep_s: the sweep interval (simulated seconds).
        status: tuning's state at the end (rounds, reloads, the last round's decision).
        tuned_s: when the first round's choice came into force (simulated seconds; None:
            the run ended first).
    """

    run: RunResult
    final: Arbitration
    switches: tuple[Switch, ...]
    sweeps: int
    sweep_s: float
    status: TuningStatus
    tuned_s: float | None

    def summary(self) -> str:
        """One line: what tuning did, for the report's notes."""
        st = self.status
        when = (
            f"its first round decided by {self.tuned_s:.3g} s"
            if self.tuned_s is not None
            else "the run ended before its first round decided"
        )
        what = st.decision or f"kept {st.wanted}"
        return (
            f"{ADAPTIVE}: {st.rounds} round(s) of tuning, {st.reloads} reload(s) for it,"
            f" {len(self.switches) - 1} switch(es) in all, {when} of {self.run.sim_time_s:.3g} s"
            f" ({self.sweeps} sweeps of {self.sweep_s * 1e3:.3g} ms); {what}"
        )


def _arbitration(plan: Plan, mtu: int) -> Arbitration:
    if plan.tables is None:
        raise SimError("lanes: the routing engine owns SLs; ibqos writes no tables to simulate")
    return from_tables(plan.tables, plan.job_sl, mtu, ADAPTIVE)


def closed_loop(
    fluid: RunSettings,
    lanes: LaneConfig,
    tuning: TuningConfig | None = None,
    sweep_s: float | None = None,
    predictor: Predictor | None = None,
    refiner: Refiner | None = None,
) -> LoopResult:
    """Run the mix of *fluid* (its model must be ``fluid``) with the agent deciding and
    tuning every sweep (module docstring) until every job has ``fluid.iterations``.

    Args:
        fluid: the mix, N, the fluid model's senders and buffers.
        lanes: what the planner may use (its holds are set to 0: the run is short).
        tuning: the ``tuning`` section (None: its defaults); ``settle_s`` is set to 0.
        sweep_s: the sweep interval, simulated seconds (None: :func:`default_sweep_s`).
        predictor: ranks each round's candidates (None: the pool's order).
        refiner: after a round decides, finds setups near the kept one (None: none).

    Raises:
        SimError: a model other than fluid, a sweep interval not above 0, or lanes that
            leave ibqos no tables.
    """
    if fluid.model != "fluid":
        raise SimError(f"--policy {ADAPTIVE}: runs in the fluid model, not {fluid.model}")
    net, jobs, n = fluid.net, list(fluid.jobs), fluid.iterations
    sweep = default_sweep_s(jobs) if sweep_s is None else sweep_s
    if not sweep > 0:
        raise SimError(f"--sweep-s {sweep}: expected more than 0 seconds")
    cfg = replace(tuning if tuning is not None else TuningConfig(), settle_s=0.0)
    lanes = replace(lanes, min_hold_s=0.0, min_interval_s=0.0)
    fabric = Fabric(net.topo, source="simulated")
    table = SweepTable(net, fabric)
    declared = [j.job for j in jobs]
    decider = Decider(fabric, lanes)
    driver = TuningDriver(
        cfg,
        enforce=True,
        predictor=predictor,
        ratio=lanes.weight_ratio,
        background=False,
        refiner=refiner,
    )
    # the jobs start in their expected classes, before any sweep (as job-sl places them)
    decider.setup = driver.wanted
    first = decider.decide(table(np.zeros(net.links)), declared, 0.0, fresh=False)
    plan = first.plan
    sim = FluidSim(net, jobs, _arbitration(plan, lanes.mtu), fluid.per, fluid.buffers)
    switches = [Switch(0.0, _setup_name(plan), first.result.reasons)]
    reloaded = True  # the first plan was loaded as the jobs started
    sweeps = 0
    tuned_s: float | None = None
    while (sim.iterations < n).any():
        before = sim.link_bytes
        start = sim.time
        sim.advance(sweep)
        now = sim.time
        sweeps += 1
        rates = table((sim.link_bytes - before) / max(now - start, 1e-15))
        served = _setup_name(plan)
        decider.setup = driver.wanted
        decision = decider.decide(rates, declared, now)
        driver.after_cycle(decision, fresh=True, in_force=served, reloaded=reloaded, now_s=now)
        reloaded = False
        if decision.result.replace:
            plan = decision.plan
            sim.set_arbitration(_arbitration(plan, lanes.mtu))
            switches.append(Switch(now, _setup_name(plan), decision.result.reasons))
            log.debug("closed loop: %.4f s: %s", now, "; ".join(decision.result.reasons))
            reloaded = True
        else:
            plan = decision.plan
        if tuned_s is None and driver.tuner.state == "settled":
            tuned_s = now
    if sim.buffer_packets > 0:
        _ = sim.sender_alpha  # bytes still in the buffers drain at the last event's rates
    status = driver.status(sim.time)
    final = _arbitration(plan, lanes.mtu)
    log.info("closed loop: %s", status.decision or f"kept {status.wanted}")
    return LoopResult(sim.result(n), final, tuple(switches), sweeps, sweep, status, tuned_s)


def _setup_name(plan: Plan) -> str:
    return LAW if plan.tables is None else plan.tables.setup


# -- the prediction -------------------------------------------------------------------------


def fluid_predictor(
    net: Network,
    jobs: Sequence[Job],
    steady: Steady | None = None,
    phases: dict[str, Phases] | None = None,
    evaluations: int = SEARCH_EVALUATIONS,
    objective: Objective = "node-time",
) -> Predictor:
    """The tuning's predictor on the simulated fabric's routes, with the steady state
    given: :func:`~ibqos.sim.search.rank_pool` and its search, as the agent's own
    (:func:`ibqos.agent.predictor.make_predictor`, a layer up) runs it, but bounded by
    *evaluations* (predictions beyond the candidates; 0: no search) instead of wall time,
    so that a run repeats to the bit.

    Args:
        net: the fabric and its routes.
        jobs: the running jobs (as their source gives them).
        steady: how the steady state is measured (None: :class:`~ibqos.sim.predict.Steady`'s
            defaults).
        phases: each job's phases where known (as a profile would record them); the
            others are assumed (:data:`~ibqos.sim.estimate.ASSUMED_PHASES`).
        evaluations: the search's predictions beyond the candidates, each round (0: the
            candidates alone).
        objective: what the setups are scored by (``tuning.objective``).
    """

    def predictor(decision: Decision, plan: Plan, setups: Sequence[Setup]) -> Predicted:
        how = Steady() if steady is None else steady
        budget = Budget(None, evaluations) if evaluations > 0 else None
        return rank_pool(
            net,
            jobs,
            decision,
            plan,
            setups,
            phases=phases,
            steady=how,
            budget=budget,
            objective=objective,
        )

    return predictor


def fluid_refiner(
    net: Network,
    jobs: Sequence[Job],
    steady: Steady | None = None,
    phases: dict[str, Phases] | None = None,
    evaluations: int = SEARCH_EVALUATIONS,
    objective: Objective = "node-time",
    known: Collection[str] | None = None,
) -> Refiner:
    """The tuning's refiner on the simulated fabric (:func:`ibqos.sim.refine.refine`), as
    :func:`fluid_predictor` predicts: bounded by *evaluations*, the fit by its grid and
    sweeps (no wall time), so that a run repeats to the bit.

    Args:
        net, jobs, steady, phases, evaluations, objective: as :func:`fluid_predictor`.
        known: ids of the jobs whose phases are known, not fitted (None: those *phases*
            gives).
    """
    fixed = set(phases or {}) if known is None else set(known)

    def refiner(
        decision: Decision, plan: Plan, kept: Setup, observations: Sequence[Observation]
    ) -> Predicted:
        budget = Budget(None, evaluations) if evaluations > 0 else None
        out, _ = refine(
            net,
            jobs,
            decision,
            plan,
            observations,
            known=fixed,
            phases=phases,
            steady=Steady() if steady is None else steady,
            budget=budget,
            objective=objective,
        )
        return out

    return refiner
