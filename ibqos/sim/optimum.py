"""The exhaustive optimum: every setup of a list run in the fluid model, the best kept.

``--policy optimal`` (:func:`ibqos.sim.policies.optimal`) hands this module its grid of
groupings and weights plus the other policies' setups; :func:`search` runs them and keeps
the one of least measure (S, or the worst job's slowdown: :data:`OBJECTIVES`).  What makes
it fast enough for 4-job mixes of 64 hosts:

- **Symmetry.**  Two setups that put the same groups of jobs on lanes of the same weights
  (MTU packets per round, and VLArb entries per lane) run alike whichever VL carries which
  group: the fluid model treats lanes alike.  Only the first of such setups is run
  (:func:`setup_key`).
- **A bound.**  A run stops as soon as it cannot beat the best setup so far: at simulated
  time ``t`` a job that has finished ``k < N`` iterations, the last at ``end_k``, ends
  its N-th no earlier than ``end_k + max(t - end_k, i_min) + (N - k - 1) x i_min``,
  where ``i_min = compute_s + comm_s`` is an iteration at its declared rate: no sender
  goes faster.  Those lower bounds give one of the measure, and the run ends once it
  exceeds the best so far.  The bound holds whatever the setup does (a job may iterate
  faster beside others than alone in this model, so its iterations alone are no bound).
  The other policies' setups go first, so a good best-so-far is there early.
- **Processes.**  With ``workers > 1`` the setups run in that many forked processes; the
  best measure so far is shared between them, so a run is cut by what any process found.

A search may be given a limit (wall seconds, setups run).  When it stops there, its answer
is the best setup *known*: an upper bound of the optimum's measure, not the optimum, and
:attr:`Optimum.complete` says so (the reports print it).

Units: seconds; the measure as :meth:`ibqos.sim.evaluate.Outcome.measure`.
"""

from __future__ import annotations

import math
import multiprocessing
import time
from collections.abc import Hashable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized

from ibqos.errors import SimError
from ibqos.sim.evaluate import OBJECTIVES, Outcome, RunSettings, objective_of
from ibqos.sim.fluid import FluidSim
from ibqos.sim.qos import Arbitration

__all__ = ["Optimum", "search", "setup_key"]

#: checks of the bound per iteration of the shortest-period job
CHECKS_PER_PERIOD = 1.0


@dataclass(frozen=True)
class Optimum:
    """What a search found.

    Attributes:
        outcome: the best setup's outcome in the fluid model (N of the settings).
        values: the measure of each setup run to its end, by its index in the list
            given (a setup cut by the bound, a duplicate, or one not reached: absent).
        setups: setups in the list given.
        distinct: of those, the ones left after the symmetry (the others are not run).
        run: setups run to their end.
        cut: setups whose run the bound ended early.
        complete: every distinct setup was run or cut: *outcome* is the optimum of the
            list.  False: a limit stopped the search, *outcome* is the best known, an
            upper bound of the optimum's measure.
        wall_s: seconds the search took.
        objective: what judged the setups (:data:`~ibqos.sim.evaluate.OBJECTIVES`).
    """

    outcome: Outcome
    values: Mapping[int, float]
    setups: int
    distinct: int
    run: int
    cut: int
    complete: bool
    wall_s: float
    objective: str = "node-time"

    def summary(self) -> str:
        """One line: how far the search went, and whether its answer is the optimum."""
        what = "the optimum of" if self.complete else "a bound: the best known of"
        stop = "" if self.complete else f"; stopped by its limit after {self.run + self.cut}"
        return (
            f"optimal: {what} {self.distinct} distinct setups ({self.setups} before the"
            f" symmetry), {self.run} run, {self.cut} cut by the bound{stop},"
            f" {self.wall_s:.1f} s; {self.objective} {self.outcome.measure(self.objective):.4f}"
        )


def setup_key(arb: Arbitration, job_ids: Sequence[str]) -> Hashable:
    """What the fluid model sees of *arb* for jobs *job_ids*: per lane in use, its jobs,
    priority, MTU packets per round and VLArb entries, whatever its VL number; and the
    MTU and VLHighLimit."""
    low, high = arb.low_packets(), arb.high_packets()
    lanes: dict[int, set[str]] = {}
    for jid in job_ids:
        lanes.setdefault(arb.vl_of(jid), set()).add(jid)

    def lane(vl: int, jobs: set[str]) -> tuple[frozenset[str], bool, int, int]:
        top = vl in high
        table = arb.vlarb_high if top else arb.vlarb_low
        entries = sum(1 for v, w in table if v == vl and arb.packets(w) > 0)
        return frozenset(jobs), top, (high if top else low).get(vl, 0), entries

    return (
        frozenset(lane(vl, jobs) for vl, jobs in lanes.items()),
        arb.mtu,
        arb.high_limit if high else 0,
    )


def search(
    fluid: RunSettings,
    setups: Sequence[Arbitration],
    t_alone: Mapping[str, float],
    objective: str = "node-time",
    workers: int = 1,
    limit_s: float | None = None,
    max_runs: int | None = None,
) -> Optimum:
    """Run *setups* (the most promising first) in the fluid model of *fluid* and keep the
    one of least *objective* (the first of equals); *t_alone*: each job's time alone.
    *workers*: processes (1: this one); *limit_s*, *max_runs*: stop after so many wall
    seconds or setups started, with the best known (None: no limit).

    Raises:
        SimError: no setup, not the fluid model, an unknown objective, or a limit below 1.
    """
    if objective not in OBJECTIVES:
        raise SimError(f"objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
    if fluid.model != "fluid":
        raise SimError(f"optimal: searches with the fluid model, not {fluid.model}")
    if workers < 1 or (max_runs is not None and max_runs < 1):
        raise SimError("optimal: expected at least one worker and one setup to run")
    started = time.monotonic()
    ids = [j.id for j in fluid.jobs]
    order: list[int] = []
    seen: set[Hashable] = set()
    for k, arb in enumerate(setups):
        key = setup_key(arb, ids)
        if key not in seen:
            seen.add(key)
            order.append(k)
    if not order:
        raise SimError("optimal: no setup to try")
    deadline = math.inf if limit_s is None else started + limit_s
    budget = len(order) if max_runs is None else min(max_runs, len(order))
    run = _Runner(fluid, t_alone, objective)
    values: dict[int, float] = {}
    cut = 0
    best = math.inf
    if workers == 1:
        for k in order[:budget]:
            if time.monotonic() >= deadline:
                break
            got = run(setups[k], best)
            if got is None:
                cut += 1
                continue
            values[k] = got
            best = min(best, got)
    else:
        context = multiprocessing.get_context("fork")  # the settings are inherited, not sent
        # the best measure so far, seen by every worker at each check of its bound
        run.shared = context.Value("d", math.inf)
        with ProcessPoolExecutor(workers, context, _start, (run,)) as pool:
            busy: dict[Future[float | None], int] = {}
            todo = iter(order[:budget])
            while True:
                while len(busy) < 2 * workers and time.monotonic() < deadline:
                    k = next(todo, -1)
                    if k < 0:
                        break
                    busy[pool.submit(_run_one, setups[k], best)] = k
                if not busy:
                    break
                done, _ = wait(busy, return_when=FIRST_COMPLETED)
                for f in done:
                    k = busy.pop(f)
                    got = f.result()
                    if got is None:
                        cut += 1
                    else:
                        values[k] = got
                        best = min(best, got)
        run.shared = None
    if not values:  # a limit so short that nothing finished: know the first setup at least
        first = run(setups[order[0]], math.inf)
        values[order[0]] = math.inf if first is None else first
    pick = min(values, key=lambda k: (values[k], k))
    outcome = fluid.evaluate(setups[pick], t_alone)
    return Optimum(
        outcome,
        values,
        len(setups),
        len(order),
        len(values),
        cut,
        len(values) + cut >= len(order),
        time.monotonic() - started,
        objective,
    )


class _Runner:
    """One setup's run, ended early when its measure cannot beat a given one."""

    def __init__(self, fluid: RunSettings, t_alone: Mapping[str, float], objective: str) -> None:
        self.fluid = fluid
        self.shared: Synchronized[float] | None = None  # the best so far, across processes
        self.t_alone = dict(t_alone)
        self.objective = objective
        jobs = fluid.jobs
        # an iteration at the declared rate (s): no sender goes faster
        self.floor = [j.compute_s + j.comm_s for j in jobs]
        self.nodes = [len(j.job.nodes) for j in jobs]
        self.alone = [self.t_alone[j.id] for j in jobs]
        periods = [f for f in self.floor if f > 0]
        self.chunk_s = min(periods, default=math.inf) / CHECKS_PER_PERIOD

    def __call__(self, arb: Arbitration, best: float) -> float | None:
        """The measure of *arb*, or None when its run was ended for not beating *best*."""
        n = self.fluid.iterations
        # the senders and buffers RunSettings.run gives the mix
        sim = FluidSim(self.fluid.net, self.fluid.jobs, arb, self.fluid.per, self.fluid.buffers)
        checks = math.isfinite(self.chunk_s) and (math.isfinite(best) or self.shared is not None)
        while (sim.iterations < n).any():
            if not checks:
                sim.run(n)
                break
            sim.advance(self.chunk_s)
            if self.shared is not None:  # another process may have found better since
                best = min(best, self.shared.value)
            if math.isfinite(best) and self._bound(sim, n) > best:
                return None
        _ = sim.sender_alpha  # as FluidSim.run leaves it: bytes still draining go at it
        got = self.fluid.evaluate(arb, self.t_alone, sim.result(n)).measure(self.objective)
        if self.shared is not None:
            with self.shared.get_lock():
                self.shared.value = min(self.shared.value, got)
        return got

    def _bound(self, sim: FluidSim, n: int) -> float:
        """A lower bound of the measure of the run *sim* is part way through."""
        slow = []
        for i, ends in enumerate(sim.ends):
            k = len(ends)
            if k >= n:
                t = ends[n - 1]
            else:
                # the iteration under way has lasted so far, and takes the floor at least
                start = ends[-1] if ends else 0.0
                t = start + max(sim.time - start, self.floor[i]) + (n - k - 1) * self.floor[i]
            slow.append(t / self.alone[i] if self.alone[i] > 0 else math.inf)
        weight = math.fsum(self.nodes)
        mean = math.fsum(w * s for w, s in zip(self.nodes, slow, strict=True)) / weight
        return objective_of(self.objective, mean, max(slow))


_RUNNER: _Runner | None = None


def _start(run: _Runner) -> None:
    global _RUNNER
    _RUNNER = run


def _run_one(arb: Arbitration, best: float) -> float | None:
    assert _RUNNER is not None
    return _RUNNER(arb, best)
