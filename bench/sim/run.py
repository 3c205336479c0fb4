"""The policies on one mix in the fluid model, shared by the evaluation and the validation.

Every policy of :mod:`ibqos.sim.policies` (:data:`EVAL_POLICIES`) runs on the mix, then
ibqos's variants (:data:`VARIANTS`, :data:`REVERSED`), the picks of ibqos tuning by
observation (:data:`TUNED`, :data:`BEST_RATIO`), and ``optimal``, the exhaustive search of
:func:`ibqos.sim.policies.optimum` (:func:`run_fluid`; with ``full``, every setup run to
its end so that the spread of the whole search space can be reported too).

**The measure is S**, the node-weighted mean slowdown
(:attr:`ibqos.sim.evaluate.Outcome.slowdown`).  A policy's **gain** is the share of the
best fixed policy's excess slowdown ``S - 1`` it removes (the best of one-vl, equal and
bandwidth by S: :attr:`Totals.best_fixed`), its **gap** the optimum's gain less its own,
in points of that excess, and its **share of the optimum** its gain over the optimum's.
Total contention is reported beside them.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

from bench.sim.mixes import Mix, network
from ibqos.config.lanes import LaneConfig
from ibqos.config.tuning import TuningConfig
from ibqos.sim import policies, senders
from ibqos.sim.closedloop import (
    LoopResult,
    closed_loop,
    default_iterations,
    default_sweep_s,
    fluid_predictor,
    fluid_refiner,
)
from ibqos.sim.estimate import Phases
from ibqos.sim.evaluate import Outcome, RunSettings, alone, evaluate, gain
from ibqos.sim.network import Network
from ibqos.sim.predict import Steady
from ibqos.sim.qos import Arbitration
from ibqos.sim.workload import SimJob, prepare

EVAL_POLICIES = ("one-vl", "equal", "bandwidth", "ibqos-fixed")
MAIN = (*EVAL_POLICIES, "optimal")
#: the fixed policies ibqos is held against: the gains are over the best of them by S
FIXED_POLICIES = ("one-vl", "equal", "bandwidth")
#: ibqos with other weight laws (the plan's ``lanes`` options), to see what would close gaps
VARIANTS: dict[str, Callable[[LaneConfig], LaneConfig]] = {
    "ibqos ratio 1.5": lambda lanes: replace(lanes, weight_ratio=1.5),
    "ibqos linear": lambda lanes: replace(lanes, weight_law="linear"),
    "ibqos equal": lambda lanes: replace(lanes, weight_law="equal"),
    "ibqos ratio 4": lambda lanes: replace(lanes, weight_ratio=4.0),
}
#: ibqos's lanes with their weights reversed, the most intense lane's the largest: ratio 1/2,
#: against the method (DESIGN section 1), which ibqos's configuration does not allow
REVERSED = "ibqos ratio 1/2"
#: ibqos tuning its weight ratio by observation (DESIGN section 1; docs/simulate-evaluation.md,
#: "What would fix it" 4): each of these setups tried on the fabric (here: in the model at
#: hand), the one the jobs progress best under kept.  ibqos's own law comes first, so it is
#: kept unless another does better.  The agent does not tune: this measures what it would gain.
TUNE_CANDIDATES = ("ibqos-fixed", "ibqos equal", "ibqos ratio 4", REVERSED)
TUNED = "ibqos tuned"
#: the candidate of least S: what tuning would keep if it knew each job's time alone
BEST_RATIO = "ibqos best ratio"
#: the variants the reports show
SHOWN = (*VARIANTS, REVERSED, TUNED, BEST_RATIO)
#: ibqos's gap to the optimum the reports hold it to: points of the best fixed policy's
#: excess slowdown
GAP_TARGET = 0.05
#: round-off below this is no contention (seconds)
CLEAN_S = 1e-9
#: an excess slowdown (S - 1) below this is none (round-off)
EXCESS_EPS = 1e-9
#: the least gain of the optimum over the best fixed policy that a share of it is taken of
SHARE_MIN_GAIN = 0.01


def clean(total_s: float) -> float:
    """A total contention with round-off (under :data:`CLEAN_S`) as none."""
    return 0.0 if abs(total_s) < CLEAN_S else total_s


class Totals:
    """A mix's outcome under each policy (``outcomes``): S, the gains over the best fixed
    policy, the gaps to the optimum (module docstring), and the total contention beside;
    ``gap()`` without a policy is :attr:`GAP_POLICY`'s."""

    outcomes: dict[str, Outcome]
    GAP_POLICY: ClassVar[str] = "ibqos-fixed"

    def total(self, policy: str) -> float:
        """Total contention (s), reported beside S."""
        return clean(self.outcomes[policy].total_contention_s)

    def s(self, policy: str) -> float:
        """S, the node-weighted mean slowdown."""
        return self.outcomes[policy].slowdown

    @property
    def contended(self) -> bool:
        """Policies make a difference: one-vl slows some job."""
        return self.s("one-vl") - 1.0 > EXCESS_EPS

    @property
    def best_fixed(self) -> str:
        """The fixed policy (:data:`FIXED_POLICIES`) of least S; the first of equals."""
        return min(FIXED_POLICIES, key=lambda p: (self.s(p), FIXED_POLICIES.index(p)))

    def gain(self, policy: str) -> float:
        """The share of the best fixed policy's excess slowdown *policy* removes (0 when
        it has none; below 0: it adds to it)."""
        return gain(self.s(policy), self.s(self.best_fixed))

    def gap(self, policy: str | None = None) -> float:
        """The optimum's gain less the policy's, in points of the best fixed policy's
        excess (0: as good as the optimum)."""
        return self.gain("optimal") - self.gain(policy or self.GAP_POLICY)

    def share(self, policy: str | None = None) -> float | None:
        """The policy's gain over the optimum's (1.0: all of it); None when the optimum
        gains less than :data:`SHARE_MIN_GAIN` over the best fixed policy (a share of
        nearly nothing says nothing)."""
        best = self.gain("optimal")
        return self.gain(policy or self.GAP_POLICY) / best if best >= SHARE_MIN_GAIN else None


@dataclass
class MixResult(Totals):
    """A mix under every policy (one model)."""

    mix: Mix
    outcomes: dict[str, Outcome]
    searched: list[float] = field(default_factory=list)  # S of every searched setup (full)
    wall_s: float = 0.0
    optimum_bound: bool = False  # the optimum is a search's best known, a bound


def reversed_weights(arb: Arbitration, lanes: LaneConfig) -> Arbitration:
    """*arb*'s job lanes with their packets per round reversed: a lane of k packets gets
    ``most / k`` (rounded as :func:`ibqos.sim.policies.grouped` does), where *most* is the
    largest lane's.  Of a geometric law's weights, the same law with the inverse ratio."""
    packets: dict[int, int] = {}
    for vl, weight in arb.vlarb_low:
        packets[vl] = packets.get(vl, 0) + arb.packets(weight)
    vls = sorted({arb.vl_of(jid) for jid in arb.job_sl})
    groups = [[jid for jid in arb.job_sl if arb.vl_of(jid) == vl] for vl in vls]
    most = max(packets[vl] for vl in vls)
    return policies.grouped(groups, [most / packets[vl] for vl in vls], lanes, REVERSED)


def tuned(outcomes: dict[str, Outcome], by_s: bool = False) -> Outcome:
    """The candidate of :data:`TUNE_CANDIDATES` an agent tuning by observation would keep.

    What an agent sees of a job is its injected bytes per second (its hosts' own counters),
    so it sees slowdowns against the best it saw, not against alone: a job's time under a
    candidate over its least time under any of them.  The pick has the least node-weighted
    mean of those slowdowns, the tuner's score (:func:`ibqos.plan.tuner.score`), which
    estimates S with the best seen standing in for alone; ties keep the earlier candidate.
    *by_s*: the least S itself (:data:`BEST_RATIO`).
    """
    tried = [outcomes[name] for name in TUNE_CANDIDATES]
    if by_s:
        return replace(min(tried, key=lambda o: o.slowdown), policy=BEST_RATIO)
    best_s = [min(ts) for ts in zip(*([j.t_sharing_s for j in o.jobs] for o in tried), strict=True)]

    def slowdowns(o: Outcome) -> float:
        return math.fsum(j.nodes * j.t_sharing_s / b for j, b in zip(o.jobs, best_s, strict=True))

    return replace(min(tried, key=slowdowns), policy=TUNED)


def picks(outcomes: Iterable[Outcome]) -> str:
    """How often :func:`tuned` kept each candidate, over *outcomes* (its picks)."""
    names = [o.setup.name for o in outcomes]
    return ", ".join(f"{c} {names.count(c)}" for c in TUNE_CANDIDATES)


def search(
    net: Network,
    jobs: Sequence[SimJob],
    iterations: int,
    lanes: LaneConfig,
    t_alone: dict[str, float],
    others: Sequence[Arbitration],
    buffer_packets: int,
    model: str = "fluid",
) -> tuple[Outcome, list[float]]:
    """The exhaustive search of :func:`ibqos.sim.policies.optimal` (same candidates, the
    least S kept, the first of equals), every candidate run to its end and its S kept, in
    *model* with its buffers (*buffer_packets*: MTU packets per lane per input); *others*:
    the other policies' setups, already built."""
    tried = policies.grid(jobs, lanes) + [replace(arb, name="optimal") for arb in others]
    return policies.best_of(
        model, net, jobs, tried, iterations, t_alone, buffer_packets=buffer_packets
    )


def run_fluid(
    mix: Mix,
    iterations: int,
    fluid_buffers: int | None,
    with_optimal: bool = True,
    full: bool = False,
    workers: int = 1,
    limit_s: float | None = None,
) -> MixResult:
    """The mix under every policy in the fluid model, with *fluid_buffers* packets of
    switch buffer per lane per input (in every run, the policies' own runs too; None:
    ``ibqos simulate``'s default, :func:`ibqos.sim.fluid.auto_buffers`).  The optimum:
    :func:`ibqos.sim.policies.optimum` in *workers* processes, stopped after *limit_s*
    wall seconds with the best known (a bound); *full*: every setup run to its end, their
    S kept in :attr:`MixResult.searched`."""
    start = time.perf_counter()
    net = network(mix.xgft)
    jobs = prepare(net, mix.jobs)
    bp = senders.auto_buffers(jobs, given=fluid_buffers)
    base = policies.one_vl(jobs, mix.lanes)
    t_alone = alone("fluid", net, jobs, base, iterations, buffer_packets=bp)
    setups = {
        p: policies.build(p, net, jobs, iterations, mix.lanes, buffer_packets=bp)
        for p in EVAL_POLICIES
    }
    outcomes = {
        p: evaluate("fluid", net, jobs, arb, iterations, t_alone, buffer_packets=bp)
        for p, arb in setups.items()
    }
    for name, change in VARIANTS.items():
        arb = policies.build(
            "ibqos-fixed", net, jobs, iterations, change(mix.lanes), buffer_packets=bp
        )
        setups[name] = replace(arb, name=name)
        outcomes[name] = evaluate(
            "fluid", net, jobs, setups[name], iterations, t_alone, buffer_packets=bp
        )
    setups[REVERSED] = reversed_weights(setups["ibqos-fixed"], mix.lanes)
    outcomes[REVERSED] = evaluate(
        "fluid", net, jobs, setups[REVERSED], iterations, t_alone, buffer_packets=bp
    )
    outcomes[TUNED] = tuned(outcomes)
    outcomes[BEST_RATIO] = tuned(outcomes, by_s=True)
    result = MixResult(mix, outcomes)
    if with_optimal and full:
        others = [setups[p] for p in EVAL_POLICIES]
        best, values = search(net, jobs, iterations, mix.lanes, t_alone, others, bp)
        outcomes["optimal"] = best
        result.searched = values
    elif with_optimal:
        fluid = RunSettings("fluid", net, jobs, iterations, buffer_packets=bp)
        found = policies.optimum(fluid, mix.lanes, workers=workers, limit_s=limit_s)
        outcomes["optimal"] = replace(found.outcome, bound=not found.complete)
        result.optimum_bound = not found.complete
    result.wall_s = time.perf_counter() - start
    return result


def add_fluid_buffers_option(parser: argparse.ArgumentParser) -> None:
    """The ``--fluid-buffers`` option both programs take (check it with
    :func:`check_fluid_buffers`)."""
    parser.add_argument(
        "--fluid-buffers",
        type=int,
        help="the fluid model's switch buffers per lane per input, in packets, for every"
        f" run (default: as `ibqos simulate`, {senders.AUTO_BUFFER_PACKETS} with senders"
        " per host, so for every mix here; 0: none, see docs/simulate-validation.md)",
    )


def check_fluid_buffers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with a usage error when ``--fluid-buffers`` is negative."""
    if args.fluid_buffers is not None and args.fluid_buffers < 0:
        parser.error(f"--fluid-buffers: expected 0 or more, got {args.fluid_buffers}")


# -- the closed loop: ibqos tuning while the mix runs ------------------------------------

#: the closed-loop evaluation's policies: the fixed ones, ibqos's closed loop with and
#: without the prediction, and the best fixed setup found (:func:`run_closed`)
LOOP = "ibqos"
LOOP_UNRANKED = "ibqos no-predict"
CLOSED_MAIN = ("one-vl", "equal", "bandwidth", "ibqos-fixed", LOOP, LOOP_UNRANKED, "optimal")


@dataclass
class ClosedResult(Totals):
    """A mix under the fixed policies and ibqos's closed loop, at the loop's N."""

    GAP_POLICY: ClassVar[str] = LOOP

    mix: Mix
    iterations: int
    sweep_s: float
    outcomes: dict[str, Outcome]
    loops: dict[str, LoopResult]
    searched: int = 0  # setups of the N = 10 search
    wall_s: float = 0.0


def run_closed(
    mix: Mix,
    fluid_buffers: int | None,
    top: int,
    short: int = 10,
    tuning: TuningConfig | None = None,
) -> ClosedResult:
    """The mix at the N ``ibqos simulate`` takes with ``--policy ibqos``: the fixed
    policies, ibqos's closed loop (with the fluid model's prediction, and without), and
    ``optimal``: the best of the fixed policies and of the *top* setups of the exhaustive
    search run at *short* iterations (the search at N would take hours), each re-run at N.
    *tuning*: the loop's tuning section (None: its defaults).
    """
    start = time.perf_counter()
    net = network(mix.xgft)
    jobs = prepare(net, mix.jobs)
    bp = senders.auto_buffers(jobs, given=fluid_buffers)
    base = policies.one_vl(jobs, mix.lanes)
    # the search at `short` iterations ranks the grid
    short_runs = RunSettings("fluid", net, jobs, short, buffer_packets=bp)
    short_alone = short_runs.alone(base)
    grid = policies.grid(jobs, mix.lanes)
    values = [short_runs.evaluate(arb, short_alone).slowdown for arb in grid]
    best = sorted(range(len(grid)), key=lambda k: (values[k], k))[:top]
    tuning = TuningConfig() if tuning is None else tuning
    sweep = default_sweep_s(jobs)
    n = default_iterations(jobs, sweep, tuning)
    runs = RunSettings("fluid", net, jobs, n, buffer_packets=bp)
    t_alone = runs.alone(base)
    outcomes: dict[str, Outcome] = {}
    base_run = runs.run(base)
    for p in EVAL_POLICIES:
        arb = policies.setup_of(p, runs, mix.lanes, base_run)
        outcomes[p] = runs.evaluate(arb, t_alone, base_run if p == "one-vl" else None)
    phases = {j.id: Phases(j.job.duty, j.job.period_s) for j in jobs}
    predictor = fluid_predictor(net, mix.jobs, Steady(buffer_packets=bp), phases)
    refiner = fluid_refiner(net, mix.jobs, Steady(buffer_packets=bp), phases)
    loops = {
        LOOP: closed_loop(runs, mix.lanes, tuning, sweep, predictor, refiner),
        LOOP_UNRANKED: closed_loop(runs, mix.lanes, tuning, sweep, None),
    }
    for name, loop in loops.items():
        out = runs.evaluate(loop.final, t_alone, loop.run)
        outcomes[name] = replace(out, policy=name)
    tried = [outcomes[p] for p in EVAL_POLICIES]
    tried += [runs.evaluate(replace(grid[k], name="optimal"), t_alone) for k in best]
    outcomes["optimal"] = replace(min(tried, key=lambda o: o.slowdown), policy="optimal")
    return ClosedResult(mix, n, sweep, outcomes, loops, len(grid), time.perf_counter() - start)
