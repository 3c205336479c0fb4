"""The timed part of :mod:`bench.plan.bench`: what a fabric change costs, and rounds of decision
cycles (first, steady, churn) on one case, each timed whole (the decider and the tuning
driver's part of the agent's cycle), per stage and for the garbage collector's part."""

from __future__ import annotations

import cProfile
import gc
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from bench.plan.inputs import SHAPES, build_fabric, hosts_of
from ibqos.config.classes import Thresholds
from ibqos.config.lanes import LaneConfig
from ibqos.config.tuning import TuningConfig
from ibqos.fabric.model import Fabric
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.jobs.model import Job
from ibqos.plan.decide import Decider
from ibqos.plan.setups import LAW
from ibqos.plan.tuning import TuningDriver
from ibqos.sim.network import dmodk_lfts

INTERVAL_S = 10.0  # decider clock between cycles


@dataclass
class Case:
    """One fabric and workload, with what was measured on it (seconds)."""

    size: str
    n_jobs: int
    ports: int
    hosts: int
    jobs: tuple[Job, ...]
    churn: list[tuple[Job, ...]]
    tables: list[pd.DataFrame]
    first_s: list[float] = field(default_factory=list)
    steady_s: list[float] = field(default_factory=list)
    churn_s: list[float] = field(default_factory=list)
    stages: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    gc_s: dict[str, list[float]] = field(default_factory=dict)
    gc_full: dict[str, int] = field(default_factory=dict)
    classes: Counter[str] = field(default_factory=Counter)
    replans: int = 0
    lfts: dict[int, dict[int, int]] | None = None  # the routes fit's tables, if on

    @property
    def name(self) -> str:
        return f"{self.size}/{self.n_jobs}"

    @property
    def job_hosts(self) -> int:
        return sum(len(j.nodes) for j in self.jobs)

    def stage(self, kind: str, name: str) -> float:
        """Median seconds of one stage over the cycles of *kind*."""
        return statistics.median(self.stages[kind][name])


@dataclass
class FabricTimes:
    """What a fabric change costs (seconds, one value per round)."""

    size: str
    shape: str
    ports: int
    hosts: int
    switches: int
    model_s: list[float] = field(default_factory=list)
    tables_s: list[float] = field(default_factory=list)


def time_fabric(
    size: str, rounds: int, routes: bool = False
) -> tuple[Fabric, FabricTimes, dict[int, dict[int, int]] | None]:
    """Build the fabric model and a decider's tables *rounds* times, each from scratch (as
    after a fabric change); return the last fabric, and with *routes* its D-mod-K tables
    (the decider's tables then include the routes fit's)."""
    topo = build_xgft(parse_xgft(SHAPES[size]))
    fabric = build_fabric(topo)
    lfts = dmodk_lfts(topo) if routes else None
    times = FabricTimes(
        size, SHAPES[size], len(fabric.ports), len(hosts_of(fabric)), len(fabric.levels)
    )
    for _ in range(rounds):
        clock = time.perf_counter
        t = clock()
        fabric = build_fabric(topo)
        times.model_s.append(clock() - t)
        t = clock()
        decider = Decider(fabric, LaneConfig(), Thresholds())
        if lfts is not None:
            decider.set_routes(lfts)
        times.tables_s.append(clock() - t)
    return fabric, times, lfts


class GcClock:
    """Seconds the garbage collector ran, and its full passes, since :meth:`reset`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def reset(self) -> None:
        self.seconds, self.full = 0.0, 0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.full += info["generation"] == 2


GC = GcClock()


def _cycle(
    case: Case,
    decider: Decider,
    tuning: TuningDriver,
    kind: str,
    table: pd.DataFrame,
    jobs: tuple[Job, ...],
    now_s: float,
    profile: cProfile.Profile | None,
) -> None:
    if profile is not None:
        profile.enable()
    GC.reset()
    t = time.perf_counter()
    decider.setup = tuning.wanted
    decision = decider.decide(table, jobs, now_s)
    t_tune = time.perf_counter()
    # the tuning driver's part of the agent's cycle (its prediction runs off the cycle)
    tuning.after_cycle(decision, fresh=True, in_force=LAW, reloaded=False, now_s=now_s)
    elapsed = time.perf_counter() - t
    decider.timings["tune"] = elapsed - (t_tune - t)
    if profile is not None:
        profile.disable()
    case.gc_s.setdefault(kind, []).append(GC.seconds)
    case.gc_full[kind] = case.gc_full.get(kind, 0) + GC.full
    {"first": case.first_s, "steady": case.steady_s, "churn": case.churn_s}[kind].append(elapsed)
    for stage, s in decider.timings.items():
        case.stages.setdefault(kind, {}).setdefault(stage, []).append(s)
    if kind == "steady":
        case.replans += decision.result.replace
        case.classes = Counter(j.cls for j in decision.jobs)


def run_round(
    case: Case,
    fabric: Fabric,
    cycles: int,
    profile: cProfile.Profile | None = None,
    freeze: bool = False,
) -> None:
    """A new decider, its first cycle, *cycles* steady-state cycles, then *cycles* cycles
    with churn (only the steady ones are profiled).

    With *freeze*, everything alive once the decider is built (the fabric, its tables, the
    inputs) is moved out of the garbage collector's sight first (``gc.freeze``), as a
    daemon could do after each fabric change, and let back in at the end.
    """
    decider = Decider(fabric, LaneConfig(), Thresholds())
    if case.lfts is not None:
        decider.set_routes(case.lfts)
    if freeze:
        gc.collect()
        gc.freeze()
    try:
        _cycles(case, decider, cycles, profile)
    finally:
        if freeze:
            gc.unfreeze()


def _cycles(case: Case, decider: Decider, cycles: int, profile: cProfile.Profile | None) -> None:
    # no predictor: the agent's runs in a thread, once per stable mix, off the cycle
    tuning = TuningDriver(TuningConfig(), enforce=True, predictor=None)
    _cycle(case, decider, tuning, "first", case.tables[0], case.jobs, 0.0, None)
    for k in range(1, cycles + 1):
        table = case.tables[k % len(case.tables)]
        _cycle(case, decider, tuning, "steady", table, case.jobs, k * INTERVAL_S, profile)
    for k, jobs in enumerate(case.churn, start=cycles + 1):
        table = case.tables[k % len(case.tables)]
        _cycle(case, decider, tuning, "churn", table, jobs, k * INTERVAL_S, None)
