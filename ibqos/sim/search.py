"""A search of the setup space, guided by the fluid prediction: the setups tuning tries
besides the fixed candidates of :mod:`ibqos.plan.setups`.

**The space.**  A point is a grouping of the active job SLs onto lanes (any partition,
not only groups contiguous in intensity; at most the job lanes the configuration allows)
and each lane's MTU packets per arbitration round, as VLArb encodes them: a whole number
per lane, in the entries ``vlarb_low_cap`` leaves for jobs
(:func:`ibqos.plan.planner.setup_tables`, :func:`ibqos.plan.weights.quantize`).  Only the
ratios count: packets are kept divided by their greatest common divisor.  A point whose
packets the tables cannot encode exactly is skipped unevaluated.

**The moves** from a point:

- a lane's packets one rung up or down :data:`LADDER` (1, 2, 3, 4, 6, 8, ...);
- two lanes swap their packets (the heavy job on the heaviest weight: not monotonic);
- one SL moves to another lane, or to a lane of its own (a split, one lane more: as
  heavy as its lane was, a rung heavier, or half as heavy as the others);
- two lanes merge (one lane fewer), keeping the larger of their packets.

**The method: first-improvement local search with restarts.**  Every start point (the
candidates: the law first, then the fixed shapes) is predicted; the search then climbs
from the best of them: it takes the moves in a seeded random order, one move kind after
the other in turn, and moves to the first neighbour predicted better by more than
:data:`MIN_GAIN`; when no neighbour is, it restarts from the best start not yet climbed
from.  A fluid prediction costs 3 ms to 2 s (``docs/simulate-benchmark.md``), so the
search affords tens of them: first improvement moves as soon as one neighbour is better,
where best improvement would predict the whole neighbourhood (over a hundred points for
20 jobs on 7 lanes) before one step; annealing needs many more evaluations to pay off its
random walk; and coordinate descent covers the weights only, not the groupings.

**Evaluations are cached by the tables a setup programs**
(:meth:`ibqos.plan.planner.Tables.substance`): two points that program the same tables
(packets 2:4 and 1:2, a grouping reached twice) are predicted once.

**The budget.**  The start points are always predicted (the tuner needs their ranking);
the search then stops when the next evaluation would end past ``budget_s`` seconds of
wall time (its cost taken as the mean so far), after ``evaluations`` predictions beyond
the starts, or when every start has been climbed to a local optimum; it returns the best
found.  Without a time limit the search is deterministic (the simulator's closed loop).

**The score** is :func:`ibqos.sim.predict.scores` against each job's time alone: ``S``,
the node-weighted mean slowdown (lower is better).

Units: seconds; scores are ratios.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce

from ibqos.classify.prior import Priors
from ibqos.errors import SimError
from ibqos.jobs.model import Job
from ibqos.plan.planner import Plan, Tables, setup_tables
from ibqos.plan.report import Decision
from ibqos.plan.setups import Setup
from ibqos.plan.tables import lane_pool, sl_intensities
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
from ibqos.sim.workload import SimJob, prepare

__all__ = [
    "FOUND",
    "LADDER",
    "MIN_GAIN",
    "Budget",
    "Evaluated",
    "Evaluator",
    "SearchResult",
    "Space",
    "evaluator_for",
    "rank_pool",
    "search",
]

log = logging.getLogger(__name__)

#: packets per round a lane's weight moves along, one rung at a time (about x1.5)
LADDER = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
#: least relative gain in score for a move to be taken (below it the fluid model's own
#: discreteness, and a trial on the fabric could never tell)
MIN_GAIN = 0.002
#: most found setups handed to the tuner (``found-1`` ...)
FOUND = 3

#: a point: (SLs of a lane, its packets per round) per lane, in canonical order
Point = tuple[tuple[tuple[int, ...], int], ...]


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
    """

    def __init__(
        self,
        net: Network,
        jobs: Sequence[SimJob],
        plan: Plan,
        steady: Steady | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not jobs:
            raise SimError("search: no job to predict")
        self.net, self.jobs, self.plan = net, list(jobs), plan
        self.steady = Steady() if steady is None else steady
        self.clock = clock
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
        # the objective (tuning.objective) is scores()'s to pass on to the tuner's score
        score = scores([times], self.nodes, alone=self.alone)[0]
        got = Evaluated(setup, arb, times, score)
        self._cache[key] = got
        self.evaluations += 1
        self.seconds += self.clock() - start
        return got


def _renamed(got: Evaluated, setup: Setup) -> Evaluated:
    arb = Arbitration(
        got.arbitration.job_sl,
        got.arbitration.sl_to_vl,
        got.arbitration.vlarb_low,
        got.arbitration.vlarb_high,
        got.arbitration.high_limit,
        got.arbitration.mtu,
        setup.name,
    )
    return Evaluated(setup, arb, got.times, got.score)


@dataclass(frozen=True)
class Space:
    """The setup space of a plan's active job SLs.

    Attributes:
        intensity: SL -> its jobs' summed intensity (orders the lanes, most intense first).
        lanes: most job lanes.
    """

    intensity: Mapping[int, float]
    lanes: int

    @classmethod
    def of(cls, plan: Plan) -> Space:
        """The space of *plan*'s job SLs and lanes."""
        intensity = sl_intensities(plan.job_sl, plan.job_intensity, plan.cfg)
        return cls(intensity, len(lane_pool(plan.cfg)[1]))

    def point(self, groups: Sequence[Sequence[int]], packets: Sequence[int]) -> Point:
        """The canonical point: lanes by their most intense SL, then SL; packets over
        their greatest common divisor."""
        g = reduce(math.gcd, packets, 0) or 1
        lanes = [(tuple(sorted(sls)), p // g) for sls, p in zip(groups, packets, strict=True)]
        lanes.sort(key=lambda lane: (-max(self.intensity[sl] for sl in lane[0]), lane[0]))
        return tuple(lanes)

    def setup(self, point: Point, name: str) -> Setup:
        """The setup of *point*: its lanes as groups, its packets as targets."""
        return Setup(name, tuple(sls for sls, _ in point), tuple(float(p) for _, p in point))

    def moves(self, point: Point, rng: random.Random) -> Iterator[Point]:
        """The neighbours of *point* (module docstring), each kind shuffled by *rng*, the
        kinds taken in turn."""
        kinds = [self._weights(point), self._swaps(point), self._regroups(point)]
        for kind in kinds:
            rng.shuffle(kind)
        while any(kinds):
            for kind in kinds:
                if kind:
                    yield kind.pop()

    def _weights(self, point: Point) -> list[Point]:
        if len(point) < 2:
            return []  # one lane: its weight is nothing relative to another's
        out = []
        groups = [sls for sls, _ in point]
        for i, (_, p) in enumerate(point):
            for q in (_rung(p, +1), _rung(p, -1)):
                if q != p:
                    packets = [pp for _, pp in point]
                    packets[i] = q
                    out.append(self.point(groups, packets))
        return out

    def _swaps(self, point: Point) -> list[Point]:
        out = []
        groups = [sls for sls, _ in point]
        for i in range(len(point)):
            for j in range(i + 1, len(point)):
                if point[i][1] != point[j][1]:
                    packets = [p for _, p in point]
                    packets[i], packets[j] = packets[j], packets[i]
                    out.append(self.point(groups, packets))
        return out

    def _regroups(self, point: Point) -> list[Point]:
        out = []
        n = len(point)
        for i, (sls, p) in enumerate(point):
            for sl in sls:
                rest = tuple(s for s in sls if s != sl)
                for j in range(n):  # to another lane (the lane emptied goes)
                    if j == i:
                        continue
                    lanes = [(list(s), q) for s, q in point]
                    lanes[j][0].append(sl)
                    lanes[i] = (list(rest), p)
                    kept = [(s, q) for s, q in lanes if s]
                    out.append(self.point([s for s, _ in kept], [q for _, q in kept]))
                if not rest or n >= self.lanes:
                    continue
                # to a lane of its own: as heavy as its last, a rung heavier, or the
                # others twice as heavy (a split alone at equal weight may not gain)
                for mine, others in ((p, 1), (_rung(p, +1), 1), (p, 2)):
                    lanes = [(list(s), q * others) for s, q in point]
                    lanes[i] = (list(rest), p * others)
                    lanes.append(([sl], mine))
                    out.append(self.point([s for s, _ in lanes], [q for _, q in lanes]))
        for i in range(n):
            for j in range(i + 1, n):
                two: list[tuple[tuple[int, ...], int]] = [
                    lane for k, lane in enumerate(point) if k not in (i, j)
                ]
                two.append((point[i][0] + point[j][0], max(point[i][1], point[j][1])))
                out.append(self.point([s for s, _ in two], [q for _, q in two]))
        return list(dict.fromkeys(out))  # two ways to one point: once


def _rung(packets: int, step: int) -> int:
    """The next value of :data:`LADDER` above (*step* +1) or below (-1) *packets*."""
    if step > 0:
        return next((v for v in LADDER if v > packets), packets)
    return next((v for v in reversed(LADDER) if v < packets), packets)


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
                tables = ev.tables(setup)
                if not _encodes(tables, nb):
                    seen[nb] = math.inf
                    continue
                got = ev.evaluate(setup, tables)
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
) -> tuple[Evaluator | None, tuple[str, ...]]:
    """The evaluator of *plan*'s setups for the running *jobs* as the agent knows them,
    and how they were estimated: estimated from *decision*
    (:func:`~ibqos.sim.estimate.estimate_jobs`: never their declared rates; phases from
    *phases*, else *assumed*), calibrated to their means under the plan's tables
    (:func:`~ibqos.sim.predict.calibrate`); *clock* times its runs.  None when the plan
    writes no tables or no job was measured."""
    if plan.tables is None:
        return None, ()
    est = estimate_jobs(net, jobs, decision, priors, phases, assumed)
    if not est.jobs:
        return None, ("predicted: no job measured",)
    # what the measurement was made under: the plan's own tables
    in_force = from_tables(plan.tables, plan.job_sl, plan.cfg.mtu, plan.tables.setup)
    calibrated = calibrate(net, est.jobs, injected(decision), in_force)
    return Evaluator(net, prepare(net, calibrated), plan, steady, clock), est.notes


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
) -> Predicted:
    """Tuning's prediction of *pool* (:data:`ibqos.plan.tuning.Predictor`), and the
    search's setups beside it: the jobs as :func:`evaluator_for` makes them, each setup's
    tables as the planner would program them (:func:`ibqos.plan.planner.setup_tables`)
    predicted in the steady state, the pool first, then the search from it
    (:func:`search`, within *budget*, counted from this call; None: the pool alone).
    Ranked by score (S), ties in the pool's order; the found setups (``found-1`` ...)
    come in :attr:`Predicted.found` and in the ranking.
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
