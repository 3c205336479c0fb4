"""A search of the setup space, guided by the fluid prediction: the setups tuning tries
besides the fixed candidates of :mod:`ibqos.plan.setups`.

**The space** (:mod:`ibqos.sim.setupspace`): a point is a grouping of the active job SLs
onto lanes (any partition, not only groups contiguous in intensity; at most the job lanes
the configuration allows) and each lane's MTU packets per arbitration round, as VLArb
encodes them (:func:`ibqos.plan.planner.setup_tables`, :func:`ibqos.plan.weights.quantize`);
a point whose packets the tables cannot encode exactly is skipped unevaluated.  The moves
change one lane's weight, swap two lanes' weights, move one SL to another lane or a lane
of its own, or merge two lanes.

**The method: first-improvement local search with restarts.**  Every start point (the
candidates: the law first, then the fixed shapes) is predicted; the search then climbs
from the best of them: it takes the moves in a seeded random order, one move kind after
the other in turn, and moves to the first neighbour predicted better by more than
:data:`MIN_GAIN`; when no neighbour is, it restarts from the best start not yet climbed
from.  A fluid prediction costs 3 ms to 2 s (``docs/simulate-benchmark.md``), so the
search affords tens of them: first improvement moves as soon as one neighbour is better,
where best improvement would predict the whole neighbourhood (over a hundred points for
15 SLs on 7 lanes) before one step; annealing needs many more evaluations to pay off its
random walk; and coordinate descent covers the weights only, not the groupings.

**Evaluations are cached by the tables a setup programs**
(:meth:`ibqos.plan.planner.Tables.substance`): two points that program the same tables
(packets 2:4 and 1:2, a grouping reached twice) are predicted once.

**The budget.**  The start points are always predicted (the tuner needs their ranking);
the search then stops when its next step would end past :attr:`Budget.seconds` of wall
time from the prediction's start (a step's cost taken as the mean so far), after
:attr:`Budget.evaluations` predictions beyond the starts, or when every start has been
climbed to a local optimum; it returns the best found.  Without a time limit the search
is deterministic (the simulator's closed loop).

**The score** is :func:`ibqos.sim.predict.scores` against each job's time alone: ``S``,
the node-weighted mean slowdown (lower is better).

Units: seconds; scores are ratios.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import reduce

from ibqos.classify.prior import Priors
from ibqos.config.tuning import Objective
from ibqos.errors import IbqosError, SimError
from ibqos.jobs.model import Job
from ibqos.plan.planner import Plan, Tables, setup_tables
from ibqos.plan.report import Decision
from ibqos.plan.setups import Setup
from ibqos.plan.tuning import Predicted
from ibqos.sim.estimate import ASSUMED_PHASES, Phases, estimate_jobs, injected
from ibqos.sim.network import Network
from ibqos.sim.predict import (
    JobPrediction,
    Prediction,
    SetupPrediction,
    Steady,
    alone_times,
    calibrate,
    render_prediction,
    scores,
    steady_times,
)
from ibqos.sim.qos import Arbitration, from_tables
from ibqos.sim.setupspace import Point, Space
from ibqos.sim.workload import SimJob, prepare

__all__ = [
    "FOUND",
    "MIN_GAIN",
    "Budget",
    "Evaluated",
    "Evaluator",
    "SearchResult",
    "evaluator_for",
    "rank_pool",
    "search",
]

log = logging.getLogger(__name__)

#: least relative gain in score for a move to be taken (below it the fluid model's own
#: discreteness, and a trial on the fabric could never tell)
MIN_GAIN = 0.002
#: most found setups handed to the tuner (``found-1`` ...)
FOUND = 3


@dataclass(frozen=True)
class Budget:
    """How long a search may go on.

    Attributes:
        seconds: wall-clock seconds from the prediction's start (None: no limit, so
            deterministic; 0: no search beyond the start points).
        evaluations: most predictions beyond the start points.
    """

    seconds: float | None = None
    evaluations: int = 48

    def __post_init__(self) -> None:
        if self.evaluations < 0 or (self.seconds is not None and self.seconds < 0):
            raise SimError(f"search budget: seconds and evaluations >= 0: {self}")


@dataclass(frozen=True)
class Evaluated:
    """One setup predicted.

    Attributes:
        setup: the setup (its name as first asked for).
        arbitration: the tables it programs, as the fluid model takes them.
        times: each job's seconds per iteration in the steady state.
        score: S against each job's time alone (lower is better).
    """

    setup: Setup
    arbitration: Arbitration
    times: Mapping[str, float]
    score: float


class Evaluator:
    """Predicts setups of *plan*'s jobs in the fluid model, caching by tables.

    Args:
        net: the fabric and its routes.
        jobs: the mix (calibrated and prepared), each with an SL in *plan*.
        plan: the plan in force (its tables place the VLs; its intensities order lanes).
        steady: how the steady state is measured (None: :class:`Steady`'s defaults).
        clock: wall-clock seconds (the fluid runs' cost, which the search's time budget
            reads).
        objective: what a setup is scored by (``tuning.objective``).
    """

    def __init__(
        self,
        net: Network,
        jobs: Sequence[SimJob],
        plan: Plan,
        steady: Steady | None = None,
        clock: Callable[[], float] = time.perf_counter,
        objective: Objective = "node-time",
    ) -> None:
        if not jobs:
            raise SimError("search: no job to predict")
        self.net, self.jobs, self.plan = net, list(jobs), plan
        self.steady = Steady() if steady is None else steady
        self.clock = clock
        self.objective: Objective = objective
        self.job_sl = {j.id: plan.job_sl[j.id] for j in jobs if j.id in plan.job_sl}
        self.nodes = {j.id: len(j.job.nodes) for j in jobs}
        self.alone: dict[str, float] | None = None
        self.evaluations = 0  # fluid runs of a setup (the alone runs not counted)
        self.hits = 0  # setups answered from the cache
        self.seconds = 0.0  # wall time of the fluid runs
        self._cache: dict[tuple[object, ...], Evaluated] = {}

    def tables(self, setup: Setup) -> Tables:
        """The tables *setup* programs for the plan's jobs."""
        return setup_tables(self.plan, setup)

    def known(self, tables: Tables) -> Evaluated | None:
        """The prediction of *tables* if made already."""
        return self._cache.get(tables.substance())

    def evaluate(self, setup: Setup, tables: Tables | None = None) -> Evaluated:
        """*setup* predicted (once per tables programmed; *tables*: its, if built)."""
        tables = self.tables(setup) if tables is None else tables
        key = tables.substance()
        got = self._cache.get(key)
        if got is not None:
            self.hits += 1
            return got if got.setup.name == setup.name else _renamed(got, setup)
        start = self.clock()
        arb = from_tables(tables, self.job_sl, self.plan.cfg.mtu, setup.name)
        arb.check_jobs(list(self.job_sl))
        if self.alone is None:  # alone, a job has the fabric to itself: any setup will do
            self.alone = alone_times(self.net, self.jobs, arb, self.steady)
        times = steady_times(self.net, self.jobs, arb, self.steady)
        score = scores([times], self.nodes, alone=self.alone, objective=self.objective)[0]
        got = Evaluated(setup, arb, times, score)
        self._cache[key] = got
        self.evaluations += 1
        self.seconds += self.clock() - start
        return got


def _renamed(got: Evaluated, setup: Setup) -> Evaluated:
    arb = replace(got.arbitration, name=setup.name)
    return Evaluated(setup, arb, got.times, got.score)


@dataclass(frozen=True)
class SearchResult:
    """What a search found.

    Attributes:
        starts: the start points predicted, in the order given.
        found: the best setups found that no start programs, better than every start by
            more than :data:`MIN_GAIN`, best first, named ``found-1`` ... (at most
            :data:`FOUND`).
        best: the best setup predicted (a start or a found one).
        evaluations: predictions made (starts included; cache hits not).
        hits: setups answered from the cache.
        elapsed_s: wall time from the prediction's start to the search's end.
        stopped: why it stopped: ``time``, ``evaluations`` or ``converged``.
        climbs: local searches started (restarts + 1; 0 with no search).
    """

    starts: tuple[Evaluated, ...]
    found: tuple[Evaluated, ...]
    best: Evaluated
    evaluations: int
    hits: int
    elapsed_s: float
    stopped: str
    climbs: int = 0

    def describe(self) -> str:
        """One line: the search's cost and what it found."""
        return (
            f"search: {self.evaluations} predictions ({self.hits} from the cache),"
            f" {self.climbs} climb(s), {self.elapsed_s:.1f} s, stopped: {self.stopped};"
            f" best {self.best.setup.name} {self.best.score:.3f}"
        )


def search(
    ev: Evaluator,
    starts: Sequence[Setup],
    budget: Budget = Budget(),
    *,
    started_s: float | None = None,
    seed: int = 0,
) -> SearchResult:
    """Predict *starts*, then climb from the best of them (module docstring).

    Args:
        ev: the evaluator of the plan's setups (its clock is the budget's).
        starts: the start points (the candidates, the law first), named uniquely.
        budget: when to stop.
        started_s: when the prediction started (the clock's seconds; None: now).
        seed: the moves' order.

    Raises:
        SimError: no start point.
    """
    if not starts:
        raise SimError("search: no start point")
    clock = ev.clock
    t0 = clock() if started_s is None else started_s
    space = Space.of(ev.plan)
    firsts = [ev.evaluate(s) for s in starts]
    start_keys = {_key(e) for e in firsts}
    n0 = ev.evaluations
    rng = random.Random(seed)
    seen: dict[Point, float] = {}  # points predicted (or not encodable: inf)
    best_start = min(e.score for e in firsts)
    stopped = "converged"
    climbs = 0

    searched = clock()
    ended: list[float] = []  # the clock when the budget ran out

    def over() -> str | None:
        made = ev.evaluations - n0
        if made >= budget.evaluations:
            return "evaluations"
        if budget.seconds is not None:
            now = clock()
            # a step's cost: its prediction and what goes between two (the tables, moves)
            step = (now - searched) / made if made else ev.seconds / max(ev.evaluations, 1)
            if now - t0 + step > budget.seconds:
                ended.append(now)
                return "time"
        return None

    order = sorted(range(len(firsts)), key=lambda k: firsts[k].score)
    climbed: set[Point] = set()
    extra: list[Evaluated] = []
    for k in order:
        stop = over()
        if stop is not None:
            stopped = stop
            break
        here = _point_of(space, ev, firsts[k])
        if here is None or here in climbed:
            continue
        climbs += 1
        here_score = firsts[k].score
        while True:
            climbed.add(here)
            moved = False
            for nb in space.moves(here, rng):
                if nb in seen:
                    continue
                stop = over()
                if stop is not None:
                    break
                setup = space.setup(nb, f"search-{len(seen) + 1}")
                try:
                    tables = ev.tables(setup)
                    if not _encodes(tables, nb):
                        seen[nb] = math.inf
                        continue
                    got = ev.evaluate(setup, tables)
                except (IbqosError, ValueError) as err:  # one point must not end the search
                    log.warning("search: %s: %s", setup.groups, err)
                    seen[nb] = math.inf
                    continue
                seen[nb] = got.score
                if _key(got) not in start_keys:
                    extra.append(got)
                if got.score < here_score * (1.0 - MIN_GAIN):
                    here, here_score, moved = nb, got.score, True
                    log.debug("search: %s %.4f", setup.groups, got.score)
                    break
            if stop is not None:
                stopped = stop
                break
            if not moved:
                break
        if stop is not None:
            break
    found = _found(extra, best_start)
    best = min([*firsts, *found], key=lambda e: e.score)
    return SearchResult(
        tuple(firsts),
        found,
        best,
        ev.evaluations,
        ev.hits,
        (ended[0] if ended else clock()) - t0,
        stopped,
        climbs,
    )


def _point_of(space: Space, ev: Evaluator, got: Evaluated) -> Point | None:
    """The point a start programs: its groups and the packets its tables encode (None:
    it places no job SL, which a plan never asks)."""
    tables = ev.tables(got.setup)
    lanes = [lane for lane in tables.lanes if lane.rank is not None]
    if not lanes:
        return None
    return space.point([lane.sls for lane in lanes], [lane.packets for lane in lanes])


def _encodes(tables: Tables, point: Point) -> bool:
    """The tables give each lane of *point* its packets (up to a common factor)."""
    got = {lane.sls: lane.packets for lane in tables.lanes if lane.rank is not None}
    want = dict(point)
    if set(got) != set(want):
        return False
    g = reduce(math.gcd, got.values(), 0) or 1
    return all(got[sls] // g == p and got[sls] % g == 0 for sls, p in want.items())


def _key(got: Evaluated) -> tuple[object, ...]:
    """What the fluid model sees of *got*'s tables."""
    arb = got.arbitration
    return (arb.sl_to_vl, arb.vlarb_low, arb.vlarb_high, arb.high_limit)


def _found(extra: Sequence[Evaluated], best_start: float) -> tuple[Evaluated, ...]:
    """The best of *extra* better than *best_start* by :data:`MIN_GAIN`, named found-k."""
    better = sorted(
        (e for e in extra if e.score < best_start * (1.0 - MIN_GAIN)), key=lambda e: e.score
    )
    out: list[Evaluated] = []
    keys: set[tuple[object, ...]] = set()
    for e in better:
        key = _key(e)
        if key in keys:
            continue
        keys.add(key)
        name = f"found-{len(out) + 1}"
        setup = Setup(name, e.setup.groups, e.setup.targets)
        out.append(_renamed(e, setup))
        if len(out) == FOUND:
            break
    return tuple(out)


# -- tuning's prediction --------------------------------------------------------------------


def evaluator_for(
    net: Network,
    jobs: Sequence[Job],
    decision: Decision,
    plan: Plan,
    *,
    priors: Priors | None = None,
    phases: Mapping[str, Phases] | None = None,
    assumed: Phases = ASSUMED_PHASES,
    steady: Steady | None = None,
    clock: Callable[[], float] = time.perf_counter,
    objective: Objective = "node-time",
) -> tuple[Evaluator | None, tuple[str, ...]]:
    """The evaluator of *plan*'s setups for the running *jobs* as the agent knows them,
    and how they were estimated: estimated from *decision*
    (:func:`~ibqos.sim.estimate.estimate_jobs`: never their declared rates; phases from
    *phases*, else *assumed*), calibrated to their means under the plan's tables
    (:func:`~ibqos.sim.predict.calibrate`); *clock* times its runs, *objective* scores
    them.  None when the plan
    writes no tables or no job was measured."""
    if plan.tables is None:
        return None, ()
    est = estimate_jobs(net, jobs, decision, priors, phases, assumed)
    if not est.jobs:
        return None, ("predicted: no job measured",)
    # what the measurement was made under: the plan's own tables
    in_force = from_tables(plan.tables, plan.job_sl, plan.cfg.mtu, plan.tables.setup)
    calibrated = calibrate(net, est.jobs, injected(decision), in_force)
    return Evaluator(net, prepare(net, calibrated), plan, steady, clock, objective), est.notes


def rank_pool(
    net: Network,
    jobs: Sequence[Job],
    decision: Decision,
    plan: Plan,
    pool: Sequence[Setup],
    *,
    priors: Priors | None = None,
    phases: Mapping[str, Phases] | None = None,
    assumed: Phases = ASSUMED_PHASES,
    steady: Steady | None = None,
    budget: Budget | None = None,
    clock: Callable[[], float] = time.perf_counter,
    objective: Objective = "node-time",
) -> Predicted:
    """Tuning's prediction of *pool* (:data:`ibqos.plan.tuning.Predictor`), and the
    search's setups beside it: the jobs as :func:`evaluator_for` makes them, each setup's
    tables as the planner would program them (:func:`ibqos.plan.planner.setup_tables`)
    predicted in the steady state, the pool first, then the search from it
    (:func:`search`, within *budget*, counted from this call; None: the pool alone).
    Ranked by score (S, or the worst job's slowdown by *objective*), ties in the pool's
    order; the found setups (``found-1`` ...) come in :attr:`Predicted.found` and in the
    ranking.
    """
    started = clock()
    order = tuple(s.name for s in pool)
    ev, notes = evaluator_for(
        net,
        jobs,
        decision,
        plan,
        priors=priors,
        phases=phases,
        assumed=assumed,
        steady=steady,
        clock=clock,
        objective=objective,
    )
    if ev is None or not pool:
        return Predicted(order, {}, "".join(f"{n}\n" for n in notes))
    result = search(ev, pool, budget or Budget(0.0, 0), started_s=started)
    log.info("tuning: %s", result.describe())
    alone = ev.alone or {}
    per_setup = []
    for e in [*result.starts, *result.found]:
        per_job = tuple(
            JobPrediction(j.id, ev.nodes[j.id], alone[j.id], e.times[j.id]) for j in ev.jobs
        )
        per_setup.append(SetupPrediction(e.setup.name, e.arbitration, per_job, e.score))
    if budget is not None:
        notes = (*notes, result.describe())
    pred = Prediction(tuple(per_setup), ev.steady.describe(ev.jobs), notes, True)
    ranked = sorted(pred.setups, key=lambda s: s.score)  # stable: the pool's order ties
    return Predicted(
        tuple(s.name for s in ranked),
        {s.name: s.score for s in pred.setups},
        render_prediction(pred),
        tuple(e.setup for e in result.found),
    )
